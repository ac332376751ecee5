"""The command line answers what costs nothing at once: --version and --help load neither torch nor pandas, and a
misspelt option is named as one."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _imports(*argv: str) -> tuple[subprocess.CompletedProcess, set[str]]:
    """Run ``python -X importtime -m vitbn_nb ARGV``; its result and every module it imported."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "vitbn_nb", *argv], capture_output=True, text=True, cwd=ROOT
    )
    modules = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    return done, modules


@pytest.mark.parametrize("argv", [("--version",), ("--help",), ("runs", "--help")])
def test_version_and_help_load_no_heavy_library(argv):
    done, modules = _imports(*argv)
    assert done.returncode == 0 and ("vitbn_nb 0." in done.stdout or "usage:" in done.stdout)
    assert not {"torch", "pandas", "numpy", "matplotlib"} & modules, sorted({"torch", "pandas"} & modules)


def test_a_misspelt_option_is_named_and_a_missing_command_lists_the_commands():
    done = subprocess.run([sys.executable, "-m", "vitbn_nb", "--foo"], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 2 and "unrecognized arguments: --foo" in done.stderr
    done = subprocess.run([sys.executable, "-m", "vitbn_nb"], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 2 and "choose a command: data, book" in done.stderr


@pytest.mark.parametrize(
    ("setting", "said"),
    [
        ("PROFILE=papr", "PROFILE=papr is not allowed"),
        ("CHAPTERS=3 99", "no chapter '99'"),
        ("TRAIN=always", "TRAIN=always is not allowed"),
    ],
)
def test_make_book_refuses_a_misspelt_setting_before_it_installs_or_reads_anything(setting, said):
    name, value = setting.split("=", 1)
    done = subprocess.run(["make", "-s", "book-settings", f"{name}={value}"], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode != 0 and said in done.stderr


def test_make_book_lets_good_settings_through():
    done = subprocess.run(
        ["make", "-s", "book-settings", "PROFILE=cpu", "CHAPTERS=3 05_depth_study 8"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    assert "\nbook: book-settings data\n" in (ROOT / "Makefile").read_text()  # checked before the data and install
