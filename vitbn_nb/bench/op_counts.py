"""How many operations one training step and one inference pass dispatch, per model and depth: a count that does
not depend on the machine. A GPU's step time on models this small follows the number of kernels more than their
FLOPs. Counted on the CPU under a dispatch mode, with Adam's ``foreach`` implementation (a GPU's default)."""

from __future__ import annotations

import collections
import hashlib
import itertools
import json
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from .. import atomic
from ..models import build_model, fold_batchnorm
from ..models.fold import count_batchnorms
from .measurements import inference_flops, training_flops

#: Dispatched, but no kernel on the device: profiler markers, and reading a host-side number (Adam's step count
#: lives on the CPU unless ``capturable``).
HOST_ONLY = frozenset({"_record_function_enter_new", "_record_function_exit", "_local_scalar_dense"})


class _Counter(TorchDispatchMode):
    """Counts the ATen operations dispatched while it is active that run a kernel (no view, nothing host-only)."""

    def __init__(self):
        super().__init__()
        self.ops: collections.Counter[str] = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        if not func.is_view and name not in HOST_ONLY:
            self.ops[name] += 1
        return func(*args, **(kwargs or {}))


def dispatched(fn) -> collections.Counter[str]:
    """The non-view ATen operations ``fn()`` dispatches, by name."""
    with _Counter() as counter:
        fn()
    return counter.ops


def count(model: torch.nn.Module, batch_size: int, *, seed: int = 0) -> dict:
    """Operations of one training step (forward, loss and backward; Adam's update) and of one inference pass of
    ``model`` on a random batch of ``batch_size`` MNIST-shaped images (the counts do not depend on the batch size)."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.rand(batch_size, 1, 28, 28, generator=generator)
    y = torch.randint(0, 10, (batch_size,), generator=generator)
    model.train()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, foreach=True)
    step_one = lambda: F.cross_entropy(model(x), y).backward()
    step_one()  # the first step creates Adam's state; a training run repeats the later ones, which are counted
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    forward_backward = dispatched(step_one)
    update = dispatched(optimizer.step)
    optimizer.zero_grad(set_to_none=True)
    model.eval()
    with torch.inference_mode():
        inference = dispatched(lambda: model(x))
        folded_model = fold_batchnorm(model) if count_batchnorms(model) else model
        folded = dispatched(lambda: folded_model(x))
    return {
        "train_forward_backward_ops": sum(forward_backward.values()),
        "train_optimizer_ops": sum(update.values()),
        "train_step_ops": sum(forward_backward.values()) + sum(update.values()),
        "inference_ops": sum(inference.values()),
        "inference_ops_folded": sum(folded.values()),
    }


#: The batch that :func:`table` runs: the operation counts do not depend on the batch size, and the FLOPs of these
#: models grow exactly in proportion to it (every counted product has the batch among its dimensions; tests check
#: both), so a small batch gives the same table as the step's own in a fraction of the time.
COUNT_BATCH = 2


def table(models, depths, batch_size: int) -> list[dict]:
    """One row per model and depth: the operation counts of :func:`count` and the FLOPs of the same step and pass
    at ``batch_size``, both taken on :data:`COUNT_BATCH` images."""
    cpu, scale = torch.device("cpu"), batch_size / COUNT_BATCH
    rows = []
    for name, depth in itertools.product(models, depths):
        torch.manual_seed(0)
        model = build_model(name, depth=depth)  # the FLOPs (of copies) first: counting trains it a step
        flops = {"train_step_flops": round(training_flops(model, COUNT_BATCH, cpu) * scale)}
        flops["inference_flops"] = round(inference_flops(model, COUNT_BATCH, cpu) * scale)
        rows.append({"model": name, "depth": depth, **count(model, COUNT_BATCH), **flops})
    return rows


#: Where a render keeps :func:`table` (beside the outputs), so that reading the committed measurement counts nothing.
COUNTS_FILE = "op_counts.json"


def code_digest() -> str:
    """What the counts depend on: the models' source, the counting's, and torch's version."""
    digest = hashlib.sha256(torch.__version__.encode())
    here = Path(__file__).resolve()
    for file in sorted([*(here.parent.parent / "models").glob("*.py"), here, here.parent / "measurements.py"]):
        digest.update(file.name.encode() + b"\0" + file.read_bytes())
    return digest.hexdigest()[:16]


def kept_table(models, depths, batch_size: int, folders) -> list[dict]:
    """:func:`table`, read from the first of ``folders`` whose :data:`COUNTS_FILE` counted these models and depths at
    this batch size with this code (:func:`code_digest`); otherwise counted (a minute or more on a CPU) and kept in
    ``folders[0]``."""
    wanted = {"digest": code_digest(), "batch_size": int(batch_size), "models": list(models), "depths": list(depths)}
    for folder in folders:
        try:
            kept = json.loads((Path(folder) / COUNTS_FILE).read_text())
            if all(kept.get(key) == value for key, value in wanted.items()) and isinstance(kept.get("rows"), list):
                return kept["rows"]
        except (OSError, ValueError, AttributeError):
            continue  # absent, or not this file's layout: count again
    rows = table(models, depths, batch_size)
    text = json.dumps({**wanted, "rows": rows}, indent=1) + "\n"
    target = Path(folders[0]) / COUNTS_FILE
    if not target.exists() or target.read_text() != text:
        target.parent.mkdir(parents=True, exist_ok=True)
        atomic.write_text(target, text)
    return rows
