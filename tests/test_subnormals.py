"""Subnormal floats and a run's pace (chapter 03): counted where an operation computes them, a finished run's step
timed with them kept and flushed, once, and kept in its record; each run's pace shown beside it."""

import pandas as pd
import pytest
import torch

from vitbn_nb import campaign
from vitbn_nb.chapters.fixed_lr import subnormal_step, subnormals
from vitbn_nb.engines import training
from vitbn_nb.store import runs


def test_subnormals_are_counted_where_an_operation_computes_them():
    small = torch.full((4,), 1e-20)  # its square, 1e-40, lies below float32's smallest normal number
    with subnormal_step.SubnormalCount() as seen:
        square = small * small
        square.view(2, 2)  # shares the square's values: not counted again
        (small + 1).sum()
    assert dict(seen.subnormal) == {"mul": 4}
    assert seen.share() == pytest.approx(4 / 9)  # of the 4 + 4 + 1 values the mul, add and sum computed


def test_each_runs_pace_leaves_out_busy_epochs_and_shows_only_a_quiet_measurement(monkeypatch):
    epoch = lambda run_id, model, depth, seconds, load: dict(
        run_id=run_id, model=model, depth=depth, seed=0, train_seconds=seconds, load_1min=load, cpu_cores=2
    )
    table = pd.DataFrame(
        [
            epoch("a", "ViT", 6, 10.0, 1.9),
            epoch("a", "ViT", 6, 30.0, 2.0),
            epoch("a", "ViT", 6, 90.0, 3.2),  # timed beside other work: left out
            epoch("b", "ViTBN", 1, 5.0, 1.8),
            epoch("c", "ViTBNFFN", 1, 6.0, 1.8),
            epoch("d", "ViTDyT", 6, 50.0, 4.0),  # its only epoch timed beside other work: no pace to show
        ]
    )
    step = dict(kept_ms=30.0, flushed_ms=10.0, subnormal_share=0.01, subnormal_ops={"mul": 3})
    measurements = {
        "b": {"value": {**step, "load_1min": 1.9, "cpu_cores": 2}},
        "c": {"value": {**step, "load_1min": 3.5, "cpu_cores": 2}},  # taken beside other work: not shown
    }
    monkeypatch.setattr(
        subnormals,
        "_record",
        lambda run_id: (
            {"measurements": {subnormals.MEASUREMENT: measurements[run_id]}} if run_id in measurements else {}
        ),
    )
    pace = subnormals.pace(table).set_index("model")
    assert pace.loc["ViTDyT", ["fastest epoch (s)", "slowest ÷ fastest", "kept ÷ flushed"]].tolist() == ["n/a"] * 3
    assert pace.loc["ViT", ["fastest epoch (s)", "slowest epoch (s)", "slowest ÷ fastest"]].tolist() == [10, 30, 3]
    assert pace.loc["ViT", "kept ÷ flushed"] == "n/a"  # no measurement
    assert pace.loc["ViTBN", "kept ÷ flushed"] == 3.0 and pace.loc["ViTBN", "subnormal results (%)"] == 1.0
    assert pace.loc["ViTBN", "operations with most"] == "mul"
    assert pace.loc["ViTBNFFN", "step, subnormals kept (ms)"] == "n/a"


def test_a_runs_pace_compares_its_epochs_on_the_machine_that_timed_most_of_it(monkeypatch):
    epoch = lambda run_id, seconds, machine: dict(
        run_id=run_id, model="ViT", depth=6, seed=0, train_seconds=seconds, machine=f"CPU: {machine} (2 cores)"
    )
    # resumed for its last epoch on a machine four times slower: that epoch is not its slowest
    table = pd.DataFrame([epoch("a", 10.0, "A"), epoch("a", 12.0, "A"), epoch("a", 48.0, "B")])
    monkeypatch.setattr(subnormals, "_record", lambda run_id: {})
    pace = subnormals.pace(table).iloc[0]
    assert (pace["fastest epoch (s)"], pace["slowest epoch (s)"], pace["slowest ÷ fastest"]) == (10.0, 12.0, 1.2)


@pytest.mark.slow
def test_a_finished_runs_step_is_measured_once_and_kept_in_its_record(monkeypatch, run_store, mnist_ready):
    monkeypatch.setattr(campaign, "PROFILE", "smoke")
    stage = campaign.Stage("03_fixed_lr", lrs=(0.0005,), quiet=True, measurement=subnormal_step.__name__)
    monkeypatch.setattr(campaign, "STAGES", (stage,))
    monkeypatch.setattr(subnormal_step, "ROUNDS", 2)
    monkeypatch.setattr(subnormal_step, "BATCHES", 2)
    stable = next(c for c in stage.configs() if c.model == "ViTBNFFN" and c.model_kwargs["depth"] == 1)
    run = training.train(stable, progress=False)
    assert run.status == "finished"
    monkeypatch.setattr(subnormal_step, "taken_busy", lambda value: False)  # whatever else runs beside the suite
    logged = []
    assert campaign.measure(log=logged.append) == [run.run_id]
    assert logged[-1].startswith("campaign: 1 run(s) measured")
    held = subnormals.stored(runs.Run(run.folder).record)
    value = held["value"]
    assert held["hardware"]["device"] == "cpu" and held["measured"]
    assert value["kept_ms"] > 0 and value["flushed_ms"] > 0
    assert len(value["kept_ms_rounds"]) == 2 and 0 <= value["subnormal_share"] <= 1
    assert value["batches"] == 2 and value["threads"] == 1
    assert campaign.measure(log=logged.append) == []  # kept: not measured again
    assert logged[-1].startswith("campaign: 0 run(s) measured")
    monkeypatch.setattr(subnormal_step, "taken_busy", lambda value: True)  # as if taken beside other work
    assert campaign.measure(log=logged.append) == [run.run_id]  # taken anew
    small = torch.tensor(1e-20)
    assert (small * small).item() != 0  # subnormals kept again afterwards: PyTorch's default, every run's arithmetic
