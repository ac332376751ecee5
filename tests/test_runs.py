import json
import os
import pickle
import subprocess
import sys
import time

import pytest
import torch
from torch import nn

from vitbn_nb import atomic
from vitbn_nb.engines import engine, training
from vitbn_nb.engines.training import train
from vitbn_nb.store.runs import RunConfig, load_table

SMALL = dict(model="ViTBNFFN", model_kwargs={"depth": 1}, epochs=2, lr=1e-3, train_size=300, test_size=200)


def numbers(run):
    return [(e["train_loss"], e["test_acc"], e["class_acc"]) for e in run.record["epochs"]]


def test_a_run_records_config_metrics_hardware_and_versions(run_store, mnist_ready):
    run = train(RunConfig(**SMALL), progress=False)
    record = json.loads((run_store / run.run_id / "record.json").read_text())
    assert record["status"] == "finished" and record["config"]["model_kwargs"]["depth"] == 1
    assert record["config"]["model_kwargs"]["dim"] == 64  # the full reference configuration is stored
    assert [e["epoch"] for e in record["epochs"]] == [1, 2]
    for epoch in record["epochs"]:
        assert {"train_loss", "test_acc", "class_acc", "train_seconds", "test_seconds", "data_seconds"} <= set(epoch)
        assert len(epoch["class_acc"]) == 10 and 0 <= epoch["test_acc"] <= 100
        assert epoch["train_seconds"] > 0 and epoch["test_seconds"] > 0
    assert record["hardware"]["device"] == "cpu" and "torch" in record["versions"]
    assert record["train_images"] == 300 and record["test_images"] == 200
    assert (run_store / run.run_id / "model.pt").exists() and not (run_store / run.run_id / "checkpoint.pt").exists()
    assert run.load_model()(torch.rand(2, 1, 28, 28)).shape == (2, 10)


def test_same_seed_same_numbers_and_another_seed_differs(run_store, mnist_ready):
    first = numbers(train(RunConfig(**SMALL), progress=False))
    again = numbers(train(RunConfig(**SMALL), force=True, progress=False))
    other = numbers(train(RunConfig(**SMALL, seed=1), progress=False))
    assert first == again
    assert first != other


def test_augmented_runs_are_reproducible_too(run_store, mnist_ready):
    config = RunConfig(**{**SMALL, "dataset": "mnist_aug", "epochs": 1})
    assert numbers(train(config, progress=False)) == numbers(train(config, force=True, progress=False))


def test_a_finished_run_is_reused_not_retrained(run_store, mnist_ready, monkeypatch):
    run = train(RunConfig(**SMALL), progress=False)

    def must_not_train(*args, **kwargs):
        raise AssertionError("a finished run was trained again")

    monkeypatch.setattr(engine, "train_model", must_not_train)
    again = train(RunConfig(**SMALL), progress=False)
    assert again.run_id == run.run_id and again.record["started"] == run.record["started"]
    with pytest.raises(AssertionError, match="trained again"):
        train(RunConfig(**SMALL), force=True, progress=False)


def test_the_run_id_depends_on_everything_that_changes_the_numbers():
    base = RunConfig(**SMALL)
    ids = {
        base.run_id("cpu"),
        base.run_id("cuda"),
        RunConfig(**{**SMALL, "lr": 2e-3}).run_id("cpu"),
        RunConfig(**{**SMALL, "seed": 3}).run_id("cpu"),
        RunConfig(**{**SMALL, "train_size": 301}).run_id("cpu"),
        RunConfig(**{**SMALL, "model_kwargs": {"depth": 2}}).run_id("cpu"),
    }
    assert len(ids) == 6
    assert base.run_id("cpu") == RunConfig(**SMALL).run_id("cpu")
    assert base.run_id("cpu").startswith("ViTBNFFN-d1-lr0.001-bs100-s0-")


@pytest.mark.parametrize(
    "change, argument",
    [
        (dict(lr=-1.0), "lr"),
        (dict(batch_size=1), "batch_size"),
        (dict(epochs=0), "epochs"),
        (dict(dataset="cifar"), "dataset"),
        (dict(pipeline="turbo"), "pipeline"),
        (dict(train_size=1), "train_size"),
        (dict(model="ResNet"), "model"),
        (dict(model_kwargs={"pool": "max"}), "pool"),
    ],
)
def test_bad_run_configurations_are_refused_by_name(change, argument):
    with pytest.raises(ValueError, match=argument):
        RunConfig(**{**SMALL, **change})


class BlowsUp(nn.Module):
    """A classifier whose loss turns NaN after ``after`` training steps."""

    def __init__(self, after):
        super().__init__()
        self.linear = nn.Linear(784, 10)
        self.after, self.steps = after, 0

    def forward(self, x):
        out = self.linear(x.flatten(1))
        if self.training:
            self.steps += 1
            if self.steps > self.after:
                out = out * float("nan")
        return out


def test_a_nan_loss_is_recorded_as_diverged_at_that_epoch(run_store, mnist_ready, monkeypatch):
    monkeypatch.setattr(training, "build_model", lambda name, **kwargs: BlowsUp(after=4))  # 3 steps an epoch
    run = train(RunConfig(**{**SMALL, "epochs": 5}), progress=False)
    assert run.status == "diverged" and run.record["diverged_epoch"] == 2
    assert [e["diverged"] for e in run.record["epochs"]] == [False, True]
    assert run.record["epochs"][1]["train_loss"] != run.record["epochs"][1]["train_loss"]  # NaN kept, not hidden
    table = load_table()
    assert list(table["status"]) == ["diverged", "diverged"]


def test_load_table_is_tidy(run_store, mnist_ready):
    train(RunConfig(**SMALL), progress=False)
    train(RunConfig(**{**SMALL, "model": "ViTBN"}), progress=False)
    table = load_table()
    assert len(table) == 4 and set(table["model"]) == {"ViTBN", "ViTBNFFN"}
    assert {"run_id", "depth", "lr", "epoch", "train_loss", "test_acc", "class_acc_9", "train_seconds"} <= set(table)


def test_atomic_writes_leave_the_old_file_when_a_write_fails(tmp_path):
    path = tmp_path / "state.pt"
    atomic.torch_save({"ok": 1}, path)
    with pytest.raises((AttributeError, pickle.PicklingError)):
        atomic.torch_save({"bad": lambda: None}, path)  # lambdas cannot be pickled
    assert torch.load(path) == {"ok": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["state.pt"]


def test_a_run_killed_mid_epoch_resumes_with_nothing_lost_or_duplicated(run_store, mnist_ready, tmp_path, monkeypatch):
    config = dict(SMALL, epochs=4, train_size=3000)
    run_id = RunConfig(**config).run_id("cpu")
    record_path = run_store / run_id / "record.json"
    script = (
        "from vitbn_nb.engines.training import train\nfrom vitbn_nb.store.run_config import RunConfig\n"
        f"train(RunConfig(**{config!r}), device='cpu', progress=False)\n"
    )
    env = {**os.environ, "VITBN_RUNS_DIR": str(run_store)}
    child = subprocess.Popen([sys.executable, "-c", script], env=env)
    try:
        deadline = time.time() + 300
        finished = 0
        while finished < 2:
            assert child.poll() is None, "the training process ended before it could be killed"
            assert time.time() < deadline, "the training process made no progress"
            time.sleep(0.02)
            if record_path.exists():
                finished = len(json.loads(record_path.read_text())["epochs"])
        time.sleep(0.15)  # into the next epoch
    finally:
        child.kill()  # SIGKILL: no handler, no cleanup
        child.wait()
    killed_at = len(json.loads(record_path.read_text())["epochs"])
    assert killed_at in (2, 3) and (run_store / run_id / "checkpoint.pt").exists()

    resumed = train(RunConfig(**config), device="cpu", progress=False)
    assert resumed.status == "finished" and resumed.record["resumed_at"] == [killed_at]
    assert [e["epoch"] for e in resumed.record["epochs"]] == [1, 2, 3, 4]

    monkeypatch.setenv("VITBN_RUNS_DIR", str(tmp_path / "uninterrupted"))
    uninterrupted = train(RunConfig(**config), device="cpu", progress=False)
    assert numbers(resumed) == numbers(uninterrupted)
