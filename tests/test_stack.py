"""vitbn_nb.engines.stack: runs of one architecture trained together as one stacked model equal the same runs trained
one by one (up to fp32 rounding), are stored as ordinary runs, and resume after a kill like any run."""

import json
import os
import subprocess
import sys
import time

import pytest
import torch

from vitbn_nb.engines import training
from vitbn_nb.store import runs
from vitbn_nb.store.runs import RunConfig

# Augmented data, so each member's own augmentation stream is part of what must match; BatchNorm in the encoder,
# so each member's own running statistics are too.
BASE = dict(model="ViTBNFFN", model_kwargs={"depth": 2}, dataset="mnist_aug", epochs=3, train_size=400, test_size=300)
MEMBERS = [dict(seed=0, lr=1e-3), dict(seed=1, lr=1e-3), dict(seed=0, lr=3e-3)]


def configs(engine: str, **changes) -> list[RunConfig]:
    return [RunConfig(**{**BASE, **changes}, **member, engine=engine) for member in MEMBERS]


def per_epoch(run: runs.Run) -> list[tuple]:
    return [(e["epoch"], e["train_loss"], e["test_acc"]) for e in run.record["epochs"]]


@pytest.fixture
def one_by_one(tmp_path_factory, monkeypatch, mnist_ready):
    monkeypatch.setenv("VITBN_RUNS_DIR", str(tmp_path_factory.mktemp("eager")))
    return training.train_all(configs("eager"), progress=False)


def test_a_stack_equals_its_runs_trained_one_by_one(one_by_one, run_store):
    stacked = training.train_all(configs("stacked"), progress=False)
    assert len({r.run_id for r in stacked}) == 3 and all(r.status == "finished" for r in stacked)
    for alone, together in zip(one_by_one, stacked):
        assert alone.run_id != together.run_id  # the engine kind is part of a run's identity
        assert together.record["config"]["engine"] == "stacked" and "engine" not in alone.record["config"]
        assert all(e["stacked_runs"] == 3 for e in together.record["epochs"])
        for (epoch, loss, acc), (epoch_, loss_, acc_) in zip(per_epoch(alone), per_epoch(together), strict=True):
            assert epoch == epoch_
            assert loss_ == pytest.approx(loss, rel=1e-4)
            assert abs(acc_ - acc) <= 100 / BASE["test_size"]  # at most one test image classified differently
    # The members differ from one another: their own seeds, data orders and learning rates were used.
    assert len({per_epoch(r)[-1][1] for r in stacked}) == 3

    # Each member's weights and BatchNorm statistics are its own run's: closest to the same run trained alone
    # (Adam turns rounding differences into steps of up to lr, so they drift apart a little), far from the others.
    def statistics(run):
        state = run.load_model("cpu").state_dict()
        return torch.cat([v.flatten() for k, v in state.items() if k.endswith(("running_mean", "running_var"))])

    alone_stats, together_stats = [statistics(r) for r in one_by_one], [statistics(r) for r in stacked]
    for i, mine in enumerate(together_stats):
        distances = [(mine - other).abs().max().item() for other in alone_stats]
        assert distances[i] < 0.02 and distances[i] == min(distances), distances


def test_a_stacked_run_resumes_after_a_kill(run_store, mnist_ready, tmp_path, monkeypatch):
    stack = configs("stacked", epochs=4, train_size=1500)
    record = run_store / stack[0].run_id("cpu") / "record.json"
    script = (
        "from vitbn_nb.engines.training import train_all\nfrom vitbn_nb.store.run_config import RunConfig\n"
        f"train_all([RunConfig(**c) for c in {[c.to_dict() for c in stack]!r}], device='cpu', progress=False)\n"
    )
    child = subprocess.Popen([sys.executable, "-c", script], env={**os.environ, "VITBN_RUNS_DIR": str(run_store)})
    try:
        give_up = time.time() + 300
        while not record.exists() or len(json.loads(record.read_text())["epochs"]) < 2:
            assert child.poll() is None, "the training process ended before it could be killed"
            assert time.time() < give_up, "the training process made no progress"
            time.sleep(0.02)
    finally:
        child.kill()  # SIGKILL: no handler, no cleanup
        child.wait()
    killed_at = [len(json.loads((run_store / c.run_id("cpu") / "record.json").read_text())["epochs"]) for c in stack]
    assert min(killed_at) >= 1

    resumed = training.train_all(stack, progress=False)
    assert all(r.status == "finished" and r.record["resumed_at"] for r in resumed)
    assert all(len(r.record["segments"]) == 2 for r in resumed)  # the hardware of each segment is recorded
    monkeypatch.setenv("VITBN_RUNS_DIR", str(tmp_path / "uninterrupted"))
    uninterrupted = training.train_all(stack, progress=False)
    # The kill can fall between two members' checkpoints: members that stand at different epochs resume as separate
    # stacks, whose batched kernels round differently, so the numbers agree to fp32 rounding (bit for bit otherwise).
    for again, straight in zip(resumed, uninterrupted, strict=True):
        for (epoch, loss, acc), (epoch_, loss_, acc_) in zip(per_epoch(again), per_epoch(straight), strict=True):
            assert epoch == epoch_ and loss == pytest.approx(loss_, rel=1e-4)
            assert abs(acc - acc_) <= 100 / BASE["test_size"]


def test_runs_that_cannot_share_a_stack_are_refused():
    with pytest.raises(ValueError, match="dropout"):
        RunConfig(**{**BASE, "model_kwargs": {"depth": 2, "dropout": 0.1}}, engine="stacked")
    with pytest.raises(ValueError, match="engine="):
        RunConfig(**BASE, engine="graph")
    # runs that differ in more than seed and lr train in stacks of their own
    longer = RunConfig(**{**BASE, "epochs": 5}, engine="stacked")
    assert training.units([*configs("stacked"), longer]) == [configs("stacked"), [longer]]
