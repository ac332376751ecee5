"""Moving runs between machines: ``python -m vitbn_nb runs export FILE`` / ``runs import FILE``.

A bundle is a ``.tar.gz`` of the run store's records, its optimisation state (``hpo/``), the checkpoints
of unfinished runs (so training resumes on the other machine) and, with ``weights="needed"``, only the
weights the other machine still loads (:func:`needed_weights`): what chapters 06 and 07 measure of
their trained runs travels in the records (``runs.measured``), so their weights stay behind once
measured. ``weights="all"`` takes every finished run's weights.

A bundle comes from someone else's machine, so it is data, checked whole before anything is written
(:func:`read_bundle`): only regular files at the places a bundle may hold (a run folder named by the run id
its record's configuration gives, holding ``record.json`` and the weight files that record lists; the
optimisation state's JSON files), every one listed in ``bundle.json`` with its SHA-256, every record whole
(``records.record_problem``), every weight file loadable weights-only. Then it is imported all or nothing:
a conflict with the store (a finished run that differs, say) is named and nothing is written.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import re
import shutil
import tarfile
import uuid
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from . import atomic, profiles
from .paths import runs_dir
from .records import (
    ENDED,
    STATE_FOLDER,
    WEIGHT_FILES,
    RunStoreError,
    identity_problem,
    load_checkpoint,
    load_weights,
    read_record,
    sha256,
)
from .runs import RunConfig, run_lock

WEIGHTS = ("needed", "all")
FORMAT = 2
#: What a bundle may hold: a run's files, and the optimisation state (a study's three files, the chosen values).
_RUN_FILE = re.compile(
    r"^runs/(?P<run>[A-Za-z0-9][A-Za-z0-9_.+-]{0,150})/(?P<file>record\.json|model\.pt|checkpoint\.pt)$"
)
_STATE_FILE = re.compile(
    r"^runs/hpo/(?:[A-Za-z0-9][A-Za-z0-9_.-]{0,150}/(?:ax_state|trials|study)\.json|best-[A-Za-z0-9_-]{1,80}\.json)$"
)
_FOLDERS = re.compile(r"^runs(?:/hpo|/[A-Za-z0-9][A-Za-z0-9_.+-]{0,150})?(?:/[A-Za-z0-9][A-Za-z0-9_.-]{0,150})?$")
#: A bundle larger than this unpacked is refused before anything is written (a paper store with every weight
#: file is a few hundred MiB).
MAX_BYTES = 16 * 2**30
MAX_FILES = 100_000
#: The largest file of each kind a bundle may hold: a record or a state file is KiB to a few MiB, the largest
#: model's weights tens of MiB (with its optimiser state in a checkpoint, three times that).
MAX_FILE_BYTES = {".json": 64 * 2**20, ".pt": 2**30}


class BundleError(ValueError):
    """A bundle that cannot be imported; the message names the bundle, what is wrong and the fix."""


def _run_folders(store: Path) -> list[Path]:
    return sorted(p for p in store.iterdir() if p.is_dir() and (p / "record.json").is_file()) if store.is_dir() else []


def _measured_plans(profile: str) -> list[RunConfig]:
    """The runs of the chapters that measure trained runs (``train.MEASURED_BY``) under ``profile``; chapter 06's
    final runs follow from its stored hyperparameters (read, never optimised here)."""
    from .studies import three_things, transfer

    settings = profiles.settings("06_emnist_transfer", profile)
    return [
        *three_things.plan(profiles.settings("07_three_things", profile)),
        *transfer.plan(settings),
        *transfer.stored_runs(settings),
    ]


def needed_weights(profile: str, store: Path | None = None) -> set[str]:
    """Run ids whose ``model.pt`` the receiving machine loads: the app's choice; the source of every fine-tuning run
    not finished yet (stored or planned), to train it there; and each run of the measuring chapters that has no
    stored measurement yet, which a render there would take. Measured runs travel as records alone."""
    from .app import model_choice

    store = Path(store) if store is not None else runs_dir()
    stored = {folder.name: read_record(folder) for folder in _run_folders(store)}
    ended = {run_id for run_id, record in stored.items() if record["status"] in ("finished", "diverged")}
    needed = {r["config"]["init_from"] for i, r in stored.items() if r["config"].get("init_from") and i not in ended}
    choice = model_choice(store)
    if choice is not None:
        needed.add(choice.run_id)
    device_types = {record["hardware"]["device"] for record in stored.values()}
    for config in _measured_plans(profile):
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
    file: str | Path, *, profile: str = "auto", weights: str = "needed", store: str | Path | None = None
) -> dict:
    """Write the bundle ``file`` (atomically); returns what it holds (runs, weight files, bytes)."""
    if weights not in WEIGHTS:
        raise ValueError(f"weights={weights!r} is not allowed; choose one of {', '.join(map(repr, WEIGHTS))}")
    store = Path(store) if store is not None else runs_dir()
    if Path(file).resolve().is_relative_to(store.resolve()):
        raise ValueError(f"{file} lies inside the run store {store}; write the bundle somewhere else")
    keep = needed_weights(profiles.resolve(profile), store) if weights == "needed" else None
    members, counts = _members(store, keep)
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


def _read_listing(file: Path, tar: tarfile.TarFile, first: tarfile.TarInfo | None) -> dict:
    """The bundle's own list of files (its first member, ``bundle.json``), read before anything else."""
    if first is None or first.name != "bundle.json" or not first.isreg():
        _refuse(file, "does not begin with bundle.json (its list of files)")
    if first.size > MAX_FILE_BYTES[".json"]:
        _refuse(file, f"has a bundle.json of {first.size / 2**20:.0f} MiB")
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
            isinstance(entry, dict) and isinstance(entry.get("sha256"), str) and isinstance(entry.get("bytes"), int)
        ):
            _refuse(file, f"lists {name!r} without its checksum and size")
    return manifest["files"]


def _unpack(file: Path, tar: tarfile.TarFile, scratch: Path) -> dict[str, Path]:
    """Every file of the bundle copied under ``scratch``, each checked against the bundle's list (name, kind, size,
    checksum) before and while it is written; returns name -> path. Nothing unlisted, missing or altered passes."""
    listed = _read_listing(file, tar, tar.next())
    unpacked, total, count = {}, 0, 0
    while (member := tar.next()) is not None:
        count += 1
        name = member.name
        if count > MAX_FILES:
            _refuse(file, f"holds more than {MAX_FILES:,} entries")
        if member.isdir():
            if not _FOLDERS.match(name.rstrip("/")):
                _refuse(file, f"holds a folder {name!r} that a bundle never has")
            continue
        if not member.isreg():
            _refuse(file, f"holds {name!r}, which is not a regular file (a link or a device)")
        run = _RUN_FILE.match(name)
        if not ((run and run["run"] != STATE_FOLDER) or _STATE_FILE.match(name)):
            _refuse(file, f"holds {name!r}, which is neither a run's file nor the optimisation state")
        if name in unpacked or name == "bundle.json":
            _refuse(file, f"holds {name!r} twice")
        if name not in listed:
            _refuse(file, f"holds {name!r}, which its bundle.json does not list")
        limit = MAX_FILE_BYTES[Path(name).suffix]
        if member.size != listed[name]["bytes"] or member.size > limit:
            sizes = f"{member.size:,} bytes, {listed[name]['bytes']:,} listed, at most {limit:,}"
            _refuse(file, f"holds {name!r} of the wrong size ({sizes})")
        total += member.size
        if total > MAX_BYTES:
            _refuse(file, f"unpacks to more than {MAX_BYTES / 2**30:.0f} GiB")
        free = shutil.disk_usage(scratch.parent).free
        if member.size > free:
            _refuse(
                file, f"needs more than the {free / 2**20:.1f} MiB free in {scratch.parent}", "fix: free some space"
            )
        target = scratch / name
        target.parent.mkdir(parents=True, exist_ok=True)
        digest, source = hashlib.sha256(), tar.extractfile(member)
        with open(target, "wb") as out:
            while chunk := source.read(2**20):
                digest.update(chunk)
                out.write(chunk)
        if digest.hexdigest() != listed[name]["sha256"]:
            _refuse(file, f"holds {name!r}, which does not match its checksum (damaged or altered)")
        unpacked[name] = target
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
            load_checkpoint(folder, record) if name == "checkpoint.pt" else load_weights(path, run_id)
        except RunStoreError as error:
            _refuse(file, f"holds {run_id}/{name}, which is not plain weights ({error.problem})")
    return record


def read_bundle(file: str | Path, scratch: Path) -> Bundle:
    """Unpack ``file`` into ``scratch`` and check it whole (:class:`BundleError` names the first problem)."""
    file = Path(file)
    if not file.is_file():
        raise BundleError(f"{file} is not a file; give a bundle written by `python -m vitbn_nb runs export`")
    try:
        with tarfile.open(file, "r:gz") as tar:
            unpacked = _unpack(file, tar, scratch)
    except (tarfile.TarError, EOFError, OSError, ValueError, zlib.error) as error:
        if isinstance(error, BundleError):
            raise
        _refuse(file, f"is not a readable bundle ({error})")
    found = Bundle(file)
    for name, path in unpacked.items():
        if _STATE_FILE.match(name):
            from .hpo import state_file_problem

            if problem := state_file_problem(path):
                _refuse(file, f"holds optimisation state {name!r} that {problem}")
            found.state[name.removeprefix(f"runs/{STATE_FOLDER}/")] = path
        else:
            found.runs.setdefault(name.split("/")[1], path.parent)
    for run_id, folder in sorted(found.runs.items()):
        found.records[run_id] = _check_run(file, folder)
    return found


# -- importing: every action planned and every conflict found first, then applied all or nothing ---------------


def _digest(record: dict) -> str:
    return record["record_sha256"]


def _same_but_measurements(a: dict, b: dict) -> bool:
    """The same training, one of them measured more (a render elsewhere measured what training had not)."""
    strip = lambda record: {k: v for k, v in record.items() if k not in ("measurements", "record_sha256")}
    return strip(a) == strip(b)


def _plan_run(store: Path, run_id: str, folder: Path, record: dict) -> tuple[str, str | None]:
    """(what to do, the conflict if any) for one run of the bundle against the store."""
    target = store / run_id
    if not target.exists():
        return "add", None
    try:
        mine = read_record(target)
    except RunStoreError as error:
        return "", f"run {run_id} is damaged in the store ({error.problem}); {error.fix}"
    if _digest(mine) == _digest(record):
        missing = [n for n in WEIGHT_FILES if (folder / n).exists() and not (target / n).exists()]
        return ("weights", None) if missing else ("unchanged", None)
    if _same_but_measurements(record, mine):
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
    """For each study folder and each chosen-values file of the bundle: add, replace (the bundle's optimisation
    went further: every trial here is in its ledger, the same), or keep; conflicting states are named."""
    plans, conflicts = {}, []
    studies = sorted({name.split("/")[0] for name in found.state if "/" in name})
    for study in studies:
        mine, theirs = store / STATE_FOLDER / study, found.state.get(f"{study}/trials.json")
        if not mine.exists():
            plans[study] = "add"
            continue
        same = all(
            (mine / n.split("/")[1]).is_file() and (mine / n.split("/")[1]).read_bytes() == p.read_bytes()
            for n, p in found.state.items()
            if n.startswith(f"{study}/")
        )
        here, there = _ledger(mine / "trials.json"), _ledger(theirs) if theirs else {}
        if same:
            plans[study] = "unchanged"
        elif here.items() <= there.items():
            plans[study] = "replace"
        elif there.items() <= here.items():
            plans[study] = "unchanged"  # this store's optimisation went further
        else:
            conflicts.append(f"optimisation {study}: the bundle's trials and this store's differ")
    for name, path in found.state.items():
        if "/" in name:
            continue
        target = store / STATE_FOLDER / name
        if not target.exists():
            plans[name] = "add"
        elif target.read_bytes() == path.read_bytes():
            plans[name] = "unchanged"
        else:
            conflicts.append(f"{target} differs from the bundle's copy")
    return plans, conflicts


def import_bundle(file: str | Path, *, store: str | Path | None = None) -> dict:
    """Add a bundle's runs and optimisation state to the run store, all or nothing; returns the counts."""
    store = Path(store) if store is not None else runs_dir()
    store.mkdir(parents=True, exist_ok=True)
    recover_imports(store)
    scratch = store / f".import-{uuid.uuid4().hex[:8]}"  # on the store's disk, so every move is a rename
    try:
        scratch.mkdir()
        found = read_bundle(file, scratch / "new")
        with contextlib.ExitStack() as locks:
            for run_id in sorted(found.runs):
                locks.enter_context(run_lock(run_id, progress=False))
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
            _apply(store, scratch, found, plans, state_plans)
    finally:
        if not _pending(scratch):  # moves not undone are left for recover_imports, never deleted with the scratch
            shutil.rmtree(scratch, ignore_errors=True)
    counts = {"added": 0, "updated": 0, "unchanged": 0, "state files": 0}
    for action, _ in plans.values():
        counts["added" if action == "add" else "unchanged" if action == "unchanged" else "updated"] += 1
    counts["state files"] = sum(action in ("add", "replace") for action in state_plans.values())
    return counts


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
                from .records import write_record

                record = read_record(target)
                # Both kept: the bundle's measurements win where both took one (it comes from training).
                record["measurements"] = {
                    **record.get("measurements", {}),
                    **found.records[run_id].get("measurements", {}),
                }
                write_record(merged / "record.json", record)
            new = merged
        moves.append((new, target))
    for name, action in sorted(state_plans.items()):
        if action in ("add", "replace"):  # a study's folder, or a file of chosen values
            moves.append((scratch / "new" / "runs" / STATE_FOLDER / name, store / STATE_FOLDER / name))
    return moves


def _apply(store: Path, scratch: Path, found: Bundle, plans: dict, state_plans: dict) -> None:
    """Move every planned change into the store. The moves are journalled first, so a failure here, or a kill
    (undone by :func:`recover_imports` at the next import or ``train``), puts the store back as it was."""
    moves = _prepared(store, scratch, found, plans, state_plans)
    if any(target.parent.name == STATE_FOLDER for _, target in moves):
        (store / STATE_FOLDER).mkdir(exist_ok=True)
    journal = [
        {"new": str(new), "target": str(target), "aside": str(scratch / "old" / str(i)), "existed": target.exists()}
        for i, (new, target) in enumerate(moves)
    ]
    (scratch / "old").mkdir()
    atomic.write_json(scratch / JOURNAL, {"moves": journal, "done": False})
    try:
        for move in journal:
            if move["existed"]:
                Path(move["target"]).rename(move["aside"])
            Path(move["new"]).rename(move["target"])
    except BaseException:
        _undo(journal)
        atomic.write_json(scratch / JOURNAL, {"moves": journal, "done": True})  # undone: nothing left to recover
        raise
    atomic.write_json(scratch / JOURNAL, {"moves": journal, "done": True})


JOURNAL = "journal.json"


def _undo(journal: list[dict]) -> None:
    """Put back what the journalled moves changed, in reverse order, from wherever they stopped."""
    for move in reversed(journal):
        new, target, aside = Path(move["new"]), Path(move["target"]), Path(move["aside"])
        if not new.exists() and target.exists():  # the bundle's copy is in place: take it out
            shutil.rmtree(target) if target.is_dir() and not target.is_symlink() else target.unlink()
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
    """Undo any import a kill interrupted (its scratch folder ``.import-*`` in the store), and remove the scratch
    folders of finished or never-started ones; returns what was undone."""
    store = Path(store) if store is not None else runs_dir()
    undone = []
    for scratch in sorted(store.glob(".import-*")) if store.is_dir() else []:
        if (moves := _pending(scratch)) is not None:
            with contextlib.ExitStack() as locks:
                for move in moves:
                    locks.enter_context(run_lock(Path(move["target"]).name, progress=False))
                _undo(moves)
            undone.append(scratch.name)
        shutil.rmtree(scratch, ignore_errors=True)
    return undone
