"""The records committed beside figures/: read beneath the run store, never written, staged with the figures."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from vitbn_nb import paths
from vitbn_nb.engines import training
from vitbn_nb.profiles import PROFILE_SIZE
from vitbn_nb.store import committed, runs
from vitbn_nb.store.run_config import RunConfig
from vitbn_nb.train import retrain

TINY = dict(model="ViTBNFFN", model_kwargs={"depth": 1}, epochs=1, lr=1e-3, train_size=200, test_size=100)
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def committed_store(tmp_path, monkeypatch, mnist_ready):
    """A run trained into one store, its record (no weights) committed in a figures folder, and an empty store."""
    monkeypatch.setenv("VITBN_RUNS_DIR", str(tmp_path / "trained"))
    run = training.train(RunConfig(**TINY), progress=False)
    figures = tmp_path / "figures"
    (figures / "records" / run.run_id).mkdir(parents=True)
    shutil.copyfile(run.folder / "record.json", figures / "records" / run.run_id / "record.json")
    monkeypatch.setenv("VITBN_BOOK_FIGURES_DIR", str(figures))
    monkeypatch.setenv("VITBN_COMMITTED_RECORDS", "use")
    monkeypatch.setenv("VITBN_RUNS_DIR", str(tmp_path / "fresh"))
    return run


@pytest.mark.slow
def test_a_committed_run_is_read_not_trained_and_nothing_is_written(committed_store, tmp_path):
    run = training.train(RunConfig(**TINY), progress=False)
    assert run.folder == paths.committed_records_dir() / committed_store.run_id
    assert run.record["epochs"] == committed_store.record["epochs"]
    assert not any((tmp_path / "fresh").glob("*/record.json"))


def test_retrain_trains_a_committed_run_into_the_store_and_leaves_its_record(committed_store, tmp_path):
    # the fix a chapter names when it needs the weights a committed record leaves out
    committed_record = paths.committed_records_dir() / committed_store.run_id / "record.json"
    before = committed_record.read_bytes()
    run = retrain(committed_store.run_id, progress=False)
    assert run.folder == tmp_path / "fresh" / committed_store.run_id and (run.folder / "model.pt").is_file()
    assert committed_record.read_bytes() == before
    assert training.train(RunConfig(**TINY), progress=False).folder == run.folder  # the store's own copy wins now
    with pytest.raises(ValueError, match="nor among the committed records"):
        retrain("ViT-d6-lr0.001-bs100-s0-0000000000", progress=False)


@pytest.mark.slow
def test_from_scratch_leaves_the_committed_records_out(committed_store, tmp_path, monkeypatch):
    monkeypatch.setenv("VITBN_COMMITTED_RECORDS", "ignore")
    run = training.train(RunConfig(**TINY), progress=False)
    assert run.folder == tmp_path / "fresh" / committed_store.run_id
    assert (run.folder / "model.pt").is_file()


@pytest.mark.slow
def test_a_measurement_missing_from_a_committed_record_is_named_not_taken(committed_store):
    run = training.train(RunConfig(**TINY), progress=False)
    with pytest.raises(ValueError, match="lacks the measurement 'latency'.*--from-scratch"):
        runs.measured(run, "latency", lambda: 1.0, None)
    assert "measurements" not in json.loads((run.folder / "record.json").read_text())


@pytest.mark.slow
def test_staging_commits_the_records_the_manifest_names_without_weights(committed_store, tmp_path, monkeypatch):
    store = tmp_path / "trained"
    study = store / "hpo" / "ViTBNFFN-d1-study"
    study.mkdir(parents=True)
    (study / "trials.json").write_text(json.dumps({"0": {"run_id": committed_store.run_id, "accuracy": 50.0}}))
    (study / "ax_state.json").write_text("{}")
    (study / "notes.txt").write_text("not state")
    (store / "hpo" / "best-mnist-cpu.json").write_text("{}")
    (store / "hpo" / "best-mnist-smoke.json").write_text("{}")
    staging = tmp_path / "staging"
    staging.mkdir()
    outputs = {"a": {"profile": "cpu", "run_ids": [committed_store.run_id, "gone-run"]}}
    (staging / "manifest.json").write_text(json.dumps({"outputs": outputs}))
    monkeypatch.setenv("VITBN_COMMITTED_RECORDS", "ignore")
    missing = committed.stage(staging, store, campaign=())
    records = staging / "records"
    assert missing == ["gone-run"]
    assert sorted(p.name for p in (records / committed_store.run_id).iterdir()) == ["record.json"]
    assert sorted(p.name for p in (records / "hpo" / study.name).iterdir()) == ["ax_state.json", "trials.json"]
    assert sorted(p.name for p in (records / "hpo").glob("best-*")) == ["best-mnist-cpu.json"]


def test_a_study_that_chosen_values_name_is_staged_with_all_its_trials(tmp_path, monkeypatch):
    # Chapter 06's outputs name only the runs it trained with the chosen values; without the study behind
    # best-mnist_aug-cpu.json a render from the committed records would optimise (train) again.
    store = tmp_path / "trained"
    for run_id in ("final-run", "trial-0", "trial-1"):
        (store / run_id).mkdir(parents=True)
        (store / run_id / "record.json").write_text(json.dumps({"run_id": run_id}))
        (store / run_id / "model.pt").write_bytes(b"weights stay behind")
    study = store / "hpo" / "ViT-d6-mnist_aug-study"
    study.mkdir(parents=True)
    trials = {"0": {"run_id": "trial-0", "accuracy": 40.0}, "1": {"run_id": "trial-1", "accuracy": 48.0}}
    (study / "trials.json").write_text(json.dumps(trials))
    (study / "ax_state.json").write_text("{}")
    unnamed = store / "hpo" / "ViT-d6-other-study"
    unnamed.mkdir()
    (unnamed / "trials.json").write_text(json.dumps({"0": {"run_id": "elsewhere", "accuracy": 1.0}}))
    chosen = {"ViT": {"lr": 1e-3, "batch_size": 20, "run_id": "trial-1", "study": study.name}}
    (store / "hpo" / "best-mnist_aug-cpu.json").write_text(json.dumps(chosen))
    staging = tmp_path / "staging"
    staging.mkdir()
    (staging / "manifest.json").write_text(json.dumps({"outputs": {"a": {"profile": "cpu", "run_ids": ["final-run"]}}}))
    monkeypatch.setenv("VITBN_COMMITTED_RECORDS", "ignore")
    assert committed.stage(staging, store, campaign=()) == []
    records = staging / "records"
    assert sorted(p.name for p in (records / "hpo").iterdir()) == ["ViT-d6-mnist_aug-study", "best-mnist_aug-cpu.json"]
    assert sorted(p.name for p in records.iterdir() if p.name != "hpo") == ["final-run", "trial-0", "trial-1"]
    assert not list(records.glob("*/model.pt"))


def test_stored_path_prefers_the_run_store_and_never_follows_a_link(tmp_path, monkeypatch):
    monkeypatch.setenv("VITBN_RUNS_DIR", str(tmp_path / "runs"))
    monkeypatch.setenv("VITBN_BOOK_FIGURES_DIR", str(tmp_path / "figures"))
    monkeypatch.setenv("VITBN_COMMITTED_RECORDS", "use")
    (tmp_path / "figures" / "records" / "a").mkdir(parents=True)
    assert paths.stored_path("a") == tmp_path / "figures" / "records" / "a"
    (tmp_path / "runs" / "a").mkdir()
    assert paths.stored_path("a") == tmp_path / "runs" / "a"
    (tmp_path / "figures" / "records" / "b").symlink_to(tmp_path)
    assert paths.stored_path("b") == tmp_path / "runs" / "b"
    monkeypatch.setenv("VITBN_COMMITTED_RECORDS", "ignore")
    assert paths.committed_records_dir() is None


@pytest.mark.slow
@pytest.mark.book
def test_two_chapters_rendered_from_the_committed_records_reproduce_the_committed_csvs(tmp_path, mnist_ready):
    """A fresh clone's `make book TRAIN=never` for chapters 01 and 05: no training, no bundle, the same CSVs."""
    manifest = json.loads((ROOT / "figures" / "manifest.json").read_text())["outputs"]
    # the book's profile: its smallest (a cpu book renders a chapter at paper where every paper run is held)
    profile = min({entry["profile"] for entry in manifest.values()}, key=PROFILE_SIZE.get)
    chapters = ("01", "05")
    env = {
        "VITBN_RUNS_DIR": str(tmp_path / "empty-store"),
        "VITBN_COMMITTED_RECORDS": "use",
        "VITBN_BOOK_FIGURES_DIR": str(ROOT / "figures"),
    }
    command = [sys.executable, "-m", "vitbn_nb", "book", "--profile", profile, "--no-train", "--no-html"]
    command += ["--chapters", *chapters, "--figures", str(tmp_path / "rendered"), "--output", str(tmp_path / "build")]
    done = subprocess.run(
        command, cwd=ROOT, env={**__import__("os").environ, **env}, capture_output=True, text=True, timeout=1200
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    tables = [
        name
        for name, entry in manifest.items()
        if entry["kind"] == "table" and entry["chapter"][:2] in chapters and entry["run_ids"]
    ]
    assert tables, "the committed manifest lists no table of these chapters"
    for name in tables:
        committed_csv = pd.read_csv(ROOT / "figures" / f"{name}.csv")
        rendered_csv = pd.read_csv(tmp_path / "rendered" / f"{name}.csv")
        pd.testing.assert_frame_equal(rendered_csv, committed_csv, obj=name)
    assert not any((tmp_path / "empty-store").glob("*/record.json")), "a run was trained"
