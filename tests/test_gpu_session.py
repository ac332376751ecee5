"""The lent-GPU session script refuses what it cannot do, in one line, before it touches anything."""

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "gpu-session.sh"


def _run(*args, env=None, cwd=None):
    return subprocess.run(
        ["bash", str(SCRIPT), *args], capture_output=True, text=True, env={**os.environ, **(env or {})}, cwd=cwd
    )


def test_no_action_prints_its_usage():
    done = _run()
    assert done.returncode == 2 and "usage: bash scripts/gpu-session.sh pack | run SECONDS" in done.stderr


def test_run_without_a_deadline_or_an_out_folder_is_refused(tmp_path):
    assert _run("run").returncode != 0  # no seconds given
    done = _run("run", "60", env={"OUT": ""})
    assert done.returncode != 0 and "OUT" in done.stderr


def test_run_without_the_packed_data_says_how_to_pack_it(tmp_path):
    # a copy of the script in a tree without gpu/: it names the missing file and the command that makes it
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "gpu-session.sh").write_text(SCRIPT.read_text())
    done = subprocess.run(
        ["bash", "scripts/gpu-session.sh", "run", "60"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "OUT": str(tmp_path / "out")},
    )
    assert done.returncode == 2 and "gpu/mnist.tar.gz is missing" in done.stderr and "pack" in done.stderr
    assert not (tmp_path / "data").exists()  # nothing unpacked, nothing trained
