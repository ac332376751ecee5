"""Every run id the chapters plan at ``cpu`` and ``paper`` stays as it is: the committed records and the training
campaign's runs are found by these ids, so a refactoring that changed one would silently retrain (or orphan) runs.

``tests/run_ids.json`` was written from the code before the norms became layer factories; new runs may be planned
beside them (chapter 5's ViTDyT), but every pinned id must still be planned. After a deliberate change of protocol,
rewrite the pin with ``python tests/test_run_ids.py`` and say why in the commit.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

PINNED = Path(__file__).with_name("run_ids.json")
PROFILES = ("cpu", "paper")


def planned_ids() -> dict[str, dict[str, list[str]]]:
    from vitbn_nb import chapters, train

    return {
        profile: {
            chapter: [config.run_id("cpu") for config in train.planned_runs(chapter, profile)]
            for chapter in chapters.CHAPTERS
        }
        for profile in PROFILES
    }


@pytest.fixture(scope="module")
def current() -> dict[str, dict[str, list[str]]]:
    return planned_ids()


@pytest.mark.parametrize("profile", PROFILES)
def test_every_pinned_run_id_is_still_planned(current, profile):
    pinned = json.loads(PINNED.read_text())[profile]
    for chapter, ids in pinned.items():
        missing = sorted(set(ids) - set(current[profile].get(chapter, [])))
        assert not missing, f"{chapter} at {profile} no longer plans {len(missing)} pinned runs: {missing[:5]}"


def test_the_pin_is_not_empty():
    pinned = json.loads(PINNED.read_text())
    assert sum(len(ids) for ids in pinned["paper"].values()) > 100
    assert sum(len(ids) for ids in pinned["cpu"].values()) > 100


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    PINNED.write_text(json.dumps(planned_ids(), indent=1, sort_keys=True) + "\n")
    print(f"wrote {PINNED}")
