"""Chapter 05's confirmatory replication: fresh seeds, planned from the spreads the first (exploratory) campaign
measured, fixed in :data:`PLAN_FILE` before any of its runs trained (derived from the committed records by
:mod:`.confirmation_plan`; its commit, read from git with ``python -m vitbn_nb plans stamp``, is the time every
confirmatory run must follow). The verdicts read exactly the plan's seeds and are never pooled with the exploratory
ones."""

from __future__ import annotations

import dataclasses
import json
import math
from functools import cache
from pathlib import Path

import pandas as pd

from ...judging import verdicts
from ...judging.claims import Claim, protocol_scale, short_of
from ...judging.plans import reading
from ...judging.selection import final_accuracy, one_stream, paired, per_seed, select
from ...judging.verdicts import Verdict
from ...store.run_config import RunConfig
from ...store.runs import EMPTY_TABLE_COLUMNS
from . import article
from .judge import MODELS

#: The plan, as committed (data: the numbers :func:`.confirmation_plan.derive` computed, not typed).
PLAN_FILE = Path(__file__).with_name("confirmation_plan.json")
#: The first fresh seed: chapter 05's earlier seeds are 0-9.
FIRST_SEED = 100


def configs_at(settings, lr: float, depths, seeds: int) -> list[RunConfig]:
    """The runs of ``seeds`` fresh seeds at ``lr`` and ``depths``, both models, under ``settings``' protocol."""
    return [
        RunConfig.from_settings(
            settings, model=model, model_kwargs={"depth": depth}, dataset="mnist_aug", lr=lr, seed=seed
        )
        for depth in depths
        for seed in range(FIRST_SEED, FIRST_SEED + seeds)
        for model in MODELS
    ]


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
        out += [c for c in configs_at(settings, claim["lr"], claim["depths"], claim["seeds"]) if c not in out]
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
            hours = (
                "CPU hours unknown: no run of its depths held CPU epoch times to price it"
                if c.get("hours") is None
                else f"{c['hours']:.1f} CPU hours"
            )
            note = (
                f"not afforded: its own spread asks {c['seeds'] or 'more than 200'} fresh seeds ({hours}) "
                f"beyond what the plan's {plan()['budget_hours']:g} CPU hours left after its primary contrast and "
                "cheaper cells"
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
