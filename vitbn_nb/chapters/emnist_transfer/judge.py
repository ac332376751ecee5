"""Chapter 06's claim (the BatchNorm models' inference gain on the transfer set) judged by the one rule from the
interleaved rounds of timed passes."""

from __future__ import annotations

import pandas as pd

from ...data import EMNIST_SOURCE
from ...judging.claims import BN_MODELS, gain
from ...judging.verdicts import Verdict
from . import article

#: What the claim's condition says of the set it was judged on when EMNIST could not be had.
STAND_IN_SET = (
    "a stand-in for EMNIST digits: scikit-learn's 8x8 digits upsampled to 28x28 (EMNIST is unreachable offline)"
)


def round_pairs(measured: pd.DataFrame, model: str, baseline: str = "ViT") -> list[tuple[float, float]]:
    """(model's seconds, baseline's seconds) of each round of interleaved passes, every seed's rounds in turn."""
    rounds = lambda m: measured[measured["model"] == m].set_index("seed")["round_seconds"]
    mine, theirs = rounds(model), rounds(baseline)
    return [pair for seed in mine.index.intersection(theirs.index) for pair in zip(mine[seed], theirs[seed])]


def transfer(measured: pd.DataFrame, hardware: str) -> list[Verdict]:
    """``measured``: one row per model and seed with ``round_seconds``; each round's gain, paired with ViT's pass of
    the same round, judged against the claim's level. Judged at equal depth only: the series' own transfer
    checkpoints are a six-block ViT against BatchNorm models that computed one block, which the chapter does not
    train; the condition says so, with the set tested on and the seeds timed."""
    found = []
    source = measured["transfer_set"].iloc[0] if "transfer_set" in measured and len(measured) else EMNIST_SOURCE
    tested_on = "on EMNIST digits" if source == EMNIST_SOURCE else f"on {STAND_IN_SET}"
    claims = {c.key: c for c in article.findings()}
    for model in BN_MODELS:
        gains = [100 * (1 - mine / vit) for mine, vit in round_pairs(measured, model)]
        both = measured[measured["model"].isin([model, "ViT"])]
        depths = sorted({int(d) for d in both["depth"].dropna()}) if "depth" in both else []
        depth = " and ".join(map(str, depths)) or "6"
        seeds = int(both.groupby("model")["seed"].nunique().min()) if len(both) else 0
        condition = (
            f"{model} against ViT, both at depth {depth}: judged at equal depth only, while the series' transfer "
            "checkpoints are BatchNorm models that computed one block against a six-block ViT (not trained here); "
            f"{tested_on}; {seeds} seed{'s' * (seeds != 1)} trained, passes timed in interleaved rounds"
        )
        scale = f"{hardware}; the article gives no hardware or number"
        found.append(gain(claims[f"article1/transfer/{model}"], gains, scale, condition, each="round"))
    return found
