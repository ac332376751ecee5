"""Every claim of :func:`vitbn_nb.judging.articles.claims` judged from the runs, by the one rule of
:mod:`vitbn_nb.judging.verdicts`.

One function per family of claims, each taking the run table a chapter already has (one row per run and epoch,
:func:`vitbn_nb.store.runs.load_table`) and returning :class:`~vitbn_nb.judging.verdicts.Verdict` objects; a chapter
saves them (``NN_claims.csv``, numbers not formatted text) and the README's results table is a view of those files.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd

from ..engines import engine
from ..models import CONFIGURATIONS
from . import articles, verdicts
from .verdicts import Verdict

BN_MODELS = ("ViTBNFFN", "ViTBN")
MNIST_TRAIN_IMAGES = 60_000
#: Article 1's Experiment 1: 30 epochs of every model at every learning rate (batch 100: 18,000 steps).
ARTICLE1_EPOCHS = 30
#: Where article 1's times come from, named beside every ratio judged against them: the machine it states and the
#: device its reference code runs on (never a GPU-against-CPU contrast, which the sources cannot support).
ARTICLE_HARDWARE = articles.ARTICLE1_DEVICES


def against_article(hardware: str, devices: str = ARTICLE_HARDWARE) -> str:
    """A ratio's scale: the machines that timed this book's runs, and article 1's (both of them)."""
    return f"{hardware} here; article 1: {devices}"


def _claim(key: str) -> articles.Claim:
    found = {c.key: c for c in articles.claims()}
    return found[key]


def select(table: pd.DataFrame, **where) -> pd.DataFrame:
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


def diverged(run: pd.DataFrame) -> bool:
    """Whether one run's loss became NaN or infinite (the run store stops it there and records it as diverged)."""
    flagged = "diverged" in run and run["diverged"].fillna(False).astype(bool).any()
    return bool(flagged or ("status" in run and (run["status"] == "diverged").any()))


def reached_steps(table: pd.DataFrame) -> int:
    """The fewest training steps any of the runs took (epochs trained x steps per epoch). A run that diverged ended
    its protocol there: it counts the epochs it was set to train (``epochs``), since no later epoch could change how
    it ended; a run still under way counts only the epochs it has finished."""
    if table.empty:
        return 0
    steps = []
    for _, run in table.groupby("run_id"):
        images = run["train_size"].iloc[0] if "train_size" in run else None
        images = MNIST_TRAIN_IMAGES if images is None or pd.isna(images) else int(images)
        epochs = int(run["epoch"].max())
        if diverged(run) and "epochs" in run and pd.notna(run["epochs"].iloc[0]):
            epochs = max(epochs, int(run["epochs"].iloc[0]))
        steps.append(epochs * engine.steps_per_epoch(images, int(run["batch_size"].iloc[0])))
    return min(steps)


def article_steps(epochs: int, batch_size: int = 100) -> int:
    return epochs * engine.steps_per_epoch(MNIST_TRAIN_IMAGES, batch_size)


def protocol_scale(table: pd.DataFrame, epochs: int, batch_size: int = 100) -> str:
    return verdicts.scale_note(reached_steps(table), article_steps(epochs, batch_size))


def _absolute(claim: articles.Claim, finals: pd.Series) -> Verdict:
    """An absolute accuracy at the article's protocol: "≈ X" (direction 0) is judged as a difference from X that
    the rule finds within noise, "> X" (direction +1) as a value above X."""
    if claim.direction == 0:
        return verdicts.near(claim.key, list(finals), claim.level, unit="%")
    return verdicts.above(claim.key, list(finals), claim.level, unit="%")


def judge_difference(claim: articles.Claim, values: pd.Series, scale: str, condition: str = "") -> Verdict:
    return verdicts.difference(claim.key, list(values), claim.direction, scale=scale, condition=condition)


def paired(first: pd.Series, second: pd.Series) -> pd.Series:
    return (first - second).dropna()


def run_gains(table: pd.DataFrame, model: dict, baseline: dict, column: str) -> pd.Series:
    """Per seed: the gain 100 x (1 - T(model) / T(baseline)), T a run's mean time per epoch (``train_seconds`` or
    ``test_seconds``), as article 1 defines its ratios ("average ... time per epoch"). A run's epochs are averaged
    first: they share one machine, one process and one spell of load, so they are not independent measurements;
    the repeats the rule judges are the seeds (each seed's two runs paired)."""
    mine = select(table, **model).groupby("seed")[column].mean()
    theirs = select(table, **baseline).groupby("seed")[column].mean()
    return (100 * (1 - mine / theirs)).dropna()


def _gain_verdict(claim: articles.Claim, gains: pd.Series, scale: str, condition: str) -> Verdict:
    return verdicts.above(claim.key, list(gains), claim.level, unit="%", scale=scale, condition=condition)


def hardware_of(table: pd.DataFrame) -> str:
    """The machines that trained (and so timed) the table's runs, from their records."""
    from ..publishing.figures import trained_on

    return ", ".join(trained_on(table["run_id"].unique())) or "this machine"


# -- chapter 01: article 2's DNNs ---------------------------------------------------------------------------------


#: Article 2's DNN experiment: 15 epochs of augmented MNIST at batch 100.
ARTICLE2_DNN_EPOCHS = 15
#: Its claims about what the runs ended with, or about stability over the whole run: judged only at its protocol.
_DNN_END_OF_PROTOCOL = ("article2/fig1/final", "article2/fig2/stable", "article2/fig3/cost")


def dnn(table: pd.DataFrame) -> list[Verdict]:
    """Article 2's Figs 1-3. The final accuracies (Figs 1 and 3) and the stability at lr 0.1 (Fig 2) are judged only
    over runs of its 15-epoch protocol; "converges faster" is read from the curves at any length, its scale named."""
    found = _dnn(table)
    needed = article_steps(ARTICLE2_DNN_EPOCHS)
    if not table.empty and reached_steps(table) < needed:
        found = [
            verdicts.untestable(v.claim, reached_steps(table), needed) if v.claim in _DNN_END_OF_PROTOCOL else v
            for v in found
        ]
    return found


def _dnn(table: pd.DataFrame) -> list[Verdict]:
    plain, bn = dict(model="DNN_d3"), dict(model="DNNBN_d3")
    at = lambda lr, which: select(table, lr=lr, **which)
    scale = protocol_scale(table, ARTICLE2_DNN_EPOCHS)
    found = []
    claim = _claim("article2/fig1/converges")
    found.append(
        judge_difference(
            claim,
            paired(per_seed(at(0.01, bn), verdicts.mean_accuracy), per_seed(at(0.01, plain), verdicts.mean_accuracy)),
            scale,
        )
    )
    claim = _claim("article2/fig1/final")
    found.append(judge_difference(claim, paired(final_accuracy(at(0.01, bn)), final_accuracy(at(0.01, plain))), scale))
    claim = _claim("article2/fig2/stable")
    found.append(
        judge_difference(
            claim,
            paired(per_seed(at(0.1, bn), verdicts.mean_accuracy), per_seed(at(0.1, plain), verdicts.mean_accuracy)),
            scale,
        )
    )
    claim = _claim("article2/fig3/cost")
    fall = lambda which: final_accuracy(at(0.01, which)) - final_accuracy(at(0.1, which))
    found.append(judge_difference(claim, paired(fall(plain), fall(bn)), scale))
    return found


# -- chapter 03: article 1's Experiment 1 -------------------------------------------------------------------------


def _configuration_rows(table: pd.DataFrame, which: str) -> dict[str, dict]:
    return {model: dict(model=model, depth=depth) for model, depth in CONFIGURATIONS[which].items()}


def experiment1(table: pd.DataFrame) -> list[Verdict]:
    found = []
    hardware = hardware_of(table)
    for lr in sorted(articles.ARTICLE1_EXPERIMENT1):
        at_lr = select(table, lr=float(lr))
        if at_lr.empty:
            continue
        for claim in (c for c in articles.claims() if c.key.startswith(f"article1/lr{lr:g}/")):
            kind = claim.key.split("/")[2]
            if kind == "accuracy":
                model = claim.key.split("/")[-1]
                runs = select(at_lr, **_configuration_rows(table, "as run")[model])
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
                    gains = run_gains(at_lr, rows[model], rows["ViT"], column)
                    condition = f"{which}: {model} d{rows[model]['depth']} against ViT d{rows['ViT']['depth']}"
                    found.append(_gain_verdict(claim, gains, against_article(hardware), condition))
            elif kind == "converges":
                found += _vit_against_bn(claim, at_lr, verdicts.mean_accuracy, protocol_scale(at_lr, ARTICLE1_EPOCHS))
            elif kind == "breakdown":
                # stability over the article's whole run: ViT breaking down near epoch 15 and the BatchNorm models
                # staying stable to epoch 30 need the whole 30 epochs, not only the breakdown epoch
                needed = article_steps(claim.epochs)
                if reached_steps(at_lr) < needed:
                    found.append(verdicts.untestable(claim.key, reached_steps(at_lr), needed))
                else:
                    found += _vit_against_bn(claim, at_lr, verdicts.largest_fall, protocol_scale(at_lr, claim.epochs))
    return found


def larger_lr(sweep: pd.DataFrame) -> list[Verdict]:
    """Article 1's conclusion that BatchNorm allows a larger learning rate "without rendering the model unstable",
    judged over the learning-rate sweep (``studies.lr_sweep``: the three models at depth 6) from each run's stability
    over its whole run: per seed, ViT's largest fall below its best accuracy so far minus the BatchNorm model's (a run
    that diverged falls to chance from its best), at every swept rate from article 1's largest up. Only runs as long as
    article 1's protocol (30 epochs of 600 steps) can show what it saw, a breakdown near epoch 15 and stability to
    the end; shorter ones give "not testable at this scale" with the steps they reached."""
    found = []
    largest = max(articles.ARTICLE1_EXPERIMENT1)
    needed = article_steps(ARTICLE1_EPOCHS)
    rates = sorted(lr for lr in sweep["lr"].unique() if lr >= largest or np.isclose(lr, largest))
    for model in (m for m in BN_MODELS if m in set(sweep["model"])):
        claim = _claim(f"article1/larger_lr/{model}")
        for lr in rates:
            at_lr = select(sweep, lr=float(lr))
            pair = at_lr[at_lr["model"].isin([model, "ViT"])]
            depth = int(pair["depth"].iloc[0])
            condition = f"lr {lr:g}: ViT d{depth} against {model} d{depth}"
            if reached_steps(pair) < needed:
                found.append(verdicts.untestable(claim.key, reached_steps(pair), needed, condition=condition))
                continue
            values = paired(
                per_seed(select(pair, model="ViT"), verdicts.largest_fall),
                per_seed(select(pair, model=model), verdicts.largest_fall),
            )
            found.append(judge_difference(claim, values, protocol_scale(pair, ARTICLE1_EPOCHS), condition))
    return found


def _vit_against_bn(claim: articles.Claim, at_lr: pd.DataFrame, statistic, scale: str) -> list[Verdict]:
    """``statistic`` of ViT − that of each BatchNorm model, per seed, in each configuration."""
    found = []
    for which in CONFIGURATIONS:
        rows = _configuration_rows(at_lr, which)
        vit = per_seed(select(at_lr, **rows["ViT"]), statistic)
        for model in BN_MODELS:
            values = paired(vit, per_seed(select(at_lr, **rows[model]), statistic))
            condition = f"{which}: ViT d{rows['ViT']['depth']} against {model} d{rows[model]['depth']}"
            found.append(judge_difference(claim, values, scale, condition))
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
            runs = select(table, model=model)
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
            gains = run_gains(table, dict(model=model), dict(model="ViT"), column)
            scale = against_article(hardware, articles.ARTICLE1_DEVICES_EXPERIMENT2)
            found.append(_gain_verdict(claim, gains, scale, f"{model} against ViT, each at its optimised settings"))
        elif kind == "converges":
            vit = per_seed(select(table, model="ViT"), verdicts.mean_accuracy)
            for bn in BN_MODELS:
                values = paired(vit, per_seed(select(table, model=bn), verdicts.mean_accuracy))
                pair = table[table["model"].isin(["ViT", bn])]
                found.append(
                    judge_difference(claim, values, _optimised_scale(pair, ARTICLE1_EPOCHS), f"ViT against {bn}")
                )
    return found


def _optimised_scale(table: pd.DataFrame, epochs: int) -> str:
    """How much of ``epochs`` epochs each model's optimised runs covered, in steps at that model's own batch size (the
    article's optimised batch sizes are in its Table 2, which its text does not give, so its step count is unknown)."""
    parts = [
        f"{model} {reached_steps(runs):,} of {article_steps(epochs, int(runs['batch_size'].iloc[0])):,}"
        for model, runs in table.groupby("model", sort=False)
    ]
    return (
        f"steps of the {epochs} epochs at each model's optimised batch size: {', '.join(parts)}; the article's batch "
        "sizes are not in its text"
    )


# -- chapter 06: the transfer set ------------------------------------------------------------------------------


def round_pairs(measured: pd.DataFrame, model: str, baseline: str = "ViT") -> list[tuple[float, float]]:
    """(model's seconds, baseline's seconds) of each round of interleaved passes, every seed's rounds in turn (a
    chapter's runs are timed in the same rounds: :func:`.studies.transfer_numbers.time_passes_interleaved`)."""
    rounds = lambda m: measured[measured["model"] == m].set_index("seed")["round_seconds"]
    mine, theirs = rounds(model), rounds(baseline)
    return [pair for seed in mine.index.intersection(theirs.index) for pair in zip(mine[seed], theirs[seed])]


#: What the transfer claim's condition says of the set it was judged on when EMNIST could not be had.
STAND_IN_SET = (
    "a stand-in for EMNIST digits: scikit-learn's 8x8 digits upsampled to 28x28 (EMNIST is unreachable offline)"
)


def transfer(measured: pd.DataFrame, hardware: str) -> list[Verdict]:
    """``measured``: one row per model and seed with ``round_seconds`` (each round's pass over the transfer set);
    the gain of each round, paired with ViT's pass of the same round, judged against the claim's level.

    Judged at equal depth only (chapter 06 trains the trio at one depth): the series' own transfer checkpoints are
    a six-block ViT against BatchNorm models that computed one block, a comparison the chapter does not train. The
    condition names that, the set the models were tested on and the number of seeds whose rounds were timed."""
    from ..data import EMNIST_SOURCE

    found = []
    source = measured["transfer_set"].iloc[0] if "transfer_set" in measured and len(measured) else EMNIST_SOURCE
    tested_on = "on EMNIST digits" if source == EMNIST_SOURCE else f"on {STAND_IN_SET}"
    for model in BN_MODELS:
        claim = _claim(f"article1/transfer/{model}")
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
        found.append(
            verdicts.above(
                claim.key,
                gains,
                claim.level,
                unit="%",
                scale=f"{hardware}; the article gives no hardware or number",
                condition=condition,
                each="round",
            )
        )
    return found


def table(found: list[Verdict], chapter_claims: list[articles.Claim] = ()) -> pd.DataFrame:
    """The verdicts as a chapter saves them: the claim's source, words, kind and measure beside the numbers
    (``chapter_claims``: the claims a chapter's folder derives from its settings, beside the articles' fixed ones)."""
    by_key = {c.key: c for c in [*articles.claims(), *chapter_claims]}
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


def save(result, found: list[Verdict], chapter_claims: list[articles.Claim] = ()):
    """Save a chapter's judged claims as ``NN_claims`` (numbers, not formatted text) and show them."""
    from ..publishing import figures

    kept = table(found, chapter_claims)
    judged = kept["outcome"].value_counts()
    tally = ", ".join(f"{judged[o]} {o}" for o in verdicts.OUTCOMES if o in judged)
    caption = (
        f"Every claim this chapter tests, judged by the book's one rule ('{verdicts.RULE_TITLE}' on the book's front "
        f"page): the measured value, its 95 % interval over seeds (over rounds for times measured in interleaved "
        f"rounds), the verdict ({tally})"
    )
    return figures.save_table(kept, f"{result.chapter[:2]}_claims", result, reproduces="new/claims", caption=caption)
