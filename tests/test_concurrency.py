"""Two commands at once never cost a run: an import beside another import (of the same bundle or another), beside
`train` and beside `book`, each run in its own process and truly at the same time, the first one held where the
window is widest; and a kill -9 in that window leaves every run whole or absent, the store marked so that no export
reads it as whole, until the same import completes it. A store holding N runs holds each of them, and each of the
bundle's, exactly once afterwards."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from vitbn_nb.engines import training
from vitbn_nb.store import bundle, damage, records, runs
from vitbn_nb.store.records import write_record

ROOT = Path(__file__).resolve().parent.parent
TINY = dict(model="DNN_d3", epochs=2, train_size=40, test_size=20)
#: The bundle's runs, and the one run the store holds before each pair of commands.
IMPORTED = [runs.RunConfig(**TINY, seed=seed) for seed in range(4)]
HELD = runs.RunConfig(**TINY, seed=9, lr=2e-3)

#: A command line of the book run in a child process, held (monkeypatched there, never in the package) at
#: ``PAUSE_AT``: "unpacked" (the bundle unpacked into the import's temporary folder, nothing planned yet), "moving"
#: (the first run renamed into the store, the others not yet) or "moved" (every run renamed into the store, the runs'
#: locks held). It writes ``<flag>.waiting`` there and goes on when ``<flag>.go`` appears. ``RECOVERED`` names a file
#: written once the command has cleaned the temporary folders of dead imports (how many it removed); ``PLAN`` (JSON)
#: stands in for every chapter's plan of `train`.
CHILD = r"""
import json, os, pathlib, sys, time, types
from vitbn_nb import atomic, chapters, train
from vitbn_nb.__main__ import cli
from vitbn_nb.publishing import book
from vitbn_nb.store import bundle, runs

flag = pathlib.Path(os.environ.get("PAUSE_FLAG", "/nonexistent"))

def pause():
    atomic.write_text(flag.with_suffix(".waiting"), str(os.getpid()))  # atomic: the test reads it once it exists
    while not flag.with_suffix(".go").exists():
        time.sleep(0.05)

if os.environ.get("PAUSE_AT") == "unpacked":
    unpack = bundle.read_bundle
    def read_then_pause(*args, **kwargs):
        found = unpack(*args, **kwargs)
        pause()
        return found
    bundle.read_bundle = read_then_pause
elif os.environ.get("PAUSE_AT") == "moving":
    rename = pathlib.Path.rename
    def rename_then_pause(self, target):
        moved = rename(self, target)
        if pathlib.Path(target).parent == pathlib.Path(os.environ["VITBN_RUNS_DIR"]):  # a run, into the store
            pause()
        return moved
    pathlib.Path.rename = rename_then_pause
elif os.environ.get("PAUSE_AT") == "moved":
    move_in = bundle._move_in
    def move_then_pause(*args, **kwargs):
        move_in(*args, **kwargs)
        pause()
    bundle._move_in = move_then_pause
if os.environ.get("RECOVERED"):
    clean = bundle.clean_imports
    def clean_then_say(*args, **kwargs):
        cleaned = clean(*args, **kwargs)
        atomic.write_text(pathlib.Path(os.environ["RECOVERED"]), json.dumps(cleaned))
        return cleaned
    bundle.clean_imports = clean_then_say
if os.environ.get("PLAN"):
    plan = [runs.RunConfig(**config) for config in json.loads(os.environ["PLAN"])]
    chapters.study = lambda chapter: types.SimpleNamespace(plan=lambda settings: plan)
if os.environ.get("STOP_BOOK"):  # the book stops after its cleaning: rendering is not what is tested here
    def stop():
        raise SystemExit(0)
    book._check_kernel = stop
sys.exit(cli(sys.argv[1:]))
"""


@pytest.fixture(scope="module")
def bundles(tmp_path_factory, mnist_ready):
    """all.tar.gz: the four IMPORTED runs with their weights; held.tar.gz: HELD alone; conflicting.tar.gz: the
    IMPORTED runs, one of them finished differently (as on another machine)."""
    folder = tmp_path_factory.mktemp("bundles")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("VITBN_RUNS_DIR", str(folder / "source"))
        for config in IMPORTED:
            training.train(config, progress=False)
        bundle.export(folder / "all.tar.gz", needed=None, profile="smoke")
        record = records.read_record(folder / "source" / IMPORTED[0].run_id("cpu"))
        record["finished"] = "on another machine"
        write_record(folder / "source" / IMPORTED[0].run_id("cpu") / "record.json", record)
        bundle.export(folder / "conflicting.tar.gz", needed=None, profile="smoke")
        patch.setenv("VITBN_RUNS_DIR", str(folder / "held"))
        training.train(HELD, progress=False)
        bundle.export(folder / "held.tar.gz", needed=None, profile="smoke")
    return folder


@pytest.fixture
def store(bundles, tmp_path, monkeypatch):
    """A store holding the one run HELD (imported from its bundle)."""
    folder = tmp_path / "store"
    monkeypatch.setenv("VITBN_RUNS_DIR", str(folder))

    bundle.import_bundle(bundles / "held.tar.gz")
    return folder


def _start(tmp_path: Path, store: Path, *args: str, **env: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", CHILD, *args],  # -c: this checkout's package comes first on the path
        cwd=ROOT,
        env={**os.environ, "VITBN_RUNS_DIR": str(store), "TQDM_DISABLE": "1", **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_for(path: Path, process: subprocess.Popen, seconds: float = 300) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists():
        if process.poll() is not None:
            pytest.fail(f"the command ended before {path.name}: {process.communicate()}")
        assert time.monotonic() < deadline, f"{path.name} did not appear"
        time.sleep(0.05)


def _held_import(tmp_path: Path, store: Path, bundles: Path, held_at: str) -> tuple[subprocess.Popen, Path]:
    """`runs import all.tar.gz` started and held at ``held_at``; returns it and its pause flag."""
    flag = tmp_path / "pause"
    process = _start(
        tmp_path, store, "runs", "import", str(bundles / "all.tar.gz"), PAUSE_AT=held_at, PAUSE_FLAG=str(flag)
    )
    _wait_for(flag.with_suffix(".waiting"), process)
    return process, flag


def _finish(process: subprocess.Popen) -> tuple[int, str, str]:
    out, err = process.communicate(timeout=600)
    return process.returncode, out, err


def _runs(store: Path) -> dict[str, str]:
    """Every run of the store (folder name -> status), each record verified; and nothing else but the lock folder."""
    found = {}
    for entry in sorted(store.iterdir()):
        if entry.name == ".locks":
            continue
        assert not entry.name.startswith("."), f"left behind: {entry}"
        found[entry.name] = records.read_record(entry)["status"]
    assert damage.check_store(store).empty
    return found


def _ids(*configs: runs.RunConfig) -> set[str]:
    return {config.run_id("cpu") for config in configs}


def _second(kind: str, bundles: Path, tmp_path: Path) -> tuple[list[str], dict]:
    """The second command's line and environment."""
    if kind == "import-same":
        return ["runs", "import", str(bundles / "all.tar.gz")], {}
    if kind == "import-other":
        return ["runs", "import", str(bundles / "held.tar.gz")], {}
    if kind == "import-conflicting":
        return ["runs", "import", str(bundles / "conflicting.tar.gz")], {}
    if kind == "train":  # trains the bundle's runs: it must wait for the import, then reuse what it moved in
        plan = json.dumps([config.to_dict() for config in IMPORTED])
        return ["train", "--profile", "smoke", "--chapters", "01"], {"PLAN": plan}
    if kind == "book":
        folders = ["--output", str(tmp_path / "build"), "--figures", str(tmp_path / "figures")]
        return ["book", "--profile", "smoke", "--chapters", "01", "--no-html", *folders], {"STOP_BOOK": "1"}
    raise ValueError(kind)


@pytest.mark.parametrize(
    ("held_at", "second"),
    [
        ("unpacked", "import-other"),
        ("moved", "import-other"),
        ("unpacked", "import-same"),
        ("moved", "import-same"),
        ("moved", "train"),
        ("moved", "book"),
    ],
)
def test_an_import_and_a_second_command_at_once_keep_every_run_once(store, bundles, tmp_path, held_at, second):
    assert _runs(store) == {HELD.run_id("cpu"): "finished"}
    first, flag = _held_import(tmp_path, store, bundles, held_at)
    assert damage.check_store(store).empty  # a live import is not damage
    args, env = _second(second, bundles, tmp_path)
    recovered = tmp_path / "recovered"
    other = _start(tmp_path, store, *args, RECOVERED=str(recovered), **env)
    _wait_for(recovered, other)  # the second command has looked for dead imports, the first still held
    assert json.loads(recovered.read_text()) == 0  # and found none: the first one's folder is owned
    flag.with_suffix(".go").write_text("go")
    for process in (first, other):
        code, out, err = _finish(process)
        assert code == 0, (args, out, err)
    assert _runs(store) == dict.fromkeys(sorted(_ids(HELD, *IMPORTED)), "finished")


def test_a_loser_that_cannot_go_on_says_why_in_one_line(store, bundles, tmp_path):
    first, flag = _held_import(tmp_path, store, bundles, "moved")
    args, env = _second("import-conflicting", bundles, tmp_path)
    recovered = tmp_path / "recovered"
    other = _start(tmp_path, store, *args, RECOVERED=str(recovered), **env)
    _wait_for(recovered, other)
    flag.with_suffix(".go").write_text("go")
    assert _finish(first)[0] == 0
    code, _, err = _finish(other)  # it waited for the first import's runs, then found one that differs
    assert code == 1 and len(err.strip().splitlines()) == 1, err
    assert "1 conflict(s)" in err and IMPORTED[0].run_id("cpu") in err and "nothing was imported" in err
    assert _runs(store) == dict.fromkeys(sorted(_ids(HELD, *IMPORTED)), "finished")


@pytest.mark.parametrize("held_at", ["unpacked", "moving", "moved"])
def test_a_kill_9_of_an_import_leaves_whole_runs_and_export_refuses_until_the_same_import_completes_it(
    store, bundles, tmp_path, held_at
):
    before = {p.name: (p / "record.json").read_bytes() for p in store.iterdir() if not p.name.startswith(".")}
    first, _flag = _held_import(tmp_path, store, bundles, held_at)
    first.send_signal(signal.SIGKILL)
    first.communicate(timeout=60)
    assert len(list(store.glob(".import-*"))) == 1
    held = {p.name for p in store.iterdir() if not p.name.startswith(".")}
    assert len(held - set(before)) == {"unpacked": 0, "moving": 1, "moved": 4}[held_at]
    for name in held:  # each run whole (or absent)
        records.read_record(store / name)
    interrupted = held_at == "moving"  # "moved": every run in, the mark already gone
    assert len(damage.half_imported(store)) == interrupted
    export = _start(tmp_path, store, "runs", "export", str(tmp_path / "out.tar.gz"), "--weights", "all")
    code, _out, err = _finish(export)
    assert code == (1 if interrupted else 0), err
    if interrupted:  # refused in one line, never exported as if whole
        assert len(err.strip().splitlines()) == 1 and "has not finished" in err and "runs import" in err
        assert list(damage.check_store(store)["problem"]) == [
            "an import that was interrupted: the store may lack some of that bundle's runs"
        ]
    recovered = tmp_path / "recovered"
    code, _out, err = _finish(
        _start(tmp_path, store, "runs", "import", str(bundles / "held.tar.gz"), RECOVERED=str(recovered))
    )
    assert code == 0, err
    assert json.loads(recovered.read_text()) == 1  # the killed one's temporary folder, deleted unread
    assert not list(store.glob(".import-*")) and not list((store / ".locks").glob(".import-*"))
    assert len(damage.half_imported(store)) == interrupted  # another bundle completes nothing
    code, _out, err = _finish(_start(tmp_path, store, "runs", "import", str(bundles / "all.tar.gz")))
    assert code == 0, err
    assert not damage.half_imported(store)
    assert _runs(store) == dict.fromkeys(sorted(_ids(HELD, *IMPORTED)), "finished")
    code, out, err = _finish(
        _start(tmp_path, store, "runs", "export", str(tmp_path / "out.tar.gz"), "--weights", "all")
    )
    assert code == 0 and "runs export: 5 run(s)" in out, err
