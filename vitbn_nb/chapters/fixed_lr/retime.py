"""Chapter 03's retimes at lr 0.01, fixed in :data:`PLAN_FILE` before any of them trained: the lr 0.01 runs of
article 1's whole protocol that another machine timed, trained again (``RunConfig.replica`` 1: the same numbers,
another id) on the one CPU model that timed the rest of the chapter's protocol, so that every timing comparison at
lr 0.01 (Fig 5's gains, Table 1, Fig 6) reads one machine. :func:`derive` computes the plan from the committed
records; a retimed run's rows replace its original's wherever the replica is held (:func:`retimed`)."""

from __future__ import annotations

import dataclasses
import json
import math
import numbers
from functools import cache
from pathlib import Path

import pandas as pd
import torch

from ... import atomic
from ...judging import power
from ...judging.selection import timed_epochs
from ...paths import stored_path
from ...store import runs
from ...store.run_config import RunConfig
from ...store.run_folder import stored_id, stored_run
from . import article

#: The plan, as committed (data: what :func:`derive` computed, not typed).
PLAN_FILE = Path(__file__).with_name("retime_plan.json")
#: The rate whose comparisons were timed on two machines.
LR = max(article.EXPERIMENT1)
#: What makes a replica's rows stand for its original's: every field of the run but its id.
KEY = ("model", "depth", "lr", "seed", "dataset", "epochs", "batch_size", "train_size", "pipeline")


def _protocol(table: pd.DataFrame) -> pd.DataFrame:
    """Chapter 03's runs at article 1's whole protocol, trained on a CPU through its pipeline (its replicas left out:
    they are what this plan trains, not what it was derived from)."""
    if "replica" in table:
        table = table[table["replica"].fillna(0) == 0]
    return power.protocol_runs(
        table, "9999", epochs=article.EPOCHS, dataset="mnist", pipeline="reference", device="cpu"
    )


def derive(table: pd.DataFrame, planned: list[RunConfig]) -> dict:
    """The retime plan from ``table`` (chapter 03's committed runs) and ``planned`` (its ``paper`` plan at
    :data:`LR`): the CPU model that timed most epochs of the chapter's whole protocol, and every planned run at
    :data:`LR` with an epoch timed elsewhere, as a replica; priced by the committed epochs."""
    at = _protocol(table)
    timed = timed_epochs(at)
    cpus = timed["machine"].dropna()
    machine = cpus.value_counts().sort_index().sort_values(ascending=False, kind="stable").index[0]
    chosen = []
    for config in (c for c in planned if math.isclose(c.lr, LR)):
        run_id = stored_id(config, torch.device("cpu"))
        epochs = timed[timed["run_id"] == run_id]
        if epochs.empty or set(epochs["machine"].dropna()) != {machine}:
            chosen.append(dataclasses.replace(config, replica=1))
    seconds = power.plan_seconds(chosen, at)
    return {
        "plan": "03_fixed_lr/retime",
        "what": (
            f"article 1's lr {LR:g} runs timed on another machine, trained again on the one that timed the rest of "
            "chapter 03's whole protocol, so that every timing comparison at that rate reads one machine"
        ),
        "machine": machine,
        "lr": LR,
        "hours": None if seconds is None else round(seconds / 3600, 2),
        "runs": [c.to_dict() for c in chosen],
    }


def write(table: pd.DataFrame, planned: list[RunConfig]) -> Path:
    """Write :func:`derive`'s plan to :data:`PLAN_FILE` (then commit it, and stamp it, before any retime trains)."""
    atomic.write_text(PLAN_FILE, json.dumps(derive(table, planned), indent=1, ensure_ascii=False) + "\n")
    return PLAN_FILE


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
