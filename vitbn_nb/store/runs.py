"""The runs the store holds, as tables: one row per run and epoch (:func:`load_table`), the runs finished before a
date, the data stream a run drew, and the runs whose pair split between data streams. Training them is
:mod:`vitbn_nb.engines.training`."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Hashable, Iterable

import pandas as pd
import torch

from ..data.sets import STREAM
from ..paths import committed_records_dir, runs_dir, stored_path
from ..system import host_label, pick_device
from ..system import label as system_label
from .records import _EPOCH, RunStoreError
from .run_config import _READ_AS, RunConfig
from .run_folder import Run, is_run_name, record_stream, stored_id, stored_run

# The chapters and the figures' footers call the stored measurements as runs.*:
from .run_folder import measured as measured
from .run_folder import timed_on as timed_on
from .run_folder import trained_on as trained_on


def load_table(runs: Iterable[Run | dict] | None = None) -> pd.DataFrame:
    """One row per run and epoch, config flattened into columns (``class_acc_0`` ... per class), with the machine
    that trained (and so timed) each epoch (``machine``, its host too where recorded: a run resumed elsewhere has
    two)."""
    if runs is None:
        runs = [Run(p.parent) for p in sorted(runs_dir().glob("*/record.json"))]
    rows = []
    for run in runs:
        record = run.record if isinstance(run, Run) else run
        config = dict(record["config"])
        kwargs = config.pop("model_kwargs")
        config["pipeline"] = _READ_AS.get(config.get("pipeline"), config.get("pipeline"))
        base = {
            "run_id": record["run_id"],
            "status": record["status"],
            "device": record["hardware"]["device"],
            "stream": record_stream(record),
            "finished": record.get("finished"),
            "started": record.get("started"),
            "depth": kwargs.get("depth"),
            **config,
        }
        machines = epoch_machines(record, hosts=True)
        for epoch, machine in zip(record["epochs"], machines):
            row = {**base, "machine": machine, **{k: v for k, v in epoch.items() if k != "class_acc"}}
            row.update({f"class_acc_{i}": acc for i, acc in enumerate(epoch.get("class_acc", []))})
            rows.append(row)
    # no run at all: the columns every selection reads, so an empty table selects to empty tables, not a KeyError
    return pd.DataFrame(rows) if rows else pd.DataFrame(columns=EMPTY_TABLE_COLUMNS)


#: The columns of a run table with no run: those :func:`load_table` makes of every record.
EMPTY_TABLE_COLUMNS = (
    *("run_id", "status", "device", "stream", "finished", "started", "depth"),
    *(f.name for f in dataclasses.fields(RunConfig) if f.name != "model_kwargs" and f.name not in RunConfig.OPTIONAL),
    "machine",
    *_EPOCH["required"],
)


def finished_before(written: str) -> pd.DataFrame:
    """The run table (:func:`load_table`) of every finished run held, in the run store or among the committed records,
    that finished before ``written`` (an ISO date and time): what a seed plan written then could read."""
    folders = {}
    for store in (committed_records_dir(), runs_dir()):  # the run store's own copy wins
        if store is not None and store.is_dir():
            folders.update({folder.name: folder for folder in store.iterdir() if is_run_name(folder.name)})
    held = []
    for folder in folders.values():
        try:
            run = stored_run(folder)
        except RunStoreError:
            continue  # a damaged record is named by `runs check`, not read into a plan
        if run is not None and run.status == "finished" and str(run.record.get("finished") or "9999") < written:
            held.append(run)
    return load_table(held)


def held_stream(config: RunConfig, device: str | torch.device | None = None) -> str | None:
    """The data stream of ``config``'s finished run in the run store or the committed records (None: not held)."""
    done = stored_run(stored_path(stored_id(config, pick_device(device))))
    return None if done is None else record_stream(done.record)


def epoch_machines(record: dict, *, hosts: bool = False) -> list[str]:
    """The machine (:func:`vitbn_nb.system.label`; ``hosts``: :func:`~vitbn_nb.system.host_label`) that trained each
    of ``record``'s epochs: the segment that was running when it ended (a segment starts at ``from_epoch``, the epochs
    already done when it resumed); None for an epoch before every recorded segment (a checkpoint resumed without its
    record): its machine is unknown."""
    segments = record.get("segments") or [{"hardware": record["hardware"]}]
    segments = sorted(segments, key=lambda segment: segment.get("from_epoch", 0))
    name = host_label if hosts else system_label
    machines = []
    for i in range(len(record["epochs"])):
        running = [s for s in segments if s.get("from_epoch", 0) <= i]
        machines.append(name(running[-1]["hardware"]) if running else None)
    return machines


def split_streams(
    configs: Iterable[RunConfig],
    cell: Callable[[RunConfig], Hashable],
    device: str | torch.device | None = None,
    *,
    unheld: bool = False,
) -> list[RunConfig]:
    """The runs of ``configs`` held on another data stream than the one (:data:`~vitbn_nb.data.sets.STREAM`) while a
    run of their ``cell`` (the runs a comparison pairs) is held on the one: a pair that saw different batches, so the
    odd run trains again. ``unheld``: the runs not held at all too, in the order of ``configs``."""
    device = pick_device(device)
    held = [(config, held_stream(config, device)) for config in configs]
    streams: dict[Hashable, set[str]] = {}
    for config, stream in held:
        if stream is not None:
            streams.setdefault(cell(config), set()).add(stream)
    split = lambda config, stream: stream != STREAM and len(streams[cell(config)]) > 1
    return [c for c, stream in held if (unheld if stream is None else split(c, stream))]
