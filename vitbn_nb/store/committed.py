"""The records behind ``figures/``, committed beside them in ``figures/records/`` (a run store without weights), so
a fresh clone renders every chapter without training. Staged with the figures (:func:`stage`)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterable
from pathlib import Path

from ..paths import RECORDS_FOLDER, committed_records_dir
from .provenance import FILE as PROVENANCE_FILE
from .records import ENDED, STATE_FOLDER


def _first_existing(name: str, sources: list[Path]) -> Path | None:
    return next((s / name for s in sources if (s / name).exists() and not (s / name).is_symlink()), None)


def _with_starting_runs(run_ids: set[str], sources: list[Path]) -> set[str]:
    """``run_ids`` and every run a fine-tuned one among them started from (``init_from``), transitively."""
    wanted, todo = set(run_ids), list(run_ids)
    while todo:
        record = _first_existing(f"{todo.pop()}/record.json", sources)
        start = json.loads(record.read_text()).get("config", {}).get("init_from") if record else None
        if start and start not in wanted:
            wanted.add(start)
            todo.append(start)
    return wanted


def _studies(sources: list[Path], run_ids: set[str], names: set[str] = frozenset()) -> dict[str, Path]:
    """The optimisation studies (``hpo/`` folders) one of whose trials is among ``run_ids``, or named in ``names`` (a
    chosen-values file's: a chapter that reads those values optimises again without them)."""
    found: dict[str, Path] = {}
    for source in sources:
        for ledger in sorted((source / STATE_FOLDER).glob("*/trials.json")):
            study = ledger.parent
            if study.name in found or study.is_symlink():
                continue
            trials = json.loads(ledger.read_text())
            if study.name in names or any(entry.get("run_id") in run_ids for entry in trials.values()):
                found[study.name] = study
    return found


def _best_files(sources: list[Path], profiles: set, pattern: str = "best-*.json") -> dict[str, Path]:
    """The chosen-values files (``best-<dataset>-<profile>.json``) of ``profiles``, the first source's copy of each
    (``pattern``: another state file named for its profile, as chapter 04's timing rounds ``timing-<profile>.json``)."""
    found: dict[str, Path] = {}
    for source in sources:
        for best in sorted((source / STATE_FOLDER).glob(pattern)):
            if best.stem.rsplit("-", 1)[-1] in profiles and best.name not in found and not best.is_symlink():
                found[best.name] = best
    return found


def stage(staging: Path, store: Path, campaign: Iterable[str]) -> list[str]:
    """Write ``staging/records/``: the record of every run the staged manifest names (from ``store``, else the records
    staged or committed before), the runs they started from, the optimisation state behind them (with the timing
    rounds of its profiles), and every ended ``campaign`` run, weights left out. Returns the run ids no source holds
    (an output carried over)."""
    campaign = set(campaign)
    manifest = staging / "manifest.json"
    outputs = json.loads(manifest.read_text()).get("outputs", {}) if manifest.is_file() else {}
    sources = [store, staging / RECORDS_FOLDER]
    if (committed := committed_records_dir()) is not None:
        sources.append(committed)
    named = {run_id for entry in outputs.values() for run_id in entry.get("run_ids", [])}
    profiles = {entry.get("profile") for entry in outputs.values()}
    best_files = _best_files(sources, profiles)
    timings = _best_files(sources, profiles, "timing-*.json")
    chosen = [entry for best in best_files.values() for entry in json.loads(best.read_text()).values()]
    chosen_studies = {e["study"] for e in chosen if isinstance(e, dict) and isinstance(e.get("study"), str)}
    studies = _studies(sources, named | set(campaign), chosen_studies)  # a campaign's searches are kept too
    for study in studies.values():  # every trial of a study travels with it, so its ledger leads to each run
        named |= {e.get("run_id") for e in json.loads((study / "trials.json").read_text()).values()} - {None}
    # the campaign's ended runs are kept by every render, so that hours of training are never dropped
    ended = {run_id: _first_existing(f"{run_id}/record.json", sources) for run_id in campaign}
    ended = {run_id for run_id, r in ended.items() if r and json.loads(r.read_text()).get("status") in ENDED}
    wanted = _with_starting_runs(named, sources) | ended
    fresh = staging / f".{RECORDS_FOLDER}.new"
    shutil.rmtree(fresh, ignore_errors=True)
    fresh.mkdir(parents=True)
    missing = []
    for run_id in sorted(wanted):
        record = _first_existing(f"{run_id}/record.json", sources)
        if record is None:
            missing.append(run_id)
            continue
        (fresh / run_id).mkdir()
        shutil.copyfile(record, fresh / run_id / "record.json")
        if (note := record.parent / PROVENANCE_FILE).is_file() and not note.is_symlink():  # where it was replayed
            shutil.copyfile(note, fresh / run_id / PROVENANCE_FILE)
    for name, study in studies.items():
        shutil.copytree(study, fresh / STATE_FOLDER / name, ignore=_not_state)
    for name, best in {**best_files, **timings}.items():  # the store's own copy (the first source) wins
        (fresh / STATE_FOLDER).mkdir(exist_ok=True)
        shutil.copyfile(best, fresh / STATE_FOLDER / name)
    shutil.rmtree(staging / RECORDS_FOLDER, ignore_errors=True)
    fresh.rename(staging / RECORDS_FOLDER)
    return missing


def _not_state(folder: str, files: list[str]) -> list[str]:
    """A study's folder is copied as its plain JSON files alone (the optimisation state: never weights)."""
    return [name for name in files if not name.endswith(".json") or (Path(folder) / name).is_symlink()]
