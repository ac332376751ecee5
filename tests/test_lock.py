"""The lock, pyproject.toml and environment.yml agree: every declared dependency is pinned, within its range."""

import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
LOCKS = {version: ROOT / "requirements" / f"lock-py{version.replace('.', '')}.txt" for version in ("3.11", "3.12")}


def pins(lock: Path) -> dict[str, str]:
    found = {}
    for line in lock.read_text().splitlines():
        match = re.match(r"^([A-Za-z0-9_.\-\[\]]+)==([^\s;\\]+)", line)
        if match:
            found[canonicalize_name(match.group(1).split("[")[0])] = match.group(2)
    return found


def declared() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = [
        *project["dependencies"],
        *(r for extra in project["optional-dependencies"].values() for r in extra),
    ]
    pins_file = (ROOT / "requirements" / "pins.in").read_text().splitlines()
    requirements += [line for line in pins_file if line.strip() and not line.startswith("#")]
    return [Requirement(r) for r in requirements]


@pytest.mark.parametrize("version", sorted(LOCKS))
def test_every_declared_dependency_is_pinned_within_its_range(version):
    lock = LOCKS[version]
    assert lock.is_file(), f"{lock} is missing: run `make lock`"
    pinned = pins(lock)
    for requirement in declared():
        name = canonicalize_name(requirement.name)
        assert name in pinned, f"{requirement.name} is declared but not in {lock.name}: run `make lock`"
        assert requirement.specifier.contains(pinned[name], prereleases=True), (
            f"{lock.name} pins {name}=={pinned[name]}, outside pyproject's {requirement}: run `make lock`"
        )
    assert pinned["torch"] == "2.14.1" and pinned["torchvision"] == "0.29.1"  # the build machines' torch
    text = lock.read_text()
    assert "--hash=sha256:" in text and "make lock" in text.splitlines()[1]


def test_the_locks_hash_every_pin():
    for lock in LOCKS.values():
        blocks = re.split(r"\n(?=[A-Za-z0-9])", lock.read_text())
        for block in blocks:
            if "==" in block.split("\n")[0]:
                assert "--hash=sha256:" in block, f"{lock.name}: {block.splitlines()[0]} has no hash"


def test_environment_yml_installs_the_same_pins():
    text = (ROOT / "environment.yml").read_text()
    python = re.search(r"- python=(\d+\.\d+)", text).group(1)
    assert python in LOCKS
    assert f"-r requirements/lock-py{python.replace('.', '')}.txt" in text and "--require-hashes" in text
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    minimum = re.search(r">=\s*(\d+\.\d+)", project["requires-python"]).group(1)
    assert all(tuple(map(int, v.split("."))) >= tuple(map(int, minimum.split("."))) for v in LOCKS)


def test_the_makefile_installs_from_the_lock():
    makefile = (ROOT / "Makefile").read_text()
    assert "--require-hashes -r $(LOCK)" in makefile and "requirements/lock-py$(PYVER).txt" in makefile
    assert "\nlock:" in makefile
