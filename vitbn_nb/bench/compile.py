"""What ``torch.compile`` would buy the engine's training step (``python -m vitbn_nb bench --compile``)."""

from __future__ import annotations

import contextlib
import tempfile

import torch

from .. import data
from ..chapters.speed.settings import SpeedSettings
from ..engines import engine
from ..system import pick_device
from . import timing
from .pipelines import (
    DATASET,
    _build,
    endless,
    time_training,
)
from .report import ratio


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


def time_compile(name: str, depth: int, settings: SpeedSettings, device=None) -> dict:
    """What ``torch.compile`` would buy the engine's training step: compile seconds (the first
    compiled step, less an eager step), eager and compiled step times (same batches, same
    repeats), and the steps it takes to pay the compile back. One shape only: a run also
    compiles again for its test batch and its last, smaller training batch."""
    device = pick_device(device)
    train_data = data.image_sets(DATASET, settings.train_size, settings.test_size, str(device))[0]
    eager = _build(name, depth, settings.seed, device)
    eager_row = time_training(eager, train_data, pipeline="engine", settings=settings, device=device)
    compiled_model = _build(name, depth, settings.seed, device)
    optimizer = torch.optim.Adam(compiled_model.parameters(), lr=settings.lr)
    batches = endless(train_data, settings.batch_size, torch.Generator(device=device).manual_seed(settings.seed))
    torch._dynamo.reset()
    with tempfile.TemporaryDirectory() as cache, _cold_inductor_cache(cache) as cold:
        # A cold cache, as a fresh checkout (or Colab) has: a warm one hides most of the compile time.
        compiled = torch.compile(compiled_model)
        start = timing.clock(device)
        engine.train_step(compiled, optimizer, *next(batches))
        first = timing.clock(device) - start
        compiled_row = time_training(compiled, train_data, pipeline="engine", settings=settings, device=device)
    compile_seconds = max(first - eager_row["step_seconds"], 0.0)
    saved = eager_row["step_seconds"] - compiled_row["step_seconds"]
    return {
        "model": name,
        "depth": depth,
        "compile_seconds": compile_seconds,
        "cold_cache": cold,
        "eager_step_seconds": eager_row["step_seconds"],
        "compiled_step_seconds": compiled_row["step_seconds"],
        "speedup": ratio(eager_row["step_seconds"], compiled_row["step_seconds"]),
        "break_even_steps": compile_seconds / saved if saved > 0 else float("inf"),
    }
