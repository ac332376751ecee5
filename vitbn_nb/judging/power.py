"""The seed plan: how many seeds each decisive claim needs, decided before its runs train. A chapter's power analysis
reads only the runs finished before its plan was committed (its ``written()``, read from git): the plan it shows is
the committed one."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass, replace

import pandas as pd

from . import verdicts
from .selection import timed_epochs

#: The effect a plan detects where the article gives no number of its own.
DEFAULT_EFFECT_PT = verdicts.DEFAULT_EFFECT_PT


def protocol_runs(table: pd.DataFrame, written: str, **protocol) -> pd.DataFrame:
    """The runs of an article's whole protocol (every training image, ``protocol``'s columns) finished before
    ``written`` (an ISO date): what a plan written then could read."""
    if table.empty:
        return table
    whole = table["train_size"].isna()
    for column, value in protocol.items():
        whole &= table[column] == value
    chosen = table[whole]
    if chosen.empty or "finished" not in chosen.columns:
        return chosen
    return chosen[chosen["finished"].fillna("9999").astype(str) < written]


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
    """The seeds whose paired t-test detects ``effect`` (else :data:`DEFAULT_EFFECT_PT`) given the family's spread."""
    cells = [list(values) for values in family]
    spread, source = verdicts.pooled_spread(cells), f"{sum(len(c) for c in cells)} seeds of {family_name}"
    effect_pt, effect_from = (DEFAULT_EFFECT_PT, f"{DEFAULT_EFFECT_PT:g} pt (the article gives no number)")
    if effect is not None:
        effect_pt, effect_from = float(effect), "the article's"
    needed = verdicts.seeds_to_detect(effect_pt, spread) if math.isfinite(spread) else None
    reach = verdicts.detectable_difference(spread, planned)
    test = verdicts.DIFFERENCE_TEST
    return PlannedClaim(claim, role, test, spread, source, effect_pt, effect_from, needed, planned, reach)


def equivalence_plan(
    claim: str, role: str, family: Iterable[Iterable[float]], family_name: str, planned: int, margin: verdicts.Margin
) -> PlannedClaim:
    """An equivalence claim's plan: the seeds whose two one-sided tests show a zero difference within the claim's
    ``margin``."""
    cells = [list(values) for values in family]
    spread, source = verdicts.pooled_spread(cells), f"{sum(len(c) for c in cells)} seeds of {family_name}"
    points = margin.points
    needed = verdicts.seeds_for_equivalence(points, spread) if math.isfinite(spread) else None
    reach = verdicts.equivalence_reach(spread, planned) if math.isfinite(spread) else points
    margin, test = points, verdicts.EQUIVALENCE_TEST
    # the margin an article resolves, capped by the rule's ceiling: where the cap binds, not the article's number
    effect_from = f"the claim's margin (±{margin:g} pt)"
    return PlannedClaim(claim, role, test, spread, source, margin, effect_from, needed, planned, reach)


def contrast_plan(
    claim: str,
    direction: int,
    role: str,
    family: Iterable[Iterable[float]],
    family_name: str,
    planned: int,
    margin: verdicts.Margin | None = None,
) -> PlannedClaim:
    """A paired claim's plan by its direction: "no difference" (0) as :func:`equivalence_plan`, a side as
    :func:`difference_plan` (the rule's default effect: the articles give no number)."""
    if direction == 0:
        return equivalence_plan(claim, role, family, family_name, planned, margin)
    return difference_plan(claim, role, family, family_name, planned, None)


def count_plan(claim: str, role: str, rate: float, rate_from: str, planned: int, *, most: int = 60) -> PlannedClaim:
    """The runs per model whose Fisher's test detects a collapse rate of ``rate`` (%) against none."""
    needed = next((n for n in range(verdicts.MIN_SEEDS, most + 1) if verdicts.detectable_rate(n, n) <= rate), None)
    reach, test = verdicts.detectable_rate(planned, planned), verdicts.COUNT_TEST
    if verdicts.smallest_count_p(planned, planned) >= verdicts.ALPHA:  # no count of these runs reaches the level
        decidable = next(n for n in range(planned, most + 1) if verdicts.smallest_count_p(n, n) < verdicts.ALPHA)
        reach_p = f"Fisher's exact needs {decidable} to reach p < {verdicts.ALPHA:g}"
        test = f"{verdicts.NOT_DECIDABLE} with {planned} runs per model ({reach_p})"
    return PlannedClaim(claim, role, test, float("nan"), "—", rate, rate_from, needed, planned, reach)


def priced(plan: PlannedClaim, left: list, table: pd.DataFrame) -> PlannedClaim:
    """``plan`` with the runs it still needs (``left``) and their CPU hours (:func:`plan_seconds` over ``table``)."""
    seconds = plan_seconds(left, table)
    return replace(plan, runs_left=len(left), hours_left=float("nan") if seconds is None else seconds / 3600)


def epoch_seconds(table: pd.DataFrame) -> pd.Series:
    """Median CPU epoch seconds (training and test, not timed beside other work) per model, depth, data, size."""
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


def planned_power(row: dict) -> float:
    """The power a plan's row promised its claim: its planned seeds against its effect (or margin) at the spread it
    planned from (nan for a count, or where it had no spread)."""
    spread, seeds, effect = row.get("spread"), row.get("planned"), row.get("effect")
    if spread is None or not math.isfinite(spread or math.nan) or not seeds or effect is None:
        return float("nan")
    if row.get("test") == verdicts.EQUIVALENCE_TEST:
        return verdicts.realised_equivalence_power(float(effect), float(spread), int(seeds))
    if row.get("test") == verdicts.DIFFERENCE_TEST:
        return verdicts.realised_power(float(effect), float(spread), int(seeds))
    return float("nan")


def with_planned_power(found: list, frame: pd.DataFrame) -> list:
    """``found`` with each verdict's planned power from its plan's row in ``frame`` (a seed plan), where it has none."""
    promised = {row["claim"]: planned_power(row) for row in frame.to_dict("records")} if len(frame) else {}
    return [
        replace(v, power_planned=promised[v.claim])
        if v.claim in promised and not math.isfinite(v.power_planned if v.power_planned is not None else math.nan)
        else v
        for v in found
    ]
