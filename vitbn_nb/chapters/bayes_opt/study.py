"""Chapter 04: Experiment 2 of article 1: Ax + BoTorch tune lr and batch size of the trio as run, then each trains
with its best; Table 2, Figures 7-8 and Table 3 beside the article. The best values go to ``runs_dir()/hpo/``."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from ... import hpo
from ...engines import training
from ...limits import Deadline
from ...models import AS_RUN_DEPTH
from ...publishing import figures, results
from ...publishing.results import epochs_text
from ...store import records, runs
from ...store.runs import RunConfig
from .. import Plan, panels
from . import article
from .judge import experiment2
from .numbers import MODELS, best_settings, best_trials, comparison, model_label, speedups
from .settings import BayesOptSettings

#: What the outputs drawn from the trials read besides the trials' runs (the repository keeps a copy of it).
OPTIMISATION_STATE = f"the optimisation state ({figures.RECORDS}/{records.STATE_FOLDER}/)"

#: The 30-epoch retrains are timed through article 1's own pipeline (chapter 3 says why).
RETRAIN_PIPELINE = "reference"


def overview(settings: BayesOptSettings) -> pd.DataFrame:
    """What the profile optimises and trains: one row per model."""
    initial = min(settings.trials, hpo.INITIAL_TRIALS)
    return pd.DataFrame(
        [
            {
                "model": model,
                "depth": AS_RUN_DEPTH[model],
                "lr range (log)": "[{:g}, {:g}]".format(*hpo.SEARCH_SPACE[model]["lr"]),
                "batch range": "[{}, {}]".format(*hpo.SEARCH_SPACE[model]["batch_size"]),
                "trials": settings.trials,
                "initial (centre + Sobol)": initial,
                "BoTorch": settings.trials - initial,
                "epochs per trial": settings.trial_epochs,
                "final training (epochs x seeds)": f"{settings.epochs} x {settings.seeds}",
                "train images": panels.images(settings.train_size, 60000),
                "test images": panels.images(settings.test_size, 10000),
            }
            for model in MODELS
        ]
    )


@dataclass(frozen=True)
class BayesOptResult(results.ChapterResult):
    """Chapter 04's optimisation (``trials``: one row per trial) and final trainings (``table``: one row per run
    and epoch), and the settings that produced them."""

    settings: BayesOptSettings
    trials: pd.DataFrame
    table: pd.DataFrame

    @property
    def run_ids(self) -> list[str]:
        return results.run_ids_of([*self.trials["run_id"], *self.table["run_id"]])


def plan(settings: BayesOptSettings) -> Plan:
    """The optimisations (one per model); each model's final runs follow from its best trial."""
    return Plan(
        [],
        optimisations=[hpo.model_study(model, settings) for model in MODELS],
        then=(
            f"each model's best lr and batch size, {settings.epochs} epochs x {settings.seeds} random "
            "seed(s), timed through article 1's pipeline"
        ),
    )


def run(settings: BayesOptSettings, force: bool = False) -> BayesOptResult:
    """Optimise every model, then train each with its best lr and batch size (or read both back from the store)."""
    trials = hpo.optimise_models(settings, force=force)
    trained = training.train_all(final_plan(trials, settings), force=force)
    return BayesOptResult(settings, trials, runs.load_table(trained))


def after_optimisation(
    settings: BayesOptSettings, force: bool = False, deadline: Deadline | None = None
) -> list[RunConfig]:
    """The final runs: each model's best lr and batch size, from the optimisation (run now if it is not stored)."""
    return final_plan(hpo.optimise_models(settings, force=force, deadline=deadline), settings)


def trial_summary(result: BayesOptResult) -> pd.DataFrame:
    """One row per trial: who proposed it, its lr and batch size, its accuracy and the best so far."""
    return result.trials[["model", "trial", "generator", "lr", "batch_size", "accuracy", "best_so_far"]]


def final_runs(result: BayesOptResult) -> pd.DataFrame:
    """One row per final run: its model, lr, batch size, random seed, epochs and final accuracy."""
    last = results.final_epochs(result.table)
    return last[["run_id", "model", "depth", "lr", "batch_size", "seed", "epoch", "test_acc"]].reset_index(drop=True)


def final_plan(trials: pd.DataFrame, settings: BayesOptSettings) -> list[RunConfig]:
    """Each model with its best lr and batch size, the full epoch count, every seed (seed 0 is the trials'), timed
    through article 1's pipeline as the article timed them (the trials ran on the book's engine)."""
    return hpo.best_runs(settings, best_trials(trials), dataset=hpo.MNIST, pipeline=RETRAIN_PIPELINE)


def best_settings_table(result: BayesOptResult):
    """Article 1's Table 2, this run's: best lr, batch size, accuracy per model (saved)."""
    trials, table, settings = result.trials, result.table, result.settings
    caption = (
        f"Best of {settings.trials} Ax trials per model ({epochs_text(settings.trial_epochs)} each; the "
        f"objective is the test accuracy, as in the article), and the accuracy after {settings.epochs} "
        f"epochs with those settings ({figures.interval_label(table)}). Article 1's Table 2 values are not in its "
        "text; only its 30-epoch accuracies are quoted"
    )
    about = dict(reproduces="article1/table2", caption=caption, reads=OPTIMISATION_STATE)
    return figures.save_table(best_settings(trials, table), "article1_table2", result, **about)


def fig8_figure(result: BayesOptResult):
    """Article 1's Figure 8: the four panels of the optimised trio."""
    table, settings = result.table, result.settings
    figures.use_style()

    first = lambda group, column: group[column].iloc[0]
    label = lambda model, group: (
        f"{model_label(model, first(group, 'depth'))}, lr {first(group, 'lr'):.2g}, "
        f"batch {int(first(group, 'batch_size'))}"
    )
    title = (
        f"Article 1 Fig 8 · the optimised models on MNIST, {settings.epochs} epochs, Adam\n"
        "each with its own best lr and batch size; article 1 as run: ViT depth 6 vs ViTBNFFN / ViTBN depth 1"
    )
    fig = figures.four_panel(table, title=title, label=label)
    caption = (
        "The optimised trio: train and test time per epoch, training loss and test accuracy; each model uses "
        "its own best lr and batch size (so time per epoch also reflects the batch size); "
        f"{figures.spread_label(table)}; {results.times_left_out(table)}"
    )
    return figures.save_figure(fig, "article1_fig8", result, reproduces="article1/fig8", caption=caption, runs=table)


def ratios_table(result: BayesOptResult):
    """Article 1's Table 3 (saved), with the article's ratios and the gains they imply."""
    table = result.table
    frame = speedups(table)
    found = "; ".join(f"{r['model']}: r_t {r['r_t']}, r_v {r['r_v']}" for _, r in frame.iterrows())
    caption = (
        "Optimised models, r = T_ViT / T_model of the mean time per epoch, g = 1 − 1/r "
        f"({figures.interval_label(table)}). This run: {found}. The article's g are derived from its quoted r (its "
        "Table 3 is an image)"
    )
    return figures.save_table(
        frame, "article1_table3", result, reproduces="article1/table3", caption=caption, runs=table
    )


def comparison_table(result: BayesOptResult):
    """The article's numbers beside this run's (saved)."""
    trials, table, settings = result.trials, result.table, result.settings
    frame = comparison(trials, table)
    caption = (
        f"Experiment 2: article 1's statements beside this run's numbers under profile {settings.profile}; "
        "each verdict is the book's one rule (the claims table)"
    )
    about = dict(reproduces="article1/fig8", caption=caption, reads=OPTIMISATION_STATE)
    return figures.save_table(frame, "article1_experiment2_vs_article", result, **about)


def claims_table(result):
    """Article 1's Experiment 2 claims (the optimised runs), judged by the book's one rule; saved as ``NN_claims``."""
    return figures.save_claims(result, experiment2(result.table), article.findings())
