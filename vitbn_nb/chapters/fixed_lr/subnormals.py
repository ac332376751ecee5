"""Subnormal floats and the pace of a training step on a CPU: on many CPUs an operation on a subnormal float takes
far longer than on a normal one, and PyTorch keeps them unless asked (``torch.set_flush_denormal``), so a run whose
numbers drift there slows down at the same load. ``campaign measure`` times a finished run's step both ways
(:mod:`.subnormal_step`, on a quiet machine) and keeps the measurement in the run's record; this module reads it."""

from __future__ import annotations

import pandas as pd

from ...judging.selection import shown_times
from ...paths import stored_path
from ...store.records import read_record
from ...system import contended_in, label

#: The name of the measurement in a run's record.
MEASUREMENT = "subnormal_step"
#: What is timed: a finished run keeps its weights, not its optimiser's state, so the Adam update is left out.
TIMED = (
    "forward and backward of the final weights over the first training batches of the run's first epoch, one thread "
    "(no optimiser step: a finished run keeps no Adam state)"
)


def stored(record: dict) -> dict | None:
    """The measurement a run's record holds (its value, the machine and the date), else None."""
    return record.get("measurements", {}).get(MEASUREMENT)


def taken_busy(value: dict) -> bool:
    """Whether a measurement was taken beside other work (the book's one rule, :func:`vitbn_nb.system.contended`)."""
    return contended_in(value, seconds="seconds")


def _record(run_id: str) -> dict:
    return read_record(stored_path(run_id))


def pace(table: pd.DataFrame) -> pd.DataFrame:
    """Per run: its fastest and slowest epoch (on the machine that timed most of it) and their ratio, beside its stored
    step times with subnormals kept and flushed ("n/a" where it holds none, or one taken beside other work)."""
    own = pd.concat([shown_times(run) for _, run in table.groupby("run_id")]) if len(table) else table
    seconds = own.dropna(subset=["train_seconds"]).groupby("run_id")["train_seconds"]
    fastest, slowest = seconds.min(), seconds.max()
    rows = []
    for (model, depth, seed, run_id), _ in table.groupby(["model", "depth", "seed", "run_id"], sort=True):
        value = (stored(_record(run_id)) or {}).get("value") or {}
        timed = value.get("flushed_ms") is not None and not taken_busy(value)
        quiet = run_id in fastest.index  # else every epoch of the run was timed beside other work
        rows.append(
            {
                "model": model,
                "depth": int(depth),
                "seed": int(seed),
                "fastest epoch (s)": round(fastest[run_id], 1) if quiet else "n/a",
                "slowest epoch (s)": round(slowest[run_id], 1) if quiet else "n/a",
                "slowest ÷ fastest": round(slowest[run_id] / fastest[run_id], 2) if quiet else "n/a",
                "step, subnormals kept (ms)": round(value["kept_ms"], 1) if timed else "n/a",
                "step, subnormals flushed (ms)": round(value["flushed_ms"], 1) if timed else "n/a",
                "kept ÷ flushed": round(value["kept_ms"] / value["flushed_ms"], 2) if timed else "n/a",
                "subnormal results (%)": round(100 * value["subnormal_share"], 3) if timed else "n/a",
                "operations with most": ", ".join(value.get("subnormal_ops", {})) if timed else "",
            }
        )
    return pd.DataFrame(rows)


def measured_on(table: pd.DataFrame) -> str:
    """The machines and dates of the table's runs' step measurements, or that none holds one."""
    taken = {}
    for run_id in table["run_id"].unique():
        if (found := stored(_record(run_id))) and found.get("hardware"):
            taken.setdefault(label(found["hardware"]), set()).add(found["measured"][:10])
    if not taken:
        return "no run here holds the step measurement (python -m vitbn_nb campaign measure takes it)"
    return "; ".join(f"step timed on {machine}, {', '.join(sorted(dates))}" for machine, dates in taken.items())
