"""The book's findings in one picture: every judged claim's effect with its interval, by article and unit, marked by
its verdict (a forest plot), drawn from the chapters' ``NN_claims.csv`` after a render."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.lines import Line2D

from ..profiles import PROFILE_SIZE
from . import figures

#: The output's name in ``figures/`` (and the README's lead figure).
NAME = "new_findings_forest"
#: Each verdict's colour: what holds green, what fails red, what the rule could not decide grey or orange.
OUTCOME_COLORS = {
    "agrees": "#2E7D32",
    "equivalent": "#1565C0",
    "disagrees": "#C62828",
    "not equivalent": "#AD1457",
    "within noise": "#9E9E9E",
    "undecided": "#EF6C00",
}
#: One panel per kind of number: accuracy differences, gains and ratios in %, accuracies reached.
UNITS = {"pt": "accuracy difference (percentage points)", "%": "gain or difference (%)", "level": "test accuracy (%)"}


@dataclass(frozen=True)
class BookClaims:
    """What :func:`vitbn_nb.publishing.figures.save_figure` needs of a result: the claims of every chapter."""

    run_ids: list[str] = field(default_factory=list)
    profile: str = ""
    chapter: str = "book"


def saved_claims(folder, fallback=None) -> pd.DataFrame:
    """Every chapter's saved claims (``NN_claims.csv``; its stem, ``03_claims``, in ``chapter``), in chapter order;
    a chapter that ``folder`` lacks is read from ``fallback`` where given."""
    files = {path.name: path for path in sorted(Path(fallback).glob("[0-9][0-9]_claims.csv"))} if fallback else {}
    files |= {path.name: path for path in sorted(Path(folder).glob("[0-9][0-9]_claims.csv"))}
    frames = [pd.read_csv(files[name], keep_default_na=False).assign(chapter=name[:-4]) for name in sorted(files)]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def judged(folder: Path, others: Path | None = None) -> pd.DataFrame:
    """Every claim of ``folder``'s ``NN_claims.csv`` (a chapter missing there read from ``others``) whose verdict
    rests on an effect and an interval."""
    claims = saved_claims(folder, others)
    if claims.empty:
        return claims
    claims["chapter"] = claims["chapter"].str[:2]
    numbers = claims[["estimate", "low", "high"]].apply(pd.to_numeric, errors="coerce")
    keep = numbers.notna().all(axis=1) & claims["outcome"].isin(list(OUTCOME_COLORS))
    claims[["estimate", "low", "high"]] = numbers
    claims = claims[keep].copy()
    claims["article"] = claims["claim"].str.split("/").str[0].str.replace("article", "article ")
    claims["panel"] = claims["unit"].where(claims["kind"] != "absolute", "level")
    return claims.reset_index(drop=True)


def _label(row) -> str:
    """The claim's name without its article, and the first words of its condition ("as run", "as written")."""
    name = row.claim.split("/", 1)[-1]
    tag = str(row.condition).split(":")[0].split(";")[0].split(",")[0].strip()
    return f"{name} ({tag[:32]})" if tag else name


def draw(claims: pd.DataFrame):
    """The forest plot of ``claims`` (from :func:`judged`): one panel per article and unit, a row per claim."""
    figures.use_style()
    panels = [
        (a, u)
        for a in sorted(claims["article"].unique())
        for u in UNITS
        if ((claims["article"] == a) & (claims["panel"] == u)).any()
    ]
    sizes = [int(((claims["article"] == a) & (claims["panel"] == u)).sum()) for a, u in panels]
    fig, axes = plt.subplots(
        len(panels), 1, figsize=(9, 0.17 * sum(sizes) + 1.1 * len(panels) + 0.8), height_ratios=sizes, squeeze=False
    )
    for ax, (article, unit) in zip(axes[:, 0], panels):
        rows = claims[(claims["article"] == article) & (claims["panel"] == unit)]
        y = np.arange(len(rows))[::-1]
        colors = [OUTCOME_COLORS[o] for o in rows["outcome"]]
        ax.hlines(y, rows["low"], rows["high"], colors=colors, linewidth=1.6)
        filled = (rows["evidence"] == "confirmatory").to_numpy()
        ax.scatter(rows["estimate"][filled], y[filled], c=np.array(colors)[filled], s=22, zorder=3)
        hollow = dict(facecolors="white", edgecolors=np.array(colors)[~filled], s=22, zorder=3, linewidths=1.2)
        ax.scatter(rows["estimate"][~filled], y[~filled], **hollow)
        if unit != "level":  # a difference or a gain: zero is no effect
            ax.axvline(0, color="0.3", linewidth=0.8)
        ax.set_yticks(y, [_label(r) for r in rows.itertuples()], fontsize=6)
        ax.set_ylim(-0.7, len(rows) - 0.3)
        ax.set_title(f"{article.capitalize()}: {UNITS[unit]}", fontsize=9, loc="left")
        ax.tick_params(axis="x", labelsize=7)
    handles = [Line2D([], [], color=c, marker="o", linewidth=1.6, label=o) for o, c in OUTCOME_COLORS.items()]
    handles += [
        Line2D([], [], color="0.3", marker="o", linestyle="", label="confirmatory (filled)"),
        Line2D([], [], color="0.3", marker="o", markerfacecolor="white", linestyle="", label="exploratory (hollow)"),
    ]
    fig.legend(handles=handles, loc="outside lower center", ncol=4, fontsize=7)
    fig.suptitle("Every judged claim: its effect and the interval its verdict used", fontsize=11)
    return fig


def save(folder: Path, published: Path | None = None):
    """Draw the forest plot of ``folder``'s claims (``published``'s for a chapter this render did not run) and save it
    where a chapter saves its outputs; None where no claim carries an interval."""
    claims = judged(folder, published)
    if claims.empty:
        return None
    manifest = figures.read_manifest()["outputs"]
    read = [manifest.get(f"{c}_claims", {}) for c in sorted(set(claims["chapter"]))]
    run_ids = sorted({run for entry in read for run in entry.get("run_ids", [])})
    # the smallest scale its claims were judged at: the forest is no larger than its smallest chapter
    profile = min((e["profile"] for e in read if e.get("profile") in PROFILE_SIZE), key=PROFILE_SIZE.get, default="")
    # the profile each chapter rendered at, beside the smallest: a reader of the caption sees which chapters it names
    # (a chapter's rows say the scale of the runs each read, which a smaller profile may take from `paper`)
    profiles = {}
    for chapter, entry in zip(sorted(set(claims["chapter"])), read):
        if entry.get("profile"):
            profiles.setdefault(entry["profile"], []).append(chapter)
    caption = (
        f"The {len(claims)} claims judged with an interval: the dot its effect, the line its interval "
        "(at its test's level), the colour its verdict, filled where confirmatory, hollow where exploratory"
    )
    shown = [
        "chapter",
        "claim",
        "source",
        "condition",
        "unit",
        "estimate",
        "low",
        "high",
        "level",
        "outcome",
        "evidence",
    ]
    return figures.save_figure(
        draw(claims),
        NAME,
        BookClaims(run_ids, profile or "cpu"),
        reproduces="new/findings",
        caption=caption,
        reads="the chapters' judged claims (figures/NN_claims.csv)",
        extra={"profiles": profiles},
        data=claims[[c for c in shown if c in claims]],
    )
