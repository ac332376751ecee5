"""Chapter 04: Experiment 2 of article 1: Ax + BoTorch tune lr and batch size of the trio as run, then each trains
with its best; Table 2, Figures 7-8 and Table 3 beside the article. The best values go to ``runs_dir()/hpo/``."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import pandas as pd

from ... import hpo
from ...engines import training
from ...judging import verdicts
from ...limits import Deadline
from ...models import AS_RUN_DEPTH
from ...publishing import figures, results
from ...publishing.results import epochs_text
from ...store import records, runs
from ...store.runs import RunConfig
from .. import Plan, panels
from . import article, rounds
from . import plan as protocol
from .judge import experiment2
from .numbers import MODELS, best_settings, best_trials, comparison, in_configuration, model_label, speedups
from .settings import BayesOptSettings

#: What the outputs drawn from the trials read besides the trials' runs (the repository keeps a copy of it).
OPTIMISATION_STATE = f"the optimisation state ({figures.RECORDS}/{records.STATE_FOLDER}/)"

#: The 30-epoch retrains are timed through article 1's own pipeline (chapter 3 says why).
RETRAIN_PIPELINE = "reference"


def overview(settings: BayesOptSettings) -> pd.DataFrame:
    """What the profile optimises and trains: one row per search (model and depth) of its configurations."""
    initial = min(settings.trials, hpo.INITIAL_TRIALS)
    rows = []
    for model, depth in protocol.studies(settings.configurations):
        which = [w for w in settings.configurations if (model, depth) in protocol.studies((w,))]
        seeds = max(retrain_seeds(settings, w) for w in which)
        rows.append(
            {
                "model": model,
                "depth": depth,
                "configuration": " and ".join(which),
                "lr range (log)": "[{:g}, {:g}]".format(*hpo.SEARCH_SPACE[model]["lr"]),
                "batch range": "[{}, {}]".format(*hpo.SEARCH_SPACE[model]["batch_size"]),
                "searches (seeds)": settings.searches,
                "trials": settings.trials,
                "initial (centre + Sobol)": initial,
                "BoTorch": settings.trials - initial,
                "epochs per trial": settings.trial_epochs,
                "final training (epochs x seeds)": f"{settings.epochs} x {seeds}",
                "timing rounds x images": f"{settings.timing_rounds} x {settings.timing_images:,}",
                "train images": panels.images(settings.train_size, 60000),
                "test images": panels.images(settings.test_size, 10000),
            }
        )
    return pd.DataFrame(rows)


@dataclass(frozen=True)
class BayesOptResult(results.ChapterResult):
    """Chapter 04's optimisation (``trials``: one row per trial) and final trainings (``table``: one row per run
    and epoch), and the settings that produced them."""

    settings: BayesOptSettings
    trials: pd.DataFrame
    table: pd.DataFrame
    #: Table 3's timing rounds (:func:`.rounds.frame`: one row per model and round; empty where none is measured).
    timed: pd.DataFrame = dataclasses.field(default_factory=lambda: rounds.frame(None))

    @property
    def run_ids(self) -> list[str]:
        return results.run_ids_of([*self.trials["run_id"], *self.table["run_id"]])

    def configuration(self, which: str) -> pd.DataFrame:
        """The retrains configuration ``which`` is judged and drawn from: its models at its depths, the seeds its plan
        fixed (every seed held where the profile follows no plan)."""
        seeds = retrain_seeds(self.settings, which) if self.settings.seed_plan else None
        return in_configuration(self.table, which, seeds)


def studies(settings: BayesOptSettings) -> list[hpo.Study]:
    """Every search: each model of each configuration once (ViT d6 serves both), at each of ``searches`` seeds."""
    return [
        hpo.model_study(model, settings, depth=depth, seed=seed)
        for seed in range(settings.searches)
        for model, depth in protocol.studies(settings.configurations)
    ]


def _check_plan(settings: BayesOptSettings) -> None:
    """A paper protocol the committed plan did not fix fails loudly, before anything trains."""
    if not settings.seed_plan:
        return
    fixed = protocol.plan()
    if not fixed["configurations"]:
        raise ValueError(f"seed_plan=True but {protocol.PLAN_FILE.name} holds no plan; fix: commit the plan first")
    missing = [w for w in settings.configurations if protocol.seeds(w) is None]
    if missing:
        raise ValueError(f"configurations {missing} have no seeds in {protocol.PLAN_FILE.name}; the plan fixes none")
    if settings.searches > 1 and not fixed["second_search"]["afforded"]:
        raise ValueError(f"searches={settings.searches} but {protocol.PLAN_FILE.name} affords one search per model")
    for name in ("trials", "trial_epochs", "epochs"):
        if getattr(settings, name) != fixed[name]:
            raise ValueError(
                f"{name}={getattr(settings, name)} differs from the plan's {fixed[name]} ({protocol.PLAN_FILE.name})"
            )
    timing = rounds.plan()
    for name, planned in (("timing_rounds", "rounds"), ("timing_images", "images")):
        if timing is not None and getattr(settings, name) != timing[planned]:
            raise ValueError(
                f"{name}={getattr(settings, name)} differs from the timing plan's {timing[planned]} "
                f"({rounds.PLAN_FILE.name})"
            )


def plan(settings: BayesOptSettings) -> Plan:
    """The searches; each model's final runs follow from its first search's best trial."""
    _check_plan(settings)
    seeds = " / ".join(f"{which} {retrain_seeds(settings, which)}" for which in settings.configurations)
    return Plan(
        [],
        optimisations=studies(settings),
        then=(
            f"each model's best lr and batch size (its first search), {settings.epochs} epochs x {seeds} random "
            f"seed(s) through article 1's pipeline; then Table 3's {settings.timing_rounds} interleaved timing rounds "
            f"of {settings.timing_images:,} training images and a test pass per model"
        ),
    )


def optimise(settings: BayesOptSettings, force: bool = False, deadline: Deadline | None = None) -> pd.DataFrame:
    """Every search (run, resumed or read back), one row per trial; the as-run searches' best values are saved for
    chapter 06 (:func:`hpo.optimise_models`)."""
    tables = [hpo.optimise_models(settings, force=force, deadline=deadline)]
    as_run = {(m, AS_RUN_DEPTH[m], 0) for m in MODELS}
    for study in studies(settings):
        if (study.model, study.depth, study.seed) not in as_run:
            tables.append(hpo.optimise(study, settings.trials, force=force, deadline=deadline, train=settings.train))
    return pd.concat(tables, ignore_index=True)


def run(settings: BayesOptSettings, force: bool = False) -> BayesOptResult:
    """Optimise every model, then train each with its best lr and batch size, then time them in interleaved rounds
    (or read all of it back from the store)."""
    _check_plan(settings)
    trials = optimise(settings, force=force)
    final = final_plan(trials, settings)
    trained = training.train_all(final, force=force, train=settings.train)
    return BayesOptResult(settings, trials, runs.load_table(trained), timing_rounds(settings, final, force=force))


def timing_rounds(settings: BayesOptSettings, final: list[RunConfig], force: bool = False) -> pd.DataFrame:
    """Table 3's rounds of the final runs' models (:mod:`.rounds`): read back, else timed here where the chapter may
    train (``force``: timed anew); empty where they are neither kept nor may be timed."""
    timed = rounds.timed_configs(final)
    kept = None if force or not timed else rounds.load(settings, timed)
    if kept is None and timed and settings.train:
        kept = rounds.take(settings, timed)
    return rounds.frame(kept)


def after_optimisation(
    settings: BayesOptSettings, force: bool = False, deadline: Deadline | None = None
) -> list[RunConfig]:
    """The final runs: each model's best lr and batch size, from the optimisation (run now if it is not stored)."""
    return final_plan(optimise(settings, force=force, deadline=deadline), settings)


def retrain_seeds(settings: BayesOptSettings, which: str) -> int:
    """The retrains' seeds in configuration ``which``: the committed plan's (at least ``seeds``) under ``seed_plan``."""
    planned = protocol.seeds(which) if settings.seed_plan else None
    return max(settings.seeds, planned or 0)


def trial_summary(result: BayesOptResult) -> pd.DataFrame:
    """One row per trial: who proposed it, its lr and batch size, its accuracy and the best so far."""
    return result.trials[["model", "trial", "generator", "lr", "batch_size", "accuracy", "best_so_far"]]


def final_runs(result: BayesOptResult) -> pd.DataFrame:
    """One row per final run: its model, lr, batch size, random seed, epochs and final accuracy."""
    last = results.final_epochs(result.table)
    return last[["run_id", "model", "depth", "lr", "batch_size", "seed", "epoch", "test_acc"]].reset_index(drop=True)


def final_plan(trials: pd.DataFrame, settings: BayesOptSettings) -> list[RunConfig]:
    """Each model of each configuration with its first search's best lr and batch size, the full epoch count, its
    configuration's seeds (seed 0 is the trials'; a model in two configurations takes the larger count), timed
    through article 1's pipeline as the article timed them (the trials ran on the book's engine)."""
    first = trials[trials["search"] == 0] if "search" in trials else trials
    best = {(row["model"], int(row["depth"])): row for _, row in best_trials(first).iterrows()}
    planned: dict[tuple[str, int], int] = {}
    for which in settings.configurations:
        for key in protocol.studies((which,)):
            planned[key] = max(planned.get(key, 0), retrain_seeds(settings, which))
    seeds = {key: planned.get(key, settings.seeds) for key in best}  # a search outside them: the profile's seeds
    return [
        RunConfig.from_settings(
            settings,
            model=model,
            model_kwargs={"depth": depth},
            lr=float(best[(model, depth)]["lr"]),
            batch_size=int(best[(model, depth)]["batch_size"]),
            seed=seed,
            dataset=hpo.MNIST,
            pipeline=RETRAIN_PIPELINE,
        )
        for seed in range(max(seeds.values(), default=0))
        for (model, depth), count in seeds.items()
        if seed < count
    ]


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


#: Each configuration's Figure 8: article 1's as run, the book's own as written.
FIG8 = {
    "as run": ("article1_fig8", "article1/fig8", "article 1 as run: ViT depth 6 vs ViTBNFFN / ViTBN depth 1"),
    "as written": (
        "article1_fig8_as_written",
        "new/article1_fig8_as_written",
        "article 1 as written: all three at depth 6 (a new comparison, not in the article's figures)",
    ),
}


def fig8_figure(result: BayesOptResult, which: str = "as run"):
    """Article 1's Figure 8 in configuration ``which``: the four panels of the optimised trio (None, with a line
    saying so, where the profile does not train that configuration)."""
    if which not in result.settings.configurations:
        print(f"{which}: not trained under profile {result.settings.profile} (the paper protocol trains it)")
        return None
    table, settings = result.configuration(which), result.settings
    name, reproduces, words = FIG8[which]
    figures.use_style()

    first = lambda group, column: group[column].iloc[0]
    label = lambda model, group: (
        f"{model_label(model, first(group, 'depth'))}, lr {first(group, 'lr'):.2g}, "
        f"batch {int(first(group, 'batch_size'))}"
    )
    title = (
        f"Article 1 Fig 8 · the optimised models on MNIST, {settings.epochs} epochs, Adam\n"
        f"each with its own best lr and batch size; {words}"
    )
    fig = figures.four_panel(table, title=title, label=label)
    caption = (
        f"The optimised trio ({which}): train and test time per epoch, training loss and test accuracy; each model "
        "uses its own best lr and batch size (so time per epoch also reflects the batch size); "
        f"{figures.spread_label(table)}; {results.times_left_out(table)}; the gains are judged from Table 3's "
        "interleaved rounds on one host, not from these epochs, which hosts of one CPU name may have timed"
    )
    return figures.save_figure(fig, name, result, reproduces=reproduces, caption=caption, runs=table)


def ratios_table(result: BayesOptResult):
    """Article 1's Table 3 (saved), with the article's ratios and the gains they imply, per configuration."""
    parts = {which: result.configuration(which) for which in result.settings.configurations}
    frame = pd.concat([speedups(table, result.timed, which) for which, table in parts.items()], ignore_index=True)
    found = "; ".join(
        f"{r['model']} ({r['configuration']}): r_t {r['r_t']}, r_v {r['r_v']}" for _, r in frame.iterrows()
    )
    settings, timed = result.settings, result.timed
    caption = (
        "Optimised models, r = T_ViT / T_model of the time per epoch, g = 1 − 1/r, each the mean over the rounds "
        f"with its 95 % interval: {rounds.described(timed)}; in each round every model trained "
        f"{settings.timing_images:,} images at its own optimised lr and batch size from seed 0's initial weights (the "
        "time of a whole epoch at that pace), then passed the test set once. The retrains' own epoch times, from "
        f"hosts that may differ, are Fig 8's. This run: {found}. The article's g are derived from its quoted r (its "
        "Table 3 is an image)"
    )
    made = None if timed.empty else (timed["machine"].iloc[0], timed["started"].iloc[0][:10])
    return figures.save_table(
        frame, "article1_table3", result, reproduces="article1/table3", caption=caption, runs=[], made=made
    )


def comparison_table(result: BayesOptResult):
    """The article's numbers beside this run's, per configuration (saved)."""
    trials, settings = result.trials, result.settings
    frame = pd.concat(
        [comparison(trials, result.configuration(which), result.timed, which) for which in settings.configurations],
        ignore_index=True,
    )
    caption = (
        f"Experiment 2: article 1's statements beside this run's numbers under profile {settings.profile}; "
        "each verdict is the book's one rule (the claims table)"
    )
    about = dict(reproduces="article1/fig8", caption=caption, reads=OPTIMISATION_STATE)
    return figures.save_table(frame, "article1_experiment2_vs_article", result, **about)


def judged(result: BayesOptResult) -> list:
    """Every claim in every configuration; under the plan, each at its planned seeds and beside its planned power."""
    found = []
    for which in result.settings.configurations:
        verdicts_here = experiment2(result.configuration(which), which, result.timed)
        if result.settings.seed_plan:
            planned = {(c["key"], c["condition"]): c for c in protocol.claims(which)}
            seeds = retrain_seeds(result.settings, which)
            verdicts_here = [
                dataclasses.replace(
                    verdicts.short_of_plan(v, seeds, present=v.outcome != verdicts.NOT_RUN),
                    power_planned=planned.get((v.claim, v.condition), {}).get("power_planned") or math.nan,
                )
                for v in verdicts_here
            ]
        found += verdicts_here
    return found


def claims_table(result):
    """Article 1's Experiment 2 claims (the optimised runs), judged by the book's one rule; saved as ``NN_claims``."""
    read = pd.concat([result.configuration(which) for which in result.settings.configurations])
    return figures.save_claims(result, judged(result), article.findings(), runs=read)


def protocol_plan_table(result: BayesOptResult):
    """The protocol's committed plan (``plan.PLAN_FILE``): per claim and configuration, the spread it was planned
    from and its upper bound, the margin or effect, the seeds it asks and those planned, and the planned power."""
    fixed = protocol.plan()
    columns = ("key", "condition", "test", "spread", "dof", "spread_bound", "margin", "effect", "needed", "planned")
    frame = pd.DataFrame(
        [{name: c.get(name) for name in columns} | {"power": c.get("power_planned")} for c in fixed["claims"]]
    )
    seeds = "; ".join(
        f"{w}: {p['seeds']} seeds (its claims ask up to {p['seeds_asked']})" for w, p in fixed["configurations"].items()
    )
    second = fixed["second_search"]
    caption = (
        f"Chapter 04's plan at article 1's protocol, as committed ({protocol.PLAN_FILE.name}) before any of its runs: "
        f"{fixed['trials']} trials of {fixed['trial_epochs']} epochs per search ({fixed['trial_epochs_from']}), "
        f"{len(fixed['searches'])} searches ({fixed['search_hours']:g} CPU h), retrains of {fixed['epochs']} epochs "
        f"({fixed['retrain_hours']:g} CPU h): {seeds}. Each claim's seeds from chapter 03's 30-epoch spread of the "
        f"statistic its verdict computes, at its one-sided {fixed['spread_bound']:.0%} upper bound, for "
        f"{fixed['power']:.0%} power at {fixed['alpha']:.0%}; seeds raised claim by claim, fewest first, within "
        f"{fixed['budget_hours']:g} CPU h ({fixed['priced']}). A second search seed per model "
        f"({second['hours']:g} CPU h) {'is afforded' if second['afforded'] else 'is not afforded'}: it shows "
        f"{second['shows']}"
    )
    if (timing := rounds.plan()) is not None:
        caption += (
            f". Its timing rows (r_t, r_v) are superseded by a later plan, {timing['plan']} "
            f"({rounds.PLAN_FILE.name}), committed before any of its rounds: {timing['what']}; because {timing['why']}"
        )
    about = dict(reproduces="new/protocol_plan", caption=caption, runs=[])
    return figures.save_table(frame, "04_protocol_plan", result, **about)
