"""Chapter 07 (b): attention-only against full fine-tuning at 56x56 of (a)'s depth-``depths[0]`` models (Touvron
et al.): accuracy before and after, trainable parameters, memory and compute time of a step."""

from __future__ import annotations

from dataclasses import dataclass, replace

import pandas as pd

from ...data import image_sets
from ...engines import engine, finetune, training
from ...judging import verdicts
from ...models import build_model
from ...publishing import figures, results
from ...store import runs
from ...store.records import load_weights
from ...store.runs import RunConfig
from ...system import pick_device
from . import common as shared
from .settings import ThreeThingsSettings

STYLES = {"full": "-", "attention only": "--"}
MODES = {"full": "all", "attention only": "attention"}
#: What the tensor accounting of a step's memory counts (where no CUDA peak is measured).
ACCOUNTED = "weights + gradients + Adam state + tensors saved for backward"


@dataclass(frozen=True)
class FinetuneResult(shared.PartResult):
    @property
    def run_ids(self) -> list[str]:
        """The fine-tuning runs and the runs they started from."""
        return results.run_ids_of([*self.per_run["run_id"], *self.per_run["source"]])


def _pairs(settings: ThreeThingsSettings, device) -> list[tuple[dict, RunConfig]]:
    """Each source run with its two fine-tunings, the source named by the id it is stored under (any device's)."""
    out = []
    for source in shared.sequential_configs(settings):
        source_id = runs.stored_id(source, device)
        tuned = replace(
            source,
            model_kwargs={**source.model_kwargs, "image_size": 56},
            dataset="mnist56",
            epochs=settings.ft_epochs,
            lr=settings.ft_lr,
            train_size=settings.ft_train_size,
            test_size=settings.ft_test_size,
            init_from=source_id,
        )
        out += [({"variant": v, "source": source_id}, replace(tuned, trainable=t)) for v, t in MODES.items()]
    return out


def plan(settings: ThreeThingsSettings) -> list[RunConfig]:
    """The source models ((a)'s, trained first if need be), then each one fine-tuned fully and attention-only."""
    return [*shared.sequential_configs(settings), *(c for _, c in _pairs(settings, pick_device()))]


def accuracy_before(source: runs.Run, settings: ThreeThingsSettings, device) -> float:
    """The MNIST-trained model moved to 56x56 (position embedding interpolated) with no training: test accuracy."""
    model = build_model(source.config.model, **{**source.config.model_kwargs, "image_size": 56})
    state = load_weights(source.folder / "model.pt", source.run_id, source.record.get("checksums", {}).get("model.pt"))
    finetune.load_resized(model, state, source.load_model("cpu").grid_size).to(device).eval()
    _, test = image_sets("mnist56", settings.ft_train_size, settings.ft_test_size, str(device))
    return engine.evaluate(model, test, batch_size=settings.test_batch_size, device=device)["test_acc"]


def step_memory(run_: runs.Run, settings: ThreeThingsSettings, device) -> dict:
    """Memory of one training step of the fine-tuning run's model with its trainable set (MiB)."""
    model = run_.load_model(device)
    finetune.set_trainable(model, run_.config.trainable)
    train, _ = image_sets("mnist56", settings.ft_train_size, settings.ft_test_size, str(device))
    images, labels = next(train.batches(run_.config.batch_size))
    return finetune.step_memory(model, images, labels)


def run(settings: ThreeThingsSettings, force: bool = False, device=None) -> FinetuneResult:
    """Train (a)'s sources if need be (never retrained here), fine-tune each both ways, and measure."""
    device = pick_device(device)
    sources = {r.run_id: r for r in training.train_all(shared.sequential_configs(settings), train=settings.train)}
    pairs = _pairs(settings, device)
    table, trained = shared.train_labelled(pairs, force=force, train=settings.train)
    compute = shared.median_epoch(table, lambda epochs: epochs["train_seconds"] - epochs["data_seconds"])
    name = f"test accuracy at 56 px before fine-tuning: {settings.ft_test_size or 'all'} test images"
    untuned = lambda source: runs.measured(source, name, lambda: accuracy_before(source, settings, device), None)
    before = {source_id: untuned(source) for source_id, source in sources.items()}

    def measure(label, run_):
        name = f"training step memory (MiB): batch {run_.config.batch_size}"
        memory = runs.measured(run_, name, lambda: step_memory(run_, settings, device), device)
        steps = engine.steps_per_epoch(run_.record["train_images"], run_.config.batch_size)
        return {
            "trainable": run_.record["parameters"]["trainable"],
            "total": run_.record["parameters"]["total"],
            "step_ms": 1000 * compute.get(run_.run_id, float("nan")) / steps,
            **{f"memory_{key}": memory[key] for key in ("accounted", "activations", "cuda_peak")},
            "before": before[label["source"]],
        }

    return FinetuneResult(settings, table, shared.per_run(pairs, trained, measure))


def _memory_column(per_run: pd.DataFrame) -> tuple[str, str]:
    if per_run["memory_cuda_peak"].notna().all():
        return "memory_cuda_peak", "peak GPU memory per step (MiB)"
    return "memory_accounted", "tensor memory per step (MiB)"


def finetune_figure(result: FinetuneResult):
    """Accuracy (epoch 0: untuned), trainable parameters, memory and time of a step; ``new/attention_finetune``."""
    table, per_run, settings = result.table, result.per_run, result.settings
    start = per_run[["run_id", "model", "variant", "seed", "before"]].rename(columns={"before": "test_acc"})
    curves = pd.concat([start.assign(epoch=0), table[["run_id", "model", "variant", "seed", "epoch", "test_acc"]]])
    summary = shared.means(per_run, "trainable", "total", "step_ms", "memory_accounted", "memory_cuda_peak")
    summary["trainable_k"] = summary["trainable"] / 1000
    column, label = _memory_column(per_run)
    share = lambda row: f"{100 * row['trainable'] / row['total']:.0f} %"
    memory = "CUDA peak allocated" if column == "memory_cuda_peak" else ACCOUNTED
    caption = (
        "Fine-tuning models trained on 28x28 MNIST on MNIST upscaled to 56x56 (64 patches instead of 16; "
        "position embeddings interpolated bicubically): test accuracy, trainable parameters, memory of "
        f"one training step ({memory}) and compute time per step (each run's median epoch over its steps, the mean "
        f"over seeds; {results.times_left_out(result.table)})."
    )
    return shared.part_figure(
        result,
        "attention_finetune",
        STYLES,
        [(curves.sort_values("epoch"), "accuracy at 56x56 (epoch 0: no fine-tuning)")],
        summary,
        [
            ("trainable_k", "trainable parameters (thousands)", "weights updated (and stored per task)", share),
            (column, label, "memory of a training step"),
            ("step_ms", "compute time per step (ms)", "time per training step"),
        ],
        f"Fine-tuning depth-{settings.depths[0]} MNIST models at 56x56: every weight vs attention only",
        f"{caption} ({figures.spread_label(result.table)}).",
        width=19,
    )


def finetune_table(result: FinetuneResult):
    """Per model and mode: accuracy before and after, trainable share, memory and compute per step; saved."""
    settings = result.settings
    out = shared.table(
        result.per_run,
        ["model", "variant"],
        lambda key, group: {
            "model": key[0],
            "fine-tuned": key[1],
            "before fine-tuning (%)": results.accuracy(group["before"], 2),
            "final accuracy (%)": results.accuracy(group["final_acc"], 2),
            "trainable parameters": int(group["trainable"].iloc[0]),
            "of total (%)": 100 * group["trainable"].iloc[0] / group["total"].iloc[0],
            "tensor memory per step (MiB)": group["memory_accounted"].mean(),
            "of which activations (MiB)": group["memory_activations"].mean(),
            "CUDA peak per step (MiB)": group["memory_cuda_peak"].mean(),
            "compute ms/step": group["step_ms"].mean(),
        },
    )
    if out["CUDA peak per step (MiB)"].isna().all():
        out = out.drop(columns="CUDA peak per step (MiB)")
    caption = (
        "Full vs attention-only fine-tuning at 56x56 (memory: one Adam step, batch "
        f"{settings.batch_size}; step time: training compute without the data pipeline, each run's median epoch over "
        f"its steps, the mean over seeds; {results.times_left_out(result.table)})"
    )
    return shared._save(out, "attention_finetune_table", result, caption)


def comparison(result: FinetuneResult):
    """Touvron et al.'s statements about attention-only fine-tuning next to what this run measured."""
    per_run = result.per_run
    column, _ = _memory_column(per_run)

    def saving(value: str) -> str:
        parts = []
        for model, group in per_run.groupby("model", sort=False):
            means = group.groupby("variant")[value].mean()
            share = 100 * (1 - means["attention only"] / means["full"])
            parts.append(f"{model} {share:.0f} %" if pd.notna(share) else f"{model}: no time shown")
        return ", ".join(parts)

    attention = per_run[per_run["variant"] == "attention only"]
    fractions = (100 * attention["trainable"] / attention["total"]).groupby(attention["model"], sort=False).mean()
    before = per_run.groupby("model", sort=False)["before"].mean()
    accounted = " (tensor accounting: weights, gradients, Adam state, saved activations)"
    # one timed measurement per run, not interleaved rounds: the rule has nothing to judge
    runs_each = per_run.groupby(["model", "variant"]).size().min()
    accuracy = shared.difference_text(per_run, "attention only", "full") + "; before fine-tuning: "
    accuracy += ", ".join(f"{m} {v:.1f} %" for m, v in before.items())
    memory = saving(column) + (" (CUDA peak)" if column == "memory_cuda_peak" else accounted)
    time = saving("step_ms") + f" ({runs_each} run(s) each, on one machine: {verdicts.NOT_JUDGED})"
    storage = ", ".join(f"{m} {v:.0f} % of the weights" for m, v in fractions.items())
    return shared.said_and_measured(
        [
            ("accuracy, attention only - full (pp)", "finetune_accuracy", accuracy),
            ("memory saved by attention only", "finetune_memory", memory),
            ("training time saved per step", "finetune_time", time),
            ("weights to store per fine-tuned model", "finetune_storage", storage),
        ]
    )
