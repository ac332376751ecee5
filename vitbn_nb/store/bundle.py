"""Moving runs between machines: ``runs export FILE`` writes a bundle (a ``.tar.gz`` of the store's records,
optimisation state, unfinished checkpoints and chosen weights), ``runs import FILE`` reads one.

An import trusts nothing it did not write: every header and record is checked against the limits, the model families'
bounds and the free disk before anything is written (:func:`survey`); each file is unpacked (tarfile's ``data``
filter) into a temporary folder in the store and checked against the bundle's SHA-256 listing, a weight file against
its record's model, before the next; then each run is renamed into place under its lock. A kill leaves every run whole
or absent and the store marked until the same import completes it. Nothing from elsewhere replaces a finished run."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import io
import json
import re
import shutil
import tarfile
import uuid
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from filelock import FileLock

from .. import atomic
from ..limits import model_size
from ..paths import runs_dir, stored_path
from . import provenance
from .damage import MARK_PREFIX, SCRATCH_PREFIX, fit_problem, half_imported, identity_problem, import_owner
from .records import (
    ENDED,
    LOCKS,
    STATE_FOLDER,
    SWAP_FIX,
    WEIGHT_FILES,
    RunStoreError,
    archive_problem,
    interrupted_swaps,
    is_owned,
    load_checkpoint,
    load_weights,
    read_record,
    record_problem,
    sha256,
    state_file_problem,
    write_record,
)
from .run_config import RunConfig
from .run_folder import run_locks, timestamp

FORMAT = 2
_RUN_FILE = re.compile(
    r"^runs/(?P<run>[A-Za-z0-9][A-Za-z0-9_.+-]{0,150})/(?P<file>record\.json|model\.pt|checkpoint\.pt)$"
)
_STATE_FILE = re.compile(
    r"^runs/hpo/(?:[A-Za-z0-9][A-Za-z0-9_.-]{0,150}/(?:ax_state|trials|study)\.json|best-[A-Za-z0-9_-]{1,80}\.json)$"
)
#: What a bundle may cost (a paper store with every weight file unpacks to a few hundred MiB).
MAX_BYTES = 4 * 2**30
MAX_FILES = 10_000
MAX_FILE_BYTES = {".json": 4 * 2**20, ".pt": 256 * 2**20}
MAX_LISTING_BYTES = 4 * 2**20
#: The one tar extension a bundle carries: a pax header per member (sub-second times, long paths).
MAX_PAX_BYTES = 4096
#: A checkpoint holds the model's weights and the optimiser's state (Adam: two more of each): at most this many times
#: the model's state, plus the tensors' zip entries.
CHECKPOINT_STATES = 4
_ENTRY_BYTES = 1024


class BundleError(ValueError):
    """A bundle that cannot be imported; the message names the bundle, what is wrong and the fix."""


def _run_folders(store: Path) -> list[Path]:
    return sorted(p for p in store.iterdir() if p.is_dir() and (p / "record.json").is_file()) if store.is_dir() else []


def needed_weights(measured: list[RunConfig], choice: str | None, store: Path | None = None) -> set[str]:
    """Run ids whose ``model.pt`` the receiving machine loads: ``choice`` (the app's model), the source of every
    unfinished fine-tuning run, and each ``measured`` run with no stored measurement yet."""
    store = Path(store) if store is not None else runs_dir()
    stored = {folder.name: read_record(folder) for folder in _run_folders(store)}
    ended = {run_id for run_id, record in stored.items() if record["status"] in ENDED}
    needed = {r["config"]["init_from"] for i, r in stored.items() if r["config"].get("init_from") and i not in ended}
    needed |= {choice} - {None}
    device_types = {record["hardware"]["device"] for record in stored.values()}
    for config in measured:
        ids = set(config.ids(device_types)) & ended
        if config.init_from and not ids:
            needed.add(config.init_from)
        needed |= {run_id for run_id in ids if not stored[run_id].get("measurements")}
    return needed


def _members(store: Path, keep: set[str] | None) -> list[tuple[Path, str]]:
    """The files a bundle of ``store`` takes (each verified now: a damaged one stops the export, naming its run)."""
    members: list[tuple[Path, str]] = []
    for folder in _run_folders(store):
        record = read_record(folder)
        checkpoint, model = folder / "checkpoint.pt", folder / "model.pt"
        files = [folder / "record.json"]
        if record["status"] not in ENDED and checkpoint.is_file():
            load_checkpoint(folder, record)
            if sha256(checkpoint) != record["checksums"].get("checkpoint.pt"):
                raise RunStoreError(
                    folder.name,
                    f"{checkpoint} is newer than its record (a kill during a save)",
                    fix="fix: resume it once (python -m vitbn_nb train, or the chapter), then export again",
                )
            files.append(checkpoint)
        elif record["status"] in ENDED and model.is_file() and (keep is None or record["run_id"] in keep):
            load_weights(model, folder.name, record["checksums"]["model.pt"])
            files.append(model)
        members += [(path, f"runs/{folder.name}/{path.name}") for path in files]
    state = store / STATE_FOLDER
    if state.is_dir():
        for path in sorted(p for p in state.rglob("*") if p.is_file()):
            name = f"runs/{STATE_FOLDER}/{path.relative_to(state).as_posix()}"
            if _STATE_FILE.match(name):  # scratch files of an interrupted save stay behind
                members.append((path, name))
    return members


def export(
    file: str | Path, *, needed: set[str] | None, profile: str = "auto", store: str | Path | None = None
) -> dict:
    """Write the bundle ``file`` atomically with the weights of the ``needed`` runs (``None``: every finished run's);
    returns what it holds (runs, weight files, bytes)."""
    store = Path(store) if store is not None else runs_dir()
    refuse_half_imported(store, "a bundle written now would lack them")
    if hidden := interrupted_swaps(store):
        run_id, problem = next(iter(hidden.items()))
        raise ValueError(f"run {run_id}: {problem}, so a bundle written now would lack it; {SWAP_FIX}")
    if Path(file).is_dir():
        raise ValueError(
            f"{file} is a folder; the bundle is one file: give its name, e.g. {Path(file) / 'runs.tar.gz'}"
        )
    if Path(file).resolve().is_relative_to(store.resolve()):
        raise ValueError(f"{file} lies inside the run store {store}; write the bundle somewhere else")
    weights = "all" if needed is None else "needed"
    members = _members(store, needed)
    kinds = {"runs": "record.json", "weights": "model.pt", "checkpoints": "checkpoint.pt"}
    counts = {kind: sum(name.endswith(f"/{file}") for _, name in members) for kind, file in kinds.items()}
    listing = {name: {"sha256": sha256(path), "bytes": path.stat().st_size} for path, name in members}
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        manifest = {"format": FORMAT, **counts, "profile": profile, "weights": weights, "files": listing}
        data = json.dumps(manifest, indent=1).encode()
        info = tarfile.TarInfo("bundle.json")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
        for path, name in members:
            tar.add(path, arcname=name, recursive=False)
    atomic.write_bytes(Path(file), buffer.getvalue())
    return {**counts, "bytes": len(buffer.getvalue()), "file": str(file)}


# -- a store an import left unfinished -------------------------------------------------------------------


def refuse_half_imported(store: Path, why: str) -> None:
    """Raise ValueError when an import into ``store`` has not finished: its runs may be missing (``why`` says what
    reading the store as whole now would do)."""
    if marks := half_imported(store):
        raise ValueError(
            f"the run store {store} holds an import that has not finished (under way, or interrupted: {marks[0].name}),"
            f" so it may lack some of that bundle's runs and {why}; fix: run the same `python -m vitbn_nb runs import "
            f"BUNDLE` again (it completes the import), or delete {marks[0]} to use the store as it is"
        )


def clean_imports(store: Path | None = None) -> int:
    """Delete the temporary folders of imports whose process is gone, their content never read (nothing in a store
    steers what the book deletes); returns how many. The marks of unfinished imports stay until completed."""
    store = Path(store) if store is not None else runs_dir()
    if (store / LOCKS).is_symlink():
        raise ValueError(f"{store / LOCKS} is a link; the store keeps its locks in a folder of its own; fix: delete it")
    abandoned = [p for p in sorted(store.glob(f"{SCRATCH_PREFIX}*")) if not is_owned(p)] if store.is_dir() else []
    for scratch in abandoned:  # its owner cannot come back: a new import makes a folder of another name
        if scratch.is_symlink() or not scratch.is_dir():
            scratch.unlink(missing_ok=True)  # a link is unlinked, never followed
        else:
            shutil.rmtree(scratch, ignore_errors=True)  # it unlinks the links inside, never what they point at
        (store / LOCKS / f"{scratch.name}.lock").unlink(missing_ok=True)
    return len(abandoned)


# -- reading a bundle: every header and record checked before anything is written ------------------------------


def _refuse(file: Path, problem: str, fix: str = "fix: export it again with `python -m vitbn_nb runs export`"):
    raise BundleError(f"{file} {problem}; nothing was imported; {fix}")


class _Refused(Exception):
    """A header refused while tarfile reads it."""


#: Tar extensions tarfile would read whole into memory, apply to every later member or expand: never in a bundle.
_NEVER = {
    tarfile.GNUTYPE_LONGNAME: "a GNU long-name header",
    tarfile.GNUTYPE_LONGLINK: "a GNU long-link header",
    tarfile.GNUTYPE_SPARSE: "a sparse-file header",
    tarfile.XGLTYPE: "a global pax header",
    tarfile.SOLARIS_XHDTYPE: "a Solaris extended header",
}


class _Header(tarfile.TarInfo):
    """A tar header checked as it is parsed (``frombuf``), before tarfile reads what follows it: an extension tarfile
    would hold whole in memory is refused by its size, and a damaged header is refused (tarfile would end quietly)."""

    @classmethod
    def frombuf(cls, buf, encoding, errors):
        try:
            header = super().frombuf(buf, encoding, errors)
        except tarfile.EOFHeaderError:
            raise  # the end-of-archive marker
        except tarfile.HeaderError as error:
            raise _Refused(f"is damaged: a tar header cannot be read ({error})") from None
        if header.type in _NEVER:
            raise _Refused(f"holds {_NEVER[header.type]}, which a bundle never has")
        if header.type == tarfile.XHDTYPE and header.size > MAX_PAX_BYTES:
            raise _Refused(f"holds a pax header of {header.size:,} bytes (a bundle's are at most {MAX_PAX_BYTES:,})")
        return header


@contextlib.contextmanager
def _reading(file: Path):
    """The bundle's tar stream; every way of failing to read it is one refusal naming the file."""
    try:
        with tarfile.open(file, "r:gz", tarinfo=_Header) as tar:
            yield tar
    except _Refused as refused:
        _refuse(file, str(refused))
    except RecursionError:  # pax headers chained one after another
        _refuse(file, "holds tar headers chained too deeply")
    except (tarfile.TarError, EOFError, OSError, ValueError, zlib.error) as error:
        if isinstance(error, BundleError):
            raise
        _refuse(file, f"is not a readable bundle ({error})")


def _read_listing(file: Path, tar: tarfile.TarFile, store: Path) -> tuple[dict, str]:
    """The bundle's own list of files (its first member, ``bundle.json``), read before anything else and held to the
    limits and ``store``'s free disk; and its SHA-256."""
    first = tar.next()
    if first is None or first.name != "bundle.json" or not first.isreg():
        _refuse(file, "does not begin with bundle.json (its list of files)")
    if first.size > MAX_LISTING_BYTES:
        _refuse(file, f"has a bundle.json of {first.size / 2**20:.0f} MiB (at most {MAX_LISTING_BYTES // 2**20} MiB)")
    data = tar.extractfile(first).read()
    try:
        manifest = json.loads(data)
    except (ValueError, RecursionError) as error:
        reason = "nested too deeply" if isinstance(error, RecursionError) else error
        _refuse(file, f"has an unreadable bundle.json ({reason})")
    files = manifest.get("files") if isinstance(manifest, dict) else None
    if not isinstance(files, dict) or manifest.get("format") != FORMAT:
        _refuse(file, "was written by another version of the book (no list of its files with checksums)")
    if len(files) > MAX_FILES:
        _refuse(file, f"lists {len(files):,} files (a bundle holds at most {MAX_FILES:,})")
    size = lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0
    for name, entry in files.items():
        if not (isinstance(entry, dict) and isinstance(entry.get("sha256"), str) and size(entry.get("bytes"))):
            _refuse(file, f"lists {name!r} without its checksum and size")
        if not (((run := _RUN_FILE.match(name)) and run["run"] != STATE_FOLDER) or _STATE_FILE.match(name)):
            _refuse(file, f"lists {name!r}, which is neither a run's file nor the optimisation state")
        limit = MAX_FILE_BYTES[Path(name).suffix]
        if entry["bytes"] > limit:
            _refuse(file, f"lists {name!r} of {entry['bytes']:,} bytes (a bundle's are at most {limit:,})")
    total = sum(entry["bytes"] for entry in files.values())
    if total > MAX_BYTES:
        _refuse(file, f"unpacks to {total / 2**30:.1f} GiB (a bundle unpacks to at most {MAX_BYTES / 2**30:.0f} GiB)")
    if total > (free := shutil.disk_usage(store).free):
        problem = f"unpacks to {total / 2**20:.1f} MiB, more than the {free / 2**20:.1f} MiB free in {store}"
        _refuse(file, problem, "fix: free some space")
    return files, hashlib.sha256(data).hexdigest()


def _files(file: Path, tar: tarfile.TarFile, listed: dict) -> Iterator[tarfile.TarInfo]:
    """The bundle's files after its list, each held to it (name, kind, size, once), so no more members than the list
    allows (:data:`MAX_FILES`) are ever read; every listed file held."""
    seen: set[str] = set()
    while (member := tar.next()) is not None:
        tar.members.clear()  # tarfile keeps every header it read; none is needed again
        name = member.name
        if not member.isreg():
            _refuse(file, f"holds {name!r}, which is not a regular file (a folder, a link or a device)")
        if name in seen or name == "bundle.json":
            _refuse(file, f"holds {name!r} twice")
        if name not in listed:  # the list is held to the names and sizes a bundle may have (_read_listing)
            _refuse(file, f"holds {name!r}, which its bundle.json does not list")
        if member.size != listed[name]["bytes"]:
            _refuse(file, f"holds {name!r} of the wrong size ({member.size:,} bytes, {listed[name]['bytes']:,} listed)")
        seen.add(name)
        yield member
    if missing := sorted(set(listed) - seen):
        _refuse(file, f"lists {missing[0]!r} but does not hold it")


def _weight_limits(file: Path, run_id: str, data: bytes) -> dict[str, int]:
    """A run's record, read from the bundle and checked whole (its configuration against the model families' bounds
    before anything is built); returns the bytes each of its weight files may hold: what its model's state needs."""
    try:
        record = json.loads(data)
    except (ValueError, RecursionError) as error:
        reason = "nested too deeply" if isinstance(error, RecursionError) else error
        _refuse(file, f"holds a damaged record: runs/{run_id}/record.json cannot be read ({reason})")
    if (problem := record_problem(record, run_id)) is not None:
        _refuse(file, f"holds a damaged record: runs/{run_id}/record.json {problem}")
    if (problem := identity_problem(record, run_id)) is not None:
        _refuse(file, f"holds run {run_id}, whose record is refused: {problem}")
    _, state, tensors = model_size(record["config"])  # it builds: identity_problem built it
    model = state + _ENTRY_BYTES * tensors
    return {"model.pt": model, "checkpoint.pt": CHECKPOINT_STATES * model}


def survey(file: str | Path, store: Path, scratch: Path | None = None) -> tuple[dict, str, dict[str, Path]]:
    """Every header and record checked in bounded memory, each weight file's size against its record's model; with
    ``scratch``, each file also unpacked there and checked, a weight file at once (:func:`_check_weights`). Returns
    the list, its SHA-256 and the unpacked files (name -> path)."""
    file = Path(file)
    if not file.is_file():
        raise BundleError(f"{file} is not a file; give a bundle written by `python -m vitbn_nb runs export`")
    limits: dict[str, dict[str, int]] = {}
    unpacked: dict[str, Path] = {}
    with _reading(file) as tar:
        listed, digest = _read_listing(file, tar, Path(store))
        for member in _files(file, tar, listed):
            name = member.name
            run_id, kind = run.group("run", "file") if (run := _RUN_FILE.match(name)) else (None, None)
            if kind in WEIGHT_FILES:
                if run_id not in limits:
                    _refuse(file, f"holds {run_id}/{kind} before its record (a bundle holds each run's record first)")
                if member.size > limits[run_id][kind]:
                    need = f"more than its model's weights need ({limits[run_id][kind]:,})"
                    _refuse(file, f"holds {run_id}/{kind} of {member.size:,} bytes, {need}")
            if scratch is not None:
                try:
                    tar.extract(member, scratch, set_attrs=False, filter="data")
                except OSError as error:
                    if error.errno not in _WRITE_ERRORS:
                        raise  # the bundle's, not the store's
                    _refuse(file, f"cannot be unpacked into {scratch} ({error.strerror or error})", _WRITABLE_FIX)
                unpacked[name] = path = scratch / name
                if sha256(path) != listed[name]["sha256"]:
                    _refuse(file, f"holds {name!r}, which does not match its checksum (damaged or altered)")
            if kind == "record.json":
                data = path.read_bytes() if scratch is not None else tar.extractfile(member).read()
                limits[run_id] = _weight_limits(file, run_id, data)
            elif kind and scratch is not None:
                _check_weights(file, path, limits[run_id][kind])
    return listed, digest, unpacked


_WRITABLE_FIX = "fix: free some space in the run store, or make it writable, and import again"
#: Errors of writing (not of reading the bundle) while a member is unpacked.
_WRITE_ERRORS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM}


def _check_weights(file: Path, path: Path, limit: int) -> None:
    """A weight file just unpacked, checked before the next file is: listed by its run's record with this checksum,
    no larger than its model needs (:func:`archive_problem`), loaded weights-only, and fitting its model."""
    folder, name = path.parent, path.name
    run_id = folder.name
    record = read_record(folder)  # checked whole by the survey, and its checksum since
    if name not in record["checksums"] or (name == "checkpoint.pt") == (record["status"] in ENDED):
        _refuse(file, f"holds {run_id}/{name}, which its {record['status']} record does not list")
    if sha256(path) != record["checksums"][name]:
        _refuse(file, f"holds {run_id}/{name}, which does not match its record's checksum")
    if (problem := archive_problem(path, limit)) is not None:
        _refuse(file, f"holds {run_id}/{name}, which {problem}")
    try:
        state = load_checkpoint(folder, record)["model"] if name == "checkpoint.pt" else load_weights(path, run_id)
    except RunStoreError as error:
        _refuse(file, f"holds {run_id}/{name}, which is not plain weights ({error.problem})")
    if (problem := fit_problem(record["config"], state)) is not None:
        _refuse(file, f"holds {run_id}/{name}, which {problem}")


@dataclass
class Bundle:
    """A bundle unpacked into a temporary folder and checked whole: its runs' folders and records, its state files."""

    digest: str  # of its list of files: it names the bundle in the mark of an unfinished import
    runs: dict[str, Path] = field(default_factory=dict)
    records: dict[str, dict] = field(default_factory=dict)
    state: dict[str, Path] = field(default_factory=dict)


def read_bundle(file: str | Path, scratch: Path) -> Bundle:
    """Unpack ``file`` into ``scratch`` and check it whole (:func:`survey`; :class:`BundleError` names the first
    problem)."""
    file = Path(file)
    _, digest, unpacked = survey(file, scratch.parent, scratch)
    found = Bundle(digest)
    for name, path in unpacked.items():
        if _STATE_FILE.match(name):
            if problem := state_file_problem(path):
                _refuse(file, f"holds optimisation state {name!r} that {problem}")
            found.state[name.removeprefix(f"runs/{STATE_FOLDER}/")] = path
        elif name.endswith("/record.json"):
            found.runs[path.parent.name] = path.parent
            found.records[path.parent.name] = read_record(path.parent)
    return found


# -- importing: planned whole, then each run renamed into place -------------------------------------------------


def _plan_run(store: Path, run_id: str, folder: Path, record: dict) -> tuple[str, str | None]:
    """(what to do, the conflict if any) for one run of the bundle: add, replace (an unfinished run of the store that
    the bundle's took further), update (a finished run given its weights or measurements it lacks), or unchanged."""
    held = stored_path(run_id, store)  # the store's folder, else the committed record's (read beneath the store)
    if not (held.exists() or held.is_symlink()):
        return "add", None
    where = str(store) if held.parent == store else f"the committed records {held.parent}"
    if held.is_symlink() or not held.is_dir():
        return "", f"{held} is {'a link' if held.is_symlink() else 'a file'}, where run {run_id}'s folder belongs"
    try:
        mine = read_record(held)
    except RunStoreError as error:
        return "", f"run {run_id} is damaged in {where} ({error.problem}); {error.fix}"
    differs = f"run {run_id}: the bundle's copy differs from the one in {where} ({record['status']} there, "
    if mine["status"] in ENDED:  # never replaced from elsewhere: the same training, at most completed
        strip = lambda r: {k: v for k, v in r.items() if k not in ("measurements", "record_sha256")}
        ours, theirs = mine.get("measurements", {}), record.get("measurements", {})
        if strip(mine) != strip(record) or any(ours[k] != theirs[k] for k in ours.keys() & theirs.keys()):
            return "", differs + f"{mine['status']} here: a finished run is never replaced from elsewhere)"
        weights = any((folder / n).exists() and not (held / n).exists() for n in WEIGHT_FILES)
        if not weights and not theirs.keys() - ours.keys():
            return "unchanged", None
        return ("update" if held.parent == store else "add"), None  # committed: the store gets its own fuller copy
    if mine["record_sha256"] == record["record_sha256"]:
        return "unchanged", None
    further = record["status"] in ENDED or record.get("checkpoint_epoch", 0) > mine.get("checkpoint_epoch", 0)
    if further and record["config"] == mine["config"]:
        return "replace", None
    return "", differs + f"{mine['status']} here)"


def _ledger(path: Path | None) -> dict:
    try:
        ledger = json.loads(path.read_text())
    except (AttributeError, OSError, ValueError):  # AttributeError: no ledger (None)
        return {}
    return ledger if isinstance(ledger, dict) else {}


def _plan_state(store: Path, found: Bundle) -> tuple[dict[str, str], list[str]]:
    """Per study folder and chosen-values file of the bundle: add, replace (the bundle's optimisation went further:
    every trial here is in its ledger, the same), or keep; conflicting states are named."""
    plans, conflicts = {}, []
    if found.state and (store / STATE_FOLDER).is_symlink():
        return {}, [f"{store / STATE_FOLDER} is a link, where the optimisation state's folder belongs"]
    for key in sorted({name.split("/")[0] for name in found.state}):  # a study's folder, or a chosen-values file
        ours, theirs = store / STATE_FOLDER / key, {n: p for n, p in found.state.items() if n.split("/")[0] == key}
        if ours.is_symlink():
            conflicts.append(f"{ours} is a link")
        elif not ours.exists():
            plans[key] = "add"
        elif all(
            (ours.parent / n).is_file() and (ours.parent / n).read_bytes() == p.read_bytes() for n, p in theirs.items()
        ):
            plans[key] = "unchanged"
        elif key in found.state:
            conflicts.append(f"{ours} differs from the bundle's copy")
        else:
            here, there = _ledger(ours / "trials.json"), _ledger(found.state.get(f"{key}/trials.json"))
            if here.items() <= there.items():
                plans[key] = "replace"
            elif there.items() <= here.items():
                plans[key] = "unchanged"  # this store's optimisation went further
            else:
                conflicts.append(f"optimisation {key}: the bundle's trials and this store's differ")
    return plans, conflicts


def import_bundle(file: str | Path, *, store: str | Path | None = None) -> dict:
    """Add a bundle's runs and optimisation state to the run store (refused whole on any problem or conflict);
    returns the counts. A store it cannot write (read-only, full) is one line naming it, with the fix."""
    store = Path(store) if store is not None else runs_dir()
    try:
        return _import(file, store)
    except OSError as error:
        if error.errno == errno.ENOSPC:
            fix = "free some space on its disk and import again (it completes what this one began)"
        else:
            fix = (
                "make the store writable, or point VITBN_RUNS_DIR (or --runs) at a writable copy of it and import there"
            )
        reason = error.strerror or str(error)
        raise BundleError(f"{file}: the run store {store} cannot be written ({reason}); fix: {fix}") from None


def _import(file: str | Path, store: Path) -> dict:
    store.mkdir(parents=True, exist_ok=True)
    clean_imports(store)
    survey(file, store)  # every header and record, against the limits and bounds: nothing written yet
    with contextlib.ExitStack() as owning:  # inside the store: on its disk, so that each run moves in by a rename
        scratch = store / f"{SCRATCH_PREFIX}{uuid.uuid4().hex[:12]}"
        # its lock taken before the folder is made, and let go (its file removed) after the folder is
        lock = owning.enter_context(FileLock(store / LOCKS / f"{scratch.name}.lock"))
        owning.callback(Path(lock.lock_file).unlink, missing_ok=True)
        scratch.mkdir()
        owning.callback(shutil.rmtree, scratch, ignore_errors=True)
        found = read_bundle(file, scratch / "new")  # surveyed again as it is unpacked
        with run_locks([*found.runs, *([STATE_FOLDER] if found.state else [])], progress=False, store=store):
            plans = {
                run_id: _plan_run(store, run_id, folder, found.records[run_id]) for run_id, folder in found.runs.items()
            }
            state_plans, conflicts = _plan_state(store, found)
            conflicts = [c for _, c in plans.values() if c] + conflicts
            if conflicts:
                raise BundleError(
                    f"{file}: {len(conflicts)} conflict(s) with the store: {'; '.join(conflicts)}; nothing was "
                    "imported; fix: keep one copy of each (delete the store's folder named and import again, or "
                    "leave the store as it is)"
                )
            _move_in(store, scratch, found, plans, state_plans)
    counts = {"added": 0, "updated": 0, "unchanged": 0}
    for action, _ in plans.values():
        counts["added" if action == "add" else "unchanged" if action == "unchanged" else "updated"] += 1
    return {**counts, "state files": sum(action in ("add", "replace") for action in state_plans.values())}


def _move_in(store: Path, scratch: Path, found: Bundle, plans: dict, state_plans: dict) -> None:
    """Rename every planned change into the store, one run at a time, each whole, the store marked from the first
    change to the last; a completed import also removes the marks earlier, interrupted imports of the bundle left."""
    changes = [run_id for run_id, (action, _) in plans.items() if action != "unchanged"]
    states = [key for key, action in state_plans.items() if action in ("add", "replace")]
    if not changes and not states:
        return
    mark = store / f"{MARK_PREFIX}{found.digest[:16]}-{scratch.name.removeprefix(SCRATCH_PREFIX)}"
    mark.touch()
    aside = scratch / "replaced"
    aside.mkdir()
    for run_id in sorted(changes):
        action, new, target = plans[run_id][0], found.runs[run_id], store / run_id
        if action == "update":  # a finished run given what it lacked: each file whole, renamed over
            for name in WEIGHT_FILES:
                if (new / name).exists() and not (target / name).exists():
                    (new / name).rename(target / name)
            record = read_record(target)
            ours, theirs = record.get("measurements", {}), found.records[run_id].get("measurements", {})
            if theirs.keys() - ours.keys():  # only those the store lacks: one that differs is a conflict
                record["measurements"] = theirs | ours
                write_record(target / "record.json", record)
            continue
        if action == "replace":  # an unfinished run the bundle's took further: absent, never half, in between
            target.rename(aside / run_id)
        # marked before it moves in: no instant where a run from elsewhere is held as trained here
        provenance.note_imported(new, found.records[run_id], found.digest, timestamp())
        new.rename(target)
    if states:
        (store / STATE_FOLDER).mkdir(exist_ok=True)
    for key in sorted(states):  # a study's folder, or a file of chosen values
        target = store / STATE_FOLDER / key
        if state_plans[key] == "replace":
            target.rename(aside / f"{STATE_FOLDER}-{key}")
        (scratch / "new" / "runs" / STATE_FOLDER / key).rename(target)
    for earlier in store.glob(f"{MARK_PREFIX}{found.digest[:16]}-*"):
        if earlier == mark or not is_owned(import_owner(earlier)):
            earlier.unlink(missing_ok=True)
