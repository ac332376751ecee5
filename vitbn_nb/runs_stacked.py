"""Runs trained together as one stacked model (``engine="stacked"``, ``vitbn_nb.stack``), each stored as its own run.

:func:`vitbn_nb.runs.train_all` hands every stack key's configurations here together; members resume from their
own checkpoints, and a member that diverges is finished while the others go on.
"""

from __future__ import annotations

import contextlib

import torch
from torch import nn

from . import engine, stack
from .limits import Deadline, DeadlineReached, training_is_off
from .paths import stored_path
from .run_config import RunConfig
from .run_folder import Run, RunFiles, run_lock, stored_device_type, stored_run
from .runs import check_force, mirror, new_model, refuse_when_off, training_sets
from .system import pick_device


def train_stack(
    configs: list[RunConfig],
    *,
    force: bool = False,
    device: str | torch.device | None = None,
    progress: bool = True,
    mlflow: bool | None = None,
    deadline: Deadline | None = None,
) -> list[Run]:
    """Train runs of one stack key together (``engine="stacked"``); each is stored as its own run.

    Finished members come from the store; the others resume from their own checkpoints, and those that stand
    at the same epoch train as one stack (members at different epochs train as separate stacks).
    """
    if len({c.stack_key() for c in configs}) != 1 or configs[0].stack_key() is None:
        raise ValueError("train_stack takes stacked configurations that differ in seed and lr only")
    device = pick_device(device)
    off = training_is_off()
    ids = [c.run_id(device.type if force else stored_device_type(c, device)) for c in configs]
    force = check_force(force, off, ids[0])
    found: dict[str, Run] = {}
    if not force:
        for run_id in ids:
            if (done := stored_run(stored_path(run_id))) is not None:
                found[run_id] = mirror(done, mlflow)
        if len(found) == len(set(ids)):
            return [found[run_id] for run_id in ids]
    if deadline is not None and deadline.passed():
        raise DeadlineReached(next(i for i in ids if i not in found))
    with contextlib.ExitStack() as locks:
        for run_id in sorted(set(ids)):  # one order for every process: no two wait on each other
            locks.enter_context(run_lock(run_id, progress))
        waiting: dict[int, list[tuple[RunConfig, RunFiles, nn.Module, torch.optim.Optimizer]]] = {}
        for config, run_id in zip(configs, ids):
            if run_id in found or any(f.run_id == run_id for group in waiting.values() for _, f, _, _ in group):
                continue  # listed twice
            files = RunFiles(config, run_id, device, deadline)
            if (done := files.finished(force)) is not None:
                found[run_id] = mirror(done, mlflow)
                continue
            if off:
                refuse_when_off(run_id)
            model, trainable = new_model(config, device)
            train_data, test_data = training_sets(config, device)
            optimizer_state = files.start(model, len(train_data), len(test_data), trainable)
            optimizer = stack.optimizer_for(model, config.lr, device)
            if optimizer_state is not None:
                optimizer.load_state_dict(optimizer_state)
            waiting.setdefault(len(files.record["epochs"]), []).append((config, files, model, optimizer))
        for start_epoch, group in sorted(waiting.items()):
            for run in _train_group(group, start_epoch, device, progress, mlflow):
                found[run.run_id] = run
    return [found[run_id] for run_id in ids]


def _train_group(group: list, start_epoch: int, device: torch.device, progress: bool, mlflow: bool | None) -> list[Run]:
    """Train one stack from ``start_epoch``; a member that diverges is finished and the others go on without it."""
    config = group[0][0]
    train_data, test_data = training_sets(config, device)
    steps = engine.steps_per_epoch(len(train_data), config.batch_size)
    desc = f"{len(group)} stacked: {config.label().rsplit(' lr=', 1)[0]}"
    finished: list[Run] = []
    with engine.progress_bar(config.epochs * steps, start_epoch * steps, desc, progress) as bar:
        while group:
            _train_members(group, train_data, test_data, device, bar)
            still = []
            for entry in group:
                _, files, model, _ = entry
                epochs = files.record["epochs"]
                if epochs and (epochs[-1]["diverged"] or len(epochs) >= config.epochs):
                    finished.append(mirror(files.finish(model), mlflow))
                else:
                    still.append(entry)
            if still and len(still) == len(group):  # nobody diverged, nobody finished: the deadline stopped it
                still[0][1].finish(still[0][2])  # raises DeadlineReached (every member is checkpointed)
            group = still
    return finished


def _train_members(group: list, train_data, test_data, device: torch.device, bar) -> None:
    """One stack of ``group``'s members until they finish, one diverges, or the deadline stops them."""
    config = group[0][0]

    def evaluate(model: nn.Module) -> dict:
        return engine.evaluate(
            model,
            test_data,
            batch_size=config.test_batch_size,
            num_classes=config.model_kwargs.get("num_classes", 10),
            device=device,
            per_sample=config.pipeline == "reference",
        )

    def epoch_end(per_member: list[dict]) -> bool:
        stopping = any(files.stops(m) for (_, files, _, _), m in zip(group, per_member))
        for (_, files, model, optimizer), metrics in zip(group, per_member):
            files.epoch_done(metrics, model, optimizer, stopping=stopping)
        return stopping

    stack.train_models(
        [stack.Member(model, optimizer, c.seed) for c, _, model, optimizer in group],
        train_data,
        epochs=config.epochs,
        start_epoch=len(group[0][1].record["epochs"]),
        batch_size=config.batch_size,
        device=device,
        evaluate=evaluate,
        on_epoch_end=epoch_end,
        bar=bar,
    )
