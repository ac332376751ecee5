"""A store a user cannot silently break: strict parameters, one writer per run, checksums, check and retrain."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from vitbn_nb import profiles
from vitbn_nb.__main__ import main
from vitbn_nb.app import server
from vitbn_nb.engines import training
from vitbn_nb.judging import claims as shared_claims
from vitbn_nb.judging import selection
from vitbn_nb.publishing import results
from vitbn_nb.store import damage, records, run_folder, runs
from vitbn_nb.store.runs import RunConfig, RunStoreError
from vitbn_nb.train import retrain

ROOT = Path(__file__).resolve().parent.parent
TINY = dict(model="ViTBNFFN", model_kwargs={"depth": 1}, epochs=1, lr=1e-3, train_size=200, test_size=100)


# -- strict parameters ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "given, expected", [(True, True), (False, False), ("false", False), ("True", True), (" FALSE ", False)]
)
def test_force_accepts_booleans_and_the_plain_words(given, expected):
    assert profiles.flag("force", given) is expected


@pytest.mark.parametrize("bad", ["no", "0", "", 1, 0, None, "False please"])
def test_any_other_force_is_refused_by_name(bad):
    with pytest.raises(ValueError, match="force=.* is not allowed"):
        profiles.flag("force", bad)


def test_a_string_force_never_reaches_the_store_as_retrain(run_store, mnist_ready):
    run = training.train(RunConfig(**TINY), progress=False)
    started = run.record["started"]
    assert training.train(RunConfig(**TINY), force="false", progress=False).record["started"] == started  # kept
    with pytest.raises(ValueError, match="force='yes'"):
        training.train_all([RunConfig(**TINY)], force="yes", progress=False)


# -- one writer per run --------------------------------------------------------------------------

TRAIN_ONE = """
import json, sys, time
from vitbn_nb.engines.training import train
from vitbn_nb.store.runs import RunConfig
while time.time() < float(sys.argv[2]):  # both processes start training at the same instant
    time.sleep(0.01)
run = train(RunConfig(**json.loads(sys.argv[1])), progress=True)
print("STARTED", run.record["started"], run.record["run_id"], flush=True)
"""


def test_two_processes_on_one_store_train_each_run_once(run_store, mnist_ready):
    config = {**TINY, "epochs": 3, "train_size": 3000, "model_kwargs": {"depth": 2}}
    env = {**os.environ, "VITBN_RUNS_DIR": str(run_store), "TQDM_DISABLE": "1"}
    start = str(time.time() + 20)  # after both have imported torch
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", TRAIN_ONE, json.dumps(config), start],
            env=env,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for _ in range(2)
    ]
    outputs = [p.communicate(timeout=600)[0] for p in processes]
    assert all(p.returncode == 0 for p in processes), outputs
    started = [line.split()[1:] for out in outputs for line in out.splitlines() if line.startswith("STARTED")]
    assert len(started) == 2 and started[0] == started[1]  # the second process reused the first one's run
    assert sum("being trained by another process" in out for out in outputs) == 1
    record = json.loads((run_store / started[0][1] / "record.json").read_text())
    assert record["resumed_at"] == [] and len(record["epochs"]) == 3


def test_a_held_run_lock_is_seen_and_looking_writes_nothing(tmp_path):
    store = tmp_path / "store"
    assert not run_folder.is_locked("r", store) and not store.exists()  # no lock file: nobody trains it
    with run_folder.run_lock("r", progress=False, store=store):
        assert run_folder.is_locked("r", store)  # another lock on the file cannot be taken while it is held
    assert not run_folder.is_locked("r", store)
    assert [p.name for p in (store / records.LOCKS).iterdir()] == ["r.lock"]  # the run's own, nothing more


def test_epochs_record_the_machine_load_and_chapters_flag_contention(run_store, mnist_ready):
    run = training.train(RunConfig(**TINY), progress=False)
    epoch = run.record["epochs"][0]
    assert {"load_1min", "busy_processes", "cpu_cores", "other_cpu_seconds", "test_other_cpu_seconds"} <= set(epoch)
    assert epoch["other_cpu_seconds"] is None or epoch["other_cpu_seconds"] >= 0
    assert epoch["test_other_cpu_seconds"] is None or epoch["test_other_cpu_seconds"] >= 0
    table = pd.DataFrame({"load_1min": [0.5, 5.0, 1.0], "cpu_cores": [2, 2, 2]})
    assert results.contention(table) == "1/3 epochs"
    assert results.contention(pd.DataFrame({"train_seconds": [1.0]})) == "not recorded"
    # one other busy process beside a run on both cores brings the load near 3; the run alone keeps it near 2
    beside = pd.DataFrame({"load_1min": [2.1, 2.9, None], "cpu_cores": [2, 2, 2]})
    assert results.contention(beside) == "1/2 epochs"


def test_the_other_processes_cpu_seconds_decide_where_an_epoch_records_them():
    """A short burst beside a long epoch leaves the load as it ended near the cores; the other processes' CPU
    seconds over the epoch see it. Records without that field keep the load rule."""
    table = pd.DataFrame(
        {
            "train_seconds": [200.0, 200.0, 200.0, 200.0],
            # daemons alone; a test suite for a minute, ended before the epoch (load back near the cores); a high load
            # whose processes used no CPU (they overrule it); an older record without the field (the load decides)
            "other_cpu_seconds": [2.0, 60.0, 2.0, None],
            "load_1min": [2.0, 2.3, 3.4, 3.4],
            "cpu_cores": [2, 2, 2, 2],
        }
    )
    assert selection.timed_busy(table).tolist() == [False, True, False, True]
    assert results.contention(table) == "2/4 epochs"


def test_an_epoch_whose_test_pass_ran_beside_other_work_is_left_out_too():
    """Article 1's r_v times the test pass: other work during it flags the epoch, as during its training; an epoch
    recorded before the test pass was watched keeps its training's verdict."""
    table = pd.DataFrame(
        {
            "train_seconds": [200.0, 200.0, 200.0],
            "other_cpu_seconds": [2.0, 2.0, 2.0],
            "test_seconds": [10.0, 10.0, 10.0],
            "test_other_cpu_seconds": [0.1, 8.0, None],  # quiet; most of a core beside the test pass; not recorded
        }
    )
    assert selection.timed_busy(table).tolist() == [False, True, False]
    # a pass of a tenth of a second: two ticks of the CPU clock are its grain, not work beside it
    short = table.assign(test_seconds=0.1, test_other_cpu_seconds=[0.02, 0.06, None])
    assert selection.timed_busy(short).tolist() == [False, True, False]
    assert selection.shown_times(table)["test_seconds"].isna().tolist() == [False, True, False]


@pytest.mark.skipif(not Path("/proc/stat").exists(), reason="the machine's CPU seconds are read from /proc/stat")
def test_work_beside_this_process_is_counted_as_other_work():
    from vitbn_nb.system import OtherWork

    other = OtherWork()
    burn = "import time\nend = time.process_time() + 1\nwhile time.process_time() < end: pass"
    subprocess.run([sys.executable, "-c", burn], check=True)
    seen = other.seconds()
    assert seen >= 0.9  # the child's second of CPU (more where other work ran too)


def test_every_time_shown_leaves_out_the_epochs_timed_beside_other_work():
    """The per-run means behind article 1's ratios and the rule's gains: a busy epoch is never averaged in."""
    rows = []
    for seed in range(3):
        # ViT's second epoch was timed while another process ran, and took ten times as long
        for model, seconds, load in (("ViT", [30.0, 300.0, 30.0], [2.0, 4.0, 2.0]), ("ViTBN", [10.0] * 3, [2.0] * 3)):
            for epoch, (took, load_1min) in enumerate(zip(seconds, load), start=1):
                rows.append(
                    dict(
                        model=model,
                        seed=seed,
                        epoch=epoch,
                        train_seconds=took,
                        test_seconds=took / 10,
                        load_1min=load_1min,
                        cpu_cores=2,
                    )
                )
    table = pd.DataFrame(rows)
    assert len(selection.timed_epochs(table)) == 15
    assert (
        str(results.speed_ratios(table, baseline="ViT").set_index("model").loc["ViTBN", "r_t"]) == "3.00 [3.00, 3.00]"
    )
    gains = shared_claims.run_gains(table, dict(model="ViTBN"), dict(model="ViT"), "train_seconds")
    assert list(gains) == [pytest.approx(100 * (1 - 10 / 30))] * 3


def test_a_seeds_two_runs_are_timed_against_each_other_only_on_one_machine():
    """Article 1's ratios and the rule's gains pair a seed's runs on the machine that timed both; a pair resumed on
    another machine is compared on the machine that timed most of it, and a seed whose runs share no machine is left
    out."""
    rows = []
    machines = {  # seed: (ViT's machine per epoch, ViTBN's)
        0: (["A", "A", "A"], ["A", "A", "A"]),
        1: (["A", "A", "A"], ["B", "B", "B"]),  # no machine in common: left out
        2: (["A", "A", "B"], ["A", "A", "B"]),  # both resumed on B, where ViTBN is relatively slower
    }
    seconds = {("ViT", "A"): 30.0, ("ViTBN", "A"): 10.0, ("ViT", "B"): 60.0, ("ViTBN", "B"): 25.0}
    for seed, (vit_on, bn_on) in machines.items():
        for model, on in (("ViT", vit_on), ("ViTBN", bn_on)):
            for epoch, machine in enumerate(on, start=1):
                took = seconds[model, machine]
                rows.append(
                    dict(
                        model=model,
                        seed=seed,
                        epoch=epoch,
                        machine=f"CPU: {machine} (2 cores)",
                        train_seconds=took,
                        test_seconds=took / 10,
                        load_1min=0.5,
                        cpu_cores=2,
                    )
                )
    table = pd.DataFrame(rows)
    ratios = results.speed_ratios(table, baseline="ViT").set_index("model")
    # seed 2 on A (two epochs each) alone: 3.00, where pooling both machines would give 40 / 15 = 2.67
    assert (str(ratios.loc["ViTBN", "r_t"]), ratios.loc["ViTBN", "seeds"]) == ("3.00 [3.00, 3.00]", 2)
    gains = shared_claims.run_gains(table, dict(model="ViTBN"), dict(model="ViT"), "train_seconds")
    assert list(gains.index) == [0, 2] and list(gains) == [pytest.approx(100 * (1 - 10 / 30))] * 2
    # a gain names the machines that timed its pairs (seed 0 and most of seed 2 on A), not every machine that
    # trained the table (B timed seed 1, which pairs with nothing, and one epoch of seed 2)
    assert shared_claims.gain_hardware(table, dict(model="ViTBN"), dict(model="ViT"), "train_seconds") == (
        "CPU: A (2 cores)"
    )


def test_a_time_the_book_shows_comes_from_one_machine_and_no_busy_epoch():
    """An absolute time (seconds per epoch, a curve, a median) is never pooled over two machines nor taken from an
    epoch timed beside other work; the accuracies of those epochs stay."""
    table = pd.DataFrame(
        {
            "run_id": ["a", "a", "a", "b", "b", "c"],
            "machine": ["CPU: A (2 cores)"] * 2 + ["CPU: B (2 cores)", "CPU: A (2 cores)", "CPU: A (2 cores)", None],
            "train_seconds": [10.0, 12.0, 30.0, 11.0, 90.0, 9.0],
            "test_seconds": [1.0, 1.2, 3.0, 1.1, 9.0, 0.9],
            "other_cpu_seconds": [0.0, 0.0, 0.0, 0.0, 60.0, 0.0],  # b's second epoch timed beside other work
            "test_acc": [90.0, 91.0, 92.0, 89.0, 93.0, 88.0],
        }
    )
    assert selection.shown_machine(table) == "CPU: A (2 cores)"  # three quiet epochs, against B's one
    shown = selection.shown_times(table)
    assert shown["train_seconds"].isna().tolist() == [False, False, True, False, True, True]
    assert shown["test_seconds"].isna().tolist() == [False, False, True, False, True, True]
    assert shown["test_acc"].tolist() == table["test_acc"].tolist()
    assert results.contention(table) == "1/6 epochs"
    assert results.machine_note(table) == (
        "; seconds from CPU: A (2 cores) only (2/6 epochs timed quiet on other machines left out, so a time may rest "
        "on fewer seeds than an accuracy)"
    )
    assert results.machine_note(table.iloc[:2]) == ""  # one machine: nothing to say


def test_each_epoch_is_named_by_the_machine_that_trained_it():
    cpu = lambda name: {"device": "cpu", "cpu": name, "cpu_cores": 2}
    record = {"hardware": cpu("B"), "epochs": [{}] * 4}
    record["segments"] = [{"from_epoch": 0, "hardware": cpu("A")}, {"from_epoch": 2, "hardware": cpu("B")}]
    assert runs.epoch_machines(record) == ["CPU: A (2 cores)"] * 2 + ["CPU: B (2 cores)"] * 2
    assert runs.epoch_machines({"hardware": cpu("A"), "epochs": [{}]}) == ["CPU: A (2 cores)"]  # an older record
    # a checkpoint resumed without its record: the epochs before the segment that resumed it ran somewhere unknown
    lost = {"hardware": cpu("B"), "epochs": [{}] * 3, "segments": [{"from_epoch": 2, "hardware": cpu("B")}]}
    assert runs.epoch_machines(lost) == [None, None, "CPU: B (2 cores)"]


def test_a_seed_pairs_its_times_only_where_one_host_timed_both_runs():
    # machines of one CPU name differ in speed, so the recorded host is part of the machine a pair of times needs;
    # records without one pair as they always did
    def record(model: str, host: str | None, seconds: float) -> dict:
        hardware = {"device": "cpu", "cpu": "AMD EPYC", "cpu_cores": 2} | ({"host": host} if host else {})
        epoch = dict(epoch=1, train_loss=0.1, test_acc=97.0, diverged=False, train_seconds=seconds, test_seconds=5.0)
        config = {"model": model, "model_kwargs": {"depth": 6}, "epochs": 1, "seed": 0, "lr": 0.001}
        return {"run_id": f"{model}-{host}", "status": "finished", "stream": "cpu-generators", "hardware": hardware,
                "config": config, "epochs": [epoch]}  # fmt: skip

    def gains(*records) -> list[float]:
        table = runs.load_table(list(records))
        return shared_claims.run_gains(table, {"model": "ViTBN"}, {"model": "ViT"}, "train_seconds").tolist()

    fast, slow = "0123456789ab", "ba9876543210"
    assert gains(record("ViT", fast, 100.0), record("ViTBN", slow, 150.0)) == []  # one name, two hosts: no pair
    assert gains(record("ViT", slow, 150.0), record("ViTBN", slow, 150.0)) == [0.0]
    assert gains(record("ViT", None, 100.0), record("ViTBN", None, 150.0)) == [-50.0]  # hosts unrecorded, as before
    assert gains(record("ViT", None, 100.0), record("ViTBN", slow, 150.0)) == []
    table = runs.load_table([record("ViT", slow, 150.0), record("ViT", "not a host\x1b[2J", 150.0)])
    assert table["machine"].tolist() == ["CPU: AMD EPYC (2 cores) on host ba9876543210", "CPU: AMD EPYC (2 cores)"]
    assert runs.epoch_machines(record("ViT", slow, 1.0)) == ["CPU: AMD EPYC (2 cores)"]  # the name alone prices runs


# -- a store that explains itself ----------------------------------------------------------------


@pytest.fixture
def store_with_damage(run_store, mnist_ready):
    """Three finished runs: one record truncated, one model truncated, one turned into an unfinished run whose
    checkpoint is truncated."""
    made = [training.train(RunConfig(**TINY, seed=seed), progress=False) for seed in range(3)]
    record_run, model_run, checkpoint_run = made
    text = (record_run.folder / "record.json").read_text()
    (record_run.folder / "record.json").write_text(text[: len(text) // 2])
    data = (model_run.folder / "model.pt").read_bytes()
    (model_run.folder / "model.pt").write_bytes(data[: len(data) // 2])
    record = records.read_record(checkpoint_run.folder)
    (checkpoint_run.folder / "checkpoint.pt").write_bytes(b"\x80truncated")
    record.update(status="running", checksums={"checkpoint.pt": "0" * 64})
    records.write_record(checkpoint_run.folder / "record.json", record)
    return {"record": record_run.run_id, "model": model_run.run_id, "checkpoint": checkpoint_run.run_id}


def test_runs_check_lists_every_damaged_run_with_its_file_and_fix(store_with_damage, capsys):
    damaged = damage.check_store()
    assert set(damaged["run"]) == set(store_with_damage.values())
    by_run = damaged.set_index("run")
    assert "record.json" in by_run.loc[store_with_damage["record"], "problem"]
    assert "model.pt" in by_run.loc[store_with_damage["model"], "problem"]
    assert "checkpoint.pt" in by_run.loc[store_with_damage["checkpoint"], "problem"]
    fixes = by_run["fix"]
    assert fixes[store_with_damage["model"]] == f"fix: python -m vitbn_nb runs retrain {store_with_damage['model']}"
    assert fixes[store_with_damage["checkpoint"]].startswith("fix: python -m vitbn_nb runs retrain ")
    # A record that no longer parses cannot say what to retrain: the fix deletes it and trains what is missing.
    assert (
        fixes[store_with_damage["record"]].startswith("fix: delete ")
        and "vitbn_nb train" in fixes[store_with_damage["record"]]
    )
    assert main(["runs", "check"]) == 1
    out = capsys.readouterr().out
    assert "3 damaged run(s)" in out and store_with_damage["model"] in out


def test_damaged_files_are_named_in_every_error(store_with_damage, run_store):
    with pytest.raises(RunStoreError, match=r"record\.json cannot be read.*fix: delete"):
        runs.Run(run_store / store_with_damage["record"])
    with pytest.raises(RunStoreError, match=r"model\.pt does not match its checksum"):
        runs.Run(run_store / store_with_damage["model"]).load_model()
    with pytest.raises(RunStoreError, match=r"checkpoint\.pt"):
        training.train(RunConfig(**TINY, seed=2), progress=False)  # resuming reads the damaged checkpoint


def test_retrain_repairs_a_run_and_check_then_passes(store_with_damage, capsys):
    assert main(["runs", "retrain", store_with_damage["model"]]) == 0
    assert main(["runs", "retrain", store_with_damage["checkpoint"]]) == 0
    with pytest.raises(RunStoreError, match="configuration is unknown"):
        retrain(store_with_damage["record"])
    assert set(damage.check_store()["run"]) == {store_with_damage["record"]}
    with pytest.raises(ValueError, match="not a run in the run store"):
        retrain("no-such-run")


def test_an_edited_record_fails_its_checksum(run_store, mnist_ready):
    run = training.train(RunConfig(**TINY), progress=False)
    record = json.loads((run.folder / "record.json").read_text())
    record["epochs"][0]["test_acc"] = 99.9
    (run.folder / "record.json").write_text(json.dumps(record))
    with pytest.raises(RunStoreError, match="does not match its checksum"):
        runs.Run(run.folder)


def test_stale_temporary_files_are_cleaned_when_a_run_is_next_written(run_store, mnist_ready):
    run = training.train(RunConfig(**{**TINY, "epochs": 2}), progress=False)
    stale = run.folder / ".checkpoint.pt.abc123.tmp"
    stale.write_bytes(b"left by a killed process")
    training.train(RunConfig(**{**TINY, "epochs": 2}), progress=False)
    assert stale.exists()  # reading a finished run writes nothing (another process may be mid-write)
    record = records.read_record(run.folder)
    record.update(status="running", epochs=record["epochs"][:1], checksums={})
    records.write_record(run.folder / "record.json", record)
    training.train(RunConfig(**{**TINY, "epochs": 2}), progress=False)  # resumed under the run's lock: cleaned
    assert not stale.exists()


# -- the app ---------------------------------------------------------------------------------------


def test_the_app_refuses_a_corrupt_model_with_a_clear_message(run_store, mnist_ready):
    run = training.train(RunConfig(**{**TINY, "train_size": 12_000}), progress=False)
    (run.folder / "model.pt").write_bytes(b"corrupt")
    with pytest.raises(SystemExit, match=r"cannot serve it: .*model\.pt"):
        server.load_model(run.run_id, log=lambda line: None)
    lines = []
    with pytest.raises(SystemExit, match="No servable"):
        server.load_model(train_if_missing=False, log=lines.append)
    assert any(run.run_id in line and "damaged" in line for line in lines)


def test_the_app_passes_over_smoke_scale_runs(run_store, mnist_ready):
    small = training.train(RunConfig(**TINY), progress=False)  # 200 images x 1 epoch: smoke-scale
    found, skipped = server.candidates()
    assert found == [] and any(small.run_id in note and "smoke-scale" in note for note in skipped)


def test_with_training_off_a_missing_run_is_named_and_a_stored_one_is_read(run_store, mnist_ready, monkeypatch):
    config = runs.RunConfig(model="DNN_d3", epochs=1, train_size=20, test_size=20)
    with pytest.raises(records.RunStoreError, match=config.run_id("cpu") + ".*training is off"):
        training.train(config, progress=False, train=False)
    assert not (run_store / config.run_id("cpu") / "record.json").exists()
    trained = training.train(config, progress=False)
    assert training.train(config, progress=False, train=False).record == trained.record  # read back, nothing trained
    with pytest.raises(ValueError, match="force=True would delete"):
        training.train(config, force=True, progress=False, train=False)
    assert runs.Run(trained.folder).record == trained.record  # and nothing was deleted
    with pytest.raises(ValueError, match="train='sometimes'"):
        training.train(config, progress=False, train="sometimes")
