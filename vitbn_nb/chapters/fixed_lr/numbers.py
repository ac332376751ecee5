"""Chapter 03's numbers and verdicts: ratios, stability, the article's numbers beside this run's; computed from a run
table (one row per run and epoch), so that any table of such runs can be read the same way."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ...judging import verdicts
from ...judging.article1 import Reported
from ...judging.claims import BN_MODELS, verdict_texts
from ...judging.selection import require, shown_times
from ...models import AS_RUN_DEPTH, CONFIGURATIONS
from ...publishing import results
from .article import EXPERIMENT1, FIG6
from .judge import experiment1

MODELS = ("ViT", *BN_MODELS)

#: A run is called unstable at the first epoch whose accuracy falls this many points below its best so far.
UNSTABLE_DROP = 10.0

#: Every (model, depth) the chapter trains, in order: ViT d6 (both configurations), the BN models at d1, then at d6.
PAIRS = tuple(dict.fromkeys((model, depths[model]) for depths in CONFIGURATIONS.values() for model in MODELS))


def configuration(table: pd.DataFrame, which: str = "as run") -> pd.DataFrame:
    """The rows of one configuration: each model at its depth as article 1 ran it, or as it is written."""
    if which not in CONFIGURATIONS:
        raise ValueError(f"which={which!r} is not allowed; choose one of {', '.join(map(repr, CONFIGURATIONS))}")
    depths = CONFIGURATIONS[which]
    return table[table["depth"] == table["model"].map(depths)]


def unstable_epoch(run: pd.DataFrame, drop: float = UNSTABLE_DROP):
    """First epoch at which one run's accuracy is ``drop`` points below its best so far, or its loss is NaN/inf."""
    run = run.sort_values("epoch")
    best = run["test_acc"].cummax().shift(fill_value=-np.inf)
    bad = (run["test_acc"] < best - drop) | run["diverged"].astype(bool) | ~np.isfinite(run["train_loss"])
    return int(run.loc[bad, "epoch"].iloc[0]) if bad.any() else None


def stability(table: pd.DataFrame, model: str = "ViT") -> dict:
    """Per ``model``: how many runs diverged (NaN/inf loss) or turned unstable, and at which epochs."""
    rows = table[table["model"] == model]
    diverged, unstable = [], []
    for _, one in rows.groupby("run_id"):
        if (one["status"] == "diverged").any():
            diverged.append(int(one.loc[one["diverged"].astype(bool), "epoch"].min()))
        if (epoch := unstable_epoch(one)) is not None:
            unstable.append(epoch)
    return {"runs": rows["run_id"].nunique(), "diverged": sorted(diverged), "unstable": sorted(unstable)}


def _stability_text(info: dict, what: str) -> str:
    epochs = info[what]
    if not epochs:
        return f"no (0/{info['runs']})"
    return f"yes ({len(epochs)}/{info['runs']}, at epoch {', '.join(map(str, epochs))})"


def ratios(table: pd.DataFrame, which: str = "as run") -> pd.DataFrame:
    """r_t, r_v, g_t, g_v per lr and BN model of one configuration (mean [95 % interval] over seeds, paired by seed)."""
    return results.speed_ratios(configuration(table, which), baseline="ViT", by=("lr",))


def rule_verdicts(table: pd.DataFrame) -> dict[tuple[str, str], str]:
    """The one rule's verdict on each of article 1's Experiment 1 claims, keyed by (claim, configuration)."""
    return verdict_texts(experiment1(table), key=lambda verdict: (verdict.claim, verdict.condition.split(":")[0]))


def outcome_counts(table: pd.DataFrame, lr: float | None = None, kinds: tuple[str, ...] | None = None) -> str:
    """How the rule judged the claims (at ``lr``, or all; of ``kinds``, such as the gains ``r_t`` and ``r_v``, or
    every kind): '3 agrees, 2 not testable at this scale ...'."""
    found = [v for v in experiment1(table) if lr is None or v.claim.startswith(f"article1/lr{lr:g}/")]
    found = [v for v in found if kinds is None or v.claim.split("/")[2] in kinds]
    counts = pd.Series([v.outcome for v in found]).value_counts()
    return ", ".join(f"{counts[o]} {o}" for o in verdicts.OUTCOMES if o in counts) or "no claim judged"


def which_of(model: str, depth: int) -> str:
    return " and ".join(which for which, depths in CONFIGURATIONS.items() if depths.get(model) == depth)


def this_run(table: pd.DataFrame, lr: float) -> pd.DataFrame:
    """This run's numbers at ``lr`` per model and depth: final accuracy, time per epoch, ratios to ViT depth 6."""
    subset = require(table, lr=float(lr))
    accuracy = results.accuracy_summary(subset, by=("model", "depth")).set_index(["model", "depth"])
    speed = {which: ratios(subset, which).set_index("model") for which in CONFIGURATIONS}
    shown = shown_times(subset)  # every row's seconds from one machine
    rows = []
    for model, depth in PAIRS:
        mask = (subset["model"] == model) & (subset["depth"] == depth)
        one = subset[mask]
        if one.empty:
            continue
        ratio = speed["as run" if AS_RUN_DEPTH[model] == depth else "as written"]
        per_run = shown[mask].groupby("run_id")[["train_seconds", "test_seconds"]].mean()
        info = stability(one, model)
        rows.append(
            {
                "model": model,
                "depth": depth,
                "configuration": which_of(model, depth),
                "final accuracy (%)": accuracy.loc[(model, depth), "accuracy (%)"],
                "train s/epoch": results.spread(per_run["train_seconds"], 2),
                "test s/epoch": results.spread(per_run["test_seconds"], 3),
                **{r: ratio.loc[model, r] if model in ratio.index else "baseline" for r in ("r_t", "r_v")},
                "diverged (NaN loss)": _stability_text(info, "diverged"),
                f"unstable (acc {UNSTABLE_DROP:g} pt below best)": _stability_text(info, "unstable"),
                "timed beside other work (left out)": results.contention(one),
                "seeds": int(one["seed"].nunique()),
            }
        )
    return pd.DataFrame(rows)


def article_reported() -> pd.DataFrame:
    """Article 1's reported numbers for Experiment 1, one row per quantity."""
    rows = []
    for rate, reported in EXPERIMENT1.items():
        where, derived = f"article 1, {reported.figure} (lr {rate:g})", f"derived from article 1's r at lr {rate:g}"
        rows += [(where, m, "final accuracy (%)", f"≈ {v:g}") for m, v in reported.accuracy.items()]
        rows += [(where, m, "final accuracy (%)", f"> {v:g}") for m, v in reported.accuracy_above.items()]
        rows += [(where, m, key, f"{v:g}") for key in ("r_t", "r_v") for m, v in reported.ratios(key).items()]
        rows += [
            (f"{derived} (Table 1 is not in its text)", m, label, f"{results.gain(v):.0f} (= 1 − 1/{v:g})")
            for key, label in (("r_t", "g_t (%)"), ("r_v", "g_v (%)"))
            for m, v in reported.ratios(key).items()
        ]
        if reported.vit_unstable_epoch:
            rows.append((where, "ViT", "unstable from epoch", f"≈ {reported.vit_unstable_epoch}"))
        rows.append((where, "all", "finding", reported.note))
    rows.append(("article 1, Fig 6", "all", "finding", FIG6))
    return pd.DataFrame(rows, columns=["source", "model", "quantity", "reported"])


def comparison(table: pd.DataFrame, lr: float) -> pd.DataFrame:
    """The article's number beside ours in each configuration (mean [95 % interval] over seeds), and the verdict."""
    subset = require(table, lr=float(lr))
    article, rule, rows = article_at(lr), rule_verdicts(subset), []
    accuracy = results.accuracy_summary(subset, by=("model", "depth")).set_index(["model", "depth"])
    for which, depths in CONFIGURATIONS.items():
        speed = ratios(subset, which).set_index("model")
        for model in MODELS:
            key = (model, depths[model])
            if key not in accuracy.index or (which == "as written" and model == "ViT"):
                continue  # ViT depth 6 is one run set, listed once
            verdict = rule.get((f"article1/lr{lr:g}/accuracy/{model}", "as run"), "") if which == "as run" else ""
            reported = f"> {article.accuracy_above[model]:g}" if model in article.accuracy_above else "not quoted"
            reported = f"≈ {article.accuracy[model]:g}" if model in article.accuracy else reported
            row = (which_of(*key), f"{model} d{key[1]}", "final accuracy (%)", reported)
            rows.append((*row, accuracy.loc[key, "accuracy (%)"], verdict))
        for quantity in ("r_t", "r_v"):
            for model in (m for m in BN_MODELS if m in speed.index):
                reported = article.ratios(quantity).get(model)
                verdict = rule.get((f"article1/lr{lr:g}/{quantity}/{model}", which), "")
                quoted = "not quoted" if reported is None else f"{reported:g}"
                rows.append((which, f"{model} d{depths[model]}", quantity, quoted, speed.loc[model, quantity], verdict))
    if (subset["model"] == "ViT").any():
        info, expected = stability(subset, "ViT"), article.vit_unstable_epoch
        verdict = "; ".join(
            f"{text}, {which}" if which else text  # a verdict's text starts with its outcome
            for (claim, which), text in rule.items()
            if claim == f"article1/lr{lr:g}/breakdown"
        )
        both = ("as run and as written", "ViT d6")
        rows.append((*both, "diverged (NaN loss)", "—", _stability_text(info, "diverged"), ""))
        breakdown = f"breakdown (acc drops > {UNSTABLE_DROP:g} pt)"
        said = f"yes, ≈ epoch {expected}" if expected else "no"
        rows.append((*both, breakdown, said, _stability_text(info, "unstable"), verdict))
    return pd.DataFrame(rows, columns=["configuration", "model", "quantity", "article 1", "this run", "verdict"])


def article_at(lr: float) -> Reported:
    return next((reported for rate, reported in EXPERIMENT1.items() if np.isclose(rate, lr)), Reported())


def statement(table: pd.DataFrame, lr: float) -> str:
    """One line: how the rule judged article 1's claims at ``lr`` (each verdict is in the claims table)."""
    return f"lr {lr:g}, article 1's claims by the book's rule: {outcome_counts(require(table, lr=float(lr)), lr)}."


def lr_variation(table: pd.DataFrame) -> pd.DataFrame:
    """Per model: mean training time per epoch at each lr (of the epochs :func:`shown_times` keeps), and how much it
    varies across lrs (max/min − 1)."""
    rows, shown = [], shown_times(table)
    for model in MODELS:
        one = table[table["model"] == model]
        if one.empty:
            continue
        # each run's mean over its epochs, then the runs' mean: a run weighs the same whatever its epochs left out
        per_run = shown[shown["model"] == model].groupby(["lr", "run_id"])["train_seconds"].mean()
        per_lr = per_run.groupby("lr").mean().dropna()
        row = {"model": model, "depth": int(one["depth"].iloc[0])}
        for i, lr in enumerate(sorted(table["lr"].unique()), 1):
            row[f"i={i}: lr {lr:g} (s/epoch)"] = per_lr.get(lr, np.nan)
        row["variation across lrs (%)"] = round(100 * (per_lr.max() / per_lr.min() - 1), 1) if len(per_lr) else np.nan
        rows.append(row)
    return pd.DataFrame(rows)


def time_per_lr_statement(table: pd.DataFrame) -> str:
    variation = lr_variation(table).set_index("model")["variation across lrs (%)"]
    spread = ", ".join(
        f"{model} {value:.0f} %" if np.isfinite(value) else f"{model}: no time shown"
        for model, value in variation.items()
    )
    shown = shown_times(table).dropna(subset=["train_seconds"])  # the runs whose seconds are in the table
    counts = sorted(set(shown.groupby(["model", "lr"])["run_id"].nunique())) or [0]
    runs = " to ".join(str(n) for n in (counts[0], counts[-1])[: 1 + (counts[0] != counts[-1])])
    return (
        f"Training time per epoch varies across the lrs by {spread} (max/min − 1), {runs} run(s) (seeds) per model "
        f"and lr (the mean over runs of each run's mean epoch){results.machine_note(table)}: shown, not judged "
        "(article 1: ViT varies most)."
    )


def speedups(table: pd.DataFrame) -> pd.DataFrame:
    """Table 1 for both configurations side by side, with the article's ratios and gains and a verdict per ratio."""
    both = {which: ratios(table, which).set_index(["lr", "model"]) for which in CONFIGURATIONS}
    rule, rows = rule_verdicts(table), []
    for lr in sorted(table["lr"].unique()):
        article = article_at(lr)
        for model in BN_MODELS:
            held = [frame for frame in both.values() if (lr, model) in frame.index]
            if not held:
                continue
            row = {"lr": f"{lr:g}", "model": model}
            for quantity in ("r_t", "r_v", "g_t", "g_v"):
                reported = article.ratios(f"r_{quantity[2]}").get(model)
                unit = " (%)" if quantity.startswith("g") else ""
                for which, frame in both.items():
                    depth = "d1" if which == "as run" else f"d{CONFIGURATIONS[which][model]}"
                    held_here = (lr, model) in frame.index
                    row[f"{quantity}{unit} {which} ({depth})"] = frame.loc[(lr, model), quantity] if held_here else "—"
                shown = (lambda r: f"{r:g}") if quantity.startswith("r") else (lambda r: f"{results.gain(r):.0f}")
                row[f"{quantity}{unit} article 1"] = "—" if reported is None else shown(reported)
            for quantity in ("r_t", "r_v"):
                for which in both:
                    row[f"{quantity} {which}: verdict"] = rule.get((f"article1/lr{lr:g}/{quantity}/{model}", which), "")
            row["seeds"] = min(frame.loc[(lr, model), "seeds"] for frame in held)
            rows.append(row)
    return pd.DataFrame(rows)


def speedups_statement(table: pd.DataFrame) -> str:
    parts = []
    for which in CONFIGURATIONS:
        r_t = ratios(table, which)["r_t_mean"]
        if len(r_t):
            parts.append(f"{which}, the BN models train {r_t.min():.1f}-{r_t.max():.1f}× as fast as ViT d6")
    return (
        "Table 1: "
        + "; ".join(parts)
        + ". The gains judged by the book's rule against article 1's 'at least 60 %': "
        + f"{outcome_counts(table, kinds=('r_t', 'r_v'))}."
    )
