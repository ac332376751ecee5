"""Chapter 01: BatchNorm in a plain deep network (article 2, Figures 1-3): DNN_d3 against DNNBN_d3 on augmented
MNIST at two learning rates, beside what article 2's figures show (it reports no numbers)."""

from __future__ import annotations

import html
import math
from dataclasses import dataclass, field, replace

import matplotlib.pyplot as plt
import pandas as pd

from ...engines import training
from ...judging.selection import require
from ...judging.verdicts import UNTESTABLE
from ...publishing import figures, results
from ...store import runs
from .. import panels, planned
from . import article
from .judge import figures_1_to_3
from .settings import IntroSettings

MODELS = ("DNN_d3", "DNNBN_d3")
DATASET = "mnist_aug"
#: Which of article 2's figures each learning rate reproduces.
FIGURE_FOR_LR = {0.01: "article2/fig1", 0.1: "article2/fig2"}
#: Ten classes: a model whose final accuracy stays below this has not learned to tell digits apart.
CHANCE_LEVEL = 20.0


@dataclass(frozen=True)
class IntroResult(results.ChapterResult):
    """Chapter 01's runs: one row per run and epoch (``table``), and the settings that trained them."""

    settings: IntroSettings
    table: pd.DataFrame


def plan(settings: IntroSettings) -> list[runs.RunConfig]:
    """Every run of the chapter: each model at each learning rate, ``settings.seeds`` random seeds."""
    return [
        runs.RunConfig.from_settings(settings, model=model, dataset=DATASET, lr=lr, seed=seed)
        for lr in settings.lrs
        for model in MODELS
        for seed in range(settings.seeds)
    ]


def protocol(settings: IntroSettings) -> pd.DataFrame:
    """The runs of this chapter under ``settings``, one row per model and learning rate."""
    return pd.DataFrame(
        {
            "model": config.model,
            "lr": config.lr,
            "dataset": "augmented MNIST (train and test)",
            "optimiser": "Adam",
            "loss": "cross-entropy",
            "epochs": config.epochs,
            "train batch": config.batch_size,
            "test batch": config.test_batch_size,
            "train images": config.train_size or "all 60,000",
            "test images": config.test_size or "all 10,000",
            "seeds": settings.seeds,
        }
        for config in plan(settings)
        if config.seed == 0
    )


def run(settings: IntroSettings, force: bool = False) -> IntroResult:
    """Train (or read back from the run store) every run of the chapter."""
    return IntroResult(
        settings, runs.load_table(training.train_all(planned(settings, plan), force=force, train=settings.train))
    )


def _reproduces(lr: float) -> str:
    return next((figure for known, figure in FIGURE_FOR_LR.items() if math.isclose(lr, known)), f"new/dnn_lr{lr:g}")


def accuracy_loss_figure(result: IntroResult, lr: float):
    """Article 2's Figure 1 (lr 0.01) or 2 (lr 0.1): test accuracy and training loss per epoch, both models."""
    chosen = require(result.table, lr=lr)
    figures.use_style()
    fig, (acc_ax, loss_ax) = plt.subplots(1, 2, figsize=(11, 4.2))
    for model in MODELS:
        rows = chosen[chosen["model"] == model]
        if rows.empty:
            continue
        for ax, metric in ((acc_ax, "test_acc"), (loss_ax, "train_loss")):
            figures.mean_band(ax, rows, x="epoch", y=metric, label=model, color=figures.color(model), marker="o")
    acc_ax.set(xlabel="epoch", ylabel="test accuracy (%)", title="Test accuracy (augmented MNIST test set)")
    loss_ax.set(xlabel="epoch", ylabel="training loss (cross-entropy)", title="Training loss (mean per image)")
    _chance_line(acc_ax)
    acc_ax.set_ylim(*_accuracy_limits(chosen))
    loss_ax.axhline(math.log(10), color="0.55", linestyle=":", linewidth=1.2, label="uniform guess (ln 10 ≈ 2.30)")
    for ax in (acc_ax, loss_ax):
        figures.integer_epochs(ax)
    acc_ax.legend(title=_seed_note(chosen))
    loss_ax.legend()
    fig.suptitle(f"DNN_d3 vs DNNBN_d3 at lr = {lr:g} (Adam, batch {int(chosen['batch_size'].iloc[0])})")
    reproduces = _reproduces(lr)
    caption = (
        f"Test accuracy and training loss per epoch of DNN_d3 and DNNBN_d3 at lr={lr:g} on augmented MNIST; "
        f"{figures.spread_label(chosen)} (article 2, {reproduces.split('/')[-1]})."
    )
    return figures.save_figure(fig, f"01_dnn_lr{lr:g}", result, reproduces=reproduces, caption=caption, runs=chosen)


def lr_comparison_figure(result: IntroResult):
    """Article 2's Figure 3: each model's accuracy curve at every learning rate (DNN_d3 | DNNBN_d3)."""
    table = result.table
    figures.use_style()
    fig, axes = plt.subplots(1, len(MODELS), figsize=(11, 4.2), sharey=True)
    lrs = sorted(table["lr"].unique())
    # One model, one hue: the higher learning rates darker and dashed.
    lines = ["-", "--", ":", "-."]
    styles = {lr: (lines[i % 4], "o" if i == 0 else "s", 0.4 * i / max(len(lrs) - 1, 1)) for i, lr in enumerate(lrs)}
    for ax, model in zip(axes, MODELS):
        rows = require(table, model=model)
        panels.lr_curves(ax, rows, model, styles)
        ax.set(xlabel="epoch", title=model)
        _chance_line(ax)
        figures.integer_epochs(ax)
        ax.legend(title=_seed_note(rows))
    axes[0].set_ylabel("test accuracy (%)")
    axes[0].set_ylim(*_accuracy_limits(table))
    fig.suptitle("Each model's test accuracy at both learning rates (augmented MNIST)")
    caption = (
        "Test accuracy per epoch of DNN_d3 (left) and DNNBN_d3 (right) at each learning rate; "
        f"{figures.spread_label(result.table)} (article 2, fig3)."
    )
    return figures.save_figure(fig, "01_dnn_both_lrs", result, reproduces="article2/fig3", caption=caption)


def _accuracy_limits(rows: pd.DataFrame) -> tuple[float, float]:
    """From 0, so a model stuck at chance reads as such, to just above the best accuracy."""
    top = rows["test_acc"].max()
    return 0.0, min(100.0, (top if pd.notna(top) else 100.0) * 1.05 + 2)


def _chance_line(ax) -> None:
    ax.axhline(10, color="0.55", linestyle=":", linewidth=1.2, label="chance (10 %)")


def _seed_note(rows: pd.DataFrame) -> str:
    seeds = rows["seed"].nunique()
    return f"{seeds} seed{'s' if seeds > 1 else ''}" + (" (band: min-max)" if seeds > 1 else "")


@dataclass
class Summary:
    """A small table with a computed verdict under it; shows as HTML in a notebook and as text elsewhere."""

    table: pd.DataFrame
    verdicts: list[str] = field(default_factory=list)

    def _repr_html_(self) -> str:
        lines = "".join(f"<li>{html.escape(v)}</li>" for v in self.verdicts)
        return self.table.to_html(index=False, na_rep="–") + f"<ul>{lines}</ul>"

    def __repr__(self) -> str:
        return self.table.to_string(index=False) + "".join(f"\n- {v}" for v in self.verdicts)


#: Which of article 2's DNN claims each figure's summary shows (their verdicts are the book's one rule's).
CLAIMS_OF = {
    "article2/fig1": ("article2/fig1/converges", "article2/fig1/final"),
    "article2/fig2": ("article2/fig2/stable",),
    "article2/fig3": ("article2/fig3/cost",),
}


def _rule_lines(result: IntroResult, reproduces: str) -> list[str]:
    measures = {c.key: c.measure for c in article.findings(result.settings)}
    shown = lambda v: "" if v.outcome == UNTESTABLE else f"{v.shown}; "
    return [
        f"{measures[v.claim]}: {shown(v)}by the book's rule: {v.text}."
        for v in figures_1_to_3(result.table, result.settings)
        if v.claim in CLAIMS_OF.get(reproduces, ())
    ]


def _stuck(final: pd.DataFrame, lr: float) -> str | None:
    at_lr = final[(final["lr"] - lr).abs() < 1e-12].set_index("model")
    stuck = [
        m for m in MODELS if m in at_lr.index and (at_lr.loc[m, "mean"] < CHANCE_LEVEL or at_lr.loc[m, "diverged"])
    ]
    if not stuck:
        return None
    return f"lr {lr:g}: {' and '.join(stuck)} did not learn (final accuracy below {CHANCE_LEVEL:g} % or diverged)."


def summary(result: IntroResult, lr: float | None = None) -> Summary:
    """This run's final accuracy (mean [95 % interval] over seeds) per model and lr, article 2's words, a verdict:
    with ``lr`` the rows at that rate (Figures 1 and 2); without, all rows and each model's cost of the higher rate."""
    table = result.table
    final = results.accuracy_summary(table, by=("lr", "model"))
    final = final.sort_values(["lr", "model"], key=lambda s: s.map(MODELS.index) if s.name == "model" else s)
    if lr is not None:
        require(table, lr=lr)
        final = final[(final["lr"] - lr).abs() < 1e-12]
    shown = final[["model", "lr", "accuracy (%)", "seeds", "diverged"]].rename(
        columns={"accuracy (%)": "final test accuracy (%) this run", "diverged": "diverged runs"}
    )
    epochs = int(table["epoch"].max())
    shown.insert(2, "epochs", epochs)
    reproduces = _reproduces(lr) if lr is not None else "article2/fig3"
    verdicts = [
        f"Article 2 ({reproduces.split('/')[-1]}, its words, no numbers given): "
        f"{article.SAID.get(reproduces, 'no such figure in article 2')}"
    ]
    lrs = [lr] if lr is not None else sorted(final["lr"].unique())
    verdicts += _rule_lines(result, reproduces)
    verdicts += [line for line in (_stuck(final, value) for value in lrs) if line]
    if lr is None and len(lrs) >= 2:
        verdicts.append(_lr_cost(final, lrs[0], lrs[-1]))
    return Summary(shown.reset_index(drop=True), verdicts)


def _lr_cost(final: pd.DataFrame, low: float, high: float) -> str:
    by = final.set_index(["model", "lr"])["mean"]
    parts = [f"{m} {by[(m, high)] - by[(m, low)]:+.1f} points" for m in MODELS if (m, low) in by and (m, high) in by]
    return f"Going from lr {low:g} to lr {high:g} changes the final accuracy by: {', '.join(parts)}."


def summary_table(result: IntroResult):
    """Figure 3's numbers, saved (``01_dnn_final_accuracy``), its verdicts as caption; shown with them under it."""
    found = summary(result)
    about = dict(reproduces="article2/fig3", caption=" ".join(found.verdicts[1:]))
    return replace(figures.save_table(found.table, "01_dnn_final_accuracy", result, **about), output=found)


def claims_table(result):
    """Article 2's claims about its DNNs (Figures 1-3), judged by the book's one rule; saved as ``NN_claims``."""
    found = figures_1_to_3(result.table, result.settings)
    return figures.save_claims(result, found, article.findings(result.settings))
