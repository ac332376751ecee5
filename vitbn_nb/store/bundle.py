"""Moving runs between machines: ``python -m vitbn_nb runs export FILE`` / ``runs import FILE``.

A bundle is a ``.tar.gz`` of the run store's records, its optimisation state (``hpo/``), the checkpoints
of unfinished runs (so training resumes on the other machine) and the finished runs' weights: all, or only those
the other machine still loads (:func:`needed_weights`; what chapters measure of trained runs travels in the records).

A bundle comes from someone else's machine, so it is data, and it costs no more than its limits allow. Every tar
header is read before anything is written (:func:`survey`), with bounded memory (tar extensions a bundle never has
are refused before their data is read), and the whole bundle is held to one total and to the store's free disk.
Then it is unpacked and checked whole (:func:`read_bundle`): only regular files at the places a bundle may hold (a
run folder named by the run id its record's configuration gives, holding ``record.json`` and the weight files that
record lists; the optimisation state's JSON files), every one listed in ``bundle.json`` with its SHA-256, every
record whole (``records.record_problem``), every weight file loadable weights-only into the model its record
builds. Then it is imported all or nothing (``vitbn_nb.store.bundle_import``): a conflict with the store (a finished run
that differs, say) is named and nothing is written.
"""

from __future__ import annotations

import contextlib
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
    read_record,
    sha256,
    state_file_problem,
)
from .run_config import RunConfig

FORMAT = 2
#: What a bundle may hold: a run's files, and the optimisation state (a study's three files, the chosen values).
_RUN_FILE = re.compile(
    r"^runs/(?P<run>[A-Za-z0-9][A-Za-z0-9_.+-]{0,150})/(?P<file>record\.json|model\.pt|checkpoint\.pt)$"
)
_STATE_FILE = re.compile(
    r"^runs/hpo/(?:[A-Za-z0-9][A-Za-z0-9_.-]{0,150}/(?:ax_state|trials|study)\.json|best-[A-Za-z0-9_-]{1,80}\.json)$"
)
_FOLDERS = re.compile(r"^runs(?:/hpo|/[A-Za-z0-9][A-Za-z0-9_.+-]{0,150})?(?:/[A-Za-z0-9][A-Za-z0-9_.-]{0,150})?$")
#: What a bundle may cost, checked before anything is written: the whole bundle unpacked (a paper store with every
#: weight file is a few hundred MiB), its entries, and each file by kind (a record is KiB, a study's Ax snapshot a
#: few hundred KiB, the largest model's weights a few MiB and its checkpoint three times that).
MAX_BYTES = 4 * 2**30
MAX_FILES = 10_000
MAX_FILE_BYTES = {".json": 4 * 2**20, ".pt": 256 * 2**20}
#: bundle.json lists each file with its checksum and size: about 150 bytes a file.
MAX_LISTING_BYTES = 4 * 2**20
#: The one tar extension the book's bundles carry: a pax header per member, which tarfile writes for a file's
#: sub-second modification time (and for a path over 100 characters); a few dozen bytes each.
MAX_PAX_BYTES = 4096


class BundleError(ValueError):
    """A bundle that cannot be imported; the message names the bundle, what is wrong and the fix."""


def _run_folders(store: Path) -> list[Path]:
    return sorted(p for p in store.iterdir() if p.is_dir() and (p / "record.json").is_file()) if store.is_dir() else []


def needed_weights(measured: list[RunConfig], choice: str | None, store: Path | None = None) -> set[str]:
    """Run ids whose ``model.pt`` the receiving machine loads: ``choice`` (the app's model); the source of every
    fine-tuning run not finished yet (stored or planned), to train it there; and each ``measured`` run (planned by a
    chapter that measures trained runs) with no stored measurement yet. Measured runs travel as records alone."""
    store = Path(store) if store is not None else runs_dir()
    stored = {folder.name: read_record(folder) for folder in _run_folders(store)}
    ended = {run_id for run_id, record in stored.items() if record["status"] in ENDED}
    needed = {r["config"]["init_from"] for i, r in stored.items() if r["config"].get("init_from") and i not in ended}
    needed |= {choice} - {None}
    device_types = {record["hardware"]["device"] for record in stored.values()}
    for config in measured:
        ids = {config.run_id(device) for device in device_types} & ended
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
    file: str | Path, *, needed: set[str] | None = None, profile: str = "auto", store: str | Path | None = None
) -> dict:
    """Write the bundle ``file`` (atomically) with the weights of the ``needed`` runs (None: every finished run's)
    for rendering ``profile``; returns what it holds (runs, weight files, bytes)."""
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
    """A header refused while tarfile reads it (the bundle's name is added where it is caught)."""


#: Tar extensions tarfile would read whole into memory (GNU long names), apply to every later member (global pax
#: headers) or expand (sparse files): a bundle of this book never has one.
_NEVER = {
    tarfile.GNUTYPE_LONGNAME: "a GNU long-name header",
    tarfile.GNUTYPE_LONGLINK: "a GNU long-link header",
    tarfile.GNUTYPE_SPARSE: "a sparse-file header",
    tarfile.XGLTYPE: "a global pax header",
    tarfile.SOLARIS_XHDTYPE: "a Solaris extended header",
}


class _Header(tarfile.TarInfo):
    """A tar header read with bounded memory. tarfile reads an extension header's data (a GNU long name, a pax
    header) whole into memory, however large the header says it is, and ends the archive quietly at a damaged
    header; here both are refused before anything is read past the 512-byte header. ``_proc_member`` is the hook
    tarfile names for subclasses to override."""

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
    """The bundle's tar stream, every way of failing to read it turned into one refusal naming the file."""
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
    if (
        not isinstance(manifest, dict)
        or manifest.get("format") != FORMAT
        or not isinstance(manifest.get("files"), dict)
    ):
        _refuse(file, "was written by another version of the book (no list of its files with checksums)")
    for name, entry in manifest["files"].items():
        if not (
            isinstance(entry, dict)
            and isinstance(entry.get("sha256"), str)
            and isinstance(entry.get("bytes"), int)
            and not isinstance(entry["bytes"], bool)
            and entry["bytes"] >= 0
        ):
            _refuse(file, f"lists {name!r} without its checksum and size")
    return manifest["files"]


def _allowed(name: str) -> bool:
    run = _RUN_FILE.match(name)
    return bool((run and run["run"] != STATE_FOLDER) or _STATE_FILE.match(name))


def _check_listing(file: Path, listed: dict, store: Path) -> None:
    """What the bundle says it holds, against the limits and the free disk: one total, before anything is written."""
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
    free = shutil.disk_usage(store).free
    if total > free:
        _refuse(
            file,
            f"unpacks to {total / 2**20:.1f} MiB, more than the {free / 2**20:.1f} MiB free in {store}",
            "fix: free some space",
        )


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
    """Every header of the bundle checked before anything is written: its list against the limits and the free disk
    of ``store`` (one total), then each member against that list (name, kind, size, once) and every listed file
    present, reading headers only (memory bounded: 512 bytes a header, a few KiB for a pax header). Returns the
    list; the files' checksums are checked while they are unpacked (:func:`read_bundle`)."""
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
    """Copy one member to ``target`` in 1 MiB pieces; returns its SHA-256. Reading errors are the bundle's (told by
    :func:`_reading`), writing errors the store's: named as such."""
    digest = hashlib.sha256()
    with contextlib.ExitStack() as opened:
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            out = opened.enter_context(open(target, "wb"))
        except OSError as error:
            _refuse(file, f"cannot be unpacked into {target.parent} ({error.strerror or error})", _WRITABLE_FIX)
        while chunk := source.read(2**20):
            digest.update(chunk)
            try:
                out.write(chunk)
            except OSError as error:
                _refuse(file, f"cannot be unpacked into {target.parent} ({error.strerror or error})", _WRITABLE_FIX)
    return digest.hexdigest()


def _unpack(file: Path, listed: dict, scratch: Path) -> dict[str, Path]:
    """Every file of the bundle copied under ``scratch``, each checked against the bundle's list (name, kind, size,
    checksum) before and while it is written; returns name -> path. Nothing unlisted, missing or altered passes."""
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
    """A run folder of the bundle: a whole record naming this folder through its configuration, and only the
    weight files it lists, each matching its checksum and loadable weights-only."""
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
    """Unpack ``file`` into ``scratch`` and check it whole (:class:`BundleError` names the first problem). ``listed``:
    what :func:`survey` returned for it (surveyed here when not given), so nothing is written before every header
    has passed."""
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
