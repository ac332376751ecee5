"""Chapter 03's retimes at lr 0.01, fixed in :data:`PLAN_FILE` before any of them trained: the lr 0.01 runs of
article 1's whole protocol that another machine timed, trained again (``RunConfig.replica`` 1: the same numbers,
another id) on the one CPU model that timed the rest of the chapter's protocol, so that every timing comparison at
lr 0.01 (Fig 5's gains, Table 1, Fig 6) reads one machine. :mod:`.retime_plan` derived the plan from the committed
records; a retimed run's rows replace its original's wherever the replica is held (:func:`retimed`)."""

from __future__ import annotations

import json
import math
import numbers
from functools import cache
from pathlib import Path

import pandas as pd
import torch

from ...paths import stored_path
from ...store import runs
from ...store.run_config import RunConfig
from ...store.run_folder import stored_id, stored_run

#: The plan, as committed (data: what :func:`.retime_plan.derive` computed, not typed).
PLAN_FILE = Path(__file__).with_name("retime_plan.json")
#: What makes a replica's rows stand for its original's: every field of the run but its id.
KEY = ("model", "depth", "lr", "seed", "dataset", "epochs", "batch_size", "train_size", "pipeline")


@cache
def plan() -> dict:
    """The committed plan (no runs where none is committed)."""
    return json.loads(PLAN_FILE.read_text()) if PLAN_FILE.exists() else {"runs": [], "machine": None}


def configs() -> list[RunConfig]:
    """The replicas the plan trains, on its machine only."""
    return [RunConfig(**config) for config in plan()["runs"]]


def retimed(table: pd.DataFrame) -> pd.DataFrame:
    """``table`` with each run whose replica is held replaced by the replica's rows (its times, taken on the plan's
    machine; the same curve, the run being deterministic)."""
    if table is None or table.empty:
        return table
    held = [run for c in configs() if (run := stored_run(stored_path(stored_id(c, torch.device("cpu"))))) is not None]
    if not held:
        return table
    replicas = runs.load_table(held)
    mine, theirs = _keys(table), _keys(replicas)
    kept, at_scale = table[~mine.isin(set(theirs))], replicas[theirs.isin(set(mine))]
    return pd.concat([kept, at_scale], ignore_index=True)


def _keys(table: pd.DataFrame) -> pd.Series:
    """Each row's :data:`KEY` as one text, a whole split (None or NaN) read alike whatever the column's dtype (a
    profile's subsets are integers, the paper protocol's whole split is None)."""

    def text(value) -> str:
        if value is None or (isinstance(value, float) and math.isnan(value)):
            return "whole"
        return repr(float(value)) if isinstance(value, numbers.Real) and not isinstance(value, bool) else str(value)

    return table[list(KEY)].apply(lambda row: "|".join(text(v) for v in row), axis=1)
