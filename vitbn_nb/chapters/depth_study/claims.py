"""Chapter 05's claims judged by the one rule: article 2's findings (Figs 8-10) are about its runs over its whole
protocol (the accuracies they ended with, the curves they drew), so each is judged only over runs that reached it,
otherwise "not testable at this scale" with the steps reached (a few hundred steps of early training answer another
question)."""

from __future__ import annotations

import pandas as pd

from ...judging import verdicts
from ...judging.claims import absolute, judge_difference, protocol_scale, short_of
from ...judging.selection import final_accuracy, paired, per_seed, select
from ...judging.verdicts import Verdict
from . import article
from .settings import DepthSettings

MODELS = ("ViT", "ViTBNFFN")
#: Article 2's protocol: 10 epochs of augmented MNIST at batch 100 (6,000 steps).
ARTICLE2_EPOCHS = DepthSettings.epochs


def unplanned(settings: DepthSettings) -> list[str]:
    """The claims whose runs these settings do not plan, each with the runs it needs."""
    missing = []
    for figure, depth in article.SAID:
        lr = settings.figure_lr(figure)
        if depth not in settings.depths[lr]:
            missing.append(f"{article.depth_key(settings, figure, depth)} (lr {lr:g}, d = {depth})")
    for depth in article.FIG10_SAID:
        if depth not in settings.depths[settings.fig8_lr] or depth not in settings.depths[settings.fig9_lr]:
            missing.append(
                f"{article.fig10_key(depth)} (d = {depth} at lr {settings.fig8_lr:g} and {settings.fig9_lr:g})"
            )
    for model, figure in article.FIG10_NUMBERS:
        lr, depth = settings.figure_lr(figure), article.FIG10_NUMBERS_DEPTH
        if depth not in settings.depths[lr]:
            missing.append(f"{article.fig10_number_key(settings, model, figure)} (lr {lr:g}, d = {depth})")
    for figure, depths in article.BEYOND_CRITICAL.items():
        lr = settings.figure_lr(figure)
        missing += [
            f"{article.converges_key(settings, figure, depth)} (lr {lr:g}, d = {depth})"
            for depth in depths
            if depth not in settings.depths[lr]
        ]
    return missing


def judge(table: pd.DataFrame, settings: DepthSettings) -> list[Verdict]:
    """Every claim of :func:`.article.claims` judged from ``table`` at the settings' rates. Under ``paper`` (the
    article's protocol) a claim whose runs the settings do not plan is an error, never a silent "not run"."""
    missing = unplanned(settings)
    if settings.profile == "paper" and missing:
        raise ValueError(
            "chapter 05's paper settings do not plan the runs of these claims of article 2: "
            + "; ".join(missing)
            + "; add the depths to fig8_depths, fig9_depths or fig10_depths"
        )
    table = table[table["model"].isin(MODELS)]
    found = []
    claims = {c.key: c for c in article.claims(settings)}

    def judged(key: str, at: pd.DataFrame, values: pd.Series) -> Verdict:
        untestable = not at.empty and short_of(at, ARTICLE2_EPOCHS, key)
        return untestable or judge_difference(claims[key], values, protocol_scale(at, ARTICLE2_EPOCHS))

    for figure, depth in article.SAID:
        at = select(table, lr=settings.figure_lr(figure), depth=depth)
        values = paired(final_accuracy(at, model="ViTBNFFN"), final_accuracy(at, model="ViT"))
        found.append(judged(article.depth_key(settings, figure, depth), at, values))
    low, high = settings.fig8_lr, settings.fig9_lr
    for depth in article.FIG10_SAID:
        at = pd.concat([select(table, lr=lr, depth=depth) for lr in (low, high)])
        fall = lambda model, at=at: final_accuracy(at, lr=low, model=model) - final_accuracy(at, lr=high, model=model)
        found.append(judged(article.fig10_key(depth), at, paired(fall("ViT"), fall("ViTBNFFN"))))
    for model, figure in article.FIG10_NUMBERS:
        at = select(table, lr=settings.figure_lr(figure), depth=article.FIG10_NUMBERS_DEPTH, model=model)
        key = article.fig10_number_key(settings, model, figure)
        untestable = not at.empty and short_of(at, ARTICLE2_EPOCHS, key, unit="%")
        scale = protocol_scale(at, ARTICLE2_EPOCHS)
        found.append(untestable or absolute(claims[key], final_accuracy(at), scale))  # no run at all: "not run"
    for figure, depths in article.BEYOND_CRITICAL.items():
        for depth in depths:
            at = select(table, lr=settings.figure_lr(figure), depth=depth)
            mean = lambda model, at=at: per_seed(select(at, model=model), verdicts.mean_accuracy)
            found.append(
                judged(article.converges_key(settings, figure, depth), at, paired(mean("ViTBNFFN"), mean("ViT")))
            )
    return found
