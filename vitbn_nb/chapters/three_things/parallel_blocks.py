"""Chapter 07 (a): depth ``d`` against ``d / branches`` parallel blocks with the same parameters (Touvron et al.),
every run timed in the same interleaved rounds so that the rule judges them round by round."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd
import torch

from ... import data, timing
from ...judging import verdicts
from ...publishing import figures, results
from ...store import runs
from ...store.runs import RunConfig
from ...system import pick_device
from . import common as shared
from .settings import ThreeThingsSettings

STYLES = {"sequential": "-", "parallel": "--"}


ParallelResult = shared.PartResult


def plan(settings: ThreeThingsSettings) -> list[RunConfig]:
    """Each model at each depth, sequential and parallel, every random seed."""
    return [c for _, c in shared.parallel_pairs(settings)]


def latencies_ms(models: dict, images, *, repeats: int) -> dict:
    """Milliseconds per image of each model's eval-mode forward pass over ``images``, one pass of every model per
    round, ``repeats`` rounds after one warm-up pass each (:func:`vitbn_nb.timing.interleave`)."""

    def runner(model):
        model.eval()

        @torch.inference_mode()
        def one(n: int) -> dict:
            start = timing.clock(images.device)
            for _ in range(n):
                model(images)
            return {"seconds": (timing.clock(images.device) - start) / n}

        return one

    rounds = timing.interleave({k: runner(m) for k, m in models.items()}, warmup=1, repeats=repeats, length=1)
    return {k: [1000 * r["seconds"] / len(images) for r in timed] for k, timed in rounds.items()}


def _latency_name(batch: int, repeats: int) -> str:
    return f"inference ms per image: batch {batch}, {repeats} rounds interleaved with the chapter's other runs"


def run(settings: ThreeThingsSettings, force: bool = False, device=None) -> ParallelResult:
    """Train (or reuse) every run of (a), then time each model's inference on the training device."""
    device = pick_device(device)
    table, trained = shared.train_labelled(shared.parallel_pairs(settings), force=force)
    seconds = shared.median_epoch(table)
    images, _ = data.load_mnist(train=False)
    batch_1 = data.to_float(images[:1]).to(device)
    batch_n = data.to_float(images[: settings.latency_batch]).to(device)
    batches = {"latency_1": batch_1, "latency_n": batch_n}
    names = {key: _latency_name(len(batch), settings.latency_repeats) for key, batch in batches.items()}
    missing = [r for r in trained if any(n not in r.record.get("measurements", {}) for n in names.values())]
    timed = {}
    if missing:  # time every run again, together: rounds only pair up when all were timed in them
        models = {r.run_id: r.load_model(device) for r in trained}
        timed = {key: latencies_ms(models, batch, repeats=settings.latency_repeats) for key, batch in batches.items()}
    rows = []
    for run_ in trained:
        label = table.loc[table["run_id"] == run_.run_id].iloc[0]
        rounds = {
            # when one run had to be timed, every run was, in the same rounds: all keep the new rounds
            key: runs.measured(
                run_, names[key], lambda key=key, run_=run_: timed[key][run_.run_id], device, retake=bool(missing)
            )
            for key in batches
        }
        rows.append(
            {
                "run_id": run_.run_id,
                "model": label["model"],
                "variant": label["variant"],
                "blocks": label["blocks"],
                "total_depth": label["total_depth"],
                "seed": label["seed"],
                "parameters": run_.record["parameters"]["total"],
                "train_seconds": seconds.get(run_.run_id, float("nan")),
                **{key: float(pd.Series(values).median()) for key, values in rounds.items()},
                **{f"{key}_rounds": list(values) for key, values in rounds.items()},
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
    summary = shared.means(per_run[per_run["total_depth"] == depths[0]], "train_seconds", "latency_1")
    shared.bar_panels(
        axes[-2:],
        summary,
        variants,
        [
            ("train_seconds", "train time per epoch (s)", f"training time ({first})"),
            ("latency_1", "latency per image (ms)", f"inference latency, batch of 1 ({first})"),
        ],
    )
    shared.model_legend(fig, settings.models, variants)
    fig.suptitle(f"Parallel blocks: {b} MHSA + {b} FFN branches per block at the same parameter count")
    caption = (
        "Sequential blocks against parallel blocks with the same parameters: test accuracy per epoch "
        "(solid sequential, dashed parallel), training time per epoch and inference "
        f"latency at batch 1 ({timing.TIMING_NOTE}). ({figures.spread_label(result.table)}; "
        f"{shared.times_note(result.table)})."
    )
    return shared._save(fig, "parallel_blocks", result, caption)


def blocks_table(result: ParallelResult):
    """Per model and structure: parameters, final accuracy (mean [95 % interval]), train time, latency; saved."""
    settings = result.settings
    rows = shared.table(
        result.per_run,
        ["total_depth", "model", "variant"],
        lambda key, group: {
            "model": key[1],
            "blocks (depth x branches)": group["blocks"].iloc[0],
            "parameters": int(group["parameters"].iloc[0]),
            "final accuracy (%)": results.spread(group["final_acc"], 2),
            "train s/epoch (median epoch, mean over seeds)": group["train_seconds"].mean(),
            "latency, batch 1 (ms/image): median [95 % interval of the rounds' mean]": _spread(group, "latency_1"),
            f"latency, batch {settings.latency_batch} (ms/image): median [interval]": _spread(group, "latency_n"),
        },
    )
    caption = (
        f"Sequential vs parallel blocks at equal parameters (latency: eval-mode forward pass, "
        f"{timing.TIMING_NOTE}, {settings.latency_repeats} rounds interleaved across the runs; seeds pooled; "
        f"{shared.times_note(result.table)})"
    )
    return shared._save(rows, "parallel_blocks_table", result, caption)


def _spread(group: pd.DataFrame, key: str) -> str:
    values = [v for rounds in group[f"{key}_rounds"] for v in rounds]
    _, low, high, _ = verdicts.interval(values)
    return f"{pd.Series(values).median():.3f} [{low:.3f}, {high:.3f}]"


def latency_verdict(group: pd.DataFrame, model: str, key: str) -> str:
    """Parallel against sequential latency of ``model`` by the rule, each seed's rounds paired (timed together)."""
    rates = {}
    for variant in ("parallel", "sequential"):
        runs_ = group[(group["model"] == model) & (group["variant"] == variant)].sort_values("seed")
        rates[variant] = [1 / v for rounds in runs_[f"{key}_rounds"] for v in rounds]
    return verdicts.speed_text(
        verdicts.speed_ratio(f"{model}: parallel against sequential, {key}", rates["parallel"], rates["sequential"])
    )


def claims(result: ParallelResult):
    """Touvron et al.'s statements about parallel blocks next to what this run measured."""
    out = []
    for depth, group in result.per_run.groupby("total_depth", sort=False):
        params = group.groupby(["model", "variant"])["parameters"].first().unstack()
        equal = (params["parallel"] == params["sequential"]).all()
        latency = lambda key, group=group: "; ".join(
            f"{m}: {latency_verdict(group, m, key)}" for m in group["model"].unique()
        )
        trained = shared.ratio_text(group, "train_seconds", "sequential", "parallel")
        trained += " (runs trained one after another, not in interleaved rounds: shown, not judged)"
        same, batch = "equal for every model" if equal else f"differ: {params.to_dict()}", result.settings.latency_batch
        accuracy = shared.difference_text(group, "parallel", "sequential")
        out += [
            (f"same parameters (depth {depth})", "parallel_parameters", same),
            (f"accuracy, parallel - sequential (depth {depth})", "parallel_accuracy", accuracy),
            (
                f"latency at batch 1, sequential / parallel (depth {depth})",
                "parallel_latency_1",
                latency("latency_1") + " (parallel against sequential, by the rule)",
            ),
            (
                f"latency at batch {batch}, sequential / parallel (depth {depth})",
                "parallel_latency_n",
                latency("latency_n"),
            ),
            (f"training time per epoch, sequential / parallel (depth {depth})", "parallel_training", trained),
        ]
    return shared.said_and_measured(out)
