"""Chapter 07's shared parts: the runs its three parts share, the pieces of their figures and tables."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from ...engines import training
from ...judging import verdicts
from ...judging.selection import shown_times
from ...publishing import figures, results
from ...store import runs
from ...store.runs import RunConfig
from .article import SAID
from .settings import ThreeThingsSettings


@dataclass(frozen=True)
class PartResult(results.ChapterResult):
    """A part's runs (``table``: one row per run and epoch) and one row per run of measurements (``per_run``)."""

    settings: ThreeThingsSettings
    table: pd.DataFrame
    per_run: pd.DataFrame


def config(settings: ThreeThingsSettings, model: str, seed: int, **model_kwargs) -> RunConfig:
    """A 28x28 MNIST run of ``model`` at the chapter's epochs, lr and sizes."""
    return RunConfig.from_settings(
        settings, model=model, model_kwargs=model_kwargs, dataset="mnist", lr=settings.lr, seed=seed
    )


def parallel_pairs(settings: ThreeThingsSettings) -> list[tuple[dict, RunConfig]]:
    """(labels, config): each model at each depth, sequential and with ``branches`` parallel branches."""
    out, b = [], settings.branches
    # the settings refuse a depth that is no multiple of branches
    for depth, model, seed in itertools.product(settings.depths, settings.models, range(settings.seeds)):
        for variant, kwargs in (("sequential", dict(depth=depth)), ("parallel", dict(depth=depth // b, branches=b))):
            label = {"variant": variant, "blocks": f"{kwargs['depth']} x {kwargs.get('branches', 1)}"}
            out.append(({**label, "total_depth": depth}, config(settings, model, seed, **kwargs)))
    return out


def sequential_configs(settings: ThreeThingsSettings) -> list[RunConfig]:
    """(a)'s sequential runs at the first depth: (b)'s starting points and (c)'s linear-stem baselines."""
    seeds = itertools.product(settings.models, range(settings.seeds))
    return [config(settings, model, seed, depth=settings.depths[0]) for model, seed in seeds]


def _save(output, name: str, result, caption: str):
    """Save one of the chapter's figures or tables as ``07_<name>``, reproducing ``new/<name>``."""
    save = figures.save_table if isinstance(output, pd.DataFrame) else figures.save_figure
    return save(output, f"07_{name}", result, reproduces=f"new/{name}", caption=caption)


def train_labelled(pairs, *, force: bool = False, own=None, train: bool = True) -> tuple[pd.DataFrame, list]:
    """Train (or reuse) the configs of ``(labels, config)`` pairs: a per-epoch table with the labels; ``force`` retrains
    only those in ``own`` (all when None): a part never retrains the runs it borrows; ``train=False`` trains none."""
    configs = [c for _, c in pairs]
    owned = configs if own is None else [c for c in configs if c in own]
    if force and owned:
        training.train_all(owned, force=True, train=train)
    trained = training.train_all(configs, progress=not force, train=train)
    table = runs.load_table(trained)
    labels = pd.DataFrame([{"run_id": run.run_id, **label} for (label, _), run in zip(pairs, trained)])
    return table.merge(labels, on="run_id"), trained


def per_run(pairs, trained, measure) -> pd.DataFrame:
    """One row per run of ``(labels, config)`` pairs: its id, model, labels, seed, ``measure(labels, run)``'s values
    and its final accuracy."""
    return pd.DataFrame(
        [
            {
                "run_id": run.run_id,
                "model": run.config.model,
                **label,
                "seed": run.config.seed,
                **measure(label, run),
                "final_acc": run.final_accuracy,
            }
            for (label, _), run in zip(pairs, trained)
        ]
    )


def part_figure(result, name: str, styles: dict, accuracy, summary, bars, title: str, caption: str, *, width: float):
    """A part's figure, saved as ``07_<name>``: an accuracy panel per ``(rows, title)`` of ``accuracy`` (a line style
    per variant of ``styles``), then the :func:`bar_panels` ``bars`` of ``summary``, one legend below."""
    variants = list(styles)
    fig, axes = plt.subplots(1, len(accuracy) + len(bars), figsize=(width, 4.4))
    for ax, (rows, panel) in zip(axes, accuracy):
        accuracy_panel(ax, rows, variants, styles, panel)
    bar_panels(axes[len(accuracy) :], summary, variants, bars)
    model_legend(fig, result.settings.models, variants)
    fig.suptitle(title)
    return _save(fig, name, result, caption)


def median_epoch(table: pd.DataFrame, seconds=lambda epochs: epochs["train_seconds"]) -> pd.Series:
    """Per run of ``table`` (a part's run table): the median over its epochs of ``seconds`` (a time per epoch), over
    the epochs whose seconds the book may show (:func:`~vitbn_nb.judging.selection.shown_times`: none timed beside
    other work, all on the machine that timed most of the part); NaN for a run with none."""
    shown = shown_times(table)
    return seconds(shown).groupby(shown["run_id"]).median()


def times_note(table: pd.DataFrame) -> str:
    """A caption's account of :func:`median_epoch`'s times over ``table``."""
    return f"time per epoch: each run's median epoch, the mean over seeds; {results.times_left_out(table)}"


def said_and_measured(rows) -> pd.DataFrame:
    """Touvron et al.'s statements beside this run's: ``rows`` of (question, key of :data:`.article.SAID`, this run)."""
    frame = pd.DataFrame(
        [(question, SAID[key], measured) for question, key, measured in rows],
        columns=["question", "Touvron et al. report", "this run"],
    )
    return sentences(frame)


def sentences(table: pd.DataFrame):
    """A table of sentences, shown whole (pandas would cut long cells at 50 characters); ``.data`` is the frame."""
    return (
        table.style.hide(axis="index")
        .set_properties(**{"text-align": "left", "white-space": "normal", "vertical-align": "top"})
        .set_table_styles([{"selector": "th", "props": [("text-align", "left")]}])
    )


def means(per_run: pd.DataFrame, *columns: str) -> pd.DataFrame:
    """Per model and variant: the mean of each of ``columns`` over the seeds."""
    return per_run.groupby(["model", "variant"], sort=False)[list(columns)].mean().reset_index()


def table(per_run: pd.DataFrame, keys: list[str], row) -> pd.DataFrame:
    """One row per group of ``per_run`` by ``keys``: ``row(key values, group) -> dict``, plus its seeds."""
    return pd.DataFrame([{**row(key, group), "seeds": len(group)} for key, group in per_run.groupby(keys, sort=False)])


def bar_panels(axes, summary: pd.DataFrame, variants: list[str], panels) -> None:
    """Grouped bars on ``axes`` in turn, one per ``(value, ylabel, title[, annotate])`` of ``panels``: one group per
    model, one bar per variant (hatched after the first); ``annotate(row)`` labels the bars."""
    models = list(dict.fromkeys(summary["model"]))
    width = 0.8 / len(variants)
    for ax, (value, ylabel, title, *annotate) in zip(axes, panels):
        for i, variant in enumerate(variants):
            rows = summary[summary["variant"] == variant].set_index("model").reindex(models)
            x = np.arange(len(models)) + (i - (len(variants) - 1) / 2) * width
            drawn = ax.bar(x, rows[value], width, color=[figures.color(m) for m in models], linewidth=0.6, **_look(i))
            if annotate:
                ax.bar_label(drawn, labels=[annotate[0](row) for _, row in rows.iterrows()], fontsize=8, padding=2)
        ax.set_xticks(np.arange(len(models)), models)
        ax.set(ylabel=ylabel, title=title)
        values = summary[value].to_numpy(dtype=float)
        if np.isnan(values).all():  # a time none of whose epochs the book may show (all timed beside other work)
            ax.text(0.5, 0.5, "no time shown", transform=ax.transAxes, ha="center", va="center", color="0.4")
        top = np.nanmax(values) if not np.isnan(values).all() else np.nan
        ax.set_ylim(0, 1.2 * top if np.isfinite(top) and top > 0 else 1)  # room for the labels above the bars


def _look(i: int) -> dict:
    """The bars of the i-th variant: solid for the first, hatched and paler after."""
    return dict(alpha=1.0 if i == 0 else 0.55, hatch=None if i == 0 else "//", edgecolor="0.25")


def model_legend(fig, models, variants: list[str]):
    """One legend under the figure: a colour per model, then the bar style of each variant."""
    handles = [Patch(color=figures.color(m), label=m) for m in models]
    handles += [Patch(facecolor="0.6", label=f"{variant} (bars)", **_look(i)) for i, variant in enumerate(variants)]
    fig.legend(handles=handles, loc="outside lower center", ncol=len(handles), title=None)


def accuracy_panel(ax, table: pd.DataFrame, variants: list[str], styles: dict[str, str], title: str):
    for (model, variant), group in table.groupby(["model", "variant"], sort=False):
        look = dict(label=f"{model} {variant}", color=figures.color(model), linestyle=styles[variant], marker="o")
        figures.mean_band(ax, group, x="epoch", y="test_acc", **look)
    ax.set(xlabel="epoch", ylabel="test accuracy (%)", title=title)
    epochs = sorted(table["epoch"].unique())
    if len(epochs) <= 12:
        ax.set_xticks(epochs)
        ax.set_xlim(epochs[0] - 0.5, epochs[-1] + 0.5)
    else:
        figures.integer_epochs(ax)
    handles = [Line2D([], [], color="0.3", linestyle=styles[v], label=v) for v in variants]
    ax.legend(handles=handles, loc="best", title="variant")


def difference_text(per_run: pd.DataFrame, a: str, b: str, value: str = "final_acc") -> str:
    """Per model: final accuracy of a minus b (pp), paired by random seed, with its 95 % interval where there are
    enough seeds for the book's rule; with fewer, the text says the differences are shown, not judged."""
    parts, seeds = [], []
    for model, group in per_run.groupby("model", sort=False):
        pivot = group.pivot_table(index="seed", columns="variant", values=value)
        mean, low, high, n = verdicts.interval(list(pivot[a] - pivot[b]))
        seeds.append(n)
        bounds = f" [{low:+.2f}, {high:+.2f}]" if n >= verdicts.MIN_SEEDS else ""
        parts.append(f"{model} {mean:+.2f}{bounds} pp")
    fewest = min(seeds, default=0)
    which = "seed" if fewest == 1 else "seeds"
    if fewest < verdicts.MIN_SEEDS:
        return ", ".join(parts) + f" ({fewest} {which}: {verdicts.NOT_JUDGED})"
    return ", ".join(parts) + f" (mean and 95 % interval over {fewest} seeds)"


def ratio_text(per_run: pd.DataFrame, value: str, a: str, b: str) -> str:
    """Per model: mean(value of variant a) / mean(value of variant b)."""
    means = {model: group.groupby("variant")[value].mean() for model, group in per_run.groupby("model", sort=False)}
    shown = lambda ratio: f"{ratio:.2f}x" if pd.notna(ratio) else "no time shown"
    return ", ".join(f"{model} {shown(m[a] / m[b])}" for model, m in means.items())
