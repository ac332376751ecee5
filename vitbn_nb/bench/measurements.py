"""The bench's measurements (throughput of both pipelines, FLOPs and utilisation, peak memory, BatchNorm folding,
BatchNorm's forms on tokens); :func:`measure` runs them all."""

from __future__ import annotations

import contextlib
import copy
import ctypes
import datetime as dt
import gc
import re
import resource
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.flop_counter import FlopCounterMode, sdpa_backward_flop_count, sdpa_flop_count

from .. import data, timing
from ..models import AS_RUN_DEPTH, build_model, fold_batchnorm
from ..models.fold import count_batchnorms
from ..system import hardware, hardware_label, pick_device, synchronize, versions
from .norm_forms import time_norm_forms
from .pipelines import (
    DATASET,
    PIPELINES,
    _build,
    inference_runner,
    time_inference_many,
    time_training_many,
    training_runner,
)
from .report import BenchResult

if TYPE_CHECKING:  # typing only: chapter 08 passes its settings (a SpeedSettings) in; the bench imports no chapter
    from ..profiles import ChapterSettings as SpeedSettings

TIMING_NOTE = (
    "medians over repeats of a fixed number of steps after warm-up, the repeats of all configurations "
    "interleaved (so a busy spell slows them alike); the device is synchronised before every clock read; "
    "'data' is the time spent producing a batch (loading, augmenting, collating, copying to the device), "
    "'compute' the optimisation step (forward, backward, Adam) or the forward pass, 'bookkeeping' the "
    "per-class accuracy counting"
)


# -- Clocks, memory, FLOPs --------------------------------------------------------------------------------------------
def _rss_kib(field: str) -> int | None:
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        return None
    found = re.search(rf"^{field}:\s+(\d+) kB", status, re.M)
    return int(found.group(1)) if found else None


class PeakMemory:
    """Peak memory of the block above what was in use when it began, in MiB (``.mib``; ``.what`` says how): CUDA's
    ``max_memory_allocated``, or the CPU's VmHWM reset through ``/proc/self/clear_refs`` after freed memory is
    returned (else ``ru_maxrss``, an upper bound)."""

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
        with contextlib.suppress(OSError, AttributeError):  # not glibc: RSS may include memory kept from earlier work
            ctypes.CDLL("libc.so.6").malloc_trim(0)
        self._base = _rss_kib("VmRSS")
        try:
            Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current RSS
            self._reset = self._base is not None
        except OSError:
            self._reset = False
        self.what = (
            "process RSS high-water mark (VmHWM, reset through /proc/self/clear_refs) above the RSS at "
            "the start, freed memory returned to the OS first"
            if self._reset
            else "ru_maxrss: the process's lifetime peak RSS above the RSS at the start (an upper bound)"
        )
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
    return sdpa_flop_count(query.shape, key.shape, value.shape)


def _sdpa_backward_flops(grad_out, query, key, value, *args, out_val=None, **kwargs) -> int:
    return sdpa_backward_flop_count(grad_out.shape, query.shape, key.shape, value.shape)


_sdpa_forward_flops._get_raw = _sdpa_backward_flops._get_raw = True


def _flop_counter():
    """A FlopCounterMode that also counts the CPU flash-attention kernels, which torch's table omits."""
    kernel = "_scaled_dot_product_flash_attention_for_cpu"
    formulas = {kernel: _sdpa_forward_flops, f"{kernel}_backward": _sdpa_backward_flops}
    extra = {getattr(torch.ops.aten, name): f for name, f in formulas.items() if hasattr(torch.ops.aten, name)}
    return FlopCounterMode(display=False, custom_mapping=extra)


def training_flops(model: nn.Module, batch_size: int, device: torch.device) -> int:
    """Floating-point operations of one training step's forward and backward pass (Adam's update not counted)."""
    probe = copy.deepcopy(model).to(device).train()
    x = torch.rand(batch_size, 1, 28, 28, device=device)
    y = torch.randint(0, 10, (batch_size,), device=device)
    with _flop_counter() as counter:
        F.cross_entropy(probe(x), y).backward()
    return int(counter.get_total_flops())


def inference_flops(model: nn.Module, batch_size: int, device: torch.device) -> int:
    """Floating-point operations of one forward pass over ``batch_size`` images in eval mode."""
    probe = copy.deepcopy(model).to(device).eval()
    with torch.inference_mode(), _flop_counter() as counter:
        probe(torch.rand(batch_size, 1, 28, 28, device=device))
    return int(counter.get_total_flops())


def matmul_peak(device=None, *, size: int = 2048, repeats: int = 5) -> dict:
    """This machine's fp32 matmul rate: the median time of ``size``^3 products, as FLOP/s."""
    device = pick_device(device)
    generator = torch.Generator(device=device).manual_seed(0)
    a = torch.randn(size, size, device=device, generator=generator)
    b = torch.randn(size, size, device=device, generator=generator)
    seconds = timing.repeat(lambda: a @ b, repeats=repeats, device=device, warmup=2)
    tf32 = device.type == "cuda" and torch.backends.cuda.matmul.allow_tf32
    return {
        "size": size,
        "repeats": repeats,
        "seconds": seconds,
        "flops_per_s": 2 * size**3 / seconds,
        "dtype": "float32" + (" (TF32 allowed)" if tf32 else ""),
        "threads": torch.get_num_threads(),
    }


# -- The whole measurement --------------------------------------------------------------------------------------------
def without_norms(model: nn.Module) -> nn.Module:
    """An eval copy of ``model`` with every LayerNorm and BatchNorm replaced by the identity: wrong outputs, but its
    time is the model's with free norms (what folding reaches for BatchNorm, and LayerNorm cannot)."""
    stripped = copy.deepcopy(model).eval()
    norms = (nn.LayerNorm, nn.modules.batchnorm._BatchNorm)
    for module in list(stripped.modules()):
        for child_name, child in list(module.named_children()):
            if isinstance(child, norms):
                setattr(module, child_name, nn.Identity())
    return stripped


def measure(settings: SpeedSettings, device=None, *, log: Callable[[str], None] | None = print) -> BenchResult:
    """Run every measurement of the module docstring, with ``settings`` (chapter 08's)."""
    device = pick_device(device)
    log = log or (lambda message: None)
    log(f"bench on {hardware_label(device)} | torch {torch.__version__} | {torch.get_num_threads()} threads")
    results = {
        "schema": 1,
        "date": dt.datetime.now().isoformat(timespec="seconds"),
        "device": device.type,
        "hardware": hardware(device),
        "hardware_label": hardware_label(device),
        "versions": versions(),
        "settings": settings.as_dict(),
        "profile": settings.profile,
        "dataset": DATASET,
        "timing": TIMING_NOTE,
    }
    log(f"fp32 matmul peak ({settings.matmul_size}^3, median of {settings.matmul_repeats}) ...")
    results["matmul_peak"] = peak = matmul_peak(device, size=settings.matmul_size, repeats=settings.matmul_repeats)
    # the same subsets of MNIST without augmentation (article 1's data) through both pipelines
    sizes = (DATASET, settings.train_size, settings.test_size)
    sets = {"reference": data.reference_sets(*sizes, device), "engine": data.image_sets(*sizes, str(device))}
    configs = [(name, depth) for name in settings.models for depth in settings.depths]
    # Every configuration's repeats are interleaved with every other's, so that a busy spell on a
    # shared machine slows them all alike and the ratios between them stay fair.
    log(f"train {len(configs)} configurations x {len(PIPELINES)} pipelines, interleaved ...")
    models = {
        (name, depth, p): _build(name, depth, settings.seed, device) for name, depth in configs for p in PIPELINES
    }
    rows = time_training_many(
        {key: (model, sets[key[2]][0], key[2]) for key, model in models.items()}, settings=settings, device=device
    )
    training = []
    for (name, depth, pipeline), row in rows.items():
        flops_step = training_flops(build_model(name, depth=depth), settings.batch_size, device)
        with PeakMemory(device) as memory:  # building the model and two steps (Adam's state included)
            fresh = _build(name, depth, settings.seed, device)
            training_runner(fresh, sets[pipeline][0], pipeline, settings, device)(2)
            del fresh
        results["memory_measure"], achieved = memory.what, flops_step / row["step_seconds"]
        row.update(model=name, depth=depth, as_run=AS_RUN_DEPTH.get(name) == depth, pipeline=pipeline)
        row.update(flops_per_step=flops_step, achieved_flops=achieved, mfu=achieved / peak["flops_per_s"])
        row.update(compute_mfu=flops_step / row["compute_seconds"] / peak["flops_per_s"], peak_memory_mib=memory.mib)
        training.append(row)

    variants, extra = {}, {}  # key: (model, test data, per-sample counting), and the row's flags

    def add(key, model, test_data, per_sample=False, **flags):
        variants[key], extra[key] = (model, test_data, per_sample), dict(pipeline="engine", folded=False) | flags

    test_set = sets["engine"][1]
    for name, depth in configs:
        trained = models[(name, depth, "engine")].eval()  # some steps in: running statistics are not 0 and 1
        add((name, depth, "reference"), trained, sets["reference"][1], True, pipeline="reference")
        add((name, depth, "engine"), trained, test_set)
        if count_batchnorms(trained):
            folded = fold_batchnorm(trained)
            x, _ = next(iter(test_set.batches(min(settings.test_batch_size, 256))))
            with torch.inference_mode():
                difference = float((folded(x) - trained(x)).abs().max())
            flags = dict(folded=True, batchnorms_left=count_batchnorms(folded), max_abs_logit_difference=difference)
            add((name, depth, "folded"), folded, test_set, **flags)
        if name == "ViT":  # what LayerNorm, which cannot fold, costs
            add((name, depth, "no norms"), without_norms(trained), test_set, norms_removed=True)
    log(f"infer {len(variants)} variants (pipelines, folded, ViT without its LayerNorms), interleaved ...")
    rows = time_inference_many(variants, settings=settings, device=device)
    inference = []
    for key, row in rows.items():
        name, depth, _ = key
        flops_image = inference_flops(variants[key][0], 2, device) / 2
        with PeakMemory(device) as memory:  # one test batch: producing it, the forward pass, the counts
            inference_runner(*variants[key], settings, device)(1)
        achieved = flops_image * row["images_per_s"]
        row.update(model=name, depth=depth, as_run=AS_RUN_DEPTH.get(name) == depth, **extra[key])
        row.update(flops_per_image=flops_image, achieved_flops=achieved, mfu=achieved / peak["flops_per_s"])
        row.update(peak_memory_mib=memory.mib)
        inference.append(row)
    log("BatchNorm forms on tokens ...")
    norm_forms = time_norm_forms(
        device,
        batch=settings.batch_size,
        test_batch=settings.test_batch_size,
        min_run_time=settings.norm_seconds,
        repeats=settings.repeats,
    )
    return BenchResult(results, pd.DataFrame(training), pd.DataFrame(inference), pd.DataFrame(norm_forms))
