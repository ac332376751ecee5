"""The run store: every training run recorded, reused and resumable. A finished configuration asked for again comes
from the store, an interrupted one resumes, ``force=True`` trains anew; stacked runs train together
(:func:`train_stack`, the only place the stacked engine is loaded)."""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterable

import pandas as pd
import torch
from torch import nn

from .. import profiles
from ..data import image_sets, reference_sets
from ..engines import engine, finetune
from ..limits import TRAIN_VARIABLE, Deadline, DeadlineReached, model_problem, training_is_off
from ..models import build_model
from ..models.vit import pair as vit_pair
from ..paths import is_committed, runs_dir, stored_path
from ..system import label as system_label
from ..system import pick_device
from . import tracking
from .records import RunStoreError, delete_fix, load_weights
from .run_config import _READ_AS, RunConfig
from .run_folder import Run, RunFiles, is_run_name, record_stream, run_lock, run_locks, stored_id, stored_run

# The chapters and the figures' footers call the stored measurements as runs.*:
from .run_folder import measured as measured
from .run_folder import timed_on as timed_on
from .run_folder import trained_on as trained_on


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


def training_sets(config: RunConfig, device: torch.device):
    if config.pipeline == "engine":
        return image_sets(config.dataset, config.train_size, config.test_size, str(device))
    return reference_sets(config.dataset, config.train_size, config.test_size, device)


def _opened(config: RunConfig, run_id: str, device: torch.device, deadline, force: bool, off: bool, mlflow):
    """Under the run's lock: the stored run when it is finished, else its files started (resumed from a checkpoint),
    its model, its optimiser's state and its data."""
    files = RunFiles(config, run_id, device, deadline)
    if (done := files.finished(force)) is not None:
        return mirror(done, mlflow)
    if off:
        raise RunStoreError(
            run_id,
            f"it is not finished in the run store {runs_dir()} and training is off ({TRAIN_VARIABLE}=never)",
            fix="fix: train it (python -m vitbn_nb train, or the chapter without TRAIN=never), or import the runs "
            "of the machine that trained them",
        )
    torch.manual_seed(config.seed)
    model = build_model(config.model, **config.model_kwargs).to(device)
    if config.init_from is not None:
        _initialise_from(model, config)
    trainable = finetune.set_trainable(model, config.trainable)
    train_data, test_data = training_sets(config, device)
    return files, model, files.start(model, len(train_data), len(test_data), trainable), train_data, test_data


def check_force(force: bool, off: bool, run_id: str) -> bool:
    force = profiles.flag("force", force)
    if off and force:
        raise ValueError(
            f"force=True would delete and retrain run {run_id}, but training is off ({TRAIN_VARIABLE}=never)"
        )
    return force


def train(
    config: RunConfig,
    *,
    force: bool = False,
    device: str | torch.device | None = None,
    progress: bool = True,
    mlflow: bool | None = None,
    deadline: Deadline | None = None,
    one_stream: bool = False,
) -> Run:
    """Train ``config``, or return it from the store when it already finished. ``deadline``: stop at the last epoch
    boundary before it (:class:`DeadlineReached`, resumable). ``mlflow``: mirror the finished run (``None``: when
    ``MLFLOW_TRACKING_URI`` is set). ``force`` must be a bool or 'true' / 'false'. ``one_stream``: a finished run that
    drew another data stream than the one (a GPU's from before it) does not count; the run trains on the one."""
    if config.engine == "stacked":
        options = dict(force=force, device=device, progress=progress, mlflow=mlflow, deadline=deadline)
        return train_stack([config], **options, one_stream=one_stream)[0]
    device = pick_device(device)
    off = training_is_off()  # checked first: a misspelt setting must not pass silently
    force = check_force(force, off, config.run_id(device.type))
    run_id = config.run_id(device.type) if force else stored_id(config, device, one_stream=one_stream)
    if not force and (done := stored_run(stored_path(run_id))) is not None:
        return mirror(done, mlflow)  # read without the lock: a finished run never changes
    if deadline is not None and deadline.refuses(config):  # passed, or no room for one epoch by the estimate
        raise DeadlineReached(run_id)
    with run_lock(run_id, progress):
        opened = _opened(config, run_id, device, deadline, force, off, mlflow)
        if isinstance(opened, Run):
            return opened
        files, model, optimizer_state, train_data, test_data = opened
        engine.train_model(
            model,
            train_data,
            test_data,
            epochs=config.epochs,
            lr=config.lr,
            batch_size=config.batch_size,
            test_batch_size=config.test_batch_size,
            seed=config.seed,
            num_classes=config.model_kwargs.get("num_classes", 10),
            device=device,
            start_epoch=len(files.record["epochs"]),
            optimizer_state=optimizer_state,
            per_sample_eval=config.pipeline == "reference",
            item_per_step=config.pipeline == "reference",
            on_epoch_end=files.epoch_done,
            stop=files.stops,
            progress=progress,
            desc=config.label(),
        )
        return mirror(files.finish(model), mlflow)


def mirror(run: Run, mlflow: bool | None) -> Run:
    """Copy a finished run to MLflow when asked; mlflow is imported only then."""
    if not tracking.enabled(mlflow):
        return run
    if not mlflow and (why := tracking.unreachable(tracking.tracking_uri())):
        tracking.warn_once(f"runs are stored but not mirrored to MLflow: {why}")
        return run
    try:
        tracking.mirror_run(run)
    except Exception as error:
        if mlflow:
            raise
        # once per cause: a dead server would otherwise warn for every run of the book
        warnings.warn(f"runs are stored but not mirrored to MLflow: {error}", stacklevel=3)
    return run


def train_all(
    configs: Iterable[RunConfig],
    *,
    force: bool = False,
    device: str | torch.device | None = None,
    progress: bool = True,
    mlflow: bool | None = None,
    deadline: Deadline | None = None,
    one_stream: bool = False,
) -> list[Run]:
    """Train several configurations in order (finished ones come from the store); stacked ones that share a stack
    key train together when the first of them comes up. No run starts after ``deadline``; ``one_stream``: as
    :func:`train`."""
    force = profiles.flag("force", force)
    configs = list(configs)
    stacks: dict[str, list[RunConfig]] = {}
    for config in configs:
        if (key := config.stack_key()) is not None:
            stacks.setdefault(key, []).append(config)
    done: dict[str, Run] = {}
    key = lambda config: json.dumps(config.to_dict(), sort_keys=True)
    options = dict(force=force, device=device, progress=progress, mlflow=mlflow, deadline=deadline)
    options |= dict(one_stream=one_stream)
    device_ = pick_device(device)
    read = 0
    for i, config in enumerate(configs, 1):
        if key(config) in done:
            continue
        members = stacks[config.stack_key()] if config.stack_key() else [config]
        held = not force and all(
            stored_run(stored_path(stored_id(m, device_, one_stream=one_stream))) is not None for m in members
        )
        read += len(members) if held else 0
        if progress and len(configs) > 1 and not held:  # a line per run that trains; the ones read, counted once
            together = f" (with {len(members) - 1} more, stacked)" if len(members) > 1 else ""
            print(f"[{i}/{len(configs)}] {config.label()}{together}", flush=True)
        trained = train_stack(members, **options) if config.stack_key() else [train(config, **options)]
        done.update(zip(map(key, members), trained))
    if progress and len(configs) > 1:
        print(f"{len(configs)} runs: {read} read from the store, {len(configs) - read} trained or resumed", flush=True)
    return [done[key(config)] for config in configs]


def load_table(runs: Iterable[Run | dict] | None = None) -> pd.DataFrame:
    """One row per run and epoch, config flattened into columns (``class_acc_0`` ... per class), with the machine
    that trained (and so timed) each epoch (``machine``: a run resumed elsewhere has two)."""
    if runs is None:
        runs = [Run(p.parent) for p in sorted(runs_dir().glob("*/record.json"))]
    rows = []
    for run in runs:
        record = run.record if isinstance(run, Run) else run
        config = dict(record["config"])
        kwargs = config.pop("model_kwargs")
        config["pipeline"] = _READ_AS.get(config.get("pipeline"), config.get("pipeline"))
        base = {
            "run_id": record["run_id"],
            "status": record["status"],
            "device": record["hardware"]["device"],
            "stream": record_stream(record),
            "finished": record.get("finished"),
            "depth": kwargs.get("depth"),
            **config,
        }
        machines = epoch_machines(record)
        for epoch, machine in zip(record["epochs"], machines):
            row = {**base, "machine": machine, **{k: v for k, v in epoch.items() if k != "class_acc"}}
            row.update({f"class_acc_{i}": acc for i, acc in enumerate(epoch.get("class_acc", []))})
            rows.append(row)
    # no run at all: the columns every selection reads, so an empty table selects to empty tables, not a KeyError
    return pd.DataFrame(rows) if rows else pd.DataFrame(columns=EMPTY_TABLE_COLUMNS)


#: The columns of a run table with no run.
EMPTY_TABLE_COLUMNS = (
    "run_id",
    "status",
    "device",
    "stream",
    "finished",
    "depth",
    "model",
    "dataset",
    "epochs",
    "lr",
    "batch_size",
    "test_batch_size",
    "seed",
    "train_size",
    "test_size",
    "pipeline",
    "machine",
    "epoch",
    "train_loss",
    "test_acc",
    "diverged",
    "train_seconds",
    "test_seconds",
)


def finished_before(written: str) -> pd.DataFrame:
    """The run table (:func:`load_table`) of every finished run held, in the run store or among the committed records,
    that finished before ``written`` (an ISO date and time): what a seed plan written then could read."""
    from ..paths import committed_records_dir

    folders = {}
    for store in (committed_records_dir(), runs_dir()):  # the run store's own copy wins
        if store is not None and store.is_dir():
            folders.update({folder.name: folder for folder in store.iterdir() if is_run_name(folder.name)})
    held = []
    for folder in folders.values():
        try:
            run = stored_run(folder)
        except RunStoreError:
            continue  # a damaged record is named by `runs check`, not read into a plan
        if run is not None and run.status == "finished" and str(run.record.get("finished") or "9999") < written:
            held.append(run)
    return load_table(held)


def held_stream(config: RunConfig, device: str | torch.device | None = None) -> str | None:
    """The data stream of ``config``'s finished run in the run store or the committed records (None: not held)."""
    done = stored_run(stored_path(stored_id(config, pick_device(device))))
    return None if done is None else record_stream(done.record)


def epoch_machines(record: dict) -> list[str]:
    """The machine (:func:`vitbn_nb.system.label`) that trained each of ``record``'s epochs: the segment that was
    running when it ended (a segment starts at ``from_epoch``, the epochs already done when it resumed); None for an
    epoch before every recorded segment (a checkpoint resumed without its record): its machine is unknown."""
    segments = record.get("segments") or [{"hardware": record["hardware"]}]
    segments = sorted(segments, key=lambda segment: segment.get("from_epoch", 0))
    machines = []
    for i in range(len(record["epochs"])):
        running = [s for s in segments if s.get("from_epoch", 0) <= i]
        machines.append(system_label(running[-1]["hardware"]) if running else None)
    return machines


def retrain(run_id: str, *, device: str | torch.device | None = None, progress: bool = True) -> Run:
    """Train one stored run anew from its recorded configuration (a damaged record's too, when it still parses); a
    committed record's run is trained into the run store, the committed record never written."""
    if not is_run_name(run_id):
        raise ValueError(f"run_id={run_id!r} is not a run in the run store {runs_dir()}; `runs check` lists them")
    folder = stored_path(str(run_id))
    if not folder.is_dir() or folder.is_symlink():
        raise ValueError(
            f"run_id={run_id!r} is not a run in the run store {runs_dir()} nor among the committed records; "
            "`runs check` lists them"
        )
    try:  # no checksum check here: a record that fails it but still parses still says what to retrain
        record = json.loads((folder / "record.json").read_text())
        if (problem := model_problem(record["config"])) is not None:  # never built, not even on the meta device
            raise ValueError(problem)
        config = RunConfig(**record["config"])
    except Exception as error:
        raise RunStoreError(
            run_id,
            f"{folder / 'record.json'} is unreadable ({error}), so its configuration is unknown",
            fix=delete_fix(folder),
        ) from None
    device = pick_device(device)
    if config.run_id(device.type) != run_id:
        raise ValueError(
            f"run {run_id} was trained on another device type; on {device.type} it would be "
            f"{config.run_id(device.type)}: retrain it where it ran"
        )
    # trained beside the stored run, which it replaces once finished: a kill or a failure keeps the stored run
    return train(config, force=True, device=device, progress=progress)


# -- runs trained together as one stacked model (engine="stacked") ------------------------------------------------


def train_stack(
    configs: list[RunConfig],
    *,
    force: bool = False,
    device: str | torch.device | None = None,
    progress: bool = True,
    mlflow: bool | None = None,
    deadline: Deadline | None = None,
    one_stream: bool = False,
) -> list[Run]:
    """Train runs of one stack key together, each stored as its own run; members at different epochs stack apart."""
    from ..engines import stack  # the stacked engine: loaded where a stacked run trains, never on the eager path

    if len({c.stack_key() for c in configs}) != 1 or configs[0].stack_key() is None:
        raise ValueError("train_stack takes stacked configurations that differ in seed and lr only")
    device = pick_device(device)
    off = training_is_off()
    force = check_force(force, off, configs[0].run_id(device.type))  # a bool before it picks the ids
    ids = [c.run_id(device.type) if force else stored_id(c, device, one_stream=one_stream) for c in configs]
    found: dict[str, Run] = {}
    if not force:
        for run_id in ids:
            if (done := stored_run(stored_path(run_id))) is not None:
                found[run_id] = mirror(done, mlflow)
        if len(found) == len(set(ids)):
            return [found[run_id] for run_id in ids]
    if deadline is not None and any(deadline.refuses(c) for c, i in zip(configs, ids) if i not in found):
        raise DeadlineReached(next(i for i in ids if i not in found))
    with run_locks(ids, progress):
        waiting: dict[int, list[tuple[RunConfig, RunFiles, nn.Module, torch.optim.Optimizer]]] = {}
        for config, run_id in zip(configs, ids):
            if run_id in found or any(f.run_id == run_id for group in waiting.values() for _, f, _, _ in group):
                continue  # listed twice
            opened = _opened(config, run_id, device, deadline, force, off, mlflow)
            if isinstance(opened, Run):
                found[run_id] = opened
                continue
            files, model, optimizer_state, _, _ = opened
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
            ended = lambda files: (e := files.record["epochs"]) and (e[-1]["diverged"] or len(e) >= config.epochs)
            finished += [mirror(files.finish(model), mlflow) for _, files, model, _ in group if ended(files)]
            still = [entry for entry in group if not ended(entry[1])]
            if still and len(still) == len(group):  # nobody diverged, nobody finished: the deadline stopped it
                still[0][1].finish(still[0][2])  # raises DeadlineReached (every member is checkpointed)
            group = still
    return finished


def _train_members(group: list, train_data, test_data, device: torch.device, bar) -> None:
    """One stack of ``group``'s members until they finish, one diverges, or the deadline stops them."""
    from ..engines import check_device, stack

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
        refused=check_device.refused_engines(device),
    )
