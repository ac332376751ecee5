"""Measurements of finished runs kept in their records (:func:`measured`), and the machines that trained and timed
the runs (:func:`trained_on`, :func:`timed_on`), which every figure's footer names."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import torch

from ..paths import is_committed, stored_path
from ..system import hardware
from ..system import label as system_label
from .records import read_record, write_record
from .run_folder import Run, run_lock, timestamp


def trained_on(run_ids: Iterable[str]) -> dict[str, int]:
    """The machines that trained ``run_ids`` (every resumed segment's), each with how many of the runs it trained."""
    return _machines(run_ids, lambda r: [s["hardware"] for s in r.get("segments") or [{"hardware": r["hardware"]}]])


def timed_on(run_ids: Iterable[str]) -> dict[str, int]:
    """The machines that took the stored measurements (:func:`measured`) of ``run_ids``, with how many runs each."""
    return _machines(
        run_ids, lambda r: [m["hardware"] for m in r.get("measurements", {}).values() if m.get("hardware")]
    )


def _machines(run_ids: Iterable[str], hardware_of) -> dict[str, int]:
    counts: dict[str, int] = {}
    for run_id in sorted(set(run_ids)):
        folder = stored_path(run_id)
        if not (folder / "record.json").is_file():
            continue
        for name in {system_label(info) for info in hardware_of(read_record(folder))}:
            counts[name] = counts.get(name, 0) + 1
    return dict(sorted(counts.items(), key=lambda item: -item[1]))


def measured(
    run: Run, name: str, measure: Callable[[], Any], device: torch.device | None, *, retake: bool = False
) -> Any:
    """A measurement of a finished run (a latency, a pass's time, a step's memory), taken once and kept in its record.

    ``python -m vitbn_nb train`` takes it on the machine that trained the run, right after training; a chapter
    rendered elsewhere reads it from the record, so it needs no weights. Only a measurement that was never taken is
    taken where the chapter runs, and it is stored with that machine's hardware, which the footers then name ("timed
    on"). ``device=None`` marks a number that depends on the weights alone (an accuracy, a property of the stem):
    kept the same way, with no hardware, and not counted as a timing. ``retake``: measure again and replace the
    stored value (timings taken in rounds with other runs: when one run of the rounds must be timed, all are, or
    their rounds would not pair up).
    """
    stored = run.record.get("measurements", {}).get(name)
    if stored is not None and not retake:
        return stored["value"]
    if is_committed(run.folder):
        what = "must retake" if stored is not None else "lacks"
        raise ValueError(
            f"run {run.run_id}: its committed record ({run.folder}) {what} the measurement {name!r}, which needs its "
            "weights; train the run here (python -m vitbn_nb train --from-scratch) to take it"
        )
    value = measure()
    taken_on = hardware(device) if device is not None else None
    with run_lock(run.run_id, progress=False):
        record = read_record(run.folder)
        record.setdefault("measurements", {})[name] = {"value": value, "hardware": taken_on, "measured": timestamp()}
        write_record(run.folder / "record.json", record)
    run.record = record
    return value
