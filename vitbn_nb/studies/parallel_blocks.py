"""Chapter 07 (a): sequential blocks against parallel blocks with the same parameters (Touvron et al.).

Depth ``d`` against ``d / branches`` blocks of ``branches`` MHSA and FFN branches: test accuracy per
epoch, training time per epoch (median over epochs, from the run store) and inference latency at
batch 1 and at ``latency_batch`` (median of ``latency_repeats`` timed passes on the training device).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import matplotlib.pyplot as plt
import pandas as pd

from .. import articles, data, figures, results, runs
from ..bench import timing
from ..profiles import ThreeThingsSettings
from ..runs import RunConfig
from ..system import pick_device
from . import three_things as shared

STYLES = {"sequential": "-", "parallel": "--"}


@dataclass(frozen=True)
class ParallelResult(results.ChapterResult):
    """(a)'s runs (``table``: one row per run and epoch) and one row per run of measurements (``per_run``)."""

    settings: ThreeThingsSettings
    table: pd.DataFrame
    per_run: pd.DataFrame


def plan(settings: ThreeThingsSettings) -> list[RunConfig]:
    """Each model at each depth, sequential and parallel, every random seed."""
    return [c for _, c in shared.parallel_pairs(settings)]


def latency_ms(model, images, *, repeats: int) -> float:
    """Milliseconds per image of an eval-mode forward pass over ``images`` (median of ``repeats``)."""
    import torch

    model.eval()
    with torch.inference_mode():
        timed = timing.repeat(lambda: model(images), repeats=repeats, device=images.device)
    return 1000 * timed.seconds / len(images)


def run(settings: ThreeThingsSettings, force: bool = False, device=None) -> ParallelResult:
    """Train (or reuse) every run of (a), then time each model's inference on the training device."""
    device = pick_device(device)
    table, trained = shared.train_labelled(shared.parallel_pairs(settings), force=force)
    images, _ = data.load_mnist(train=False)
    batch_1 = data.to_float(images[:1]).to(device)
    batch_n = data.to_float(images[: settings.latency_batch]).to(device)
    rows = []
    for run_ in trained:
        label = table.loc[table["run_id"] == run_.run_id].iloc[0]
        load = functools.cache(lambda run_=run_: run_.load_model(device))  # only when a latency was never measured
        rows.append(
            {
                "run_id": run_.run_id,
                "model": label["model"],
                "variant": label["variant"],
                "blocks": label["blocks"],
                "total_depth": label["total_depth"],
                "seed": label["seed"],
                "parameters": run_.record["parameters"]["total"],
                "train_seconds": run_.metrics["train_seconds"].median(),
                **{
                    name: runs.measured(
                        run_,
                        f"inference ms per image: batch {len(batch)}, median of {settings.latency_repeats}",
                        lambda batch=batch, load=load: latency_ms(load(), batch, repeats=settings.latency_repeats),
                        device,
                    )
                    for name, batch in (("latency_1", batch_1), ("latency_n", batch_n))
                },
                "final_acc": run_.final_accuracy,
            }
        )
    return ParallelResult(settings, table, pd.DataFrame(rows))


def blocks_figure(result: ParallelResult):
    """Accuracy per epoch at each depth, training time and latency at batch 1; saved as ``new/parallel_blocks``."""
    table, per_run, settings = result.table, result.per_run, result.settings
    depths, b = settings.depths, settings.branches
    variants = list(STYLES)
    fig, axes = plt.subplots(1, len(depths) + 2, figsize=(5 * (len(depths) + 2), 4.4))
    for ax, depth in zip(axes, depths):
        shared.accuracy_panel(
            ax, table[table["total_depth"] == depth], variants, STYLES, f"accuracy: depth {depth} vs {depth // b} x {b}"
        )
    first = f"depth {depths[0]} vs {depths[0] // b} x {b}"
    summary = (
        per_run[per_run["total_depth"] == depths[0]]
        .groupby(["model", "variant"], sort=False)
        .agg(train_seconds=("train_seconds", "mean"), latency_1=("latency_1", "mean"))
        .reset_index()
    )
    shared.bars(
        axes[-2],
        summary,
        value="train_seconds",
        variants=variants,
        ylabel="train time per epoch (s)",
        title=f"training time ({first})",
    )
    shared.bars(
        axes[-1],
        summary,
        value="latency_1",
        variants=variants,
        ylabel="latency per image (ms)",
        title=f"inference latency, batch of 1 ({first})",
    )
    shared.model_legend(fig, settings.models, variants)
    fig.suptitle(f"Parallel blocks: {b} MHSA + {b} FFN branches per block at the same parameter count")
    return figures.save_figure(
        fig,
        "07_parallel_blocks",
        result,
        reproduces="new/parallel_blocks",
        caption="Sequential blocks against parallel blocks with the same parameters: test accuracy per epoch "
        "(solid sequential, dashed parallel), training time per epoch (median over epochs) and inference "
        f"latency at batch 1 ({timing.TIMING_NOTE}).",
    )


def blocks_table(result: ParallelResult):
    """Per model and structure: parameters, final accuracy (mean ± sd), train time, latency; saved."""
    per_run, settings = result.per_run, result.settings
    rows = []
    for (_, model, _), group in per_run.groupby(["total_depth", "model", "variant"], sort=False):
        rows.append(
            {
                "model": model,
                "blocks (depth x branches)": group["blocks"].iloc[0],
                "parameters": int(group["parameters"].iloc[0]),
                "final accuracy (%)": results.mean_sd(group["final_acc"], 2),
                "train s/epoch (median)": group["train_seconds"].mean(),
                "latency, batch 1 (ms/image)": group["latency_1"].mean(),
                f"latency, batch {settings.latency_batch} (ms/image)": group["latency_n"].mean(),
                "seeds": len(group),
            }
        )
    return figures.save_table(
        pd.DataFrame(rows),
        "07_parallel_blocks_table",
        result,
        reproduces="new/parallel_blocks_table",
        caption=f"Sequential vs parallel blocks at equal parameters (latency: eval-mode forward pass, "
        f"{timing.TIMING_NOTE}, {settings.latency_repeats} repeats)",
    )


def claims(result: ParallelResult):
    """Touvron et al.'s statements about parallel blocks next to what this run measured."""
    per_run, seeds, said = result.per_run, result.settings.seeds, articles.TOUVRON
    out = []
    for depth, group in per_run.groupby("total_depth", sort=False):
        params = group.groupby(["model", "variant"])["parameters"].first().unstack()
        equal = (params["parallel"] == params["sequential"]).all()
        out += [
            {
                "question": f"same parameters (depth {depth})",
                "Touvron et al. report": said["parallel_parameters"],
                "this run": "equal for every model" if equal else f"differ: {params.to_dict()}",
            },
            {
                "question": f"accuracy, parallel - sequential (depth {depth})",
                "Touvron et al. report": said["parallel_accuracy"],
                "this run": f"{shared.difference_text(group, 'parallel', 'sequential')} "
                f"({seeds} seed{'s' * (seeds > 1)})",
            },
            {
                "question": f"latency at batch 1, sequential / parallel (depth {depth})",
                "Touvron et al. report": said["parallel_latency_1"],
                "this run": shared.ratio_text(group, "latency_1", "sequential", "parallel") + " (>1 = parallel faster)",
            },
            {
                "question": f"latency at batch {result.settings.latency_batch}, sequential / parallel (depth {depth})",
                "Touvron et al. report": said["parallel_latency_n"],
                "this run": shared.ratio_text(group, "latency_n", "sequential", "parallel"),
            },
            {
                "question": f"training time per epoch, sequential / parallel (depth {depth})",
                "Touvron et al. report": said["parallel_training"],
                "this run": shared.ratio_text(group, "train_seconds", "sequential", "parallel"),
            },
        ]
    return shared.sentences(pd.DataFrame(out))
