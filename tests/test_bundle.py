"""Runs moved between machines: a bundle exported, imported into an empty store, rendered with no training."""

import json
import tarfile

import pandas as pd
import pytest
import torch
from test_hostile_input import Payload

from vitbn_nb import chapters
from vitbn_nb import train as train_command
from vitbn_nb.__main__ import main
from vitbn_nb.chapters.three_things import attention_finetune, common, hmlp_stem, parallel_blocks
from vitbn_nb.chapters.three_things import study as three_things
from vitbn_nb.engines import training
from vitbn_nb.store import bundle, records, runs

CONFIGS = [runs.RunConfig(model="DNN_d3", epochs=1, train_size=40, test_size=20, seed=s) for s in (0, 1)]


@pytest.fixture
def trained_store(run_store, mnist_ready):
    for config in CONFIGS:
        training.train(config, progress=False)
    return run_store


def test_a_bundle_imported_into_an_empty_store_gives_the_same_runs(trained_store, tmp_path, monkeypatch):
    file = tmp_path / "bundle.tar.gz"
    assert main(["runs", "export", str(file), "--weights", "all", "--profile", "smoke"]) == 0
    with tarfile.open(file) as tar:
        names = set(tar.getnames())
    assert {f"runs/{c.run_id('cpu')}/model.pt" for c in CONFIGS} <= names
    other = tmp_path / "other-store"
    monkeypatch.setenv("VITBN_RUNS_DIR", str(other))
    assert main(["runs", "import", str(file)]) == 0
    for config in CONFIGS:
        theirs, mine = runs.Run(trained_store / config.run_id("cpu")), runs.Run(other / config.run_id("cpu"))
        assert mine.record == theirs.record
        mine.load_model("cpu")  # the weights came along, verified
    assert (
        training.train_all(CONFIGS, progress=False, train=False)[0].record
        == runs.Run(other / CONFIGS[0].run_id("cpu")).record
    )
    assert main(["runs", "import", str(file)]) == 0  # a second import finds everything there


def test_needed_weights_leave_out_runs_no_chapter_loads(trained_store, tmp_path):
    done = bundle.export(tmp_path / "needed.tar.gz", needed=train_command.needed_weights("smoke"), profile="smoke")
    assert done["runs"] == 2 and done["weights"] == 0  # chapter 01's DNNs are never loaded when rendering
    with tarfile.open(tmp_path / "needed.tar.gz") as tar:
        assert json.loads(tar.extractfile("bundle.json").read())["weights"] == "needed"


def test_measured_runs_travel_as_records_and_render_where_their_weights_are_not(
    run_store, mnist_ready, tmp_path, monkeypatch
):
    settings = chapters.settings("07_three_things", "smoke")
    planned = {config.run_id("cpu") for config in three_things.plan(settings)}
    sources = {config.run_id("cpu") for config in common.sequential_configs(settings)}
    timed = {config.run_id("cpu") for _, config in common.parallel_pairs(settings)}
    parallel_blocks.run(settings)  # (a)'s runs trained and timed; (b)'s fine-tunings of its sources not yet trained
    needed = train_command.needed_weights("smoke")
    assert sources <= needed and not (timed - sources) & needed
    assert main(["train", "--profile", "smoke", "--chapters", "07"]) == 0  # the rest trained and measured
    assert not planned & train_command.needed_weights("smoke")
    parts = (parallel_blocks, attention_finetune, hmlp_stem)
    here = [part.run(settings).per_run for part in parts]
    file = tmp_path / "bundle.tar.gz"
    assert main(["runs", "export", str(file), "--profile", "smoke"]) == 0
    with tarfile.open(file) as tar:
        assert not [name for name in tar.getnames() if name.endswith(".pt")]
    monkeypatch.setenv("VITBN_RUNS_DIR", str(tmp_path / "rendering-store"))
    assert main(["runs", "import", str(file)]) == 0
    monkeypatch.setattr(runs.Run, "load_model", lambda *_: pytest.fail("a weight file was loaded to render"))
    rendering = chapters.settings("07_three_things", "smoke", train=False)
    for part, mine in zip(parts, here):
        pd.testing.assert_frame_equal(part.run(rendering).per_run, mine)


def test_a_differing_finished_run_is_not_overwritten(trained_store, tmp_path, monkeypatch):
    file = tmp_path / "bundle.tar.gz"
    bundle.export(file, needed=None, profile="smoke")
    folder = trained_store / CONFIGS[0].run_id("cpu")
    record = records.read_record(folder)
    record["finished"] = "another day"
    records.write_record(folder / "record.json", record)
    with pytest.raises(bundle.BundleError, match="differs"):
        bundle.import_bundle(file)
    assert records.read_record(folder)["finished"] == "another day"  # left as it was


def test_a_damaged_bundle_is_refused_by_name(run_store, tmp_path, capsys):
    bad = tmp_path / "bad.tar.gz"
    bad.write_bytes(b"not a bundle")
    assert main(["runs", "import", str(bad)]) == 1
    assert "bad.tar.gz is not a readable bundle" in capsys.readouterr().err


@pytest.mark.book
def test_a_smoke_bundle_renders_a_chapter_on_a_machine_that_trains_nothing(
    run_store, mnist_ready, tmp_path, monkeypatch
):
    from vitbn_nb.publishing.book import BookError, build_book

    assert main(["train", "--profile", "smoke", "--chapters", "01"]) == 0
    file = tmp_path / "smoke.tar.gz"
    assert main(["runs", "export", str(file), "--profile", "smoke", "--weights", "all"]) == 0
    elsewhere = tmp_path / "rendering-store"
    monkeypatch.setenv("VITBN_RUNS_DIR", str(elsewhere))
    assert main(["runs", "import", str(file)]) == 0
    marker = tmp_path / "code-ran"
    for model in elsewhere.glob("*/model.pt"):  # a stranger's bundle whose weights are pickled code
        torch.save({"w": Payload(marker)}, model)
        record = records.read_record(model.parent)
        record["checksums"]["model.pt"] = records.sha256(model)
        records.write_record(model.parent / "record.json", record)
    before = {p.name: (p / "record.json").read_bytes() for p in elsewhere.iterdir() if not p.name.startswith(".")}
    common = dict(
        profile="smoke",
        output_dir=tmp_path / "build",
        figures_dir=tmp_path / "figures",
        html=False,
        train=False,
        runs_dir=elsewhere,
    )
    build_book(chapters=["01"], **common)
    after = {p.name: (p / "record.json").read_bytes() for p in elsewhere.iterdir() if not p.name.startswith(".")}
    assert after == before  # rendered from the imported runs: nothing trained, nothing rewritten
    assert not marker.exists()
    with pytest.raises(BookError, match=r"run \S+-s0-\w+: it is not finished .* training is off"):
        build_book(chapters=["05"], **common)  # chapter 05's runs were never trained: the first is named
