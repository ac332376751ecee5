"""The book's one decision rule: every verdict in the chapters and the README comes from here. The rule is stated
once, in words, by :func:`rule_markdown` (the book's front page and the README print it).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd

#: Fewer seeds than this give no verdict.
MIN_SEEDS = 3
#: The interval's coverage.
LEVEL = 0.95

AGREES, DISAGREES, NOISE = "agrees", "disagrees", "within noise"
NOT_JUDGED, UNTESTABLE, NOT_RUN = "shown, not judged", "not testable at this scale", "not run"
OUTCOMES = (AGREES, DISAGREES, NOISE, NOT_JUDGED, UNTESTABLE, NOT_RUN)
#: The words of a speed ratio's verdict (:func:`speed_text`); a slower model is called slower, not only "no speed-up".
SPEEDUP, SLOWER = "a speed-up of", "no speed-up"
SLOWER_WORDS = f"{SLOWER}, slower"
#: The words of a ratio between two speed ratios (:func:`factor_text`): no model is faster there, a ratio is larger.
ABOVE, BELOW = "above 1", "below 1"
#: The section of the book's front page (and of the README) where a reader finds the rule from every verdict.
RULE_TITLE = "How this book judges a claim"


def rule_markdown() -> str:
    """The rule as the book's front page and the README state it (from the constants above, not retyped)."""
    return (
        f"Every verdict in the book and the README comes from one rule ({__name__}). A claim that one model "
        "beats another is judged from the **paired per-seed differences** (the two runs of a seed see the same "
        f"data in the same order) and their **{LEVEL:.0%} interval** (Student's t): **{AGREES}** when "
        f"the interval excludes zero on the article's side, **{DISAGREES}** when it excludes zero on the other "
        f'side, **{NOISE}** when it holds zero (for an article\'s "comparable", that is what it says). With fewer '
        f'than {MIN_SEEDS} seeds there is no verdict: **{NOT_JUDGED}**. A claim about a curve ("converges '
        'faster", "becomes unstable") is judged from a number read off each seed\'s whole curve: the mean '
        "accuracy over the epochs, or the largest fall below the best accuracy so far (a run that diverged falls to "
        "chance). A claim about what the article's full protocol produced (an absolute number, the accuracies its "
        "runs ended with, stability over its whole run) is judged only where the runs reached that protocol, "
        f"otherwise **{UNTESTABLE}** (with how many of the article's steps were reached). A timing ratio from "
        "other hardware is shown beside the article's and judged on the article's own qualitative claim (a gain of "
        "at least 60 %, say) from one value per seed, each run's epochs averaged first (the epochs of one run are "
        "not independent measurements) and a seed's two runs compared only over epochs that one machine timed, "
        "with the machines named: the one here, and the article's stated hardware beside its reference code's "
        "device. A speed ratio measured here (one "
        "model against another on the same machine) is judged from rounds of interleaved timings, the two measured "
        "back to back in each round: the interval of the per-round log ratio, shown as a ratio, says "
        f"**{SPEEDUP} x [low, high]** when it lies above 1, **{SLOWER_WORDS}** when below, **{NOISE}** when it "
        f"holds 1; with fewer than {MIN_SEEDS} rounds, **{NOT_JUDGED}**."
    )


@dataclass(frozen=True)
class Verdict:
    """One claim judged: the estimate (mean of the per-seed values), its 95 % interval, the seeds, the outcome."""

    claim: str
    outcome: str
    estimate: float = float("nan")
    low: float = float("nan")
    high: float = float("nan")
    seeds: int = 0
    unit: str = "pt"
    scale: str = ""
    #: What each value is: a seed (a pair of runs), or a round of interleaved timings.
    each: str = "seed"
    #: Which runs were compared (a model, a depth, a configuration), when a claim is judged more than once.
    condition: str = ""

    def __post_init__(self):
        if self.outcome not in OUTCOMES:
            raise ValueError(f"outcome={self.outcome!r} is not one of {OUTCOMES}")

    @property
    def shown(self) -> str:
        """The estimate as a reader sees it: ``+1.2 pt [−0.3, +2.7] (3 seeds)``; one seed shows its value alone."""
        if not math.isfinite(self.estimate):
            return "—"
        form = "+.1f" if self.unit == "pt" else ".2f" if self.unit == "×" else ".1f"  # only a difference signed
        interval = f" [{self.low:{form}}, {self.high:{form}}]" if math.isfinite(self.low) else ""
        return f"{self.estimate:{form}} {self.unit}{interval} ({self.count})"

    @property
    def count(self) -> str:
        return f"{self.seeds} {self.each}{'s' * (self.seeds != 1)}"

    @property
    def text(self) -> str:
        words = self.outcome
        if self.outcome == NOT_JUDGED:
            words = f"{'one ' + self.each if self.seeds == 1 else self.count}: {NOT_JUDGED}"
        return f"{words} ({self.scale})" if self.scale and self.outcome != NOT_RUN else words

    def row(self) -> dict:
        return {**asdict(self), "shown": self.shown, "verdict": self.text}


def is_rule_text(text: str) -> bool:
    """Whether ``text`` is a verdict as :class:`Verdict` words it (what a test checks every saved verdict against)."""
    import re

    outcomes = "|".join((*OUTCOMES, SPEEDUP, SLOWER, ABOVE, BELOW))
    return bool(re.match(rf"^((one|\d+) (seed|epoch|round)s?: {NOT_JUDGED}|{outcomes})( \(|;|:|,|$| \d)", str(text)))


def interval(values: Sequence[float], level: float = LEVEL) -> tuple[float, float, float, int]:
    """(mean, low, high, n) of the finite ``values``: the mean with its Student-t interval (nan bounds when n < 2)."""
    from scipy import stats

    finite = np.asarray([v for v in values if v is not None and np.isfinite(v)], dtype=float)
    n = len(finite)
    if n == 0:
        return float("nan"), float("nan"), float("nan"), 0
    mean = float(finite.mean())
    if n < 2:
        return mean, float("nan"), float("nan"), n
    half = float(stats.t.ppf(0.5 + level / 2, n - 1) * finite.std(ddof=1) / math.sqrt(n))
    return mean, mean - half, mean + half, n


def difference(
    claim: str,
    values: Sequence[float],
    direction: int,
    *,
    unit: str = "pt",
    scale: str = "",
    each: str = "seed",
    condition: str = "",
) -> Verdict:
    """Judge per-seed paired differences (oriented so that ``direction`` > 0 is the article's side; 0 for an
    article's "comparable"), by the rule above."""
    if direction not in (-1, 0, 1):
        raise ValueError(f"direction={direction!r} is not allowed; it is +1, -1 or 0 (comparable)")
    mean, low, high, n = interval(values)
    common = dict(unit=unit, scale=scale, each=each, condition=condition)
    if n == 0:
        return Verdict(claim, NOT_RUN, **common)
    if n < MIN_SEEDS:
        return Verdict(claim, NOT_JUDGED, mean, seeds=n, **common)
    side = 1 if low > 0 else -1 if high < 0 else 0
    outcome = NOISE if side == 0 else AGREES if side == direction else DISAGREES
    return Verdict(claim, outcome, mean, low, high, n, **common)


def above(claim: str, values: Sequence[float], level: float, **shown) -> Verdict:
    """Judge "the value exceeds ``level``" (a gain above 60 %) from per-seed values, shown as measured."""
    return _against(claim, values, level, +1, **shown)


def near(claim: str, values: Sequence[float], level: float, **shown) -> Verdict:
    """Judge "the value is about ``level``" (an article's "≈ 98.2 %"): within noise when the interval holds it."""
    return _against(claim, values, level, 0, **shown)


def _against(claim: str, values: Sequence[float], level: float, direction: int, **shown) -> Verdict:
    judged = difference(claim, [v - level for v in values], direction, **shown)
    return dataclasses.replace(
        judged, estimate=judged.estimate + level, low=judged.low + level, high=judged.high + level
    )


def speed_ratio(
    claim: str,
    rates: Sequence[float],
    baseline_rates: Sequence[float],
    *,
    scale: str = "",
    condition: str = "",
    each: str = "round",
) -> Verdict:
    """How many times as fast a model is as a baseline, from throughputs (images/s) measured in interleaved
    rounds: round i of ``rates`` and of ``baseline_rates`` were timed back to back, so a busy spell that slows both
    cancels in their ratio (``each="seed"``: the two runs of a seed instead). The rule judges the per-round log
    ratios (+1: faster); the estimate and interval are shown as ratios (× 1 = as fast)."""
    if len(rates) != len(baseline_rates):
        raise ValueError(f"{claim}: {len(rates)} rounds against {len(baseline_rates)}; the rounds must pair up")
    logs = [math.log(a / b) for a, b in zip(rates, baseline_rates) if a and b and a > 0 and b > 0]
    judged = difference(claim, logs, +1, unit="×", scale=scale, each=each, condition=condition)
    return dataclasses.replace(
        judged, estimate=math.exp(judged.estimate), low=math.exp(judged.low), high=math.exp(judged.high)
    )


def speed_text(verdict: Verdict) -> str:
    """A speed ratio's verdict in words: ``a speed-up of 1.13× [1.08, 1.18] (6 rounds)``, ``no speed-up, slower:
    0.93× [0.90, 0.96] (6 rounds)``, ``within noise: 0.99× [0.95, 1.03] (6 rounds)``, or shown, not judged."""
    return _ratio_words(verdict, f"{SPEEDUP} ", f"{SLOWER_WORDS}: ")


def factor_text(verdict: Verdict) -> str:
    """A ratio of two speed ratios (from :func:`speed_ratio` on per-round ratios) in words: ``below 1: 0.77× [0.70,
    0.85] (5 rounds)``, ``above 1: ...``, ``within noise: ...``, or shown, not judged."""
    return _ratio_words(verdict, f"{ABOVE}: ", f"{BELOW}: ")


def _ratio_words(v: Verdict, above: str, below: str) -> str:
    if v.outcome == NOT_RUN:
        return NOT_RUN
    if v.outcome == NOT_JUDGED:
        return f"{v.count}: {NOT_JUDGED}: {v.estimate:.2f}×"
    interval = f" [{v.low:.2f}, {v.high:.2f}]" if math.isfinite(v.low) else ""
    value = f"{v.estimate:.2f}×{interval} ({v.count})"
    return {AGREES: above, DISAGREES: below}.get(v.outcome, f"{NOISE}: ") + value


def untestable(claim: str, reached_steps: int, article_steps: int, *, unit: str = "pt", condition: str = "") -> Verdict:
    """A claim about an absolute number at the article's protocol, where the runs did not reach it."""
    return Verdict(claim, UNTESTABLE, unit=unit, scale=scale_note(reached_steps, article_steps), condition=condition)


def scale_note(reached_steps: int, article_steps: int | None) -> str:
    """How much of the article's protocol a run covered, for a verdict's scale."""
    if not article_steps:
        return f"{reached_steps:,} steps"
    return f"{reached_steps:,} of the article's {article_steps:,} steps"


# -- numbers read from whole curves, per run ---------------------------------------------------------------------


def mean_accuracy(curve: pd.DataFrame) -> float:
    """The mean test accuracy over a run's epochs (the area under its accuracy curve per epoch): higher when it
    converges faster, at equal final accuracy."""
    return float(curve.sort_values("epoch")["test_acc"].mean())


def largest_fall(curve: pd.DataFrame) -> float:
    """The largest fall of a run's test accuracy below its best so far (points); a run that diverged (NaN loss)
    falls to chance from its best."""
    curve = curve.sort_values("epoch")
    accuracy = curve["test_acc"].astype(float)
    if "diverged" in curve and curve["diverged"].astype(bool).any():
        return float(accuracy.max() - 10.0)
    return float((accuracy.cummax() - accuracy).max())
