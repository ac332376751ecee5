"""Panels drawn the same way in several chapters."""

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
