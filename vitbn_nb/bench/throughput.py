"""How a campaign should use two cores: one training process of two threads, or two processes of one thread each,
timed side by side in fresh processes, alternating within each round so a slow spell falls on both (``python -m
vitbn_nb campaign throughput``, on a quiet machine)."""

from __future__ import annotations

import multiprocessing as mp
import statistics
import time

import pandas as pd
import torch

from ..data import image_sets
from ..engines import engine
from ..models import build_model
from ..system import hardware_label

#: Seconds each measurement trains after its warm-up, warm-up steps, rounds per depth.
SECONDS, WARMUP_STEPS, ROUNDS = 30.0, 20, 2
DEPTHS = (6, 1)


def _steps_per_second(depth: int, threads: int, seconds: float, start, result) -> None:
    """In a fresh process: train steps of a ViT of ``depth`` on ``threads`` threads for ``seconds``; put its rate."""
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = build_model("ViT", depth=depth)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    train, _ = image_sets("mnist_aug", 2000, 100, "cpu")
    batches = list(train.batches(100, generator=engine.epoch_generator(0, 1), shuffle=True, min_batch=2))
    for i in range(WARMUP_STEPS):
        engine.train_step(model, optimizer, *batches[i % len(batches)])
    start.wait()  # the processes of one set-up start their clocks together
    steps, began = 0, time.perf_counter()
    while time.perf_counter() - began < seconds:
        engine.train_step(model, optimizer, *batches[steps % len(batches)])
        steps += 1
    result.put(steps / (time.perf_counter() - began))


def _run(depth: int, processes: int, threads: int, seconds: float) -> float:
    """Run-steps per second of ``processes`` processes of ``threads`` threads training at once, summed."""
    context = mp.get_context("spawn")
    start, result = context.Barrier(processes), context.Queue()
    workers = [
        context.Process(target=_steps_per_second, args=(depth, threads, seconds, start, result))
        for _ in range(processes)
    ]
    for worker in workers:
        worker.start()
    rates = [result.get() for _ in workers]
    for worker in workers:
        worker.join()
    return sum(rates)


def measure(depths=DEPTHS, rounds: int = ROUNDS, seconds: float = SECONDS) -> pd.DataFrame:
    """One row per depth and round: run-steps per second of one process of two threads and of two processes of one
    thread each, measured back to back (their order alternating by round), and their ratio."""
    rows = []
    for depth in depths:
        for round_ in range(rounds):
            setups = [("one worker, 2 threads", 1, 2), ("two workers, 1 thread each", 2, 1)]
            rates = {name: _run(depth, n, t, seconds) for name, n, t in (setups if round_ % 2 == 0 else setups[::-1])}
            two, one = rates["two workers, 1 thread each"], rates["one worker, 2 threads"]
            rows.append(
                {"depth": depth, "round": round_ + 1, "one worker (steps/s)": one, "two workers (steps/s)": two}
                | {"ratio two / one": two / one, "machine": hardware_label()}
            )
    return pd.DataFrame(rows)


def report(frame: pd.DataFrame) -> str:
    """The table, and the median ratio per depth in words."""
    lines = [frame.round(3).to_string(index=False)]
    for depth, rows in frame.groupby("depth", sort=False):
        ratio = statistics.median(rows["ratio two / one"])
        lines.append(
            f"depth {depth}: two 1-thread workers train {ratio:.2f}x the run-steps per second of one 2-thread worker "
            f"(median of {len(rows)} rounds)"
        )
    return "\n".join(lines)
