"""Chapter 02's sizes: every model configuration the book trains, its parameters and forward FLOPs per image, and
what they say about the book's comparisons."""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from ... import chapters
from ...models import AS_RUN_DEPTH, CARDS, MODELS, VIT_FAMILY, build_model, count_parameters, forward_flops
from ...publishing import figures

if TYPE_CHECKING:
    from .study import ModelsResult

#: What the size table and figure are computed from: no run, the models as the package builds them.
DEFINITIONS = "the model definitions in vitbn_nb.models"

DEPTHS = tuple(range(1, 8))
EQUAL_DEPTHS = (1, 6)
TRANSFER_DEPTH = 6


class Notes(list):
    """Lines of computed text; a notebook shows them as a bulleted list."""

    def _repr_markdown_(self) -> str:
        return "\n".join(f"- {line}" for line in self)


def configurations() -> pd.DataFrame:
    """Every model configuration the book trains, with the chapters that use it."""
    uses: dict[tuple[str, int | None], list[str]] = {}
    add = lambda model, depth, use: uses.setdefault((model, depth), []).append(use)
    for model, depth in AS_RUN_DEPTH.items():
        add(model, depth, "article 1 as run (03, 04)")
    for model in AS_RUN_DEPTH:  # the reference repository's transfer checkpoints are all depth 6
        add(model, TRANSFER_DEPTH, "EMNIST transfer (06)")
    for model, depth in itertools.product(("ViT", "ViTBNFFN"), DEPTHS):
        add(model, depth, "depth study (05)")
    # the paper protocol, through the registry: the models chapter 05 trains beside the article's two
    depth_study = chapters.settings("05_depth_study", "paper")
    for model in depth_study.extra_models or ():
        add(model, depth_study.extra_depth, "depth study (05)")
    for depth, model in itertools.product(EQUAL_DEPTHS, VIT_FAMILY):
        add(model, depth, "equal depth")
    for model in ("DNN_d3", "DNNBN_d3"):
        add(model, None, "BatchNorm intro (01)")
    add("CNN", None, "inference reference (06)")
    table = pd.DataFrame(
        [
            {"model": model, "depth": depth, "used in": "; ".join(dict.fromkeys(use))}
            for (model, depth), use in uses.items()
        ]
    )
    table = table.sort_values(["model", "depth"], key=lambda s: s.map(list(MODELS).index) if s.name == "model" else s)
    return table.reset_index(drop=True).astype({"depth": "Int64"})


def model_sizes(table: pd.DataFrame | None = None) -> pd.DataFrame:
    """``configurations()`` with parameter counts and forward MFLOPs per image of each built model."""
    table = configurations() if table is None else table.copy()
    built = [
        build_model(row.model, **({} if pd.isna(row.depth) else {"depth": int(row.depth)}))
        for row in table.itertuples()
    ]
    table["parameters"] = [count_parameters(model) for model in built]
    table["MFLOPs per image"] = np.array([forward_flops(model) for model in built]) / 1e6
    return table


def model_table(result: ModelsResult):
    """Save the size table (CSV + manifest, ``new/model_table``); returns it styled with its stamp."""
    shown = result.sizes.copy()
    shown["depth"] = shown["depth"].astype(object).where(shown["depth"].notna(), "–")
    caption = (
        "Parameters and forward FLOPs per image (batch of 1, eval mode; matmul/conv FLOPs, 2 per multiply-add; norms "
        "(LayerNorm, BatchNorm, DyT alike) and softmax not counted) of every configuration in the book"
    )
    about = dict(reproduces="new/model_table", caption=caption, reads=DEFINITIONS, precision=2)
    return figures.save_table(shown, "02_model_table", result, **about)


def model_size_figure(result: ModelsResult):
    """Parameters and FLOPs against depth per ViT family; the depth-free models as reference lines."""
    sizes = result.sizes
    figures.use_style()
    fig, axes = plt.subplots(1, 2, figsize=(12, 5.4))
    columns = (("parameters", 1e3, "parameters (thousands)"), ("MFLOPs per image", 1, "forward MFLOPs per image"))
    # The families nearly coincide (a norm adds at most 2 x 128 (+ 1 for DyT) parameters per block), so each card's
    # look draws them from wide and faint to narrow and solid, to keep every line visible.
    for ax, (column, scale, label) in zip(axes, columns):
        for model in VIT_FAMILY:
            rows = sizes[(sizes["model"] == model) & sizes["depth"].notna()].sort_values("depth")
            name = f"{model} (depths {', '.join(map(str, sorted(rows['depth'].astype(int))))})"
            ax.plot(
                rows["depth"].astype(int),
                rows[column] / scale,
                color=figures.color(model),
                label=name,
                **CARDS[model].look,
            )
        circle = dict(s=320, facecolors="none", edgecolors="black", linewidths=1.3, zorder=3)
        for model, depth in AS_RUN_DEPTH.items():
            point = sizes[(sizes["model"] == model) & (sizes["depth"] == depth)]
            name = "article 1 as run (ViT d6; ViTBNFFN, ViTBN d1)" if model == "ViT" else None
            ax.scatter(point["depth"].astype(int), point[column] / scale, label=name, **circle)
        for model, style in (("DNN_d3", (0, (1, 1))), ("DNNBN_d3", (0, (4, 2))), ("CNN", (0, (6, 2, 1, 2)))):
            row = sizes[sizes["model"] == model]
            if not row.empty:
                look = dict(color=figures.color(model), linestyle=style, linewidth=1.6, label=f"{model} (no encoder)")
                ax.axhline(row[column].iloc[0] / scale, **look)
        ax.set(xlabel="encoder depth (blocks)", ylabel=label, xticks=list(DEPTHS), ylim=(0, None))
    axes[0].set_title("Parameters")
    axes[1].set_title("Forward FLOPs per image (batch of 1)")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncol=3, fontsize=9)
    fig.suptitle("Model sizes of every configuration in the book")
    caption = (
        "Parameters and forward FLOPs per image vs encoder depth (ViT family); the DNNs and the CNN as horizontal "
        "lines; circled: article 1's trio as run (its BatchNorm models computed one block)."
    )
    about = dict(reproduces="new/model_sizes", caption=caption, reads=DEFINITIONS)
    return figures.save_figure(fig, "02_model_sizes", result, data=sizes, **about)


def size_summary(result: ModelsResult) -> Notes:
    """What the size table says about the comparisons of the book, computed from it."""
    sizes = result.sizes
    vit = (
        sizes[sizes["depth"].notna()]
        .astype({"depth": int})
        .set_index(["model", "depth"])[["parameters", "MFLOPs per image"]]
    )
    lines = []
    for model in VIT_FAMILY:
        rows = vit.loc[model].sort_index() if model in vit.index.get_level_values(0) else None
        if rows is not None and len(rows) >= 2:
            first, last = rows.index[0], rows.index[-1]
            per_block = (rows.loc[last] - rows.loc[first]) / (last - first)
            lines.append(
                f"{model}: each encoder block adds {per_block['parameters']:,.0f} parameters and "
                f"{per_block['MFLOPs per image']:.2f} MFLOPs per image; embedding, final norm and head hold "
                f"{rows.loc[first, 'parameters'] - per_block['parameters'] * first:,.0f} parameters."
            )
    published = {m: vit.loc[(m, d)] for m, d in AS_RUN_DEPTH.items() if (m, d) in vit.index}
    if "ViT" in published:
        for model in ("ViTBNFFN", "ViTBN"):
            if model in published:
                lines.append(
                    f"As article 1 ran them, ViT d{AS_RUN_DEPTH['ViT']} has "
                    f"{published['ViT']['parameters'] / published[model]['parameters']:.1f}× the parameters and "
                    f"{published['ViT']['MFLOPs per image'] / published[model]['MFLOPs per image']:.1f}× the "
                    f"FLOPs of {model} d{AS_RUN_DEPTH[model]}."
                )
    for depth in EQUAL_DEPTHS:
        present = [m for m in VIT_FAMILY if (m, depth) in vit.index]
        if len(present) > 1:
            parts = ", ".join(f"{m} {vit.loc[(m, depth), 'MFLOPs per image']:.2f}" for m in present)
            flops = np.array([vit.loc[(m, depth), "MFLOPs per image"] for m in present], dtype=float)
            spread = 100 * (flops.max() - flops.min()) / flops.min()
            lines.append(
                f"At equal depth {depth} the MFLOPs per image are {parts} (largest difference "
                f"{spread:.2f} %): the counted matmuls are the same; the norms, which differ, are not counted."
            )
    return Notes(lines)
