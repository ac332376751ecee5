"""Every clock of the book (the engine's epochs, the chapters' timed passes, the bench): the **median** of timed
repeats (a busy spell lengthens some; a minimum would flatter), the device synchronised before every clock read."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch

from .system import synchronize

#: What every caption says about a timing.
TIMING_NOTE = "median of the timed repeats after a warm-up, the device synchronised before each clock read"


class Intervals:
    """The sum of many short intervals (a step's data fetch), read once: CUDA events on a GPU (no host sync)."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self._intervals: list[tuple] = []  # (start, stop): clock readings, or CUDA events on a GPU
        self._seconds = 0.0
        self._opened: object = None

    def _mark(self) -> object:
        if not self.cuda:
            return time.perf_counter()
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def start(self) -> None:
        self._opened = self._mark()

    def stop(self) -> None:
        self._intervals.append((self._opened, self._mark()))

    def seconds(self) -> float:
        """Seconds in all intervals so far (on a GPU this waits once for the last one to finish)."""
        if self.cuda and self._intervals:
            self._intervals[-1][1].synchronize()
        self._seconds += sum(a.elapsed_time(b) / 1000 if self.cuda else b - a for a, b in self._intervals)
        self._intervals.clear()
        return self._seconds


def clock(device: torch.device) -> float:
    synchronize(device)
    return time.perf_counter()


def repeat(fn: Callable[[], object], *, repeats: int, device: torch.device, warmup: int = 1) -> float:
    """Seconds per call: the median of ``repeats`` calls, each timed on its own, after ``warmup`` untimed ones."""
    if repeats < 1:
        raise ValueError(f"repeats={repeats!r} is not allowed; time at least one call")
    for _ in range(warmup):
        fn()
    return statistics.median(block(fn, calls=1, device=device) for _ in range(repeats))


def block(fn: Callable[[], object], *, calls: int, device: torch.device) -> float:
    """Seconds per call of ``calls`` calls in a row, synchronised only around the block (as a training loop pays)."""
    if calls < 1:
        raise ValueError(f"calls={calls!r} is not allowed; time at least one call")
    start = clock(device)
    for _ in range(calls):
        fn()
    return (clock(device) - start) / calls


def interleave(runners: dict, *, warmup: int, repeats: int, length: int) -> dict[object, list[dict]]:
    """Warm every runner up, then run their repeats in turn (A B C, A B C, ...): a busy spell slows every variant
    alike. ``runner(n)`` returns a dict with ``seconds``."""
    for run in runners.values():
        if warmup:
            run(warmup)
    timings = {key: [] for key in runners}
    for _ in range(repeats):
        for key, run in runners.items():
            timings[key].append(run(length))
    return timings


def median_repeat(repeats: list[dict]) -> dict:
    """The repeat whose ``seconds`` is the median (the lower middle one for an even count)."""
    ordered = sorted(repeats, key=lambda r: r["seconds"])
    return ordered[(len(ordered) - 1) // 2]
