"""Derives chapter 04's protocol plan (:data:`.plan.PLAN_FILE`) from chapter 03's committed 30-epoch records and
writes it, to be committed and stamped before any of its runs: the seeds each claim of Experiment 2 asks from the
spread of the statistic that decides it, within :data:`BUDGET_HOURS`. The chapter only reads the committed file
(:mod:`.plan`); a test derives it again from the same records."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd

from ... import atomic
from ...judging import power, verdicts
from ...judging.claims import BN_MODELS
from ...judging.selection import final_accuracy, one_stream, paired, per_seed, select
from ...models import CONFIGURATIONS
from ...store.run_config import RunConfig
from . import article
from .plan import PLAN_FILE, studies

#: The CPU hours chapter 04's protocol may take (searches and retrains); what passes it is stated, not trained.
BUDGET_HOURS = 24.0
#: The fact behind the trial length: the reference code's Ax objective trains each trial for 3 epochs by default.
TRIAL_EPOCHS_SOURCE = (
    "the reference code's Ax objective trains a trial for n_epochs = 3 by default "
    "(Ax_modules/hypopt_train.py at 76e01e7, as in optimization/hypopt_train.py from 5c73cc8, the folder article 1 "
    "names)"
)
#: Chapter 03's rates at article 1's protocol whose 30-epoch runs give the spreads (their seeds are paired per rate).
SPREAD_LRS = (0.0005, 0.005)
#: The batch size the prices assume: chapter 03's, the only one its committed epochs were timed at (a search's
#: smaller batches take more steps per epoch, so a search may cost more).
PRICED_BATCH = 100


def _protocol(table: pd.DataFrame) -> pd.DataFrame:
    """Chapter 03's runs at article 1's whole protocol (every MNIST image, 30 epochs) at :data:`SPREAD_LRS`."""
    at = power.protocol_runs(table, "9999", epochs=article.EPOCHS, dataset="mnist")
    return at[at["lr"].apply(lambda lr: any(math.isclose(lr, r) for r in SPREAD_LRS))] if len(at) else at


def _cells(table: pd.DataFrame, statistic) -> list[pd.Series]:
    """``statistic`` per seed, one cell per rate (a cell's own mean is removed when pooled)."""
    return [statistic(select(table, lr=lr)) for lr in SPREAD_LRS]


def _spread(cells: list[pd.Series]) -> tuple[float, int]:
    values = [list(c.dropna()) for c in cells]
    return verdicts.pooled_spread(values), sum(max(0, len(v) - 1) for v in values)


def _claim_row(key, which, condition, test, cells, spread_from, **plan) -> dict:
    spread, dof = _spread(cells)
    bound = verdicts.spread_bound(spread, dof)
    row = {"key": key, "configuration": which, "condition": condition, "test": test, "spread": round(spread, 4)}
    row |= {"dof": dof, "spread_bound": round(bound, 4), "spread_from": spread_from, **plan}
    return row


def _needs(rows: list[dict]) -> None:
    """Each claim's seeds: those that detect its effect (or show equivalence within its margin) at the bound."""
    for row in rows:
        bound = row["spread_bound"]
        if row["test"] == verdicts.EQUIVALENCE_TEST:
            row["needed"] = verdicts.seeds_for_equivalence(row["margin"], bound) if math.isfinite(bound) else None
        elif row.get("effect") is not None:
            row["needed"] = verdicts.seeds_to_detect(row["effect"], bound) if math.isfinite(bound) else None
        else:
            row["needed"] = verdicts.MIN_SEEDS  # a gain above a level: its distance from the level is unknown


def retrains(seeds: dict[str, int], epochs: int = article.EPOCHS, batch_size: int = PRICED_BATCH) -> list[RunConfig]:
    """Every retrain at ``seeds`` per configuration, once each: a model in two configurations (ViT d6) takes the seeds
    of the one that asks more."""
    most: dict[tuple[str, int], int] = {}
    for which, count in seeds.items():
        for study in studies((which,)):
            most[study] = max(most.get(study, 0), count)
    return [
        RunConfig(model, {"depth": depth}, epochs=epochs, batch_size=batch_size, seed=seed)
        for (model, depth), count in most.items()
        for seed in range(count)
    ]


def _allocate(rows: list[dict], configurations, at: pd.DataFrame, hours: float) -> dict[str, int]:
    """Seeds per configuration: the rule's minimum, then each claim's ask, fewest first, wherever raising its
    configuration to it still fits ``hours`` (a claim that asks more than the budget affords keeps the seeds its
    configuration has, its planned power stated)."""
    seeds = {which: verdicts.MIN_SEEDS for which in configurations}

    def cost(chosen: dict[str, int]) -> float | None:
        seconds = power.plan_seconds(retrains(chosen), at)
        return None if seconds is None else seconds / 3600

    for row in sorted((r for r in rows if r["needed"]), key=lambda r: r["needed"]):
        which = row["configuration"]
        trial = {**seeds, which: max(seeds[which], row["needed"])}
        if (hours_then := cost(trial)) is not None and hours_then <= hours:
            seeds = trial
    return seeds


def derive(table: pd.DataFrame, trials: int = 20, trial_epochs: int = 3) -> dict:
    """The protocol plan from ``table`` (chapter 03's committed runs): per claim of Experiment 2 in each
    configuration, the spread of the statistic that decides it in chapter 03's 30-epoch runs (its one-sided upper
    bound, few degrees of freedom) and the seeds it asks; per configuration the most any of its claims asks, within
    :data:`BUDGET_HOURS` (searches first, then the configurations in order); a second search seed priced."""
    at = _protocol(table)
    claims = {c.key: c for c in article.findings()}
    configurations = tuple(CONFIGURATIONS)
    rows = []
    for which in configurations:
        depth_of = CONFIGURATIONS[which]
        for model, depth in depth_of.items():
            claim = claims[f"article1/optimised/accuracy/{model}"]
            cells = _cells(select(at, model=model, depth=depth), final_accuracy) if len(at) else []
            spread_from = f"chapter 03's {model} d{depth} final accuracies at lr {', '.join(map(str, SPREAD_LRS))}"
            rows.append(
                _claim_row(
                    claim.key, which, f"{which}: {model} d{depth}", verdicts.EQUIVALENCE_TEST, cells, spread_from,
                    margin=claim.margin.points, margin_from=claim.margin.source, level=claim.level,
                )
            )  # fmt: skip
        for model in BN_MODELS:
            pair = one_stream(at[at["model"].isin(["ViT", model])]) if len(at) else at
            vit, bn = dict(model="ViT", depth=depth_of["ViT"]), dict(model=model, depth=depth_of[model])
            stat = lambda t, side: per_seed(select(t, **side), verdicts.mean_accuracy)
            cells = [paired(stat(select(pair, lr=lr), vit), stat(select(pair, lr=lr), bn)) for lr in SPREAD_LRS]
            condition = f"{which}: ViT d{vit['depth']} against {model} d{bn['depth']}"
            spread_from = f"chapter 03's paired ViT − {model} mean accuracies over the epochs ({condition})"
            effect, effect_from = (
                power.DEFAULT_EFFECT_PT,
                f"{power.DEFAULT_EFFECT_PT:g} pt (the article gives no number)",
            )
            rows.append(
                _claim_row(
                    "article1/optimised/converges", which, condition, verdicts.DIFFERENCE_TEST,
                    cells if len(at) else [], spread_from, effect=effect, effect_from=effect_from,
                )
            )  # fmt: skip
            for kind in ("r_t", "r_v"):
                claim = claims[f"article1/optimised/{kind}/{model}"]
                rows.append(
                    {
                        "key": claim.key, "configuration": which, "condition": condition,
                        "test": f"one-sided t above {claim.level:g} %", "spread": None, "dof": None,
                        "spread_bound": float("nan"), "spread_from": "a timing: its distance from the level is unknown",
                        "level": claim.level,
                    }
                )  # fmt: skip
    _needs(rows)
    search_configs = [
        RunConfig(model, {"depth": depth}, epochs=trial_epochs, batch_size=PRICED_BATCH, seed=trial)
        for model, depth in studies(configurations)
        for trial in range(trials)
    ]
    search_seconds = power.plan_seconds(search_configs, at)
    search_hours = None if search_seconds is None else round(search_seconds / 3600, 2)
    seeds = _allocate(rows, configurations, at, BUDGET_HOURS - (search_hours or 0.0))
    retrain_seconds = power.plan_seconds(retrains(seeds), at)
    retrain_hours = None if retrain_seconds is None else round(retrain_seconds / 3600, 2)
    left = BUDGET_HOURS - (search_hours or 0.0) - (retrain_hours or 0.0)
    plans = {}
    for which in configurations:
        asked = max([verdicts.MIN_SEEDS, *(r["needed"] or 0 for r in rows if r["configuration"] == which)])
        plans[which] = {"seeds_asked": asked, "seeds": seeds[which]}
    for row in rows:
        planned = plans[row["configuration"]]["seeds"]
        row["planned"] = planned
        bound = row["spread_bound"]
        if row["test"] == verdicts.EQUIVALENCE_TEST:
            row["power_planned"] = round(verdicts.realised_equivalence_power(row["margin"], bound, planned), 3)
        elif row.get("effect") is not None:
            row["power_planned"] = round(verdicts.realised_power(row["effect"], bound, planned), 3)
    second = {
        "hours": search_hours,
        "afforded": search_hours is not None and search_hours <= left,
        "shows": (
            "whether each model's best lr and batch size, and their 30-epoch accuracy, depend on the search's own "
            "seed (its Sobol points and BoTorch's draws); one search per model cannot tell"
        ),
    }
    clean = lambda v: None if isinstance(v, float) and not math.isfinite(v) else v
    return {
        "plan": "04_bayes_opt/protocol",
        "what": (
            "article 1's Experiment 2 at its protocol, as run and as written: the searches, the retrains' seeds and "
            "the tests, fixed before any of their runs"
        ),
        "trials": trials,
        "trial_epochs": trial_epochs,
        "trial_epochs_from": TRIAL_EPOCHS_SOURCE,
        "epochs": article.EPOCHS,
        "power": verdicts.POWER,
        "alpha": verdicts.ALPHA,
        "spread_bound": verdicts.SPREAD_BOUND,
        "budget_hours": BUDGET_HOURS,
        "priced": (
            f"from the epochs chapter 03's committed 30-epoch runs took on a CPU, at batch {PRICED_BATCH} (smaller "
            "batches cost more)"
        ),
        "searches": [{"model": m, "depth": d, "trials": trials} for m, d in studies(configurations)],
        "search_hours": search_hours,
        "retrain_hours": retrain_hours,
        "second_search": second,
        "configurations": plans,
        "claims": [{k: clean(v) for k, v in row.items()} for row in rows],
    }


def write(table: pd.DataFrame, trials: int = 20, trial_epochs: int = 3) -> Path:
    """Write :func:`derive`'s plan to :data:`PLAN_FILE` (then commit it, and stamp it, before any of its runs)."""
    text = json.dumps(derive(table, trials, trial_epochs), indent=1, ensure_ascii=False) + "\n"
    atomic.write_text(PLAN_FILE, text)
    return PLAN_FILE
