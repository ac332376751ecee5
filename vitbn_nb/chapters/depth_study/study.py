"""Chapter 05: article 2's depth study, ViT against ViTBNFFN at the same depth on augmented MNIST (Figs 8-10), each
figure beside the article's finding and the rule's verdict; beside them, not article 2's, ``extra_models``."""

from __future__ import annotations

from dataclasses import dataclass, field

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from ...engines import training
from ...judging import power
from ...judging.selection import final_accuracy, select
from ...judging.verdicts import UNTESTABLE, primary_first
from ...models import CARDS
from ...publishing import figures, results
from ...store import runs
from ...store.runs import RunConfig
from .. import panels
from .. import planned as plan_handed_on
from . import confirmation, judge
from . import plan as seed_plan
from .article import findings
from .numbers import MODELS, difference, lr_effect, rule_verdicts, statement, summary, verdicts
from .settings import DepthSettings


@dataclass(frozen=True)
class DepthResult(results.ChapterResult):
    """Chapter 05's runs: one row per run and epoch of article 2's two models (``table``) and of the extra models
    (``extra``, not article 2's), and the settings that trained them."""

    settings: DepthSettings
    table: pd.DataFrame
    extra: pd.DataFrame = field(default_factory=pd.DataFrame)
    #: The confirmatory replication's runs (its fresh seeds): judged on their own, never pooled into ``table``.
    confirm: pd.DataFrame = field(default_factory=pd.DataFrame)


def _extra_trained(settings: DepthSettings) -> bool:
    """Whether the study trains the extra models' (depth, lr), where ViT and ViTBNFFN are there to compare."""
    return bool(settings.extra_models) and any(
        np.isclose(lr, settings.extra_lr) and settings.extra_depth in depths for lr, depths in settings.depths.items()
    )


def plan(settings: DepthSettings) -> list[RunConfig]:
    """Per lr, depth and seed: ViT and ViTBNFFN at that depth on augmented MNIST; then the extra models, per seed."""

    def config(model: str, depth: int, lr: float, seed: int) -> RunConfig:
        return RunConfig.from_settings(
            settings, model=model, model_kwargs={"depth": depth}, dataset="mnist_aug", lr=lr, seed=seed
        )

    article = [
        config(model, depth, lr, seed)
        for lr, depths in settings.depths.items()
        for depth in sorted(depths)
        for seed in range(settings.seeds_at(lr, depth))
        for model in MODELS
    ]
    extra = [
        config(model, settings.extra_depth, settings.extra_lr, seed)
        for seed in range(settings.seeds)
        for model in (settings.extra_models if _extra_trained(settings) else ())
    ]
    confirming = [c for c in confirmation.configs(settings) if c not in article] if settings.confirmation else []
    return article + extra + confirming


def run(settings: DepthSettings, force: bool = False) -> DepthResult:
    """Train (or fetch) every run. With training off, the seeds the seed plan adds beyond ``seeds`` are read where
    held (the campaign trains them); a claim gives no verdict before all its planned seeds are."""
    planned = plan_handed_on(settings, plan)
    if not settings.train:
        planned = [c for c in planned if c.seed < settings.seeds or runs.held_stream(c) is not None]
    table = runs.load_table(training.train_all(planned, force=force, train=settings.train))
    if "model" not in table.columns:
        return DepthResult(settings, table)
    fresh = confirmation.is_confirmation(table)
    confirm, table = table[fresh].reset_index(drop=True), table[~fresh]
    article = table["model"].isin(MODELS)
    return DepthResult(settings, table[article].reset_index(drop=True), table[~article].reset_index(drop=True), confirm)


def overview(settings: DepthSettings) -> pd.DataFrame:
    """What the profile trains: one row per lr."""
    rows = []
    for lr, depths in settings.depths.items():
        extra = settings.extra_models if _extra_trained(settings) and np.isclose(lr, settings.extra_lr) else ()
        rows.append(
            {
                "lr": lr,
                "depths": ", ".join(map(str, sorted(depths))),
                "models": " vs ".join(MODELS) + " (same depth)",
                "dataset": "MNIST, augmented",
                "epochs": settings.epochs,
                "batch (train / test)": f"{settings.batch_size} / {settings.test_batch_size}",
                "train images": panels.images(settings.train_size, 60000),
                "test images": panels.images(settings.test_size, 10000),
                "seeds": ", ".join(f"d{d}: {settings.seeds_at(lr, d)}" for d in sorted(depths)),
                "runs": 2 * sum(settings.seeds_at(lr, d) for d in depths) + len(extra) * settings.seeds,
                "beside them (not article 2's)": ", ".join(f"{m} d{settings.extra_depth}" for m in extra) or "—",
            }
        )
    return pd.DataFrame(rows)


def _missing(ax, text: str) -> None:
    ax.text(0.5, 0.5, text, transform=ax.transAxes, ha="center", va="center", fontsize=10, color="0.4", wrap=True)
    # Not set_xticks([]): the panels share their y axis, and emptying one axis's ticks would empty them all.
    ax.tick_params(left=False, bottom=False, labelleft=False, labelbottom=False)
    ax.grid(False)


def _note(ax, text: str) -> None:
    """A boxed note in the panel's lower right corner."""
    box = dict(boxstyle="round", facecolor="white", edgecolor="0.8", alpha=0.9)
    note = ax.text(0.97, 0.05, text, transform=ax.transAxes, ha="right", va="bottom", fontsize=9, bbox=box)
    note.set_in_layout(False)  # inside the panel: the layout must not shrink the axes to make room for it


def _delta_note(ax, deltas: pd.Series, judged=None) -> None:
    if deltas.empty:
        return
    shown = judged.shown if judged is not None and judged.outcome != UNTESTABLE else f"{results.spread(deltas)} pt"
    # the outcome only: its scale, Holm's p and the seeds held are in the claims table
    note = f"{shown}\n{judged.outcome}" if judged is not None else shown
    _note(ax, f"final ViTBNFFN − ViT: {note}")


def _at(table: pd.DataFrame, lr: float, depths) -> pd.DataFrame:
    return table[np.isclose(table["lr"], lr) & table["depth"].isin(depths)]


def _accuracy_grid(result: DepthResult, spec: dict):
    """One panel per depth at ``spec['lr']``: both models' test accuracy per epoch (mean, min-max band)."""
    table, settings = result.table, result.settings
    figures.use_style()
    lr, depths = spec["lr"], spec["depths"]
    fig, axes = plt.subplots(2, 2, figsize=(11, 7.5), sharey=True)
    rule = rule_verdicts(table, settings)
    for ax, depth in zip(axes.flat, depths):
        rows = select(table, lr=lr, depth=depth)
        ax.set_title(f"depth {depth}")
        if rows.empty:
            _missing(ax, f"depth {depth} at lr {lr:g}\nnot run under profile '{settings.profile}'")
            continue
        for model in MODELS:
            one = rows[rows["model"] == model]
            if not one.empty:
                figures.mean_band(ax, one, x="epoch", y="test_acc", label=model, color=figures.color(model), marker="o")
        _delta_note(ax, difference(table, lr, depth), rule.get(f"article2/depth/lr{lr:g}/d{depth}"))
        ax.set(xlabel="epoch", ylabel="test accuracy (%)")
        figures.integer_epochs(ax)
        if not any(a.get_legend() for a in axes.flat):  # one legend: the colours mean the same model in every panel
            ax.legend(loc="upper left", frameon=True, framealpha=0.85, edgecolor="0.8")
    used = _at(table, lr, depths)
    fig.suptitle(
        f"Article 2 {spec['label']} · augmented MNIST, lr = {lr:g}: ViT vs ViTBNFFN at the same depth\n"
        + figures.spread_label(used)
    )
    caption = (
        f"Test accuracy per epoch of ViT and ViTBNFFN at equal depth d = {', '.join(map(str, depths))}, "
        f"lr {lr:g}, augmented MNIST; {figures.spread_label(used)}"
    )
    return figures.save_figure(fig, spec["name"], result, reproduces=spec["reproduces"], caption=caption, runs=used)


def fig8_figure(result: DepthResult):
    """Article 2's Figure 8: accuracy curves at its lr (0.003 in the article), depths 4-7."""
    return _accuracy_grid(result, result.settings.figures()["fig8"])


def fig9_figure(result: DepthResult):
    """Article 2's Figure 9: accuracy curves at its lr (0.005 in the article), depths 1-4."""
    return _accuracy_grid(result, result.settings.figures()["fig9"])


def _verdict_table(result: DepthResult, spec: dict):
    frame = verdicts(result.table, result.settings, spec["lr"], spec["depths"])
    used = _at(result.table, spec["lr"], spec["depths"])
    caption = statement(frame, f"{spec['label']} (lr {spec['lr']:g})")
    return figures.save_table(
        frame, f"{spec['name']}_vs_article", result, reproduces=spec["reproduces"], caption=caption, runs=used
    )


def fig8_table(result: DepthResult):
    """Fig 8's depths: this run's final accuracies and call beside the article's finding (saved)."""
    return _verdict_table(result, result.settings.figures()["fig8"])


def fig9_table(result: DepthResult):
    """Fig 9's depths: this run's final accuracies and call beside the article's finding (saved)."""
    return _verdict_table(result, result.settings.figures()["fig9"])


def fig10_figure(result: DepthResult):
    """Article 2's Figure 10: rows = depth 2, 3, 4; columns = model; each panel both lrs."""
    table, settings = result.table, result.settings
    figures.use_style()
    spec = settings.figures()["fig10"]
    depths, lrs = spec["depths"], spec["lrs"]
    styles = {lrs[0]: ("-", "o", 0.0), lrs[1]: ("--", "s", 0.4)}
    fig, axes = plt.subplots(len(depths), len(MODELS), figsize=(11, 3.2 * len(depths)), sharey=True, squeeze=False)
    for row, depth in enumerate(depths):
        for col, model in enumerate(MODELS):
            ax = axes[row, col]
            ax.set_title(f"{model}_d{depth}")
            plotted = panels.lr_curves(ax, select(table, depth=depth, model=model), model, styles)
            if not plotted:
                _missing(ax, f"{model} at depth {depth}\nnot run under profile '{settings.profile}'")
                continue
            if len(plotted) == 2:
                at = select(table, depth=depth, model=model)
                drop = (final_accuracy(at, lr=lrs[0]) - final_accuracy(at, lr=lrs[1])).dropna()
                _note(ax, f"final accuracy drop\nlr {lrs[0]:g} → {lrs[1]:g}: {results.spread(drop)} pt")
            ax.set(xlabel="epoch" if row == len(depths) - 1 else "", ylabel="test accuracy (%)" if col == 0 else "")
            figures.integer_epochs(ax)
            ax.legend(loc="upper left", frameon=True, framealpha=0.85, edgecolor="0.8")
    used = table[table["depth"].isin(depths) & table["lr"].apply(lambda v: any(np.isclose(v, lrs)))]
    shown = ", ".join(map(str, depths))
    fig.suptitle(
        f"Article 2 Fig 10 · augmented MNIST: each model at lr {lrs[0]:g} and {lrs[1]:g}\n"
        f"rows = depth {shown} (same depth for both models); {figures.spread_label(used)}"
    )
    caption = (
        f"Test accuracy per epoch of ViT (left) and ViTBNFFN (right) at lr {lrs[0]:g} (solid) and {lrs[1]:g} "
        f"(dashed), depths {shown}; {figures.spread_label(used)}"
    )
    return figures.save_figure(fig, spec["name"], result, reproduces=spec["reproduces"], caption=caption, runs=used)


def fig10_table(result: DepthResult):
    """Fig 10's depths: each model's accuracy at both lrs, the drop, and who is hit less, beside the article."""
    table, spec = result.table, result.settings.figures()["fig10"]
    frame = lr_effect(table, result.settings)
    low, high = spec["lrs"]
    caption = (
        f"Fig 10 (lr {low:g} → {high:g}; article 2: the higher lr costs ViTBNFFN less than ViT from d = 3). "
        + statement(frame, "Fig 10")
        + f" 'drop' = final accuracy at lr {low:g} minus at lr {high:g}, paired by seed"
    )
    used = table[table["depth"].isin(spec["depths"])]
    return figures.save_table(
        frame, f"{spec['name']}_vs_article", result, reproduces=spec["reproduces"], caption=caption, runs=used
    )


def depth_summary_figure(result: DepthResult):
    """The book's summary: final accuracy vs depth, per model, one panel per lr (mean, min-max error bars)."""
    table, frame = result.table, summary(result.table)
    figures.use_style()
    lrs = sorted(frame["lr"].unique())
    fig, axes = plt.subplots(1, len(lrs), figsize=(5.5 * len(lrs), 4.2), sharey=True, squeeze=False)
    for ax, lr in zip(axes.flat, lrs):
        at_lr = frame[np.isclose(frame["lr"], lr)]
        for offset, model in zip((-0.06, 0.06), MODELS):
            one = at_lr[at_lr["model"] == model].sort_values("depth")
            ax.errorbar(
                one["depth"] + offset,
                one["mean"],
                yerr=[one["mean"] - one["min"], one["max"] - one["mean"]],
                color=figures.color(model),
                marker="o",
                capsize=3,
                label=model,
            )
        ax.set(
            title=f"lr = {lr:g}",
            xlabel="depth (encoder blocks, same for both models)",
            ylabel="final test accuracy (%)",
        )
        figures.integer_epochs(ax)
        ax.legend()
    epochs = int(table["epoch"].max())
    fig.suptitle(
        f"Depth study summary · augmented MNIST, accuracy after {epochs} epochs\n" + figures.spread_label(table, "bars")
    )
    caption = (
        f"Final test accuracy (epoch {epochs}) of ViT and ViTBNFFN at equal depth, per lr; "
        + figures.spread_label(table, "bars")
    )
    return figures.save_figure(fig, "new_depth_summary", result, reproduces="new/depth_summary", caption=caption)


def depth_summary_table(result: DepthResult):
    """The summary's numbers, with ViTBNFFN − ViT and our call per lr and depth, saved."""
    table = result.table
    wide = summary(table).pivot_table(
        index=["lr", "depth"], columns="model", values="final accuracy (%)", aggfunc="first"
    )
    wide = wide.reindex(columns=[m for m in MODELS if m in wide.columns]).reset_index()
    wide.columns.name = None
    wide = wide.rename(columns={m: f"{m} (%)" for m in MODELS})
    wide["ViTBNFFN − ViT (pt)"] = [results.spread(difference(table, lr, d)) for lr, d in zip(wide["lr"], wide["depth"])]
    rule = rule_verdicts(table, result.settings)
    wide["verdict"] = [
        rule[key].text if (key := f"article2/depth/lr{lr:g}/d{d}") in rule else "not a claim of article 2"
        for lr, d in zip(wide["lr"], wide["depth"])
    ]
    caption = (
        "Final accuracy per depth and lr, ViTBNFFN − ViT paired by seed, and the book's rule's verdict on "
        "article 2's claim at each (lr, depth) it makes one"
    )
    wide["lr"] = wide["lr"].map(lambda lr: f"{lr:g}")
    return figures.save_table(wide, "new_depth_summary_table", result, reproduces="new/depth_summary", caption=caption)


def _beside(result: DepthResult) -> tuple[pd.DataFrame, tuple[str, ...]]:
    """The runs at the extra models' (depth, lr): article 2's two models and the extra ones; and the models shown."""
    settings = result.settings
    both = pd.concat([result.table, result.extra], ignore_index=True) if len(result.extra) else result.table
    shown = (*MODELS, *(settings.extra_models or ()))
    if not len(both):
        return both, shown
    return select(both, lr=settings.extra_lr, depth=settings.extra_depth)[lambda t: t["model"].isin(shown)], shown


def extra_models_table(result: DepthResult):
    """The extra models beside ViT and ViTBNFFN at their depth and lr: final accuracies and differences paired by
    seed, shown without a verdict (no article claims anything about them)."""
    settings = result.settings
    used, shown = _beside(result)
    lr, depth = settings.extra_lr, settings.extra_depth
    rows, last = [], results.final_epochs(used) if len(used) else None
    for model in shown:
        accuracy = final_accuracy(used, lr=lr, depth=depth, model=model) if len(used) else pd.Series(dtype=float)
        ran = len(accuracy) > 0
        row = {
            "model": model,
            "norms": card.norms if (card := CARDS.get(model)) else "",
            "final accuracy (%)": results.accuracy(accuracy) if ran else "not run",
            "seeds": len(accuracy),
            "diverged": int((last.loc[last["model"] == model, "status"] == "diverged").sum()) if ran else 0,
        }
        for other in MODELS:
            paired = (accuracy - final_accuracy(used, lr=lr, depth=depth, model=other)).dropna() if ran else accuracy
            row[f"model − {other} (pt)"] = "—" if model in MODELS else results.spread(paired) if len(paired) else "n/a"
        rows.append(row)
    frame = pd.DataFrame(rows)
    extra = ", ".join(settings.extra_models or ()) or "no extra model"
    caption = (
        f"Not a claim of article 2 (nor of article 1): {extra} trained beside ViT and ViTBNFFN at depth {depth}, "
        f"lr {lr:g}, with the chapter's protocol and seeds; final test accuracy, mean [95 % interval] over seeds, and "
        "each extra model minus ViT and minus ViTBNFFN paired by seed; shown, not judged"
        + (f"; {figures.spread_label(used)}" if len(used) else f"; not run under profile '{settings.profile}'")
    )
    return _save_beside(frame, "new_depth_extra_models_table", result, used, caption)


def extra_models_figure(result: DepthResult):
    """Test accuracy per epoch of ViT, ViTBNFFN and the extra models at the extra models' depth and lr."""
    settings = result.settings
    used, shown = _beside(result)
    lr, depth = settings.extra_lr, settings.extra_depth
    figures.use_style()
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    drawn = [m for m in shown if len(used) and (used["model"] == m).any()]
    for model in drawn:
        one = used[used["model"] == model]
        figures.mean_band(ax, one, x="epoch", y="test_acc", label=model, color=figures.color(model), marker="o")
    if drawn:
        ax.set(xlabel="epoch", ylabel="test accuracy (%)")
        figures.integer_epochs(ax)
        ax.legend(loc="lower right", frameon=True, framealpha=0.85, edgecolor="0.8")
    else:
        _missing(ax, f"depth {depth} at lr {lr:g}\nnot run under profile '{settings.profile}'")
    fig.suptitle(
        f"Beside article 2 (not its claim) · augmented MNIST, depth {depth}, lr {lr:g}: "
        f"{' vs '.join(shown)}\n" + (figures.spread_label(used) if len(used) else "")
    )
    caption = (
        f"Test accuracy per epoch of {', '.join(shown)} at depth {depth}, lr {lr:g}, augmented MNIST; "
        "not a claim of either article, shown without a verdict"
        + (f"; {figures.spread_label(used)}" if len(used) else "")
    )
    return _save_beside(fig, "new_depth_extra_models", result, used, caption)


def _save_beside(output, name: str, result: DepthResult, used: pd.DataFrame, caption: str):
    """Save an output of the extra models (``new/depth_extra_models``), saying so where the profile trains none."""
    reads = "" if len(used) else "no run: these models are not trained under this profile"
    save = figures.save_table if isinstance(output, pd.DataFrame) else figures.save_figure
    return save(output, name, result, reproduces="new/depth_extra_models", caption=caption, runs=used, reads=reads)


#: Each settings' seed plan, computed once per process (it reads every record finished before the plan).
_PLANS: dict[str, tuple] = {}


def _seed_plan(settings) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(the runs the plan read, the plan's rows) under ``settings``."""
    if repr(settings) not in _PLANS:
        read = runs.finished_before(seed_plan.written())
        _PLANS[repr(settings)] = read, seed_plan.seed_plan(settings, plan(settings), read)
    return _PLANS[repr(settings)]


def seed_plan_table(result: DepthResult):
    """The seed plan behind the chapter's settings (:mod:`.plan`): per claim, the seeds planned and why; saved."""
    read, frame = _seed_plan(result.settings)
    runs_read = read[read["dataset"] == "mnist_aug"] if len(read) else None
    about = dict(reproduces="new/seed_plan", caption=seed_plan.plan_caption(frame), runs=runs_read)
    return figures.save_table(frame, "05_seed_plan", result, **about)


def claims_table(result):
    """Article 2's depth-study claims (Figures 8-10), judged by the book's one rule; saved as ``NN_claims``."""
    settings = result.settings
    found, claims = judge.figures_8_to_10(result.table, settings), findings(settings)
    if settings.confirmation:
        found, claims = found + confirmation.judge(result.confirm, settings), claims + confirmation.findings(settings)
    found = power.with_planned_power(found, _seed_plan(settings)[1])
    found = primary_first(found)
    read = pd.concat([result.table, result.confirm]) if len(result.confirm) else None
    return figures.save_claims(result, found, claims, runs=read)


def confirmation_plan_table(result: DepthResult):
    """The confirmatory replication's committed plan (``confirmation.PLAN_FILE``): per claim, its fresh seeds, the
    spread it was planned from and its upper bound, the effect or margin, the CPU hours, and whether it is afforded."""
    plan = confirmation.plan()
    columns = ("key", "test", "lr", "depths", "spread", "dof", "spread_bound", "effect", "margin", "seeds", "hours")
    frame = pd.DataFrame(
        [{name: claim.get(name) for name in columns} | claim_afforded(claim) for claim in plan["claims"]]
    )
    frame["depths"] = frame["depths"].map(lambda depths: ", ".join(map(str, depths)))
    caption = (
        f"Chapter 05's confirmatory replication, as committed ({confirmation.PLAN_FILE.name}) before any of its runs: "
        f"fresh seeds from {plan['first_seed']}; each claim's seeds from the spread of the statistic its verdict "
        f"computes, taken at its one-sided {plan['spread_bound']:.0%} upper confidence bound, for {plan['power']:.0%} "
        f"power at two-sided {plan['alpha']:.0%}; the primary contrast detects the lower end of the exploratory "
        f"contrast's 95 % interval; cells beyond the {plan['budget_hours']:g} CPU hours are stated, not trained"
    )
    return figures.save_table(
        frame, "05_confirmation_plan", result, reproduces="new/confirmation_plan", caption=caption, runs=[]
    )


def claim_afforded(claim: dict) -> dict:
    return {"afforded": "yes" if claim.get("afforded", True) and claim["seeds"] else "no (beyond the budget)"}
