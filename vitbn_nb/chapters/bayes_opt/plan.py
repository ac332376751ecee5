"""Chapter 04's plan at article 1's protocol as committed in :data:`PLAN_FILE` before any of its searches or retrains
trained: one 20-trial search per model and configuration, then each model's best settings retrained for 30 epochs
with the seeds the plan fixes. The chapter reads the plan; :mod:`.protocol_plan` derived it from the committed records,
and its commit (read from git, ``python -m vitbn_nb plans stamp``) is the time every run it judges must follow."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

from ...models import CONFIGURATIONS

#: The plan, as committed (data: the numbers :func:`.protocol_plan.derive` computed, not typed).
PLAN_FILE = Path(__file__).with_name("protocol_plan.json")


def studies(configurations=tuple(CONFIGURATIONS)) -> list[tuple[str, int]]:
    """(model, depth) of every search, once each, in the configurations' order (ViT d6 serves both)."""
    found = []
    for which in configurations:
        found += [(m, d) for m, d in CONFIGURATIONS[which].items() if (m, d) not in found]
    return found


@cache
def plan() -> dict:
    """The committed plan (one with no claims where none is committed yet)."""
    if not PLAN_FILE.exists():
        return {"claims": [], "configurations": {}}
    return json.loads(PLAN_FILE.read_text())


def seeds(configuration: str) -> int | None:
    """The retrains' seeds the plan fixes for ``configuration`` (None where it fixes none)."""
    return plan()["configurations"].get(configuration, {}).get("seeds")


def claims(configuration: str | None = None) -> list[dict]:
    return [c for c in plan()["claims"] if configuration is None or c["configuration"] == configuration]
