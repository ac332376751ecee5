"""Chapter 07 (a): depth ``d`` against ``d / branches`` parallel blocks with the same parameters (Touvron et al.),
every run timed in the same interleaved rounds so that the rule judges them round by round."""

from __future__ import annotations

from functools import partial

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


def plan(settings: ThreeThingsSettings) -> list[RunConfig]:
    """Each model at each depth, sequential and parallel, every random seed."""
    return [c for _, c in shared.parallel_pairs(settings)]


def latencies_ms(models: dict, images, *, repeats: int) -> dict:
    """Milliseconds per image of each model's eval-mode forward pass over ``images``, one pass of every model per
    round, ``repeats`` rounds after one warm-up pass each (:func:`vitbn_nb.timing.interleave`)."""

    def runner(model):
        forward = torch.inference_mode()(partial(model.eval(), images))
        return lambda n: {"seconds": timing.block(forward, calls=n, device=images.device)}

    rounds = timing.interleave({k: runner(m) for k, m in models.items()}, warmup=1, repeats=repeats, length=1)
    return {k: [1000 * r["seconds"] / len(images) for r in timed] for k, timed in rounds.items()}


def run(settings: ThreeThingsSettings, force: bool = False, device=None) -> shared.PartResult:
    """Train (or reuse) every run of (a), then time each model's inference on the training device."""
    device = pick_device(device)
    pairs = shared.parallel_pairs(settings)
    table, trained = shared.train_labelled(pairs, force=force, train=settings.train)
    seconds = shared.median_epoch(table)
    images, _ = data.load_mnist(train=False)
    batches = {
        key: data.to_float(images[:n]).to(device)
        for key, n in (("latency_1", 1), ("latency_n", settings.latency_batch))
    }
    names = {
        key: f"inference ms per image: batch {len(batch)}, {settings.latency_repeats} rounds interleaved with the "
        "chapter's other runs"
        for key, batch in batches.items()
    }
    missing = [r for r in trained if any(n not in r.record.get("measurements", {}) for n in names.values())]
    timed = {}
    if missing:  # time every run again, together: rounds only pair up when all were timed in them
        models = {r.run_id: r.load_model(device) for r in trained}
        timed = {key: latencies_ms(models, batch, repeats=settings.latency_repeats) for key, batch in batches.items()}

    def measure(label, run_):
        # when one run had to be timed, every run was, in the same rounds: all keep the new rounds
        rounds = {
            key: runs.measured(run_, names[key], lambda key=key: timed[key][run_.run_id], device, retake=bool(missing))
            for key in batches
        }
        return {
            "parameters": run_.record["parameters"]["total"],
            "train_seconds": seconds.get(run_.run_id, float("nan")),
            **{key: float(pd.Series(values).median()) for key, values in rounds.items()},
            **{f"{key}_rounds": list(values) for key, values in rounds.items()},
        }

    return shared.PartResult(settings, table, shared.per_run(pairs, trained, measure))


def blocks_figure(result: shared.PartResult):
    """Accuracy per epoch at each depth, training time and latency at batch 1; saved as ``new/parallel_blocks``."""
    table, per_run, settings = result.table, result.per_run, result.settings
    depths, b = settings.depths, settings.branches
    first = f"depth {depths[0]} vs {depths[0] // b} x {b}"
    caption = (
        "Sequential blocks against parallel blocks with the same parameters: test accuracy per epoch "
        "(solid sequential, dashed parallel), training time per epoch and inference "
        f"latency at batch 1 ({timing.TIMING_NOTE}). ({figures.spread_label(result.table)}; "
        f"{shared.times_note(result.table)})."
    )
    return shared.part_figure(
        result,
        "parallel_blocks",
        STYLES,
        [(table[table["total_depth"] == d], f"accuracy: depth {d} vs {d // b} x {b}") for d in depths],
        shared.means(per_run[per_run["total_depth"] == depths[0]], "train_seconds", "latency_1"),
        [
            ("train_seconds", "train time per epoch (s)", f"training time ({first})"),
            ("latency_1", "latency per image (ms)", f"inference latency, batch of 1 ({first})"),
        ],
        f"Parallel blocks: {b} MHSA + {b} FFN branches per block at the same parameter count",
        caption,
        width=5 * (len(depths) + 2),
    )


def blocks_table(result: shared.PartResult):
    """Per model and structure: parameters, final accuracy (mean [95 % interval]), train time, latency; saved."""
    settings = result.settings
    rows = shared.table(
        result.per_run,
        ["total_depth", "model", "variant"],
        lambda key, group: {
            "model": key[1],
            "blocks (depth x branches)": group["blocks"].iloc[0],
            "parameters": int(group["parameters"].iloc[0]),
            "final accuracy (%)": results.accuracy(group["final_acc"], 2),
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


def comparison(result: shared.PartResult):
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
        first = latency("latency_1") + " (parallel against sequential, by the rule)"
        ratio = f"sequential / parallel (depth {depth})"
        out += [
            (f"same parameters (depth {depth})", "parallel_parameters", same),
            (f"accuracy, parallel - sequential (depth {depth})", "parallel_accuracy", accuracy),
            (f"latency at batch 1, {ratio}", "parallel_latency_1", first),
            (f"latency at batch {batch}, {ratio}", "parallel_latency_n", latency("latency_n")),
            (f"training time per epoch, {ratio}", "parallel_training", trained),
        ]
    return shared.said_and_measured(out)
