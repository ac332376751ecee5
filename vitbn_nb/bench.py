"""Where the time goes: the book's engine against the seeds' pipeline, model by model.

``python -m vitbn_nb bench`` (or ``make bench``) measures, on MNIST without augmentation (article 1's
data, which it timed), for ViT,
ViTBNFFN and ViTBN at depths 1 and 6 (which include article 1's trio "as run": ViT
depth 6 against BatchNorm models of depth 1):

* training and inference throughput (images/s) through two input pipelines:
  ``reference``, written to match article 1's loop (a ``DataLoader`` over torchvision's MNIST
  with ``ToTensor``, train batch 100 and test batch 5000, a loss
  ``.item()`` per step, per-class accuracy counted in a Python loop over the samples), and
  ``engine``, the book's (uint8 images on the device, batches cut there, counts vectorised); and the ratio engine / reference;
* the split of each pipeline's time into data loading and compute;
* FLOPs per training step (``torch.utils.flop_counter.FlopCounterMode``, attention
  included), the achieved FLOP/s and the model FLOP utilisation against this machine's
  measured fp32 matmul peak;
* peak memory of each configuration;
* inference with BatchNorm folded into the neighbouring Linear layers
  (:func:`vitbn_nb.models.fold_batchnorm`) against the unfolded model and against the
  LayerNorm ViT of the same depth;
* the three ways of writing BatchNorm on ``(b, n, d)`` tokens (article 1's BatchNorm1d over
  ``b d n``, article 2's BatchNorm2d over ``b d n 1``, and the flattened ``(b n) d``
  BatchNorm1d of :class:`vitbn_nb.models.BatchNorm`).

Every timing is the median over ``repeats`` runs of a fixed number of steps after a
warm-up (not whole epochs), with the device synchronised before each clock read; the repeats
of all configurations take turns, so that a busy spell on a shared machine slows every
configuration alike rather than one of them. It prints
a table and writes JSON to ``build/bench/bench-<date>.json`` and ``figures/bench.json``.
Chapter 08 calls :func:`measure` itself, so the book never shows a stale bench file.
"""
from __future__ import annotations

import argparse
import contextlib
import ctypes
import dataclasses
import datetime as dt
import gc
import json
import math
import re
import resource
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import nn

from . import atomic, engine, runs
from .models import AS_RUN_DEPTH, VIT_FAMILY, BatchNorm, build_model, fold_batchnorm
from .models.fold import count_batchnorms
from .paths import book_figures_dir, project_root
from .system import hardware, hardware_label, pick_device, synchronize, versions

PIPELINES = ("reference", "engine")
#: Article 1 timed its trio on MNIST without augmentation (ToTensor only); so does the bench.
DATASET = "mnist"
TIMING_NOTE = ("medians over repeats of a fixed number of steps after warm-up, the repeats of all configurations "
               "interleaved (so a busy spell slows them alike); the device is synchronised before every clock read; 'data' is the time spent producing a batch (loading, augmenting, collating, "
               "copying to the device), 'compute' the optimisation step (forward, backward, Adam) or the forward "
               "pass, 'bookkeeping' the per-class accuracy counting")


@dataclass(frozen=True)
class BenchSettings:
    """What to measure and how long; ``train_size``/``test_size`` of None mean the whole split."""

    models: tuple = VIT_FAMILY
    depths: tuple = (1, 6)
    batch_size: int = 100
    test_batch_size: int = 5000
    steps: int = 20
    warmup: int = 3
    repeats: int = 3
    eval_batches: int = 1
    eval_warmup: int = 1
    train_size: int | None = None
    test_size: int | None = None
    matmul_size: int = 2048
    matmul_repeats: int = 5
    norm_iterations: int = 50
    lr: float = 1e-3
    seed: int = 0

    def __post_init__(self):
        object.__setattr__(self, "models", tuple(self.models))
        object.__setattr__(self, "depths", tuple(self.depths))
        unknown = [m for m in self.models if m not in VIT_FAMILY]
        if unknown or not self.models:
            raise ValueError(f"models={self.models!r} is not allowed; choose from {', '.join(VIT_FAMILY)}")
        for name in ("batch_size", "test_batch_size", "steps", "repeats", "eval_batches", "matmul_size",
                     "matmul_repeats", "norm_iterations"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name}={value!r} is not allowed; it must be an integer >= 1")
        for name in ("warmup", "eval_warmup"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 0:
                raise ValueError(f"{name}={value!r} is not allowed; it must be an integer >= 0")
        if self.batch_size < 2:
            raise ValueError(f"batch_size={self.batch_size!r} is not allowed; BatchNorm training needs >= 2 images")
        if not self.depths or any(not isinstance(d, int) or d < 1 for d in self.depths):
            raise ValueError(f"depths={self.depths!r} is not allowed; give depths >= 1")
        for name, least in (("train_size", self.batch_size), ("test_size", 2)):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < least):
                raise ValueError(f"{name}={value!r} is not allowed; use None (the whole split) or an integer >= {least}")


#: ``python -m vitbn_nb bench``: the seeds' batch sizes, 20 timed steps x 3 repeats.
FULL = BenchSettings()
#: ``--quick``: every code path and every key of the JSON, in seconds; the numbers mean little.
QUICK = BenchSettings(batch_size=8, test_batch_size=32, steps=2, warmup=1, repeats=2, eval_batches=1,
                      eval_warmup=0, train_size=64, test_size=64, matmul_size=256, matmul_repeats=2,
                      norm_iterations=2)


# ---------------------------------------------------------------------------------------------
# Clocks, memory, FLOPs
# ---------------------------------------------------------------------------------------------
def _clock(device: torch.device) -> float:
    synchronize(device)
    return time.perf_counter()


def _rss_kib(field: str) -> int | None:
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        return None
    found = re.search(rf"^{field}:\s+(\d+) kB", status, re.M)
    return int(found.group(1)) if found else None


def _malloc_trim() -> None:
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: RSS may then include memory kept from earlier work
        pass


class PeakMemory:
    """Peak memory of the block above what was in use when it began, in MiB (``.mib``).

    CUDA: ``torch.cuda.max_memory_allocated`` (tensors only, reset at entry). CPU: the
    process's resident-set high-water mark (VmHWM), reset at entry through
    ``/proc/self/clear_refs`` where Linux allows it, after ``gc.collect()`` and glibc's
    ``malloc_trim(0)`` have handed freed memory back (otherwise memory kept from an earlier,
    larger configuration would hide this one's); where the reset is impossible, ``ru_maxrss``,
    the peak over the whole process, which can only say "no more than". ``.what`` says which.
    """

    def __init__(self, device: torch.device):
        self.device = device
        self.mib: float = float("nan")
        self.what = ""

    def __enter__(self):
        if self.device.type == "cuda":
            synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            self._base = torch.cuda.memory_allocated(self.device)
            self.what = "CUDA max_memory_allocated above the allocation at the start"
            return self
        gc.collect()
        _malloc_trim()
        self._base = _rss_kib("VmRSS")
        try:
            Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current RSS
            self._reset = self._base is not None
        except OSError:
            self._reset = False
        self.what = ("process RSS high-water mark (VmHWM, reset through /proc/self/clear_refs) above the RSS at "
                     "the start, freed memory returned to the OS first" if self._reset else "ru_maxrss: the process's lifetime peak RSS above the RSS at "
                                                     "the start (an upper bound)")
        return self

    def __exit__(self, *exc):
        if self.device.type == "cuda":
            synchronize(self.device)
            self.mib = (torch.cuda.max_memory_allocated(self.device) - self._base) / 2**20
        elif self._reset:
            self.mib = max(_rss_kib("VmHWM") - self._base, 0) / 1024
        else:
            peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            self.mib = max(peak_kib - (self._base or 0), 0) / 1024
        return False


def _sdpa_forward_flops(query, key, value, *args, out_val=None, **kwargs) -> int:
    from torch.utils.flop_counter import sdpa_flop_count

    return sdpa_flop_count(query.shape, key.shape, value.shape)


def _sdpa_backward_flops(grad_out, query, key, value, *args, out_val=None, **kwargs) -> int:
    from torch.utils.flop_counter import sdpa_backward_flop_count

    return sdpa_backward_flop_count(grad_out.shape, query.shape, key.shape, value.shape)


_sdpa_forward_flops._get_raw = _sdpa_backward_flops._get_raw = True


def _flop_counter():
    """A FlopCounterMode that also counts the CPU flash-attention kernels, which torch's table omits."""
    from torch.utils.flop_counter import FlopCounterMode

    aten = torch.ops.aten
    extra = {}
    for name, formula in (("_scaled_dot_product_flash_attention_for_cpu", _sdpa_forward_flops),
                          ("_scaled_dot_product_flash_attention_for_cpu_backward", _sdpa_backward_flops)):
        if hasattr(aten, name):
            extra[getattr(aten, name)] = formula
    return FlopCounterMode(display=False, custom_mapping=extra)


def training_flops(model: nn.Module, batch_size: int, device: torch.device) -> int:
    """Floating-point operations of one training step's forward and backward pass (Adam's update not counted)."""
    probe = _copy_to(model, device).train()
    x = torch.rand(batch_size, 1, 28, 28, device=device)
    y = torch.randint(0, 10, (batch_size,), device=device)
    with _flop_counter() as counter:
        F.cross_entropy(probe(x), y).backward()
    return int(counter.get_total_flops())


def inference_flops(model: nn.Module, batch_size: int, device: torch.device) -> int:
    """Floating-point operations of one forward pass over ``batch_size`` images in eval mode."""
    probe = _copy_to(model, device).eval()
    with torch.inference_mode(), _flop_counter() as counter:
        probe(torch.rand(batch_size, 1, 28, 28, device=device))
    return int(counter.get_total_flops())


def _copy_to(model: nn.Module, device: torch.device) -> nn.Module:
    import copy

    return copy.deepcopy(model).to(device)


def matmul_peak(device=None, *, size: int = 2048, repeats: int = 5) -> dict:
    """This machine's fp32 matmul rate: the median time of ``size``^3 products, as FLOP/s."""
    device = pick_device(device)
    generator = torch.Generator(device=device).manual_seed(0)
    a = torch.randn(size, size, device=device, generator=generator)
    b = torch.randn(size, size, device=device, generator=generator)
    for _ in range(2):
        a @ b
    times = []
    for _ in range(repeats):
        start = _clock(device)
        a @ b
        times.append(_clock(device) - start)
    seconds = statistics.median(times)
    tf32 = device.type == "cuda" and torch.backends.cuda.matmul.allow_tf32
    return {"size": size, "repeats": repeats, "seconds": seconds, "flops_per_s": 2 * size**3 / seconds,
            "dtype": "float32" + (" (TF32 allowed)" if tf32 else ""), "threads": torch.get_num_threads()}


# ---------------------------------------------------------------------------------------------
# The two pipelines and their steps
# ---------------------------------------------------------------------------------------------
def pipelines(settings: BenchSettings, device: torch.device) -> dict:
    """Train and test sets of both pipelines over the same subsets of MNIST without augmentation (article 1's data).

    ``reference``: torchvision's MNIST with ``ToTensor`` behind a ``DataLoader``, as article 1 timed it.
    ``engine``: ``runs.image_sets``, uint8 on the device.
    """
    reference = runs.reference_sets(DATASET, settings.train_size, settings.test_size, device)
    engine_sets = runs.image_sets(DATASET, settings.train_size, settings.test_size, str(device))
    return {"reference": reference, "engine": engine_sets}


def reference_step(model: nn.Module, optimizer: torch.optim.Optimizer, x, y) -> float:
    """The seeds' step: zero_grad, forward, CrossEntropyLoss, backward, Adam, and the loss read back with .item()."""
    optimizer.zero_grad()
    loss = nn.CrossEntropyLoss()(model(x), y)
    loss.backward()
    optimizer.step()
    return loss.item()


def _endless(train_data, batch_size: int, generator: torch.Generator) -> Iterator:
    while True:
        empty = True
        for batch in train_data.batches(batch_size, generator=generator, shuffle=True, min_batch=2):
            empty = False
            yield batch
        if empty:
            raise ValueError(f"the training set ({len(train_data)} images) gives no batch of {batch_size}")


def _endless_test(test_data, batch_size: int) -> Iterator:
    while True:
        yield from test_data.batches(batch_size)


def _median_repeat(repeats: list[dict]) -> dict:
    ordered = sorted(repeats, key=lambda r: r["seconds"])
    return ordered[(len(ordered) - 1) // 2]


def _interleave(runners: dict, warmup: int, repeats: int, length: int) -> dict[object, list[dict]]:
    """Warm every runner up, then run their repeats in turn (A B C, A B C, ...), so that a busy
    spell on a shared machine slows every variant alike instead of one of them."""
    for run in runners.values():
        if warmup:
            run(warmup)
    timings = {key: [] for key in runners}
    for _ in range(repeats):
        for key, run in runners.items():
            timings[key].append(run(length))
    return timings


def _training_runner(model: nn.Module, train_data, pipeline: str, settings: BenchSettings, device: torch.device):
    """``run(n)``: ``n`` training steps of ``model`` through ``pipeline``, clocked into data and compute."""
    if pipeline not in PIPELINES:
        raise ValueError(f"pipeline={pipeline!r} is not allowed; choose one of {', '.join(PIPELINES)}")
    model.to(device).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=settings.lr)
    step: Callable = reference_step if pipeline == "reference" else engine.train_step
    batches = _endless(train_data, settings.batch_size, torch.Generator(device=device).manual_seed(settings.seed))

    def run(steps: int) -> dict:
        data = compute = 0.0
        images = 0
        start = _clock(device)
        for _ in range(steps):
            t0 = _clock(device)
            x, y = next(batches)
            t1 = _clock(device)
            step(model, optimizer, x, y)
            t2 = _clock(device)
            data, compute, images = data + t1 - t0, compute + t2 - t1, images + len(y)
        return {"seconds": _clock(device) - start, "data": data, "compute": compute, "images": images}

    return run


def _training_row(repeats: list[dict], steps: int) -> dict:
    chosen = _median_repeat(repeats)
    return {
        "images_per_s": chosen["images"] / chosen["seconds"],
        "step_seconds": chosen["seconds"] / steps,
        "data_seconds": chosen["data"] / steps,
        "compute_seconds": chosen["compute"] / steps,
        "data_share": chosen["data"] / chosen["seconds"],
        "images_per_s_repeats": [r["images"] / r["seconds"] for r in repeats],
    }


def time_training_many(variants: dict, *, settings: BenchSettings, device: torch.device) -> dict:
    """Training throughput of several ``key: (model, train_data, pipeline)`` variants, their
    ``repeats`` x ``steps`` steps interleaved after ``warmup`` steps each; one row per key."""
    runners = {key: _training_runner(model, data_, pipeline, settings, device)
               for key, (model, data_, pipeline) in variants.items()}
    timings = _interleave(runners, settings.warmup, settings.repeats, settings.steps)
    return {key: _training_row(timings[key], settings.steps) for key in variants}


def time_training(model: nn.Module, train_data, *, pipeline: str, settings: BenchSettings,
                  device: torch.device) -> dict:
    """Training throughput of ``model`` through ``pipeline``: ``repeats`` x ``steps`` steps after ``warmup``."""
    return time_training_many({0: (model, train_data, pipeline)}, settings=settings, device=device)[0]


def training_memory(name: str, depth: int, train_data, *, pipeline: str, settings: BenchSettings,
                    device: torch.device) -> PeakMemory:
    """Peak memory of building ``name`` at ``depth`` and taking two training steps (Adam's state included)."""
    with PeakMemory(device) as memory:
        model = _build(name, depth, settings.seed, device)
        _training_runner(model, train_data, pipeline, settings, device)(2)
        del model
    return memory


def _inference_runner(model: nn.Module, test_data, per_sample: bool, settings: BenchSettings, device: torch.device,
                      num_classes: int = 10):
    """``run(n)``: ``n`` test batches, clocked into data, forward pass and per-class bookkeeping."""
    model.to(device).eval()
    batches = _endless_test(test_data, settings.test_batch_size)

    @torch.inference_mode()
    def one_batch():
        t0 = _clock(device)
        x, y = next(batches)
        t1 = _clock(device)
        logits = model(x)
        t2 = _clock(device)
        if per_sample:
            engine.count_classes_per_sample(logits, y, [0] * num_classes, [0] * num_classes)
        else:
            engine.count_classes(logits, y, torch.zeros(num_classes, device=device),
                                 torch.zeros(num_classes, device=device))
        t3 = _clock(device)
        return t1 - t0, t2 - t1, t3 - t2, len(y)

    def run(n: int) -> dict:
        parts = [one_batch() for _ in range(n)]
        data, forward, book, images = (sum(p[i] for p in parts) for i in range(4))
        return {"seconds": data + forward + book, "data": data, "forward": forward, "bookkeeping": book,
                "images": images}

    return run


def _inference_row(repeats: list[dict], batches: int) -> dict:
    chosen = _median_repeat(repeats)
    return {
        "images_per_s": chosen["images"] / chosen["seconds"],
        "batch_seconds": chosen["seconds"] / batches,
        "data_seconds": chosen["data"] / batches,
        "forward_seconds": chosen["forward"] / batches,
        "bookkeeping_seconds": chosen["bookkeeping"] / batches,
        "data_share": chosen["data"] / chosen["seconds"],
        "images_per_s_repeats": [r["images"] / r["seconds"] for r in repeats],
    }


def time_inference_many(variants: dict, *, settings: BenchSettings, device: torch.device) -> dict:
    """Evaluation throughput of several ``key: (model, test_data, per_sample)`` variants: forward
    passes over test batches plus per-class accuracy counts, vectorised (``engine.count_classes``)
    or the seeds' per-sample loop; repeats interleaved; one row per key."""
    runners = {key: _inference_runner(model, data_, per_sample, settings, device)
               for key, (model, data_, per_sample) in variants.items()}
    timings = _interleave(runners, settings.eval_warmup, settings.repeats, settings.eval_batches)
    return {key: _inference_row(timings[key], settings.eval_batches) for key in variants}


def time_inference(model: nn.Module, test_data, *, per_sample: bool, settings: BenchSettings,
                   device: torch.device) -> dict:
    """Evaluation throughput of one model (see :func:`time_inference_many`)."""
    return time_inference_many({0: (model, test_data, per_sample)}, settings=settings, device=device)[0]


def inference_memory(model: nn.Module, test_data, *, per_sample: bool, settings: BenchSettings,
                     device: torch.device) -> PeakMemory:
    """Peak memory of one test batch (producing it, the forward pass, the counts)."""
    with PeakMemory(device) as memory:
        _inference_runner(model, test_data, per_sample, settings, device)(1)
    return memory


# ---------------------------------------------------------------------------------------------
# The three ways to write BatchNorm on tokens
# ---------------------------------------------------------------------------------------------
class TransposedBatchNorm1d(nn.BatchNorm1d):
    """Article 1: ``b n d -> b d n``, BatchNorm1d over the feature axis, and back."""

    def forward(self, x):
        return rearrange(super().forward(rearrange(x, "b n d -> b d n")), "b d n -> b n d")


class TransposedBatchNorm2d(nn.BatchNorm2d):
    """Article 2: ``b n d -> b d n 1``, BatchNorm2d over the feature axis, and back."""

    def forward(self, x):
        return rearrange(super().forward(rearrange(x, "b n d -> b d n 1")), "b d n 1 -> b n d")


NORM_FORMS = {
    "BatchNorm1d over b d n (article 1)": TransposedBatchNorm1d,
    "BatchNorm2d over b d n 1 (article 2)": TransposedBatchNorm2d,
    "BatchNorm1d over flattened (b n) d (vitbn_nb)": BatchNorm,
}


def time_norm_forms(device=None, *, batch: int = 100, test_batch: int = 5000, tokens: int = 17,
                    dims=(64, 128), iterations: int = 50, repeats: int = 3) -> list[dict]:
    """Each form's time for a training forward+backward on ``(batch, tokens, d)`` and an eval
    forward on ``(test_batch, tokens, d)`` (median of ``repeats`` x ``iterations``), and how far its
    output is from the flattened form's (they compute the same thing)."""
    device = pick_device(device)
    generator = torch.Generator(device=device).manual_seed(0)
    rows = []
    for dim in dims:
        for mode, n in (("train forward+backward", batch), ("eval forward", test_batch)):
            x = torch.randn(n, tokens, dim, device=device, generator=generator) * 2 + 0.5
            grad = torch.randn(n, tokens, dim, device=device, generator=generator)
            outputs = {}
            running_mean = torch.rand(dim, device=device, generator=generator) - 0.5
            running_var = torch.rand(dim, device=device, generator=generator) * 1.5 + 0.5
            for form, cls in NORM_FORMS.items():
                norm = cls(dim).to(device)
                norm.running_mean.copy_(running_mean)  # the same statistics for every form, so eval outputs agree
                norm.running_var.copy_(running_var)
                norm.train(mode.startswith("train"))
                xin = x.clone().requires_grad_(mode.startswith("train"))

                def once():
                    if mode.startswith("train"):
                        out = norm(xin)
                        out.backward(grad)
                        return out
                    with torch.inference_mode():
                        return norm(xin)

                outputs[form] = once().detach()
                for _ in range(3):
                    once()
                times = []
                for _ in range(repeats):
                    start = _clock(device)
                    for _ in range(iterations):
                        once()
                    times.append((_clock(device) - start) / iterations)
                rows.append({"form": form, "mode": mode, "dim": dim, "shape": [n, tokens, dim],
                             "microseconds": 1e6 * statistics.median(times)})
            reference = outputs["BatchNorm1d over flattened (b n) d (vitbn_nb)"]
            for row in rows[-len(NORM_FORMS):]:
                row["max_abs_difference"] = float((outputs[row["form"]] - reference).abs().max())
            fastest = min(r["microseconds"] for r in rows[-len(NORM_FORMS):])
            for row in rows[-len(NORM_FORMS):]:
                row["relative_to_fastest"] = row["microseconds"] / fastest
    return rows


@contextlib.contextmanager
def _cold_inductor_cache(folder: str):
    """Inductor's caches pointed at an empty ``folder`` (yields whether that worked)."""
    try:
        from torch._inductor.runtime.cache_dir_utils import temporary_cache_dir
    except ImportError:  # a torch without it: the compile time may then come from a warm cache
        yield False
        return
    with temporary_cache_dir(folder):
        yield True


def time_compile(name: str, depth: int, settings: BenchSettings, device=None) -> dict:
    """What ``torch.compile`` would buy the engine's training step: compile seconds (the first
    compiled step, less an eager step), eager and compiled step times (same batches, same
    repeats), and the steps it takes to pay the compile back. One shape only: a run also
    compiles again for its test batch and its last, smaller training batch."""
    device = pick_device(device)
    train_data = runs.image_sets(DATASET, settings.train_size, settings.test_size, str(device))[0]
    eager = _build(name, depth, settings.seed, device)
    eager_row = time_training(eager, train_data, pipeline="engine", settings=settings, device=device)
    compiled_model = _build(name, depth, settings.seed, device)
    optimizer = torch.optim.Adam(compiled_model.parameters(), lr=settings.lr)
    batches = _endless(train_data, settings.batch_size, torch.Generator(device=device).manual_seed(settings.seed))
    torch._dynamo.reset()
    with tempfile.TemporaryDirectory() as cache, _cold_inductor_cache(cache) as cold:
        # A cold cache, as a fresh checkout (or Colab) has: a warm one hides most of the compile time.
        compiled = torch.compile(compiled_model)
        start = _clock(device)
        engine.train_step(compiled, optimizer, *next(batches))
        first = _clock(device) - start
        compiled_row = time_training(compiled, train_data, pipeline="engine", settings=settings, device=device)
    compile_seconds = max(first - eager_row["step_seconds"], 0.0)
    saved = eager_row["step_seconds"] - compiled_row["step_seconds"]
    return {"model": name, "depth": depth, "compile_seconds": compile_seconds, "cold_cache": cold,
            "eager_step_seconds": eager_row["step_seconds"], "compiled_step_seconds": compiled_row["step_seconds"],
            "speedup": _ratio(eager_row["step_seconds"], compiled_row["step_seconds"]),
            "break_even_steps": compile_seconds / saved if saved > 0 else float("inf")}


# ---------------------------------------------------------------------------------------------
# The whole measurement
# ---------------------------------------------------------------------------------------------
def without_norms(model: nn.Module) -> nn.Module:
    """An eval copy of ``model`` with every LayerNorm and BatchNorm replaced by the identity.

    Not a usable model (its outputs are wrong): its inference time is what the model would
    cost if its norms were free, so the difference is what the norms cost. For a BatchNorm
    model folding reaches this (up to the bias the attention projection gains); for the
    LayerNorm ViT it is out of reach, since LayerNorm cannot fold.
    """
    import copy

    stripped = copy.deepcopy(model).eval()
    norms = (nn.LayerNorm, nn.modules.batchnorm._BatchNorm)
    for name, module in list(stripped.named_modules()):
        for child_name, child in list(module.named_children()):
            if isinstance(child, norms):
                setattr(module, child_name, nn.Identity())
    return stripped


def _build(name: str, depth: int, seed: int, device: torch.device) -> nn.Module:
    torch.manual_seed(seed)
    return build_model(name, depth=depth).to(device)


def _ratio(a, b) -> float:
    return a / b if a and b and math.isfinite(a) and math.isfinite(b) else float("nan")


def measure(settings: BenchSettings = FULL, device=None, *, log: Callable[[str], None] | None = print,
            compile_models: bool = False) -> dict:
    """Run every measurement of the module docstring; returns a JSON-ready dict (see ``main``).

    ``compile_models`` adds :func:`time_compile` for ViT depth 6 and ViTBN depth 1 (minutes on a CPU).
    """
    device = pick_device(device)
    log = log or (lambda message: None)
    log(f"bench on {hardware_label(device)} | torch {torch.__version__} | {torch.get_num_threads()} threads")
    results = {
        "schema": 1, "date": dt.datetime.now().isoformat(timespec="seconds"), "device": device.type,
        "hardware": hardware(device), "hardware_label": hardware_label(device), "versions": versions(),
        "settings": dataclasses.asdict(settings), "dataset": DATASET, "timing": TIMING_NOTE,
    }
    log(f"fp32 matmul peak ({settings.matmul_size}^3, median of {settings.matmul_repeats}) ...")
    peak = matmul_peak(device, size=settings.matmul_size, repeats=settings.matmul_repeats)
    results["matmul_peak"] = peak
    sets = pipelines(settings, device)
    configs = [(name, depth) for name in settings.models for depth in settings.depths]
    # Every configuration's repeats are interleaved with every other's, so that a busy spell on a
    # shared machine slows them all alike and the ratios between them stay fair.
    log(f"train {len(configs)} configurations x {len(PIPELINES)} pipelines, interleaved ...")
    models = {(name, depth, p): _build(name, depth, settings.seed, device) for name, depth in configs for p in PIPELINES}
    rows = time_training_many({key: (model, sets[key[2]][0], key[2]) for key, model in models.items()},
                              settings=settings, device=device)
    training, memory_what = [], ""
    for (name, depth, pipeline), row in rows.items():
        flops_step = training_flops(build_model(name, depth=depth), settings.batch_size, device)
        memory = training_memory(name, depth, sets[pipeline][0], pipeline=pipeline, settings=settings, device=device)
        memory_what = memory.what
        row.update(model=name, depth=depth, as_run=AS_RUN_DEPTH[name] == depth, pipeline=pipeline,
                   flops_per_step=flops_step, achieved_flops=flops_step / row["step_seconds"],
                   mfu=flops_step / row["step_seconds"] / peak["flops_per_s"],
                   compute_mfu=flops_step / row["compute_seconds"] / peak["flops_per_s"], peak_memory_mib=memory.mib)
        training.append(row)

    variants, extra = {}, {}
    for name, depth in configs:
        trained = models[(name, depth, "engine")].eval()  # some steps in: running statistics are not 0 and 1
        variants[(name, depth, "reference")] = (trained, sets["reference"][1], True)
        extra[(name, depth, "reference")] = dict(pipeline="reference", folded=False)
        variants[(name, depth, "engine")] = (trained, sets["engine"][1], False)
        extra[(name, depth, "engine")] = dict(pipeline="engine", folded=False)
        if count_batchnorms(trained):
            folded = fold_batchnorm(trained)
            x, _ = next(iter(sets["engine"][1].batches(min(settings.test_batch_size, 256))))
            with torch.inference_mode():
                difference = float((folded(x) - trained(x)).abs().max())
            variants[(name, depth, "folded")] = (folded, sets["engine"][1], False)
            extra[(name, depth, "folded")] = dict(pipeline="engine", folded=True,
                                                  batchnorms_left=count_batchnorms(folded),
                                                  max_abs_logit_difference=difference)
        if name == "ViT":  # what LayerNorm, which cannot fold, costs
            variants[(name, depth, "no norms")] = (without_norms(trained), sets["engine"][1], False)
            extra[(name, depth, "no norms")] = dict(pipeline="engine", folded=False, norms_removed=True)
    log(f"infer {len(variants)} variants (pipelines, folded, ViT without its LayerNorms), interleaved ...")
    rows = time_inference_many(variants, settings=settings, device=device)
    inference = []
    for key, row in rows.items():
        name, depth, _ = key
        model, test_data, per_sample = variants[key]
        flops_image = inference_flops(model, 2, device) / 2
        memory = inference_memory(model, test_data, per_sample=per_sample, settings=settings, device=device)
        row.update(model=name, depth=depth, as_run=AS_RUN_DEPTH[name] == depth, **extra[key],
                   flops_per_image=flops_image, achieved_flops=flops_image * row["images_per_s"],
                   mfu=flops_image * row["images_per_s"] / peak["flops_per_s"], peak_memory_mib=memory.mib)
        inference.append(row)
    log("BatchNorm forms on tokens ...")
    results["norm_forms"] = time_norm_forms(device, batch=settings.batch_size, test_batch=settings.test_batch_size,
                                            iterations=settings.norm_iterations, repeats=settings.repeats)
    results["memory_measure"] = memory_what
    if compile_models:
        results["compile"] = []
        for name, depth in (("ViT", 6), ("ViTBN", 1)):
            log(f"torch.compile {name} d{depth} ...")
            results["compile"].append(time_compile(name, depth, settings, device))
    results["training"] = training
    results["inference"] = inference
    results["ratios"] = ratios(results)
    results["folding"] = folding_summary(results)
    results["targets"] = targets(results)
    return results


def _lookup(rows, **where) -> dict | None:
    for row in rows:
        if all(row.get(k) == v for k, v in where.items()):
            return row
    return None


def ratios(results: dict) -> list[dict]:
    """Per model and depth: engine / reference throughput for training and evaluation, and the
    ceiling a pipeline alone could reach (the reference's total time over its compute time)."""
    rows = []
    for train_ref in (r for r in results["training"] if r["pipeline"] == "reference"):
        key = dict(model=train_ref["model"], depth=train_ref["depth"])
        train_eng = _lookup(results["training"], pipeline="engine", **key)
        eval_ref = _lookup(results["inference"], pipeline="reference", folded=False, **key)
        eval_eng = _lookup(results["inference"], pipeline="engine", folded=False, norms_removed=None, **key)
        rows.append({
            **key, "as_run": train_ref["as_run"],
            "train_engine_over_reference": _ratio(train_eng["images_per_s"], train_ref["images_per_s"]),
            "train_ceiling_without_data": _ratio(train_ref["step_seconds"], train_ref["compute_seconds"]),
            "eval_engine_over_reference": _ratio(eval_eng["images_per_s"], eval_ref["images_per_s"]),
            "eval_ceiling_without_data_and_loop": _ratio(eval_ref["batch_seconds"], eval_ref["forward_seconds"]),
        })
    return rows


def folding_summary(results: dict) -> list[dict]:
    """Per BatchNorm model and depth: folded / unfolded inference throughput, and each against the LayerNorm ViT."""
    rows = []
    for folded in (r for r in results["inference"] if r["folded"]):
        key = dict(model=folded["model"], depth=folded["depth"])
        plain = _lookup(results["inference"], pipeline="engine", folded=False, **key)
        vit = _lookup(results["inference"], pipeline="engine", folded=False, norms_removed=None, model="ViT",
                      depth=folded["depth"])
        free = _lookup(results["inference"], norms_removed=True, model="ViT", depth=folded["depth"])
        rows.append({**key, "folded_images_per_s": folded["images_per_s"], "unfolded_images_per_s": plain["images_per_s"],
                     "folded_over_unfolded": _ratio(folded["images_per_s"], plain["images_per_s"]),
                     "vit_images_per_s": vit["images_per_s"] if vit else float("nan"),
                     "unfolded_over_vit": _ratio(plain["images_per_s"], vit["images_per_s"]) if vit else float("nan"),
                     "folded_over_vit": _ratio(folded["images_per_s"], vit["images_per_s"]) if vit else float("nan"),
                     "vit_without_layernorm_images_per_s": free["images_per_s"] if free else float("nan"),
                     "vit_layernorm_share": 1 - _ratio(vit["images_per_s"], free["images_per_s"]) if vit and free
                     else float("nan"),
                     "max_abs_logit_difference": folded["max_abs_logit_difference"]})
    return rows


def targets(results: dict) -> dict:
    """The issue's targets, each with the value reached and whether it is met (reported, never asserted)."""
    def least(values):
        values = [v for v in values if math.isfinite(v)]
        return min(values) if values else float("nan")

    out = {}
    train = least(r["train_engine_over_reference"] for r in results["ratios"])
    out["train_engine_over_reference_min"] = {"target": 3.0, "value": train, "met": train >= 3.0}
    evaluation = least(r["eval_engine_over_reference"] for r in results["ratios"])
    out["eval_engine_over_reference_min"] = {"target": 5.0, "value": evaluation, "met": evaluation >= 5.0}
    vit6 = _lookup(results["training"], model="ViT", depth=6, pipeline="engine")
    if vit6 is not None:
        out["train_mfu_vit_d6"] = {"target": 0.40, "value": vit6["mfu"], "met": vit6["mfu"] >= 0.40,
                                   "batch_size": results["settings"]["batch_size"]}
    fold = least(r["folded_over_unfolded"] for r in results["folding"] if r["model"] == "ViTBN")
    out["folded_vitbn_over_unfolded_min"] = {"target": 1.2, "value": fold, "met": fold >= 1.2}
    return out


# ---------------------------------------------------------------------------------------------
# Output
# ---------------------------------------------------------------------------------------------
def _label(row) -> str:
    star = "*" if row.get("as_run") else " "
    return f"{row['model']:<8} d{row['depth']}{star}"


def format_report(results: dict) -> str:
    """The tables ``python -m vitbn_nb bench`` prints."""
    peak = results["matmul_peak"]
    lines = [f"hardware: {results['hardware_label']} ({results['device']}, {peak['threads']} threads), "
             f"torch {results['versions'].get('torch')}, {results['date']}",
             f"fp32 matmul peak: {peak['flops_per_s'] / 1e9:.1f} GFLOP/s ({peak['size']}^3, median of {peak['repeats']})",
             f"memory: {results['memory_measure']}", "* = article 1 as run (ViT d6; the BatchNorm models computed one block)", "",
             "TRAINING (images/s; per step: data + compute, ms)"]
    head = f"{'model':<12}{'pipeline':<11}{'img/s':>9}{'data ms':>9}{'comp ms':>9}{'data %':>8}" \
           f"{'GFLOP/step':>11}{'GFLOP/s':>9}{'MFU %':>7}{'mem MiB':>9}"
    lines.append(head)
    for r in results["training"]:
        lines.append(f"{_label(r):<12}{r['pipeline']:<11}{r['images_per_s']:>9.0f}{1e3 * r['data_seconds']:>9.1f}"
                     f"{1e3 * r['compute_seconds']:>9.1f}{100 * r['data_share']:>8.1f}{r['flops_per_step'] / 1e9:>11.2f}"
                     f"{r['achieved_flops'] / 1e9:>9.1f}{100 * r['mfu']:>7.1f}{r['peak_memory_mib']:>9.1f}")
    lines += ["", "INFERENCE (images/s; per test batch: data + forward + bookkeeping, ms)",
              f"{'model':<12}{'pipeline':<17}{'img/s':>9}{'data ms':>10}{'fwd ms':>9}{'book ms':>9}{'data %':>8}"
              f"{'mem MiB':>9}"]
    for r in results["inference"]:
        pipe = r["pipeline"] + (" folded" if r["folded"] else "") + (" no norms" if r.get("norms_removed") else "")
        lines.append(f"{_label(r):<12}{pipe:<17}{r['images_per_s']:>9.0f}{1e3 * r['data_seconds']:>10.1f}"
                     f"{1e3 * r['forward_seconds']:>9.1f}{1e3 * r['bookkeeping_seconds']:>9.1f}"
                     f"{100 * r['data_share']:>8.1f}{r['peak_memory_mib']:>9.1f}")
    lines += ["", "ENGINE / REFERENCE (x; ceiling = reference time / its compute time)",
              f"{'model':<12}{'train':>8}{'ceiling':>9}{'eval':>8}{'ceiling':>9}"]
    for r in results["ratios"]:
        lines.append(f"{_label(r):<12}{r['train_engine_over_reference']:>8.2f}{r['train_ceiling_without_data']:>9.2f}"
                     f"{r['eval_engine_over_reference']:>8.2f}{r['eval_ceiling_without_data_and_loop']:>9.2f}")
    lines += ["", "BATCHNORM FOLDING (engine inference, images/s)",
              f"{'model':<12}{'unfolded':>10}{'folded':>10}{'x':>7}{'ViT (LN)':>10}{'ViT no LN':>11}{'max |dlogit|':>14}"]
    for r in results["folding"]:
        lines.append(f"{_label(r):<12}{r['unfolded_images_per_s']:>10.0f}{r['folded_images_per_s']:>10.0f}"
                     f"{r['folded_over_unfolded']:>7.2f}{r['vit_images_per_s']:>10.0f}"
                     f"{r['vit_without_layernorm_images_per_s']:>11.0f}"
                     f"{r['max_abs_logit_difference']:>14.1e}")
    lines += ["", "BATCHNORM ON TOKENS: three forms (microseconds, median)",
              f"{'form':<48}{'mode':<24}{'shape':<16}{'us':>9}{'x fastest':>10}"]
    for r in results["norm_forms"]:
        lines.append(f"{r['form']:<48}{r['mode']:<24}{'x'.join(map(str, r['shape'])):<16}{r['microseconds']:>9.0f}"
                     f"{r['relative_to_fastest']:>10.2f}")
    if results.get("compile"):
        lines += ["", "TORCH.COMPILE (engine training step; compile time with an empty inductor cache)",
                  f"{'model':<12}{'compile s':>10}{'eager ms':>10}{'compiled ms':>12}{'x':>7}{'break-even steps':>18}"]
        for r in results["compile"]:
            lines.append(f"{r['model']:<8} d{r['depth']:<3}{r['compile_seconds']:>10.1f}"
                         f"{1e3 * r['eager_step_seconds']:>10.1f}{1e3 * r['compiled_step_seconds']:>12.1f}"
                         f"{r['speedup']:>7.2f}{r['break_even_steps']:>18.0f}")
    lines += ["", "TARGETS (reported, not asserted)"]
    for name, t in results["targets"].items():
        lines.append(f"  {name}: {t['value']:.2f} (target {t['target']}) {'met' if t['met'] else 'NOT met'}")
    return "\n".join(lines)


def _finite(value):
    """NaN and infinities as null, so the file is strict JSON."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def write(results: dict, out_dir=None, copy_to_figures: bool = True) -> list[Path]:
    """``<out_dir>/bench-<date>.json`` (default ``build/bench``) and, for the book, ``figures/bench.json``."""
    out_dir = Path(out_dir) if out_dir is not None else project_root() / "build" / "bench"
    out_dir.mkdir(parents=True, exist_ok=True)
    text = json.dumps(_finite(results), indent=1, allow_nan=False)
    paths = [out_dir / f"bench-{dt.date.today().isoformat()}.json"]
    if copy_to_figures:
        paths.append(book_figures_dir() / "bench.json")
    for path in paths:
        atomic.write_text(path, text)
    return paths


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m vitbn_nb bench", description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--quick", action="store_true", help="tiny sizes: every code path in seconds (tests, smoke)")
    parser.add_argument("--device", default=None, help="cpu | cuda (default: CUDA when present)")
    parser.add_argument("--out", default=None, metavar="DIR", help="folder for bench-<date>.json (default: build/bench)")
    parser.add_argument("--no-figures-copy", dest="copy", action="store_false",
                        help="do not write figures/bench.json")
    parser.add_argument("--compile", action="store_true", help="also time torch.compile (minutes on a CPU)")


def run(args) -> int:
    try:
        device = pick_device(args.device)
        if device.type == "cuda" and not torch.cuda.is_available():
            raise ValueError("--device cuda was asked for, but no CUDA device is available")
    except (RuntimeError, ValueError) as error:
        print(f"bench: {error}", file=sys.stderr)
        return 1
    results = measure(QUICK if args.quick else FULL, device, compile_models=getattr(args, "compile", False))
    results["quick"] = bool(args.quick)
    print()
    print(format_report(results))
    for path in write(results, args.out, copy_to_figures=args.copy):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
