"""Chapter 04's claims (article 1's Experiment 2) judged by the one rule from the optimised runs of one
configuration (as run: ViT d6, the BatchNorm models d1; as written: all at d6), each model at its own optimised batch
size: the accuracies and convergence over the seeds the plan fixed for that configuration, the timing gains over the
interleaved rounds of :mod:`.rounds`."""

from __future__ import annotations

import dataclasses

import pandas as pd

from ...judging import claims as shared
from ...judging import verdicts
from ...judging.article1 import against_article
from ...judging.plans import reading
from ...judging.selection import final_accuracy, paired, per_seed, select
from ...judging.verdicts import Verdict
from ...models import CONFIGURATIONS
from . import article, rounds


def experiment2(table: pd.DataFrame, which: str = "as run", timed: pd.DataFrame | None = None) -> list[Verdict]:
    """Every claim of Experiment 2 over ``table``, the retrains of configuration ``which`` (one depth per model), and
    ``timed``, the timing rounds (:func:`.rounds.frame`; None or empty: not measured)."""
    found = []
    depth_of = lambda model: (
        int(select(table, model=model)["depth"].iloc[0]) if len(select(table, model=model)) else None
    )
    named = lambda model: f"{model} d{depth_of(model)}" if depth_of(model) else model
    for claim in article.findings():
        kind, model = claim.key.split("/")[2], claim.key.split("/")[-1]
        if kind == "accuracy":
            runs = select(table, model=model)
            batch = int(runs["batch_size"].iloc[0]) if len(runs) else 100
            reached, needed = shared.reached_steps(runs), shared.article_steps(claim.epochs, batch)
            scale = (
                f"{reached:,} of the {needed:,} steps {claim.epochs} epochs take at this run's optimised batch size; "
                "the article's batch sizes are not in its text"
            )
            condition = f"{which}: {named(model)}"
            judged = (
                Verdict(claim.key, verdicts.UNTESTABLE, unit="%", scale=scale, condition=condition)
                if reached < needed
                else shared.absolute(claim, final_accuracy(runs), condition=condition)
            )
            found.append(reading(judged, runs))
        elif kind in ("r_t", "r_v"):
            found.append(_timing(claim, kind, model, which, timed))
        elif kind == "converges":
            # how the article's 30-epoch curves went: judged only over runs that reached them
            vit = per_seed(select(table, model="ViT"), verdicts.mean_accuracy)
            for bn in shared.BN_MODELS:
                values = paired(vit, per_seed(select(table, model=bn), verdicts.mean_accuracy))
                pair = table[table["model"].isin(["ViT", bn])]
                scale, condition = _optimised_scale(pair), f"{which}: {named('ViT')} against {named(bn)}"
                short = not pair.empty and any(
                    shared.reached_steps(runs) < shared.article_steps(article.EPOCHS, int(runs["batch_size"].iloc[0]))
                    for _, runs in pair.groupby("model")
                )
                untestable = Verdict(claim.key, verdicts.UNTESTABLE, scale=scale, condition=condition)
                judged = untestable if short else shared.judge_difference(claim, values, scale, condition)
                found.append(reading(judged, pair))
    return found


def _timing(claim, kind: str, model: str, which: str, timed: pd.DataFrame | None) -> Verdict:
    """A gain claim judged over the timing rounds' per-round gains (not run where no rounds are measured)."""
    depths = CONFIGURATIONS[which]
    mine, vit = (model, depths[model]), ("ViT", depths["ViT"])
    condition = f"{which}: {model} d{mine[1]} against ViT d{vit[1]}, each at its optimised settings"
    timed = rounds.frame(None) if timed is None else timed
    pair = timed[timed["model"].isin([model, "ViT"])]
    if rounds.rows_of(timed, *mine).empty or rounds.rows_of(timed, *vit).empty:
        note = rounds.described(timed.iloc[:0])
        return Verdict(claim.key, verdicts.NOT_RUN, unit="%", each="round", condition=condition, note=note)
    scale = against_article(pair["machine"].iloc[0], article.DEVICES)
    condition += f"; {rounds.described(pair)}"
    judged = shared.gain(claim, rounds.round_gains(timed, mine, vit, kind), scale, condition, each="round")
    return dataclasses.replace(reading(judged, pair), off_plan=rounds.off_plan(pair))


def _optimised_scale(table: pd.DataFrame) -> str:
    """How much of the article's epochs each model's runs covered, in steps at that model's own batch size (the
    article's optimised batch sizes are in its Table 2, which its text does not give)."""
    steps = lambda runs: shared.article_steps(article.EPOCHS, int(runs["batch_size"].iloc[0]))
    parts = [
        f"{model} {shared.reached_steps(runs):,} of {steps(runs):,}"
        for model, runs in table.groupby("model", sort=False)
    ]
    return (
        f"steps of the {article.EPOCHS} epochs at each model's optimised batch size: {', '.join(parts)}; the "
        "article's batch sizes are not in its text"
    )
