"""The code is as ruff (configured in pyproject.toml) wants it: lint clean and formatted."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _ruff() -> list[str]:
    beside = Path(sys.executable).with_name("ruff")
    found = str(beside) if beside.is_file() else shutil.which("ruff")
    if found is None:
        pytest.skip("ruff is not installed (pip install -e '.[test]')")
    return [found]


@pytest.mark.parametrize("command", [["check"], ["format", "--check"]], ids=["check", "format"])
def test_ruff_is_clean(command):
    done = subprocess.run([*_ruff(), *command, "vitbn_nb", "tests"], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


#: Cohesion decides where a module ends; this only catches a module grown past what a reader can hold in one sitting
#: (a cap of 450 lines forced splits that left empty section headers behind).
MAX_MODULE_LINES = 700


def test_no_module_is_longer_than_a_reader_can_hold():
    long = {
        str(path.relative_to(ROOT)): n
        for path in sorted((ROOT / "vitbn_nb").rglob("*.py"))
        if (n := len(path.read_text().splitlines())) > MAX_MODULE_LINES
    }
    assert not long, f"modules over {MAX_MODULE_LINES} lines: {long}"
