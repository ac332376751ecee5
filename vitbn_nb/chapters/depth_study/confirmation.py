"""Chapter 05's confirmatory replication: fresh seeds, planned from the spreads the first (exploratory) campaign
measured, fixed in :data:`PLAN_FILE` before any of its runs trained. :func:`derive` computes the plan from the
committed records; the file it writes is the plan, and its commit (read from git, ``python -m vitbn_nb plans stamp``)
is the time every confirmatory run must follow. The verdicts read exactly the plan's seeds and are never pooled with
the exploratory ones."""

from __future__ import annotations

import dataclasses
import json
import math
from functools import cache
from pathlib import Path

import pandas as pd

from ... import atomic
from ...judging import power, verdicts
from ...judging.claims import Claim, protocol_scale, short_of
from ...judging.plans import reading
from ...judging.selection import final_accuracy, one_stream, paired, per_seed, select
from ...judging.verdicts import Verdict
from ...store.run_config import RunConfig
from ...store.runs import EMPTY_TABLE_COLUMNS
from . import article
from .judge import MODELS, cell_values, primary_values

#: The plan, as committed (data: the numbers :func:`derive` computed, not typed).
PLAN_FILE = Path(__file__).with_name("confirmation_plan.json")
#: The first fresh seed: chapter 05's earlier seeds are 0-9.
FIRST_SEED = 100
#: The CPU hours the replication may take (the campaign's budget for it); cells beyond it are stated, not trained.
BUDGET_HOURS = 30.0
#: The "comparable" cells the replication tests as equivalences: Fig 8 below the critical depth, Fig 9's d = 1-2.
COMPARABLE = (("fig8", 2), ("fig8", 3), ("fig8", 4), ("fig8", 5), ("fig9", 1), ("fig9", 2))


def confirm_key(key: str) -> str:
    """The confirmatory claim of an exploratory one: ``article2/primary/lr0.003`` → ``article2/confirm/primary/...``."""
    return key.replace("article2/", "article2/confirm/", 1)


def _configs(settings, lr: float, depths, seeds: int) -> list[RunConfig]:
    return [
        RunConfig.from_settings(
            settings, model=model, model_kwargs={"depth": depth}, dataset="mnist_aug", lr=lr, seed=seed
        )
        for depth in depths
        for seed in range(FIRST_SEED, FIRST_SEED + seeds)
        for model in MODELS
    ]


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
    primary["hours"] = round(power.plan_seconds(_configs(settings, lr, depths, seeds), table) / 3600, 2)
    margin = article.MARGINS["final accuracy"]
    cells = []
    for figure, depth in COMPARABLE:
        cell_lr = settings.figure_lr(figure)
        own = cell_values(table, settings, cell_lr, depth)
        cell_spread, dof = float(own.std(ddof=1)), len(own) - 1
        cell_bound = verdicts.spread_bound(cell_spread, dof)
        needed = verdicts.seeds_for_equivalence(margin.points, cell_bound)
        seconds = power.plan_seconds(_configs(settings, cell_lr, (depth,), needed or 0), table)
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


@cache
def plan() -> dict:
    """The committed plan (an empty one where none is committed yet)."""
    if not PLAN_FILE.exists():
        return {"claims": [], "first_seed": FIRST_SEED}
    return json.loads(PLAN_FILE.read_text())


def claims(settings) -> list[dict]:
    """The plan's claims at the rates ``settings`` train (a protocol whose rates moved replicates nothing)."""
    return [c for c in plan()["claims"] if any(math.isclose(c["lr"], lr) for lr in settings.depths)]


def trained_claims(settings) -> list[dict]:
    """The plan's claims whose runs it trains: the primary contrast and the cells it affords."""
    return [c for c in claims(settings) if c.get("afforded", True) and c["seeds"]]


def configs(settings) -> list[RunConfig]:
    """Every run the plan trains (under ``settings``' protocol), once each."""
    out = []
    for claim in trained_claims(settings):
        out += [c for c in _configs(settings, claim["lr"], claim["depths"], claim["seeds"]) if c not in out]
    return out


def seeds(claim: dict) -> range:
    return range(plan()["first_seed"], plan()["first_seed"] + claim["seeds"])


def is_confirmation(table: pd.DataFrame) -> pd.Series:
    """Which rows of a run table are the replication's (its fresh seeds), never pooled with the exploratory runs."""
    return table["seed"] >= plan()["first_seed"] if "seed" in table else pd.Series(False, index=table.index)


def findings(settings) -> list[Claim]:
    """The plan's claims: each exploratory claim it replicates, under its own key, said to be on fresh seeds."""
    base = {c.key: c for c in article.findings(settings)}
    return [
        dataclasses.replace(
            base[c["replicates"]],
            key=c["key"],
            source=f"{base[c['replicates']].source}; confirmatory replication on fresh seeds",
        )
        for c in claims(settings)
        if c["replicates"] in base
    ]


def _cell(table: pd.DataFrame, claim: dict, depth: int, statistic=None) -> pd.Series:
    at = one_stream(_runs(table, claim, (depth,)))
    if statistic is None:
        return paired(final_accuracy(at, model="ViTBNFFN"), final_accuracy(at, model="ViT"))
    return paired(per_seed(select(at, model="ViTBNFFN"), statistic), per_seed(select(at, model="ViT"), statistic))


def _runs(table: pd.DataFrame, claim: dict, depths) -> pd.DataFrame:
    if table.empty:
        return table
    at = table[(table["lr"] - claim["lr"]).abs() < 1e-12]
    return at[at["depth"].isin(depths) & at["seed"].isin(list(seeds(claim))) & at["model"].isin(MODELS)]


def judge(table: pd.DataFrame, settings) -> list[Verdict]:
    """The replication's verdicts over exactly its planned fresh seeds (``table``: its runs only): the primary
    contrast, then the afforded cells after Holm's correction over them; a cell the plan could not afford is shown
    with the seeds and hours it would take."""
    table = table if len(table.columns) else pd.DataFrame(columns=EMPTY_TABLE_COLUMNS)  # no run at all yet
    encoded = {c.key: c for c in findings(settings)}
    primary, cells = [], []
    for c in claims(settings):
        claim = encoded.get(c["key"])
        if claim is None:
            continue
        if not (c.get("afforded", True) and c["seeds"]):
            hours = "an unknown number of" if c.get("hours") is None else f"{c['hours']:.1f}"
            note = (
                f"not afforded: its own spread asks {c['seeds'] or 'more than 200'} fresh seeds ({hours} CPU hours) "
                f"beyond the plan's {plan()['budget_hours']:g} h"
            )
            cells.append(Verdict(c["key"], verdicts.NOT_RUN, role=verdicts.SECONDARY, note=note, test=c["test"]))
            continue
        at = _runs(table, c, c["depths"])
        if c["test"] == verdicts.DIFFERENCE_TEST:
            per_depth = [_cell(table, c, d, verdicts.mean_accuracy) for d in c["depths"]]
            values = pd.concat(per_depth, axis=1).dropna().mean(axis=1)
        else:
            values = _cell(table, c, c["depths"][0])
        scale = protocol_scale(at, article.EPOCHS)
        judged = verdicts.difference(
            c["key"], list(values), claim.direction, scale=scale, margin=claim.margin, effect=c.get("effect")
        )
        judged = (not at.empty and short_of(at, article.EPOCHS, c["key"])) or judged
        judged = verdicts.short_of_plan(judged, c["seeds"], present=not at.empty)
        if c["test"] == verdicts.DIFFERENCE_TEST:
            promised = verdicts.realised_power(c["effect"], c["spread_bound"], c["seeds"])
        else:
            promised = verdicts.realised_equivalence_power(c["margin"], c["spread_bound"], c["seeds"])
        judged = reading(dataclasses.replace(judged, power_planned=promised), at)
        if c["key"].startswith("article2/confirm/primary/"):
            primary.append(dataclasses.replace(judged, role=verdicts.PRIMARY))
        else:
            cells.append(judged)
    tested = [v for v in cells if v.outcome != verdicts.NOT_RUN]
    return primary + verdicts.holm(tested) + [v for v in cells if v.outcome == verdicts.NOT_RUN]
