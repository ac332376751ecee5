"""Chapter 04's search, as it went: article 1's Figure 7 for every model (the best accuracy per trial and where the
trials searched) and what the optimisation cost."""

from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from ... import hpo
from ...models import AS_RUN_DEPTH
from ...publishing import figures
from ...publishing.results import epochs_text
from .numbers import MODELS, model_label
from .study import OPTIMISATION_STATE, BayesOptResult

_MARKERS = {"centre": "D", "Sobol": "o", "BoTorch": "*"}


def fig7_figure(result: BayesOptResult):
    """Article 1's Figure 7 for every model: best-so-far accuracy per trial, and where the trials searched."""
    settings = result.settings
    # the retrained (first) search of each model and depth; a second search seed is the table beside it
    trials = result.trials[result.trials["search"] == 0] if "search" in result.trials else result.trials
    figures.use_style()
    present = [(m, d) for m in MODELS for d in sorted(set(trials.loc[trials["model"] == m, "depth"]))]
    fig = plt.figure(figsize=(4.4 * max(3, len(present)), 8.2))
    grid = fig.add_gridspec(2, len(present), height_ratios=[1.1, 1])
    top = fig.add_subplot(grid[0, :])
    initial = min(hpo.INITIAL_TRIALS, int(trials["trial"].max()))
    top.axvspan(0.5, initial + 0.5, color="0.92", zorder=0)
    small = dict(fontsize=8, color="0.35", va="bottom")
    top.text(0.6, 0.02, "initialisation\n(centre + Sobol)", transform=top.get_xaxis_transform(), **small)
    last = int(trials["trial"].max())
    for model, depth in present:
        one = trials[(trials["model"] == model) & (trials["depth"] == depth)].sort_values("trial")
        colour, dashes = figures.color(model), "-" if depth == AS_RUN_DEPTH[model] else "--"
        # Carry the last best to the edge so the final trial's step is visible as a level, not a riser.
        steps = ([*one["trial"], last + 0.45], [*one["best_so_far"], one["best_so_far"].iloc[-1]])
        label = f"{model_label(model, one['depth'].iloc[0])}: best so far"
        top.step(*steps, where="post", color=colour, linestyle=dashes, linewidth=2.2, label=label)
        for generator, marker in _MARKERS.items():
            points, look = one[one["generator"] == generator], dict(s=70 if marker == "*" else 30, alpha=0.55)
            top.scatter(points["trial"], points["accuracy"], color=colour, marker=marker, edgecolor="none", **look)
    best = trials["best_so_far"]
    spread = max(best.max() - best.min(), 1.0)
    top.set_ylim(max(0.0, best.min() - 0.35 * spread), min(100.0, best.max() + 0.15 * spread))
    below = int((trials["accuracy"] < top.get_ylim()[0]).sum())
    if below:
        text = f"{below} trial(s) below the axis (see the panels below)"
        top.text(0.99, 0.02, text, transform=top.transAxes, ha="right", **small)
    top.set(
        xlabel="trial",
        ylabel=f"test accuracy after {epochs_text(settings.trial_epochs)} (%)",
        title="best-so-far accuracy per trial (dots: each trial; ◆ centre, ● Sobol, ★ BoTorch)",
    )
    figures.integer_epochs(top)
    top.set_xlim(0.5, last + 0.5)
    top.legend(loc="lower right", fontsize=9)

    # One colour scale for the three panels, spanning the good trials: a few failed trials (chance level)
    # would otherwise squeeze every good one into the same colour.
    vmax = float(trials["accuracy"].max())
    vmin = max(float(trials["accuracy"].min()), vmax - 15.0)
    if vmax - vmin < 1.0:
        vmin = vmax - 1.0
    for i, (model, depth) in enumerate(present):
        ax = fig.add_subplot(grid[1, i])
        one = trials[(trials["model"] == model) & (trials["depth"] == depth)]
        for generator, marker in _MARKERS.items():
            points = one[one["generator"] == generator]
            look = dict(cmap="viridis", vmin=vmin, vmax=vmax, s=150 if marker == "*" else 55, edgecolor="0.2")
            shown = ax.scatter(
                points["lr"], points["batch_size"], c=points["accuracy"], marker=marker, linewidth=0.5, **look
            )
        text = dict(xytext=(4, 3), textcoords="offset points", fontsize=7, color="0.25")
        for _, row in one.iterrows():
            ax.annotate(str(int(row["trial"])), (row["lr"], row["batch_size"]), **text)
        top_row = hpo.best_trial(one)
        label = f"best: lr {top_row['lr']:.2g}, batch {int(top_row['batch_size'])}"
        look = dict(s=260, facecolor="none", edgecolor="crimson", linewidth=1.6)
        ax.scatter([top_row["lr"]], [top_row["batch_size"]], label=label, **look)
        low, high = hpo.SEARCH_SPACE[model]["lr"]
        ax.set_xscale("log")
        ax.set_xlim(low / 1.5, high * 1.5)
        ax.set_ylim(15, 125)
        ax.set(
            xlabel="learning rate (log scale)",
            ylabel="batch size",
            title=f"{model_label(model, one['depth'].iloc[0])}: where the trials went",
        )
        ax.legend(loc="upper left", fontsize=8)
    extend = "min" if vmin > trials["accuracy"].min() else "neither"
    fig.colorbar(shown, ax=fig.axes[1:], shrink=0.85, extend=extend, label="trial accuracy (%)")
    fig.suptitle(
        f"Article 1 Fig 7 · Bayesian optimisation (Ax + BoTorch), {settings.trials} trials per model, "
        f"MNIST ({epochs_text(settings.trial_epochs)} per trial)\nthe article showed ViTBNFFN only; here every "
        f"model, {' and '.join(settings.configurations)} (as run: ViT depth 6, BN models depth 1"
        + ("; dashed: BN models at depth 6, as written)" if len(present) > len(MODELS) else ")")
    )
    caption = (
        f"Best-so-far test accuracy vs trial for each model (top) and the (lr, batch size) of every trial, "
        f"coloured by its accuracy (bottom); trials 1-{initial} are Ax's initialisation, later ones BoTorch's"
    )
    return figures.save_figure(
        fig, "article1_fig7", result, reproduces="article1/fig7", caption=caption, runs=trials, reads=OPTIMISATION_STATE
    )


def ax_costs(result: BayesOptResult) -> pd.DataFrame:
    """What the optimisation cost: Ax's import and suggestion times next to the trials' training time."""
    trials = result.trials
    row = lambda what, seconds, n: {"what": what, "seconds": seconds, "n": n}
    rows = [row("import Ax (this process)", hpo.ax_import_seconds, 1 if hpo.ax_import_seconds else 0)]
    for generator in ("centre", "Sobol", "BoTorch"):
        seconds = trials.loc[trials["generator"] == generator, "suggest_seconds"].dropna()
        rows.append(
            row(f"one {generator} suggestion (median)", seconds.median() if len(seconds) else np.nan, len(seconds))
        )
    trial = "one {} trial: training + testing, wall time as it ran (median)"
    rows += [
        row(trial.format(f"{m} d{d}"), g["train_seconds"].median(), len(g))
        for (m, d), g in trials.groupby(["model", "depth"], sort=False)
    ]
    frame = pd.DataFrame(rows)
    frame["seconds"] = frame["seconds"].astype(float).round(3)
    return frame
