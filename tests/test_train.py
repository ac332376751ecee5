"""``python -m vitbn_nb train``: a chapter's runs trained without papermill, its plan listed without training."""

import pytest

from vitbn_nb import limits
from vitbn_nb.__main__ import main
from vitbn_nb.engines import training
from vitbn_nb.store import runs


def test_dry_run_lists_every_chapter_and_trains_nothing(run_store, mnist_ready, capsys, monkeypatch):
    from vitbn_nb.bench import calibration

    # a real calibration of every kind of run the paper profile holds, one timed step each: the price is not checked
    real = calibration.calibrate
    monkeypatch.setattr(calibration, "calibrate", lambda device, **kw: real(device, **kw, steps=1, warmup=0, repeats=1))
    assert main(["train", "--dry-run", "--profile", "paper"]) == 0
    printed = capsys.readouterr().out
    assert "nothing is trained" in printed and "03_fixed_lr" in printed and "07_three_things" in printed
    assert "estimated hours left" in printed and "seconds per training image" in printed
    assert "of which the campaign's stages" in printed and "calibration taken" in printed
    assert not run_store.exists() or not [p for p in run_store.iterdir() if not p.name.startswith(".")]


def test_a_calibration_from_a_quiet_machine_is_kept_and_priced_again_without_timing(run_store, monkeypatch):
    from vitbn_nb.bench import calibration

    timed = []
    monkeypatch.setattr(calibration, "machine_load", lambda: {"busy_processes": 0})
    monkeypatch.setattr(
        calibration, "calibrate", lambda device, **kwargs: timed.append(1) or calibration.pd.DataFrame(FLAT)
    )
    first = calibration.calibrated("cpu", points=calibration.POINTS[:1], with_engines=False, others=())
    again = calibration.calibrated("cpu", points=calibration.POINTS[:1], with_engines=False, others=())
    assert len(timed) == 1 and again.attrs["kept"] and not first.attrs["kept"]
    assert again["seconds_per_image"].tolist() == first["seconds_per_image"].tolist()
    other = calibration.calibrated("cpu", points=calibration.POINTS[1:2], with_engines=False, others=())
    assert len(timed) == 2 and not other.attrs["kept"]  # other points: another calibration


def test_a_calibration_beside_other_work_or_a_damaged_kept_one_is_taken_anew(run_store, monkeypatch):
    from vitbn_nb.bench import calibration

    timed, busy = [], {"busy_processes": 3}
    monkeypatch.setattr(calibration, "machine_load", lambda: busy)
    monkeypatch.setattr(
        calibration, "calibrate", lambda device, **kwargs: timed.append(1) or calibration.pd.DataFrame(FLAT)
    )
    ask = lambda: calibration.calibrated("cpu", points=calibration.POINTS[:1], with_engines=False, others=())
    ask(), ask()
    assert len(timed) == 2  # taken under load: never kept
    busy["busy_processes"] = 0
    ask()
    kept = list((run_store / ".calibration").glob("*.json"))
    assert kept  # the quiet calibration was kept: the damage below is to a file that exists
    for file in kept:
        file.write_text('{"taken": "2026-01-01T00:00:00+00:00", "rows": [{"seconds_per_image": "fast"}]}')
    assert not ask().attrs["kept"] and len(timed) == 4


FLAT = [dict(depth=1, image=28, pipeline="engine", engine="eager", seconds_per_image=1e-3, device="cpu", model="ViT")]
FLAT = [{**FLAT[0], "pass": "train"}, {**FLAT[0], "pass": "test"}]


def test_this_machine_records_its_host_and_keeps_a_calibration_per_host(run_store, monkeypatch):
    from vitbn_nb import system
    from vitbn_nb.bench import calibration

    if system.host() is None:
        pytest.skip("this kernel names no boot")
    assert system.hardware("cpu")["host"] == system.host() and len(system.host()) == 12
    timed = []
    monkeypatch.setattr(calibration, "machine_load", lambda: {"busy_processes": 0})
    monkeypatch.setattr(
        calibration, "calibrate", lambda device, **kwargs: timed.append(1) or calibration.pd.DataFrame(FLAT)
    )
    ask = lambda: calibration.calibrated("cpu", points=calibration.POINTS[:1], with_engines=False, others=())
    ask(), ask()
    assert len(timed) == 1
    monkeypatch.setattr(calibration, "host", lambda: "another host")
    assert not ask().attrs["kept"] and len(timed) == 2  # another host of the same CPU name is priced anew


def test_training_a_chapter_stores_its_plan_and_a_second_call_trains_nothing(run_store, mnist_ready, capsys):
    assert main(["train", "--profile", "smoke", "--chapters", "1"]) == 0
    stored = {folder.name: runs.Run(folder).record for folder in run_store.iterdir() if not folder.name.startswith(".")}
    assert len(stored) == 4 and all(record["status"] == "finished" for record in stored.values())
    assert main(["train", "--profile", "smoke", "--chapters", "01_batchnorm_intro"]) == 0
    again = {folder.name: runs.Run(folder).record for folder in run_store.iterdir() if not folder.name.startswith(".")}
    assert again == stored


def test_an_unknown_chapter_is_refused_by_name(capsys):
    assert main(["train", "--chapters", "99"]) == 1
    assert "'99' is not a chapter" in capsys.readouterr().err


def test_a_run_stopped_at_the_deadline_resumes_to_the_same_numbers(run_store, mnist_ready, tmp_path, monkeypatch):
    config = runs.RunConfig(model="DNN_d3", epochs=3, train_size=40, test_size=20)
    straight = training.train(config, progress=False).record["epochs"]
    monkeypatch.setenv("VITBN_RUNS_DIR", str(tmp_path / "stopped"))
    soon = limits.Deadline(at=1e-9, clock=lambda: 0.0)  # not passed, but no room for another epoch
    with pytest.raises(limits.DeadlineReached, match="after epoch 1 of 3"):
        training.train(config, progress=False, deadline=soon)
    folder = tmp_path / "stopped" / config.run_id("cpu")
    assert (folder / "checkpoint.pt").is_file() and runs.Run(folder).status == "running"
    resumed = training.train(config, progress=False).record["epochs"]
    keys = ("epoch", "train_loss", "test_acc", "class_acc")
    assert [{k: e[k] for k in keys} for e in resumed] == [{k: e[k] for k in keys} for e in straight]


def test_a_passed_deadline_stops_the_command_before_any_run(run_store, capsys):
    # Nothing could be trained, so exit 75 ("run it again") would loop for ever: 1, with the fix.
    assert main(["train", "--profile", "smoke", "--chapters", "1", "--deadline", "1e-6"]) == 1
    assert "left no room for one epoch" in capsys.readouterr().err
    assert not run_store.exists() or not [p for p in run_store.iterdir() if not p.name.startswith(".")]


def test_a_deadline_shorter_than_one_epochs_estimate_trains_nothing_and_says_so(run_store, capsys, monkeypatch):
    from vitbn_nb import train as training

    priced = []  # the runs the estimate was asked to price: every run the chapter lacks
    monkeypatch.setattr(training, "epoch_estimate", lambda configs, log: priced.extend(configs) or (lambda c: 1000.0))
    assert main(["train", "--profile", "smoke", "--chapters", "1", "--deadline", "60"]) == 1
    assert "left no room for one epoch" in capsys.readouterr().err and priced
    assert not run_store.exists() or not [p for p in run_store.iterdir() if not p.name.startswith(".")]


def test_the_calibration_prices_runs_by_depth_pipeline_image_and_epochs(mnist_ready):
    from vitbn_nb.bench.calibration import OTHER_MODELS, POINTS, calibrate, estimate_seconds

    measured = calibrate("cpu", steps=1, warmup=0, repeats=1)
    # Training through both pipelines, test passes at 28 px, the DNNs and the CNN (a training and a test row each),
    # then one run's step against a stack's (per run) at depths 1 and 6; no graph on a CPU.
    others = 2 * len(OTHER_MODELS)
    assert len(measured) == 2 * len(POINTS) - 1 + others + 4 and (measured["seconds_per_image"] > 0).all()
    assert list(measured["pass"]) == ["train"] * len(POINTS) + ["test"] * 4 + ["train", "test"] * 3 + ["train"] * 4
    assert list(measured["model"].iloc[len(POINTS) + 4 : -4]) == [m for m, _ in OTHER_MODELS for _ in "tt"]
    assert list(measured["engine"].iloc[-4:]) == ["eager", "stacked"] * 2
    train = [1e-3, 6e-3, 2e-3, 7e-3, 24e-3]  # known costs: the arithmetic
    test = [1e-4, 6e-4, 3e-2, 3.5e-2]  # article 1's test pass counts classes in a Python loop over the samples
    own = [4e-5, 2e-6, 4e-5, 2e-6, 5e-4, 2e-4]  # the DNNs and the CNN, timed themselves
    flat = measured.assign(seconds_per_image=train + test + own + [1e-3, 2e-3, 6e-3, 12e-3])
    dnn = runs.RunConfig(model="DNN_d3", dataset="mnist_aug", epochs=15)
    # priced at its own rows (60,000 training and 10,000 test images an epoch), not as a depth-1 ViT
    assert estimate_seconds(dnn, flat) == pytest.approx(15 * (60_000 * 4e-5 + 10_000 * 2e-6))
    without_others = flat[flat["model"].isin(["ViT"]) | flat["model"].isna()]
    as_vit = runs.RunConfig(model="ViT", model_kwargs={"depth": 1}, dataset="mnist_aug", epochs=15)
    assert estimate_seconds(dnn, without_others) == pytest.approx(estimate_seconds(as_vit, flat))
    one = runs.RunConfig(model="ViT", model_kwargs={"depth": 1}, epochs=2, train_size=1000, test_size=300)
    assert estimate_seconds(one, flat) == pytest.approx(2 * (1000 * 1e-3 + 300 * 1e-4))
    six = runs.RunConfig(model="ViT", model_kwargs={"depth": 6}, epochs=2, train_size=1000, test_size=300)
    assert estimate_seconds(six, flat) == pytest.approx(6 * estimate_seconds(one, flat))
    slow = runs.RunConfig(
        model="ViT", model_kwargs={"depth": 6}, epochs=2, train_size=1000, test_size=300, pipeline="reference"
    )
    assert estimate_seconds(slow, flat) == pytest.approx(2 * (1000 * 7e-3 + 300 * 3.5e-2))
    assert estimate_seconds(six, flat, epochs=1) == pytest.approx(estimate_seconds(six, flat) / 2)
    stacked = runs.RunConfig(
        model="ViT", model_kwargs={"depth": 6}, epochs=2, train_size=1000, test_size=300, engine="stacked"
    )
    assert estimate_seconds(stacked, flat) == pytest.approx(2 * (1000 * 6e-3 * 2 + 300 * 6e-4))  # half as fast


def test_the_calibration_times_blocks_of_steps_between_two_syncs(mnist_ready, monkeypatch):
    import torch

    from vitbn_nb import timing
    from vitbn_nb.bench import calibration
    from vitbn_nb.engines import stack

    syncs = []
    monkeypatch.setattr(timing, "synchronize", lambda device: syncs.append(1))
    x, y = torch.rand(100, 1, 28, 28), torch.randint(0, 10, (100,))
    runners = stack.engine_runners(1, (x, y), torch.device("cpu"))
    counted = []
    for steps in (1, 3):
        syncs.clear()
        runners["eager"](steps)
        counted.append(len(syncs))
        syncs.clear()
        calibration.calibrate("cpu", steps=steps, warmup=0, repeats=1, points=((1, 28, "engine"),), with_engines=False)
        counted.append(len(syncs))
    assert counted[0] == counted[2] == 2  # one clock read at each end of the block, however many steps
    assert counted[1] == counted[3]  # the pipelines' rows too (and the test passes, which time themselves)


def test_reference_runs_are_priced_with_the_reference_pipelines_train_and_test_rows():
    import pandas as pd

    from vitbn_nb.bench.calibration import POINTS, estimate_seconds

    rows = [dict(depth=d, image=s, pipeline=p, engine="eager", device="cpu", **{"pass": "train"}) for d, s, p in POINTS]
    rows += [
        dict(depth=d, image=28, pipeline=p, engine="eager", device="cpu", **{"pass": "test"}) for d, _, p in POINTS[:4]
    ]
    cost = {
        ("engine", "train"): 1e-3,
        ("reference", "train"): 4e-3,
        ("engine", "test"): 1e-4,
        ("reference", "test"): 5e-2,
    }
    frame = pd.DataFrame(rows).assign(seconds_per_image=[cost[(r["pipeline"], r["pass"])] for r in rows])
    article_1 = runs.RunConfig(
        model="ViT", model_kwargs={"depth": 6}, epochs=2, train_size=1000, test_size=300, pipeline="reference"
    )
    assert estimate_seconds(article_1, frame) == pytest.approx(2 * (1000 * 4e-3 + 300 * 5e-2))
