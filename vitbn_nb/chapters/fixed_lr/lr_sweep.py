"""Chapter 03's learning-rate sweep at equal depth 6: per model and lr, final accuracy against the best lr's and ViT's,
and where runs broke down, by the book's rule (article 1's conclusion: ``judge.larger_lr``)."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from ...judging import verdicts
from ...judging.claims import article_steps, steps_per_epoch
from ...judging.selection import final_accuracy
from ...models import AS_RUN_DEPTH
from ...publishing import figures
from ...store.runs import RunConfig
from .. import panels
from .article import EPOCHS, EXPERIMENT1
from .judge import larger_lr
from .numbers import MODELS, UNSTABLE_DROP, unstable_epoch
from .settings import FixedLrSettings

#: The depth all three models share in the sweep: article 1's L = 6.
DEPTH = 6


def plan(settings: FixedLrSettings, pipeline: str) -> list[RunConfig]:
    """The sweep's own runs: the depth-6 trio at each extra lr (chapter 03's lrs are trained by its own plan)."""
    return configs(settings, settings.sweep_lrs, [(model, DEPTH) for model in MODELS], pipeline)


def configs(settings: FixedLrSettings, lrs, pairs, pipeline: str) -> list[RunConfig]:
    """One MNIST run per lr, seed and (model, depth) of ``pairs``, in that order."""
    return [
        RunConfig.from_settings(
            settings,
            model=model,
            model_kwargs={} if AS_RUN_DEPTH[model] == depth else {"depth": depth},
            dataset="mnist",
            lr=lr,
            seed=seed,
            pipeline=pipeline,
        )
        for lr in lrs
        for seed in range(settings.seeds)
        for model, depth in pairs
    ]


def sweep_rows(table: pd.DataFrame) -> pd.DataFrame:
    """The rows of a run table that belong to the sweep: the three models at depth 6, at every lr."""
    return table[(table["depth"] == DEPTH) & table["model"].isin(MODELS)]


def per_run(sweep: pd.DataFrame) -> pd.DataFrame:
    """One row per run: model, lr, seed, final and best accuracy, the epoch and step at which it broke down."""
    rows = []
    for run_id, run in sweep.groupby("run_id", sort=False):
        run = run.sort_values("epoch")
        first, per_epoch = run.iloc[0], steps_per_epoch(run)
        broke = unstable_epoch(run)
        rows.append(
            {
                "model": first["model"],
                "lr": float(first["lr"]),
                "seed": int(first["seed"]),
                "final accuracy (%)": float(final_accuracy(run).iloc[-1]),
                "best accuracy (%)": float(run["test_acc"].max()),
                "broke down at epoch": broke,
                "broke down at step": None if broke is None else broke * per_epoch,
                # a fall at the last test is one point that no later test confirms or undoes
                "at the last test": broke is not None and broke == int(run["epoch"].max()),
                "steps": int(run["epoch"].max()) * per_epoch,
                "run_id": run_id,
            }
        )
    return pd.DataFrame(rows).sort_values(["model", "lr", "seed"], ignore_index=True)


def _finals(runs: pd.DataFrame, model: str, lr: float) -> pd.Series:
    one = runs[(runs["model"] == model) & np.isclose(runs["lr"], lr)]
    return one.set_index("seed")["final accuracy (%)"].sort_index()


def best_lr(runs: pd.DataFrame, model: str) -> float:
    """The lr of the model's highest mean final accuracy."""
    one = runs[runs["model"] == model]
    return float(one.groupby("lr")["final accuracy (%)"].mean().idxmax())


def against_best(runs: pd.DataFrame, model: str, lr: float) -> verdicts.Verdict:
    """This lr's final accuracy minus the best lr's, paired by seed, judged by equivalence (shown as good as the best,
    never merely not shown worse)."""
    best = best_lr(runs, model)
    values = (_finals(runs, model, lr) - _finals(runs, model, best)).dropna()
    # the book's own question: no article reads a gap here, so the rule's ceiling at the best lr's accuracy
    margin = verdicts.Margin(None, float(_finals(runs, model, best).mean()), "the book's own question")
    claim = f"{model} at lr {lr:g} as good as at lr {best:g}"
    return verdicts.difference(claim, list(values), 0, condition=f"{model} d{DEPTH}", margin=margin)


def largest_trainable(runs: pd.DataFrame, model: str) -> float | None:
    """The largest lr shown as good as the best (equivalent by the rule); None with too few seeds to judge."""
    best, one = best_lr(runs, model), runs[runs["model"] == model]
    if one["seed"].nunique() < verdicts.MIN_SEEDS:
        return None
    as_good = lambda lr: lr == best or against_best(runs, model, lr).outcome == verdicts.EQUIVALENT
    return max(lr for lr in one["lr"].unique() if as_good(lr))


def summary(runs: pd.DataFrame) -> pd.DataFrame:
    """Per model and lr: final accuracy, breakdowns, against the best lr and (BatchNorm models) against ViT."""
    rows = []
    for model in [m for m in MODELS if m in set(runs["model"])]:
        for lr in sorted(runs.loc[runs["model"] == model, "lr"].unique()):
            one = runs[(runs["model"] == model) & np.isclose(runs["lr"], lr)]
            mean, low, high, n = verdicts.interval(one["final accuracy (%)"], bounds=verdicts.ACCURACY_BOUNDS)
            broke = one.dropna(subset=["broke down at step"])
            best = against_best(runs, model, lr)
            ahead = list((_finals(runs, model, lr) - _finals(runs, "ViT", lr)).dropna())
            vs_vit = verdicts.difference(f"{model} − ViT at lr {lr:g}", ahead, +1) if model != "ViT" else None
            rows.append(
                {
                    "model": model,
                    "depth": DEPTH,
                    "lr": lr,
                    "seeds": n,
                    "final accuracy (%)": mean,
                    "low": low,
                    "high": high,
                    "best accuracy (%)": float(one["best accuracy (%)"].mean()),
                    "runs broke down": f"{len(broke)}/{len(one)}",
                    "at steps": _steps_text(broke),
                    "against the best lr (pt)": best.estimate,
                    "verdict: as good as the best lr": best.text,
                    "against ViT (pt)": np.nan if vs_vit is None else vs_vit.estimate,
                    "verdict: ahead of ViT": "" if vs_vit is None else vs_vit.text,
                }
            )
    return pd.DataFrame(rows)


def _steps_text(broke: pd.DataFrame) -> str:
    """The steps at which runs broke down, ascending, a fall at the run's last test marked as such."""
    steps, last = broke["broke down at step"], broke["at the last test"]
    marked = sorted((int(step), bool(at_last)) for step, at_last in zip(steps, last))
    return ", ".join(f"{step}" + (" (last test)" if last else "") for step, last in marked)


def never_trained(runs: pd.DataFrame, model: str) -> dict[float, float]:
    """The lrs (with their mean best accuracy) at which ``model`` never came within the breakdown's drop of its best
    lr's final accuracy: such runs cannot break down, which is not training stably."""
    one = runs[runs["model"] == model]
    reference = one[np.isclose(one["lr"], best_lr(runs, model))]["final accuracy (%)"].mean()
    best = one.groupby("lr")["best accuracy (%)"].mean()
    return {float(lr): float(value) for lr, value in best.items() if value < reference - UNSTABLE_DROP}


def _scale(runs: pd.DataFrame) -> str:
    steps = int(runs["steps"].min()) if len(runs) else 0
    article = article_steps(EPOCHS)
    return f"{steps:,} steps a run, {steps / article:.1%} of article 1's {article:,}"


def sweep_table(result):
    """The sweep per model and lr, saved as ``03_lr_sweep_table`` (numbers, with the rule's verdicts)."""
    runs = per_run(result.sweep)
    caption = (
        f"The learning-rate sweep at depth {DEPTH}, {_scale(runs)}: final accuracy over seeds with its 95 % interval; "
        f"a run broke down when its accuracy fell more than {UNSTABLE_DROP:g} points below its best so far (or its "
        "loss became NaN); each lr against the model's best lr, and each BatchNorm model against ViT, by the book's "
        "rule"
    )
    return figures.save_table(
        summary(runs), "03_lr_sweep_table", result, reproduces="new/lr_sweep", caption=caption, runs=result.sweep
    )


def sweep_figure(result):
    """Final accuracy against lr per model (each seed a dot, the mean a line), and the largest fall of each run."""
    runs = per_run(result.sweep)
    figures.use_style()
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    falls = {run_id: verdicts.largest_fall(run) for run_id, run in result.sweep.groupby("run_id", sort=False)}
    runs["largest fall (pt)"] = runs["run_id"].map(falls)
    for i, model in enumerate(m for m in MODELS if m in set(runs["model"])):
        one = runs[runs["model"] == model]
        color = figures.color(model)
        # models side by side at each lr, so that their dots do not hide one another
        shift = 1.06 ** (i - 1)
        for ax, column in ((left, "final accuracy (%)"), (right, "largest fall (pt)")):
            mean = one.groupby("lr")[column].mean()
            ax.plot(mean.index, mean.values, color=color, marker="o", label=f"{model} (depth {DEPTH})")
            ax.scatter(one["lr"] * shift, one[column], color=color, s=12, alpha=0.5, linewidths=0)
    for ax in (left, right):
        ax.set_xscale("log")
        ax.set_xticks(sorted(runs["lr"].unique()))
        ax.set_xticklabels([f"{lr:g}" for lr in sorted(runs["lr"].unique())], rotation=30)
        ax.set_xlabel("learning rate (Adam)")
    left.set(ylabel="final test accuracy (%)", title="final accuracy")
    right.set(ylabel="largest fall below the best so far (pt)", title="breakdown (0 = never fell)")
    right.axhline(UNSTABLE_DROP, color="grey", linestyle=":", linewidth=1)
    left.legend(fontsize=9)
    seeds = int(runs["seed"].nunique())
    fig.suptitle(
        f"Which learning rates each model trains at · MNIST, all three at depth {DEPTH}, batch 100\n"
        f"{_scale(runs)}; "
        + (f"line = mean over {seeds} seeds, dots = single runs" if seeds > 1 else "one seed: single runs, not judged")
    )
    caption = (
        f"Final accuracy and largest fall below the best accuracy so far against the learning rate, ViT, ViTBNFFN and "
        f"ViTBN at depth {DEPTH}, {_scale(runs)}; a fall above the dotted line ({UNSTABLE_DROP:g} pt) is a breakdown"
    )
    return figures.save_figure(
        fig, "03_lr_sweep", result, reproduces="new/lr_sweep", caption=caption, runs=result.sweep
    )


def _against_vit(table: pd.DataFrame, model: str) -> str:
    """How the rule judged ``model`` against ViT over the grid: 'ahead at 0, behind at 0, within noise at 6 of 6'."""
    texts = table.loc[table["model"] == model, "verdict: ahead of ViT"]
    if texts.str.contains(verdicts.NOT_JUDGED).all():
        return f"{verdicts.NOT_JUDGED} (fewer than {verdicts.MIN_SEEDS} seeds)"
    count = lambda outcome: int(texts.str.startswith(outcome).sum())
    return (
        f"ahead at {count(verdicts.AGREES)}, behind at {count(verdicts.DISAGREES)}, within noise at "
        f"{count(verdicts.NOISE)} of {len(texts)} rates"
    )


def statement(result):
    """Per model: best lr, largest lr as good by the rule, where runs broke down, each BatchNorm model against ViT."""
    runs = per_run(result.sweep)
    table, seeds, lines = summary(runs), int(runs["seed"].nunique()), []
    for model in (m for m in MODELS if m in set(runs["model"])):
        one = runs[runs["model"] == model]
        largest = largest_trainable(runs, model)
        broke = one.dropna(subset=["broke down at step"])
        where = (
            "; ".join(
                f"lr {lr:g}: {len(group)}/{int((np.isclose(one['lr'], lr)).sum())} runs, at step {_steps_text(group)}"
                for lr, group in broke.groupby("lr")
            )
            or "no run broke down"
        )
        short = never_trained(runs, model)
        if short:
            where += (
                f"; never within {UNSTABLE_DROP:g} pt of its best lr, so unable to break down by this measure: "
                + ", ".join(f"lr {lr:g} (best {value:.1f} %)" for lr, value in short.items())
            )
        trains = (
            f"{seeds} seed{'s' * (seeds != 1)}: {verdicts.NOT_JUDGED}"
            if largest is None
            else f"the largest lr shown as good as the best by the rule (equivalent): **{largest:g}**"
        )
        versus = "" if model == "ViT" else f"; against ViT at the same lr: {_against_vit(table, model)}"
        lines.append(
            f"- **{model}** (depth {DEPTH}): best lr {best_lr(runs, model):g}; {trains}; broke down: {where}{versus}."
        )
    breakdown = EXPERIMENT1[0.01].vit_unstable_epoch
    return panels.markdown(
        f"Every run trained for {int(runs['steps'].min()):,} steps ({_scale(runs).split(', ')[1]}), so a "
        f"breakdown like the one article 1 saw near epoch {breakdown} (step {article_steps(breakdown):,}) "
        "cannot show here unless it comes earlier."
        + (
            " A breakdown marked *(last test)* is one fall at a run's last test, which no later test confirms."
            if runs["at the last test"].any()
            else ""
        )
        + "\n\n"
        + "\n".join(lines)
    )


def takeaway(result):
    """One line on article 1's conclusion on larger lrs, from its claims (:func:`.judge.larger_lr`)."""
    found = larger_lr(result.sweep, getattr(result, "protocol_runs", None))
    if not found:
        return panels.markdown("The sweep has no rate from article 1's largest up, so it cannot judge that conclusion.")
    count = lambda outcome: sum(v.outcome == outcome for v in found)
    rates = sorted({v.condition.split(":")[0] for v in found}, key=lambda rate: float(rate.split()[-1]))
    head = (
        "**Larger learning rates.** Article 1 concludes that BatchNorm allows a larger learning rate without "
        "rendering the model unstable. The claims table judges it from each run's stability over the whole run (its "
        "largest fall below its best accuracy so far; a run whose loss became NaN falls to chance), ViT against each "
        f"BatchNorm model, all at depth {DEPTH}, at article 1's largest rate and beyond ({', '.join(rates)}), and only "
        "over runs as long as article 1's"
    )
    untestable = [v for v in found if v.outcome == verdicts.UNTESTABLE]
    if len(untestable) == len(found):
        return panels.markdown(
            f"{head}: here **{verdicts.UNTESTABLE}** ({untestable[0].scale}). A breakdown like article 1's near its "
            f"epoch {EXPERIMENT1[0.01].vit_unstable_epoch}, or stability to its last epoch, "
            "cannot show in shorter runs, so the sweep above describes these runs without judging the conclusion."
        )
    judged = [v for v in found if v.outcome != verdicts.UNTESTABLE]
    if all(v.outcome == verdicts.NOT_JUDGED for v in judged):
        reading = f"{verdicts.NOT_JUDGED}: fewer than {verdicts.MIN_SEEDS} seeds"
    elif count(verdicts.AGREES) == len(judged):
        reading = "the runs bear it out at every rate they could judge"
    elif count(verdicts.AGREES):
        reading = "the runs bear it out at some of those rates only"
    elif count(verdicts.DISAGREES):
        reading = "the runs find the opposite at some of those rates"
    else:
        reading = (
            "the runs do not bear it out; no difference shown is not evidence against it either (the claims table "
            "gives each count's exact interval)"
        )
    rest = f"; {len(untestable)} of the comparisons are {verdicts.UNTESTABLE}" if untestable else ""
    return panels.markdown(
        f"{head} ({judged[0].scale}). Counting collapses, the rule finds ViT collapsing more often than the "
        f"BatchNorm model in {count(verdicts.AGREES)}, less often in {count(verdicts.DISAGREES)} and no difference its "
        f"runs could show in {count(verdicts.NOISE)} of {len(judged)} comparisons{rest}: {reading}."
    )
