"""Chapter 05's claims judged by the one rule: article 2's findings (Figs 8-10) are about its runs over its whole
protocol, so each is judged only over runs that reached it, else "not testable at this scale"."""

from __future__ import annotations

import dataclasses

import pandas as pd

from ...judging import verdicts
from ...judging.claims import absolute, judge_difference, protocol_scale, short_of
from ...judging.plans import reading
from ...judging.selection import final_accuracy, one_stream, paired, per_seed, select
from ...judging.verdicts import Verdict
from . import article
from .settings import DepthSettings

MODELS = ("ViT", "ViTBNFFN")


def unplanned(settings: DepthSettings) -> list[str]:
    """The claims whose runs these settings do not plan, each with the runs it needs."""
    s, d3 = settings, article.FIG10_NUMBERS_DEPTH
    needs = [(article.depth_key(s, f, d), s.figure_lr(f), d) for f, d in article.CELLS]
    needs += [(article.fig10_key(d), lr, d) for d in article.FIG10_CELLS for lr in (s.fig8_lr, s.fig9_lr)]
    needs += [(article.fig10_number_key(s, m, f), s.figure_lr(f), d3) for m, f in article.FIG10_NUMBERS]
    needs += [
        (article.converges_key(s, f, d), s.figure_lr(f), d) for f, ds in article.BEYOND_CRITICAL.items() for d in ds
    ]
    return [f"{key} (lr {lr:g}, d = {d})" for key, lr, d in needs if d not in s.depths[lr]]


def planned_seeds(table: pd.DataFrame, settings: DepthSettings, lr: float, depth: int) -> pd.DataFrame:
    """The runs of ``table`` at ``lr`` and ``depth`` that a verdict reads: the seed plan's seeds, no more."""
    at = select(table, lr=lr, depth=depth)
    return at[at["seed"] < settings.seeds_at(lr, depth)]


def cell_values(table: pd.DataFrame, settings: DepthSettings, lr: float, depth: int, statistic=None) -> pd.Series:
    """ViTBNFFN − ViT per seed at ``lr`` and ``depth`` over the planned pairs whose two runs drew one data stream:
    final accuracy, or ``statistic`` of each run's curve."""
    at = one_stream(planned_seeds(table, settings, lr, depth))
    if statistic is None:
        return paired(final_accuracy(at, model="ViTBNFFN"), final_accuracy(at, model="ViT"))
    return paired(per_seed(select(at, model="ViTBNFFN"), statistic), per_seed(select(at, model="ViT"), statistic))


def primary_values(table: pd.DataFrame, settings: DepthSettings, figure: str) -> pd.Series:
    """The primary contrast's per-seed values at ``figure``'s rate: ViTBNFFN − ViT mean test accuracy over the epochs,
    averaged over the depths article 2 places beyond the critical depth (seeds paired at every one of them)."""
    lr = settings.figure_lr(figure)
    cells = [cell_values(table, settings, lr, d, verdicts.mean_accuracy) for d in article.BEYOND_CRITICAL[figure]]
    return pd.concat(cells, axis=1).dropna().mean(axis=1) if cells else pd.Series(dtype=float)


def figure_family(table: pd.DataFrame, settings: DepthSettings, figure: str, statistic=None) -> list[pd.Series]:
    """The per-seed values of every cell of ``figure`` (its depths at its rate): the claim family whose pooled spread
    states what a cell's seeds could detect."""
    lr = settings.figure_lr(figure)
    return [cell_values(table, settings, lr, d, statistic) for f, d in article.CELLS if f == figure]


def figures_8_to_10(table: pd.DataFrame, settings: DepthSettings) -> list[Verdict]:
    """Every claim of :func:`.article.findings` judged: the primary contrasts first, then each figure's cells after
    Holm's correction over them. Under ``paper`` a claim whose runs are not planned is an error, not "not run"."""
    missing = unplanned(settings)
    if settings.profile == "paper" and missing:
        raise ValueError(
            "chapter 05's paper settings do not plan the runs of these claims of article 2: "
            + "; ".join(missing)
            + "; add the depths to fig8_depths, fig9_depths or fig10_depths"
        )
    table = table[table["model"].isin(MODELS)]
    claims = {c.key: c for c in article.findings(settings)}

    def judged(key: str, at: pd.DataFrame, values: pd.Series, spread: float | None, planned: int) -> Verdict:
        untestable = not at.empty and short_of(at, article.EPOCHS, key)
        scale = protocol_scale(at, article.EPOCHS)
        judged_ = judge_difference(claims[key], values, scale, spread=spread)
        return reading(untestable or verdicts.short_of_plan(judged_, planned, present=not at.empty), at)

    primary = []
    for figure, depths in article.BEYOND_CRITICAL.items():
        lr = settings.figure_lr(figure)
        at = pd.concat([planned_seeds(table, settings, lr, d) for d in depths])
        values, planned = primary_values(table, settings, figure), settings.primary_seeds(figure)
        verdict = judged(article.primary_key(settings, figure), at, values, None, planned)
        primary.append(dataclasses.replace(verdict, role=verdicts.PRIMARY))
    found = []
    for figure in ("fig8", "fig9"):
        lr, cells = settings.figure_lr(figure), []
        spread = verdicts.pooled_spread(figure_family(table, settings, figure))
        for f, depth in article.CELLS:
            if f == figure:
                at, planned = planned_seeds(table, settings, lr, depth), settings.seeds_at(lr, depth)
                values = cell_values(table, settings, lr, depth)
                cells.append(judged(article.depth_key(settings, figure, depth), at, values, spread, planned))
        mean_spread = verdicts.pooled_spread(figure_family(table, settings, figure, verdicts.mean_accuracy))
        for depth in article.BEYOND_CRITICAL[figure]:
            at, planned = planned_seeds(table, settings, lr, depth), settings.seeds_at(lr, depth)
            values = cell_values(table, settings, lr, depth, verdicts.mean_accuracy)
            cells.append(judged(article.converges_key(settings, figure, depth), at, values, mean_spread, planned))
        found += verdicts.holm(cells)
    low, high = settings.fig8_lr, settings.fig9_lr
    fall_cells = {}
    for depth in article.FIG10_CELLS:
        at = pd.concat([planned_seeds(table, settings, lr, depth) for lr in (low, high)])
        # a seed's four runs, both models at both rates, drew one stream
        pairs = one_stream(at)
        fall = lambda model, t=pairs: final_accuracy(t, lr=low, model=model) - final_accuracy(t, lr=high, model=model)
        fall_cells[depth] = (at, paired(fall("ViT"), fall("ViTBNFFN")))
    spread = verdicts.pooled_spread([values for _, values in fall_cells.values()])
    planned = lambda depth: min(settings.seeds_at(lr, depth) for lr in (low, high))
    found += verdicts.holm(
        [judged(article.fig10_key(d), at, values, spread, planned(d)) for d, (at, values) in fall_cells.items()]
    )
    for model, figure in article.FIG10_NUMBERS:
        lr, depth = settings.figure_lr(figure), article.FIG10_NUMBERS_DEPTH
        at = select(planned_seeds(table, settings, lr, depth), model=model)
        key = article.fig10_number_key(settings, model, figure)
        untestable = not at.empty and short_of(at, article.EPOCHS, key, unit="%")
        scale = protocol_scale(at, article.EPOCHS)
        judged_ = absolute(claims[key], final_accuracy(at), scale)  # no run at all: "not run"
        judged_ = dataclasses.replace(judged_, role=verdicts.SECONDARY)
        judged_ = untestable or verdicts.short_of_plan(judged_, settings.seeds_at(lr, depth), present=not at.empty)
        found.append(reading(judged_, at))
    return primary + found
