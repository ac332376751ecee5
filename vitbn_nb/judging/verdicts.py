"""The book's one decision rule: every verdict in the chapters and the README comes from here. The rule is stated
once, in words, by :func:`.rule_text.rule_markdown` (the book's front page and the README print it).
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd

#: Fewer seeds than this give no verdict.
MIN_SEEDS = 3
#: The interval's coverage.
LEVEL = 0.95

#: The power and two-sided size behind "the smallest difference its seeds could have detected", and the size of
#: every test the rule makes (a one-sided 5 % test each way for an equivalence: its 90 % interval).
POWER, ALPHA = 0.80, 0.05
#: The widest equivalence margin (the rule's ceiling), in points: "comparable" holds when the difference lies within
#: ± the claim's margin, an article's "≈ X %" when the accuracy lies within X ± it. Each article's margins live with its
#: facts (:class:`Margin`); this ceiling applies where accuracies are at most :data:`HIGH_ACCURACY`.
MARGIN_PT = 2.0
#: Above this accuracy (%) the ceiling is :data:`HIGH_MARGIN_PT`: a 2 pt margin at 98 % spans every working model.
HIGH_ACCURACY, HIGH_MARGIN_PT = 95.0, 1.0
#: The margins every equivalence row is also judged at (its sensitivity: whether a verdict rests on the margin).
SENSITIVITY_PT = (0.5, 1.0, 2.0)


@dataclass(frozen=True)
class Margin:
    """An equivalence margin an article resolves: half the smallest gap the same article reads as a real difference
    between these models at this measure (``gap``; None: it reads none there), never wider than the rule's ceiling
    (1 pt where the accuracies are above 95 %, 2 pt otherwise). ``reason``: where the gap is read, in a few words."""

    gap: float | None
    accuracy: float
    reason: str
    #: The measure's unit: accuracy points ("pt", under the rule's ceilings), or a relative time ("%", whose margin
    #: is the article's half gap alone: the ceilings are of accuracy).
    unit: str = "pt"

    @property
    def ceiling(self) -> float:
        if self.unit != "pt":
            return math.inf
        return HIGH_MARGIN_PT if self.accuracy > HIGH_ACCURACY else MARGIN_PT

    @property
    def points(self) -> float:
        return self.ceiling if self.gap is None else min(self.gap / 2, self.ceiling)

    @property
    def source(self) -> str:
        """The margin's reason in words: the gap halved, or the ceiling, and why."""
        if self.gap is not None and self.gap / 2 <= self.ceiling:
            return f"half the {self.gap:g} {self.unit} gap {self.reason}"
        if self.gap is None:
            return f"the ceiling ({self.ceiling:g} pt): the article reads no gap at this measure; {self.reason}"
        return f"the ceiling ({self.ceiling:g} pt), below half the {self.gap:g} pt gap {self.reason}"


#: What an accuracy (%) can be. An interval of one model's accuracy stops at these ends: Student's t knows nothing of
#: them, and since the true mean lies inside, cutting the interval there keeps its coverage and moves no verdict whose
#: threshold or margin lies inside them (a logit or bootstrap interval would change what is estimated, or need more
#: seeds than the rule plans).
ACCURACY_BOUNDS = (0.0, 100.0)
#: The effect a plan detects where the article gives no number of its own.
DEFAULT_EFFECT_PT = 2.0
#: Instability, defined once: a run becomes unstable when its test accuracy falls at least this many points below its
#: best so far at any epoch, or its loss becomes non-finite, whatever its ending (article 1's ViT "plummets near epoch
#: 15" and may climb back). Chosen after article 1's lr 0.01 runs were seen: every verdict on it is exploratory.
COLLAPSE_PT = 10.0
#: A fall has recovered when a later epoch comes back within this many points of the best before it.
RECOVERED_PT = 1.0

AGREES, DISAGREES, NOISE = "agrees", "disagrees", "within noise"
EQUIVALENT, NOT_EQUIVALENT, UNDECIDED = "equivalent", "not equivalent", "undecided"
NOT_JUDGED, UNTESTABLE, NOT_RUN = "shown, not judged", "not testable at this scale", "not run"
#: A count whose runs cannot reach the rule's level whatever they show (Fisher's exact, 3 runs against 3: p >= 0.10).
NOT_DECIDABLE = "not decidable"
OUTCOMES = (
    *(AGREES, DISAGREES, NOISE, EQUIVALENT, NOT_EQUIVALENT, UNDECIDED),
    *(NOT_DECIDABLE, NOT_JUDGED, UNTESTABLE, NOT_RUN),
)
#: The tests a verdict can come from (its ``test`` column).
DIFFERENCE_TEST, EQUIVALENCE_TEST, COUNT_TEST = "paired t", "two one-sided t (equivalence)", "Fisher's exact (counts)"
#: A verdict's role where an article draws one conclusion from several panels: the one contrast its plan fixed, or a
#: panel's cell (decided after Holm's correction over its figure's cells).
PRIMARY, SECONDARY = "primary", "secondary"
#: The words of a speed ratio's verdict (:func:`speed_text`); a slower model is called slower, not only "no speed-up".
SPEEDUP, SLOWER = "a speed-up of", "no speed-up"
SLOWER_WORDS = f"{SLOWER}, slower"
#: The words of a ratio between two speed ratios (:func:`factor_text`): no model is faster there, a ratio is larger.
ABOVE, BELOW = "above 1", "below 1"
#: The section of the book's front page (and of the README) where a reader finds the rule from every verdict.
RULE_TITLE = "How this book judges a claim"


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
    #: The coverage of [low, high] (95 %; 90 % for an equivalence) and the test that decided.
    level: float = LEVEL
    test: str = DIFFERENCE_TEST
    #: The article's side (+1, -1; 0 for an equivalence), kept so that a correction can decide again.
    direction: int = 0
    #: The test's p value, and after Holm's correction over a figure's cells (what decides, when set).
    p: float = float("nan")
    p_holm: float = float("nan")
    #: The smallest difference these seeds could have detected (:data:`POWER`, two-sided :data:`ALPHA`), from the
    #: claim family's spread; an equivalence's margin.
    detectable: float = float("nan")
    margin: float = float("nan")
    #: Counts of collapses, model and baseline, with their exact 95 % intervals (in %).
    collapsed: float = float("nan")
    runs: float = float("nan")
    collapsed_base: float = float("nan")
    runs_base: float = float("nan")
    rate_low: float = float("nan")
    rate_high: float = float("nan")
    rate_low_base: float = float("nan")
    rate_high_base: float = float("nan")
    role: str = ""
    #: What the seeds show beyond the interval, in words (how many of them lie above a level).
    note: str = ""
    #: An equivalence's margin in words (where the article resolves it), and its verdict at each of
    #: :data:`SENSITIVITY_PT` ("±0.5: undecided; ±1: equivalent; ..."): whether the verdict rests on the margin.
    margin_from: str = ""
    sensitivity: str = ""
    #: The power the claim's seeds had, from the spread they realised, to detect its planned effect (or the rule's
    #: default 2 pt); beside it, the power its plan promised (nan: no plan computed one).
    power_realised: float = float("nan")
    power_planned: float = float("nan")
    #: Confirmatory (every run it reads trained after the committed plan that fixed its claim, test, margin and seeds)
    #: or exploratory; the plan, and when git says it was committed.
    evidence: str = ""
    plan: str = ""
    plan_committed: str = ""
    #: When the earliest of the runs it reads started (ISO; what decides confirmatory).
    first_started: str = ""
    #: Why what it reads lies outside the protocol its plan fixed (a smaller profile's rounds), which makes it
    #: exploratory whenever it ran; "" where it is the plan's. Labelling reads it; a saved row carries its note instead.
    off_plan: str = ""

    def __post_init__(self):
        if self.outcome not in OUTCOMES:
            raise ValueError(f"outcome={self.outcome!r} is not one of {OUTCOMES}")

    @property
    def shown(self) -> str:
        """The estimate as a reader sees it: ``+1.2 pt [−0.3, +2.7] (3 seeds)``; one seed shows its value alone; counts
        as ``1/3 [1, 91] % against 3/3 [29, 100] %, p = 0.40``."""
        if self.test == COUNT_TEST and math.isfinite(self.runs):
            rate = lambda k, n, lo, hi: f"{k:.0f}/{n:.0f} [{lo:.0f}, {hi:.0f}] %"
            return (
                f"{rate(self.collapsed, self.runs, self.rate_low, self.rate_high)} against "
                f"{rate(self.collapsed_base, self.runs_base, self.rate_low_base, self.rate_high_base)}, "
                f"p = {self.p:.2g}"
            )
        if not math.isfinite(self.estimate):
            return "—"
        form = "+.1f" if self.unit == "pt" else ".2f" if self.unit == "×" else ".1f"  # only a difference signed
        interval = f" [{self.low:{form}}, {self.high:{form}}]" if math.isfinite(self.low) else ""
        level = f"{100 * self.level:.0f} % interval, " if interval and self.level != LEVEL else ""  # equivalence: 90
        return f"{self.estimate:{form}} {self.unit}{interval} ({level}{self.count})"

    @property
    def count(self) -> str:
        return f"{self.seeds} {self.each}{'s' * (self.seeds != 1)}"

    @property
    def text(self) -> str:
        words = self.outcome
        if self.outcome == NOT_JUDGED:
            words = f"{'one ' + self.each if self.seeds == 1 else self.count}: {NOT_JUDGED}"
        if self.outcome == NOT_DECIDABLE:
            words = (
                f"{NOT_DECIDABLE}: {self.runs:.0f} runs against {self.runs_base:.0f}, no count of which reaches "
                f"p < {ALPHA:g}"
            )
        words = f"{words} ({self.scale})" if self.scale and self.outcome != NOT_RUN else words
        if self.test == COUNT_TEST and self.outcome == NOISE:
            words += (
                f"; detectable: a collapse rate of {self.detectable:.0f} % against none, with {self.runs:.0f} runs each"
                if math.isfinite(self.detectable)
                else f"; no count of {self.runs:.0f} against {self.runs_base:.0f} runs reaches p < {ALPHA:g}"
            )
        elif self.outcome in (NOISE, UNDECIDED) and math.isfinite(self.detectable):
            words += f"; detectable: {self.detectable:.1f} {self.unit} with {self.count}"
        if self.outcome in (NOISE, UNDECIDED, AGREES, DISAGREES) and math.isfinite(self.p_holm):
            words += f"; Holm p = {self.p_holm:.2g}"
        return f"{words}; {self.note}" if self.note else words

    def row(self) -> dict:
        fields = {k: v for k, v in asdict(self).items() if k != "off_plan"}
        return {**fields, "shown": self.shown, "verdict": self.text}


def is_rule_text(text: str) -> bool:
    """Whether ``text`` is a verdict as :class:`Verdict` words it (what a test checks every saved verdict against)."""
    # "not equivalent" before "equivalent": the longer words first
    outcomes = "|".join(sorted((*OUTCOMES, SPEEDUP, SLOWER, ABOVE, BELOW), key=len, reverse=True))
    return bool(re.match(rf"^((one|\d+) (seed|epoch|round)s?: {NOT_JUDGED}|{outcomes})( \(|;|:|,|$| \d)", str(text)))


def interval(
    values: Sequence[float], level: float = LEVEL, bounds: tuple[float, float] | None = None
) -> tuple[float, float, float, int]:
    """(mean, low, high, n) of the finite ``values``: the mean with its Student-t interval (nan bounds when n < 2),
    cut to ``bounds``, the ends the quantity can take (:data:`ACCURACY_BOUNDS`), where given."""
    from scipy import stats  # heavy

    finite = _finite(values)
    n = len(finite)
    if n == 0:
        return float("nan"), float("nan"), float("nan"), 0
    mean = float(finite.mean())
    if n < 2:
        return mean, float("nan"), float("nan"), n
    half = float(stats.t.ppf(0.5 + level / 2, n - 1) * finite.std(ddof=1) / math.sqrt(n))
    low, high = mean - half, mean + half
    if bounds is not None:
        low, high = max(low, bounds[0]), min(high, bounds[1])
    return mean, low, high, n


def _finite(values: Sequence[float]) -> np.ndarray:
    return np.asarray([v for v in values if v is not None and np.isfinite(v)], dtype=float)


def pooled_spread(families: Sequence[Sequence[float]]) -> float:
    """The pooled standard deviation of a claim family's cells, each cell's own mean removed (nan: no dof)."""
    cells = [_finite(values) for values in families]
    cells = [cell for cell in cells if len(cell) >= 2]
    dof = sum(len(cell) - 1 for cell in cells)
    if dof == 0:
        return float("nan")
    return math.sqrt(sum(((cell - cell.mean()) ** 2).sum() for cell in cells) / dof)


#: A plan takes a spread with few degrees of freedom at this one-sided upper confidence bound (chi-square).
SPREAD_BOUND = 0.80


def spread_bound(spread: float, dof: int) -> float:
    """The one-sided :data:`SPREAD_BOUND` upper confidence bound of a standard deviation ``spread`` with ``dof``
    degrees of freedom: what a plan assumes, so that a spread measured on few seeds does not promise too much power."""
    from scipy import stats  # heavy

    if dof < 1 or not math.isfinite(spread):
        return float("nan")
    return float(spread * math.sqrt(dof / stats.chi2.ppf(1 - SPREAD_BOUND, dof)))


def realised_power(effect: float, spread: float, seeds: int) -> float:
    """The power (two-sided :data:`ALPHA`, exact noncentral t) of ``seeds`` paired values of ``spread`` to detect
    ``effect``: a plan's promise read again from the spread its runs realised."""
    if seeds < 2 or not math.isfinite(spread) or spread <= 0 or not math.isfinite(effect):
        return float("nan")
    from statsmodels.stats.power import TTestPower  # heavy

    return float(TTestPower().power(effect_size=effect / spread, nobs=seeds, alpha=ALPHA, alternative="two-sided"))


def detectable_difference(spread: float, seeds: int) -> float:
    """The smallest mean difference that ``seeds`` paired values with standard deviation ``spread`` detect with
    :data:`POWER` by a two-sided t-test at :data:`ALPHA` (statsmodels' exact noncentral-t power)."""
    if seeds < 2 or not math.isfinite(spread) or spread <= 0:
        return float("nan")
    from statsmodels.stats.power import TTestPower  # heavy

    size = TTestPower().solve_power(effect_size=None, nobs=seeds, alpha=ALPHA, power=POWER, alternative="two-sided")
    return float(size) * spread


def seeds_to_detect(effect: float, spread: float, *, most: int = 200) -> int | None:
    """The fewest seeds whose :func:`detectable_difference` is at most ``effect`` (None beyond ``most``)."""
    return next((n for n in range(MIN_SEEDS, most + 1) if detectable_difference(spread, n) <= effect), None)


def seeds_for_equivalence(margin: float, spread: float, *, most: int = 200) -> int | None:
    """The fewest seeds whose :func:`equivalence_reach` is at most ``margin`` (None beyond ``most``)."""
    return next((n for n in range(MIN_SEEDS, most + 1) if equivalence_reach(spread, n) <= margin), None)


def equivalence_reach(spread: float, seeds: int) -> float:
    """The margin within which ``seeds`` paired values of spread ``spread`` show a zero difference with :data:`POWER`:
    the usual bound, t(1 − α) + t(1 − β/2) standard errors."""
    from scipy import stats  # heavy

    t = stats.t.ppf(1 - ALPHA, seeds - 1) + stats.t.ppf(1 - (1 - POWER) / 2, seeds - 1)
    return float(t * spread / math.sqrt(seeds))


def difference(
    claim: str,
    values: Sequence[float],
    direction: int,
    *,
    unit: str = "pt",
    scale: str = "",
    each: str = "seed",
    condition: str = "",
    spread: float | None = None,
    margin: Margin | None = None,
    effect: float | None = None,
    bounds: tuple[float, float] | None = None,
) -> Verdict:
    """Judge per-seed paired differences (``direction`` > 0: the article's side; 0, "comparable": :func:`equivalence`).
    ``spread``: the claim family's pooled standard deviation behind the detectable difference (default: the values');
    ``bounds``: the ends the values can take (:func:`interval`)."""
    if direction not in (-1, 0, 1):
        raise ValueError(f"direction={direction!r} is not allowed; it is +1, -1 or 0 (comparable)")
    if direction == 0:
        if margin is None:
            raise ValueError(f"{claim}: a 'no difference' claim needs its article's margin (verdicts.Margin)")
        return equivalence(claim, values, margin, unit=unit, scale=scale, each=each, condition=condition, bounds=bounds)
    mean, low, high, n = interval(values, bounds=bounds)
    common = dict(unit=unit, scale=scale, each=each, condition=condition, direction=direction)
    if n == 0:
        return Verdict(claim, NOT_RUN, **common)
    if n < MIN_SEEDS:
        return Verdict(claim, NOT_JUDGED, mean, seeds=n, **common)
    from scipy import stats  # heavy

    finite = _finite(values)
    p = float(stats.ttest_1samp(finite, 0.0).pvalue) if finite.std() > 0 else 1.0 if mean == 0 else 0.0
    own = float(finite.std(ddof=1))
    detectable = detectable_difference(own if spread is None or not math.isfinite(spread) else spread, n)
    side = 1 if low > 0 else -1 if high < 0 else 0
    outcome = NOISE if side == 0 else AGREES if side == direction else DISAGREES
    planned_effect = DEFAULT_EFFECT_PT if effect is None else effect
    realised = realised_power(planned_effect, own, n)
    return Verdict(claim, outcome, mean, low, high, n, p=p, detectable=detectable, power_realised=realised, **common)


def equivalence(
    claim: str,
    values: Sequence[float],
    margin: Margin,
    *,
    center: float = 0.0,
    unit: str = "pt",
    scale: str = "",
    each: str = "seed",
    condition: str = "",
    bounds: tuple[float, float] | None = None,
) -> Verdict:
    """Judge "the value is ``center`` ± the article's ``margin``" (an article's "comparable", ``center`` 0, or its
    "≈ 78 %") by two one-sided t-tests at :data:`ALPHA` (its 90 % interval inside the margin, wholly outside, or
    neither); the verdict at each of :data:`SENSITIVITY_PT` beside it."""
    level = 1 - 2 * ALPHA
    mean, low, high, n = interval(values, level, bounds)
    common = dict(unit=unit, scale=scale, each=each, condition=condition, level=level, test=EQUIVALENCE_TEST)
    common |= dict(margin=margin.points, margin_from=margin.source)
    if n == 0:
        return Verdict(claim, NOT_RUN, **common)
    if n < MIN_SEEDS:
        return Verdict(claim, NOT_JUDGED, mean, seeds=n, **common)
    from statsmodels.stats.weightstats import DescrStatsW  # heavy

    finite, points = _finite(values), margin.points
    p = float(DescrStatsW(finite).ttost_mean(center - points, center + points)[0]) if finite.std() > 0 else math.nan
    sensitivity = "; ".join(f"±{m:g}: {_within(low - center, high - center, m)}" for m in SENSITIVITY_PT)
    realised = realised_equivalence_power(points, float(finite.std(ddof=1)), n)
    outcome = _within(low - center, high - center, points)
    return Verdict(claim, outcome, mean, low, high, n, p=p, sensitivity=sensitivity, power_realised=realised, **common)


def _within(low: float, high: float, margin: float) -> str:
    """An equivalence's outcome for an interval [low, high] (about zero) against ± ``margin``."""
    return (
        EQUIVALENT
        if -margin < low and high < margin
        else NOT_EQUIVALENT
        if high < -margin or low > margin
        else UNDECIDED
    )


def realised_equivalence_power(margin: float, spread: float, seeds: int) -> float:
    """The power of two one-sided tests on ``seeds`` values of ``spread`` to show a true zero within ± ``margin``
    (the usual approximation: each one-sided test's noncentral-t power, the two combined)."""
    if seeds < 2 or not math.isfinite(spread) or spread <= 0:
        return float("nan")
    from scipy import stats  # heavy

    dof, shift = seeds - 1, margin / (spread / math.sqrt(seeds))
    one_side = float(stats.nct.sf(stats.t.ppf(1 - ALPHA, dof), dof, shift))
    return max(0.0, 2 * one_side - 1)


def above(
    claim: str, values: Sequence[float], level: float, bounds: tuple[float, float] | None = None, **shown
) -> Verdict:
    """Judge "the value exceeds ``level``" (a gain above 60 %) from per-seed values, shown as measured; ``bounds``:
    the ends the values can take (:func:`interval`)."""
    moved = None if bounds is None else (bounds[0] - level, bounds[1] - level)
    judged = difference(claim, [v - level for v in values], +1, bounds=moved, **shown)
    finite = _finite(values)
    note = f"{int((finite > level).sum())} of {len(finite)} {judged.each}s above {level:g}" if len(finite) else ""
    return dataclasses.replace(
        judged, estimate=judged.estimate + level, low=judged.low + level, high=judged.high + level, note=note
    )


def _diverged(curve: pd.DataFrame) -> bool:
    # a table joined from runs of several shapes leaves NaN where a run said nothing: not diverged
    return "diverged" in curve and bool(curve["diverged"].fillna(False).astype(bool).any())


def collapsed(curve: pd.DataFrame) -> bool:
    """Whether a run became unstable: its accuracy fell :data:`COLLAPSE_PT` points below its best so far at some
    epoch (whatever its ending), or its loss diverged."""
    return _diverged(curve) or largest_fall(curve) >= COLLAPSE_PT


@dataclass(frozen=True)
class Fall:
    """A run's largest fall of test accuracy below its best so far: how far, from which epoch's best to which
    epoch's trough, and whether a later epoch came back within :data:`RECOVERED_PT` of that best."""

    points: float
    best_epoch: int
    trough_epoch: int
    recovered: bool
    diverged: bool = False

    @property
    def text(self) -> str:
        if self.diverged:
            return f"diverged at epoch {self.trough_epoch}"
        if self.points <= 0:
            return "no fall"
        back = "recovered" if self.recovered else "not recovered"
        return f"{self.points:.1f} pt (epochs {self.best_epoch}→{self.trough_epoch}, {back})"


def fall(curve: pd.DataFrame) -> Fall:
    """A run's :class:`Fall` (a diverged run falls to chance, 10 %, where it stopped)."""
    curve = curve.sort_values("epoch")
    epochs, accuracy = curve["epoch"].astype(int).to_numpy(), curve["test_acc"].astype(float).to_numpy()
    if _diverged(curve):
        return Fall(
            float(np.nanmax(accuracy) - 10.0), int(epochs[np.nanargmax(accuracy)]), int(epochs[-1]), False, True
        )
    best = np.maximum.accumulate(accuracy)
    drop = best - accuracy
    trough = int(np.argmax(drop))
    if drop[trough] <= 0:
        return Fall(0.0, int(epochs[0]), int(epochs[0]), True)
    peak = int(np.argmax(accuracy[: trough + 1]))
    recovered = bool((accuracy[trough + 1 :] >= best[trough] - RECOVERED_PT).any())
    return Fall(float(drop[trough]), int(epochs[peak]), int(epochs[trough]), recovered)


def falls_text(curves: dict[str, pd.DataFrame]) -> str:
    """Every run's largest fall, by label: ``ViT s0: no fall; ViT s2: 13.6 pt (epochs 11→14, recovered)``."""
    return "; ".join(f"{label}: {fall(curve).text}" for label, curve in curves.items())


def rate_interval(k: int, n: int) -> tuple[float, float]:
    """The exact (Clopper–Pearson) 95 % interval of a count ``k`` of ``n``, in %."""
    from scipy.stats import binomtest  # heavy

    ci = binomtest(k, n).proportion_ci(confidence_level=LEVEL, method="exact")  # Clopper–Pearson
    return 100 * ci.low, 100 * ci.high


def counts(
    claim: str,
    collapses: Sequence[bool],
    base_collapses: Sequence[bool],
    direction: int,
    *,
    scale: str = "",
    condition: str = "",
) -> Verdict:
    """Judge "the model collapses more often than the baseline" (``direction`` +1; -1: less often) by Fisher's exact
    test on the runs' collapses (:func:`collapsed`); the estimate is the difference of the rates (points of %)."""
    k, n, kb, nb = sum(map(bool, collapses)), len(collapses), sum(map(bool, base_collapses)), len(base_collapses)
    common = dict(unit="pt", scale=scale, condition=condition, direction=direction, test=COUNT_TEST, each="seed")
    if n == 0 or nb == 0:
        return Verdict(claim, NOT_RUN, **common)
    estimate = 100 * (k / n - kb / nb)
    if min(n, nb) < MIN_SEEDS:
        return Verdict(claim, NOT_JUDGED, estimate, seeds=min(n, nb), **common)
    from scipy.stats import fisher_exact  # heavy

    p = float(fisher_exact([[k, n - k], [kb, nb - kb]]).pvalue)
    side = 0 if p >= ALPHA else 1 if k / n > kb / nb else -1
    outcome = NOISE if side == 0 else AGREES if side == direction else DISAGREES
    if smallest_count_p(n, nb) >= ALPHA:
        outcome = NOT_DECIDABLE
    (low, high), (low_b, high_b) = rate_interval(k, n), rate_interval(kb, nb)
    rates = dict(rate_low=low, rate_high=high, rate_low_base=low_b, rate_high_base=high_b)
    counted = dict(collapsed=k, runs=n, collapsed_base=kb, runs_base=nb, detectable=detectable_rate(n, nb))
    return Verdict(claim, outcome, estimate, seeds=min(n, nb), p=p, **counted, **rates, **common)


def smallest_count_p(n: int, n_base: int) -> float:
    """The smallest p value Fisher's exact test can give ``n`` runs against ``n_base`` (all of one arm against none of
    the other): at or above :data:`ALPHA`, the count cannot decide whatever the runs do."""
    from scipy.stats import fisher_exact  # heavy

    return float(fisher_exact([[n, 0], [0, n_base]]).pvalue)


def detectable_rate(n: int, n_base: int) -> float:
    """The smallest collapse rate (in %) that ``n`` runs detect with :data:`POWER` against ``n_base`` runs that never
    collapse, by Fisher's exact test at :data:`ALPHA` (exact: summed over the binomial counts)."""
    from scipy.stats import binom, fisher_exact  # heavy

    significant = [k for k in range(n + 1) if fisher_exact([[k, n - k], [0, n_base]]).pvalue < ALPHA]
    if not significant:
        return float("nan")
    for percent in range(1, 101):
        if sum(binom.pmf(k, n, percent / 100) for k in significant) >= POWER:
            return float(percent)
    return float("nan")


def holm(found: Sequence[Verdict]) -> list[Verdict]:
    """A figure's cells decided again after Holm's correction of their p values (a verdict stands only where the
    corrected p is below :data:`ALPHA`), each keeping its own p beside the corrected one, marked secondary."""
    from statsmodels.stats.multitest import multipletests  # heavy

    tested = [i for i, v in enumerate(found) if math.isfinite(v.p) and v.outcome not in (NOT_JUDGED, NOT_RUN)]
    adjusted = dict(zip(tested, multipletests([found[i].p for i in tested], method="holm")[1])) if tested else {}
    out = []
    for i, verdict in enumerate(found):
        verdict = dataclasses.replace(verdict, role=SECONDARY)
        if i in adjusted:
            p = float(adjusted[i])
            outcome = verdict.outcome
            if verdict.test == EQUIVALENCE_TEST and outcome == EQUIVALENT and p >= ALPHA:
                outcome = UNDECIDED
            elif verdict.test != EQUIVALENCE_TEST and outcome in (AGREES, DISAGREES) and p >= ALPHA:
                outcome = NOISE
            verdict = dataclasses.replace(verdict, outcome=outcome, p_holm=p)
        out.append(verdict)
    return out


def speed_ratio(
    claim: str,
    rates: Sequence[float],
    baseline_rates: Sequence[float],
    *,
    scale: str = "",
    condition: str = "",
    each: str = "round",
) -> Verdict:
    """How many times as fast a model is as a baseline, from throughputs timed back to back in each round (a busy
    spell cancels in their ratio; ``each="seed"``: a seed's two runs): the per-round log ratios judged, shown as ×."""
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


def short_of_plan(judged: Verdict, planned: int, present: bool = True) -> Verdict:
    """``judged`` with fewer seeds than planned: no verdict yet (never one taken early), its estimate shown with the
    seeds held. ``present``: runs of the claim are held, even if no pair drew one stream (none: "not run")."""
    if judged.outcome == UNTESTABLE or judged.seeds >= planned or (judged.outcome == NOT_RUN and not present):
        return judged
    note = f"{judged.seeds} of the {planned} planned seeds held on one data stream; a verdict reads all of them"
    return dataclasses.replace(
        judged, outcome=NOT_JUDGED, low=float("nan"), high=float("nan"), p_holm=float("nan"), note=note
    )


def primary_first(found: list[Verdict]) -> list[Verdict]:
    """``found`` with its primary contrasts first, each group in its given order: a replication's primary contrast
    then stands beside the first ones it tests again, not after every secondary cell."""
    return sorted(found, key=lambda verdict: verdict.role != PRIMARY)


def seeds_held(note: str) -> tuple[int, int] | None:
    """The seeds held and planned that :func:`short_of_plan` wrote into a verdict's note, or None."""
    found = re.search(r"(\d+) of the (\d+) planned seeds held", str(note or ""))
    return (int(found.group(1)), int(found.group(2))) if found else None


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
    """The mean test accuracy over a run's epochs: higher when it converges faster, at equal final accuracy."""
    return float(curve.sort_values("epoch")["test_acc"].mean())


def largest_fall(curve: pd.DataFrame) -> float:
    """The largest fall of a run's test accuracy below its best so far; a diverged run falls to chance (10 %)."""
    curve = curve.sort_values("epoch")
    accuracy = curve["test_acc"].astype(float)
    if _diverged(curve):
        return float(accuracy.max() - 10.0)
    return float((accuracy.cummax() - accuracy).max())
