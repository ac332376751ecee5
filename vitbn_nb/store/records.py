"""The run store's files, read and written atomically and verified: each run's ``record.json`` (with a SHA-256 of
itself) and weight files (loaded weights-only: data, never code), the optimisation state's JSON files, and the
working folders of imports. :func:`check_store` lists every damaged run with a repair that works."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import math
import os
import pickle
import re
import uuid
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import torch

from .. import atomic
from ..limits import model_problem
from ..models import build_model
from ..paths import is_committed, runs_dir
from .run_config import RunConfig

STATUSES = ("running", "finished", "diverged")
ENDED = ("finished", "diverged")
#: The files a run folder may hold besides its record; each is listed with its SHA-256 in the record.
WEIGHT_FILES = ("model.pt", "checkpoint.pt")
#: The optimisation state's folder in the store (``vitbn_nb.hpo``); not a run.
STATE_FOLDER = "hpo"
_HEX64 = re.compile(r"^[0-9a-f]{64}$")


# -- the optimisation state's files (``vitbn_nb.hpo``): ``hpo/<study>/`` and ``hpo/best-<dataset>-<profile>.json`` --

STATE_FILE = "ax_state.json"
LEDGER_FILE = "trials.json"


def state_fix(path: Path) -> str:
    return (
        f"fix: delete {path} and run the optimising chapter again (04 or 06), or import the bundle of the machine "
        "that optimised"
    )


_number = lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)
_num = lambda v: _number(v) and math.isfinite(v)
_int = lambda v: isinstance(v, int) and not isinstance(v, bool)
_count = lambda v: _int(v) and v >= 0
_text = lambda v: isinstance(v, str)
_maybe = lambda test: lambda v: v is None or test(v)
_seconds = lambda v: _num(v) and v >= 0
_percent = lambda v: _num(v) and 0 <= v <= 100
#: What each kind of trial-ledger entry and chosen-values entry must hold (key: test), as the code reads them.
_LEDGER_ENTRY = {
    "trial": _int,
    "lr": lambda v: _num(v) and 0 < v < 10,
    "batch_size": lambda v: _int(v) and v >= 2,
    "run_id": _text,
    "generator": _text,
    "accuracy": _percent,
    "suggest_seconds": _seconds,
    "status": _text,
}
_BEST_ENTRY = {**_LEDGER_ENTRY, "depth": _int, "trials": _int, "trial_epochs": _int}
_BEST_REQUIRED = ("lr", "batch_size", "depth", "trials", "trial_epochs")


def state_problem(name: str, state) -> str | None:
    """What makes one file of the optimisation state unusable (None when it is whole), checked as the code reads it."""
    if not isinstance(state, dict):
        return "is not a JSON object"
    if name == LEDGER_FILE:
        for key, entry in state.items():
            if not key.isdigit() or not isinstance(entry, dict):
                return f"holds trial {key!r}, which is not a numbered trial"
            if bad := [k for k, test in _LEDGER_ENTRY.items() if k in entry and not test(entry[k])]:
                return f"trial {key}: {bad[0]!r} has the wrong type or range"
    elif name == STATE_FILE:
        if not isinstance(state.get("experiment"), dict) or not isinstance(state.get("generation_strategy"), dict):
            return "is not an Ax snapshot (no experiment and generation strategy)"
    elif name == "study.json":
        if not isinstance(state.get("model"), str):
            return "does not name the study's model"
    elif name.startswith("best-"):
        for model, entry in state.items():
            if not isinstance(entry, dict) or any(k not in entry for k in _BEST_REQUIRED):
                return f"does not hold {model}'s {', '.join(_BEST_REQUIRED)}"
            if bad := [k for k, test in _BEST_ENTRY.items() if k in entry and not test(entry[k])]:
                return f"{model}: {bad[0]!r} has the wrong type or range"
        if not state:
            return "holds no model"
    return None


def state_file_problem(path: Path) -> str | None:
    """What makes a file of the optimisation state unusable (:func:`state_problem`), unreadable JSON included."""
    try:
        return state_problem(path.name, json.loads(path.read_text()))
    except (OSError, ValueError, RecursionError) as error:
        return f"cannot be read ({'nested too deeply' if isinstance(error, RecursionError) else error})"


def read_state(path: Path, fix: str) -> dict:
    """A file of the optimisation state, checked; a damaged one is named with ``fix``."""
    if problem := state_file_problem(path):
        raise ValueError(f"{path} {problem}; {fix}")
    return json.loads(path.read_text())


def read_ledger(path: Path) -> dict:
    return read_state(path, state_fix(path.parent))


# -- working folders owned by the live process that made them (an import's ``.import-*``) ---------------------
# The owner holds an OS lock (``flock``, ``.locks/<folder name>.lock``) for the folder's life, let go when it ends
# (kill -9 included): a lock another process can take means the owner is gone, and only such folders are cleaned.

#: The store's lock folder, shared with the run locks (``run_folder.run_lock``); run ids never begin with a dot, so
#: a working folder's lock (``.import-*.lock``) is never a run's.
LOCKS = ".locks"


def _lock_path(folder: Path) -> Path:
    return folder.parent / LOCKS / f"{folder.name}.lock"


def _try_lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


@contextlib.contextmanager
def owned_folder(parent: Path, prefix: str) -> Iterator[Path]:
    """A new folder ``parent/<prefix><random>``, locked by this process from before it is made to the block's end."""
    folder = Path(parent) / f"{prefix}{uuid.uuid4().hex[:12]}"
    lock = _lock_path(folder)
    lock.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # a new file: nobody else holds it
        folder.mkdir()
        yield folder
    finally:
        lock.unlink(missing_ok=True)  # before letting go: a folder left behind then reads as ownerless
        os.close(fd)


def is_owned(folder: Path) -> bool:
    """Whether a live process owns ``folder`` (read only: nothing is created or removed)."""
    try:
        fd = os.open(_lock_path(folder), os.O_RDONLY)
    except FileNotFoundError:
        return False  # the lock comes before the folder and goes after it: no lock file, no owner
    except OSError:
        return True  # cannot tell: assume someone is at work rather than call it abandoned
    try:
        if not _try_lock(fd):
            return True
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)


@contextlib.contextmanager
def taken_over(folder: Path) -> Iterator[bool]:
    """Whether ``folder`` is this process's to clean up (its owner gone, the folder still there): then its lock is held
    until the block ends and removed with it. False for a folder a live process owns, or one that cannot be locked."""
    lock = _lock_path(folder)
    try:
        lock.parent.mkdir(parents=True, exist_ok=True)
        # Created when missing: a folder left by a version of the book that took no lock, or whose lock file was
        # deleted by hand, is taken over by one process only.
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError:
        yield False
        return
    held = False
    try:
        held = _try_lock(fd)
        yield held and folder.is_dir()  # the owner may have finished (and removed it) since it was seen
    finally:
        if held:
            lock.unlink(missing_ok=True)
        os.close(fd)


#: An import's temporary folder in the store (``.import-<random>``), and the mark it leaves from its first change of
#: the store to its last (``.incomplete-<bundle digest>-<random>``): a store with a mark may lack some of that
#: bundle's runs. Neither is ever read: a mark is known by its name alone.
SCRATCH_PREFIX, MARK_PREFIX = ".import-", ".incomplete-"


def half_imported(store: Path) -> list[Path]:
    """The marks of imports into ``store`` that have not finished (under way, or interrupted by a kill)."""
    return sorted(Path(store).glob(f"{MARK_PREFIX}*")) if Path(store).is_dir() else []


def import_owner(mark: Path) -> Path:
    """The temporary folder of the import that left ``mark`` (owned while that import runs: :func:`is_owned`)."""
    return mark.parent / f"{SCRATCH_PREFIX}{mark.name.rsplit('-', 1)[-1]}"


def retrain_fix(run_id: str) -> str:
    return f"fix: python -m vitbn_nb runs retrain {run_id}"


def delete_fix(folder: Path) -> str:
    if is_committed(folder):
        return restore_fix(folder)
    return (
        f"fix: delete {folder} (its configuration cannot be read, so nothing can retrain it in place), then "
        "python -m vitbn_nb train (it trains every run the chapters lack)"
    )


class RunStoreError(RuntimeError):
    """A damaged or missing file of the run store; the message names the run, the file and the fix."""

    def __init__(self, run_id: str, problem: str, fix: str | None = None):
        self.run_id, self.problem, self.fix = run_id, problem, fix or retrain_fix(run_id)
        super().__init__(f"run {run_id}: {problem}; {self.fix}")


def sha256(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _record_digest(record: dict) -> str:
    body = {k: v for k, v in record.items() if k != "record_sha256"}
    return hashlib.sha256(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest()


def write_record(path: Path, record: dict) -> None:
    """Write ``record.json`` atomically with a checksum of its own content."""
    record["record_sha256"] = _record_digest(json.loads(json.dumps(record, default=str)))
    atomic.write_json(path, record)


# -- what a whole record holds ------------------------------------------------------------------------


def _hardware(v) -> bool:
    """What every footer reads of a machine: its device type and a name (the GPU's, or the CPU's and its cores)."""
    return (
        isinstance(v, dict)
        and v.get("device") in ("cpu", "cuda")
        and (isinstance(v.get("gpu"), str) or (isinstance(v.get("cpu"), str) and _maybe(_count)(v.get("cpu_cores"))))
    )


def _plain_numbers(v, depth: int = 0) -> bool:
    """A measurement's value: numbers (NaN where a quantity does not apply, as a GPU's peak memory on a CPU) or
    null, alone or in lists and objects of them."""
    if depth > 4:
        return False
    if isinstance(v, dict):
        return all(isinstance(k, str) and _plain_numbers(x, depth + 1) for k, x in v.items())
    if isinstance(v, list):
        return all(_plain_numbers(x, depth + 1) for x in v)
    return v is None or _number(v)


_list_of = lambda test: lambda v: isinstance(v, list) and all(test(x) for x in v)
_object = lambda v: isinstance(v, dict)
_segment = lambda v: isinstance(v, dict) and _hardware(v.get("hardware"))

#: key: (required, test, what it must be). The keys the book's code reads from every record.
_RECORD_KEYS = {
    "run_id": (True, _text, "a string"),
    "config": (True, _object, "an object"),
    "status": (True, lambda v: v in STATUSES, f"one of {', '.join(STATUSES)}"),
    "epochs": (True, lambda v: isinstance(v, list), "a list"),
    "hardware": (True, _hardware, "a machine (device, and gpu or cpu and cpu_cores)"),
    "checksums": (True, _object, "an object"),
    "record_sha256": (True, lambda v: isinstance(v, str) and bool(_HEX64.match(v)), "a SHA-256"),
    "measurements": (False, _object, "an object"),
    "segments": (False, _list_of(_segment), "segments with machines"),
    "resumed_at": (False, _list_of(_count), "a list of epoch numbers"),
    "parameters": (False, _object, "an object"),
    "train_images": (False, _count, "a count"),
    "test_images": (False, _count, "a count"),
    "started": (False, _maybe(_text), "a date"),
    "finished": (False, _maybe(_text), "a date or null"),
    "diverged_epoch": (False, _maybe(_count), "an epoch or null"),
    "checkpoint_epoch": (False, _count, "an epoch"),
    "versions": (False, _object, "an object"),
}
_EPOCH_KEYS = {
    "epoch": (True, _count, "an epoch number"),
    "train_loss": (True, _number, "a number"),
    "test_acc": (True, _percent, "a percentage (0 to 100)"),
    "diverged": (True, lambda v: isinstance(v, bool), "true or false"),
    "train_seconds": (True, _seconds, "seconds"),
    "test_seconds": (True, _seconds, "seconds"),
    "class_acc": (False, _list_of(_percent), "a list of percentages"),
}
_CONFIG_KEYS = {
    "model": (True, _text, "a model name"),
    "model_kwargs": (True, _object, "an object"),
    "epochs": (True, lambda v: _count(v) and v >= 1, "a count >= 1"),
}


def _wrong_keys(obj: dict, keys: dict, where: str) -> str | None:
    for key, (required, test, what) in keys.items():
        if key not in obj:
            if required:
                return f"{where}{key!r} is missing"
        elif not test(obj[key]):
            return f"{where}{key!r} must be {what}, not {obj[key]!r:.60}"
    return None


def record_problem(record: Any, folder_name: str) -> str | None:
    """What makes ``record`` untrustworthy (None when whole): its checksum, a key the book reads, or its status."""
    if not isinstance(record, dict):
        return f"holds a JSON {type(record).__name__}, not a run record"
    if "record_sha256" not in record:
        return "has no checksum (record_sha256), so an edit cannot be told from the run's own numbers"
    if (problem := _wrong_keys(record, _RECORD_KEYS, "")) is not None:
        return problem
    if record["record_sha256"] != _record_digest(record):
        return "does not match its checksum (edited or damaged)"
    if record["run_id"] != folder_name:
        return f"names run {record['run_id']!r} but lies in folder {folder_name!r}"
    if (problem := _wrong_keys(record["config"], _CONFIG_KEYS, "config: ")) is not None:
        return problem
    if (problem := model_problem(record["config"], count=False)) is not None:  # sizes alone: nothing is built
        return f"config: {problem}"
    for i, epoch in enumerate(record["epochs"], 1):
        if not isinstance(epoch, dict):
            return f"epoch {i} is not an object"
        if (problem := _wrong_keys(epoch, _EPOCH_KEYS, f"epoch {i}: ")) is not None:
            return problem
        if epoch["epoch"] != i:
            return f"epoch {i} is numbered {epoch['epoch']}"
        diverged = not math.isfinite(epoch["train_loss"])
        if epoch["diverged"] != diverged or (diverged and i < len(record["epochs"])):
            return f"epoch {i}: 'diverged' must say whether train_loss is finite, and only the last epoch diverges"
        if not epoch["diverged"] and epoch["train_loss"] < 0:
            return f"epoch {i}: 'train_loss' cannot be negative"
    for name, digest in record["checksums"].items():
        if name not in WEIGHT_FILES or not (isinstance(digest, str) and _HEX64.match(digest)):
            return f"checksums: {name!r} is not a weight file with a SHA-256"
    for name, measurement in record.get("measurements", {}).items():
        if not isinstance(measurement, dict) or not _plain_numbers(measurement.get("value", "missing")):
            return f"measurement {name!r} must hold a value of numbers"
        if measurement.get("hardware") is not None and not _hardware(measurement["hardware"]):
            return f"measurement {name!r} names no machine it was taken on"
    epochs, status = record["epochs"], record["status"]
    if status in ENDED:
        if "model.pt" not in record["checksums"]:
            return f"is {status} but lists no model.pt checksum"
        if status == "finished" and len(epochs) != record["config"]["epochs"]:
            return f"is finished after {len(epochs)} of {record['config']['epochs']} epochs"
        if status == "diverged" and not (epochs and epochs[-1]["diverged"]):
            return "is diverged but its last epoch did not diverge"
    return None


def read_record(folder: Path) -> dict:
    """A run's record, verified (:func:`record_problem`); a damaged one raises :class:`RunStoreError` with a fix."""
    path, run_id = Path(folder) / "record.json", Path(folder).name
    try:
        record = json.loads(path.read_text())
    except FileNotFoundError:
        raise RunStoreError(run_id, f"{path} is missing", fix=delete_fix(Path(folder))) from None
    except (OSError, ValueError, RecursionError) as error:  # a folder in its place, unreadable, not JSON, too deep
        reason = "nested too deeply" if isinstance(error, RecursionError) else error
        raise RunStoreError(run_id, f"{path} cannot be read ({reason})", fix=repair_fix(Path(folder))) from None
    if (problem := record_problem(record, run_id)) is not None:
        raise RunStoreError(run_id, f"{path} {problem}", fix=repair_fix(Path(folder)))
    return record


def restore_fix(folder: Path) -> str:
    """A committed record is the book's evidence, kept in git: it is restored, never deleted or retrained in place."""
    return (
        f"fix: restore it from git (git checkout -- {Path(folder) / 'record.json'}); the records committed beside "
        "figures/ are never written by the book"
    )


def repair_fix(folder: Path) -> str:
    """The fix that works: restoring a committed record from git, else ``runs retrain`` when the record still says
    what the run was (its JSON and configuration readable), else deleting the folder."""
    if is_committed(folder):
        return restore_fix(folder)
    try:
        record = json.loads((Path(folder) / "record.json").read_text())
        if model_problem(record["config"]) is not None:  # never built, not even to say what to retrain
            return delete_fix(Path(folder))
        RunConfig(**record["config"])
    except (Exception, RecursionError):
        return delete_fix(Path(folder))
    return retrain_fix(Path(folder).name)


def identity_problem(record: dict, folder_name: str) -> str | None:
    """Whether a whole record's configuration is one this code accepts and gives the run id of its folder; one past
    the model families' bounds is refused before anything is built."""
    if (problem := model_problem(record["config"])) is not None:
        return f"its configuration is refused: {problem}"
    try:
        config = RunConfig(**record["config"])
    except (TypeError, ValueError) as error:
        return f"its configuration is not valid ({error})"
    if config.run_id(record["hardware"]["device"]) != folder_name:
        return "its configuration names another run"
    return None


#: Entries of a weight file besides its tensors' (data.pkl, version, byte order ...) and what they may hold together.
_ARCHIVE_EXTRA_BYTES = 4 * 2**20


def archive_problem(path: Path, tensor_bytes: int | None = None) -> str | None:
    """Why ``path`` is not a weight file as ``torch.save`` writes it (None when it is): a zip archive whose entries are
    stored uncompressed, so that reading it costs no more memory than its size on disk; with ``tensor_bytes``, its
    entries together at most what the tensors need (plus :data:`_ARCHIVE_EXTRA_BYTES`). Read from the zip's
    directory alone: a file that would expand past that is refused before torch reads a byte of it."""
    try:
        with zipfile.ZipFile(path) as archive:
            entries = archive.infolist()
    except (zipfile.BadZipFile, OSError, ValueError, EOFError) as error:
        return f"is not a weight file the book writes (not a zip archive of tensors: {error})"
    if any(e.compress_type != zipfile.ZIP_STORED or e.file_size != e.compress_size for e in entries):
        return "holds compressed entries, which torch.save never writes (a file that expands when read)"
    expanded = sum(e.file_size for e in entries)
    if expanded > Path(path).stat().st_size:
        return f"says it holds {expanded:,} bytes in a file of {Path(path).stat().st_size:,} (a lying zip directory)"
    if tensor_bytes is not None and expanded > tensor_bytes + _ARCHIVE_EXTRA_BYTES:
        return f"expands to {expanded:,} bytes, more than its model's weights need ({tensor_bytes:,})"
    return None


def load_weights(path: Path, run_id: str, expected: str | None = None) -> Any:
    """A run's weight file (model or checkpoint) on the CPU, its checksum verified, its zip directory checked
    (:func:`archive_problem`), loaded weights-only: tensors and plain types, never code. Errors name the file and
    the fix."""
    path = Path(path)
    if not path.is_file():
        raise RunStoreError(run_id, f"{path} is missing")
    if expected is not None and sha256(path) != expected:
        raise RunStoreError(run_id, f"{path} does not match its checksum (truncated or damaged)")
    if (problem := archive_problem(path)) is not None:  # before torch: a raw pickle is refused without its warnings
        raise RunStoreError(run_id, f"{path} cannot be read as weights: it {problem}")
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError:
        raise RunStoreError(
            run_id,
            f"{path} cannot be read as weights: it holds more than tensors and plain types (pickled objects "
            "or code, which the book never loads)",
        ) from None
    except Exception as error:
        reason = str(error).splitlines()[0][:200]
        raise RunStoreError(run_id, f"{path} cannot be read as weights ({type(error).__name__}: {reason})") from None


def fit_problem(config: dict, state: Any) -> str | None:
    """Why the weights ``state`` do not fit the model the record's configuration builds (None when they do): a
    weight file can be whole, its checksum listed, and still belong to another model."""
    if (problem := model_problem(config)) is not None:
        return f"is not loaded: {problem}"
    try:
        model = build_model(config["model"], **config["model_kwargs"])
    except (KeyError, TypeError, ValueError) as error:
        return f"its record's configuration builds no model ({error})"
    try:
        model.load_state_dict(state)
    except (RuntimeError, TypeError, ValueError, AttributeError) as error:
        return f"does not fit its model ({' '.join(str(error).split())[:240]})"
    return None


def load_checkpoint(folder: Path, record: dict) -> dict:
    """An unfinished run's checkpoint, verified. A kill between the checkpoint and its record leaves a whole checkpoint
    one save newer than the record knows: the truth a resume reads, taken when it loads and holds more epochs."""
    path, run_id = Path(folder) / "checkpoint.pt", Path(folder).name
    try:
        checkpoint = load_weights(path, run_id, record.get("checksums", {}).get("checkpoint.pt"))
    except RunStoreError as mismatch:
        try:
            checkpoint = load_weights(path, run_id, None)
        except RunStoreError:
            raise mismatch from None
        known = record.get("checkpoint_epoch", len(record.get("epochs", [])))
        if not _whole_checkpoint(checkpoint) or len(checkpoint["epochs"]) <= known:
            raise mismatch from None
    if not _whole_checkpoint(checkpoint):
        raise RunStoreError(run_id, f"{path} is not a checkpoint (model, optimizer and epochs)")
    return checkpoint


def _whole_checkpoint(checkpoint: Any) -> bool:
    return (
        isinstance(checkpoint, dict)
        and isinstance(checkpoint.get("model"), dict)
        and isinstance(checkpoint.get("optimizer"), dict)
        and isinstance(checkpoint.get("epochs"), list)
        and all(isinstance(e, dict) and _wrong_keys(e, _EPOCH_KEYS, "") is None for e in checkpoint["epochs"])
    )


# -- checking the whole store ---------------------------------------------------------------------------


def _problems(folder: Path) -> list[tuple[str, str]]:
    """What is wrong with one run folder, each with its fix (empty when nothing is)."""
    try:
        record = read_record(folder)
    except RunStoreError as error:
        return [(error.problem, error.fix)]
    problems = []
    if (problem := identity_problem(record, folder.name)) is not None:
        problems.append((f"{folder / 'record.json'}: {problem}", delete_fix(folder)))
    ended = record["status"] in ENDED
    path = folder / ("model.pt" if ended else "checkpoint.pt")  # a model absent: imported as its record alone
    if path.exists():
        try:
            if ended:
                state = load_weights(path, folder.name, record["checksums"]["model.pt"])
            else:
                state = load_checkpoint(folder, record)["model"]
        except RunStoreError as error:
            return [*problems, (error.problem, error.fix)]
        if (problem := fit_problem(record["config"], state)) is not None:
            problems.append((f"{path} {problem}", retrain_fix(folder.name)))
    return problems


def _entries(store: Path) -> list[Path]:
    return sorted(p for p in store.iterdir() if not p.name.startswith(".")) if store.is_dir() else []


def check_store(store: str | Path | None = None) -> pd.DataFrame:
    """Every damaged run of the store (and file of the optimisation state): its id, folder, what is wrong and the
    command that repairs it. Anything else that is not a run is left to :func:`store_notes`."""
    store = Path(store) if store is not None else runs_dir()
    rows = []
    for entry in _entries(store):
        if entry.name == STATE_FOLDER:
            for path in sorted(p for p in entry.rglob("*.json") if p.is_file()):
                if problem := state_file_problem(path):
                    rows.append((STATE_FOLDER, path, problem, state_fix(path)))
        elif entry.is_dir() and (entry / "record.json").exists():
            rows += [(entry.name, entry, problem, fix) for problem, fix in _problems(entry)]
    for mark in half_imported(store):
        if not is_owned(import_owner(mark)):  # owned: an import under way, not damage
            problem = "an import that was interrupted: the store may lack some of that bundle's runs"
            fix = f"fix: run the same python -m vitbn_nb runs import BUNDLE again (it completes it), or delete {mark}"
            rows.append((mark.name, mark, problem, fix))
    rows = [(run, str(folder), problem, fix) for run, folder, problem, fix in rows]
    return pd.DataFrame(rows, columns=["run", "folder", "problem", "fix"])


def store_notes(store: str | Path | None = None) -> list[str]:
    """What a store holds besides whole runs, none of it damage: entries that are not runs, finished runs kept as
    records alone, and checkpoints left beside finished records."""
    store = Path(store) if store is not None else runs_dir()
    others, records_only, stale = [], 0, 0
    for entry in _entries(store):
        if entry.name == STATE_FOLDER and entry.is_dir():
            continue
        if not (entry.is_dir() and (entry / "record.json").exists()):
            others.append(entry.name + ("/" if entry.is_dir() else ""))
            continue
        try:
            record = read_record(entry)
        except RunStoreError:
            continue  # check_store reports it
        if record["status"] in ENDED:
            records_only += not (entry / "model.pt").exists()
            stale += (entry / "checkpoint.pt").exists()
    notes = []
    if records_only:
        notes.append(
            f"{records_only} finished run(s) are kept as their records alone (imported without weights): the "
            "chapters render from them; the app and fine-tuning need weights (export with --weights all)"
        )
    if stale:
        notes.append(f"{stale} finished run(s) still hold a checkpoint.pt from before their final save (unused)")
    if others:
        notes.append(f"not runs, left alone: {', '.join(others)}")
    return notes
