"""The run store: every training run recorded, reused, and resumable.

A run is named by its configuration and the device type it ran on. Its folder under
``runs_dir()`` holds ``record.json`` (config, per-epoch metrics, status, hardware, library
versions), ``checkpoint.pt`` while it is unfinished (weights, optimiser, metrics so far;
rewritten atomically after every epoch) and ``model.pt`` once it is done. Asking for a
finished configuration again returns the stored run; an interrupted one continues from its
last finished epoch; ``force=True`` trains it anew. ``load_table()`` gathers every record
into one tidy pandas table (one row per run and epoch).

One process at a time trains a run: an OS file lock per run (``runs/.locks/<id>.lock``, gone
with its process) makes a second process wait, then reuse what the first finished. Every
record carries a SHA-256 of itself and of its weight files; :func:`check_store` verifies the
whole store (``python -m vitbn_nb runs check``) and :func:`retrain` trains one run anew.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import hashlib
import json
import os
import shutil
import time
import warnings
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import pandas as pd
import torch
from filelock import FileLock, Timeout
from torch import nn

from . import atomic, engine, finetune, profiles, stack
from .data import DATASETS, IMAGE_SIZE, image_sets, reference_sets
from .limits import TRAIN_VARIABLE, Deadline, DeadlineReached, training_is_off
from .models import VIT_FAMILY, build_model, model_kwargs
from .models.norms import check_choice
from .models.vit import pair as vit_pair
from .paths import runs_dir
from .records import (
    ENDED,
    STATE_FOLDER,
    RunStoreError,
    delete_fix,
    load_checkpoint,
    load_weights,
    read_record,
    sha256,
    write_record,
)
from .system import hardware, pick_device, versions
from .system import label as system_label

PIPELINES = ("engine", "reference")
ENGINES = profiles.ENGINES
#: Device types a run id can name; a finished run of either is reused wherever the book renders.
DEVICE_TYPES = ("cpu", "cuda")
#: Seconds between checkpoints of an unfinished run (also written at a deadline stop); 0 writes one every epoch.
CHECKPOINT_VARIABLE = "VITBN_CHECKPOINT_SECONDS"
#: Records and run ids spell the engine pipeline "fast" (its name when the first runs were stored); a record
#: read back says "engine" again. Keeping the spelling keeps every run id, so no run trains twice.
_STORED_AS = {"engine": "fast"}
_READ_AS = {name: pipeline for pipeline, name in _STORED_AS.items()}


@dataclass(frozen=True)
class RunConfig:
    """Everything that determines a run's numbers (with the device type)."""

    model: str
    model_kwargs: dict = field(default_factory=dict)
    dataset: str = "mnist"
    epochs: int = 30
    lr: float = 5e-4
    batch_size: int = 100
    test_batch_size: int = 5000
    seed: int = 0
    train_size: int | None = None
    test_size: int | None = None
    pipeline: str = "engine"
    #: Fine-tuning: the run id of a finished run whose weights start this one (position embedding
    #: interpolated when the patch grid differs), and which weights train ("all" | "attention").
    init_from: str | None = None
    trainable: str = "all"
    #: ``"eager"`` trains the run alone; ``"stacked"`` trains it with the other stacked runs of its kind (same
    #: everything but seed and lr) as one model (``vitbn_nb.stack``): equal up to fp32 rounding, so another id.
    engine: str = "eager"

    def __post_init__(self):
        object.__setattr__(self, "model_kwargs", model_kwargs(self.model, **self.model_kwargs))
        with torch.device("meta"):  # refuse a bad model configuration now, not hours into a sweep
            build_model(self.model, **self.model_kwargs)
        check_choice("dataset", self.dataset, DATASETS)
        object.__setattr__(self, "pipeline", _READ_AS.get(self.pipeline, self.pipeline))
        check_choice("pipeline", self.pipeline, PIPELINES)
        for name in ("epochs", "batch_size", "test_batch_size"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}={value!r} is not allowed; it must be an integer >= 1")
        if self.batch_size < 2:
            raise ValueError(f"batch_size={self.batch_size!r} is not allowed; training batches need >= 2 images")
        if not (isinstance(self.lr, (int, float)) and 0 < self.lr < 10):
            raise ValueError(f"lr={self.lr!r} is not allowed; it must be a number in (0, 10)")
        for name in ("train_size", "test_size"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 2):
                raise ValueError(f"{name}={value!r} is not allowed; use None (the whole split) or an integer >= 2")
        check_choice("trainable", self.trainable, ("all", "attention"))
        check_choice("engine", self.engine, ENGINES)
        if self.engine == "stacked" and (why := stack.refusal(self)):
            raise ValueError(f"engine='stacked' is not allowed for {self.label()}: {why}")
        if self.trainable == "attention" and self.model not in VIT_FAMILY:
            raise ValueError(f"trainable='attention' is not allowed with model={self.model!r}: it has no attention")
        if self.init_from is not None and (not isinstance(self.init_from, str) or not self.init_from):
            raise ValueError(f"init_from={self.init_from!r} is not allowed; give a run id or None")
        image_size = self.model_kwargs.get("image_size", 28)
        if (
            vit_pair(tuple(image_size) if isinstance(image_size, list) else image_size)
            != (IMAGE_SIZE[self.dataset],) * 2
        ):
            raise ValueError(
                f"dataset={self.dataset!r} has {IMAGE_SIZE[self.dataset]}-pixel images; the model's "
                f"image_size={image_size!r} must match"
            )
        if self.pipeline == "reference" and self.dataset not in ("mnist", "mnist_aug"):
            raise ValueError(f"pipeline='reference' is not allowed with dataset={self.dataset!r}; use 'engine'")

    #: The fields a chapter's settings supply to every run it plans (when the settings have them).
    FROM_SETTINGS: ClassVar[tuple[str, ...]] = (
        "epochs",
        "batch_size",
        "test_batch_size",
        "train_size",
        "test_size",
        "engine",
    )

    @classmethod
    def from_settings(cls, settings: object, **fields: Any) -> RunConfig:
        """A run of a chapter: ``FROM_SETTINGS`` taken from ``settings``, then ``fields`` (which win)."""
        given = {name: getattr(settings, name) for name in cls.FROM_SETTINGS if hasattr(settings, name)}
        return cls(**{**given, **fields})

    def to_dict(self) -> dict:
        # The fine-tuning fields appear only when set, so every earlier run keeps its id.
        config = dataclasses.asdict(self)
        for name in ("init_from", "trainable", "engine"):
            if config[name] == RunConfig.__dataclass_fields__[name].default:
                del config[name]
        config["pipeline"] = _STORED_AS.get(self.pipeline, self.pipeline)
        return config

    def run_id(self, device_type: str) -> str:
        key = json.dumps({**self.to_dict(), "device": device_type}, sort_keys=True)
        digest = hashlib.sha1(key.encode()).hexdigest()[:10]
        depth = self.model_kwargs.get("depth")
        tune = "" if self.init_from is None else f"-ft{self.trainable}"
        return (
            f"{self.model}{'' if depth is None else f'-d{depth}'}{tune}-lr{self.lr:g}-bs{self.batch_size}"
            f"-s{self.seed}-{digest}"
        )

    def stack_key(self) -> str | None:
        """What the runs trained together as one stack share (everything but seed and lr); None: trained alone."""
        if self.engine != "stacked":
            return None
        return json.dumps({k: v for k, v in self.to_dict().items() if k not in ("seed", "lr")}, sort_keys=True)

    def label(self) -> str:
        depth = self.model_kwargs.get("depth")
        tune = "" if self.init_from is None else f" fine-tune({self.trainable}) on {self.dataset}"
        return (
            f"{self.model}{'' if depth is None else f' d{depth}'}{tune} lr={self.lr:g} bs={self.batch_size} "
            f"seed={self.seed}"
        )


class Run:
    """A stored run: its record, its per-epoch metrics and its trained model."""

    def __init__(self, folder: Path):
        self.folder = Path(folder)
        self.record = read_record(self.folder)

    run_id = property(lambda self: self.record["run_id"])
    status = property(lambda self: self.record["status"])

    @property
    def config(self) -> RunConfig:
        try:
            return RunConfig(**self.record["config"])
        except (TypeError, ValueError) as error:
            raise RunStoreError(
                self.folder.name,
                f"{self.folder / 'record.json'} holds a configuration this code cannot train ({error})",
                fix=f"fix: delete {self.folder} and train it again, or render it with the version that trained it",
            ) from None

    @property
    def metrics(self) -> pd.DataFrame:
        return pd.DataFrame(self.record["epochs"])

    @property
    def final_accuracy(self) -> float:
        epochs = self.record["epochs"]
        return epochs[-1]["test_acc"] if epochs else float("nan")

    def load_model(self, device: str | torch.device | None = None) -> nn.Module:
        if self.status not in ENDED:
            raise RuntimeError(f"run {self.run_id} is {self.status}: it has no final model yet")
        model = build_model(self.record["config"]["model"], **self.record["config"]["model_kwargs"])
        state = load_weights(self.folder / "model.pt", self.run_id, self.record.get("checksums", {}).get("model.pt"))
        try:
            model.load_state_dict(state)
        except RuntimeError as error:
            raise RunStoreError(self.run_id, f"{self.folder / 'model.pt'} does not fit its model ({error})") from None
        return model.to(pick_device(device)).eval()

    def __repr__(self) -> str:
        return f"Run({self.run_id!r}, status={self.status!r}, epochs={len(self.record['epochs'])})"


def _initialise_from(model: nn.Module, config: RunConfig) -> None:
    """Start ``model`` from the finished run ``config.init_from`` (its position embedding resized to this grid)."""
    folder = runs_dir() / config.init_from
    if not (folder / "record.json").is_file() or not (folder / "model.pt").is_file():
        raise ValueError(f"init_from={config.init_from!r} is not allowed: no finished run with that id in {runs_dir()}")
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


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


@contextlib.contextmanager
def run_lock(run_id: str, progress: bool = True) -> Iterator[None]:
    """Hold the run's OS file lock; a second process waits here (and says so) until the first lets go.

    Only writing takes it: reading a finished run needs no lock, so a read-only store renders."""
    folder = runs_dir() / ".locks"
    lock = FileLock(str(folder / f"{run_id}.lock"))
    try:
        folder.mkdir(parents=True, exist_ok=True)
        try:
            lock.acquire(timeout=0)
        except Timeout:  # a TimeoutError, so an OSError: told apart first
            if progress:
                print(f"run {run_id} is being trained by another process; waiting for it to finish ...", flush=True)
            lock.acquire()
    except Timeout:
        raise
    except OSError as error:
        if folder.exists() and not folder.is_dir():
            raise RunStoreError(
                run_id, f"{folder} is a file; the store keeps its locks in that folder", fix=f"fix: delete {folder}"
            ) from None
        raise RunStoreError(
            run_id,
            f"the run store {runs_dir()} cannot be written ({error.strerror or error}), and this run needs writing "
            "(training, resuming or a measurement it lacks)",
            fix="fix: make the store writable, or point VITBN_RUNS_DIR (or --runs) at a writable copy of it",
        ) from None
    try:
        yield
    finally:
        lock.release()


def _remove_stale_temporaries(folder: Path) -> None:
    """Temporary files of atomic writes a killed process left behind (safe: this process holds the run's lock)."""
    for leftover in folder.glob(".*.tmp"):
        leftover.unlink(missing_ok=True)


def checkpoint_seconds() -> float:
    value = os.environ.get(CHECKPOINT_VARIABLE) or "60"
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not seconds >= 0:
        raise ValueError(f"{CHECKPOINT_VARIABLE}={value!r} is not allowed; give seconds >= 0 (0: every epoch)")
    return seconds


def stored_device_type(config: RunConfig, device: torch.device) -> str:
    """The device type whose id names ``config`` here: this device's, unless only another device finished it.

    A store trained on a GPU and rendered on a laptop (or the reverse) reuses the finished runs; what trained
    each one stays in its record (``hardware``, ``segments``) and in every figure's footer.
    """
    here = device.type
    for device_type in (here, *(t for t in DEVICE_TYPES if t != here)):
        folder = runs_dir() / config.run_id(device_type)
        if (folder / "record.json").is_file():
            with contextlib.suppress(RunStoreError):
                if read_record(folder)["status"] in ENDED:
                    return device_type
    return here


def is_run_name(name: str) -> bool:
    """Whether ``name`` can be a run folder's: a plain name, not the store's own folders (hpo, .locks)."""
    return (
        isinstance(name, str)
        and bool(name)
        and "/" not in name
        and "\\" not in name
        and "\0" not in name
        and not name.startswith(".")
        and name != STATE_FOLDER
    )


def _check_folder(folder: Path) -> None:
    """A file or a link where a run's folder belongs is named, never followed or deleted."""
    if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
        raise RunStoreError(
            folder.name,
            f"{folder} is {'a link' if folder.is_symlink() else 'a file'}, where the run's folder belongs",
            fix=f"fix: move {folder} out of the run store, then run the same command again",
        )


def stored_run(folder: Path) -> Run | None:
    """The finished (or diverged) run in ``folder``, its weights verified when they are there; None when it is
    absent or unfinished. Reads only: no lock, nothing written. A finished record is final even beside a
    checkpoint (a kill after the final save leaves one), and one imported without weights is whole."""
    _check_folder(folder)
    if not (folder / "record.json").exists():
        return None
    run = Run(folder)
    if run.status not in ENDED:
        return None
    model = folder / "model.pt"
    if model.exists() and sha256(model) != run.record["checksums"]["model.pt"]:
        raise RunStoreError(run.run_id, f"{model} does not match its checksum (truncated or damaged)")
    return run


class _RunFiles:
    """One run's folder while it trains: its record, its checkpoint (written by time) and its final weights."""

    def __init__(self, config: RunConfig, run_id: str, device: torch.device, deadline: Deadline | None):
        self.config, self.run_id, self.device, self.deadline = config, run_id, device, deadline
        self.folder = runs_dir() / run_id
        self.record_path, self.checkpoint_path = self.folder / "record.json", self.folder / "checkpoint.pt"
        self.interval = checkpoint_seconds()
        self.last_checkpoint = time.monotonic()

    def finished(self, force: bool) -> Run | None:
        """The stored run when it is finished (``force`` deletes it first), else None; called under the run's lock."""
        _check_folder(self.folder)
        if force and self.folder.exists():
            shutil.rmtree(self.folder)
        if self.folder.exists():
            _remove_stale_temporaries(self.folder)
        if (run := stored_run(self.folder)) is not None:
            self.checkpoint_path.unlink(missing_ok=True)  # from before the final save
        return run

    def start(self, model: nn.Module, train_images: int, test_images: int, trainable) -> dict | None:
        """Write the run's record (resumed from its checkpoint when there is one); returns the optimiser's state."""
        segment = {"from_epoch": 0, "started": _now(), "hardware": hardware(self.device), "versions": versions()}
        self.record = {
            "run_id": self.run_id,
            "config": self.config.to_dict(),
            "status": "running",
            "epochs": [],
            "resumed_at": [],
            "started": segment["started"],
            "finished": None,
            "hardware": segment["hardware"],
            "versions": segment["versions"],
            "segments": [segment],
            "train_images": train_images,
            "test_images": test_images,
            "parameters": {"trainable": trainable.trainable, "total": trainable.total},
            "timing": "train_seconds includes the data pipeline (data_seconds is that part); test_seconds is one "
            "full pass over the test set; the device is synchronised at each end of an epoch, and on a GPU the "
            "data time is read from CUDA events; load_1min and busy_processes say how busy the machine was at "
            "each epoch's end; peak_memory_mib is the GPU's peak during the epoch; stacked_runs, when present, "
            "is the number of runs trained together, whose shared time train_seconds is",
            "checksums": {},
        }
        optimizer_state = None
        if self.checkpoint_path.exists():
            previous = read_record(self.folder) if self.record_path.exists() else {}
            checkpoint = load_checkpoint(self.folder, previous)
            try:
                model.load_state_dict(checkpoint["model"])
            except RuntimeError as error:
                raise RunStoreError(self.run_id, f"{self.checkpoint_path} does not fit its model ({error})") from None
            optimizer_state = checkpoint["optimizer"]
            done = len(checkpoint["epochs"])
            segment["from_epoch"] = done
            self.record.update(
                started=previous.get("started", self.record["started"]),
                epochs=checkpoint["epochs"],
                resumed_at=[*previous.get("resumed_at", []), done],
                segments=[*previous.get("segments", [])[: len(previous.get("resumed_at", [])) + 1], segment],
                checksums={"checkpoint.pt": sha256(self.checkpoint_path)},
                checkpoint_epoch=done,
            )
        self.folder.mkdir(parents=True, exist_ok=True)
        write_record(self.record_path, self.record)
        return optimizer_state

    def epoch_done(
        self, metrics: dict, model: nn.Module, optimizer: torch.optim.Optimizer, stopping: bool = False
    ) -> None:
        """Record the epoch; checkpoint when the interval has passed or training stops here (the deadline)."""
        self.record["epochs"].append(metrics)
        if self.deadline is not None:
            self.deadline.epochs_trained += 1
        last = metrics["epoch"] >= self.config.epochs or metrics["diverged"]  # model.pt follows at once
        due = stopping or time.monotonic() - self.last_checkpoint >= self.interval or self.stops(metrics)
        if due and not last:
            # The checkpoint is the truth a resume reads; the record mirrors it (and may run ahead of it).
            atomic.torch_save(
                {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epochs": self.record["epochs"]},
                self.checkpoint_path,
            )
            self.record["checksums"]["checkpoint.pt"] = sha256(self.checkpoint_path)
            self.record["checkpoint_epoch"] = metrics["epoch"]
            self.last_checkpoint = time.monotonic()
        write_record(self.record_path, self.record)

    def stops(self, metrics: dict) -> bool:
        """Whether the deadline leaves no room for another epoch like this one."""
        return self.deadline is not None and self.deadline.no_room_for(
            metrics["train_seconds"] + metrics["test_seconds"]
        )

    def finish(self, model: nn.Module, mlflow: bool | None) -> Run:
        """Store the final weights, or raise :class:`DeadlineReached` when training stopped early."""
        epochs = self.record["epochs"]
        diverged = bool(epochs) and epochs[-1]["diverged"]
        if not diverged and len(epochs) < self.config.epochs:
            raise DeadlineReached(self.run_id, len(epochs), self.config.epochs)
        self.record.update(
            status="diverged" if diverged else "finished",
            finished=_now(),
            diverged_epoch=epochs[-1]["epoch"] if diverged else None,
        )
        self.record.pop("checkpoint_epoch", None)
        atomic.torch_save(model.state_dict(), self.folder / "model.pt")
        self.record["checksums"] = {"model.pt": sha256(self.folder / "model.pt")}
        write_record(self.record_path, self.record)
        self.checkpoint_path.unlink(missing_ok=True)
        return _mirror(Run(self.folder), mlflow)


def _refuse_when_off(run_id: str) -> None:
    raise RunStoreError(
        run_id,
        f"it is not finished in the run store {runs_dir()} and training is off ({TRAIN_VARIABLE}=never)",
        fix="fix: train it (python -m vitbn_nb train, or the chapter without TRAIN=never), or import the runs "
        "of the machine that trained them",
    )


def _data(config: RunConfig, device: torch.device):
    if config.pipeline == "engine":
        return image_sets(config.dataset, config.train_size, config.test_size, str(device))
    return reference_sets(config.dataset, config.train_size, config.test_size, device)


def _new_model(config: RunConfig, device: torch.device) -> tuple[nn.Module, finetune.Trainable]:
    torch.manual_seed(config.seed)
    model = build_model(config.model, **config.model_kwargs).to(device)
    if config.init_from is not None:
        _initialise_from(model, config)
    return model, finetune.set_trainable(model, config.trainable)


def _check_force(force: bool, off: bool, run_id: str) -> bool:
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
) -> Run:
    """Train ``config`` (or return it from the store when it already finished).

    ``deadline``: stop at the last epoch boundary before it (:class:`DeadlineReached`), a checkpoint written
    there; the same call later resumes the run. A stacked configuration trains as a stack of one (the same
    arithmetic as its stack; :func:`train_all` trains whole stacks).

    ``mlflow``: mirror the finished run to MLflow (``vitbn_nb.tracking``); ``None`` (default)
    mirrors only when ``MLFLOW_TRACKING_URI`` is set, ``False`` never. ``force`` must be a bool
    (or the string 'true' / 'false'): anything else is refused rather than read as "retrain".
    """
    if config.engine == "stacked":
        return train_stack([config], force=force, device=device, progress=progress, mlflow=mlflow, deadline=deadline)[0]
    device = pick_device(device)
    off = training_is_off()  # checked first: a misspelt setting must not pass silently
    force = _check_force(force, off, config.run_id(device.type))
    run_id = config.run_id(device.type if force else stored_device_type(config, device))
    if not force and (done := stored_run(runs_dir() / run_id)) is not None:
        return _mirror(done, mlflow)  # read without the lock: a finished run never changes
    if deadline is not None and deadline.passed():
        raise DeadlineReached(run_id)
    with run_lock(run_id, progress):
        files = _RunFiles(config, run_id, device, deadline)
        if (done := files.finished(force)) is not None:
            return _mirror(done, mlflow)
        if off:
            _refuse_when_off(run_id)
        model, trainable = _new_model(config, device)
        train_data, test_data = _data(config, device)
        optimizer_state = files.start(model, len(train_data), len(test_data), trainable)
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
        return files.finish(model, mlflow)


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
    force = _check_force(force, off, ids[0])
    found: dict[str, Run] = {}
    if not force:
        for run_id in ids:
            if (done := stored_run(runs_dir() / run_id)) is not None:
                found[run_id] = _mirror(done, mlflow)
        if len(found) == len(set(ids)):
            return [found[run_id] for run_id in ids]
    if deadline is not None and deadline.passed():
        raise DeadlineReached(next(i for i in ids if i not in found))
    with contextlib.ExitStack() as locks:
        for run_id in sorted(set(ids)):  # one order for every process: no two wait on each other
            locks.enter_context(run_lock(run_id, progress))
        waiting: dict[int, list[tuple[RunConfig, _RunFiles, nn.Module, torch.optim.Optimizer]]] = {}
        for config, run_id in zip(configs, ids):
            if run_id in found or any(f.run_id == run_id for group in waiting.values() for _, f, _, _ in group):
                continue  # listed twice
            files = _RunFiles(config, run_id, device, deadline)
            if (done := files.finished(force)) is not None:
                found[run_id] = _mirror(done, mlflow)
                continue
            if off:
                _refuse_when_off(run_id)
            model, trainable = _new_model(config, device)
            train_data, test_data = _data(config, device)
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
    train_data, test_data = _data(config, device)
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
                    finished.append(files.finish(model, mlflow))
                else:
                    still.append(entry)
            if still and len(still) == len(group):  # nobody diverged, nobody finished: the deadline stopped it
                still[0][1].finish(still[0][2], mlflow)  # raises DeadlineReached (every member is checkpointed)
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


def _mirror(run: Run, mlflow: bool | None) -> Run:
    """Copy a finished run to MLflow when asked; mlflow is imported only then."""
    if mlflow is False or (mlflow is None and not os.environ.get("MLFLOW_TRACKING_URI")):
        return run
    from . import tracking

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
) -> list[Run]:
    """Train several configurations in order (finished ones come straight from the store); stacked
    configurations that share a stack key train together when the first of them comes up.

    With a ``deadline``, no run starts after it and a running one stops at its last epoch boundary
    before it (:class:`DeadlineReached`).
    """
    force = profiles.flag("force", force)
    configs = list(configs)
    stacks: dict[str, list[RunConfig]] = {}
    for config in configs:
        if (key := config.stack_key()) is not None:
            stacks.setdefault(key, []).append(config)
    done: dict[str, Run] = {}
    key = lambda config: json.dumps(config.to_dict(), sort_keys=True)
    options = dict(force=force, device=device, progress=progress, mlflow=mlflow, deadline=deadline)
    for i, config in enumerate(configs, 1):
        if key(config) in done:
            continue
        members = stacks[config.stack_key()] if config.stack_key() else [config]
        if progress and len(configs) > 1:
            together = f" (with {len(members) - 1} more, stacked)" if len(members) > 1 else ""
            print(f"[{i}/{len(configs)}] {config.label()}{together}", flush=True)
        trained = train_stack(members, **options) if config.stack_key() else [train(config, **options)]
        done.update(zip(map(key, members), trained))
    return [done[key(config)] for config in configs]


def trained_on(run_ids: Iterable[str]) -> dict[str, int]:
    """The machines that trained ``run_ids`` (every resumed segment's), each with how many of the runs it trained."""
    return _machines(run_ids, lambda r: [s["hardware"] for s in r.get("segments") or [{"hardware": r["hardware"]}]])


def timed_on(run_ids: Iterable[str]) -> dict[str, int]:
    """The machines that took the stored measurements (:func:`measured`) of ``run_ids``, with how many runs each."""
    return _machines(
        run_ids, lambda r: [m["hardware"] for m in r.get("measurements", {}).values() if m.get("hardware")]
    )


def _machines(run_ids: Iterable[str], hardware_of) -> dict[str, int]:
    counts: dict[str, int] = {}
    for run_id in sorted(set(run_ids)):
        folder = runs_dir() / run_id
        if not (folder / "record.json").is_file():
            continue
        for name in {system_label(info) for info in hardware_of(read_record(folder))}:
            counts[name] = counts.get(name, 0) + 1
    return dict(sorted(counts.items(), key=lambda item: -item[1]))


def measured(run: Run, name: str, measure: Callable[[], Any], device: torch.device | None) -> Any:
    """A measurement of a finished run (a latency, a pass's time, a step's memory), taken once and kept in its record.

    ``python -m vitbn_nb train`` takes it on the machine that trained the run, right after training; a chapter
    rendered elsewhere reads it from the record, so it needs no weights. Only a measurement that was never taken is
    taken where the chapter runs, and it is stored with that machine's hardware, which the footers then name ("timed
    on"). ``device=None`` marks a number that depends on the weights alone (an accuracy, a property of the stem):
    kept the same way, with no hardware, and not counted as a timing.
    """
    stored = run.record.get("measurements", {}).get(name)
    if stored is not None:
        return stored["value"]
    value = measure()
    taken_on = hardware(device) if device is not None else None
    with run_lock(run.run_id, progress=False):
        record = read_record(run.folder)
        record.setdefault("measurements", {})[name] = {"value": value, "hardware": taken_on, "measured": _now()}
        write_record(run.folder / "record.json", record)
    run.record = record
    return value


def load_table(runs: Iterable[Run | dict] | None = None) -> pd.DataFrame:
    """One row per run and epoch, config flattened into columns (``class_acc_0`` ... per class)."""
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
            "depth": kwargs.get("depth"),
            **config,
        }
        for epoch in record["epochs"]:
            row = {**base, **{k: v for k, v in epoch.items() if k != "class_acc"}}
            row.update({f"class_acc_{i}": acc for i, acc in enumerate(epoch.get("class_acc", []))})
            rows.append(row)
    return pd.DataFrame(rows)


# ---------------------------------------------------------------------------------------------
# checking and repairing the store
# ---------------------------------------------------------------------------------------------


def retrain(run_id: str, *, device: str | torch.device | None = None, progress: bool = True) -> Run:
    """Train one stored run anew from its recorded configuration (a damaged record cannot say what to train)."""
    folder = runs_dir() / str(run_id)
    if not is_run_name(run_id) or not folder.is_dir() or folder.is_symlink():
        raise ValueError(f"run_id={run_id!r} is not a run in the run store {runs_dir()}; `runs check` lists them")
    try:  # no checksum check here: a record that fails it but still parses still says what to retrain
        record = json.loads((folder / "record.json").read_text())
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
    return train(config, force=True, device=device, progress=progress)
