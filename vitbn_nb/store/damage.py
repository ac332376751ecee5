"""Damage in the run store, each with the command that repairs it (``python -m vitbn_nb runs check``), and what an
import leaves in it: an import's temporary folder and its mark. The operations read this (the command line, bundle
import and export); training and the chapters never do."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from ..limits import model_problem
from ..models import build_model
from ..paths import runs_dir
from .records import (
    ENDED,
    LOCKS,
    STATE_FOLDER,
    SWAP_FIX,
    RunStoreError,
    delete_fix,
    interrupted_swaps,
    is_owned,
    load_checkpoint,
    load_weights,
    read_record,
    retrain_fix,
    state_file_problem,
    state_fix,
)
from .run_config import RunConfig

#: An import's temporary folder (``.import-<random>``), and the mark it leaves from its first change of the store to
#: its last (``.incomplete-<bundle digest>-<random>``). Neither is ever read: a mark is known by its name alone.
SCRATCH_PREFIX, MARK_PREFIX = ".import-", ".incomplete-"


def half_imported(store: Path) -> list[Path]:
    """The marks of imports into ``store`` that have not finished (under way, or interrupted by a kill)."""
    return sorted(Path(store).glob(f"{MARK_PREFIX}*")) if Path(store).is_dir() else []


def import_owner(mark: Path) -> Path:
    """The temporary folder of the import that left ``mark`` (owned while that import runs: :func:`is_owned`)."""
    return mark.parent / f"{SCRATCH_PREFIX}{mark.name.rsplit('-', 1)[-1]}"


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
    rows += [(run_id, store / run_id, problem, SWAP_FIX) for run_id, problem in interrupted_swaps(store).items()]
    locks = store / LOCKS
    if locks.is_symlink() or (locks.exists() and not locks.is_dir()):
        kind = "a link" if locks.is_symlink() else "a file"
        problem = (
            f"{locks} is {kind}; the store keeps its locks in a folder of its own, so training and imports refuse it"
        )
        rows.append(
            (LOCKS, locks, problem, f"fix: delete {locks} (only the {kind} itself), then run the command again")
        )
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
    notes = {  # each note, and whether it applies
        f"{records_only} finished run(s) are kept as their records alone (imported without weights): the chapters "
        "render from them; the app and fine-tuning need weights (export with --weights all)": records_only,
        f"{stale} finished run(s) still hold a checkpoint.pt from before their final save (unused)": stale,
        f"not runs, left alone: {', '.join(others)}": others,
    }
    return [note for note, applies in notes.items() if applies]
