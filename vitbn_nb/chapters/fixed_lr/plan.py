"""Chapter 03's seed plan: the power analysis behind its 3 seeds, over article 1's full-protocol runs finished when
the plan was committed (``written()``, from git), so the plan shown is the one committed; which verdicts read only
runs trained after it, git says (``judging.plans``: some of its runs trained before it, and are exploratory). The
caption says why every claim keeps the rule's minimum of 3 seeds (no spread yet at Figures 3-4; counts beyond the
budget)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ...data.sets import STREAM
from ...judging import plans, power, verdicts
from ...judging.selection import final_accuracy, select
from ...store import runs
from . import article
from .settings import FixedLrSettings


def written() -> str:
    """When git says the plan was committed: the power analysis reads the runs finished before it."""
    return plans.committed_at("03_fixed_lr/first")


#: The book's budget for article 1's plan, in hours of this CPU.
BUDGET_HOURS = 40


def _left(protocol: list, lrs) -> list:
    """The planned runs of ``protocol`` at ``lrs`` not held on the one stream."""
    at = [c for c in protocol if any(abs(c.lr - lr) < 1e-12 for lr in lrs)]
    return [c for c in at if runs.held_stream(c, "cpu") != STREAM]


def seed_plan(settings: FixedLrSettings, planned: list, table: pd.DataFrame) -> pd.DataFrame:
    """One row per claim of Experiment 1 that decides its conclusion (:func:`power.table`), priced by the runs of
    ``planned`` (article 1's whole protocol) left to train, read off ``table`` (the runs finished before the plan)."""
    protocol = power.protocol_runs(table, written(), epochs=article.EPOCHS, dataset="mnist", pipeline="reference")
    claims = article.findings()
    seeds, rows = settings.seeds, []
    for lr in sorted(article.EXPERIMENT1):
        at = select(protocol, lr=float(lr)) if not protocol.empty else protocol
        left = _left(planned, (lr,))
        for claim in (c for c in claims if c.key.startswith(f"article1/lr{lr:g}/")):
            kind = claim.key.split("/")[2]
            if kind in ("r_t", "r_v"):
                continue  # timing ratios: rounds of one machine, not a seed plan's question
            if kind == "breakdown":
                vit = (
                    [verdicts.collapsed(run) for _, run in select(at, model="ViT").groupby("run_id")] if len(at) else []
                )
                rate = 100 * float(np.mean(vit)) if vit else float("nan")
                source = f"ViT's observed rate ({sum(vit)} of {len(vit)} runs)" if vit else "no run yet"
                plan = power.count_plan(claim.key, verdicts.PRIMARY, rate, source, seeds)
            elif kind == "accuracy":
                model = claim.key.split("/")[-1]
                depth = 1 if model != "ViT" else 6  # article 1's figures: its runs as run
                finals = final_accuracy(select(at, model=model, depth=depth)) if len(at) else pd.Series(dtype=float)
                name = f"{model} d{depth}"
                role, direction = verdicts.SECONDARY, claim.direction  # "≈ X" an equivalence, "above X" a side
                plan = power.contrast_plan(claim.key, direction, role, [finals], name, seeds, claim.margin)
            else:  # converges (faster, or alike): ViT against each BatchNorm model
                no_run = "no whole-protocol run yet"
                role = verdicts.SECONDARY
                plan = power.contrast_plan(claim.key, claim.direction, role, [], no_run, seeds, claim.margin)
            rows.append(power.priced(plan, left, table))
    return power.table(rows)


def plan_caption(frame: pd.DataFrame, table: pd.DataFrame, planned: list) -> str:
    """The plan in words, with the runs of ``planned`` left to train and their CPU hours (priced from ``table``)."""
    left = _left(planned, tuple(article.EXPERIMENT1))
    seconds = power.plan_seconds(left, table)
    hours = "an unknown number of" if seconds is None else f"{seconds / 3600:.1f}"
    counts = frame[frame["test"] == verdicts.COUNT_TEST]
    count_words = "; ".join(
        f"{row.claim}: {row.planned} runs per model, while {row.effect_from} needs "
        f"{'more than 60' if pd.isna(row.needed) else f'{row.needed:.0f}'}"
        for row in counts.itertuples()
    )
    return (
        f"Seed plan of chapter 03, committed {written()[:16]} (git): {frame['planned'].max()} seeds per "
        f"configuration. Rates with no whole-protocol run then have no spread to plan from and keep the rule's "
        f"minimum, their detectable effects stated once they train. Stability counts: {count_words}. A 30-epoch "
        f"depth-6 run costs one to two hours of this CPU, so more runs per model would pass the book's budget for "
        f"article 1 (about {BUDGET_HOURS} CPU hours). Left to train at article 1's protocol (every rate of "
        f"Experiment 1, both configurations): {len(left)} runs, about "
        f"{hours} hours of a CPU like the ones that trained the committed runs{_encoded_later()}"
    )


def _encoded_later() -> str:
    later = "; ".join(f"{key} on {day}" for key, day in article.ENCODED_AFTER_PLAN.items())
    return f". Encoded after the plan and its runs, judged at its seeds and by its test: {later}" if later else ""
