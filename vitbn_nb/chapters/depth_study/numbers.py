"""Chapter 05's numbers and verdicts: final accuracies per depth, ViTBNFFN against ViT, and article 2's findings beside
them; computed from a run table (one row per run and epoch)."""

from __future__ import annotations

import pandas as pd

from ...judging.selection import final_accuracy, paired, select
from ...judging.verdicts import UNTESTABLE
from ...publishing import results
from . import article, judge
from .judge import MODELS
from .settings import DepthSettings


def difference(table: pd.DataFrame, lr: float, depth: int) -> pd.Series:
    """ViTBNFFN − ViT final accuracy per seed (points), paired by seed."""
    at = dict(lr=lr, depth=depth)
    return paired(final_accuracy(table, **at, model="ViTBNFFN"), final_accuracy(table, **at, model="ViT"))


def rule_verdicts(table: pd.DataFrame, settings: DepthSettings) -> dict[str, object]:
    """The one rule's verdict on each of article 2's depth claims, by claim key."""
    return {v.claim: v for v in judge.figures_8_to_10(table, settings)}


def verdicts(table: pd.DataFrame, settings: DepthSettings, lr: float, depths) -> pd.DataFrame:
    """Per depth at ``lr``: final accuracies, ViTBNFFN − ViT, the article's words, the book's rule's verdict."""
    rule, rows = rule_verdicts(table, settings), []
    for depth in depths:
        deltas = difference(table, lr, depth)
        cells = [c for (f, d), c in article.CELLS.items() if d == depth and abs(settings.figure_lr(f) - lr) < 1e-12]
        where, said = (cells[0].where, cells[0].shown) if cells else ("—", "not reported")
        judged = rule.get(f"article2/depth/lr{lr:g}/d{depth}")
        accuracy = {
            m: results.accuracy(final_accuracy(table, lr=lr, depth=depth, model=m)) for m in ("ViT", "ViTBNFFN")
        }
        rows.append(
            {"lr": f"{lr:g}", "depth": depth, "ViT (%)": accuracy["ViT"], "ViTBNFFN (%)": accuracy["ViTBNFFN"]}
            | _judged(judged, "ViTBNFFN − ViT (pt)", deltas, f"{said} ({where})")
        )
    return pd.DataFrame(rows)


def _judged(judged, column: str, values: pd.Series, said: str) -> dict:
    """The rule's estimate and interval where it judged; otherwise (no claim, or a scale that cannot test it) what this
    run measured, mean [95 % interval] over seeds, shown without a verdict; then the article's words and the verdict."""
    untested = judged is None or judged.outcome == UNTESTABLE
    return {
        column: results.spread(values) if untested else judged.shown,
        "article 2": said,
        "verdict": judged.text if judged is not None else "not a claim of article 2",
        "outcome": judged.outcome if judged is not None else "",
        "seeds": len(values),
    }


def statement(frame: pd.DataFrame, what: str) -> str:
    """How the rule judged the article's claims in ``frame`` (a table of :func:`verdicts` or :func:`lr_effect`)."""
    counts = frame.loc[frame["outcome"] != "", "outcome"].value_counts()
    return f"{what}, article 2's claims by the book's rule: " + ", ".join(f"{n} {o}" for o, n in counts.items()) + "."


def lr_effect(table: pd.DataFrame, settings: DepthSettings, depths=None) -> pd.DataFrame:
    """Fig 10's question per depth (``depths``: Fig 10's when None): how far each model's final accuracy falls when
    lr goes from Fig 8's rate to Fig 9's, and who is hit less."""
    spec = settings.figures()["fig10"]
    low, high = spec["lrs"]
    rule, rows = rule_verdicts(table, settings), []
    for depth in spec["depths"] if depths is None else depths:
        row, drops = {"depth": depth}, {}
        for model in MODELS:
            at = select(table, depth=depth, model=model)
            a, b = final_accuracy(at, lr=low), final_accuracy(at, lr=high)
            drops[model] = (a - b).dropna()
            row[f"{model} lr {low:g} (%)"] = results.accuracy(a)
            row[f"{model} lr {high:g} (%)"] = results.accuracy(b)
            row[f"{model} drop (pt)"] = results.spread(drops[model])
        # Positive = ViTBNFFN loses less accuracy than ViT; paired by seed.
        relief = (drops["ViT"] - drops["ViTBNFFN"]).dropna()
        said = article.FIG10_CELLS[depth].says if depth in article.FIG10_CELLS else "not reported"
        rows.append(row | _judged(rule.get(f"article2/fig10/d{depth}"), "ViT drop − ViTBNFFN drop (pt)", relief, said))
    return pd.DataFrame(rows)


def article_reported(settings: DepthSettings) -> pd.DataFrame:
    """Article 2's reported findings of the depth study, one row per figure and depth."""
    cells = sorted(article.CELLS.items(), key=lambda kv: (kv[1].where, settings.figure_lr(kv[0][0]), kv[0][1]))
    rows = [(c.where, f"{settings.figure_lr(figure):g}", depth, c.shown) for (figure, depth), c in cells]
    lrs = f"{settings.fig8_lr:g} → {settings.fig9_lr:g}"
    rows += [("Fig 10", lrs, depth, c.says) for depth, c in article.FIG10_CELLS.items()]
    return pd.DataFrame(rows, columns=["figure", "lr", "depth", "article 2 reports"])


def summary(table: pd.DataFrame) -> pd.DataFrame:
    """Final accuracy vs depth per lr, depth and model: mean [95 % interval], min, max over seeds."""
    grouped = results.final_epochs(table).groupby(["lr", "depth", "model"])["test_acc"]
    frame = {"final accuracy (%)": grouped.apply(results.spread), "mean": grouped.mean()}
    return pd.DataFrame(frame | {"min": grouped.min(), "max": grouped.max()}).reset_index()
