"""The run store's files, written atomically and read verified: each run's ``record.json`` (with a SHA-256 of itself,
checked against :data:`RECORD_SCHEMA`), its weight files (loaded weights-only), the optimisation state's JSON files
(:data:`STATE_SCHEMAS`); :mod:`.damage` lists each damage with its fix."""

from __future__ import annotations

import hashlib
import json
import math
import pickle
import re
import zipfile
from pathlib import Path
from typing import Any

import jsonschema
import torch
from filelock import FileLock

from .. import atomic
from ..limits import model_problem
from ..paths import is_committed
from .run_config import RunConfig

STATUSES = ("running", "finished", "diverged")
ENDED = ("finished", "diverged")
#: The files a run folder may hold besides its record; each is listed with its SHA-256 in the record.
WEIGHT_FILES = ("model.pt", "checkpoint.pt")
#: The optimisation state's folder in the store (``vitbn_nb.hpo``); not a run.
STATE_FOLDER = "hpo"
STATE_FILE = "ax_state.json"
LEDGER_FILE = "trials.json"

# -- what each JSON file of the store holds, declared once as JSON Schema ---------------------------------------
# A field breaking it is one line: "'test_acc' must be <its description>, not <its value>", or jsonschema's own words
# where it has no description. ``format: finite`` refuses NaN and infinities; an integer is never a bool or a float.

_COUNT = {"type": "integer", "minimum": 0, "description": "a count"}
_TEXT, _OBJECT = {"type": "string", "description": "a string"}, {"type": "object", "description": "an object"}
_DATE, _INT = {"type": ["string", "null"], "description": "a date or null"}, {"type": "integer"}
_SECONDS = {"type": "number", "format": "finite", "minimum": 0, "description": "seconds"}
_PERCENT = {**_SECONDS, "maximum": 100, "description": "a percentage (0 to 100)"}
_SHA256 = {"type": "string", "pattern": "^[0-9a-f]{64}$", "description": "a SHA-256"}
_MACHINE = {  # what every footer reads of a machine: its device type and a name (the GPU's, or the CPU's and cores)
    "type": "object",
    "required": ["device"],
    "properties": {"device": {"enum": ["cpu", "cuda"]}},
    "anyOf": [
        {"required": ["gpu"], "properties": {"gpu": {"type": "string"}}},
        {"required": ["cpu"], "properties": {"cpu": {"type": "string"}, "cpu_cores": {"type": ["integer", "null"]}}},
    ],
    "description": "a machine (device, and gpu or cpu and cpu_cores)",
}
_EPOCH = {
    "type": "object",
    "required": ["epoch", "train_loss", "test_acc", "diverged", "train_seconds", "test_seconds"],
    "properties": {
        **dict.fromkeys(["train_seconds", "test_seconds"], _SECONDS),
        **{"epoch": _COUNT, "test_acc": _PERCENT, "diverged": {"type": "boolean"}},
        "train_loss": {"type": "number", "minimum": 0},  # NaN or infinite where it diverged
        "class_acc": {"type": "array", "items": _PERCENT},
    },
}
#: What a checkpoint holds besides its tensors (``model`` and ``optimizer`` are state dicts).
_CHECKPOINT = {
    "type": "object",
    "required": ["model", "optimizer", "epochs"],
    "properties": {"model": _OBJECT, "optimizer": _OBJECT, "epochs": {"type": "array", "items": _EPOCH}},
}
_MEASUREMENT = {  # its value: numbers (NaN where a quantity does not apply, as a GPU's peak memory on a CPU) or null
    "type": "object",
    "required": ["value"],
    "properties": {"value": {"$ref": "#/$defs/numbers"}, "hardware": {"anyOf": [{"type": "null"}, _MACHINE]}},
}
#: What every run's ``record.json`` holds, as the book's code reads it.
RECORD_SCHEMA = {
    "type": "object",
    "required": ["run_id", "config", "status", "epochs", "hardware", "checksums", "record_sha256"],
    "properties": {
        **dict.fromkeys(["train_images", "test_images", "checkpoint_epoch"], _COUNT),
        **dict.fromkeys(["parameters", "versions"], _OBJECT),
        **dict.fromkeys(["started", "finished"], _DATE),
        **{"run_id": _TEXT, "hardware": _MACHINE, "record_sha256": _SHA256},
        "config": {
            "type": "object",
            "required": ["model", "model_kwargs", "epochs"],
            "properties": {"model": _TEXT, "model_kwargs": _OBJECT, "epochs": {"type": "integer", "minimum": 1}},
            "description": "an object",
        },
        "status": {"enum": list(STATUSES), "description": f"one of {', '.join(STATUSES)}"},
        "epochs": {"type": "array", "items": _EPOCH, "description": "a list"},
        "checksums": {"type": "object", "propertyNames": {"enum": list(WEIGHT_FILES)}, "additionalProperties": _SHA256},
        "measurements": {"type": "object", "additionalProperties": _MEASUREMENT},
        "segments": {
            "type": "array",
            "items": {"type": "object", "required": ["hardware"], "properties": {"hardware": _MACHINE}},
        },
        "resumed_at": {"type": "array", "items": _COUNT},
        "diverged_epoch": {"type": ["integer", "null"], "minimum": 0},
    },
    "$defs": {
        "numbers": {
            "anyOf": [
                {"type": ["number", "null"]},
                {"type": "array", "items": {"$ref": "#/$defs/numbers"}},
                {"type": "object", "additionalProperties": {"$ref": "#/$defs/numbers"}},
            ],
            "description": "numbers or null, alone or in lists and objects of them",
        }
    },
}
_TRIAL = {  # a trial-ledger entry, as the optimisation reads it
    **dict.fromkeys(["run_id", "generator", "status"], _TEXT),
    "trial": _INT,
    "lr": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 10},
    "batch_size": {"type": "integer", "minimum": 2},
    "accuracy": _PERCENT,
    "suggest_seconds": _SECONDS,
}
#: The optimisation state's files (``vitbn_nb.hpo``): ``hpo/<study>/`` and ``hpo/best-<dataset>-<profile>.json``.
STATE_SCHEMAS = {
    LEDGER_FILE: {
        "title": "a trial ledger",
        "type": "object",
        "propertyNames": {"pattern": "^[0-9]+$"},
        "additionalProperties": {"type": "object", "properties": _TRIAL},
    },
    STATE_FILE: {
        "title": "an Ax snapshot",
        "type": "object",
        "required": ["experiment", "generation_strategy"],
        "properties": {"experiment": _OBJECT, "generation_strategy": _OBJECT},
    },
    "study.json": {"title": "a study", "type": "object", "required": ["model"], "properties": {"model": _TEXT}},
    "best-": {
        "title": "a file of chosen values",
        "type": "object",
        "minProperties": 1,
        "additionalProperties": {
            "type": "object",
            "required": ["lr", "batch_size", "depth", "trials", "trial_epochs"],
            "properties": {**_TRIAL, **dict.fromkeys(["depth", "trials", "trial_epochs"], _INT)},
        },
    },
}
_TYPES = jsonschema.Draft202012Validator.TYPE_CHECKER.redefine(
    "integer", lambda _checker, v: isinstance(v, int) and not isinstance(v, bool)
)
_Validator = jsonschema.validators.extend(jsonschema.Draft202012Validator, type_checker=_TYPES)
_FORMATS = jsonschema.FormatChecker(formats=())
_FORMATS.checks("finite")(lambda v: not isinstance(v, float) or math.isfinite(v))


def schema_problem(schema: dict, instance: Any) -> str | None:
    """The first way ``instance`` breaks ``schema`` (the shallowest), as one line naming the field; None when it
    holds."""
    try:
        errors = _Validator(schema, format_checker=_FORMATS).iter_errors(instance)
        error = min(errors, key=lambda e: len(e.path), default=None)
    except RecursionError:
        return "is nested too deeply"
    if error is None:
        return None
    path = list(error.path)
    if error.validator == "required":
        path.append(next(key for key in error.validator_value if key not in error.instance))
        text = "is missing"
    elif described := error.schema.get("description"):
        text = f"must be {described}, not {error.instance!r:.60}"
    else:
        text = f"is wrong: {error.message:.120}" if path else f"{error.message:.120}"
    field, where = f"{path[-1]!r} " if path else "", "/".join(map(str, path[:-1]))
    return f"{where}: {field}{text}" if where else f"{field}{text}"


def state_fix(path: Path) -> str:
    return (
        f"fix: delete {path} and run the optimising chapter again (04 or 06), or import the bundle of the machine "
        "that optimised"
    )


def state_problem(name: str, state) -> str | None:
    """What makes one file of the optimisation state unusable (None when it is whole): :data:`STATE_SCHEMAS`."""
    schema = STATE_SCHEMAS.get("best-" if name.startswith("best-") else name, _OBJECT)
    problem = schema_problem(schema, state)
    return f"is not {schema.get('title', 'a JSON object')}: {problem}" if problem else None


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


# -- the working folders of imports, owned by the live process that made them ------------------------------------
# The owner holds the folder's file lock (``.locks/<folder name>.lock``, as a run's) from before the folder is made
# until after it is removed (a kill -9 lets go of it): a lock another process can take means the owner is gone.

#: The store's lock folder, shared with the run locks; run ids never begin with a dot, so no run has an import's.
LOCKS = ".locks"


def is_owned(folder: Path) -> bool:
    """Whether a live process holds ``folder``'s lock (an import's working folder, or a run it writes); read only."""
    path = folder.parent / LOCKS / f"{folder.name}.lock"
    if not path.exists():
        return False  # the lock comes before the folder and goes after it: no lock file, no owner
    try:
        with FileLock(path).acquire(blocking=False):
            return False
    except OSError:  # held (a Timeout), or cannot tell: assume someone is at work rather than call it abandoned
        return True


# -- a retrained run taking the stored run's place: two renames, a kill between them found again ----------------

#: Where a run trained again (``--force``, ``runs retrain``) trains, beside the stored run it replaces when finished.
RETRAIN_FOLDER = ".retrain"
SWAP_FIX = "fix: run `python -m vitbn_nb runs check` (it puts the finished run in its place and says which)"


def replaced_path(folder: Path) -> Path:
    """Where the swap of a retrained run moves the run it replaces, for the instant before the new one moves in."""
    return Path(folder).parent / f".{Path(folder).name}.old"


def _is_folder(path: Path) -> bool:
    return path.is_dir() and not path.is_symlink()  # a link planted under a swap's name is never followed


def interrupted_swaps(store: Path) -> dict[str, str]:
    """The runs whose swap a kill interrupted (found by name, nothing read but a retrain's own record), each with
    what is hidden: a stored run moved aside, or a retrain that finished and never took its run's place."""
    store, found = Path(store), {}
    if not store.is_dir():
        return found
    for old in sorted(store.glob(".*.old")):
        if _is_folder(old) and (run_id := old.name[1:-4]):
            where = "its folder is missing and " if not (store / run_id).exists() else ""
            found[run_id] = f"a retrain was killed while it replaced this run: {where}the stored copy is in {old}"
    retrains = store / RETRAIN_FOLDER
    for new in sorted(retrains.iterdir()) if _is_folder(retrains) else []:
        if new.name not in found and _is_folder(new) and _finished_record(new):
            found[new.name] = f"a retrain of this run finished in {new} but a kill stopped it before it took its place"
    return found


def _finished_record(folder: Path) -> bool:
    try:
        return read_record(folder)["status"] in ENDED
    except RunStoreError:
        return False


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


def record_problem(record: Any, folder_name: str) -> str | None:
    """What makes ``record`` untrustworthy (None when whole): its checksum, :data:`RECORD_SCHEMA`, its folder, its
    configuration's sizes, its epochs' numbers and its status."""
    if not isinstance(record, dict):
        return f"holds a JSON {type(record).__name__}, not a run record"
    if "record_sha256" not in record:
        return "has no checksum (record_sha256), so an edit cannot be told from the run's own numbers"
    try:
        digest = _record_digest(record)
    except RecursionError:
        return "is nested too deeply"
    if (digest, folder_name) in _WHOLE and record["record_sha256"] == digest:
        return None  # this very content was found whole before (checking the schema costs more than the digest)
    if (problem := schema_problem(RECORD_SCHEMA, record)) is not None:
        return problem
    if (where := _control_text(record, "the record")) is not None:
        return f"{where} holds control characters (text a terminal or a page would act on, never a run's)"
    if record["record_sha256"] != digest:
        return "does not match its checksum (edited or damaged)"
    if record["run_id"] != folder_name:
        return f"names run {record['run_id']!r} but lies in folder {folder_name!r}"
    if (problem := model_problem(record["config"], count=False)) is not None:  # sizes alone: nothing is built
        return f"config: {problem}"
    epochs, status = record["epochs"], record["status"]
    for i, epoch in enumerate(epochs, 1):
        if epoch["epoch"] != i:
            return f"epoch {i} is numbered {epoch['epoch']}"
        diverged = not math.isfinite(epoch["train_loss"])
        if epoch["diverged"] != diverged or (diverged and i < len(epochs)):
            return f"epoch {i}: 'diverged' must say whether train_loss is finite, and only the last epoch diverges"
    if status in ENDED:
        if "model.pt" not in record["checksums"]:
            return f"is {status} but lists no model.pt checksum"
        if status == "finished" and len(epochs) != record["config"]["epochs"]:
            return f"is finished after {len(epochs)} of {record['config']['epochs']} epochs"
        if status == "diverged" and not (epochs and epochs[-1]["diverged"]):
            return "is diverged but its last epoch did not diverge"
    _WHOLE.add((digest, folder_name))
    return None


_WHOLE: set[tuple[str, str]] = set()  # (content digest, folder) of the records found whole
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def _control_text(value: Any, where: str) -> str | None:
    """Where in ``value`` a string (or a key) holds a control character, e.g. an ANSI escape; None when none does."""
    if isinstance(value, str):
        return where if _CONTROL.search(value) else None
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        if isinstance(key, str) and _CONTROL.search(key):
            return f"a key in {where}"
        if (found := _control_text(item, f"{where}[{key!r}]")) is not None:
            return found
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
    try:
        config = json.loads((Path(folder) / "record.json").read_text())["config"]
        # a configuration past the bounds is never built, not even to say what to retrain
        retrainable = model_problem(config) is None and RunConfig(**config) and not is_committed(folder)
    except (Exception, RecursionError):
        retrainable = False
    return retrain_fix(Path(folder).name) if retrainable else delete_fix(Path(folder))


#: Entries of a weight file besides its tensors' (data.pkl, version, byte order ...) and what they may hold together.
_ARCHIVE_EXTRA_BYTES = 4 * 2**20


def archive_problem(path: Path, tensor_bytes: int | None = None) -> str | None:
    """Why ``path`` is not a weight file as ``torch.save`` writes it (None when it is): a zip of uncompressed entries
    (reading it costs no more memory than its size), with ``tensor_bytes`` at most what the tensors need (plus
    :data:`_ARCHIVE_EXTRA_BYTES`). Read from the zip's directory alone, before torch reads a byte of it."""
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
    """A run's weight file (model or checkpoint) on the CPU, its checksum and zip directory (:func:`archive_problem`)
    checked, loaded weights-only: tensors and plain types, never code. Errors name the file and the fix."""
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
        if schema_problem(_CHECKPOINT, checkpoint) is not None or len(checkpoint["epochs"]) <= known:
            raise mismatch from None
    if schema_problem(_CHECKPOINT, checkpoint) is not None:
        raise RunStoreError(run_id, f"{path} is not a checkpoint (model, optimizer and epochs)")
    return checkpoint
