"""Every claim of :func:`vitbn_nb.articles.claims` judged from the runs, by the one rule of :mod:`vitbn_nb.verdicts`.

One function per family of claims, each taking the run table a chapter already has (one row per run and epoch,
:func:`vitbn_nb.runs.load_table`) and returning :class:`~vitbn_nb.verdicts.Verdict` objects; a chapter saves them
(``NN_claims.csv``, numbers not formatted text) and the README's results table is a view of those files.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

from . import articles, engine, verdicts
from .models import CONFIGURATIONS
from .verdicts import Verdict

BN_MODELS = ("ViTBNFFN", "ViTBN")
MNIST_TRAIN_IMAGES = 60_000
#: Where the articles' times were taken (article 1: Colab's NVIDIA L4), named beside every ratio judged here.
ARTICLE_HARDWARE = "the article's NVIDIA L4"


def _claim(key: str) -> articles.Claim:
    found = {c.key: c for c in articles.claims()}
    return found[key]


def _select(table: pd.DataFrame, **where) -> pd.DataFrame:
    keep = np.ones(len(table), dtype=bool)
    for column, value in where.items():
        keep &= np.isclose(table[column], value) if isinstance(value, float) else (table[column] == value).to_numpy()
    return table[keep]


def final_accuracy(table: pd.DataFrame) -> pd.Series:
    """Final test accuracy per seed of one configuration's runs (a diverged run's is at the epoch it diverged)."""
    last = table.sort_values("epoch").groupby("run_id", sort=False).tail(1)
    return last.set_index("seed")["test_acc"].sort_index()


def per_seed(table: pd.DataFrame, statistic: Callable[[pd.DataFrame], float]) -> pd.Series:
    return pd.Series({seed: statistic(run) for seed, run in table.groupby("seed")}, dtype=float).sort_index()


def reached_steps(table: pd.DataFrame) -> int:
    """The fewest training steps any of the runs took (epochs trained x steps per epoch)."""
    if table.empty:
        return 0
    steps = []
    for _, run in table.groupby("run_id"):
        images = run["train_size"].iloc[0] if "train_size" in run else None
        images = MNIST_TRAIN_IMAGES if images is None or pd.isna(images) else int(images)
        steps.append(int(run["epoch"].max()) * engine.steps_per_epoch(images, int(run["batch_size"].iloc[0])))
    return min(steps)


def article_steps(epochs: int, batch_size: int = 100) -> int:
    return epochs * engine.steps_per_epoch(MNIST_TRAIN_IMAGES, batch_size)


def _scale(table: pd.DataFrame, epochs: int, batch_size: int = 100) -> str:
    return verdicts.scale_note(reached_steps(table), article_steps(epochs, batch_size))


def _absolute(claim: articles.Claim, finals: pd.Series) -> Verdict:
    """An absolute accuracy at the article's protocol: "≈ X" (direction 0) is judged as a difference from X that
    the rule finds within noise, "> X" (direction +1) as a value above X."""
    if claim.direction == 0:
        return verdicts.near(claim.key, list(finals), claim.level, unit="%")
    return verdicts.above(claim.key, list(finals), claim.level, unit="%")


def _difference(claim: articles.Claim, values: pd.Series, scale: str, condition: str = "") -> Verdict:
    return verdicts.difference(claim.key, list(values), claim.direction, scale=scale, condition=condition)


def _paired(first: pd.Series, second: pd.Series) -> pd.Series:
    return (first - second).dropna()


def epoch_gains(table: pd.DataFrame, model: dict, baseline: dict, column: str) -> pd.Series:
    """Per seed and epoch: the gain 100 x (1 - T(model) / T(baseline)) of one epoch's time (``train_seconds`` or
    ``test_seconds``), the two runs of a seed paired epoch by epoch (epochs as repeated measurements)."""
    a = _select(table, **model).set_index(["seed", "epoch"])[column]
    b = _select(table, **baseline).set_index(["seed", "epoch"])[column]
    return (100 * (1 - a / b)).dropna()


def _gain_verdict(claim: articles.Claim, gains: pd.Series, hardware: str, condition: str) -> Verdict:
    return verdicts.above(
        claim.key,
        list(gains),
        claim.level,
        unit="%",
        each="epoch",
        scale=f"{hardware} against {ARTICLE_HARDWARE}",
        condition=condition,
    )


def hardware_of(table: pd.DataFrame) -> str:
    """The machines that trained (and so timed) the table's runs, from their records."""
    from .figures import trained_on

    return ", ".join(trained_on(table["run_id"].unique())) or "this machine"


# -- chapter 01: article 2's DNNs ---------------------------------------------------------------------------------


def dnn(table: pd.DataFrame) -> list[Verdict]:
    plain, bn = dict(model="DNN_d3"), dict(model="DNNBN_d3")
    at = lambda lr, which: _select(table, lr=lr, **which)
    scale = _scale(table, 15)
    found = []
    claim = _claim("article2/fig1/converges")
    found.append(
        _difference(
            claim,
            _paired(per_seed(at(0.01, bn), verdicts.mean_accuracy), per_seed(at(0.01, plain), verdicts.mean_accuracy)),
            scale,
        )
    )
    claim = _claim("article2/fig1/final")
    found.append(_difference(claim, _paired(final_accuracy(at(0.01, bn)), final_accuracy(at(0.01, plain))), scale))
    claim = _claim("article2/fig2/stable")
    found.append(
        _difference(
            claim,
            _paired(per_seed(at(0.1, bn), verdicts.mean_accuracy), per_seed(at(0.1, plain), verdicts.mean_accuracy)),
            scale,
        )
    )
    claim = _claim("article2/fig3/cost")
    fall = lambda which: final_accuracy(at(0.01, which)) - final_accuracy(at(0.1, which))
    found.append(_difference(claim, _paired(fall(plain), fall(bn)), scale))
    return found


# -- chapter 03: article 1's Experiment 1 -------------------------------------------------------------------------


def _configuration_rows(table: pd.DataFrame, which: str) -> dict[str, dict]:
    return {model: dict(model=model, depth=depth) for model, depth in CONFIGURATIONS[which].items()}


def experiment1(table: pd.DataFrame) -> list[Verdict]:
    found = []
    hardware = hardware_of(table)
    for lr in sorted(articles.ARTICLE1_EXPERIMENT1):
        at_lr = _select(table, lr=float(lr))
        if at_lr.empty:
            continue
        for claim in (c for c in articles.claims() if c.key.startswith(f"article1/lr{lr:g}/")):
            kind = claim.key.split("/")[2]
            if kind == "accuracy":
                model = claim.key.split("/")[-1]
                runs = _select(at_lr, **_configuration_rows(table, "as run")[model])
                found.append(
                    verdicts.untestable(claim.key, reached_steps(runs), article_steps(claim.epochs), unit="%")
                    if reached_steps(runs) < article_steps(claim.epochs)
                    else _absolute(claim, final_accuracy(runs))
                )
            elif kind in ("r_t", "r_v"):
                model = claim.key.split("/")[-1]
                column = "train_seconds" if kind == "r_t" else "test_seconds"
                for which in CONFIGURATIONS:
                    rows = _configuration_rows(table, which)
                    gains = epoch_gains(at_lr, rows[model], rows["ViT"], column)
                    condition = f"{which}: {model} d{rows[model]['depth']} against ViT d{rows['ViT']['depth']}"
                    found.append(_gain_verdict(claim, gains, hardware, condition))
            elif kind == "converges":
                found += _vit_against_bn(claim, at_lr, verdicts.mean_accuracy, _scale(at_lr, 30))
            elif kind == "breakdown":
                needed = article_steps(claim.epochs)
                if reached_steps(at_lr) < needed:
                    scale = f"{reached_steps(at_lr):,} of the {needed:,} steps to the article's breakdown epoch"
                    found.append(Verdict(claim.key, verdicts.UNTESTABLE, scale=scale))
                else:
                    found += _vit_against_bn(claim, at_lr, verdicts.largest_fall, _scale(at_lr, 30))
    return found


def larger_lr(sweep: pd.DataFrame) -> list[Verdict]:
    """Article 1's conclusion that BatchNorm allows a larger learning rate, judged over the learning-rate sweep
    (``studies.lr_sweep``: the three models at depth 6): at every swept rate from article 1's largest up, each
    BatchNorm model's final accuracy against ViT's, paired by seed."""
    found = []
    largest = max(articles.ARTICLE1_EXPERIMENT1)
    rates = sorted(lr for lr in sweep["lr"].unique() if lr >= largest or np.isclose(lr, largest))
    for model in (m for m in BN_MODELS if m in set(sweep["model"])):
        claim = _claim(f"article1/larger_lr/{model}")
        for lr in rates:
            at_lr = _select(sweep, lr=float(lr))
            values = _paired(final_accuracy(_select(at_lr, model=model)), final_accuracy(_select(at_lr, model="ViT")))
            depth = int(at_lr["depth"].iloc[0])
            condition = f"lr {lr:g}: {model} d{depth} against ViT d{depth}"
            found.append(_difference(claim, values, _scale(at_lr, 30), condition))
    return found


def _vit_against_bn(claim: articles.Claim, at_lr: pd.DataFrame, statistic, scale: str) -> list[Verdict]:
    """``statistic`` of ViT − that of each BatchNorm model, per seed, in each configuration."""
    found = []
    for which in CONFIGURATIONS:
        rows = _configuration_rows(at_lr, which)
        vit = per_seed(_select(at_lr, **rows["ViT"]), statistic)
        for model in BN_MODELS:
            values = _paired(vit, per_seed(_select(at_lr, **rows[model]), statistic))
            condition = f"{which}: ViT d{rows['ViT']['depth']} against {model} d{rows[model]['depth']}"
            found.append(_difference(claim, values, scale, condition))
    return found


# -- chapter 04: article 1's Experiment 2 (the optimised runs) ---------------------------------------------------


def experiment2(table: pd.DataFrame) -> list[Verdict]:
    """``table``: the optimised runs, one configuration per model (as run: ViT d6, the BatchNorm models d1)."""
    found = []
    hardware = hardware_of(table)
    for claim in (c for c in articles.claims() if c.key.startswith("article1/optimised/")):
        kind = claim.key.split("/")[2]
        model = claim.key.split("/")[-1]
        if kind == "accuracy":
            runs = _select(table, model=model)
            batch = int(runs["batch_size"].iloc[0]) if len(runs) else 100
            needed = article_steps(claim.epochs, batch)
            # the article's optimised batch sizes are in its Table 2, which its text does not give
            scale = (
                f"{reached_steps(runs):,} of the {needed:,} steps {claim.epochs} epochs take at this run's optimised "
                "batch size; the article's batch sizes are not in its text"
            )
            found.append(
                Verdict(claim.key, verdicts.UNTESTABLE, unit="%", scale=scale)
                if reached_steps(runs) < needed
                else _absolute(claim, final_accuracy(runs))
            )
        elif kind in ("r_t", "r_v"):
            column = "train_seconds" if kind == "r_t" else "test_seconds"
            gains = epoch_gains(table, dict(model=model), dict(model="ViT"), column)
            found.append(_gain_verdict(claim, gains, hardware, f"{model} against ViT, each at its optimised settings"))
        elif kind == "converges":
            vit = per_seed(_select(table, model="ViT"), verdicts.mean_accuracy)
            for bn in BN_MODELS:
                values = _paired(vit, per_seed(_select(table, model=bn), verdicts.mean_accuracy))
                found.append(_difference(claim, values, _scale(table, 30), f"ViT against {bn}"))
    return found


# -- chapter 05: article 2's depth study --------------------------------------------------------------------------


def depth(table: pd.DataFrame) -> list[Verdict]:
    found = []
    for claim in (c for c in articles.claims() if c.key.startswith("article2/depth/")):
        lr, d = float(claim.key.split("/")[2][2:]), int(claim.key.split("/")[3][1:])
        at = _select(table, lr=lr, depth=d)
        values = _paired(final_accuracy(_select(at, model="ViTBNFFN")), final_accuracy(_select(at, model="ViT")))
        found.append(_difference(claim, values, _scale(at, 10)))
    for claim in (c for c in articles.claims() if c.key.startswith("article2/fig10/")):
        d = int(claim.key.split("/")[-1][1:])

        def fall(model: str, d: int = d) -> pd.Series:
            low = final_accuracy(_select(table, lr=0.003, depth=d, model=model))
            high = final_accuracy(_select(table, lr=0.005, depth=d, model=model))
            return low - high

        found.append(_difference(claim, _paired(fall("ViT"), fall("ViTBNFFN")), _scale(_select(table, depth=d), 10)))
    return found


# -- chapter 06: the transfer set ------------------------------------------------------------------------------


def round_pairs(measured: pd.DataFrame, model: str, baseline: str = "ViT") -> list[tuple[float, float]]:
    """(model's seconds, baseline's seconds) of each round of interleaved passes, every seed's rounds in turn (a
    chapter's runs are timed in the same rounds: :func:`.studies.transfer_numbers.time_passes_interleaved`)."""
    rounds = lambda m: measured[measured["model"] == m].set_index("seed")["round_seconds"]
    mine, theirs = rounds(model), rounds(baseline)
    return [pair for seed in mine.index.intersection(theirs.index) for pair in zip(mine[seed], theirs[seed])]


def transfer(measured: pd.DataFrame, hardware: str) -> list[Verdict]:
    """``measured``: one row per model and seed with ``round_seconds`` (each round's pass over the transfer set);
    the gain of each round, paired with ViT's pass of the same round, judged against the claim's level."""
    found = []
    for model in BN_MODELS:
        claim = _claim(f"article1/transfer/{model}")
        gains = [100 * (1 - mine / vit) for mine, vit in round_pairs(measured, model)]
        found.append(
            verdicts.above(
                claim.key,
                gains,
                claim.level,
                unit="%",
                scale=f"{hardware}; the article gives no hardware or number",
                condition=f"{model} against ViT, both at depth 6",
                each="round",
            )
        )
    return found


def table(found: list[Verdict]) -> pd.DataFrame:
    """The verdicts as a chapter saves them: the claim's source, words, kind and measure beside the numbers."""
    by_key = {c.key: c for c in articles.claims()}
    rows = []
    for verdict in found:
        claim = by_key[verdict.claim]
        rows.append(
            {
                "claim": claim.key,
                "source": claim.source,
                "says": claim.says,
                "kind": claim.kind,
                "measure": claim.measure,
                "condition": verdict.condition,
                **{k: v for k, v in verdict.row().items() if k not in ("claim", "condition")},
            }
        )
    return pd.DataFrame(rows)


def save(result, found: list[Verdict]):
    """Save a chapter's judged claims as ``NN_claims`` (numbers, not formatted text) and show them."""
    from . import figures

    kept = table(found)
    judged = kept["outcome"].value_counts()
    tally = ", ".join(f"{judged[o]} {o}" for o in verdicts.OUTCOMES if o in judged)
    caption = (
        f"Every claim this chapter tests, judged by the book's one rule ('{verdicts.RULE_TITLE}' on the book's front "
        f"page): the measured value, its 95 % interval over seeds (over epochs for a time), the verdict ({tally})"
    )
    return figures.save_table(kept, f"{result.chapter[:2]}_claims", result, reproduces="new/claims", caption=caption)
