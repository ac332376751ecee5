"""What every chapter's claims share: the Claim type, the articles' one wording rule, and the helpers that judge a
claim from a run table by the one rule of :mod:`.verdicts`. Each chapter's folder holds its article's findings
(``article.findings()``) and judges them (``judge.py``); a chapter saves its verdicts as ``NN_claims.csv``."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from ..engines import engine
from ..store.runs import trained_on
from . import verdicts
from .selection import select, timed_pairs
from .verdicts import Margin, Verdict

BN_MODELS = ("ViTBNFFN", "ViTBN")
MNIST_TRAIN_IMAGES = 60_000
#: The time per epoch behind each of article 1's ratios r_t (training) and r_v (inference).
TIMED = {"r_t": "train_seconds", "r_v": "test_seconds"}

#: The kinds of claim, which decide how the one rule applies.
DIFFERENCE = "difference"  # between two models, from paired per-seed values
CURVE = "curve"  # about a whole curve (converges faster, becomes unstable), from a per-seed number read off it
ABSOLUTE = "absolute"  # a number at the article's protocol: judged only where the runs reached it
RATIO = "ratio"  # a timing ratio on the article's hardware: judged on the article's qualitative claim
KINDS = (DIFFERENCE, CURVE, ABSOLUTE, RATIO)

#: The articles' wording, encoded once: the same words give the same direction wherever they occur ("slightly" and
#: "clearly" better both point to X: how large a lead is, the interval shows).
WORDING = dict.fromkeys(
    ("comparable", "almost no difference", "affected much the same", "very similar"), 0
) | dict.fromkeys(
    ("slightly better", "slightly exceeds", "slightly higher", "significantly better", "clearly better", "milder"), +1
)


@dataclass(frozen=True)
class Claim:
    """One finding of a source: ``measure`` names the per-seed quantity (``direction`` +1: the source says it is
    positive, -1 negative, 0 "no difference"); ``level``: a ratio claim's threshold (a gain in %) or an absolute
    claim's value; ``epochs``: the article's epochs behind an absolute number."""

    key: str
    source: str
    says: str
    kind: str
    measure: str
    direction: int = 0
    level: float | None = None
    epochs: int | None = None
    #: A "no difference" or "≈ X" claim's equivalence margin, from its article's facts (each article's ``MARGINS``).
    margin: Margin | None = None

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"{self.key}: kind={self.kind!r} is not one of {KINDS}")
        if self.direction not in (-1, 0, 1):
            raise ValueError(f"{self.key}: direction={self.direction!r} is not +1, -1 or 0")
        if self.direction == 0 and self.kind != RATIO and self.margin is None:
            raise ValueError(f"{self.key}: a 'no difference' or '≈' claim needs its article's margin (margin=...)")


def worded_direction(lead: str, words: str) -> int:
    """The direction of "``lead`` ``words``" for the measure "ViTBNFFN − ViT" (ViT leading points the other way)."""
    return WORDING[words] * (-1 if lead == "ViT" else 1)


def diverged(run: pd.DataFrame) -> bool:
    """Whether one run's loss became NaN or infinite (the run store stops it there and records it as diverged)."""
    flagged = "diverged" in run and run["diverged"].fillna(False).astype(bool).any()
    return bool(flagged or ("status" in run and (run["status"] == "diverged").any()))


def reached_steps(table: pd.DataFrame) -> int:
    """The fewest training steps any of the runs took (a diverged run counts the epochs it was set to train)."""
    if table.empty:
        return 0
    steps = []
    for _, run in table.groupby("run_id"):
        epochs = int(run["epoch"].max())
        if diverged(run) and "epochs" in run and pd.notna(run["epochs"].iloc[0]):
            epochs = max(epochs, int(run["epochs"].iloc[0]))
        steps.append(epochs * steps_per_epoch(run))
    return min(steps)


def steps_per_epoch(run: pd.DataFrame) -> int:
    """The optimiser steps of one epoch of a run (its first row's train size and batch)."""
    images = run["train_size"].iloc[0] if "train_size" in run else None
    images = MNIST_TRAIN_IMAGES if images is None or pd.isna(images) else int(images)
    return engine.steps_per_epoch(images, int(run["batch_size"].iloc[0]))


def article_steps(epochs: int, batch_size: int = 100) -> int:
    return epochs * engine.steps_per_epoch(MNIST_TRAIN_IMAGES, batch_size)


def protocol_scale(table: pd.DataFrame, epochs: int, batch_size: int = 100) -> str:
    return verdicts.scale_note(reached_steps(table), article_steps(epochs, batch_size))


def short_of(table: pd.DataFrame, epochs: int, key: str, **untestable) -> Verdict | None:
    """The verdict "not testable at this scale" where the runs have not reached ``epochs`` of the article's protocol."""
    reached, needed = reached_steps(table), article_steps(epochs)
    return verdicts.untestable(key, reached, needed, **untestable) if reached < needed else None


def absolute(claim: Claim, finals: pd.Series, scale: str = "", condition: str = "") -> Verdict:
    """An absolute accuracy: "≈ X" (direction 0) as an equivalence around X, "> X" (+1) as a value above X."""
    shown = dict(unit="%", scale=scale, condition=condition, bounds=verdicts.ACCURACY_BOUNDS)
    if claim.direction == 0:
        return verdicts.equivalence(claim.key, list(finals), claim.margin, center=claim.level, **shown)
    return verdicts.above(claim.key, list(finals), claim.level, **shown)


def judge_difference(
    claim: Claim, values: pd.Series, scale: str, condition: str = "", spread: float | None = None
) -> Verdict:
    """A difference claim by the rule; ``spread``: its claim family's pooled spread (:func:`.verdicts.difference`)."""
    return verdicts.difference(
        claim.key, list(values), claim.direction, scale=scale, condition=condition, spread=spread, margin=claim.margin
    )


def gain(claim: Claim, gains, scale: str, condition: str, **shown) -> Verdict:
    return verdicts.above(claim.key, list(gains), claim.level, unit="%", scale=scale, condition=condition, **shown)


def run_gains(table: pd.DataFrame, model: dict, baseline: dict, column: str) -> pd.Series:
    """Per seed: the gain 100 x (1 - T(model) / T(baseline)), T a run's mean ``column`` per epoch (article 1's ratios),
    a seed's two runs paired on one machine (:func:`~vitbn_nb.judging.selection.timed_pairs`)."""
    pairs = _gain_pairs(table, model, baseline, column)
    return (100 * (1 - pairs[column] / pairs[f"{column}_base"])).dropna()


def _gain_pairs(table: pd.DataFrame, model: dict, baseline: dict, column: str) -> pd.DataFrame:
    sides = pd.concat([select(table, **model).assign(side="model"), select(table, **baseline).assign(side="base")])
    return timed_pairs(sides, [column], ["seed"], side="side", baseline="base").set_index("seed").sort_index()


#: How a scale joins the machines that timed its runs (the README splits a scale on it, so no machine's name holds
#: it: :func:`vitbn_nb.system.host_label` says "on host").
MACHINES_JOINED_BY = ", "


def gain_hardware(table: pd.DataFrame, model: dict, baseline: dict, column: str) -> str:
    """The machines that timed the pairs :func:`run_gains` compares (not every machine that trained the table)."""
    pairs = _gain_pairs(table, model, baseline, column).dropna(subset=[column, f"{column}_base"])
    timed = sorted(set(pairs["machine"].dropna()))
    sides = pd.concat([select(table, **model), select(table, **baseline)])
    return MACHINES_JOINED_BY.join(timed) or hardware_of(sides)


def hardware_of(table: pd.DataFrame) -> str:
    """The machines that trained (and so timed) the table's runs, from their records."""
    return MACHINES_JOINED_BY.join(trained_on(list(table["run_id"].unique()))) or "this machine"


def verdict_texts(found: list[Verdict], key=lambda verdict: verdict.claim) -> dict:
    """Each claim's verdict in words, by ``key`` (the claim's by default), several runs' verdicts joined."""
    texts: dict = {}
    for verdict in found:
        texts.setdefault(key(verdict), []).append(verdict.text)
    return {claim: "; ".join(dict.fromkeys(words)) for claim, words in texts.items()}


def table(found: list[Verdict], claims: list[Claim]) -> pd.DataFrame:
    """The verdicts as a chapter saves them: the claim's source, words, kind and measure beside the numbers."""
    by_key = {c.key: c for c in claims}
    said = lambda claim: {name: getattr(claim, name) for name in ("source", "says", "kind", "measure")}
    # the row's claim and condition keep the places given first: claim, the claim's words, condition, the numbers
    return pd.DataFrame(
        [{"claim": v.claim, **said(by_key[v.claim]), "condition": v.condition, **v.row()} for v in found]
    )
