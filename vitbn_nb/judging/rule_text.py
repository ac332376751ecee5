"""The book's one rule in words, as its front page and the README state it: built from the constants that
:mod:`.verdicts` judges by, so the words never drift from the judging."""

from __future__ import annotations

from . import verdicts
from .verdicts import (
    ACCURACY_BOUNDS,
    AGREES,
    ALPHA,
    COLLAPSE_PT,
    DISAGREES,
    EQUIVALENT,
    HIGH_ACCURACY,
    HIGH_MARGIN_PT,
    LEVEL,
    MARGIN_PT,
    MIN_SEEDS,
    NOISE,
    NOT_DECIDABLE,
    NOT_EQUIVALENT,
    NOT_JUDGED,
    POWER,
    RECOVERED_PT,
    SENSITIVITY_PT,
    SLOWER_WORDS,
    SPEEDUP,
    SPREAD_BOUND,
    UNDECIDED,
    UNTESTABLE,
)


def rule_markdown() -> str:
    """The rule as the book's front page and the README state it (from the constants above, not retyped)."""
    from ..data.sets import STREAM  # heavy: the data package loads torch

    return (
        f"Every verdict in the book and the README comes from one rule ({verdicts.__name__}). The seeds each claim "
        "reads are "
        "planned by a power analysis on the spread of the statistic its verdict computes (its one-sided "
        f"{SPREAD_BOUND:.0%} upper confidence bound where that spread has few degrees of freedom) and committed in a "
        "plan, and a verdict reads exactly those seeds. A verdict is **confirmatory** when every run it reads started "
        "after the commit of the plan that fixed its claim, test, margin and seeds (the time read from git and kept in "
        "`figures/plan_commits.json`), **exploratory** otherwise; every row says which, and why. Every row shows the "
        "power its seeds had, from the spread they realised, beside the power its plan promised.\n\n"
        f"- **A difference** (one model beats another) is judged from the **paired per-seed differences** and their "
        f"**{LEVEL:.0%} interval** (Student's t; an interval of one model's accuracy stops at {ACCURACY_BOUNDS[0]:g} "
        f"and {ACCURACY_BOUNDS[1]:g} %, the ends it can take: the true mean lies inside them, so cutting there keeps "
        "the coverage, and no threshold or margin lies outside them). A seed's two runs pair only when they drew one "
        "data stream "
        f"(`{STREAM}`: the training order, the augmentation and the augmented test set drawn on the CPU from the "
        "seed and moved to the device, the same on every device); runs trained on a GPU before that stream have "
        f"their own and pair with no CPU run. **{AGREES}** when the interval excludes zero on the article's side, "
        f"**{DISAGREES}** when on the other side, **{NOISE}** when it holds zero; every {NOISE} states the "
        f"**smallest difference its seeds could have detected** ({POWER:.0%} power, two-sided {ALPHA:.0%}) from the "
        "spread of its claim family (the figure's cells pooled).\n"
        f'- **"Comparable" and an article\'s absolute number** ("≈ 78 %") are judged by **equivalence** (two '
        f"one-sided {ALPHA:.0%} tests: the {1 - 2 * ALPHA:.0%} interval) within a margin the article itself resolves "
        "(around zero, or around the article's number): half the smallest gap the same article reads as a real "
        "difference between these models at this measure, never wider than "
        f"{HIGH_MARGIN_PT:g} pt where the accuracies are above {HIGH_ACCURACY:g} % nor {MARGIN_PT:g} pt elsewhere (the "
        "ceiling, where the article reads no gap); each margin lives with its article's facts and states its reason. "
        f"**{EQUIVALENT}** when the interval lies inside the margin, **{NOT_EQUIVALENT}** when it lies wholly outside "
        f"it, **{UNDECIDED}** otherwise; beside it, the verdict at ±{', ±'.join(f'{m:g}' for m in SENSITIVITY_PT)} pt "
        "shows whether it rests on the margin.\n"
        f"- **Stability** is counted: a run **becomes unstable** when its test accuracy falls at least {COLLAPSE_PT:g} "
        "pt below its best so far at any epoch, or its loss becomes non-finite, whatever its ending (every run's "
        f"largest fall is shown with its epochs and whether it came back within {RECOVERED_PT:g} pt); this definition "
        "was fixed after article 1's lr 0.01 runs were seen, so its verdicts are exploratory; each model's count "
        "gets an exact (Clopper–Pearson) interval, and two models are compared by **Fisher's exact test** "
        f"({AGREES} / {DISAGREES} at p < {ALPHA:g} on the article's side or the other, else {NOISE}) where its runs "
        f"can reach that level at all, otherwise **{NOT_DECIDABLE}** (3 runs against 3 give p ≥ 0.10 whatever they "
        "show).\n"
        "- **Where an article draws one conclusion from several panels**, one **primary contrast** fixed in the plan "
        "decides it (article 2: ViTBNFFN − ViT pooled over the depths its text places beyond the critical depth, "
        "per rate); each panel's cell is secondary, decided after **Holm's correction** over its figure's cells.\n"
        f"- With fewer than {MIN_SEEDS} seeds there is no verdict: **{NOT_JUDGED}**. A claim about what the "
        "article's full protocol produced (an absolute number, a final accuracy, stability or convergence over its "
        f"whole run) is judged only where the runs reached that protocol, otherwise **{UNTESTABLE}** (with how many "
        "of the article's steps were reached). \"Converges faster\" is read off each seed's whole curve (its mean "
        "accuracy over the epochs).\n"
        "- A timing ratio from other hardware is shown beside the article's and judged on the article's own "
        "qualitative claim (a gain of at least 60 %, say) from one value per seed, each run's epochs averaged first "
        "and a seed's two runs compared only over epochs that one machine timed (one host, where the records name "
        "it: machines sold under one CPU name differ in speed), with the machines named; where a chapter times its "
        "models together in interleaved rounds on one host (Table 3, the transfer), from one value per round, each "
        "model's turn paired with the baseline's in the same round. A speed "
        "ratio measured here is judged from rounds of interleaved timings, the two measured back to back in each "
        f"round: the interval of the per-round log ratio, shown as a ratio, says **{SPEEDUP} x [low, high]** when it "
        f"lies above 1, **{SLOWER_WORDS}** when below, **{NOISE}** when it holds 1; with fewer than {MIN_SEEDS} "
        f"rounds, **{NOT_JUDGED}**."
    )
