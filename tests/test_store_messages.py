"""Each failure the hostile probe found without its fix is one line with the fix (issue 47): a raw pickle where a
weight file belongs (no torch warnings), a read-only figures folder, a full disk during a save, and ``--threads``
beyond the machine's cores."""

import errno
import os
import pickle
import warnings

import pytest
import torch

from vitbn_nb import atomic
from vitbn_nb.__main__ import cli, describe
from vitbn_nb.engines import training
from vitbn_nb.publishing import figures
from vitbn_nb.store import records, runs
from vitbn_nb.store.runs import RunConfig

TINY = dict(model="DNN_d3", epochs=1, train_size=40, test_size=20)


@pytest.mark.parametrize("kind", ["raw pickle", "legacy torch.save"])
def test_a_raw_pickle_for_weights_is_one_line_without_torchs_warnings(run_store, mnist_ready, capfd, kind):
    run = training.train(RunConfig(**TINY), progress=False)
    model = run.folder / "model.pt"
    if kind == "raw pickle":
        model.write_bytes(pickle.dumps({"net.1.weight": [0.0] * 10}))
    else:
        torch.save({"w": torch.zeros(2)}, model, _use_new_zipfile_serialization=False)
    record = records.read_record(run.folder)
    record["checksums"]["model.pt"] = records.sha256(model)
    records.write_record(run.folder / "record.json", record)
    capfd.readouterr()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert cli(["runs", "check"]) == 1
        with pytest.raises(records.RunStoreError, match="is not a weight file the book writes") as refused:
            runs.Run(run.folder).load_model("cpu")
    assert not caught, [str(w.message) for w in caught]
    assert len(str(refused.value).splitlines()) == 1 and "fix: python -m vitbn_nb runs retrain" in str(refused.value)
    out, err = capfd.readouterr()
    assert "is not a weight file the book writes" in out and "Warning" not in out + err


def test_a_read_only_figures_folder_is_one_line_with_its_fix(tmp_path, monkeypatch):
    monkeypatch.setenv("VITBN_FIGURES_DIR", str(tmp_path / "figures"))

    real_open = os.open

    def read_only(path, *args, **kwargs):
        if str(path).endswith(".manifest.lock"):
            raise OSError(errno.EROFS, "Read-only file system", str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", read_only)
    with pytest.raises(atomic.WriteError) as refused, figures._manifest_lock():
        pass
    text = describe(refused.value)
    assert "[Errno" not in text and len(text.splitlines()) == 1
    assert "Read-only file system" in text and f"fix: make {tmp_path / 'figures'} writable" in text
    monkeypatch.setattr(os, "fsync", lambda fd: (_ for _ in ()).throw(OSError(errno.EROFS, "Read-only file system")))
    with pytest.raises(atomic.WriteError, match="Read-only file system.*unchanged; fix: make .* writable"):
        atomic.write_text(tmp_path / "table.csv", "a,b")


@pytest.mark.parametrize(
    "failure",
    [
        OSError(errno.ENOSPC, "No space left on device"),
        RuntimeError("[enforce fail at inline_container.cc:664] . PytorchStreamWriter failed writing file data/0"),
    ],
    ids=["oserror", "torch"],
)
def test_a_full_disk_during_a_save_is_one_line_with_its_fix(tmp_path, monkeypatch, failure):
    def full(*_args, **_kwargs):
        raise failure

    monkeypatch.setattr(torch, "save", full)
    with pytest.raises(atomic.WriteError) as refused:
        atomic.torch_save({"w": torch.zeros(1)}, tmp_path / "model.pt")
    text = describe(refused.value)
    assert len(text.splitlines()) == 1 and "it is unchanged; fix: free some disk space" in text, text
    assert "bug" not in text and text.count("fix:") == 1


def test_threads_beyond_the_machines_cores_is_refused_not_a_bug(run_store, capsys):
    assert cli(["campaign", "--threads", "100000"]) == 1
    err = capsys.readouterr().err
    assert f"--threads 100000 is not allowed; give 1 to {os.cpu_count()}" in err and "bug" not in err
