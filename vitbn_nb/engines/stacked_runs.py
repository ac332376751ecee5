"""The stacked engine's runs (:mod:`vitbn_nb.engines.stack`): the members of one stack trained together into the
store, each finishing (or diverging) on its own. Loaded by name from :data:`vitbn_nb.engines.training.ENGINES` only
when a run names the stacked engine."""

from __future__ import annotations

import functools

import torch

from ..store.run_folder import Run
from . import check_device, engine, stack


def train_started(started: list, data, device: torch.device, progress: bool) -> list[Run]:
    """The members at one epoch as one stack (``started``: each member's configuration, files, model and optimiser
    state); a member that diverges finishes, the others go on."""
    config, (train_data, test_data) = started[0][0], data
    groups: dict[int, list] = {}
    for c, files, model, optimizer_state in started:
        optimizer = stack.optimizer_for(model, c.lr, device)
        if optimizer_state is not None:
            optimizer.load_state_dict(optimizer_state)
        groups.setdefault(len(files.record["epochs"]), []).append((c, files, model, optimizer))

    tests = dict(batch_size=config.test_batch_size, num_classes=config.model_kwargs.get("num_classes", 10))
    per_sample = config.pipeline == "reference"
    evaluate = functools.partial(engine.evaluate, test_data=test_data, device=device, per_sample=per_sample, **tests)

    finished: list[Run] = []
    steps = engine.steps_per_epoch(len(train_data), config.batch_size)
    for start_epoch, group in sorted(groups.items()):
        desc = f"{len(group)} stacked: {config.label().rsplit(' lr=', 1)[0]}"
        with engine.progress_bar(config.epochs * steps, start_epoch * steps, desc, progress) as bar:
            while group:

                def epoch_end(per_member: list[dict], group=group) -> bool:
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
                    refused=check_device.refused_engines(device),
                )
                ended = lambda files: (e := files.record["epochs"]) and (e[-1]["diverged"] or len(e) >= config.epochs)
                finished += [files.finish(model) for _, files, model, _ in group if ended(files)]
                still = [member for member in group if not ended(member[1])]
                if still and len(still) == len(group):  # nobody diverged, nobody finished: the deadline stopped it
                    still[0][1].finish(still[0][2])  # raises DeadlineReached (every member is checkpointed)
                group = still
    return finished
