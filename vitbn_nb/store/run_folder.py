"""One run's folder in the store (``record.json``, ``checkpoint.pt`` while unfinished, ``model.pt`` once done): read
back as a :class:`Run`, written while it trains (:class:`RunFiles`), locked while anything writes it (an OS file lock
per run, gone with its process), and its stored measurements."""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import re
import shutil
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import torch
from filelock import FileLock, Timeout
from torch import nn

from .. import atomic
from ..data.sets import STREAM, legacy_stream
from ..limits import Deadline, DeadlineReached
from ..models import build_model
from ..paths import is_committed, runs_dir, stored_path
from ..system import hardware, pick_device, versions
from ..system import label as system_label
from .records import (
    ENDED,
    LOCKS,
    RETRAIN_FOLDER,
    STATE_FOLDER,
    SWAP_FIX,
    RunStoreError,
    interrupted_swaps,
    is_owned,
    load_checkpoint,
    load_weights,
    read_record,
    replaced_path,
    sha256,
    write_record,
)
from .run_config import DEVICE_TYPES, RunConfig

#: Seconds between checkpoints of an unfinished run (also written at a deadline stop); 0 writes one every epoch.
CHECKPOINT_VARIABLE = "VITBN_CHECKPOINT_SECONDS"


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


def timestamp() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


@contextlib.contextmanager
def run_lock(run_id: str, progress: bool = True, store: Path | None = None) -> Iterator[None]:
    """Hold the run's OS file lock in ``store`` (default: the run store); a second process waits (and says so). Only
    writing takes it (imports too): reading a finished run needs no lock, so a read-only store renders."""
    store = Path(store) if store is not None else runs_dir()
    folder = store / LOCKS
    lock = FileLock(str(folder / f"{run_id}.lock"))  # filelock makes the folder
    try:
        try:
            held = lock.acquire(timeout=0)
        except Timeout:  # a TimeoutError, so an OSError: told apart first
            if progress:
                print(f"run {run_id} is being trained by another process; waiting for it to finish ...", flush=True)
            held = lock.acquire()
    except OSError as error:
        if folder.exists() and not folder.is_dir():
            raise RunStoreError(
                run_id, f"{folder} is a file; the store keeps its locks in that folder", fix=f"fix: delete {folder}"
            ) from None
        raise RunStoreError(
            run_id,
            f"the run store {store} cannot be written ({error.strerror or error}), and this run needs writing "
            "(training, resuming or a measurement it lacks)",
            fix="fix: make the store writable, or point VITBN_RUNS_DIR (or --runs) at a writable copy of it",
        ) from None
    with held:  # released on leaving
        yield


def is_locked(run_id: str, store: Path | None = None) -> bool:
    """Whether another process holds the run's lock (it is training it) right now."""
    return is_owned((Path(store) if store is not None else runs_dir()) / run_id)


@contextlib.contextmanager
def run_locks(names, progress: bool = True, store: Path | None = None) -> Iterator[None]:
    """The locks of several runs (or ``hpo``), taken in sorted order by every process, so no two wait on each other."""
    with contextlib.ExitStack() as locks:
        for name in sorted(set(names)):
            locks.enter_context(run_lock(name, progress, store))
        yield


def checkpoint_seconds() -> float:
    value = os.environ.get(CHECKPOINT_VARIABLE) or "60"
    with contextlib.suppress(ValueError):
        if float(value) >= 0:  # NaN is not
            return float(value)
    raise ValueError(f"{CHECKPOINT_VARIABLE}={value!r} is not allowed; give seconds >= 0 (0: every epoch)")


def stored_id(config: RunConfig, device: torch.device, *, one_stream: bool = False) -> str:
    """The id ``config`` is stored under: this device's and engine's, unless only another device type or engine
    finished it (a GPU's stacked seeds render on a laptop that plans them one by one). A run on the one data stream
    (:data:`~vitbn_nb.data.sets.STREAM`) wins over one on its GPU's own; ``one_stream``: only such a run counts."""
    here, legacy = device.type, None
    for run_id in config.ids((here, *(t for t in DEVICE_TYPES if t != here))):
        folder = stored_path(run_id)
        if (folder / "record.json").is_file():
            with contextlib.suppress(RunStoreError):
                record = read_record(folder)
                if record["status"] in ENDED:
                    if record_stream(record) == STREAM:
                        return run_id
                    legacy = legacy or run_id
    return config.run_id(here) if legacy is None or one_stream else legacy


def missing_runs(configs: Iterable[RunConfig], device: torch.device | None = None) -> list[str]:
    """The run ids of ``configs`` that neither the run store nor the committed records hold finished."""
    device = pick_device(None) if device is None else device
    run_ids = [stored_id(config, device) for config in configs]
    return [run_id for run_id in run_ids if stored_run(stored_path(run_id)) is None]


def is_run_name(name: str) -> bool:
    """Whether ``name`` can be a run folder's: a plain name, not the store's own folders (hpo, .locks)."""
    return isinstance(name, str) and bool(re.fullmatch(r"[^./\\\0][^/\\\0]*", name)) and name != STATE_FOLDER


def _check_folder(folder: Path) -> None:
    """A file or a link where a run's folder belongs is named, never followed or deleted."""
    if folder.is_symlink() or (folder.exists() and not folder.is_dir()):
        raise RunStoreError(
            folder.name,
            f"{folder} is {'a link' if folder.is_symlink() else 'a file'}, where the run's folder belongs",
            fix=f"fix: move {folder} out of the run store, then run the same command again",
        )


def stored_run(folder: Path) -> Run | None:
    """The finished (or diverged) run in ``folder``, its weights verified when there; None when absent or unfinished.
    Reads only. A finished record is final even beside a checkpoint, and one imported without weights is whole."""
    _check_folder(folder)
    if not (folder / "record.json").exists():
        if replaced_path(folder).is_dir():
            raise RunStoreError(
                folder.name, f"{folder} is missing: a retrain was killed while it replaced it", fix=SWAP_FIX
            )
        return None
    run = Run(folder)
    if run.status not in ENDED:
        return None
    model = folder / "model.pt"
    if model.exists() and sha256(model) != run.record["checksums"]["model.pt"]:
        raise RunStoreError(run.run_id, f"{model} does not match its checksum (truncated or damaged)")
    return run


def record_stream(record: dict) -> str:
    """The data stream a record's run drew (:data:`vitbn_nb.data.sets.STREAM`); a record from before streams were
    named drew its device's: a CPU run the one stream, a GPU run its own."""
    return record.get("stream") or legacy_stream(record["hardware"]["device"])


class RunFiles:
    """One run's folder while it trains: its record, its checkpoint (written by time) and its final weights."""

    def __init__(self, config: RunConfig, run_id: str, device: torch.device, deadline: Deadline | None):
        self.config, self.run_id, self.device, self.deadline = config, run_id, device, deadline
        self.folder = runs_dir() / run_id
        self.record_path, self.checkpoint_path = self.folder / "record.json", self.folder / "checkpoint.pt"
        self.interval = checkpoint_seconds()
        self.last_checkpoint = time.monotonic()
        #: The stored run a forced training replaces once it finishes (:meth:`finished`).
        self.replaces: Path | None = None

    def finished(self, force: bool) -> Run | None:
        """The stored run when it is finished, else None; called under the run's lock. ``force``: None, and the run
        trains in ``.retrain/``, replacing the stored one only once it finishes (a kill before then keeps it)."""
        _check_folder(self.folder)
        if force:
            self.replaces, self.folder = self.folder, self.folder.parent / RETRAIN_FOLDER / self.run_id
            self.record_path, self.checkpoint_path = self.folder / "record.json", self.folder / "checkpoint.pt"
            shutil.rmtree(self.folder, ignore_errors=True)  # a retraining a kill interrupted starts again
            return None
        for leftover in self.folder.glob(".*.tmp"):  # of atomic writes a killed process left (we hold the lock)
            leftover.unlink(missing_ok=True)
        if (run := stored_run(self.folder)) is not None:
            self.checkpoint_path.unlink(missing_ok=True)  # from before the final save
        return run

    def start(self, model: nn.Module, train_images: int, test_images: int, trainable) -> dict | None:
        """Write the run's record (resumed from its checkpoint when there is one); returns the optimiser's state."""
        segment = {"from_epoch": 0, "started": timestamp(), "hardware": hardware(self.device), "versions": versions()}
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
            "stream": STREAM,
            "train_images": train_images,
            "test_images": test_images,
            "parameters": {"trainable": trainable.trainable, "total": trainable.total},
            "timing": "train_seconds includes the data pipeline (data_seconds is that part); test_seconds is one "
            "full pass over the test set; the device is synchronised at each end of an epoch, and on a GPU the "
            "data time is read from CUDA events; load_1min and busy_processes say how busy the machine was at "
            "each epoch's end, other_cpu_seconds and test_other_cpu_seconds how much CPU its other processes used "
            "while the epoch trained and while it tested; peak_memory_mib is the GPU's peak during the epoch; "
            "stacked_runs, when present, is the number of runs trained together, whose shared time train_seconds is",
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
                stream=record_stream(previous) if previous else STREAM,
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

    def finish(self, model: nn.Module) -> Run:
        """Store the final weights, or raise :class:`DeadlineReached` when training stopped early."""
        epochs = self.record["epochs"]
        diverged = bool(epochs) and epochs[-1]["diverged"]
        if not diverged and len(epochs) < self.config.epochs:
            raise DeadlineReached(self.run_id, len(epochs), self.config.epochs)
        self.record.update(
            status="diverged" if diverged else "finished",
            finished=timestamp(),
            diverged_epoch=epochs[-1]["epoch"] if diverged else None,
        )
        self.record.pop("checkpoint_epoch", None)
        atomic.torch_save(model.state_dict(), self.folder / "model.pt")
        self.record["checksums"] = {"model.pt": sha256(self.folder / "model.pt")}
        write_record(self.record_path, self.record)
        self.checkpoint_path.unlink(missing_ok=True)
        if self.replaces is not None:  # retrained beside the stored run: now it takes its place
            _swap(self.folder, self.replaces)
            self.folder, self.replaces = self.replaces, None
        return Run(self.folder)


def _swap(new: Path, here: Path) -> None:
    """Put the finished run ``new`` where ``here`` is. A folder cannot replace a folder in one rename: a kill between
    the two leaves the stored run aside (:func:`~vitbn_nb.store.records.replaced_path`) and ``new`` finished, which
    :func:`recover_swap` completes."""
    old = replaced_path(here)
    if here.exists():
        if old.exists():
            shutil.rmtree(old)  # of a swap that had moved this run in and was killed before deleting it
        here.rename(old)
    new.rename(here)
    shutil.rmtree(old, ignore_errors=True)


def recover_swap(run_id: str, store: Path) -> str | None:
    """Complete (or undo) the swap of a retrained run that a kill interrupted; call under the run's lock. A retrain
    that finished takes its place; a stored run moved aside without one comes back. Returns what it did, else None."""
    here = Path(store) / run_id
    new, old = here.parent / RETRAIN_FOLDER / run_id, replaced_path(here)
    with contextlib.suppress(RunStoreError):
        if not new.is_symlink() and stored_run(new) is not None:
            _swap(new, here)
            return f"run {run_id}: a retrain had finished but not taken its place ({new}); it is now {here}"
    if not old.is_dir() or old.is_symlink():
        return None
    if here.exists():  # the swap had moved the retrain in: what is left is the old copy it had yet to delete
        shutil.rmtree(old)
        return f"run {run_id}: deleted the replaced copy a finished retrain left in {old}"
    old.rename(here)
    return f"run {run_id}: a retrain killed before it finished had moved the stored run aside; it is back in {here}"


def recover_swaps(store: Path | None = None) -> list[str]:
    """:func:`recover_swap` for every run of ``store`` whose swap a kill interrupted, each under its lock."""
    store = Path(store) if store is not None else runs_dir()
    done = []
    for run_id in interrupted_swaps(store):
        with run_lock(run_id, progress=False, store=store):
            if (what := recover_swap(run_id, store)) is not None:
                done.append(what)
    return done


# -- measurements of finished runs kept in their records, and the machines that trained and timed them -------


def trained_on(run_ids: Iterable[str]) -> dict[str, int]:
    """The machines that trained ``run_ids`` (every resumed segment's), each with how many of the runs it trained."""
    return _machines(run_ids, lambda r: [s["hardware"] for s in r.get("segments") or [{"hardware": r["hardware"]}]])


def timed_on(run_ids: Iterable[str]) -> dict[str, int]:
    """The machines that took the stored measurements (:func:`measured`) of ``run_ids``, with how many runs each."""
    return _machines(
        run_ids, lambda r: [m["hardware"] for m in r.get("measurements", {}).values() if m.get("hardware")]
    )


def trained_until(run_ids: Iterable[str]) -> str | None:
    """The day (ISO) the last of ``run_ids`` finished training, or took its last stored measurement; None without
    records: the date of the data an output shows, the same wherever and whenever it is rendered."""
    days = []
    for record in _held_records(run_ids):
        days += [str(record.get("finished") or record.get("started") or "")[:10]]
        days += [str(m.get("measured") or "")[:10] for m in record.get("measurements", {}).values()]
    return max((d for d in days if d), default=None)


def _held_records(run_ids: Iterable[str]) -> Iterator[dict]:
    folders = (stored_path(run_id) for run_id in sorted(set(run_ids)))
    return (read_record(folder) for folder in folders if (folder / "record.json").is_file())


def _machines(run_ids: Iterable[str], hardware_of) -> dict[str, int]:
    counts = Counter(name for r in _held_records(run_ids) for name in {system_label(info) for info in hardware_of(r)})
    return dict(sorted(counts.items(), key=lambda item: -item[1]))


def measured(
    run: Run, name: str, measure: Callable[[], Any], device: torch.device | None, *, retake: bool = False
) -> Any:
    """A measurement of a finished run, taken once and kept in its record with the machine's hardware, so a chapter
    rendered elsewhere needs no weights. ``device=None``: a number of the weights alone (no hardware). ``retake``:
    measure again and replace the stored value."""
    stored = run.record.get("measurements", {}).get(name)
    if stored is not None and not retake:
        return stored["value"]
    if is_committed(run.folder):
        what = "must retake" if stored is not None else "lacks"
        raise ValueError(
            f"run {run.run_id}: its committed record ({run.folder}) {what} the measurement {name!r}, which needs its "
            "weights; train the run here (python -m vitbn_nb train --from-scratch) to take it"
        )
    value = measure()
    taken_on = hardware(device) if device is not None else None
    with run_lock(run.run_id, progress=False):
        record = read_record(run.folder)
        record.setdefault("measurements", {})[name] = {"value": value, "hardware": taken_on, "measured": timestamp()}
        write_record(run.folder / "record.json", record)
    run.record = record
    return value
