"""Chapter 01's claims (article 2's Figs 1-3) judged by the one rule. Each is about what the runs ended with, or about
stability or convergence over the whole run, so it is judged only over runs of the whole protocol (a few hundred steps
of early training answer another question)."""

from __future__ import annotations

import pandas as pd

from ...judging import verdicts
from ...judging.claims import judge_difference, protocol_scale, short_of
from ...judging.selection import final_accuracy, paired, per_seed, select
from ...judging.verdicts import Verdict
from . import article
from .settings import IntroSettings


def figures_1_to_3(table: pd.DataFrame, settings: IntroSettings) -> list[Verdict]:
    claims = {c.key: c for c in article.findings(settings)}
    low, high = min(settings.lrs), max(settings.lrs)
    scale = protocol_scale(table, article.EPOCHS)
    mean = lambda lr, model: per_seed(select(table, lr=lr, model=model), verdicts.mean_accuracy)
    final = lambda lr, model: final_accuracy(table, lr=lr, model=model)
    fall = lambda model: final(low, model) - final(high, model)
    values = {
        "article2/fig1/converges": paired(mean(low, "DNNBN_d3"), mean(low, "DNN_d3")),
        "article2/fig1/final": paired(final(low, "DNNBN_d3"), final(low, "DNN_d3")),
        "article2/fig2/stable": paired(mean(high, "DNNBN_d3"), mean(high, "DNN_d3")),
        "article2/fig3/cost": paired(fall("DNN_d3"), fall("DNNBN_d3")),
    }
    return [
        (not table.empty and short_of(table, article.EPOCHS, key)) or judge_difference(claims[key], found, scale)
        for key, found in values.items()
    ]
