"""Moving runs between machines: ``runs export FILE`` writes a bundle, ``runs import FILE`` reads one.

A ``.tar.gz`` of the store's records, optimisation state, unfinished checkpoints and chosen weights. An import
checks every header against the limits and the free disk first (:func:`survey`), unpacks and checks it whole
(:func:`read_bundle`), then moves it in all or nothing under the runs' locks, journalled, so that a failure or a kill
(undone by :func:`recover_imports`) leaves the store as it was."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import io
import json
import re
import shutil
import tarfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from .. import atomic
from ..paths import runs_dir
from .records import (
    ENDED,
    STATE_FOLDER,
    WEIGHT_FILES,
    RunStoreError,
    fit_problem,
    identity_problem,
    load_checkpoint,
    load_weights,
    owned_folder,
    read_record,
    sha256,
    state_file_problem,
    taken_over,
    write_record,
)
from .run_config import RunConfig
from .run_folder import run_locks

FORMAT = 2
_RUN_FILE = re.compile(
    r"^runs/(?P<run>[A-Za-z0-9][A-Za-z0-9_.+-]{0,150})/(?P<file>record\.json|model\.pt|checkpoint\.pt)$"
)
_STATE_FILE = re.compile(
    r"^runs/hpo/(?:[A-Za-z0-9][A-Za-z0-9_.-]{0,150}/(?:ax_state|trials|study)\.json|best-[A-Za-z0-9_-]{1,80}\.json)$"
)
_FOLDERS = re.compile(r"^runs(?:/hpo|/[A-Za-z0-9][A-Za-z0-9_.+-]{0,150})?(?:/[A-Za-z0-9][A-Za-z0-9_.-]{0,150})?$")
#: What a bundle may cost (a paper store with every weight file unpacks to a few hundred MiB).
MAX_BYTES = 4 * 2**30
MAX_FILES = 10_000
MAX_FILE_BYTES = {".json": 4 * 2**20, ".pt": 256 * 2**20}
MAX_LISTING_BYTES = 4 * 2**20
#: The one tar extension a bundle carries: a pax header per member (sub-second times, long paths).
MAX_PAX_BYTES = 4096


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


def _members(store: Path, keep: set[str] | None) -> tuple[list[tuple[Path, str]], dict]:
    """The files a bundle of ``store`` takes (each verified now: a damaged one stops the export, naming its run)."""
    members: list[tuple[Path, str]] = []
    counts = {"runs": 0, "weights": 0, "checkpoints": 0}
    for folder in _run_folders(store):
        record = read_record(folder)
        members.append((folder / "record.json", f"runs/{folder.name}/record.json"))
        counts["runs"] += 1
        checkpoint, model = folder / "checkpoint.pt", folder / "model.pt"
        if record["status"] not in ENDED and checkpoint.is_file():
            load_checkpoint(folder, record)
            if sha256(checkpoint) != record["checksums"].get("checkpoint.pt"):
                raise RunStoreError(
                    folder.name,
                    f"{checkpoint} is newer than its record (a kill during a save)",
                    fix="fix: resume it once (python -m vitbn_nb train, or the chapter), then export again",
                )
            members.append((checkpoint, f"runs/{folder.name}/checkpoint.pt"))
            counts["checkpoints"] += 1
        elif record["status"] in ENDED and model.is_file() and (keep is None or record["run_id"] in keep):
            load_weights(model, folder.name, record["checksums"]["model.pt"])
            members.append((model, f"runs/{folder.name}/model.pt"))
            counts["weights"] += 1
    state = store / STATE_FOLDER
    if state.is_dir():
        for path in sorted(p for p in state.rglob("*") if p.is_file()):
            name = f"runs/{STATE_FOLDER}/{path.relative_to(state).as_posix()}"
            if _STATE_FILE.match(name):  # scratch files of an interrupted save stay behind
                members.append((path, name))
    return members, counts


def export(
    file: str | Path, *, needed: set[str] | None, profile: str = "auto", store: str | Path | None = None
) -> dict:
    """Write the bundle ``file`` atomically with the weights of the ``needed`` runs (``None``: every finished run's);
    returns what it holds (runs, weight files, bytes)."""
    store = Path(store) if store is not None else runs_dir()
    if Path(file).resolve().is_relative_to(store.resolve()):
        raise ValueError(f"{file} lies inside the run store {store}; write the bundle somewhere else")
    weights = "all" if needed is None else "needed"
    members, counts = _members(store, needed)
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


# -- reading a bundle: everything checked before anything is written ------------------------------------------


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
    """A tar header read with bounded memory: an oversized extension or a damaged header is refused at once (tarfile
    would read the one whole and end quietly at the other)."""

    @classmethod
    def frombuf(cls, buf, encoding, errors):
        try:
            return super().frombuf(buf, encoding, errors)
        except tarfile.EOFHeaderError:
            raise  # the end-of-archive marker
        except tarfile.HeaderError as error:
            raise _Refused(f"is damaged: a tar header cannot be read ({error})") from None

    def _proc_member(self, tar):
        if self.type in _NEVER:
            raise _Refused(f"holds {_NEVER[self.type]}, which a bundle never has")
        if self.type == tarfile.XHDTYPE and self.size > MAX_PAX_BYTES:
            raise _Refused(f"holds a pax header of {self.size:,} bytes (a bundle's are at most {MAX_PAX_BYTES:,})")
        return super()._proc_member(tar)


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


def _read_listing(file: Path, tar: tarfile.TarFile) -> dict:
    """The bundle's own list of files (its first member, ``bundle.json``), read before anything else."""
    first = tar.next()
    if first is None or first.name != "bundle.json" or not first.isreg():
        _refuse(file, "does not begin with bundle.json (its list of files)")
    if first.size > MAX_LISTING_BYTES:
        _refuse(file, f"has a bundle.json of {first.size / 2**20:.0f} MiB (at most {MAX_LISTING_BYTES // 2**20} MiB)")
    try:
        manifest = json.loads(tar.extractfile(first).read())
    except (OSError, ValueError, RecursionError) as error:
        reason = "nested too deeply" if isinstance(error, RecursionError) else error
        _refuse(file, f"has an unreadable bundle.json ({reason})")
    files = manifest.get("files") if isinstance(manifest, dict) else None
    if not isinstance(files, dict) or manifest.get("format") != FORMAT:
        _refuse(file, "was written by another version of the book (no list of its files with checksums)")
    size = lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0
    for name, entry in files.items():
        if not (isinstance(entry, dict) and isinstance(entry.get("sha256"), str) and size(entry.get("bytes"))):
            _refuse(file, f"lists {name!r} without its checksum and size")
    return files


def _allowed(name: str) -> bool:
    run = _RUN_FILE.match(name)
    return bool((run and run["run"] != STATE_FOLDER) or _STATE_FILE.match(name))


def _check_listing(file: Path, listed: dict, store: Path) -> None:
    """What the bundle says it holds, against the limits and the free disk."""
    if len(listed) > MAX_FILES:
        _refuse(file, f"lists {len(listed):,} files (a bundle holds at most {MAX_FILES:,})")
    for name, entry in listed.items():
        if not _allowed(name):
            _refuse(file, f"lists {name!r}, which is neither a run's file nor the optimisation state")
        limit = MAX_FILE_BYTES[Path(name).suffix]
        if entry["bytes"] > limit:
            _refuse(file, f"lists {name!r} of {entry['bytes']:,} bytes (a bundle's are at most {limit:,})")
    total = sum(entry["bytes"] for entry in listed.values())
    if total > MAX_BYTES:
        _refuse(file, f"unpacks to {total / 2**30:.1f} GiB (a bundle unpacks to at most {MAX_BYTES / 2**30:.0f} GiB)")
    if total > (free := shutil.disk_usage(store).free):
        problem = f"unpacks to {total / 2**20:.1f} MiB, more than the {free / 2**20:.1f} MiB free in {store}"
        _refuse(file, problem, "fix: free some space")


def _check_member(file: Path, member: tarfile.TarInfo, listed: dict, seen: set[str]) -> bool:
    """One member against the bundle's list (name, kind, size, once); False for a folder (nothing to unpack)."""
    name = member.name
    if len(seen) >= MAX_FILES:
        _refuse(file, f"holds more than {MAX_FILES:,} entries")
    if member.isdir():
        if not _FOLDERS.match(name.rstrip("/")):
            _refuse(file, f"holds a folder {name!r} that a bundle never has")
        seen.add(f"{name}/")  # counted among the entries, never among the files
        return False
    if not member.isreg():
        _refuse(file, f"holds {name!r}, which is not a regular file (a link or a device)")
    if not _allowed(name):
        _refuse(file, f"holds {name!r}, which is neither a run's file nor the optimisation state")
    if name in seen or name == "bundle.json":
        _refuse(file, f"holds {name!r} twice")
    if name not in listed:
        _refuse(file, f"holds {name!r}, which its bundle.json does not list")
    limit = MAX_FILE_BYTES[Path(name).suffix]
    if member.size != listed[name]["bytes"] or member.size > limit:
        sizes = f"{member.size:,} bytes, {listed[name]['bytes']:,} listed, at most {limit:,}"
        _refuse(file, f"holds {name!r} of the wrong size ({sizes})")
    seen.add(name)
    return True


def survey(file: str | Path, store: Path) -> dict:
    """Every header checked before anything is written (bounded memory): the list against the limits and ``store``'s
    free disk, each member against the list; returns the list (checksums are checked on unpacking)."""
    file = Path(file)
    if not file.is_file():
        raise BundleError(f"{file} is not a file; give a bundle written by `python -m vitbn_nb runs export`")
    seen: set[str] = set()
    with _reading(file) as tar:
        listed = _read_listing(file, tar)
        _check_listing(file, listed, Path(store))
        while (member := tar.next()) is not None:
            _check_member(file, member, listed, seen)
            tar.members.clear()  # tarfile keeps every header it read; a survey needs none of them
    if missing := sorted(set(listed) - seen):
        _refuse(file, f"lists {missing[0]!r} but does not hold it")
    return listed


_WRITABLE_FIX = "fix: free some space in the run store, or make it writable, and import again"


def _copy(file: Path, source, target: Path) -> str:
    """Copy one member to ``target`` in 1 MiB pieces; returns its SHA-256 (a write error is named as the store's)."""
    digest = hashlib.sha256()
    unwritable = lambda e: _refuse(file, f"cannot be unpacked into {target.parent} ({e.strerror or e})", _WRITABLE_FIX)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        out = open(target, "wb")  # noqa: SIM115 -- closed below; a read error is the bundle's, not the store's
    except OSError as error:
        unwritable(error)
    with out:
        while chunk := source.read(2**20):
            digest.update(chunk)
            try:
                out.write(chunk)
            except OSError as error:
                unwritable(error)
    return digest.hexdigest()


def _unpack(file: Path, listed: dict, scratch: Path) -> dict[str, Path]:
    """Every file copied under ``scratch``, checked against the list (name, kind, size, checksum); name -> path."""
    unpacked, seen = {}, set()
    with _reading(file) as tar:
        if _read_listing(file, tar) != listed:
            _refuse(file, "changed while it was read")
        while (member := tar.next()) is not None:
            tar.members.clear()
            if not _check_member(file, member, listed, seen):
                continue
            name = member.name
            digest = _copy(file, tar.extractfile(member), scratch / name)
            if digest != listed[name]["sha256"]:
                _refuse(file, f"holds {name!r}, which does not match its checksum (damaged or altered)")
            unpacked[name] = scratch / name
    if missing := sorted(set(listed) - set(unpacked)):
        _refuse(file, f"lists {missing[0]!r} but does not hold it")
    return unpacked


@dataclass
class Bundle:
    """A bundle unpacked into a scratch folder and checked whole: its runs' folders and its state files."""

    file: Path
    runs: dict[str, Path] = field(default_factory=dict)
    records: dict[str, dict] = field(default_factory=dict)
    state: dict[str, Path] = field(default_factory=dict)


def _check_run(file: Path, folder: Path) -> dict:
    """A run folder: a whole record naming it, and only the weight files it lists, each matching its checksum,
    loadable weights-only and fitting its model."""
    run_id = folder.name
    if not (folder / "record.json").is_file():
        _refuse(file, f"holds files of run {run_id} without its record.json")
    try:
        record = read_record(folder)
    except RunStoreError as error:
        _refuse(file, f"holds a damaged record: {error.problem}")
    if (problem := identity_problem(record, run_id)) is not None:
        _refuse(file, f"holds run {run_id}, whose record is refused: {problem}")
    for name in WEIGHT_FILES:
        path = folder / name
        if not path.exists():
            continue
        if name not in record["checksums"] or (name == "checkpoint.pt") == (record["status"] in ENDED):
            _refuse(file, f"holds {run_id}/{name}, which its {record['status']} record does not list")
        if sha256(path) != record["checksums"][name]:
            _refuse(file, f"holds {run_id}/{name}, which does not match its record's checksum")
        try:
            state = load_checkpoint(folder, record)["model"] if name == "checkpoint.pt" else load_weights(path, run_id)
        except RunStoreError as error:
            _refuse(file, f"holds {run_id}/{name}, which is not plain weights ({error.problem})")
        if (problem := fit_problem(record["config"], state)) is not None:
            _refuse(file, f"holds {run_id}/{name}, which {problem}")
    return record


def read_bundle(file: str | Path, scratch: Path, listed: dict | None = None) -> Bundle:
    """Unpack ``file`` into ``scratch`` and check it whole (:class:`BundleError` names the first problem); ``listed``
    is :func:`survey`'s answer (surveyed here when not given)."""
    file = Path(file)
    if listed is None:
        listed = survey(file, scratch.parent)
    unpacked = _unpack(file, listed, scratch)
    found = Bundle(file)
    for name, path in unpacked.items():
        if _STATE_FILE.match(name):
            if problem := state_file_problem(path):
                _refuse(file, f"holds optimisation state {name!r} that {problem}")
            found.state[name.removeprefix(f"runs/{STATE_FOLDER}/")] = path
        else:
            found.runs.setdefault(name.split("/")[1], path.parent)
    for run_id, folder in sorted(found.runs.items()):
        found.records[run_id] = _check_run(file, folder)
    return found


# -- importing: planned whole, then applied all or nothing ------------------------------------------------

#: The name of an import's working folder in the store (followed by a random suffix).
SCRATCH_PREFIX = ".import-"


def _plan_run(store: Path, run_id: str, folder: Path, record: dict) -> tuple[str, str | None]:
    """(what to do, the conflict if any) for one run of the bundle against the store."""
    target = store / run_id
    if not target.exists():
        return "add", None
    try:
        mine = read_record(target)
    except RunStoreError as error:
        return "", f"run {run_id} is damaged in the store ({error.problem}); {error.fix}"
    if mine["record_sha256"] == record["record_sha256"]:
        missing = [n for n in WEIGHT_FILES if (folder / n).exists() and not (target / n).exists()]
        return ("weights", None) if missing else ("unchanged", None)
    strip = lambda record: {k: v for k, v in record.items() if k not in ("measurements", "record_sha256")}
    if strip(record) == strip(mine):  # the same training, one measured more (a render elsewhere measured it)
        return "measurements", None
    if (
        mine["status"] not in ENDED
        and (record["status"] in ENDED or record.get("checkpoint_epoch", 0) > mine.get("checkpoint_epoch", 0))
        and record["config"] == mine["config"]
    ):
        return "replace", None
    return "", (
        f"run {run_id}: the bundle's copy differs from the one in {store} ({record['status']} there, "
        f"{mine['status']} here)"
    )


def _ledger(path: Path) -> dict:
    try:
        ledger = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return ledger if isinstance(ledger, dict) else {}


def _plan_state(store: Path, found: Bundle) -> tuple[dict[str, str], list[str]]:
    """Per study folder and chosen-values file of the bundle: add, replace (the bundle's optimisation went further:
    every trial here is in its ledger, the same), or keep; conflicting states are named."""
    plans, conflicts = {}, []
    ours = lambda name: store / STATE_FOLDER / name
    for key in sorted({name.split("/")[0] for name in found.state}):  # a study's folder, or a chosen-values file
        if not ours(key).exists():
            plans[key] = "add"
        elif all(
            ours(n).is_file() and ours(n).read_bytes() == p.read_bytes()
            for n, p in found.state.items()
            if n.split("/")[0] == key
        ):
            plans[key] = "unchanged"
        elif key in found.state:
            conflicts.append(f"{ours(key)} differs from the bundle's copy")
        else:
            theirs = found.state.get(f"{key}/trials.json")
            here, there = _ledger(ours(key) / "trials.json"), _ledger(theirs) if theirs else {}
            if here.items() <= there.items():
                plans[key] = "replace"
            elif there.items() <= here.items():
                plans[key] = "unchanged"  # this store's optimisation went further
            else:
                conflicts.append(f"optimisation {key}: the bundle's trials and this store's differ")
    return plans, conflicts


def _unwritable(file, store: Path, error: OSError) -> BundleError:
    """One line for a store an import cannot write (read-only, full): which store, and the fix."""
    if getattr(error, "errno", None) == errno.ENOSPC:
        fix = "free some space on its disk and import again"
    else:
        fix = "make the store writable, or point VITBN_RUNS_DIR (or --runs) at a writable copy of it and import there"
    reason = getattr(error, "strerror", None) or str(error)
    return BundleError(f"{file}: the run store {store} cannot be written ({reason}); nothing was imported; fix: {fix}")


def _clean(scratch: Path) -> None:
    """Remove an import's working folder, unless it holds moves not undone: those are left for recover_imports."""
    if not _pending(scratch):
        shutil.rmtree(scratch, ignore_errors=True)


def import_bundle(file: str | Path, *, store: str | Path | None = None) -> dict:
    """Add a bundle's runs and optimisation state to the run store, all or nothing; returns the counts."""
    store = Path(store) if store is not None else runs_dir()
    try:
        store.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise _unwritable(file, store, error) from None
    recover_imports(store)
    listed = survey(file, store)  # every header, against the limits and the free disk: nothing written yet
    with contextlib.ExitStack() as owning:
        try:
            scratch = owning.enter_context(owned_folder(store, SCRATCH_PREFIX))  # on the store's disk: moves rename
        except OSError as error:
            raise _unwritable(file, store, error) from None
        owning.callback(_clean, scratch)  # before the folder's lock is let go
        found = read_bundle(file, scratch / "new", listed)
        with run_locks([*found.runs, *([STATE_FOLDER] if found.state else [])], progress=False, store=store):
            plans = {
                run_id: _plan_run(store, run_id, found.runs[run_id], found.records[run_id]) for run_id in found.runs
            }
            state_plans, conflicts = _plan_state(store, found)
            conflicts = [c for _, c in plans.values() if c] + conflicts
            if conflicts:
                raise BundleError(
                    f"{file}: {len(conflicts)} conflict(s) with the store: {'; '.join(conflicts)}; nothing was "
                    "imported; fix: keep one copy of each (delete the store's folder named and import again, or "
                    "leave the store as it is)"
                )
            try:
                _apply(store, scratch, found, plans, state_plans)
            except OSError as error:  # undone already: the store is as it was
                raise _unwritable(file, store, error) from None
    counts = {"added": 0, "updated": 0, "unchanged": 0}
    for action, _ in plans.values():
        counts["added" if action == "add" else "unchanged" if action == "unchanged" else "updated"] += 1
    return {**counts, "state files": sum(action in ("add", "replace") for action in state_plans.values())}


def _prepared(store: Path, scratch: Path, found: Bundle, plans: dict, state_plans: dict) -> list[tuple[Path, Path]]:
    """(ready folder or file, its place in the store) for every planned change, all built inside ``scratch``."""
    moves: list[tuple[Path, Path]] = []
    for run_id, (action, _) in sorted(plans.items()):
        if action == "unchanged":
            continue
        new, target = found.runs[run_id], store / run_id
        if action in ("measurements", "weights"):
            merged = scratch / "merged" / run_id
            shutil.copytree(target, merged)
            if action == "weights":
                for name in WEIGHT_FILES:
                    if (new / name).exists() and not (merged / name).exists():
                        shutil.copy2(new / name, merged / name)
            else:
                record = read_record(target)
                # Both kept: the bundle's measurements win where both took one (it comes from training).
                record["measurements"] = record.get("measurements", {}) | found.records[run_id].get("measurements", {})
                write_record(merged / "record.json", record)
            new = merged
        moves.append((new, target))
    for name, action in sorted(state_plans.items()):
        if action in ("add", "replace"):  # a study's folder, or a file of chosen values
            moves.append((scratch / "new" / "runs" / STATE_FOLDER / name, store / STATE_FOLDER / name))
    return moves


def _apply(store: Path, scratch: Path, found: Bundle, plans: dict, state_plans: dict) -> None:
    """Move every planned change into the store, journalled first: a failure here, or a kill (undone by
    :func:`recover_imports` at the next import, ``train`` or ``book``), puts the store back as it was."""
    moves = _prepared(store, scratch, found, plans, state_plans)
    if any(target.parent.name == STATE_FOLDER for _, target in moves):
        (store / STATE_FOLDER).mkdir(exist_ok=True)
    journal = [
        {
            "new": str(new),
            "target": str(target),
            "aside": str(scratch / "old" / str(i)),
            "removed": str(scratch / "removed" / str(i)),
            "existed": target.exists(),
        }
        for i, (new, target) in enumerate(moves)
    ]
    (scratch / "old").mkdir()
    (scratch / "removed").mkdir()
    atomic.write_json(scratch / JOURNAL, {"moves": journal, "done": False})
    try:
        for move in journal:
            if move["existed"]:
                Path(move["target"]).rename(move["aside"])
            Path(move["new"]).rename(move["target"])
        atomic.write_json(scratch / JOURNAL, {"moves": journal, "done": True})
    except BaseException:
        _undo(journal)
        # Undone: nothing left to recover. Should this write fail too, the undo (which can be repeated) is left
        # to recover_imports.
        with contextlib.suppress(OSError):
            atomic.write_json(scratch / JOURNAL, {"moves": journal, "done": True})
        raise


JOURNAL = "journal.json"


def _undo(journal: list[dict]) -> None:
    """Put back what the journalled moves changed, in reverse order. Every step is a rename that leaves a trace (the
    bundle's copy goes to ``removed``, the store's comes back from ``aside``), so an undo stopped half-way can run
    again and never touches a run that is not the bundle's copy."""
    for move in reversed(journal):
        new, target, aside = Path(move["new"]), Path(move["target"]), Path(move["aside"])
        # (journals written before "removed" existed keep it beside "old")
        removed = Path(move.get("removed") or aside.parent.parent / "removed" / aside.name)
        bundle_copy_in_place = not new.exists() and not removed.exists() and (aside.exists() or not move["existed"])
        if bundle_copy_in_place and (target.exists() or target.is_symlink()):
            removed.parent.mkdir(exist_ok=True)
            target.rename(removed)
        if move["existed"] and aside.exists():
            aside.rename(target)


def _pending(scratch: Path) -> list[dict] | None:
    """The journalled moves of an import that neither finished nor was undone (None when there are none)."""
    try:
        state = json.loads((scratch / JOURNAL).read_text())
    except (OSError, ValueError):
        return None  # stopped before moving anything
    return None if state.get("done") else state["moves"]


def recover_imports(store: Path | None = None) -> list[str]:
    """Undo any import whose process is gone, under the locks of the runs it moved, and remove the working folders
    dead imports left; returns what was undone. An import still running owns its folder and is left alone."""
    store = Path(store) if store is not None else runs_dir()
    undone = []
    for scratch in sorted(store.glob(f"{SCRATCH_PREFIX}*")) if store.is_dir() else []:
        with taken_over(scratch) as abandoned:
            if not abandoned:
                continue
            if (moves := _pending(scratch)) is not None:
                # each move's target is changed under its run's lock, or the optimisation state's
                targets = [Path(move["target"]) for move in moves]
                names = [STATE_FOLDER if t.parent.name == STATE_FOLDER else t.name for t in targets]
                with run_locks(names, progress=False, store=store):
                    _undo(moves)
                undone.append(scratch.name)
            shutil.rmtree(scratch, ignore_errors=True)
    return undone
