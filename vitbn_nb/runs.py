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
import warnings
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import pandas as pd
import torch
from filelock import FileLock, Timeout
from torch import nn

from . import atomic, engine, finetune, profiles
from .data import DATASETS, IMAGE_SIZE, image_sets, reference_sets
from .limits import TRAIN_VARIABLE, Deadline, DeadlineReached, training_is_off
from .models import VIT_FAMILY, build_model, model_kwargs
from .models.norms import check_choice
from .models.vit import pair as vit_pair
from .paths import runs_dir
from .records import RunStoreError, load_weights, read_record, sha256, write_record
from .system import hardware, pick_device, versions

PIPELINES = ("engine", "reference")
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
    FROM_SETTINGS: ClassVar[tuple[str, ...]] = ("epochs", "batch_size", "test_batch_size", "train_size", "test_size")

    @classmethod
    def from_settings(cls, settings: object, **fields: Any) -> RunConfig:
        """A run of a chapter: ``FROM_SETTINGS`` taken from ``settings``, then ``fields`` (which win)."""
        given = {name: getattr(settings, name) for name in cls.FROM_SETTINGS if hasattr(settings, name)}
        return cls(**{**given, **fields})

    def to_dict(self) -> dict:
        # The fine-tuning fields appear only when set, so every earlier run keeps its id.
        config = dataclasses.asdict(self)
        for name in ("init_from", "trainable"):
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
    config = property(lambda self: RunConfig(**self.record["config"]))

    @property
    def metrics(self) -> pd.DataFrame:
        return pd.DataFrame(self.record["epochs"])

    @property
    def final_accuracy(self) -> float:
        epochs = self.record["epochs"]
        return epochs[-1]["test_acc"] if epochs else float("nan")

    def load_model(self, device: str | torch.device | None = None) -> nn.Module:
        if self.status not in ("finished", "diverged"):
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


def _locks_dir() -> Path:
    folder = runs_dir() / ".locks"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@contextlib.contextmanager
def run_lock(run_id: str, progress: bool = True) -> Iterator[None]:
    """Hold the run's OS file lock; a second process waits here (and says so) until the first lets go."""
    lock = FileLock(str(_locks_dir() / f"{run_id}.lock"))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        if progress:
            print(f"run {run_id} is being trained by another process; waiting for it to finish ...", flush=True)
        lock.acquire()
    try:
        yield
    finally:
        lock.release()


def _remove_stale_temporaries(folder: Path) -> None:
    """Temporary files of atomic writes a killed process left behind (safe: this process holds the run's lock)."""
    for leftover in folder.glob(".*.tmp"):
        leftover.unlink(missing_ok=True)


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

    ``deadline``: stop at the last epoch boundary before it (:class:`DeadlineReached`), every finished
    epoch stored; the same call later resumes the run.

    ``mlflow``: mirror the finished run to MLflow (``vitbn_nb.tracking``); ``None`` (default)
    mirrors only when ``MLFLOW_TRACKING_URI`` is set, ``False`` never. ``force`` must be a bool
    (or the string 'true' / 'false'): anything else is refused rather than read as "retrain".
    """
    force = profiles.flag("force", force)
    device = pick_device(device)
    run_id = config.run_id(device.type)
    off = training_is_off()  # checked first: a misspelt setting must not pass silently
    if off and force:
        raise ValueError(
            f"force=True would delete and retrain run {run_id}, but training is off ({TRAIN_VARIABLE}=never)"
        )
    with run_lock(run_id, progress):
        return _train_locked(
            config, run_id, force=force, device=device, progress=progress, mlflow=mlflow, off=off, deadline=deadline
        )


def _train_locked(
    config: RunConfig,
    run_id: str,
    *,
    force: bool,
    device: torch.device,
    progress: bool,
    mlflow: bool | None,
    off: bool = False,
    deadline: Deadline | None = None,
) -> Run:
    folder = runs_dir() / run_id
    record_path, checkpoint_path = folder / "record.json", folder / "checkpoint.pt"
    if force and folder.exists():
        shutil.rmtree(folder)
    if folder.exists():
        _remove_stale_temporaries(folder)
    if record_path.exists() and not checkpoint_path.exists():
        run = Run(folder)
        if run.status in ("finished", "diverged"):
            return _mirror(run, mlflow)
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
    if config.pipeline == "engine":
        train_data, test_data = image_sets(config.dataset, config.train_size, config.test_size, str(device))
    else:
        train_data, test_data = reference_sets(config.dataset, config.train_size, config.test_size, device)

    record = {
        "run_id": run_id,
        "config": config.to_dict(),
        "status": "running",
        "epochs": [],
        "resumed_at": [],
        "started": _now(),
        "finished": None,
        "hardware": hardware(device),
        "versions": versions(),
        "train_images": len(train_data),
        "test_images": len(test_data),
        "parameters": {"trainable": trainable.trainable, "total": trainable.total},
        "timing": "train_seconds includes the data pipeline (data_seconds is that part); "
        "test_seconds is one full pass over the test set; the device is synchronised before each "
        "clock read; load_1min and busy_processes say how busy the machine was at each epoch's end",
        "checksums": {},
    }
    optimizer_state = None
    if checkpoint_path.exists():
        previous = read_record(folder) if record_path.exists() else {}
        checkpoint = load_weights(
            checkpoint_path, run_id, previous.get("checksums", {}).get("checkpoint.pt"), weights_only=False
        )
        model.load_state_dict(checkpoint["model"])
        optimizer_state = checkpoint["optimizer"]
        record.update(
            started=previous.get("started", record["started"]),
            epochs=checkpoint["epochs"],
            resumed_at=[*previous.get("resumed_at", []), len(checkpoint["epochs"])],
        )
    folder.mkdir(parents=True, exist_ok=True)
    write_record(record_path, record)

    def save_epoch(metrics: dict, model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
        # The checkpoint is the truth a resume reads; the record mirrors it for readers.
        record["epochs"].append(metrics)
        atomic.torch_save(
            {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epochs": record["epochs"]},
            checkpoint_path,
        )
        record["checksums"]["checkpoint.pt"] = sha256(checkpoint_path)
        write_record(record_path, record)

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
        start_epoch=len(record["epochs"]),
        optimizer_state=optimizer_state,
        per_sample_eval=config.pipeline == "reference",
        item_per_step=config.pipeline == "reference",
        on_epoch_end=save_epoch,
        stop=None if deadline is None else lambda m: deadline.no_room_for(m["train_seconds"] + m["test_seconds"]),
        progress=progress,
        desc=config.label(),
    )
    diverged = bool(record["epochs"]) and record["epochs"][-1]["diverged"]
    if not diverged and len(record["epochs"]) < config.epochs:
        raise DeadlineReached(run_id, len(record["epochs"]), config.epochs)
    record.update(
        status="diverged" if diverged else "finished",
        finished=_now(),
        diverged_epoch=record["epochs"][-1]["epoch"] if diverged else None,
    )
    atomic.torch_save(model.state_dict(), folder / "model.pt")
    record["checksums"] = {"model.pt": sha256(folder / "model.pt")}
    write_record(record_path, record)
    checkpoint_path.unlink(missing_ok=True)
    return _mirror(Run(folder), mlflow)


def _mirror(run: Run, mlflow: bool | None) -> Run:
    """Copy a finished run to MLflow when asked; mlflow is imported only then."""
    if mlflow is False or (mlflow is None and not os.environ.get("MLFLOW_TRACKING_URI")):
        return run
    from . import tracking

    try:
        tracking.mirror_run(run)
    except Exception as error:
        if mlflow:
            raise
        warnings.warn(f"run {run.run_id} is stored but could not be mirrored to MLflow: {error}", stacklevel=3)
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
    """Train several configurations in order (finished ones come straight from the store).

    With a ``deadline``, no run starts after it and a running one stops at its last epoch boundary
    before it (:class:`DeadlineReached`).
    """
    force = profiles.flag("force", force)
    configs = list(configs)
    runs = []
    for i, config in enumerate(configs, 1):
        if progress and len(configs) > 1:
            print(f"[{i}/{len(configs)}] {config.label()}", flush=True)
        if deadline is not None and deadline.passed():
            raise DeadlineReached(config.run_id(pick_device(device).type))
        runs.append(train(config, force=force, device=device, progress=progress, mlflow=mlflow, deadline=deadline))
    return runs


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
    folder = runs_dir() / run_id
    if not folder.is_dir():
        raise ValueError(f"run_id={run_id!r} is not in the run store {runs_dir()}")
    try:  # no checksum check here: a record that fails it but still parses still says what to retrain
        record = json.loads((folder / "record.json").read_text())
        config = RunConfig(**record["config"])
    except Exception as error:
        raise RunStoreError(
            run_id,
            f"{folder / 'record.json'} is unreadable ({error}), so its configuration is unknown",
            fix=f"fix: delete {folder} and run the chapter that trains it again",
        ) from None
    device = pick_device(device)
    if config.run_id(device.type) != run_id:
        raise ValueError(
            f"run {run_id} was trained on another device type; on {device.type} it would be "
            f"{config.run_id(device.type)}: retrain it where it ran"
        )
    return train(config, force=True, device=device, progress=progress)
