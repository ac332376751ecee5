"""The optimisation's files in the run store (``runs_dir()/hpo``): per study its trial ledger (``trials.json``), Ax's
snapshot (``ax_state.json``) and its description (``study.json``); per dataset and profile the chosen values
(``best-<dataset>-<profile>.json``). Each is checked as the code reads it back (:func:`state_problem`), by the
optimisation, ``runs check`` and ``runs import`` alike.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd

from .. import atomic
from ..paths import runs_dir, stored_path

STATE_FILE = "ax_state.json"
LEDGER_FILE = "trials.json"


def state_fix(path: Path) -> str:
    return (
        f"fix: delete {path} and run the optimising chapter again, or import the bundle of the machine that optimised"
    )


_num = lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
_int = lambda v: isinstance(v, int) and not isinstance(v, bool)
#: What each kind of trial-ledger entry and chosen-values entry must hold (key: test), as the code reads them.
_LEDGER_ENTRY = {
    "trial": _int,
    "lr": lambda v: _num(v) and 0 < v < 10,
    "batch_size": lambda v: _int(v) and v >= 2,
    "run_id": lambda v: isinstance(v, str),
    "generator": lambda v: isinstance(v, str),
    "accuracy": lambda v: _num(v) and 0 <= v <= 100,
    "suggest_seconds": lambda v: _num(v) and v >= 0,
    "status": lambda v: isinstance(v, str),
}
_BEST_ENTRY = {**_LEDGER_ENTRY, "depth": _int, "trials": _int, "trial_epochs": _int}
_BEST_REQUIRED = ("lr", "batch_size", "depth", "trials", "trial_epochs")


def state_problem(name: str, state) -> str | None:
    """What makes one file of the optimisation state unusable (None when it is whole): the trial ledger, Ax's
    snapshot, the study's description, or a chosen-values file, checked as the code reads them back."""
    if not isinstance(state, dict):
        return "is not a JSON object"
    if name == LEDGER_FILE:
        for key, entry in state.items():
            if not key.isdigit() or not isinstance(entry, dict):
                return f"holds trial {key!r}, which is not a numbered trial"
            if bad := [k for k, test in _LEDGER_ENTRY.items() if k in entry and not test(entry[k])]:
                return f"trial {key}: {bad[0]!r} has the wrong type or range"
    elif name == STATE_FILE:
        if not isinstance(state.get("experiment"), dict) or not isinstance(state.get("generation_strategy"), dict):
            return "is not an Ax snapshot (no experiment and generation strategy)"
    elif name == "study.json":
        if not isinstance(state.get("model"), str):
            return "does not name the study's model"
    elif name.startswith("best-"):
        for model, entry in state.items():
            if not isinstance(entry, dict) or any(k not in entry for k in _BEST_REQUIRED):
                return f"does not hold {model}'s {', '.join(_BEST_REQUIRED)}"
            if bad := [k for k, test in _BEST_ENTRY.items() if k in entry and not test(entry[k])]:
                return f"{model}: {bad[0]!r} has the wrong type or range"
        if not state:
            return "holds no model"
    return None


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


def best_trial(table: pd.DataFrame) -> pd.Series:
    """The trial with the highest accuracy (the earliest of equals) of one model's trial table."""
    if table.empty:
        raise ValueError("the trial table is empty: run the optimisation first")
    if table["model"].nunique() != 1:
        raise ValueError(f"best_trial takes one model's trials; this table holds {sorted(table['model'].unique())}")
    return table.sort_values(["accuracy", "trial"], ascending=[False, True]).iloc[0]


def best_path(dataset: str, profile: str) -> Path:
    """Where the optimised hyperparameters of ``dataset`` under ``profile`` are kept."""
    return runs_dir() / "hpo" / f"best-{dataset}-{profile}.json"


def save_best(table: pd.DataFrame, *, dataset: str, profile: str) -> Path:
    """Write each model's best trial (lr, batch size, accuracy, trial, depth ...) as JSON; return the path."""
    best = {}
    for model, trials in table.groupby("model", sort=False):
        row = best_trial(trials)
        best[model] = {
            "lr": float(row["lr"]),
            "batch_size": int(row["batch_size"]),
            "accuracy": float(row["accuracy"]),
            "trial": int(row["trial"]),
            "trials": len(trials),
            "depth": int(row["depth"]),
            "trial_epochs": int(row["trial_epochs"]),
            "generator": row["generator"],
            "run_id": row["run_id"],
            "study": row["study"],
            "dataset": dataset,
            "profile": profile,
        }
    path = best_path(dataset, profile)
    atomic.write_json(path, best)
    return path


def load_best(dataset: str, profile: str) -> dict | None:
    """The hyperparameters :func:`save_best` wrote (``{model: {"lr": ..., "batch_size": ...}}``), or None."""
    path = stored_path(best_path(dataset, profile).relative_to(runs_dir()))
    return read_state(path, state_fix(path)) if path.exists() else None
