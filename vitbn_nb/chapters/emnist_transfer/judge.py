"""Chapter 06's claim (the BatchNorm models' inference gain on the transfer set) judged by the one rule from the
interleaved rounds of timed passes, as written (every model at the chapter's depth) and as run (the BatchNorm models
at the one block the series' transfer checkpoints computed)."""

from __future__ import annotations

import math

import pandas as pd

from ...data import EMNIST_SOURCE
from ...judging.claims import BN_MODELS, gain
from ...judging.verdicts import Verdict
from ...models import AS_RUN_DEPTH
from . import article

#: What the claim's condition says of the set it was judged on when EMNIST could not be had.
STAND_IN_SET = (
    "a stand-in for EMNIST digits: scikit-learn's 8x8 digits upsampled to 28x28 (EMNIST is unreachable offline)"
)
BASELINE = "ViT"
REFERENCE = "CNN"
ORDER = ("ViT", "ViTBNFFN", "ViTBN", REFERENCE)


def depth_of(value) -> int | None:
    """A run's depth as the measurements hold it (None for the CNN, which has none)."""
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else int(value)


def rows_of(measured: pd.DataFrame, model: str, depth: int | None = None) -> pd.DataFrame:
    """The measured runs of ``model`` (at ``depth`` when given)."""
    rows = measured[measured["model"] == model]
    if depth is not None and "depth" in rows:
        rows = rows[[depth_of(d) == depth for d in rows["depth"]]]
    return rows


def baseline_depth(measured: pd.DataFrame) -> int | None:
    """The depth of the ViT every model is timed against (the chapter's depth)."""
    vit = rows_of(measured, BASELINE)
    return depth_of(vit["depth"].iloc[0]) if len(vit) and "depth" in vit else None


def entries(measured: pd.DataFrame) -> list[tuple[str, int | None]]:
    """(model, depth) of each kind of run measured, in the chapter's order: the trio at the chapter's depth, then the
    BatchNorm models as run, then the CNN."""
    depths = measured["depth"] if "depth" in measured else [None] * len(measured)
    found = {(model, depth_of(depth)) for model, depth in zip(measured["model"], depths)}
    chapter_depth = baseline_depth(measured)
    return sorted(found, key=lambda e: (e[0] == REFERENCE, e[1] != chapter_depth, ORDER.index(e[0])))


def label(model: str, depth: int | None) -> str:
    return model if depth is None else f"{model} d{depth}"


def round_pairs(measured: pd.DataFrame, model: str, depth: int | None = None) -> list[tuple[float, float]]:
    """(model's seconds, ViT's seconds) of each round of interleaved passes, every seed's rounds in turn."""
    rounds = lambda rows: rows.set_index("seed")["round_seconds"]
    mine, theirs = rounds(rows_of(measured, model, depth)), rounds(rows_of(measured, BASELINE))
    return [pair for seed in mine.index.intersection(theirs.index) for pair in zip(mine[seed], theirs[seed])]


def configurations(measured: pd.DataFrame, model: str) -> list[tuple[str, int]]:
    """(configuration, depth) in which ``model`` was measured: as written at ViT's depth, as run at the one block the
    series' checkpoints computed (when that differs)."""
    vit_depth = baseline_depth(measured)
    depths = {d for m, d in entries(measured) if m == model}
    found = [("as written", vit_depth)] if vit_depth in depths else []
    as_run = AS_RUN_DEPTH[model]
    return found + ([("as run", as_run)] if as_run != vit_depth and as_run in depths else [])


def transfer(measured: pd.DataFrame, hardware: str) -> list[Verdict]:
    """``measured``: one row per run with ``round_seconds``; each round's gain, paired with ViT's pass of the same
    round, judged against the claim's level, in each configuration measured; the condition names it, the set tested
    on and the seeds timed."""
    return [verdict for _, verdict in transfer_by_run(measured, hardware)]


def transfer_by_run(measured: pd.DataFrame, hardware: str) -> list[tuple[tuple[str, int], Verdict]]:
    """:func:`transfer`'s verdicts, each after the (model, depth) it judged against ViT."""
    found = []
    source = measured["transfer_set"].iloc[0] if "transfer_set" in measured and len(measured) else EMNIST_SOURCE
    tested_on = "on EMNIST digits" if source == EMNIST_SOURCE else f"on {STAND_IN_SET}"
    claims = {c.key: c for c in article.findings()}
    vit_depth = baseline_depth(measured) or 6
    for model in BN_MODELS:
        for which, depth in configurations(measured, model) or [("as written", vit_depth)]:
            gains = [100 * (1 - mine / vit) for mine, vit in round_pairs(measured, model, depth)]
            both = pd.concat([rows_of(measured, model, depth), rows_of(measured, BASELINE)])
            seeds = int(both.groupby("model")["seed"].nunique().min()) if len(both) else 0
            if which == "as run":
                how = (
                    f"as run: {model} d{depth} against ViT d{vit_depth}, the one block the series' transfer "
                    "checkpoints computed (chapter 03's audit), with its depth-6 lr and batch size"
                )
            elif any(w == "as run" for w, _ in configurations(measured, model)):
                how = f"as written: {model} d{depth} against ViT d{vit_depth}, equal depth"
            else:
                how = (
                    f"{model} against ViT, both at depth {depth}: judged at equal depth only, while the series' "
                    "transfer checkpoints are BatchNorm models that computed one block against a six-block ViT "
                    "(not trained here)"
                )
            seeds_trained = f"{seeds} seed{'s' * (seeds != 1)} trained"
            condition = f"{how}; {tested_on}; {seeds_trained}, passes timed in interleaved rounds"
            scale = f"{hardware}; the article gives no hardware or number"
            verdict = gain(claims[f"article1/transfer/{model}"], gains, scale, condition, each="round")
            found.append(((model, depth), verdict))
    return found
