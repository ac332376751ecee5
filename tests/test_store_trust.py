"""A store trusts nothing it did not write (issue 47): nothing in a store names a path the book moves, deletes or
writes outside it; a bundle costs what its model needs, not what its bytes expand to (measured in a child process);
a finished run, held in the store or committed beside figures/, is never replaced from elsewhere; a kill -9 during a
retraining keeps the finished run."""

import hashlib
import io
import json
import os
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest
import torch
from test_hostile_input import _bundle, _exported, _tree

from vitbn_nb.__main__ import cli
from vitbn_nb.engines import training
from vitbn_nb.store import bundle, damage, records, run_folder
from vitbn_nb.store.records import sha256, write_record
from vitbn_nb.store.runs import RunConfig
from vitbn_nb.train import retrain

ROOT = Path(__file__).resolve().parent.parent
TINY = dict(model="DNN_d3", epochs=2, train_size=40, test_size=20)
#: The growth of peak memory (RSS, in a child process that has torch loaded) a refused bundle may cost.
MAX_GROWTH_MIB = 100


@pytest.fixture
def store(run_store, mnist_ready):
    training.train(RunConfig(**TINY), progress=False)
    return run_store


def _run_id() -> str:
    return RunConfig(**TINY).run_id("cpu")


def _sealed(record: dict) -> bytes:
    """``record`` with its checksum made anew (a stranger can compute it as well as the book)."""
    body = {k: v for k, v in record.items() if k != "record_sha256"}
    return json.dumps({**body, "record_sha256": records._record_digest(body)}).encode()


# -- nothing in a store steers a path outside it ----------------------------------------------------------


def test_planted_journals_links_and_records_change_nothing_outside_the_store(store, tmp_path, capsys):
    file = tmp_path / "b.tar.gz"
    bundle.export(file, needed=None, profile="smoke")
    outside = tmp_path / "outside"
    (outside / "keep").mkdir(parents=True)
    (outside / "keep" / "precious.txt").write_text("mine")
    (outside / "site.pth").write_text("import os")
    moves = [
        {
            "new": str(outside / "site.pth"),
            "target": str(tmp_path / "venv.pth"),
            "aside": str(outside / "keep"),
            "removed": str(outside / "gone"),
            "existed": True,
        },
        {"new": "../outside/keep", "target": "../../elsewhere", "aside": "/tmp", "existed": False},
    ]
    planted = store / ".import-0123456789ab"
    planted.mkdir()
    (planted / "journal.json").write_text(json.dumps({"moves": moves, "done": False}))
    (store / ".import-linked").symlink_to(outside / "keep")  # a leftover that is a link to elsewhere
    (store / ".incomplete-0000000000000000-0123456789ab").touch()  # a mark is only a name
    record = records.read_record(store / _run_id())
    record["config"]["init_from"] = str(outside / "keep")  # a record naming an outside path
    (store / "planted-run").mkdir()
    (store / "planted-run" / "record.json").write_bytes(_sealed({**record, "run_id": "planted-run"}))
    before = _tree(outside), sorted(p.name for p in outside.iterdir())
    assert bundle.clean_imports() == 2  # both deleted, neither read: the link itself, not what it points at
    assert not list(store.glob(".import-*"))
    assert cli(["runs", "check"]) == 1  # the planted record and the mark are named, nothing is moved
    assert cli(["runs", "import", str(file)]) == 0  # its run is there already
    assert (_tree(outside), sorted(p.name for p in outside.iterdir())) == before
    assert not (tmp_path / "venv.pth").exists() and not (tmp_path / "elsewhere").exists()
    capsys.readouterr()
    (store / ".locks").rename(tmp_path / "locks")
    (store / ".locks").symlink_to(outside)  # a lock folder that leads elsewhere: refused before any lock is taken
    assert cli(["runs", "import", str(file)]) == 1
    assert ".locks is a link" in capsys.readouterr().err
    assert (_tree(outside), sorted(p.name for p in outside.iterdir())) == before


# -- a bundle costs what its model needs ------------------------------------------------------------------

#: Imports the bundle sys.argv[1] into $VITBN_RUNS_DIR through the command line; prints its exit status, its error
#: and the growth of the process's peak memory (KiB) around the import alone (torch and the book already loaded).
MEASURE = r"""
import contextlib, io, json, resource, sys
from vitbn_nb.__main__ import cli
from vitbn_nb.store import bundle

error = io.StringIO()
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
with contextlib.redirect_stderr(error):
    code = cli(["runs", "import", sys.argv[1]])
growth = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak
print(json.dumps({"code": code, "error": error.getvalue(), "growth_kib": growth}))
"""


def _deflate_bomb(path: Path, zeros: int) -> None:
    """A weight file laid out as torch.save writes one, but deflated, its tensor's entry ``zeros`` bytes of zeros."""
    buffer = io.BytesIO()
    torch.save({"w": torch.zeros(1)}, buffer)
    with zipfile.ZipFile(buffer) as real, zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as bomb:
        for entry in real.infolist():
            if not entry.filename.endswith("/data/0"):
                bomb.writestr(entry.filename, real.read(entry))
                continue
            with bomb.open(entry.filename, "w", force_zip64=True) as out:
                for _ in range(zeros // 2**20):
                    out.write(bytes(2**20))


def _bomb(kind: str, store: Path, tmp_path: Path) -> Path:
    files = _exported(store, tmp_path)
    run_id = _run_id()
    record = json.loads(files[f"runs/{run_id}/record.json"])
    if kind == "deflate":  # 200 MB of zeros in about 200 KB: listed, checksummed, smaller than its model
        bomb = tmp_path / "model.pt"
        _deflate_bomb(bomb, 200 * 2**20)
        files[f"runs/{run_id}/model.pt"] = bomb.read_bytes()
        record["checksums"] = {"model.pt": sha256(bomb)}
        files[f"runs/{run_id}/record.json"] = _sealed(record)
        return _bundle(tmp_path / "deflate.tar.gz", files)
    kwargs = {
        "depth": {"model": "ViT", "model_kwargs": {"depth": 100_000}},
        "width": {"model": "DNN_d3", "model_kwargs": {"hidden": 16_000}},
        "parameters": {"model": "ViT", "model_kwargs": {"depth": 64, "dim": 4096, "mlp_dim": 4096}},
    }[kind]
    name = f"{kwargs['model']}-{kind}-bomb"
    record.update(run_id=name, status="running", epochs=[], checksums={}, config={**record["config"], **kwargs})
    return _bundle(tmp_path / f"{kind}.tar.gz", {f"runs/{name}/record.json": _sealed(record)})


@pytest.mark.parametrize(
    ("kind", "expected"),
    [
        ("deflate", "which holds compressed entries"),
        ("depth", "depth=100000 is past the book's bounds (at most 64)"),
        ("width", "hidden=16000 is past the book's bounds (at most 4,096)"),
        ("parameters", "parameters (the book's models have at most 10,000,000)"),
    ],
)
def test_a_bomb_is_refused_in_bounded_memory_before_anything_is_built(store, tmp_path, kind, expected):
    file = _bomb(kind, store, tmp_path)
    assert file.stat().st_size < 2**20
    other = tmp_path / "other"
    done = subprocess.run(
        [sys.executable, "-c", MEASURE, str(file)],
        cwd=ROOT,
        env={**os.environ, "VITBN_RUNS_DIR": str(other)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    measured = json.loads(done.stdout.splitlines()[-1])
    lines = measured["error"].strip().splitlines()
    assert measured["code"] == 1 and len(lines) == 1 and expected in lines[0] and "nothing was imported" in lines[0]
    print(f"{kind}: peak RSS growth {measured['growth_kib'] / 1024:.1f} MiB")  # shown with pytest -s
    assert measured["growth_kib"] < MAX_GROWTH_MIB * 1024, measured
    assert [p.name for p in other.iterdir() if p.name != ".locks"] == []


def test_a_bomb_planted_in_a_store_is_refused_by_check_and_retrain_without_building_it(
    store, tmp_path, capsys, monkeypatch
):
    from vitbn_nb import models
    from vitbn_nb.store import damage, run_config, run_folder

    real = models.build_model

    def build_model(name, **kwargs):
        if kwargs.get("depth", 0) > 1000:
            pytest.fail(f"a {name} of depth {kwargs['depth']} was built")
        return real(name, **kwargs)

    for module in (models, damage, run_config, run_folder, training):
        monkeypatch.setattr(module, "build_model", build_model)
    files = _exported(store, tmp_path)
    record = json.loads(files[f"runs/{_run_id()}/record.json"])
    record.update(run_id="ViT-deep", status="running", epochs=[], checksums={})
    record["config"] = {**record["config"], "model": "ViT", "model_kwargs": {"depth": 100_000}}
    (store / "ViT-deep").mkdir()
    (store / "ViT-deep" / "record.json").write_bytes(_sealed(record))
    assert cli(["runs", "check"]) == 1
    assert "depth=100000 is past the book's bounds" in capsys.readouterr().out
    assert cli(["runs", "retrain", "ViT-deep"]) == 1
    assert "past the book's bounds" in capsys.readouterr().err


def test_a_weight_file_larger_than_its_model_needs_is_refused_before_anything_is_written(store, tmp_path):
    files = _exported(store, tmp_path)
    run_id = _run_id()
    padded = files[f"runs/{run_id}/model.pt"] + bytes(4 * 2**20)  # zeros: a gzip stream makes them nearly free
    record = json.loads(files[f"runs/{run_id}/record.json"])
    record["checksums"] = {"model.pt": hashlib.sha256(padded).hexdigest()}
    files.update({f"runs/{run_id}/record.json": _sealed(record), f"runs/{run_id}/model.pt": padded})
    other = tmp_path / "other"
    with pytest.raises(bundle.BundleError, match=f"holds {run_id}/model.pt of .* more than its model's weights need"):
        bundle.import_bundle(_bundle(tmp_path / "padded.tar.gz", files), store=other)
    assert [p.name for p in other.iterdir()] == []  # surveyed: nothing written


# -- a finished run is never replaced from elsewhere ------------------------------------------------------


@pytest.fixture
def committed(tmp_path, monkeypatch):
    folder = tmp_path / "figures" / "records"
    folder.mkdir(parents=True)
    monkeypatch.setenv("VITBN_BOOK_FIGURES_DIR", str(tmp_path / "figures"))
    monkeypatch.delenv("VITBN_COMMITTED_RECORDS")
    return folder


def test_a_bundle_that_differs_from_a_committed_record_is_a_conflict(store, tmp_path, committed, monkeypatch):
    file = tmp_path / "b.tar.gz"
    bundle.export(file, needed=None, profile="smoke")
    record = records.read_record(store / _run_id())
    (committed / _run_id()).mkdir()
    (committed / _run_id() / "record.json").write_bytes(_sealed({**record, "finished": "on the machine of record"}))
    other = tmp_path / "other"
    monkeypatch.setenv("VITBN_RUNS_DIR", str(other))
    with pytest.raises(
        bundle.BundleError,
        match=f"run {_run_id()}: the bundle's copy differs from the one in the "
        f"committed records .*never replaced from elsewhere",
    ):
        bundle.import_bundle(file)
    assert [p.name for p in other.iterdir() if p.name != ".locks"] == []
    (committed / _run_id() / "record.json").write_bytes((store / _run_id() / "record.json").read_bytes())
    assert bundle.import_bundle(file)["added"] == 1  # the same run: the store takes its weights


def test_a_bundle_adds_measurements_a_finished_run_lacks_but_never_changes_one(store, tmp_path, monkeypatch):
    folder = store / _run_id()
    record = records.read_record(folder)
    theirs = {"value": 1.0, "hardware": None, "measured": "then"}
    record["measurements"] = {"speed": theirs, "size": {"value": 5, "hardware": None, "measured": "then"}}
    write_record(folder / "record.json", record)
    file = tmp_path / "b.tar.gz"
    bundle.export(file, needed=None, profile="smoke")
    other = tmp_path / "other"
    (other / _run_id()).mkdir(parents=True)
    mine = {**record, "measurements": {"speed": theirs}}
    (other / _run_id() / "record.json").write_bytes(_sealed(mine))
    monkeypatch.setenv("VITBN_RUNS_DIR", str(other))
    assert bundle.import_bundle(file)["updated"] == 1  # the size measurement added, the weights with it
    assert records.read_record(other / _run_id())["measurements"] == record["measurements"]
    assert (other / _run_id() / "model.pt").read_bytes() == (folder / "model.pt").read_bytes()
    changed = {**record, "measurements": {**record["measurements"], "speed": {**theirs, "value": 2.0}}}
    (other / _run_id() / "record.json").write_bytes(_sealed(changed))
    before = _tree(other / _run_id())
    with pytest.raises(bundle.BundleError, match="differs .*a finished run is never replaced from elsewhere"):
        bundle.import_bundle(file)
    assert _tree(other / _run_id()) == before


# -- a retraining replaces the finished run only once it has finished -------------------------------------

#: ``runs retrain RUN`` in a child process, held after its first epoch (monkeypatched there): it writes the file
#: sys.argv[2] names and waits to be killed.
RETRAIN = r"""
import pathlib, sys, time
from vitbn_nb.__main__ import cli
from vitbn_nb.store import run_folder

def held(self, *args, **kwargs):
    pathlib.Path(sys.argv[2]).write_text("held")
    time.sleep(600)

run_folder.RunFiles.epoch_done = held
sys.exit(cli(["runs", "retrain", sys.argv[1]]))
"""


def _held(script: str, flag: Path) -> subprocess.Popen:
    """``script`` run in a child process on the store's run, once it has written ``flag`` (held there, to be killed)."""
    child = subprocess.Popen(
        [sys.executable, "-c", script, _run_id(), str(flag)],
        cwd=ROOT,
        env={**os.environ, "TQDM_DISABLE": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 300
    while not flag.exists():
        assert child.poll() is None, child.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.05)
    return child


def test_a_kill_9_during_a_retraining_keeps_the_finished_run(store, tmp_path):
    folder = store / _run_id()
    before = _tree(folder)
    flag = tmp_path / "held"
    child = _held(RETRAIN, flag)
    assert (store / ".retrain" / _run_id() / "record.json").exists()  # trained beside it
    child.send_signal(signal.SIGKILL)
    child.communicate(timeout=60)
    assert _tree(folder) == before  # the finished run, as it was
    assert training.train(RunConfig(**TINY), progress=False).record == records.read_record(folder)  # and reused
    old = records.read_record(folder)["started"]
    retrained = retrain(_run_id(), progress=False)
    assert retrained.folder == folder and retrained.status == "finished"
    assert records.read_record(folder)["started"] != old or _tree(folder) != before
    assert not (store / ".retrain" / _run_id()).exists() and damage.check_store().empty


#: ``runs retrain RUN`` in a child process, held between the two renames of its swap (the stored run moved aside,
#: the finished retrain not yet in its place): it writes the file sys.argv[2] names and waits to be killed.
RETRAIN_MID_SWAP = r"""
import pathlib, sys, time
from vitbn_nb.__main__ import cli

rename = pathlib.Path.rename

def held(self, target):
    moved = rename(self, target)
    if str(target).endswith(".old"):
        pathlib.Path(sys.argv[2]).write_text("held")
        time.sleep(600)
    return moved

pathlib.Path.rename = held
sys.exit(cli(["runs", "retrain", sys.argv[1]]))
"""


def test_a_kill_9_between_the_renames_of_a_retrains_swap_hides_no_run(store, tmp_path, capsys):
    folder, flag = store / _run_id(), tmp_path / "held"
    child = _held(RETRAIN_MID_SWAP, flag)
    child.send_signal(signal.SIGKILL)
    child.communicate(timeout=60)
    retrained = records.read_record(store / ".retrain" / _run_id())
    assert not folder.exists() and records.replaced_path(folder).is_dir()  # the instant a kill can hit

    assert list(damage.check_store()["run"]) == [_run_id()]  # named, never "intact"
    with pytest.raises(records.RunStoreError, match="runs check"):
        run_folder.stored_run(folder)
    with pytest.raises(ValueError, match="would lack it"):
        bundle.export(tmp_path / "b.tar.gz", needed=None, profile="smoke")

    assert cli(["runs", "check"]) == 0
    out = capsys.readouterr().out
    assert "recovered run" in out and "intact" in out
    assert records.read_record(folder) == retrained  # the retrain that finished is the run now
    assert not records.replaced_path(folder).exists() and not (store / ".retrain" / _run_id()).exists()
    assert cli(["runs", "export", str(tmp_path / "b.tar.gz")]) == 0


def test_a_stored_run_moved_aside_without_a_finished_retrain_comes_back(store):
    folder = store / _run_id()
    before = _tree(folder)
    folder.rename(records.replaced_path(folder))  # as a kill leaves it, had the retrain not finished
    run = training.train(RunConfig(**TINY), progress=False)  # the next command finds it, trains nothing
    assert run.folder == folder and _tree(folder) == before and damage.check_store().empty


# -- configurations bounded where they are built; a record's text never steers a terminal ---------------------


@pytest.mark.parametrize(
    "change, expected",
    [
        (lambda r: r["config"].update(seed=2**80), r"seed=1208925819614629174706176 is not allowed"),
        (lambda r: r["config"].update(train_size=10**15), r"train_size=1000000000000000 is not allowed.*60,000"),
        (lambda r: r["hardware"].update(cpu="AMD \x1b[2J\x1b[31mEPYC"), "holds control characters"),
    ],
)
def test_a_record_past_its_data_or_holding_control_characters_is_refused_by_name(store, tmp_path, change, expected):
    files = _exported(store, tmp_path)
    name = f"runs/{_run_id()}/record.json"
    record = json.loads(files[name])
    change(record)
    file = _bundle(tmp_path / "bad.tar.gz", {**files, name: _sealed(record)})
    with pytest.raises(bundle.BundleError, match=expected):
        bundle.import_bundle(file, store=tmp_path / "other")
    assert not (tmp_path / "other" / _run_id()).exists()


def test_a_hardware_label_drops_control_characters():
    from vitbn_nb.system import label

    assert label({"cpu": "AMD \x1b[31mEPYC\x07", "cpu_cores": 2}) == "CPU: AMD [31mEPYC (2 cores)"
