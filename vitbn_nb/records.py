"""The run store's files: each run's ``record.json`` (with a SHA-256 of itself) and its weight files (with
theirs), read and written atomically and verified; :func:`check_store` lists every damaged run and its repair."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pandas as pd
import torch

from . import atomic
from .paths import runs_dir


def _fix(run_id: str) -> str:
    return f"fix: python -m vitbn_nb runs retrain {run_id}"


class RunStoreError(RuntimeError):
    """A damaged or missing file of the run store; the message names the run, the file and the fix."""

    def __init__(self, run_id: str, problem: str, fix: str | None = None):
        self.run_id, self.problem, self.fix = run_id, problem, fix or _fix(run_id)
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


def read_record(folder: Path) -> dict:
    """A run's record, verified; a damaged one raises :class:`RunStoreError` naming the file and the fix."""
    path, run_id = Path(folder) / "record.json", Path(folder).name
    try:
        record = json.loads(path.read_text())
    except FileNotFoundError:
        raise RunStoreError(run_id, f"{path} is missing") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise RunStoreError(run_id, f"{path} is damaged ({error})") from None
    if not isinstance(record, dict) or "config" not in record:
        raise RunStoreError(run_id, f"{path} is not a run record")
    stored = record.get("record_sha256")
    if stored is not None and stored != _record_digest(record):
        raise RunStoreError(run_id, f"{path} does not match its checksum (edited or damaged)")
    return record


def load_weights(path: Path, run_id: str, expected: str | None = None, *, weights_only: bool = True) -> Any:
    """``torch.load`` of a run's weight file to the CPU, its checksum verified; errors name the file and the fix."""
    path = Path(path)
    if not path.is_file():
        raise RunStoreError(run_id, f"{path} is missing")
    if expected is not None and sha256(path) != expected:
        raise RunStoreError(run_id, f"{path} does not match its checksum (truncated or damaged)")
    try:
        return torch.load(path, map_location="cpu", weights_only=weights_only)
    except Exception as error:
        raise RunStoreError(run_id, f"{path} cannot be read ({type(error).__name__}: {error})") from None


def _problems(folder: Path) -> list[str]:
    """What is wrong with one run folder (empty when nothing is)."""
    try:
        record = read_record(folder)
    except RunStoreError as error:
        return [error.problem]
    run_id, checksums, problems = record.get("run_id", folder.name), record.get("checksums", {}), []
    files = (
        ["model.pt"]
        if record.get("status") in ("finished", "diverged")
        else (["checkpoint.pt"] if (folder / "checkpoint.pt").exists() else [])
    )
    for name in files:
        try:
            load_weights(folder / name, run_id, checksums.get(name), weights_only=name == "model.pt")
        except RunStoreError as error:
            problems.append(error.problem)
    return problems


def check_store(store: str | Path | None = None) -> pd.DataFrame:
    """Every damaged run of the store: its id, folder, what is wrong and the command that repairs it."""
    store = Path(store) if store is not None else runs_dir()
    rows = []
    for folder in (
        sorted(p for p in store.iterdir() if p.is_dir() and not p.name.startswith(".")) if store.is_dir() else []
    ):
        for problem in _problems(folder):
            rows.append({"run": folder.name, "folder": str(folder), "problem": problem, "fix": _fix(folder.name)})
    return pd.DataFrame(rows, columns=["run", "folder", "problem", "fix"])
