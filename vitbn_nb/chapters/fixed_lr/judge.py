"""Chapter 03's claims (article 1's Experiment 1 and its conclusion on larger learning rates) judged by the one rule
from the run table, in each configuration (as run: ViT d6 against BatchNorm models d1; as written: all at d6)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd

from ...judging import claims as shared
from ...judging import verdicts
from ...judging.article1 import against_article
from ...judging.claims import Claim
from ...judging.plans import reading
from ...judging.selection import final_accuracy, machines, one_stream, paired, per_seed, select, timed_pairs
from ...judging.verdicts import Verdict
from ...models import CONFIGURATIONS
from . import article
from .article import EPOCHS


def _rows(which: str) -> dict[str, dict]:
    return {model: dict(model=model, depth=depth) for model, depth in CONFIGURATIONS[which].items()}


def experiment1(table: pd.DataFrame) -> list[Verdict]:
    """Every claim of Experiment 1 at each rate the table holds."""
    found = []
    for lr in sorted(article.EXPERIMENT1):
        at_lr = select(table, lr=float(lr))
        if at_lr.empty:
            continue
        for claim in (c for c in article.findings() if c.key.startswith(f"article1/lr{lr:g}/")):
            kind, model = claim.key.split("/")[2], claim.key.split("/")[-1]
            if kind == "accuracy":
                # article 1's figures are its runs as run (the BatchNorm models at depth 1); its bound "above 97 %"
                # is its text's, of models it describes at depth 6: judged in both configurations
                for which in ("as run",) if claim.direction == 0 else tuple(CONFIGURATIONS):
                    runs = select(at_lr, **_rows(which)[model])
                    condition = f"{which}: {model} d{_rows(which)[model]['depth']}"
                    judged = not runs.empty and shared.short_of(
                        runs, claim.epochs, claim.key, unit="%", condition=condition
                    )
                    judged = judged or shared.absolute(
                        claim, final_accuracy(runs), shared.protocol_scale(runs, EPOCHS), condition
                    )
                    found.append(reading(judged, runs))
            elif kind in ("r_t", "r_v"):
                for which in CONFIGURATIONS:
                    rows = _rows(which)
                    timed = (at_lr, rows[model], rows["ViT"], shared.TIMED[kind])
                    gains, hardware = shared.run_gains(*timed), shared.gain_hardware(*timed)
                    condition = f"{which}: {model} d{rows[model]['depth']} against ViT d{rows['ViT']['depth']}"
                    judged = shared.gain(claim, gains, against_article(hardware), condition)
                    both = pd.concat([select(at_lr, **rows[model]), select(at_lr, **rows["ViT"])])
                    found.append(reading(judged, both))
            elif kind == "converges":
                # how the article's 30-epoch curves went: a few hundred steps answer another question
                untestable = shared.short_of(at_lr, claim.epochs, claim.key)
                found += [untestable] if untestable else _vit_against_bn(claim, at_lr, verdicts.mean_accuracy)
            elif kind == "breakdown":
                # ViT breaking down near epoch 15 and the BatchNorm models staying stable to the end need the whole run
                untestable = shared.short_of(at_lr, claim.epochs, claim.key)
                found += [untestable] if untestable else [_collapses(claim.key, *pair) for pair in _pairs(at_lr)]
    return found


def _pairs(at_lr: pd.DataFrame):
    """Per configuration and BatchNorm model: ViT's runs and the model's, and the condition's words."""
    for which in CONFIGURATIONS:
        rows = _rows(which)
        for model in shared.BN_MODELS:
            pair = pd.concat([select(at_lr, **rows["ViT"]), select(at_lr, **rows[model])])
            yield pair, model, f"{which}: ViT d{rows['ViT']['depth']} against {model} d{rows[model]['depth']}"


def _vit_against_bn(claim: Claim, at_lr: pd.DataFrame, statistic) -> list[Verdict]:
    """``statistic`` of ViT − that of each BatchNorm model, per seed over one-stream pairs, in each configuration;
    not testable where the runs are short of the article's protocol."""
    found = []
    for pair, model, condition in _pairs(at_lr):
        pair = one_stream(pair)
        vit = per_seed(select(pair, model="ViT"), statistic)
        values = paired(vit, per_seed(select(pair, model=model), statistic))
        untestable = not pair.empty and shared.short_of(pair, claim.epochs or EPOCHS, claim.key, condition=condition)
        scale = shared.protocol_scale(pair, EPOCHS)
        found.append(reading(untestable or shared.judge_difference(claim, values, scale, condition), pair))
    return found


def _collapses(key: str, pair: pd.DataFrame, model: str, condition: str) -> Verdict:
    """ViT's collapses (:func:`~vitbn_nb.judging.verdicts.collapsed`) counted against ``model``'s, over runs of article
    1's whole protocol only."""
    untestable = not pair.empty and shared.short_of(pair, EPOCHS, key, condition=condition)
    collapsed = lambda name: [verdicts.collapsed(run) for _, run in select(pair, model=name).groupby("run_id")]
    scale = shared.protocol_scale(pair, EPOCHS)
    judged = verdicts.counts(key, collapsed("ViT"), collapsed(model), +1, scale=scale, condition=condition)
    curves = {
        f"{name} s{run['seed'].iloc[0]}": run
        for name in ("ViT", model)
        for _, run in select(pair, model=name).groupby("run_id")
    }
    falls = f"largest falls: {verdicts.falls_text(curves)}" if curves and not untestable else ""
    judged = untestable or dataclasses.replace(judged, note="; ".join(filter(None, (judged.note, falls))))
    return reading(judged, pair)


def larger_lr(sweep: pd.DataFrame, protocol_runs: pd.DataFrame | None = None) -> list[Verdict]:
    """Article 1's conclusion that BatchNorm allows a larger lr "without rendering the model unstable": ViT's collapses
    against each BatchNorm model's at depth 6 from article 1's largest rate up, over ``protocol_runs`` where held."""
    found = []
    if sweep.empty:
        return found
    claims = {c.key: c for c in article.findings()}
    largest = max(article.EXPERIMENT1)
    rates = sorted(lr for lr in sweep["lr"].unique() if lr >= largest or np.isclose(lr, largest))
    depth = int(sweep["depth"].iloc[0])  # the sweep's one depth, the article's as written
    for model in (m for m in shared.BN_MODELS if m in set(sweep["model"])):
        claim = claims[f"article1/larger_lr/{model}"]
        for lr in rates:
            pair = _pair(protocol_runs, lr, depth, model)
            pair = _pair(sweep, lr, depth, model) if pair is None else pair
            found.append(_collapses(claim.key, pair, model, f"lr {lr:g}: ViT d{depth} against {model} d{depth}"))
    return found


def _pair(table: pd.DataFrame | None, lr: float, depth: int, model: str) -> pd.DataFrame | None:
    """ViT's and ``model``'s runs at ``lr`` and ``depth`` in ``table``; None where it lacks either side."""
    if table is None:
        return None
    pair = select(table, lr=float(lr), depth=depth)
    pair = pair[pair["model"].isin([model, "ViT"])]
    return pair if set(pair["model"]) == {model, "ViT"} else None


def _relative_times(table: pd.DataFrame, model: str) -> pd.DataFrame:
    """Per seed (rows) and rate (columns): ``model``'s mean training seconds per epoch at that rate over its run's at
    article 1's smallest rate, minus one (%), a seed's two runs timed on one machine (else no value)."""
    runs = select(table, model=model)
    base = min(article.EXPERIMENT1)
    if runs.empty:
        return pd.DataFrame()
    pairs = timed_pairs(runs, ["train_seconds"], ["seed"], side="lr", baseline=base)
    pairs = pairs.assign(change=100 * (pairs["train_seconds"] / pairs["train_seconds_base"] - 1))
    return pairs.pivot_table(index="seed", columns="lr", values="change")


def fig6(table: pd.DataFrame) -> list[Verdict]:
    """Figure 6's claims over ``table`` (article 1 as run, its figure's models): how each model's time per epoch moves
    with the rate, each rate's against lr 0.0005's seed by seed on one machine; ViT's largest move against each
    BatchNorm model's, ViTBN's moves within the article's margin, ViTBNFFN's only at lr 0.01 beyond it."""
    claims = {c.key: c for c in article.findings() if c.key.startswith("article1/fig6/")}
    rows = {model: dict(model=model, depth=depth) for model, depth in CONFIGURATIONS["as run"].items()}
    table = pd.concat([select(table, **row) for row in rows.values()]) if len(table) else table
    changes = {model: _relative_times(table, model) for model in rows}
    scale = shared.protocol_scale(table, EPOCHS)
    named = lambda model: f"as run: {model} d{rows[model]['depth']}"
    found = []
    rates = sorted(article.EXPERIMENT1)[1:]
    largest = lambda frame: frame.reindex(columns=rates).abs().dropna().max(axis=1)
    for model in shared.BN_MODELS:
        values = paired(largest(changes["ViT"]), largest(changes[model])) if len(changes[model]) else pd.Series()
        claim = claims[f"article1/fig6/vit_most/{model}"]
        condition = (
            f"{named('ViT')} against {model} d{rows[model]['depth']}, each rate's time over lr "
            f"{min(article.EXPERIMENT1):g}'s"
        )
        both = pd.concat([select(table, **rows["ViT"]), select(table, **rows[model])])
        judged = _unpaired(shared.judge_difference(claim, values, scale, condition), both)
        found.append(reading(judged, both))
    for model in shared.BN_MODELS:
        for lr in rates:
            claim = claims[f"article1/fig6/{model}/lr{lr:g}"]
            frame = changes[model]
            values = list(frame[lr].dropna()) if lr in frame else []
            condition = (
                f"{named(model)}, lr {lr:g} against lr {min(article.EXPERIMENT1):g}, seed by seed on one machine"
            )
            if claim.direction == 0:
                judged = verdicts.equivalence(
                    claim.key, values, claim.margin, unit="%", scale=scale, condition=condition
                )
            else:
                judged = verdicts.above(claim.key, values, claim.level, unit="%", scale=scale, condition=condition)
            runs = select(table, **rows[model])
            found.append(reading(_unpaired(judged, runs[runs["lr"].isin([min(article.EXPERIMENT1), lr])]), runs))
    return found


def _unpaired(judged: Verdict, runs: pd.DataFrame) -> Verdict:
    """A Fig 6 verdict with no value although its runs trained: says that no seed had its rates timed on one
    machine, and which machines timed which rate."""
    if judged.outcome != verdicts.NOT_RUN or runs.empty:
        return judged
    timed = (
        runs.assign(machine=machines(runs)).groupby("lr")["machine"].agg(lambda m: ", ".join(sorted(set(m.dropna()))))
    )
    where = "; ".join(f"lr {lr:g} on {names}" for lr, names in timed.items())
    note = (
        f"trained, but no seed has these rates timed on one machine ({where}): compared only where one machine "
        "timed both"
    )
    return dataclasses.replace(judged, note=note)
