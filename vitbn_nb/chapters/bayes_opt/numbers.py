"""Chapter 04's numbers: the best trials, Table 2's and Table 3's rows and article 1's numbers beside this run's;
computed from the trials (one row per trial), the final runs (one row per run and epoch) and the timing rounds (one
row per model and round)."""

from __future__ import annotations

import pandas as pd

from ... import hpo
from ...judging.claims import BN_MODELS, verdict_texts
from ...models import CONFIGURATIONS
from ...publishing import results
from . import rounds
from .article import EXPERIMENT2
from .judge import experiment2

MODELS = hpo.MODELS


def in_configuration(table: pd.DataFrame, which: str, seeds: int | None = None) -> pd.DataFrame:
    """The retrains of configuration ``which``: its models at its depths, seeds below ``seeds`` (None: all held)."""
    if table.empty:
        return table
    keep = table["model"].map(CONFIGURATIONS[which]) == table["depth"]
    if seeds is not None:
        keep &= table["seed"] < seeds
    return table[keep]


def best_trials(trials: pd.DataFrame) -> pd.DataFrame:
    """Each search's best trial: one row per model, depth and search seed."""
    keys = [k for k in ("model", "depth", "search") if k in trials]
    best = [hpo.best_trial(group) for _, group in trials.groupby(keys, sort=False)]
    return pd.DataFrame(best).reset_index(drop=True)


def model_label(model: str, depth) -> str:
    return f"{model} (depth {int(depth)})"


def best_settings(trials: pd.DataFrame, table: pd.DataFrame) -> pd.DataFrame:
    """Best lr, batch size and accuracy per search (model, depth, search seed): the search's best trial, and for a
    model's first search the long training's result."""
    final = results.accuracy_summary(table, by=("model", "depth")).set_index(["model", "depth"])
    epochs = int(table["epoch"].max()) if len(table) else 0
    rows = []
    for _, best in best_trials(trials).iterrows():
        model, depth, search = best["model"], int(best["depth"]), int(best.get("search", 0))
        key, retrained = (model, depth), search == 0 and (model, depth) in final.index
        rows.append(
            {
                "model": model,
                "depth": depth,
                "search seed": search,
                "lr range": "[{:g}, {:g}]".format(*hpo.SEARCH_SPACE[model]["lr"]),
                "best lr": f"{best['lr']:.3g}",
                "best batch size": int(best["batch_size"]),
                "best trial": f"{int(best['trial'])} of {int(_of_search(trials, best).sum())} ({best['generator']})",
                f"trial accuracy after {int(best['trial_epochs'])} ep. (%)": round(float(best["accuracy"]), 2),
                f"accuracy after {epochs} ep. (%)": final.loc[key, "accuracy (%)"] if retrained else "n/a",
                "article 1 after 30 ep. (%)": f"{EXPERIMENT2.accuracy[model]:g}",
                "seeds": int(final.loc[key, "seeds"]) if retrained else 0,
            }
        )
    return pd.DataFrame(rows)


def _of_search(trials: pd.DataFrame, best: pd.Series) -> pd.Series:
    same = (trials["model"] == best["model"]) & (trials["depth"] == best["depth"])
    return same & (trials["search"] == best["search"]) if "search" in trials else same


def speedups(table: pd.DataFrame, timed: pd.DataFrame, which: str = "as run") -> pd.DataFrame:
    """r_t, r_v, g_t, g_v of the optimised BN models against the optimised ViT in configuration ``which``, over the
    timing rounds ``timed`` (:func:`.rounds.frame`), with the article's beside them; ``table``: the configuration's
    retrains, whose verdicts come along."""
    rule = verdict_texts(experiment2(table, which, timed))
    depths = CONFIGURATIONS[which]
    rows = []
    for model in BN_MODELS:
        found = rounds.ratios(timed, (model, depths[model]), ("ViT", depths["ViT"]))
        reported_t, reported_v = EXPERIMENT2.r_t.get(model), EXPERIMENT2.r_v.get(model)
        rows.append(
            {
                "configuration": which,
                "model": f"{model} d{depths[model]}",
                "r_t": found["r_t"],
                "r_t (article)": f"{reported_t:g}",
                "r_v": found["r_v"],
                "r_v (article)": f"{reported_v:g}",
                "g_t (%)": found["g_t"],
                "g_t (article, %)": f"{results.gain(reported_t):.0f} (= 1 − 1/{reported_t:g})",
                "g_v (%)": found["g_v"],
                "g_v (article, %)": f"{results.gain(reported_v):.0f} (= 1 − 1/{reported_v:g})",
                "r_t verdict": rule.get(f"article1/optimised/r_t/{model}", ""),
                "r_v verdict": rule.get(f"article1/optimised/r_v/{model}", ""),
                "rounds": found["rounds"],
            }
        )
    return pd.DataFrame(rows)


def comparison(trials: pd.DataFrame, table: pd.DataFrame, timed: pd.DataFrame, which: str = "as run") -> pd.DataFrame:
    """The article's statements about Experiment 2 beside this run's numbers in configuration ``which`` (``table``:
    its retrains; ``timed``: the timing rounds)."""
    final = results.accuracy_summary(table, by=("model",)).set_index("model")
    depths = CONFIGURATIONS[which]
    speed = {model: rounds.ratios(timed, (model, depths[model]), ("ViT", depths["ViT"])) for model in BN_MODELS}
    epochs = int(table["epoch"].max())
    judged = experiment2(table, which, timed)
    rule = verdict_texts(judged)
    rows = []
    add = lambda model, quantity, said, found, claim="": rows.append(
        {"configuration": which, "model": model, "quantity": quantity, "article 1": said, "this run": found}
        | {"verdict": rule.get(f"article1/optimised/{claim}", "") if claim else ""}
    )
    for model in (m for m in MODELS if m in final.index):
        said, found = f"{EXPERIMENT2.accuracy[model]:g}", final.loc[model, "accuracy (%)"]
        add(model, f"final accuracy (%) (article: 30 epochs; here {epochs})", said, found, f"accuracy/{model}")
    for key in ("r_t", "r_v"):
        for model in BN_MODELS:
            add(model, key, f"{EXPERIMENT2.ratios(key)[model]:g}", speed[model][key], f"{key}/{model}")
    curves = "; ".join(
        f"{v.condition or 'ViT against the BatchNorm models'}: {v.shown}"
        for v in judged
        if v.claim == "article1/optimised/converges"
    )
    reached = ", ".join(f"{m} {e}" for m, e in _epochs_to_reach(table).items()) or "none"
    # the verdict judges the whole curve (its mean accuracy over the epochs), which this row shows first
    quantity = "ViT − BatchNorm model mean test accuracy over the epochs (pt); first to reach 97 % (epoch)"
    found = f"{curves or 'n/a'}; first to reach 97 %: {reached}"
    add("all", quantity, "ViT converges in fewer epochs", found, "converges")
    first = trials[trials["search"] == 0] if "search" in trials else trials
    for model in (m for m in MODELS if m in set(trials["model"])):
        one = first[(first["model"] == model) & (first["depth"] == CONFIGURATIONS[which][model])]
        if one.empty:
            continue
        best = hpo.best_trial(one)
        add(model, "best lr / batch size (Table 2)", "not in the text", f"{best['lr']:.3g} / {int(best['batch_size'])}")
    return pd.DataFrame(rows)


def _epochs_to_reach(table: pd.DataFrame, level: float = 97.0) -> dict:
    """First epoch at which each model's mean test accuracy over seeds reaches ``level`` (if ever)."""
    found = {}
    for model in MODELS:
        curve = table[table["model"] == model].groupby("epoch")["test_acc"].mean()
        hit = curve[curve >= level]
        if len(hit):
            found[model] = int(hit.index.min())
    return found
