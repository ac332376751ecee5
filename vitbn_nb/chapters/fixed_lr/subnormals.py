"""Subnormal floats and the pace of a training step on a CPU. A step does the same operations whatever the learning
rate, but on many CPUs an operation on a subnormal float (a nonzero value below the format's smallest normal number)
takes far longer than on a normal one; PyTorch keeps them unless asked (``torch.set_flush_denormal``), and this book,
like article 1's reference code, does not ask. So a run whose numbers drift into that range slows down at the same
load, which no load flag sees. This module times a finished run's step both ways and names the operations whose
results hold subnormals; :func:`take` keeps the measurement in the run's record (``runs.measured``), so a chapter
rendered where the weights are absent still shows it."""

from __future__ import annotations

import itertools
import statistics
from collections import Counter

import pandas as pd
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from ...judging.selection import timed_epochs
from ...paths import stored_path
from ...store import runs
from ...store.records import RunStoreError, read_record
from ...store.runs import Run
from ...system import contended, label, machine_load

#: The name of the measurement in a run's record.
MEASUREMENT = "subnormal_step"
#: Batches per timed pass, and passes per arithmetic (interleaved: kept, flushed, kept, ...).
BATCHES, ROUNDS = 10, 5
#: What is timed: a finished run keeps its weights, not its optimiser's state, so the Adam update is left out.
TIMED = (
    "forward and backward over the run's first training batches (no optimiser step: a finished run keeps no Adam state)"
)


class SubnormalCount(TorchDispatchMode):
    """Counts, per operation, the subnormal values among the floating-point results of every operation run inside it
    (the backward pass's included)."""

    def __init__(self):
        super().__init__()
        self.subnormal, self.values = Counter(), 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        if func.is_view:  # a view shares its input's values: counted where they were computed
            return result
        for tensor in result if isinstance(result, (tuple, list)) else (result,):
            if isinstance(tensor, torch.Tensor) and tensor.is_floating_point() and tensor.numel():
                found = int(((tensor != 0) & (tensor.abs() < torch.finfo(tensor.dtype).tiny)).sum())
                self.values += tensor.numel()
                if found:
                    self.subnormal[func.overloadpacket.__name__] += found
        return result

    def share(self) -> float:
        return sum(self.subnormal.values()) / max(self.values, 1)


def _forward_backward(model: torch.nn.Module, batches: list) -> None:
    for x, y in batches:
        model.zero_grad(set_to_none=True)
        F.cross_entropy(model(x), y).backward()


def _first_batches(run: Run, count: int) -> list:
    """The run's first ``count`` training batches of its first epoch's order (its own pipeline and data)."""
    config = run.config
    train, _ = runs.training_sets(config, torch.device("cpu"))
    order = torch.Generator().manual_seed(config.seed)
    return list(itertools.islice(train.batches(config.batch_size, generator=order, shuffle=True, min_batch=2), count))


def measure(run: Run, *, batches: int = BATCHES, rounds: int = ROUNDS, threads: int | None = None) -> dict:
    """Milliseconds per step of ``run``'s final model on this CPU with subnormals kept and flushed to zero (medians of
    ``rounds`` interleaved passes over ``batches`` batches), and the share of the step's results that are subnormal
    (with subnormals kept), with the operations that produce most of them."""
    from torch.utils import benchmark  # its import announces CUDA's absence: only where a step is timed

    threads = threads or torch.get_num_threads()
    model = run.load_model("cpu").train()  # train mode: BatchNorm normalises by the batch, as in training
    data = _first_batches(run, batches)
    if not torch.set_flush_denormal(True):  # returns False where the CPU cannot flush (no SSE3)
        return {"supported": False, "timed": TIMED}
    per_step = {"kept": [], "flushed": []}
    load_before = machine_load()
    try:
        for _ in range(rounds):
            for arithmetic, flush in (("kept", False), ("flushed", True)):
                torch.set_flush_denormal(flush)
                timer = benchmark.Timer(
                    stmt="step(model, data)",
                    globals={"step": _forward_backward, "model": model, "data": data},
                    num_threads=threads,
                )
                per_step[arithmetic].append(1000 * timer.timeit(1).median / len(data))
    finally:
        torch.set_flush_denormal(False)  # PyTorch's default, which every run of the book trains with
    load_after = machine_load()
    with SubnormalCount() as seen:
        _forward_backward(model, data[:1])
    busiest = max(load_before["load_1min"] or 0.0, load_after["load_1min"] or 0.0)
    return {
        "supported": True,
        "timed": TIMED,
        "batches": len(data),
        "rounds": rounds,
        "threads": threads,
        "kept_ms": statistics.median(per_step["kept"]),
        "flushed_ms": statistics.median(per_step["flushed"]),
        "kept_ms_rounds": per_step["kept"],
        "flushed_ms_rounds": per_step["flushed"],
        "subnormal_share": seen.share(),
        "subnormal_ops": dict(seen.subnormal.most_common(3)),
        "load_1min": busiest,
        "cpu_cores": load_after["cpu_cores"],
    }


def take(run: Run, *, retake: bool = False) -> dict:
    """:func:`measure`, once per run: kept in its record with this machine's hardware (``retake``: measured anew)."""
    taken = lambda: measure(run, batches=BATCHES, rounds=ROUNDS)
    return runs.measured(run, MEASUREMENT, taken, torch.device("cpu"), retake=retake)


def stored(record: dict) -> dict | None:
    """The measurement a run's record holds (its value, the machine and the date), else None."""
    return record.get("measurements", {}).get(MEASUREMENT)


def timed_busy(value: dict) -> bool:
    """Whether a measurement was taken beside other work (the book's one rule, :func:`vitbn_nb.system.contended`)."""
    return contended(value.get("load_1min"), value.get("cpu_cores"))


def _record(run_id: str) -> dict | None:
    try:
        return read_record(stored_path(run_id))
    except RunStoreError:
        return None


def pace(table: pd.DataFrame) -> pd.DataFrame:
    """Per run of ``table``: its epochs' training times (those the book times, the busy ones left out), fastest,
    slowest and their ratio, beside its stored step times with subnormals kept and flushed ("n/a" where the run holds
    no measurement, or one taken beside other work)."""
    seconds = timed_epochs(table).groupby("run_id")["train_seconds"]
    fastest, slowest = seconds.min(), seconds.max()
    rows = []
    for (model, depth, seed, run_id), _ in table.groupby(["model", "depth", "seed", "run_id"], sort=True):
        record = _record(run_id) or {}
        value = (stored(record) or {}).get("value") or {}
        timed = value.get("supported") and not timed_busy(value)
        rows.append(
            {
                "model": model,
                "depth": int(depth),
                "seed": int(seed),
                "fastest epoch (s)": round(fastest.get(run_id, float("nan")), 1),
                "slowest epoch (s)": round(slowest.get(run_id, float("nan")), 1),
                "slowest ÷ fastest": round(slowest.get(run_id, float("nan")) / fastest.get(run_id, float("nan")), 2),
                "step, subnormals kept (ms)": round(value["kept_ms"], 1) if timed else "n/a",
                "step, subnormals flushed (ms)": round(value["flushed_ms"], 1) if timed else "n/a",
                "kept ÷ flushed": round(value["kept_ms"] / value["flushed_ms"], 2) if timed else "n/a",
                "subnormal results (%)": round(100 * value["subnormal_share"], 3) if timed else "n/a",
                "operations with most": ", ".join(value.get("subnormal_ops", {})) if timed else "",
            }
        )
    return pd.DataFrame(rows)


def measured_on(table: pd.DataFrame) -> str:
    """The machines and dates of the table's runs' step measurements, or that none holds one."""
    taken = {}
    for run_id in table["run_id"].unique():
        if (found := stored(_record(run_id) or {})) and found.get("hardware"):
            taken.setdefault(label(found["hardware"]), set()).add(found["measured"][:10])
    if not taken:
        return "no run here holds the step measurement (python -m vitbn_nb campaign measure takes it)"
    return "; ".join(f"step timed on {machine}, {', '.join(sorted(dates))}" for machine, dates in taken.items())
