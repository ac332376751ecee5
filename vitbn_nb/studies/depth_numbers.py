"""Chapter 05's numbers and verdicts: final accuracies per depth, ViTBNFFN against ViT, and article 2's findings beside
them; computed from a run table (one row per run and epoch)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from .. import articles, results

MODELS = ("ViT", "ViTBNFFN")


#: The article's figures: which lr and depths each shows.
FIG8 = dict(name="article2_fig8", reproduces="article2/fig8", lr=0.003, depths=(4, 5, 6, 7), label="Fig 8")


FIG9 = dict(name="article2_fig9", reproduces="article2/fig9", lr=0.005, depths=(1, 2, 3, 4), label="Fig 9")


FIG10 = dict(name="article2_fig10", reproduces="article2/fig10", lrs=(0.003, 0.005), depths=(2, 3, 4), label="Fig 10")


#: Final accuracies closer than this (points) count as "comparable", the article's word; the article gives no threshold.
COMPARABLE_POINTS = 1.0


def _select(table: pd.DataFrame, lr: float, depth: int, model: str | None = None) -> pd.DataFrame:
    keep = np.isclose(table["lr"], lr) & (table["depth"] == depth)
    if model is not None:
        keep &= table["model"] == model
    return table[keep]


def final_accuracy(table: pd.DataFrame, lr: float, depth: int, model: str) -> pd.Series:
    """Final test accuracy per seed (a diverged run's is at the epoch it diverged)."""
    last = results.final_epochs(_select(table, lr, depth, model))
    return last.set_index("seed")["test_acc"].sort_index()


def difference(table: pd.DataFrame, lr: float, depth: int) -> pd.Series:
    """ViTBNFFN − ViT final accuracy per seed (points), paired by seed."""
    return (final_accuracy(table, lr, depth, "ViTBNFFN") - final_accuracy(table, lr, depth, "ViT")).dropna()


def call(deltas: pd.Series, comparable: float = COMPARABLE_POINTS) -> str:
    """Our reading of per-seed differences ViTBNFFN − ViT: 'within spread', 'comparable', or who is better.

    "Within spread" when the mean difference is no larger than its standard deviation over
    seeds; with one seed there is no spread, and only the ``comparable`` threshold applies.
    """
    deltas = pd.Series(deltas, dtype=float).dropna()
    if deltas.empty:
        return "not run"
    mean = deltas.mean()
    if len(deltas) > 1 and abs(mean) <= deltas.std(ddof=1):
        return "within spread"
    if abs(mean) < comparable:
        return "comparable"
    return "ViTBNFFN better" if mean > 0 else "ViT better"


def _agrees(ours: str, expected: str, deltas=None) -> str:
    if ours == "not run":
        return "—"
    if expected == "ViTBNFFN ahead":
        mean = pd.Series(deltas, dtype=float).mean() if deltas is not None else float("nan")
        same = ours == "ViTBNFFN better" or (ours == "comparable" and mean > 0)
    else:
        same = ours in ("within spread", "comparable") if expected == "comparable" else ours == expected
    return "yes" if same else "no"


def verdicts(table: pd.DataFrame, lr: float, depths) -> pd.DataFrame:
    """Per depth at ``lr``: final accuracies (mean ± sd), ViTBNFFN − ViT, our call, the article's, agreement."""
    rows = []
    for depth in depths:
        deltas = difference(table, lr, depth)
        where, said, expected = articles.ARTICLE2_DEPTH.get((lr, depth), ("—", "not reported", ""))
        ours = call(deltas)
        rows.append(
            {
                "lr": f"{lr:g}",
                "depth": depth,
                "ViT (%)": results.mean_sd(final_accuracy(table, lr, depth, "ViT")),
                "ViTBNFFN (%)": results.mean_sd(final_accuracy(table, lr, depth, "ViTBNFFN")),
                "ViTBNFFN − ViT (pt)": results.mean_sd(deltas),
                "this run": ours,
                "article 2": f"{said} ({where})" if expected else said,
                "agrees": _agrees(ours, expected, deltas) if expected else "—",
                "seeds": len(deltas),
            }
        )
    return pd.DataFrame(rows)


def _statement(frame: pd.DataFrame, what: str) -> str:
    judged = frame[frame["agrees"].isin(["yes", "no"])]
    if judged.empty:
        return f"{what}: nothing to compare under this profile."
    agree = judged.loc[judged["agrees"] == "yes", "depth"].tolist()
    differ = judged.loc[judged["agrees"] == "no", "depth"].tolist()
    seeds = int(judged["seeds"].min())
    spread = "one seed, so no spread" if seeds < 2 else f"{seeds} seeds; 'within spread' = |mean| ≤ sd"
    return (
        f"{what}: agrees with article 2 at {len(agree)}/{len(judged)} depths"
        f"{' (d = ' + ', '.join(map(str, agree)) + ')' if agree else ''}"
        f"{'; differs at d = ' + ', '.join(map(str, differ)) if differ else ''} ({spread})."
    )


def lr_effect(table: pd.DataFrame, depths=FIG10["depths"], lrs=FIG10["lrs"]) -> pd.DataFrame:
    """Fig 10's question per depth: how far each model's final accuracy falls when lr goes up, and who is hit less."""
    low, high = lrs
    rows = []
    for depth in depths:
        row = {"depth": depth}
        drops = {}
        for model in MODELS:
            a, b = final_accuracy(table, low, depth, model), final_accuracy(table, high, depth, model)
            drops[model] = (a - b).dropna()
            row[f"{model} lr {low:g} (%)"] = results.mean_sd(a)
            row[f"{model} lr {high:g} (%)"] = results.mean_sd(b)
            row[f"{model} drop (pt)"] = results.mean_sd(drops[model])
        # Positive = ViTBNFFN loses less accuracy than ViT; paired by seed.
        relief = (drops["ViT"] - drops["ViTBNFFN"]).dropna()
        said, expected = articles.ARTICLE2_FIG10.get(depth, ("not reported", ""))
        if relief.empty:
            ours = "not run"
        elif len(relief) > 1 and abs(relief.mean()) <= relief.std(ddof=1):
            ours = "similar (within spread)"
        elif abs(relief.mean()) < COMPARABLE_POINTS:
            ours = "similar"
        else:
            ours = "ViTBNFFN milder" if relief.mean() > 0 else "ViT milder"
        row.update(
            {
                "this run": ours,
                "article 2": said,
                "seeds": len(relief),
                "agrees": "—"
                if ours == "not run" or not expected
                else ("yes" if ours.split(" (")[0] == expected else "no"),
            }
        )
        rows.append(row)
    return pd.DataFrame(rows)


def article_reported() -> pd.DataFrame:
    """Article 2's reported findings of the depth study, one row per figure and depth."""
    rows = [
        {"figure": where, "lr": f"{lr:g}", "depth": depth, "article 2 reports": said}
        for (lr, depth), (where, said, _) in sorted(articles.ARTICLE2_DEPTH.items(), key=lambda kv: (kv[1][0], kv[0]))
    ]
    rows += [
        {"figure": "Fig 10", "lr": "0.003 → 0.005", "depth": depth, "article 2 reports": said}
        for depth, (said, _) in articles.ARTICLE2_FIG10.items()
    ]
    return pd.DataFrame(rows)


def summary(table: pd.DataFrame) -> pd.DataFrame:
    """Final accuracy vs depth per model and lr: mean ± sd, min, max over seeds."""
    last = results.final_epochs(table)
    grouped = last.groupby(["lr", "depth", "model"])["test_acc"]
    frame = pd.DataFrame(
        {
            "final accuracy (%)": grouped.apply(results.mean_sd),
            "mean": grouped.mean(),
            "min": grouped.min(),
            "max": grouped.max(),
            "seeds": grouped.size(),
            "diverged": last.groupby(["lr", "depth", "model"])["status"].apply(lambda s: int((s == "diverged").sum())),
        }
    ).reset_index()
    return frame.sort_values(["lr", "model", "depth"]).reset_index(drop=True)
