"""The MLflow mirror: off unless asked, and a faithful copy of each run when on."""

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import ClassVar

import pytest

from vitbn_nb.engines import engine
from vitbn_nb.engines.training import train
from vitbn_nb.store import tracking
from vitbn_nb.store.run_config import RunConfig

pytest.importorskip("mlflow")


class Interrupted(Exception):
    """Stands in for a kill: raised from inside training."""


TINY = dict(model="ViTBN", epochs=3, lr=1e-3, train_size=200, test_size=100)


def mirrored_runs(uri):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name(tracking.DEFAULT_EXPERIMENT)
    return client, ([] if experiment is None else client.search_runs([experiment.experiment_id]))


@pytest.fixture
def file_store(tmp_path, monkeypatch):
    uri = (tmp_path / "mlruns").as_uri()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.delenv("MLFLOW_EXPERIMENT_NAME", raising=False)
    return uri


def test_a_run_is_mirrored_with_params_metric_history_tags_and_model(run_store, mnist_ready, file_store):
    run = train(RunConfig(**TINY), progress=False)
    client, found = mirrored_runs(file_store)
    assert len(found) == 1
    mirrored = found[0]
    assert mirrored.info.status == "FINISHED" and mirrored.info.run_name == run.run_id
    params = mirrored.data.params
    assert params["model"] == "ViTBN" and float(params["lr"]) == 1e-3 and params["epochs"] == "3"
    assert params["model_kwargs.depth"] == "1" and params["train_size"] == "200" and params["dataset"] == "mnist"
    tags = mirrored.data.tags
    assert tags["run_id"] == run.run_id and tags["status"] == "finished" and tags["device"] == "cpu"
    assert tags["hardware"].startswith("CPU") and "version.torch" in tags
    history = client.get_metric_history(mirrored.info.run_id, "test_acc")
    assert sorted(m.step for m in history) == [1, 2, 3]
    assert [m.value for m in sorted(history, key=lambda m: m.step)] == [e["test_acc"] for e in run.record["epochs"]]
    assert len(client.get_metric_history(mirrored.info.run_id, "class_acc_9")) == 3
    artifacts = {a.path for a in client.list_artifacts(mirrored.info.run_id)}
    assert {"model.pt", "record.json"} <= artifacts
    local = client.download_artifacts(mirrored.info.run_id, "model.pt", dst_path=str(run_store.parent / "dl"))
    assert Path(local).read_bytes() == (run.folder / "model.pt").read_bytes()


def test_a_reused_run_is_not_logged_twice(run_store, mnist_ready, file_store):
    train(RunConfig(**TINY), progress=False)
    train(RunConfig(**TINY), progress=False)
    _, found = mirrored_runs(file_store)
    assert len(found) == 1


def test_a_resumed_run_logs_every_epoch_exactly_once(run_store, mnist_ready, file_store, monkeypatch):
    real = engine.train_model

    def stops_after_one_epoch(*args, on_epoch_end, **kwargs):
        def save_then_die(metrics, model, optimizer):
            on_epoch_end(metrics, model, optimizer)
            raise Interrupted("simulated interruption after epoch 1")

        return real(*args, on_epoch_end=save_then_die, **kwargs)

    monkeypatch.setattr(engine, "train_model", stops_after_one_epoch)
    with pytest.raises(Interrupted):
        train(RunConfig(**TINY), progress=False)
    assert mirrored_runs(file_store)[1] == []  # nothing mirrored while the run is unfinished
    monkeypatch.setattr(engine, "train_model", real)
    run = train(RunConfig(**TINY), progress=False)
    assert run.record["resumed_at"] == [1]
    client, found = mirrored_runs(file_store)
    assert len(found) == 1
    steps = [m.step for m in client.get_metric_history(found[0].info.run_id, "train_loss")]
    assert sorted(steps) == [1, 2, 3]
    assert found[0].data.tags["resumed_at"] == "1"


def test_mlflow_true_without_a_uri_uses_sqlite_beside_the_run_store(run_store, mnist_ready, tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)  # MLflow's own default would drop ./mlruns here
    run = train(RunConfig(**{**TINY, "epochs": 1}), progress=False, mlflow=True)
    assert list(cwd.iterdir()) == []
    uri = f"sqlite:///{run_store / 'mlflow.db'}"
    _, found = mirrored_runs(uri)
    assert [r.data.tags["run_id"] for r in found] == [run.run_id]
    assert any(p.name == "model.pt" for p in (run_store / "mlartifacts").rglob("*"))


def test_without_mlflow_configured_mlflow_is_never_imported(run_store, mnist_ready):
    script = (
        "import sys, json\n"
        "from vitbn_nb.engines.training import train\nfrom vitbn_nb.store.run_config import RunConfig\n"
        f"train(RunConfig(**{dict(TINY, epochs=1)!r}), progress=False)\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] == 'mlflow')))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    env["VITBN_RUNS_DIR"] = str(run_store)
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


def test_flatten_turns_nested_config_into_string_params():
    assert tracking.flatten({"a": 1, "b": {"c": None, "d": {"e": 0.5}}}) == {"a": "1", "b.c": "None", "b.d.e": "0.5"}


def test_mirroring_refuses_an_unfinished_run(tmp_path):
    class Unfinished:
        record: ClassVar[dict] = {"run_id": "x", "status": "running"}

    with pytest.raises(ValueError, match="running"):
        tracking.mirror_run(Unfinished(), uri=(tmp_path / "m").as_uri())


def test_optimisation_trials_are_mirrored_and_tagged(run_store, mnist_ready, file_store):
    from vitbn_nb import hpo

    study = hpo.Study("ViTBN", trial_epochs=1, train_size=200, test_size=100)
    table = hpo.optimise(study, 2, progress=False)
    _, found = mirrored_runs(file_store)
    tags = {r.data.tags["run_id"]: r.data.tags for r in found}
    assert set(tags) == set(table["run_id"])
    for _, row in table.iterrows():
        assert tags[row["run_id"]]["hpo.trial"] == str(row["trial"])
        assert tags[row["run_id"]]["hpo.study"] == study.key("cpu")
        assert tags[row["run_id"]]["hpo.generator"] == row["generator"]
