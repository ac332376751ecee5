"""``runs verify``: a run from elsewhere is trusted once it replays. From its seed, on the one data stream, its first
epoch is trained again and compared with the record's first epoch; where its weights travelled, they are tested
again and compared with its last epoch. Within :data:`TOLERANCE` of the comparison its hardware allows: bit-exact
where this very CPU build trained it, else within a stated margin (another CPU's or a GPU's kernels round
differently, and an epoch of training carries those differences into the numbers)."""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
from collections.abc import Iterable, Iterator
from pathlib import Path

import pandas as pd
import torch

from ..data.sets import STREAM
from ..paths import runs_dir
from ..store import provenance
from ..store.records import ENDED, RunStoreError
from ..store.run_config import RunConfig
from ..store.run_folder import Run, record_stream, run_lock, stored_run, timestamp
from ..system import hardware, versions
from ..system import label as hardware_label
from . import engine
from .training import engine_options, seeded_model, training_sets

#: How far a replay may land from its record: ``exact`` where this machine's CPU build trained the run (the same CPU,
#: cores, torch and threads), else the first epoch's test accuracy within ``test_acc`` points and its training loss
#: within ``train_loss`` of itself (relative), and the final weights' test accuracy within ``weights_acc`` points.
TOLERANCE = {
    "exact": {"test_acc": 0.0, "train_loss": 0.0, "weights_acc": 0.0},
    "cpu": {"test_acc": 1.0, "train_loss": 0.05, "weights_acc": 0.1},
    "cuda": {"test_acc": 1.0, "train_loss": 0.05, "weights_acc": 0.1},
}


def _same_build(record: dict, here: dict) -> bool:
    """Whether the run trained (every segment of it) on this machine's CPU build, eagerly, on the one stream."""
    segments = record.get("segments") or [{"hardware": record["hardware"], "versions": record.get("versions", {})}]
    return (
        record_stream(record) == STREAM
        and record["config"].get("engine", "eager") == "eager"
        and all(
            s["hardware"].get("device") == "cpu"
            and hardware_label(s["hardware"]) == hardware_label(here)
            and s.get("versions", {}).get("torch") == versions()["torch"]
            for s in segments
        )
    )


@contextlib.contextmanager
def _threads(count) -> Iterator[None]:
    """The recorded thread count while replaying (a CPU's reductions split by threads round by them)."""
    before = torch.get_num_threads()
    if isinstance(count, int) and not isinstance(count, bool) and 1 <= count <= (os.cpu_count() or 1):
        torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _close(recorded: float, replayed: float, margin: float, relative: bool = False) -> bool:
    if not (math.isfinite(recorded) and math.isfinite(replayed)):
        return math.isfinite(recorded) == math.isfinite(replayed)
    return abs(recorded - replayed) <= margin * (abs(recorded) if relative else 1.0)


def replay(run: Run, *, progress: bool = False) -> dict:
    """Replay ``run`` on the CPU; returns ``passed``, ``why`` (when not), ``how``, ``on`` and the numbers compared."""
    record, device = run.record, torch.device("cpu")
    here = hardware(device)
    out = {"on": hardware_label(here), "replayed": timestamp()}
    if record["status"] not in ENDED or not record["epochs"]:
        return {**out, "passed": False, "why": "it has not finished, so there is nothing to compare", "how": "-"}
    if record_stream(record) != STREAM:
        why = f"it drew its GPU's own data stream ({record_stream(record)}), which a CPU cannot draw again"
        return {**out, "passed": False, "why": why, "how": "-"}
    exact = _same_build(record, here)
    kind = "exact" if exact else ("cuda" if record["hardware"].get("device") == "cuda" else "cpu")
    margins = TOLERANCE[kind]
    out["how"] = (
        "bit-exact"
        if exact
        else (f"within {margins['test_acc']:g} pt and {margins['train_loss']:.0%} of the loss ({kind} tolerance)")
    )
    config = dataclasses.replace(run.config, epochs=1, engine="eager")
    threads = record["hardware"].get("torch_threads") if exact else None
    with _threads(threads):
        model, _ = seeded_model(config, device)
        train_data, test_data = training_sets(config, device)
        options = {**engine_options(config, device), "desc": f"replaying {run.run_id}"}
        epoch = engine.train_model(model, train_data, test_data, **options, progress=progress)[0]
        first = record["epochs"][0]
        out["epoch_1"] = {
            "recorded": {"train_loss": first["train_loss"], "test_acc": first["test_acc"]},
            "replayed": {"train_loss": epoch["train_loss"], "test_acc": epoch["test_acc"]},
        }
        problems = []
        if not _close(first["test_acc"], epoch["test_acc"], margins["test_acc"]):
            problems.append(
                f"epoch 1's test accuracy replays as {epoch['test_acc']:.2f} %, not {first['test_acc']:.2f}"
            )
        if not _close(first["train_loss"], epoch["train_loss"], margins["train_loss"], relative=True):
            problems.append(f"epoch 1's loss replays as {epoch['train_loss']:.4f}, not {first['train_loss']:.4f}")
        if exact and first.get("class_acc") is not None and first["class_acc"] != epoch["class_acc"]:
            problems.append("epoch 1's per-class accuracies replay otherwise")
        if (run.folder / "model.pt").is_file():
            tested = engine.evaluate(run.load_model(device), test_data, **_test_options(run.config, device))["test_acc"]
            last = record["epochs"][-1]["test_acc"]
            out["weights"] = {"recorded": last, "replayed": tested}
            if not _close(last, tested, margins["weights_acc"]):
                problems.append(f"its final weights test at {tested:.2f} %, not the recorded {last:.2f}")
    return {**out, "passed": not problems, **({"why": "; ".join(problems)} if problems else {})}


def _test_options(config: RunConfig, device: torch.device) -> dict:
    options = engine_options(config, device)
    return dict(
        batch_size=options["test_batch_size"],
        num_classes=options["num_classes"],
        device=device,
        per_sample=options["per_sample_eval"],
    )


def verify(run_ids: Iterable[str] | None = None, *, store: Path | None = None, progress: bool = True) -> pd.DataFrame:
    """Replay the named runs of the store (default: every run imported and not yet verified), keep each outcome in the
    run's provenance note, and return one row per run: its status before, how it was compared, the verdict."""
    store = Path(store) if store is not None else runs_dir()
    if run_ids is None:
        folders = [store / run_id for run_id in provenance.waiting(store)]
    else:
        folders = []
        for run_id in run_ids:
            folder = store / run_id
            if not (folder / "record.json").is_file():
                raise RunStoreError(
                    run_id, f"{folder} holds no run", fix="fix: `python -m vitbn_nb runs check` lists them"
                )
            folders.append(folder)
    rows = []
    for index, folder in enumerate(folders, 1):
        run = stored_run(folder)
        if run is None:
            rows.append((folder.name, provenance.status(folder), "-", False, "it has not finished"))
            continue
        before = provenance.status(folder, run.record)
        if progress:
            print(f"[{index}/{len(folders)}] replaying {run.run_id} ({before}) ...", flush=True)
        try:
            outcome = replay(run, progress=progress)
        except ValueError as error:  # e.g. a fine-tuning whose starting run's weights are not here
            outcome = {"on": "-", "how": "-", "passed": False, "why": f"it cannot be replayed here ({error})"}
        with run_lock(run.run_id, progress=False, store=store):
            provenance.note_replay(folder, run.record, outcome)
        rows.append((run.run_id, before, outcome["how"], outcome["passed"], outcome.get("why", "")))
    return pd.DataFrame(rows, columns=["run", "before", "compared", "passed", "why"])
