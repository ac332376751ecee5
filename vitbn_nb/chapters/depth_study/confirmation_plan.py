"""Derives chapter 05's confirmatory plan (:data:`.confirmation.PLAN_FILE`) from the first campaign's committed runs
and writes it, to be committed and stamped before any of its runs: the primary contrast's fresh seeds from the primary
statistic's realised spread, each "comparable" cell as an equivalence planned from its own spread, within
:data:`BUDGET_HOURS`. The chapter only reads the committed file (:mod:`.confirmation`)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd

from ... import atomic
from ...judging import power, verdicts
from . import article
from .confirmation import FIRST_SEED, PLAN_FILE, configs_at
from .judge import cell_values, primary_values

#: The CPU hours the replication may take (the campaign's budget for it); cells beyond it are stated, not trained.
BUDGET_HOURS = 30.0
#: The "comparable" cells the replication tests as equivalences: Fig 8 below the critical depth, Fig 9's d = 1-2.
COMPARABLE = (("fig8", 2), ("fig8", 3), ("fig8", 4), ("fig8", 5), ("fig9", 1), ("fig9", 2))


def confirm_key(key: str) -> str:
    """The confirmatory claim of an exploratory one: ``article2/primary/lr0.003`` → ``article2/confirm/primary/...``."""
    return key.replace("article2/", "article2/confirm/", 1)


def derive(settings, table: pd.DataFrame) -> dict:
    """The confirmatory plan from ``table`` (chapter 05's exploratory runs at article 2's protocol): the primary
    contrast at Fig 8's rate, its seeds from the primary statistic's realised spread (its upper bound, few degrees of
    freedom) to detect the lower end of the exploratory 95 % interval; each comparable cell as an equivalence at
    article 2's margin from its own cell's spread; priced by the committed epochs, cells afforded cheapest first."""
    lr = settings.figure_lr("fig8")
    values = primary_values(table, settings, "fig8")
    mean, low, _, n = verdicts.interval(values)
    spread = float(values.std(ddof=1))
    bound = verdicts.spread_bound(spread, n - 1)
    seeds = verdicts.seeds_to_detect(low, bound)
    depths = article.BEYOND_CRITICAL["fig8"]
    primary = {
        "key": confirm_key(article.primary_key(settings, "fig8")),
        "replicates": article.primary_key(settings, "fig8"),
        "test": verdicts.DIFFERENCE_TEST,
        "direction": +1,
        "lr": lr,
        "depths": list(depths),
        "effect": round(low, 3),
        "effect_from": f"the lower end of the exploratory contrast's 95 % interval (+{mean:.2f} pt, {n} seeds)",
        "spread": round(spread, 3),
        "dof": n - 1,
        "spread_bound": round(bound, 3),
        "seeds": seeds,
    }
    primary["hours"] = round(power.plan_seconds(configs_at(settings, lr, depths, seeds), table) / 3600, 2)
    margin = article.MARGINS["final accuracy"]
    cells = []
    for figure, depth in COMPARABLE:
        cell_lr = settings.figure_lr(figure)
        own = cell_values(table, settings, cell_lr, depth)
        cell_spread, dof = float(own.std(ddof=1)), len(own) - 1
        cell_bound = verdicts.spread_bound(cell_spread, dof)
        needed = verdicts.seeds_for_equivalence(margin.points, cell_bound)
        seconds = power.plan_seconds(configs_at(settings, cell_lr, (depth,), needed or 0), table)
        key = article.depth_key(settings, figure, depth)
        cells.append(
            {
                "key": confirm_key(key),
                "replicates": key,
                "test": verdicts.EQUIVALENCE_TEST,
                "direction": 0,
                "lr": cell_lr,
                "depths": [depth],
                "margin": margin.points,
                "margin_from": margin.source,
                "spread": round(cell_spread, 3),
                "dof": dof,
                "spread_bound": round(cell_bound, 3),
                "seeds": needed,
                "hours": round(seconds / 3600, 2) if seconds is not None else None,
            }
        )
    left = BUDGET_HOURS - primary["hours"]
    for cell in sorted(cells, key=lambda c: math.inf if c["hours"] is None else c["hours"]):
        cell["afforded"] = cell["hours"] is not None and cell["hours"] <= left
        left -= cell["hours"] if cell["afforded"] else 0
    return {
        "plan": "05_depth_study/confirmation",
        "what": "a confirmatory replication of article 2's conclusion on fresh seeds, planned before its runs",
        "first_seed": FIRST_SEED,
        "power": verdicts.POWER,
        "alpha": verdicts.ALPHA,
        "spread_bound": verdicts.SPREAD_BOUND,
        "budget_hours": BUDGET_HOURS,
        "claims": [primary, *cells],
    }


def write(settings, table: pd.DataFrame) -> Path:
    """Write :func:`derive`'s plan to :data:`PLAN_FILE` (then commit it, and stamp it, before any of its runs)."""
    atomic.write_text(PLAN_FILE, json.dumps(derive(settings, table), indent=1, ensure_ascii=False) + "\n")
    return PLAN_FILE
