"""The Ax optimisation: the protocol's search space, resumable and reproducible studies."""

import json
import math

import pandas as pd
import pytest
import torch

from vitbn_nb import hpo
from vitbn_nb.engines import engine, training
from vitbn_nb.store import runs
from vitbn_nb.store.records import write_record

REAL_TRAIN = training.train
TINY = dict(trial_epochs=1, train_size=200, test_size=100)


class Interrupted(Exception):
    """Stands in for a kill in the middle of a trial."""


def synthetic_train_model(
    model, train_data, test_data, *, epochs, lr, batch_size, start_epoch=0, on_epoch_end=None, **kwargs
):
    """Instead of training: an accuracy that peaks at lr 1e-3, batch 60 -- enough for Ax, in no time."""
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    accuracy = 95 - 5 * (math.log10(lr) + 3) ** 2 - (batch_size - 60) ** 2 / 500
    history = []
    for epoch in range(start_epoch + 1, epochs + 1):
        metrics = dict(
            epoch=epoch,
            train_loss=1.0 / epoch,
            train_seconds=0.01,
            data_seconds=0.0,
            diverged=False,
            test_acc=accuracy,
            class_acc=[accuracy] * 10,
            test_seconds=0.01,
        )
        history.append(metrics)
        on_epoch_end(metrics, model, optimizer)
    return history


def interrupt_at(monkeypatch, call):
    """Make ``training.train`` raise on its ``call``-th call (after Ax suggested that trial); return the calls."""
    real, calls = training.train, []

    def train(config, **kwargs):
        calls.append(config)
        if len(calls) == call:
            raise Interrupted(f"simulated interruption in trial {call}")
        return real(config, **kwargs)

    monkeypatch.setattr(training, "train", train)
    return calls


def count_trainings(monkeypatch, train_model=None):
    real, trained = train_model or engine.train_model, []

    def counted(*args, **kwargs):
        trained.append((kwargs["lr"], kwargs["batch_size"]))
        return real(*args, **kwargs)

    monkeypatch.setattr(engine, "train_model", counted)
    return trained


def columns(table):
    return table[["trial", "lr", "batch_size", "accuracy", "run_id", "generator", "best_so_far"]]


@pytest.mark.parametrize("model, lr_high", [("ViT", 1e-3), ("ViTBNFFN", 1e-2), ("ViTBN", 1e-2)])
def test_the_search_space_is_the_protocols(model, lr_high):
    lr, batch = hpo.parameter_configs(model)
    assert (lr.name, lr.parameter_type, lr.scaling, tuple(lr.bounds)) == ("lr", "float", "log", (1e-5, lr_high))
    assert (batch.name, batch.parameter_type, tuple(batch.bounds)) == ("batch_size", "int", (20, 120))
    assert batch.scaling in (None, "linear")


def test_unknown_models_and_bad_settings_are_refused_by_name():
    with pytest.raises(ValueError, match="model"):
        hpo.bounds("CNN")
    with pytest.raises(ValueError, match="trial_epochs|epochs"):
        hpo.Study("ViT", trial_epochs=0)
    with pytest.raises(ValueError, match="dataset"):
        hpo.Study("ViT", dataset="cifar")
    with pytest.raises(ValueError, match="trials"):
        hpo.optimise(hpo.Study("ViT", **TINY), 0)


def test_the_study_key_names_what_changes_a_trial_and_nothing_else():
    base = hpo.Study("ViTBN", **TINY)
    assert base.key("cpu") == hpo.Study("ViTBN", model_kwargs={"depth": 1}, **TINY).key("cpu")  # defaults spelled out
    others = [
        hpo.Study("ViT", **TINY),
        hpo.Study("ViTBN", model_kwargs={"depth": 6}, **TINY),
        hpo.Study("ViTBN", dataset="mnist_aug", **TINY),
        hpo.Study("ViTBN", **{**TINY, "trial_epochs": 2}),
        hpo.Study("ViTBN", **{**TINY, "train_size": 300}),
        hpo.Study("ViTBN", seed=1, **TINY),
    ]
    keys = {base.key("cpu"), base.key("cuda"), *(s.key("cpu") for s in others)}
    assert len(keys) == 8


def test_a_tiny_optimisation_completes_and_its_saved_state_reloads(run_store, mnist_ready):
    study = hpo.Study("ViTBNFFN", **TINY)
    table = hpo.optimise(study, 2, progress=False)
    assert list(table["trial"]) == [1, 2] and list(table["generator"]) == ["centre", "Sobol"]
    assert table.loc[0, "lr"] == pytest.approx(math.sqrt(1e-5 * 1e-2)) and table.loc[0, "batch_size"] == 70
    assert (table["best_so_far"] == table["accuracy"].cummax()).all()
    for _, row in table.iterrows():
        run = runs.Run(run_store / row["run_id"])
        assert run.status == "finished" and run.config.epochs == 1 and run.config.lr == row["lr"]
        assert row["accuracy"] == pytest.approx(run.final_accuracy, abs=1e-6)

    Client, _ = hpo._ax()
    client = Client.load_from_json_file(str(study.folder("cpu") / hpo.STATE_FILE))
    summary = client.summarize()
    assert list(summary["trial_status"]) == ["COMPLETED", "COMPLETED"]
    assert list(summary["accuracy"]) == list(table["accuracy"])
    ledger = json.loads((study.folder("cpu") / hpo.LEDGER_FILE).read_text())
    assert [ledger[i]["run_id"] for i in ("0", "1")] == list(table["run_id"])


def test_the_ledger_and_table_name_the_run_a_trial_read_not_the_one_planned(run_store, mnist_ready, monkeypatch):
    """A trial's run may be found under another id (a GPU's, or another engine's variant of it): the ledger keeps
    that id and the table reads that run."""

    def train_elsewhere(config, **kwargs):
        run = REAL_TRAIN(config, **kwargs)
        elsewhere = run.folder.rename(run.folder.parent / config.run_id("cuda"))
        record = json.loads((elsewhere / "record.json").read_text())
        write_record(elsewhere / "record.json", {**record, "run_id": elsewhere.name})
        return runs.Run(elsewhere)

    monkeypatch.setattr(training, "train", train_elsewhere)
    study = hpo.Study("ViTBNFFN", **TINY)
    table = hpo.optimise(study, 1, progress=False)
    ledger = json.loads((study.folder("cpu") / hpo.LEDGER_FILE).read_text())
    config = study.trial_config(table.loc[0, "lr"], table.loc[0, "batch_size"])
    assert ledger["0"]["run_id"] == table.loc[0, "run_id"] == config.run_id("cuda") != config.run_id("cpu")
    assert table.loc[0, "accuracy"] == pytest.approx(runs.Run(run_store / config.run_id("cuda")).final_accuracy)


def test_an_interrupted_optimisation_resumes_without_repeating_finished_trials(run_store, mnist_ready, monkeypatch):
    study = hpo.Study("ViTBN", **TINY)
    calls = interrupt_at(monkeypatch, 3)
    with pytest.raises(Interrupted):
        hpo.optimise(study, 3, progress=False)
    stored = {
        p.name: json.loads((p / "record.json").read_text())["started"]
        for p in run_store.iterdir()
        if (p / "record.json").exists()
    }
    assert len(stored) == 2

    monkeypatch.setattr(training, "train", REAL_TRAIN)
    trained = count_trainings(monkeypatch)
    table = hpo.optimise(study, 3, progress=False)
    assert list(table["trial"]) == [1, 2, 3]
    # Only trial 3 trained, and with the parameters Ax had suggested before the interruption.
    assert trained == [(calls[2].lr, calls[2].batch_size)]
    assert (table.loc[2, "lr"], table.loc[2, "batch_size"]) == (calls[2].lr, calls[2].batch_size)
    for run_id, started in stored.items():
        assert json.loads((run_store / run_id / "record.json").read_text())["started"] == started

    # A later call with the same budget trains nothing and returns the same table.
    trained.clear()
    assert columns(hpo.optimise(study, 3, progress=False)).equals(columns(table))
    assert trained == []


def test_asking_for_more_trials_extends_the_study_and_fewer_reads_its_first(run_store, mnist_ready, monkeypatch):
    study = hpo.Study("ViTBN", **TINY)
    first = hpo.optimise(study, 2, progress=False)
    trained = count_trainings(monkeypatch)
    more = hpo.optimise(study, 3, progress=False)
    assert len(trained) == 1 and columns(more.head(2)).equals(columns(first))
    assert columns(hpo.optimise(study, 1, progress=False)).equals(columns(first.head(1)))


def test_botorch_takes_over_after_the_initialisation_and_a_resume_gives_the_same_study(
    run_store, mnist_ready, tmp_path, monkeypatch
):
    monkeypatch.setattr(engine, "train_model", synthetic_train_model)
    study = hpo.Study("ViTBNFFN", **TINY)
    reference = hpo.optimise(study, hpo.INITIAL_TRIALS + 1, progress=False)
    assert list(reference["generator"]) == ["centre"] + ["Sobol"] * 4 + ["BoTorch"]
    assert reference["suggest_seconds"].notna().all()

    monkeypatch.setenv("VITBN_RUNS_DIR", str(tmp_path / "second"))
    calls = interrupt_at(monkeypatch, hpo.INITIAL_TRIALS + 1)  # stopped inside BoTorch's first trial
    with pytest.raises(Interrupted):
        hpo.optimise(study, hpo.INITIAL_TRIALS + 1, progress=False)
    assert len(calls) == hpo.INITIAL_TRIALS + 1
    monkeypatch.setattr(training, "train", REAL_TRAIN)
    resumed = hpo.optimise(study, hpo.INITIAL_TRIALS + 1, progress=False)
    assert columns(resumed).equals(columns(reference))  # same seed, same suggestions, BoTorch's included


def test_the_best_trial_and_its_json(run_store):
    rows = [
        dict(
            model="ViT",
            depth=6,
            dataset="mnist",
            trial=i + 1,
            lr=lr,
            batch_size=bs,
            accuracy=acc,
            run_id=f"r{i}",
            status="finished",
            generator="Sobol",
            trial_epochs=1,
            study="s",
        )
        for i, (lr, bs, acc) in enumerate([(1e-4, 50, 90.0), (2e-4, 60, 95.0), (3e-4, 70, 95.0)])
    ]
    table = pd.DataFrame(rows)
    best = hpo.best_trial(table)
    assert best["trial"] == 2  # the earliest of equals
    path = hpo.save_best(table, dataset="mnist", profile="smoke")
    assert path == run_store / "hpo" / "best-mnist-smoke.json"
    loaded = hpo.load_best("mnist", "smoke")
    assert loaded["ViT"]["lr"] == 2e-4 and loaded["ViT"]["batch_size"] == 60 and loaded["ViT"]["depth"] == 6
    assert hpo.load_best("mnist_aug", "smoke") is None
    with pytest.raises(ValueError, match="one model"):
        hpo.best_trial(pd.concat([table, table.assign(model="ViTBN")]))
