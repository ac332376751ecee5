"""The seed plan: how many seeds each decisive claim needs, decided before its runs train.

A chapter's power analysis (its ``seed_plan``) reads only the runs finished before its plan was written (the settings'
``plan_written``), so the plan it shows is the one its settings committed, whatever trains after it. For each claim it
gives the spread of its claim family, the effect to detect (the article's own, else :data:`DEFAULT_EFFECT_PT`), the
seeds that detect it with the rule's power, the seeds planned, what those detect, and the hours left to train them.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass

import pandas as pd

from . import verdicts

#: The effect a plan detects where the article gives no number of its own.
DEFAULT_EFFECT_PT = 2.0


def before(table: pd.DataFrame, written: str) -> pd.DataFrame:
    """The runs of ``table`` that finished before ``written`` (an ISO date): what a plan written then could read."""
    if table.empty or "finished" not in table.columns:
        return table
    return table[table["finished"].fillna("9999").astype(str) < written]


@dataclass(frozen=True)
class PlannedClaim:
    """One claim of a seed plan, as the chapter shows it."""

    claim: str
    role: str
    test: str
    #: The claim family's spread (pooled standard deviation of its per-seed values) and where it comes from.
    spread: float
    spread_from: str
    #: The effect the plan must detect, in points, and whose it is.
    effect: float
    effect_from: str
    #: The seeds that detect ``effect`` with the rule's power (None: more than a plan can give), and those planned.
    needed: int | None
    planned: int
    #: What the planned seeds detect (points; for a count, the collapse rate against none, in %).
    detectable: float
    runs_left: int = 0
    hours_left: float = float("nan")

    def row(self) -> dict:
        return asdict(self)


def difference_plan(
    claim: str, role: str, family: Iterable[Iterable[float]], family_name: str, planned: int, effect: float | None
) -> PlannedClaim:
    """A difference claim's plan: the seeds whose paired t-test detects ``effect`` (the article's, else
    :data:`DEFAULT_EFFECT_PT`) given the family's pooled spread."""
    cells = [list(values) for values in family]
    spread = verdicts.pooled_spread(cells)
    effect_pt, effect_from = _effect(effect)
    needed = verdicts.seeds_to_detect(effect_pt, spread) if math.isfinite(spread) else None
    return PlannedClaim(
        claim,
        role,
        verdicts.DIFFERENCE_TEST,
        spread,
        f"{sum(len(c) for c in cells)} seeds of {family_name}",
        effect_pt,
        effect_from,
        needed,
        planned,
        verdicts.detectable_difference(spread, planned),
    )


def equivalence_plan(
    claim: str, role: str, family: Iterable[Iterable[float]], family_name: str, planned: int
) -> PlannedClaim:
    """An equivalence claim's plan: the seeds whose two one-sided tests show a zero difference within the margin."""
    cells = [list(values) for values in family]
    spread = verdicts.pooled_spread(cells)
    needed = verdicts.seeds_for_equivalence(verdicts.MARGIN_PT, spread) if math.isfinite(spread) else None
    half_width = verdicts.MARGIN_PT if not math.isfinite(spread) else _equivalence_reach(spread, planned)
    return PlannedClaim(
        claim,
        role,
        verdicts.EQUIVALENCE_TEST,
        spread,
        f"{sum(len(c) for c in cells)} seeds of {family_name}",
        verdicts.MARGIN_PT,
        f"the rule's margin (±{verdicts.MARGIN_PT:g} pt)",
        needed,
        planned,
        half_width,
    )


def _equivalence_reach(spread: float, seeds: int) -> float:
    """The margin ``seeds`` show a zero difference within, with the rule's power."""
    from scipy import stats

    alpha, power = verdicts.ALPHA, verdicts.POWER
    t = stats.t.ppf(1 - alpha, seeds - 1) + stats.t.ppf(1 - (1 - power) / 2, seeds - 1)
    return float(t * spread / math.sqrt(seeds))


def count_plan(claim: str, role: str, rate: float, rate_from: str, planned: int, *, most: int = 60) -> PlannedClaim:
    """A collapse-count claim's plan: the runs per model whose Fisher's test detects a collapse rate of ``rate`` (%)
    against a model that never collapses."""
    needed = next((n for n in range(verdicts.MIN_SEEDS, most + 1) if verdicts.detectable_rate(n, n) <= rate), None)
    return PlannedClaim(
        claim,
        role,
        verdicts.COUNT_TEST,
        float("nan"),
        "—",
        rate,
        rate_from,
        needed,
        planned,
        verdicts.detectable_rate(planned, planned),
    )


def _effect(effect: float | None) -> tuple[float, str]:
    if effect is None:
        return DEFAULT_EFFECT_PT, f"{DEFAULT_EFFECT_PT:g} pt (the article gives no number)"
    return float(effect), "the article's"


def priced(plan: PlannedClaim, runs_left: int, seconds_left: float | None) -> PlannedClaim:
    """``plan`` with the runs it still needs and their hours."""
    from dataclasses import replace

    hours = float("nan") if seconds_left is None else seconds_left / 3600
    return replace(plan, runs_left=runs_left, hours_left=hours)


def epoch_seconds(table: pd.DataFrame) -> pd.Series:
    """The median epoch (training and test pass) of the CPU runs in ``table`` not timed beside other work, per model,
    depth, dataset and training-set size: what a plan's runs cost on a CPU like the ones that trained them."""
    from .selection import timed_epochs

    cpu = timed_epochs(table[table["device"] == "cpu"]) if not table.empty else table
    if cpu.empty:
        return pd.Series(dtype=float)
    cpu = cpu.assign(seconds=cpu["train_seconds"] + cpu["test_seconds"], train_size=cpu["train_size"].fillna(-1))
    return cpu.groupby(["model", "depth", "dataset", "train_size"])["seconds"].median()


def plan_seconds(configs, table: pd.DataFrame) -> float | None:
    """The CPU seconds ``configs`` take to train (:func:`epoch_seconds`); None when one has no priced kind of run."""
    prices, total = epoch_seconds(table), 0.0
    if prices.empty:
        return None if configs else 0.0
    for config in configs:
        key = (config.model, config.model_kwargs.get("depth"), config.dataset, config.train_size or -1)
        if key in prices.index:
            total += float(prices[key]) * config.epochs
            continue
        # a kind no CPU trained yet: the median of the other models of its depth and data (the same size of model)
        alike = prices.reset_index()
        alike = alike[(alike["depth"] == key[1]) & (alike["dataset"] == key[2]) & (alike["train_size"] == key[3])]
        if alike.empty:
            return None
        total += float(alike["seconds"].median()) * config.epochs
    return total


def table(plans: Iterable[PlannedClaim]) -> pd.DataFrame:
    return pd.DataFrame([plan.row() for plan in plans])
