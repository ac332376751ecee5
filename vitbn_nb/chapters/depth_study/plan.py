"""Chapter 05's seed plan: the power analysis behind its settings' seeds, over the full-protocol runs finished when it
was written (``written()``). The primary contrast of each figure's rate gets the seeds that detect
:data:`~vitbn_nb.judging.power.DEFAULT_EFFECT_PT`; every other claim keeps ``seeds``, its detectable effect stated."""

from __future__ import annotations

import pandas as pd

from ...judging import plans, power, verdicts
from ...judging.selection import final_accuracy, select
from ...store import runs
from ...store.runs import RunConfig
from . import article
from .judge import MODELS, cell_values, figure_family, planned_seeds
from .settings import DepthSettings


def written() -> str:
    """When git says the plan was committed: the power analysis reads the runs finished before it."""
    return plans.committed_at("05_depth_study/first")


#: The protocol's runs the analysis reads: article 2's whole protocol only (a few hundred steps spread otherwise).
PROTOCOL = dict(dataset="mnist_aug", epochs=article.EPOCHS)


def _configs(planned: list[RunConfig], lr: float, depths, seeds: int) -> list[RunConfig]:
    return [
        c
        for c in planned
        if c.model in MODELS and abs(c.lr - lr) < 1e-12 and c.model_kwargs["depth"] in depths and c.seed < seeds
    ]


def _left(configs: list[RunConfig], planned: list[RunConfig]) -> list[RunConfig]:
    """The planned runs not held on the one data stream (a seed's pair split between streams trains again)."""
    # a cell is a depth and a seed: Fig 10 pairs a seed's runs across both rates
    cell = lambda c: (c.model_kwargs["depth"], c.seed)
    cells = {cell(c) for c in configs}
    around = [c for c in planned if c.model in MODELS and cell(c) in cells]
    left = runs.split_streams(around, cell, "cpu", unheld=True)
    return [c for c in configs if c in left]


def seed_plan(settings: DepthSettings, planned: list[RunConfig], table: pd.DataFrame) -> pd.DataFrame:
    """One row per claim that decides article 2's depth study (:func:`power.table`), priced by the runs of
    ``planned`` left to train, read off ``table`` (the runs finished before :data:`written()`)."""
    protocol = power.protocol_runs(table, written(), **PROTOCOL)
    vs = protocol[protocol["model"].isin(MODELS)] if not protocol.empty else protocol
    claims = {c.key: c for c in article.findings(settings)}
    rows = []
    for figure, depths in article.BEYOND_CRITICAL.items():
        lr = settings.figure_lr(figure)
        family = [cell_values(vs, settings, lr, d, verdicts.mean_accuracy) for d in depths]
        plan = power.difference_plan(
            article.primary_key(settings, figure),
            verdicts.PRIMARY,
            family,
            f"its {len(depths)} cell(s) at lr {lr:g}",
            settings.primary_seeds(figure),
            None,
        )
        rows.append(power.priced(plan, _left(_configs(planned, lr, depths, plan.planned), planned), table))
    families = {figure: figure_family(vs, settings, figure) for figure in ("fig8", "fig9")}
    for figure, depth in article.CELLS:
        lr, family = settings.figure_lr(figure), families[figure]
        name = f"{figure.replace('fig', 'Fig ')}'s cells"
        key, seeds = article.depth_key(settings, figure, depth), settings.seeds_at(lr, depth)
        claim = claims[key]
        plan = power.contrast_plan(key, claim.direction, verdicts.SECONDARY, family, name, seeds, claim.margin)
        rows.append(power.priced(plan, _left(_configs(planned, lr, (depth,), seeds), planned), table))
    for model, figure in article.FIG10_NUMBERS:
        lr, depth = settings.figure_lr(figure), article.FIG10_NUMBERS_DEPTH
        at = select(planned_seeds(vs, settings, lr, depth), model=model)
        key = article.fig10_number_key(settings, model, figure)
        finals, name = [final_accuracy(at)], f"{model} at d = {depth}"
        plan = power.equivalence_plan(key, verdicts.SECONDARY, finals, name, 3, claims[key].margin)
        plan = power.PlannedClaim(**{**plan.row(), "planned": settings.seeds_at(lr, depth)})
        rows.append(power.priced(plan, _left([], planned), table))
    return power.table(rows)


def plan_caption(frame: pd.DataFrame) -> str:
    """The plan in words, read off it: the primary contrasts' seeds, the runs and hours left, the secondary claims."""
    primary = frame[frame["role"] == verdicts.PRIMARY]
    secondary = frame[frame["role"] == verdicts.SECONDARY]
    asks = lambda needed: "no run to take a spread from" if pd.isna(needed) else f"the analysis asks {needed:.0f}"
    seeds = "; ".join(f"{row.claim}: {row.planned} seeds ({asks(row.needed)})" for row in primary.itertuples())
    short = secondary[secondary["needed"].isna() | (secondary["needed"] > secondary["planned"])]
    most = "more than 200" if short["needed"].isna().any() else f"{short['needed'].max():.0f}"
    # the secondary rows' runs are the primary contrasts' own (the same configurations): counted once
    runs, hours = int(primary["runs_left"].sum()), primary["hours_left"].sum(min_count=1)
    return (
        f"Seed plan of chapter 05, committed {written()[:16]} (git), from article 2's full-protocol "
        f"runs then finished (pairs on one data stream only; {verdicts.POWER:.0%} power, two-sided "
        f"{verdicts.ALPHA:.0%}; equivalence margin ±{verdicts.MARGIN_PT:g} pt). Primary contrasts, which decide the "
        f"conclusion: {seeds}. {len(short)} secondary claims keep fewer seeds than they would need (up to {most}): "
        "they do not decide the conclusion, each states what its seeds can detect, and the widest spreads would "
        "take more seeds than a CPU budget for article 2 allows (the confirmatory replication's plan prices the cells "
        "it tests again). "
        f"Left to train: {runs} runs, about "
        f"{'an unknown number of' if pd.isna(hours) else f'{hours:.1f}'} hours of a CPU like the ones that trained "
        "the committed runs"
    )
