"""Training runs into the run store (:mod:`vitbn_nb.store`): a finished configuration comes back from the store, an
interrupted run resumes from its checkpoint, ``force=True`` trains anew beside the stored run, a deadline stops at an
epoch boundary; runs of one stack key train together as one stacked model (the stacked engine is loaded only there)."""

from __future__ import annotations

import importlib
from collections.abc import Iterable

import torch
from torch import nn

from .. import profiles
from ..data import Batches, image_sets, reference_sets
from ..limits import Deadline, DeadlineReached
from ..models import build_model
from ..models.vit import pair as vit_pair
from ..paths import is_committed, mirror_asked, runs_dir, stored_path
from ..store.records import RunStoreError, load_weights
from ..store.run_config import RunConfig
from ..store.run_folder import Run, RunFiles, recover_swaps, run_locks, stored_id, stored_run
from ..system import pick_device
from . import engine, finetune

#: The engines a run may name besides the eager one, each by the module that trains its runs: loaded by name only when
#: a run names it, so that what a notebook imports never loads GPU code.
ENGINES = {"stacked": "vitbn_nb.engines.stacked_runs"}
#: The MLflow mirror (an operation above the engine), loaded by name only when a run is to be mirrored.
TRACKER = "vitbn_nb.store.tracking"


def train(config: RunConfig, **options) -> Run:
    """Train ``config``, or return it from the store when it already finished; ``options``: :func:`train_all`'s."""
    return train_all([config], **options)[0]


def train_all(
    configs: Iterable[RunConfig],
    *,
    force: bool = False,
    device: str | torch.device | None = None,
    progress: bool = True,
    mlflow: bool | None = None,
    deadline: Deadline | None = None,
    one_stream: bool = False,
    train: bool = True,
) -> list[Run]:
    """Train ``configs`` in order (those finished read from the store, a stack key's together). ``force``: train anew
    (a bool or 'true' / 'false'). ``deadline``: no run starts after it, and a run stops at the last epoch boundary
    before it (:class:`DeadlineReached`). ``mlflow``: mirror the runs (``None``: when ``MLFLOW_TRACKING_URI`` is set).
    ``one_stream``: a finished run that drew another data stream than the one does not count. ``train=False``: read
    every run from the store, train none (a run it lacks is an error naming it); a chapter passes its settings'."""
    configs = list(configs)
    device = pick_device(device)
    off = not profiles.flag("train", train)
    force = profiles.flag("force", force)
    if off and force and configs:
        raise ValueError(
            f"force=True would delete and retrain run {configs[0].run_id(device.type)}, but training is off "
            "(train=False)"
        )
    if not off and configs:
        recover_swaps()  # a retrain a kill stopped mid-swap: its run put in place before anything reads it
    done: dict[str, Run] = {}
    read = 0
    for unit in units(configs):
        ids = [c.run_id(device.type) if force else stored_id(c, device, one_stream=one_stream) for c in unit]
        held = {} if force else {i: run for i in ids if (run := stored_run(stored_path(i))) is not None}
        left = {i: c for c, i in zip(unit, ids) if i not in held}  # held: read without the locks (it never changes)
        if not left:
            read += len(unit)
        else:
            if progress and len(configs) > 1:  # a line per unit that trains; the runs read, counted once
                together = f" (with {len(unit) - 1} more, stacked)" if len(unit) > 1 else ""
                print(f"[{configs.index(unit[0]) + 1}/{len(configs)}] {unit[0].label()}{together}", flush=True)
            held |= _train_unit(left, device, force, off, deadline, progress)
        done |= {c.run_id("cpu"): mirror(held[i], mlflow) for c, i in zip(unit, ids)}
    if progress and len(configs) > 1:
        print(f"{len(configs)} runs: {read} read from the store, {len(configs) - read} trained or resumed", flush=True)
    return [done[c.run_id("cpu")] for c in configs]


def units(configs: Iterable[RunConfig]) -> list[list[RunConfig]]:
    """What trains as one, in plan order: the runs of a stack key together, any other run alone (a repeat, once)."""
    found: dict[str, list[RunConfig]] = {}
    for config in configs:
        unit = found.setdefault(config.stack_key() or config.run_id("cpu"), [])
        if config not in unit:
            unit.append(config)
    return list(found.values())


def training_sets(config: RunConfig, device: torch.device) -> tuple[Batches, Batches]:
    """The training and test data of ``config``'s runs on ``device``, by its pipeline."""
    if config.pipeline == "engine":
        return image_sets(config.dataset, config.train_size, config.test_size, str(device))
    return reference_sets(config.dataset, config.train_size, config.test_size, device)


def mirror(run: Run, mlflow: bool | None, tags: dict | None = None) -> Run:
    """Copy a finished run to MLflow when asked (``mlflow``; ``None``: when ``MLFLOW_TRACKING_URI`` names a server),
    by the mirror :data:`TRACKER` names, loaded only then."""
    if mirror_asked(mlflow):
        importlib.import_module(TRACKER).mirror(run, explicit=bool(mlflow), tags=tags)
    return run


# -- one unit (a run, or a stack) under its runs' locks ---------------------------------------------------------------


def _train_unit(left: dict[str, RunConfig], device, force, off, deadline, progress) -> dict[str, Run]:
    """Under the locks of one unit's runs ``left`` (by id): those finished meanwhile read back, the others trained."""
    if deadline is not None and any(map(deadline.refuses, left.values())):  # passed, or no room by the estimate
        raise DeadlineReached(next(iter(left)))
    found: dict[str, Run] = {}
    with run_locks(left, progress):
        opened = []
        for run_id, config in left.items():
            files = RunFiles(config, run_id, device, deadline)
            if (done := files.finished(force)) is not None:
                found[run_id] = done
            elif off:
                raise RunStoreError(
                    run_id,
                    f"it is not finished in the run store {runs_dir()} and training is off (train=False)",
                    fix="fix: train it (python -m vitbn_nb train, or the chapter without TRAIN=never), or import the "
                    "runs of the machine that trained them",
                )
            else:
                opened.append((config, files, *seeded_model(config, device)))
        if opened:
            data = training_sets(opened[0][0], device)
            started = [(c, files, model, files.start(model, *map(len, data), how)) for c, files, model, how in opened]
            if opened[0][0].engine == "stacked":  # GPU code: loaded only here, by name (the CPU path never loads it)
                stacked = importlib.import_module(ENGINES["stacked"])
                found |= {run.run_id: run for run in stacked.train_started(started, data, device, progress)}
            else:
                found[started[0][1].run_id] = _train_alone(started[0], data, device, progress)
    return found


def seeded_model(config: RunConfig, device: torch.device) -> tuple[nn.Module, finetune.Trainable]:
    """``config``'s model, seeded (started from ``init_from``'s weights when given), and which of its weights train."""
    torch.manual_seed(config.seed)
    model = build_model(config.model, **config.model_kwargs).to(device)
    if config.init_from is not None:
        _initialise_from(model, config)
    return model, finetune.set_trainable(model, config.trainable)


def _initialise_from(model: nn.Module, config: RunConfig) -> None:
    """Start ``model`` from the finished run ``config.init_from`` (its position embedding resized to this grid)."""
    folder = stored_path(config.init_from)
    if not (folder / "record.json").is_file() or not (folder / "model.pt").is_file():
        held = " (its committed record has no weights: train it with --from-scratch)" if is_committed(folder) else ""
        raise ValueError(
            f"init_from={config.init_from!r} is not allowed: no finished run with that id and its weights in "
            f"{runs_dir()}{held}"
        )
    source = Run(folder)
    if source.config.model != config.model:
        raise ValueError(
            f"init_from={config.init_from!r} is a {source.config.model} run; this run trains a {config.model}"
        )
    kwargs = source.config.model_kwargs
    state = load_weights(folder / "model.pt", config.init_from, source.record.get("checksums", {}).get("model.pt"))
    try:
        if "patch_size" in kwargs:
            sizes = zip(vit_pair(kwargs["image_size"]), vit_pair(kwargs["patch_size"]))
            finetune.load_resized(model, state, [size // patch for size, patch in sizes])
        else:
            model.load_state_dict(state)
    except RuntimeError as error:
        raise ValueError(f"init_from={config.init_from!r}: its weights do not fit this model ({error})") from error


def _train_alone(started: tuple, data, device: torch.device, progress: bool) -> Run:
    """The eager engine: one run."""
    config, files, model, optimizer_state = started
    engine.train_model(
        model,
        *data,
        **engine_options(config, device),
        start_epoch=len(files.record["epochs"]),
        optimizer_state=optimizer_state,
        on_epoch_end=files.epoch_done,
        stop=files.stops,
        progress=progress,
    )
    return files.finish(model)


def engine_options(config: RunConfig, device: torch.device) -> dict:
    """What :func:`engine.train_model` takes from a run's configuration (the eager engine's every run, and a replay)."""
    return dict(
        epochs=config.epochs,
        lr=config.lr,
        batch_size=config.batch_size,
        test_batch_size=config.test_batch_size,
        seed=config.seed,
        num_classes=config.model_kwargs.get("num_classes", 10),
        device=device,
        per_sample_eval=config.pipeline == "reference",
        item_per_step=config.pipeline == "reference",
        desc=config.label(),
    )
