"""How ``campaign measure`` takes chapter 03's step measurement (:mod:`.subnormals` reads it): a finished run's
step timed on one thread with subnormal floats kept and flushed to zero (flushing is a setting of the calling thread
alone), interleaved, and kept in the run's record (:func:`take`). A timing, so an operation of a quiet machine:
nothing a notebook imports imports it."""

from __future__ import annotations

import itertools
import statistics
import time
from collections import Counter

import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from ...engines.engine import epoch_seed
from ...engines.training import training_sets
from ...store import runs
from ...store.runs import Run
from ...system import OtherWork, machine_load
from .subnormals import MEASUREMENT, stored, taken_busy

__all__ = ["MEASUREMENT", "SubnormalCount", "measure", "stored", "take", "taken_busy"]

#: Batches per timed pass, and passes per arithmetic (interleaved: kept, flushed, kept, ...).
BATCHES, ROUNDS = 10, 5


class SubnormalCount(TorchDispatchMode):
    """Counts, per operation, the subnormal values among the floating-point results of every operation run inside it."""

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
    """The first ``count`` training batches of the run's first epoch, in its order (its own pipeline and data)."""
    config = run.config
    train, _ = training_sets(config, torch.device("cpu"))
    order = torch.Generator().manual_seed(epoch_seed(config.seed, 1))
    return list(itertools.islice(train.batches(config.batch_size, generator=order, shuffle=True, min_batch=2), count))


def measure(run: Run, *, batches: int = BATCHES, rounds: int = ROUNDS) -> dict:
    """Milliseconds per step of ``run``'s final model on one thread with subnormals kept and flushed (medians of
    interleaved passes), and the share of the step's results that are subnormal, with the operations making most."""
    from torch.utils import benchmark  # its import announces CUDA's absence: only where a step is timed

    model = run.load_model("cpu").train()  # train mode: BatchNorm normalises by the batch, as in training
    data = _first_batches(run, batches)
    per_step = {False: [], True: []}
    load_before, other_work, started = machine_load(), OtherWork(), time.perf_counter()
    try:
        if not torch.set_flush_denormal(True):  # False where the CPU cannot flush (no SSE3): nothing to compare
            return {"kept_ms": None, "flushed_ms": None}
        for round_ in range(-1, rounds):  # round -1: untimed, each arithmetic's first pass
            for flush in (False, True) if round_ % 2 else (True, False):
                torch.set_flush_denormal(flush)
                timer = benchmark.Timer(
                    stmt="step(model, data)",
                    globals={"step": _forward_backward, "model": model, "data": data},
                    num_threads=1,
                )
                seconds = timer.timeit(1).median
                if round_ >= 0:
                    per_step[flush].append(1000 * seconds / len(data))
    finally:
        torch.set_flush_denormal(False)  # PyTorch's default, which every run of the book trains with
    load_after, other_cpu_seconds, seconds = machine_load(), other_work.seconds(), time.perf_counter() - started
    with SubnormalCount() as seen:
        _forward_backward(model, data[:1])
    loads = [load["load_1min"] for load in (load_before, load_after) if load["load_1min"] is not None]
    return {  # numbers only, as a record's measurement must be (what is timed: TIMED)
        "batches": len(data),
        "rounds": rounds,
        "threads": 1,
        "kept_ms": statistics.median(per_step[False]),
        "flushed_ms": statistics.median(per_step[True]),
        "kept_ms_rounds": per_step[False],
        "flushed_ms_rounds": per_step[True],
        "subnormal_share": seen.share(),
        "subnormal_ops": dict(seen.subnormal.most_common(3)),
        "load_1min": max(loads) if loads else None,
        "other_cpu_seconds": other_cpu_seconds,
        "seconds": round(seconds, 2),
        "cpu_cores": load_after["cpu_cores"],
    }


def take(run: Run, *, retake: bool = False) -> dict:
    """:func:`measure`, once per run: kept in its record with this machine's hardware (``retake``: measured anew)."""
    taken = lambda: measure(run, batches=BATCHES, rounds=ROUNDS)  # read at call time: a test sets them
    return runs.measured(run, MEASUREMENT, taken, torch.device("cpu"), retake=retake)
