"""Importing a bundle (``python -m vitbn_nb runs import FILE``): read and checked whole first
(:func:`vitbn_nb.store.bundle.read_bundle`), then every action planned and every conflict with the store found, then
applied all or nothing. The moves into the store are journalled before the first one, so a failure, or a kill
(undone by :func:`recover_imports` at the next import or ``train``), puts the store back as it was.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import uuid
from pathlib import Path

from .. import atomic
from ..paths import runs_dir
from .bundle import Bundle, BundleError, read_bundle
from .records import ENDED, STATE_FOLDER, WEIGHT_FILES, RunStoreError, read_record, write_record
from .run_folder import run_lock


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
