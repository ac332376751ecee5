"""The lent-GPU session script refuses what it cannot do, in one line, before it touches anything."""

import os
import subprocess
import sys
import tarfile
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


def test_a_gpu_image_without_the_record_checks_and_no_packed_wheels_is_told_to_pack(tmp_path):
    # the H200 image of 2026-11-28 lacked jsonschema: its python3 is stood in for by one that cannot import it
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "gpu-session.sh").write_text(SCRIPT.read_text())
    (tmp_path / "gpu").mkdir()
    (tmp_path / "MNIST").mkdir()
    with tarfile.open(tmp_path / "gpu" / "mnist.tar.gz", "w:gz") as packed:
        packed.add(tmp_path / "MNIST", arcname="MNIST")
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "python3").write_text("#!/bin/sh\nexit 1\n")
    (tmp_path / "bin" / "python3").chmod(0o755)
    done = subprocess.run(
        ["bash", "scripts/gpu-session.sh", "run", "60"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "OUT": str(tmp_path / "out"), "PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}"},
    )
    assert done.returncode == 2 and "python3 lacks jsonschema and gpu/wheels is missing" in done.stderr
    assert "scripts/gpu-session.sh pack" in done.stderr and not (tmp_path / "gpu" / "runs").exists()


def test_a_missing_dependency_is_one_line_naming_it_even_when_the_store_cannot_import():
    # what the GPU image did before the wheels were packed: the error's own description needed the missing module
    code = (
        "import sys; sys.modules['jsonschema'] = None\n"
        "from vitbn_nb.__main__ import cli\n"
        "sys.exit(cli(['runs', 'check']))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    line = done.stderr.strip()
    assert len(line.splitlines()) == 1 and "'jsonschema' is not installed" in line and "fix: install" in line
