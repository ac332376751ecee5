"""Importing a bundle (``python -m vitbn_nb runs import FILE``): every header checked before anything is written
(:func:`vitbn_nb.store.bundle.survey`), then unpacked and checked whole (:func:`vitbn_nb.store.bundle.read_bundle`),
then every action planned and every conflict with the store found, then applied all or nothing. The moves into the
store are journalled before the first one, so a failure, or a kill (undone by :func:`recover_imports` at the next
import, ``train`` or ``book``), puts the store back as it was.

An import works in a folder of the store (``.import-*``) that it owns for its whole life (``records.owned_folder``: an
OS lock the process holds until it ends), and it plans and moves under the locks of the runs it touches (and of the
optimisation state), the same locks training takes. So a second command recovers only imports whose process is gone,
under those same locks, and two imports, or an import and a training, of the same runs take turns: the second plans
against what the first left.
"""

from __future__ import annotations

import contextlib
import errno
import json
import shutil
from pathlib import Path

from .. import atomic
from ..paths import runs_dir
from .bundle import Bundle, BundleError, read_bundle, survey
from .records import (
    ENDED,
    STATE_FOLDER,
    WEIGHT_FILES,
    RunStoreError,
    owned_folder,
    read_record,
    taken_over,
    write_record,
)
from .run_folder import run_lock

#: The name of an import's working folder in the store (followed by a random suffix).
SCRATCH_PREFIX = ".import-"


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


def _locks(store: Path, names) -> contextlib.ExitStack:
    """The locks of the runs (and the optimisation state, as ``hpo``) an import changes, taken in one order by every
    process (sorted), so that no two wait on each other."""
    locks = contextlib.ExitStack()
    try:
        for name in sorted(set(names)):
            locks.enter_context(run_lock(name, progress=False, store=store))
    except BaseException:
        locks.close()
        raise
    return locks


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
        with _locks(store, [*found.runs, *([STATE_FOLDER] if found.state else [])]):
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
    (undone by :func:`recover_imports` at the next import, ``train`` or ``book``), puts the store back as it was."""
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
    """Put back what the journalled moves changed, in reverse order, from wherever they stopped. Every step is a
    rename that leaves a trace, so an undo stopped half-way (a kill) can be run again and never touches a run that
    is not the bundle's copy: the bundle's copy is taken out of the store into ``removed`` (not deleted), and the
    store's own copy comes back from ``aside``."""
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


def _lock_name(target: str) -> str:
    """The lock a journalled move's target is changed under: its run's, or the optimisation state's."""
    return STATE_FOLDER if Path(target).parent.name == STATE_FOLDER else Path(target).name


def recover_imports(store: Path | None = None) -> list[str]:
    """Undo any import whose process is gone (killed while it moved runs into the store), under the locks of the runs
    it moved, and remove the working folders that dead imports left; returns what was undone. An import still
    running is left alone (its folder is owned: ``records.owned_folder``)."""
    store = Path(store) if store is not None else runs_dir()
    undone = []
    for scratch in sorted(store.glob(f"{SCRATCH_PREFIX}*")) if store.is_dir() else []:
        with taken_over(scratch) as abandoned:
            if not abandoned:
                continue
            if (moves := _pending(scratch)) is not None:
                with _locks(store, [_lock_name(move["target"]) for move in moves]):
                    _undo(moves)
                undone.append(scratch.name)
            shutil.rmtree(scratch, ignore_errors=True)
    return undone
