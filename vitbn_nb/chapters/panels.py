"""Panels, and the cells of the tables that say what a profile trains, drawn the same way in several chapters."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..publishing import figures

#: Line style, marker and darkening (0 = the model's colour) of the i-th learning rate, so rates tell apart in grey.
LR_STYLES = [("-", "o", 0.0), ("--", "s", 0.3), (":", "^", 0.55), ("-.", "D", 0.7)]


def lr_curves(ax, rows: pd.DataFrame, model: str, styles: dict, *, y: str = "test_acc", label=None) -> list[float]:
    """A mean band of ``model``'s ``rows`` per lr of ``styles``, ``label(i, lr)`` naming the i-th; the lrs drawn."""
    drawn = []
    for i, (lr, (linestyle, marker, dark)) in enumerate(styles.items(), 1):
        group = rows[np.isclose(rows["lr"], lr)]
        if group.empty:
            continue
        color = figures.darker(figures.color(model), dark)
        name = f"lr = {lr:g}" if label is None else label(i, lr)
        figures.mean_band(ax, group, x="epoch", y=y, label=name, color=color, linestyle=linestyle, marker=marker)
        drawn.append(lr)
    return drawn


def images(n: int | None, whole: int) -> str:
    """How many images of a split of ``whole`` a profile takes: '5,000 of 60,000', or '60,000 (all)' for ``None``."""
    return f"{whole:,} (all)" if n is None else f"{n:,} of {whole:,}"


def markdown(text: str):
    """``text`` as a notebook shows Markdown. The campaign plans the chapters on machines without IPython, so it is
    loaded only here, where a view is shown."""
    from IPython.display import Markdown  # optional: a training image may lack IPython

    return Markdown(text)
