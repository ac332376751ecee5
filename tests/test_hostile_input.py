"""Files from elsewhere are data: a bundle, a checkpoint or a record sent by a stranger can neither run code nor
destroy results, every untrusted record is refused by name, and every failure is one message, not a traceback."""

import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import torch

from vitbn_nb import atomic, chapters
from vitbn_nb import train as train_command
from vitbn_nb.__main__ import cli, main
from vitbn_nb.engines import training
from vitbn_nb.store import bundle, damage, records, run_folder, runs
from vitbn_nb.store.records import RunStoreError, sha256, write_record
from vitbn_nb.store.runs import RunConfig

ROOT = Path(__file__).resolve().parent.parent
TINY = dict(model="DNN_d3", epochs=2, train_size=40, test_size=20)
MARKER = "vitbn-pwned"


class Payload:
    """A pickle that writes a marker file when unpickled with ``weights_only=False``."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return exec, (f"open({self.marker!r}, 'w').write('code ran')",)


def _poison(path: Path, marker: Path, *, checkpoint: bool = False) -> None:
    """Replace a weight file by a malicious pickle and list its checksum in the record: only weights-only
    loading stands between it and the machine."""
    if checkpoint:
        evil = {"model": {}, "optimizer": {}, "epochs": [], "payload": Payload(marker)}
    else:
        evil = {"weight": Payload(marker)}
    torch.save(evil, path)
    record = json.loads((path.parent / "record.json").read_text())
    record["checksums"][path.name] = sha256(path)
    write_record(path.parent / "record.json", record)


@pytest.fixture
def store(run_store, mnist_ready):
    for seed in range(3):
        training.train(RunConfig(**TINY, seed=seed), progress=False)
    return run_store


def _ids():
    return [RunConfig(**TINY, seed=seed).run_id("cpu") for seed in range(3)]


def _unfinished(folder: Path) -> None:
    """Turn a finished run back into one stopped after its first epoch (a real checkpoint, listed)."""
    record = records.read_record(folder)
    model = torch.load(folder / "model.pt", weights_only=True)
    optimizer = torch.optim.Adam([torch.zeros(1)]).state_dict()
    atomic.torch_save(
        {"model": model, "optimizer": optimizer, "epochs": record["epochs"][:1]}, folder / "checkpoint.pt"
    )
    (folder / "model.pt").unlink()
    record.update(status="running", epochs=record["epochs"][:1], checkpoint_epoch=1)
    record["checksums"] = {"checkpoint.pt": sha256(folder / "checkpoint.pt")}
    write_record(folder / "record.json", record)


def _bundle(path: Path, files: dict[str, bytes], *, listed: dict[str, bytes] | None = None, extra=()) -> Path:
    """A hand-made bundle: ``files`` packed and listed (``listed`` overrides what bundle.json lists)."""
    listing = {
        name: {"sha256": __import__("hashlib").sha256(data).hexdigest(), "bytes": len(data)}
        for name, data in (files if listed is None else listed).items()
    }
    manifest = json.dumps({"format": bundle.FORMAT, "files": listing}).encode()
    with tarfile.open(path, "w:gz") as tar:
        for name, data in {"bundle.json": manifest, **files}.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        for info in extra:
            tar.addfile(info)
    return path


def _exported(store: Path, tmp_path: Path) -> dict[str, bytes]:
    """The files of a real bundle of ``store`` (every weight file), by name."""
    file = tmp_path / "real.tar.gz"
    bundle.export(file, needed=None, profile="smoke", store=store)
    with tarfile.open(file) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile() and m.name != "bundle.json"}


def _tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


# -- nothing read can run code ------------------------------------------------------------------------------


def test_a_malicious_model_file_is_refused_by_check_load_and_the_app(store, tmp_path, capsys):
    marker = tmp_path / MARKER
    folder = store / _ids()[0]
    _poison(folder / "model.pt", marker)
    assert main(["runs", "check"]) == 1
    assert "cannot be read as weights" in capsys.readouterr().out
    with pytest.raises(RunStoreError, match="cannot be read as weights"):
        runs.Run(folder).load_model("cpu")
    from vitbn_nb.app.server import load_model

    served = training.train(RunConfig(**{**TINY, "model": "ViTBNFFN", "model_kwargs": {"depth": 1}}), progress=False)
    _poison(served.folder / "model.pt", marker)
    with pytest.raises(SystemExit, match="cannot serve it.*cannot be read as weights"):
        load_model(served.run_id, train_if_missing=False, log=lambda _: None)
    assert not marker.exists()


def test_a_malicious_checkpoint_is_refused_by_check_and_train(store, tmp_path, capsys):
    marker = tmp_path / MARKER
    folder = store / _ids()[0]
    _unfinished(folder)
    _poison(folder / "checkpoint.pt", marker, checkpoint=True)
    assert main(["runs", "check"]) == 1
    assert "checkpoint.pt cannot be read as weights" in capsys.readouterr().out
    with pytest.raises(RunStoreError, match="checkpoint.pt cannot be read as weights"):
        training.train(RunConfig(**TINY, seed=0), progress=False)  # resuming reads the checkpoint
    assert not marker.exists()


def test_a_bundle_with_malicious_weights_is_refused_whole(store, tmp_path, monkeypatch):
    marker = tmp_path / MARKER
    files = _exported(store, tmp_path)
    first, second = _ids()[:2]
    _unfinished(store / second)
    evil_model, evil_checkpoint = tmp_path / "model.pt", tmp_path / "checkpoint.pt"
    torch.save({"weight": Payload(marker)}, evil_model)
    torch.save({"model": {}, "optimizer": {}, "epochs": [], "x": Payload(marker)}, evil_checkpoint)
    for name, evil in ((f"runs/{first}/model.pt", evil_model), (f"runs/{second}/checkpoint.pt", evil_checkpoint)):
        run_id = name.split("/")[1]
        record = json.loads(files[f"runs/{run_id}/record.json"])
        if name.endswith("checkpoint.pt"):
            record = json.loads((store / second / "record.json").read_text())
            files.pop(f"runs/{run_id}/model.pt", None)
        record["checksums"] = {Path(name).name: sha256(evil)}
        body = {k: v for k, v in record.items() if k != "record_sha256"}
        record["record_sha256"] = records._record_digest(body)
        files[f"runs/{run_id}/record.json"] = json.dumps(record).encode()
        files[name] = evil.read_bytes()
        elsewhere = tmp_path / f"store-{run_id}"
        monkeypatch.setenv("VITBN_RUNS_DIR", str(elsewhere))
        file = _bundle(tmp_path / f"evil-{run_id}.tar.gz", files)
        assert main(["runs", "import", str(file)]) == 1
        assert not [p for p in elsewhere.iterdir() if not p.name.startswith(".")]  # nothing imported
        files[name] = b""  # next round: only the other poisoned file
        files.pop(name)
    assert not marker.exists()


def test_no_weight_file_is_ever_loaded_with_pickle_code_allowed():
    """Every ``torch.load`` of the package is weights-only: the one place that loads a run's files has no switch."""
    for path in (ROOT / "vitbn_nb").rglob("*.py"):
        text = path.read_text()
        assert "weights_only=False" not in text, path
        for call in text.split("torch.load(")[1:]:
            assert "weights_only=True" in call.split(")")[0] + call.split("\n")[0], path


# -- a bundle holds only what a bundle may hold, all checked before anything is written ------------------------


def test_a_bundle_cannot_replace_the_optimisation_state_or_the_locks(store, tmp_path):
    state = store / "hpo" / "study-x"
    state.mkdir(parents=True)
    (state / "trials.json").write_text('{"0": {"lr": 0.001}}')
    before = _tree(store / "hpo")
    record = (store / _ids()[0] / "record.json").read_bytes()
    for folder in ("hpo", ".locks", "..", "x/../hpo"):
        file = _bundle(tmp_path / "b.tar.gz", {f"runs/{folder}/record.json": record})
        with pytest.raises(bundle.BundleError, match="nothing was imported"):
            bundle.import_bundle(file)
    assert _tree(store / "hpo") == before


def test_unlisted_or_altered_files_and_odd_members_refuse_the_bundle(store, tmp_path):
    files = _exported(store, tmp_path)
    run_id = _ids()[0]
    cases = {
        "which its bundle.json does not list": dict(
            files={**files, f"runs/{run_id}/checkpoint.pt": b"x"}, listed=files
        ),
        "does not match its checksum": dict(files=files, listed={**files, f"runs/{run_id}/model.pt": b"other"}),
        "neither a run's file": dict(files={**files, "runs/notes.txt": b"hi"}),
        "record does not list": dict(files={**files, f"runs/{run_id}/checkpoint.pt": b"x"}),
    }
    link = tarfile.TarInfo(f"runs/{run_id}/model.pt")
    link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
    before = _tree(store)
    for expected, kwargs in cases.items():
        file = _bundle(tmp_path / "b.tar.gz", **kwargs)
        with pytest.raises(bundle.BundleError) as refused:
            bundle.import_bundle(file)
        text = str(refused.value)
        assert "nothing was imported" in text, text
        # an altered file may be caught by its listed size before its checksum is read
        assert expected in text or (expected == "does not match its checksum" and "of the wrong size" in text), text
    file = _bundle(tmp_path / "b.tar.gz", {}, extra=[link])
    with pytest.raises(bundle.BundleError, match="not a regular file"):
        bundle.import_bundle(file)
    assert _tree(store) == before


def test_a_record_without_its_checksum_or_with_wrong_keys_is_refused_everywhere(store, tmp_path, capsys):
    folder = store / _ids()[0]
    original = json.loads((folder / "record.json").read_text())
    edits = {
        "has no checksum": lambda r: (
            r.__setitem__("epochs", [{**e, "test_acc": 99.9} for e in r["epochs"]]),
            r.pop("record_sha256"),
        ),
        "'status' is missing": lambda r: r.pop("status"),
        "'epochs' must be a list": lambda r: r.__setitem__("epochs", "many"),
        "'config' must be an object": lambda r: r.__setitem__("config", ["DNN"]),
        "'test_acc' must be a percentage": lambda r: r["epochs"][0].__setitem__("test_acc", "97 %"),
        "names run": lambda r: r.__setitem__("run_id", "another-run"),
        "is finished after": lambda r: r.__setitem__("epochs", r["epochs"][:1]),
    }
    for expected, edit in edits.items():
        record = json.loads(json.dumps(original))
        edit(record)
        if "record_sha256" in record:
            record["record_sha256"] = records._record_digest(record)
        (folder / "record.json").write_text(json.dumps(record))
        assert main(["runs", "check"]) == 1
        out = capsys.readouterr().out
        assert expected in out and "record.json" in out and "fix:" in out, (expected, out)
        with pytest.raises(RunStoreError, match="record.json"):
            training.train(RunConfig(**TINY, seed=0), progress=False)
        with pytest.raises(RunStoreError, match="record.json"):
            bundle.export(tmp_path / "out.tar.gz", needed=train_command.needed_weights("smoke"), profile="smoke")
        assert cli(["runs", "export", str(tmp_path / "out.tar.gz")]) == 1
        assert "Traceback" not in capsys.readouterr().err


def test_import_is_all_or_nothing_and_names_every_conflict(store, tmp_path, monkeypatch, capsys):
    file = tmp_path / "all.tar.gz"
    bundle.export(file, needed=None, profile="smoke")
    other = tmp_path / "other"
    monkeypatch.setenv("VITBN_RUNS_DIR", str(other))
    training.train(RunConfig(**TINY, seed=2, lr=2e-3), progress=False)  # an unrelated run of the other store
    third = RunConfig(**TINY, seed=2).run_id("cpu")
    (other / third).mkdir()
    (other / third / "record.json").write_bytes((store / third / "record.json").read_bytes())
    record = records.read_record(other / third)
    record["finished"] = "another day"
    write_record(other / third / "record.json", record)
    before = {k: v for k, v in _tree(other).items() if not k.startswith(".locks")}
    assert main(["runs", "import", str(file)]) == 1
    err = capsys.readouterr().err
    assert "1 conflict(s)" in err and third in err and "nothing was imported" in err
    after = {k: v for k, v in _tree(other).items() if not k.startswith(".locks")}
    assert after == before  # the first two runs were not imported either
    assert not [p for p in other.iterdir() if p.name.startswith(".import")]


def test_a_default_bundle_imports_as_records_that_check_as_intact(store, tmp_path, monkeypatch, capsys):
    (store / "hpo").mkdir()
    best = {"lr": 0.001, "batch_size": 100, "depth": 1, "trials": 2, "trial_epochs": 1}
    (store / "hpo" / "best-mnist-nowhere.json").write_text(json.dumps({"ViT": best}))
    file = tmp_path / "records.tar.gz"
    assert main(["runs", "export", str(file), "--profile", "smoke"]) == 0
    monkeypatch.setenv("VITBN_RUNS_DIR", str(tmp_path / "other"))
    assert main(["runs", "import", str(file)]) == 0
    out = capsys.readouterr().out
    assert "3 added" in out and "1 optimisation file(s)" in out
    (tmp_path / "other" / "notes").mkdir()
    assert main(["runs", "check"]) == 0
    out = capsys.readouterr().out
    assert "intact" in out and "3 finished run(s) are kept as their records alone" in out
    assert "not runs, left alone: notes/" in out and "retrain" not in out


def test_a_further_optimisation_replaces_an_earlier_one_and_a_diverging_one_is_refused(store, tmp_path, monkeypatch):
    study = store / "hpo" / "ViT-d1-mnist-e1-s0-0123456789"
    study.mkdir(parents=True)
    (study / "study.json").write_text('{"model": "ViT"}')
    (study / "ax_state.json").write_text('{"experiment": {}, "generation_strategy": {}, "v": 2}')
    (study / "trials.json").write_text('{"0": {"a": 1}, "1": {"a": 2}}')
    file = tmp_path / "b.tar.gz"
    bundle.export(file, needed=train_command.needed_weights("smoke"), profile="smoke")
    other = tmp_path / "other" / "hpo" / study.name
    other.mkdir(parents=True)
    (other / "trials.json").write_text('{"0": {"a": 1}}')
    (other / "ax_state.json").write_text('{"experiment": {}, "generation_strategy": {}, "v": 1}')
    monkeypatch.setenv("VITBN_RUNS_DIR", str(tmp_path / "other"))
    assert bundle.import_bundle(file)["state files"] == 1
    assert json.loads((other / "ax_state.json").read_text())["v"] == 2
    (other / "trials.json").write_text('{"0": {"a": 1}, "1": {"a": 3}}')
    with pytest.raises(bundle.BundleError, match="trials and this store.s differ"):
        bundle.import_bundle(file)


# -- a read-only store renders; every failure is one message -------------------------------------------------


def test_rendering_finished_runs_writes_nothing_to_the_store(store, monkeypatch):
    import shutil

    shutil.rmtree(store / ".locks")
    before = _tree(store)
    training.train_all([RunConfig(**TINY, seed=s) for s in range(3)], progress=False, train=False)
    assert sorted(p.name for p in store.iterdir()) == sorted(_ids())  # no lock folder, nothing new
    assert _tree(store) == before


def _read_only(folder: Path) -> list[str]:
    """A command prefix that runs with ``folder`` mounted read-only (a private mount namespace; root or not)."""
    import shutil

    if shutil.which("unshare") is None:
        pytest.skip("unshare (util-linux) is not installed")
    probe = subprocess.run(["unshare", "-rm", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"user namespaces are not available here ({probe.stderr.decode().strip()})")
    return ["unshare", "-rm", "sh", "-c", 'mount --bind -o ro "$0" "$0" && exec "$@"', str(folder)]


def test_an_unwritable_store_renders_and_training_in_it_is_one_message(store, tmp_path):
    import shutil

    shutil.rmtree(store / ".locks")
    code = (
        "import pathlib, sys; from vitbn_nb.engines import training; from vitbn_nb.store import runs; "
        "store = pathlib.Path(sys.argv[1]); "
        "sys.exit('store is writable') if __import__('os').access(store, __import__('os').W_OK) else None; "
        f"cfg = [runs.RunConfig(**{TINY!r}, seed=s) for s in range(3)]; "
        "print(len(training.train_all(cfg, progress=False))); "
        f"training.train(runs.RunConfig(**{{**{TINY!r}, 'epochs': 3}}), progress=False)"
    )
    done = subprocess.run(
        [*_read_only(store), sys.executable, "-c", code, str(store)],
        env={**os.environ, "VITBN_RUNS_DIR": str(store), "TQDM_DISABLE": "1"},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.stdout.strip().splitlines()[:1] == ["3"], done.stderr  # rendered from the read-only store
    assert "cannot be written" in done.stderr and "writable copy" in done.stderr, done.stderr
    assert sorted(p.name for p in store.iterdir()) == sorted(_ids())


def test_a_read_only_store_is_one_line_for_import_and_the_app(store, tmp_path):
    file = tmp_path / "all.tar.gz"
    bundle.export(file, needed=None, profile="smoke", store=store)
    empty = tmp_path / "empty"
    empty.mkdir()
    env = {**os.environ, "VITBN_RUNS_DIR": str(empty), "TQDM_DISABLE": "1"}
    for command in (["-m", "vitbn_nb", "runs", "import", str(file)], ["-m", "vitbn_nb.app"]):
        done = subprocess.run(
            [*_read_only(empty), sys.executable, *command],
            env=env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 1, done.stderr
        error = done.stderr.strip()
        assert len(error.splitlines()) == 1 and "Traceback" not in error and "[Errno" not in error, error
        assert f"the run store {empty} cannot be written (Read-only file system)" in error, error
        assert "writable copy" in error, error
    assert list(empty.iterdir()) == []


def test_a_full_disk_is_a_message_and_leaves_the_old_file(tmp_path, monkeypatch):
    target = tmp_path / "model.pt"
    target.write_bytes(b"the old weights")

    def full(*_args, **_kwargs):
        raise RuntimeError("[enforce fail at inline_container.cc:664] . PytorchStreamWriter failed writing file")

    monkeypatch.setattr(torch, "save", full)
    with pytest.raises(atomic.WriteError, match=r"model\.pt could not be written .*unchanged"):
        atomic.torch_save({"w": torch.zeros(1)}, target)
    assert target.read_bytes() == b"the old weights"
    assert [p.name for p in tmp_path.iterdir()] == ["model.pt"]  # no temporary left behind


def test_command_failures_are_one_message_not_a_traceback(store, tmp_path, monkeypatch, capsys):
    folder = store / _ids()[0]
    (folder / "record.json").unlink()
    (folder / "record.json").mkdir()  # a folder where the record should be
    assert cli(["runs", "check"]) == 1
    out = capsys.readouterr().out
    assert "record.json cannot be read" in out and "fix: delete" in out
    monkeypatch.setenv("VITBN_DEVICE", "gpu")
    assert cli(["train", "--profile", "smoke", "--chapters", "01"]) == 1
    err = capsys.readouterr().err
    assert "device='gpu' is not a device" in err and "Traceback" not in err
    with pytest.raises(Exception, match="is not a device"):
        cli(["train", "--profile", "smoke", "--chapters", "01", "--debug"])


@pytest.mark.parametrize("deadline", ["-5", "0", "nan", "inf"])
def test_a_deadline_must_be_positive_and_finite(run_store, deadline, capsys):
    assert main(["train", "--profile", "smoke", "--chapters", "01", f"--deadline={deadline}"]) == 1
    assert "positive, finite number of seconds" in capsys.readouterr().err


def test_a_deadline_that_leaves_no_room_for_an_epoch_is_not_retried(run_store, mnist_ready, capsys):
    assert main(["train", "--profile", "smoke", "--chapters", "01", "--deadline", "1e-9"]) == 1
    assert "left no room for one epoch" in capsys.readouterr().err
    assert not list(run_store.glob("*/record.json"))


# -- fixes that work ---------------------------------------------------------------------------------------


def test_a_truncated_model_of_a_finished_run_is_not_reused_silently(store):
    folder = store / _ids()[0]
    data = (folder / "model.pt").read_bytes()
    (folder / "model.pt").write_bytes(data[: len(data) // 2])
    with pytest.raises(RunStoreError, match="model.pt does not match its checksum.*runs retrain"):
        training.train(RunConfig(**TINY, seed=0), progress=False)
    assert main(["runs", "retrain", _ids()[0]]) == 0
    assert training.train(RunConfig(**TINY, seed=0), progress=False).status == "finished"


def test_a_checkpoint_left_beside_a_finished_record_is_finished_everywhere(store, monkeypatch, capsys):
    folder = store / _ids()[0]
    (folder / "checkpoint.pt").write_bytes((folder / "model.pt").read_bytes())  # a kill after the final save
    assert main(["runs", "check"]) == 0
    assert "still hold a checkpoint.pt" in capsys.readouterr().out
    assert training.train(RunConfig(**TINY, seed=0), progress=False, train=False).status == "finished"


def test_a_model_file_that_does_not_fit_its_model_is_damaged_not_intact(store, tmp_path, capsys):
    """Whole, weights-only and listed with its checksum, yet the weights of another model: named by check and import."""
    folder = store / _ids()[0]
    torch.save({"weight": torch.zeros(3, 3)}, folder / "model.pt")
    record = records.read_record(folder)
    record["checksums"]["model.pt"] = sha256(folder / "model.pt")
    write_record(folder / "record.json", record)
    assert main(["runs", "check"]) == 1
    out = capsys.readouterr().out
    assert f"{folder / 'model.pt'} does not fit its model (" in out and f"runs retrain {_ids()[0]}" in out
    file = tmp_path / "b.tar.gz"
    bundle.export(file, needed=None, profile="smoke", store=store)  # export loads weights, it builds no model
    with pytest.raises(bundle.BundleError, match=f"holds {_ids()[0]}/model.pt, which does not fit its model"):
        bundle.import_bundle(file, store=tmp_path / "other")


def test_a_damaged_committed_record_is_restored_from_git_never_deleted(run_store, tmp_path, monkeypatch):
    committed = tmp_path / "figures" / "records"
    folder = committed / RunConfig(**TINY).run_id("cpu")
    folder.mkdir(parents=True)
    (folder / "record.json").write_text('{"run_id": "cut sh')  # a truncated committed record
    monkeypatch.setenv("VITBN_BOOK_FIGURES_DIR", str(tmp_path / "figures"))
    monkeypatch.delenv("VITBN_COMMITTED_RECORDS")
    with pytest.raises(RunStoreError) as refused:
        training.train(RunConfig(**TINY), progress=False, train=False)
    text = str(refused.value)
    assert f"{folder / 'record.json'} cannot be read" in text and "delete" not in text
    assert f"fix: restore it from git (git checkout -- {folder / 'record.json'})" in text


# -- what the hostile probe found beyond the list ------------------------------------------------------


def _rewrite(folder: Path, edit) -> None:
    record = json.loads((folder / "record.json").read_text())
    edit(record)
    write_record(folder / "record.json", record)


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (lambda r: r["epochs"][-1].__setitem__("test_acc", 250.0), "'test_acc' must be a percentage"),
        (lambda r: r["epochs"][-1].__setitem__("test_acc", float("nan")), "'test_acc' must be a percentage"),
        (lambda r: r["epochs"][0].__setitem__("class_acc", [101.0] * 10), "class_acc: 0 must be a percentage"),
        (lambda r: r["epochs"][0].__setitem__("train_seconds", -1.0), "'train_seconds' must be seconds"),
        (lambda r: r["epochs"][0].__setitem__("train_loss", float("nan")), "'diverged' must say"),
        (lambda r: r.__setitem__("segments", [{}]), "segments/0: 'hardware' is missing"),
        (lambda r: r.__setitem__("hardware", {"device": "cpu"}), "'hardware' must be"),
        (lambda r: r.__setitem__("measurements", {"m": {"value": "x"}}), "'value' must be numbers or null"),
    ],
)
def test_impossible_numbers_in_a_well_checksummed_record_are_refused(store, edit, expected):
    """A checksum proves a record is whole, not who wrote it: what no run can produce is refused too."""
    folder = store / _ids()[0]
    _rewrite(folder, edit)
    with pytest.raises(RunStoreError, match=expected):
        records.read_record(folder)


def test_the_stores_files_are_declared_once_as_json_schema_which_every_committed_file_meets():
    for schema in (records.RECORD_SCHEMA, *records.STATE_SCHEMAS.values()):
        records._Validator.check_schema(schema)  # a JSON Schema, as jsonschema reads it
    committed = ROOT / "figures" / "records"
    found = sorted(committed.glob("*/record.json"))
    assert found and not [p for p in found if records.record_problem(json.loads(p.read_text()), p.parent.name)]
    state = sorted((committed / records.STATE_FOLDER).rglob("*.json"))
    assert state and not [p for p in state if records.state_file_problem(p)]
    assert records.state_problem("trials.json", {"0": {"lr": 0.1, "batch_size": True}}) == (
        "is not a trial ledger: 0: 'batch_size' is wrong: True is not of type 'integer'"
    )


def test_a_record_nested_too_deeply_is_damaged_not_a_bug(store, capsys):
    (store / _ids()[0] / "record.json").write_text("[" * 100_000 + "]" * 100_000)
    assert cli(["runs", "check"]) == 1
    out = capsys.readouterr().out
    assert "nested too deeply" in out and "bug" not in out


@pytest.mark.parametrize("name", ["", ".", "..", "hpo", ".locks", "../runs"])
def test_retrain_refuses_what_is_not_a_run_and_never_offers_to_delete_the_store(store, name, capsys):
    (store / "hpo").mkdir(exist_ok=True)
    assert main(["runs", "retrain", name]) == 1
    err = capsys.readouterr().err
    assert "is not a run in the run store" in err and "delete" not in err


def test_an_import_stopped_half_way_leaves_whole_runs_and_the_same_import_completes_it(
    store, tmp_path, monkeypatch, capsys
):
    records_only, everything = tmp_path / "records.tar.gz", tmp_path / "all.tar.gz"
    bundle.export(records_only, needed=train_command.needed_weights("smoke"), profile="smoke")
    bundle.export(everything, needed=None, profile="smoke")
    other = tmp_path / "other"
    monkeypatch.setenv("VITBN_RUNS_DIR", str(other))
    bundle.import_bundle(records_only)
    renames, real = [], Path.rename

    def stopped_after_one_move(self, target):
        if Path(target).parent.parent == other:  # a file renamed into a run of the store
            renames.append(self)
            if len(renames) == 2:
                raise KeyboardInterrupt  # stands for the kill: there is no undo to stop
        return real(self, target)

    monkeypatch.setattr(Path, "rename", stopped_after_one_move)
    with pytest.raises(KeyboardInterrupt):
        bundle.import_bundle(everything)
    monkeypatch.undo()
    monkeypatch.setenv("VITBN_RUNS_DIR", str(other))
    assert len(list(other.glob("*/model.pt"))) == 1  # one run given its weights, the others still records alone
    problems = damage.check_store()["problem"]
    assert len(problems) and problems.str.contains("an import that was interrupted").all()
    assert not list(other.glob(".import-*"))  # its temporary folder went with it
    assert cli(["runs", "export", str(tmp_path / "out.tar.gz")]) == 1  # never exported as if whole
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "holds an import that has not finished" in err and "fix:" in err
    assert bundle.import_bundle(everything)["updated"] == 2  # the same import completes it
    assert damage.check_store().empty and not damage.half_imported(other)
    assert len(list(other.glob("*/model.pt"))) == 3
    assert bundle.export(tmp_path / "out.tar.gz", needed=None, profile="smoke")["weights"] == 3


def test_a_bundle_is_not_written_inside_the_store(store, capsys):
    target = store / _ids()[0] / "model.pt"
    before = target.read_bytes()
    assert main(["runs", "export", str(target), "--weights", "all", "--profile", "smoke"]) == 1
    assert "inside the run store" in capsys.readouterr().err and target.read_bytes() == before


def test_optimisation_state_is_checked_as_the_optimisation_reads_it(store, tmp_path, monkeypatch, capsys):
    study = store / "hpo" / "ViT-d1-mnist-e1-s0-0123456789"
    study.mkdir(parents=True)
    (study / "trials.json").write_text('{"0": 5}')
    assert main(["runs", "check"]) == 1
    assert "damaged optimisation file" in capsys.readouterr().out
    (study / "trials.json").write_text('{"0": {"lr": 0.001}}')
    (study / "ax_state.json").write_text("{}")
    assert main(["runs", "check"]) == 1
    assert "not an Ax snapshot" in capsys.readouterr().out
    (study / "ax_state.json").unlink()
    file = tmp_path / "b.tar.gz"
    bundle.export(file, needed=train_command.needed_weights("smoke"), profile="smoke")
    files = _exported(store, tmp_path)
    files[f"runs/hpo/{study.name}/trials.json"] = b'{"0": {"accuracy": "high"}}'
    monkeypatch.setenv("VITBN_RUNS_DIR", str(tmp_path / "other"))
    with pytest.raises(bundle.BundleError, match="'accuracy' must be a percentage"):
        bundle.import_bundle(_bundle(tmp_path / "bad.tar.gz", files))


def test_a_short_deadline_over_finished_runs_is_success(store, capsys):
    configs = {
        c.run_id("cpu")
        for c in chapters.study("01_batchnorm_intro").plan(chapters.settings("01_batchnorm_intro", "smoke"))
    }
    assert main(["train", "--profile", "smoke", "--chapters", "01"]) == 0
    assert configs <= {p.name for p in store.iterdir()}
    assert main(["train", "--profile", "smoke", "--chapters", "01", "--deadline", "1e-6"]) == 0


def test_odd_things_in_place_of_a_run_folder_are_named_with_a_fix(store, tmp_path):
    import shutil

    folder = store / _ids()[0]
    shutil.rmtree(folder)
    folder.write_text("not a folder")
    with pytest.raises(RunStoreError, match="is a file, where the run's folder belongs.*fix: move"):
        training.train(RunConfig(**TINY, seed=0), progress=False)
    folder.unlink()
    folder.symlink_to(tmp_path)
    with pytest.raises(RunStoreError, match="is a link"):
        training.train(RunConfig(**TINY, seed=0), force=True, progress=False)
    folder.unlink()
    shutil.rmtree(store / ".locks", ignore_errors=True)
    (store / ".locks").write_text("")
    with pytest.raises(RunStoreError, match=r"\.locks is a file.*fix: delete"):
        training.train(RunConfig(**TINY, seed=0), progress=False)


def test_a_bundle_whose_sizes_disagree_with_its_list_is_refused_before_writing(store, tmp_path):
    files = _exported(store, tmp_path)
    name = next(n for n in files if n.endswith("model.pt"))
    listed = {**files, name: files[name] + b"\0"}  # listed one byte longer than it is
    with pytest.raises(bundle.BundleError, match="of the wrong size"):
        bundle.import_bundle(_bundle(tmp_path / "b.tar.gz", files, listed=listed))
    late = tmp_path / "late.tar.gz"
    with tarfile.open(late, "w:gz") as tar:  # bundle.json not first: nothing is read before the list
        for n, data in [("runs/x/record.json", b"{}"), ("bundle.json", b"{}")]:
            info = tarfile.TarInfo(n)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    with pytest.raises(bundle.BundleError, match="does not begin with bundle.json"):
        bundle.import_bundle(late)


def test_a_refused_pickle_never_suggests_loading_it_unsafely(store, tmp_path):
    folder = store / _ids()[0]
    _poison(folder / "model.pt", tmp_path / MARKER)
    with pytest.raises(RunStoreError) as refused:
        runs.Run(folder).load_model("cpu")
    assert "weights_only" not in str(refused.value) and "never loads" in str(refused.value)


def test_environment_variables_name_themselves_when_wrong(run_store, tmp_path, monkeypatch):
    from vitbn_nb import paths

    monkeypatch.setenv("VITBN_CHECKPOINT_SECONDS", "")
    assert run_folder.checkpoint_seconds() == 60  # empty means unset, like every other variable
    afile = tmp_path / "afile"
    afile.write_text("")
    monkeypatch.setenv("VITBN_RUNS_DIR", str(afile))
    with pytest.raises(ValueError, match="VITBN_RUNS_DIR=.*is a file"):
        paths.runs_dir()


def test_importing_runs_alone_makes_no_optimisation_folder(store, tmp_path, monkeypatch):
    file = tmp_path / "b.tar.gz"
    bundle.export(file, needed=train_command.needed_weights("smoke"), profile="smoke")
    monkeypatch.setenv("VITBN_RUNS_DIR", str(tmp_path / "other"))
    bundle.import_bundle(file)
    assert not (tmp_path / "other" / "hpo").exists()


def test_an_unreachable_mlflow_server_warns_once_and_does_not_hold_up_training(store, monkeypatch):
    from vitbn_nb.store import tracking

    tracking.unreachable.cache_clear()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:1")
    with pytest.warns(UserWarning, match="not mirrored to MLflow.*does not answer") as caught:
        training.train_all([RunConfig(**TINY, seed=s) for s in range(3)], progress=False)
    assert len([w for w in caught if "MLflow" in str(w.message)]) == 1
    with pytest.raises(ConnectionError, match="does not answer"):
        training.train(RunConfig(**TINY, seed=0), progress=False, mlflow=True)
    tracking.unreachable.cache_clear()


def test_a_quick_or_smaller_bench_never_replaces_the_books_bench_json(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from vitbn_nb.bench import printout

    figures = tmp_path / "figures"
    figures.mkdir()
    monkeypatch.setenv("VITBN_BOOK_FIGURES_DIR", str(figures))
    (figures / "bench.json").write_text('{"profile": "cpu", "kept": true}')
    for profile in ("smoke", "cpu"):
        result = SimpleNamespace(meta={"profile": profile}, to_dict=lambda p=profile: {"profile": p})
        written = printout.write(result, tmp_path / "out")
        assert (figures / "bench.json" in written) == (profile == "cpu")
    assert json.loads((figures / "bench.json").read_text()) == {"profile": "cpu"}
    (figures / "bench.json").write_text('{"profile": "paper"}')
    result = SimpleNamespace(meta={"profile": "cpu"}, to_dict=lambda: {"profile": "cpu"})
    assert figures / "bench.json" not in printout.write(result, tmp_path / "out")
