"""The two input pipelines the bench times, and its runners: training steps and test batches, clocked in parts.
``reference`` matches article 1's loop (a ``DataLoader``, a ``.item()`` per step, per-class counts in Python);
``engine`` is the book's (uint8 images on the device, counts vectorised)."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import torch
from torch import nn

from .. import timing
from ..engines import engine
from ..models import build_model

if TYPE_CHECKING:  # typing only: chapter 08 passes its settings (a SpeedSettings) in; the bench imports no chapter
    from ..profiles import ChapterSettings as SpeedSettings

PIPELINES = ("reference", "engine")
#: Article 1 timed its trio on MNIST without augmentation (ToTensor only); so does the bench.
DATASET = "mnist"


def reference_step(model: nn.Module, optimizer: torch.optim.Optimizer, x, y) -> float:
    """Article 1's step: zero_grad, forward, CrossEntropyLoss, backward, Adam, and the loss read back with .item()."""
    optimizer.zero_grad()
    loss = nn.CrossEntropyLoss()(model(x), y)
    loss.backward()
    optimizer.step()
    return loss.item()


def endless(train_data, batch_size: int, generator: torch.Generator) -> Iterator:
    while True:
        empty = True
        for batch in train_data.batches(batch_size, generator=generator, shuffle=True, min_batch=2):
            empty = False
            yield batch
        if empty:
            raise ValueError(f"the training set ({len(train_data)} images) gives no batch of {batch_size}")


def training_runner(
    model: nn.Module, train_data, pipeline: str, settings: SpeedSettings, device: torch.device, split: bool = True
):
    """``run(n)``: ``n`` training steps of ``model`` through ``pipeline``, clocked into data and compute; with
    ``split=False`` clocked only at the two ends of the ``n`` steps, as a training epoch runs them (the split's
    clock reads synchronise the device three times a step, which a GPU's step time would include)."""
    model.to(device).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=settings.lr)
    step: Callable = reference_step if pipeline == "reference" else engine.train_step
    batches = endless(train_data, settings.batch_size, torch.Generator().manual_seed(settings.seed))
    clock = (lambda: timing.clock(device)) if split else (lambda: float("nan"))  # unsplit: no read inside a step

    def run(steps: int) -> dict:
        data = compute = 0.0
        images = 0
        start = timing.clock(device)
        for _ in range(steps):
            t0 = clock()
            x, y = next(batches)
            t1 = clock()
            step(model, optimizer, x, y)
            t2 = clock()
            data, compute, images = data + t1 - t0, compute + t2 - t1, images + len(y)
        return {"seconds": timing.clock(device) - start, "data": data, "compute": compute, "images": images}

    return run


def _row(repeats: list[dict], count: int, *parts: str) -> dict:
    """The median repeat's throughput and ``<part>_seconds`` per step or batch (``count``): the whole ``step`` or
    ``batch``, or one clocked part of it."""
    chosen = timing.median_repeat(repeats)
    return {
        "images_per_s": chosen["images"] / chosen["seconds"],
        **{f"{part}_seconds": chosen["seconds" if part in ("step", "batch") else part] / count for part in parts},
        "data_share": chosen["data"] / chosen["seconds"],
        "images_per_s_repeats": [r["images"] / r["seconds"] for r in repeats],
    }


def time_training_many(variants: dict, *, settings: SpeedSettings, device: torch.device, split: bool = True) -> dict:
    """Training throughput of several ``key: (model, train_data, pipeline)`` variants, their
    ``repeats`` x ``steps`` steps interleaved after ``warmup`` steps each; one row per key (``split``: see
    :func:`training_runner`)."""
    runners = {key: training_runner(*variant, settings, device, split) for key, variant in variants.items()}
    timings = timing.interleave(runners, warmup=settings.warmup, repeats=settings.repeats, length=settings.steps)
    return {key: _row(timings[key], settings.steps, "step", "data", "compute") for key in variants}


def inference_runner(
    model: nn.Module, test_data, per_sample: bool, settings: SpeedSettings, device: torch.device, num_classes: int = 10
):
    """``run(n)``: ``n`` test batches, clocked into data, forward pass and per-class bookkeeping."""
    model.to(device).eval()
    batches = (batch for _ in itertools.count() for batch in test_data.batches(settings.test_batch_size))

    @torch.inference_mode()
    def one_batch():
        t0 = timing.clock(device)
        x, y = next(batches)
        t1 = timing.clock(device)
        logits = model(x)
        t2 = timing.clock(device)
        if per_sample:
            engine.count_classes_per_sample(logits, y, [0] * num_classes, [0] * num_classes)
        else:
            engine.count_classes(
                logits, y, torch.zeros(num_classes, device=device), torch.zeros(num_classes, device=device)
            )
        t3 = timing.clock(device)
        return t1 - t0, t2 - t1, t3 - t2, len(y)

    def run(n: int) -> dict:
        parts = [one_batch() for _ in range(n)]
        data, forward, book, images = (sum(p[i] for p in parts) for i in range(4))
        return dict(seconds=data + forward + book, data=data, forward=forward, bookkeeping=book, images=images)

    return run


def time_inference_many(variants: dict, *, settings: SpeedSettings, device: torch.device) -> dict:
    """Evaluation throughput of several ``key: (model, test_data, per_sample)`` variants: forward
    passes over test batches plus per-class accuracy counts, vectorised (``engine.count_classes``)
    or article 1's per-sample loop; repeats interleaved; one row per key."""
    runners = {key: inference_runner(*variant, settings, device) for key, variant in variants.items()}
    timings = timing.interleave(
        runners, warmup=settings.eval_warmup, repeats=settings.repeats, length=settings.eval_batches
    )
    parts = ("batch", "data", "forward", "bookkeeping")
    return {key: _row(timings[key], settings.eval_batches, *parts) for key in variants}


def _build(name: str, depth: int, seed: int, device: torch.device, **overrides) -> nn.Module:
    torch.manual_seed(seed)
    return build_model(name, depth=depth, **overrides).to(device)
