"""Derives chapter 03's retime plan (:data:`.retime.PLAN_FILE`) from the chapter's committed records and writes it, to
be committed and stamped before any retime trains: the CPU model that timed most of the chapter's whole protocol, and
every lr 0.01 run timed elsewhere, as a replica. The chapter only reads the committed file (:mod:`.retime`)."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pandas as pd
import torch

from ... import atomic
from ...judging import power
from ...judging.selection import timed_epochs
from ...store.run_config import RunConfig
from ...store.run_folder import stored_id
from . import article
from .retime import PLAN_FILE

#: The rate whose comparisons were timed on two machines.
LR = max(article.EXPERIMENT1)


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
