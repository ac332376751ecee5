"""Chapter 07 (c): the hMLP stem against the linear patch embedding ((a)'s runs): accuracy, time, parameters, FLOPs."""

from __future__ import annotations

import torch

from ...models import build_model, count_parameters, forward_flops
from ...publishing import figures, results
from ...store import runs
from ...store.runs import RunConfig
from . import common as shared
from .settings import ThreeThingsSettings

STYLES = {"linear": "-", "hmlp": "--"}
MIXING = "stem mixing: largest change of another patch's token"


def _pairs(settings: ThreeThingsSettings) -> list[tuple[dict, RunConfig]]:
    depth, stems = settings.depths[0], {"linear": {}, "hmlp": {"stem": "hmlp"}}
    return [
        ({"variant": stem}, shared.config(settings, model, seed, depth=depth, **kwargs))
        for model in settings.models
        for seed in range(settings.seeds)
        for stem, kwargs in stems.items()
    ]


def plan(settings: ThreeThingsSettings) -> list[RunConfig]:
    """Linear stem ((a)'s sequential runs) and hMLP stem, each model and random seed, at the first depth."""
    return [c for _, c in _pairs(settings)]


def patch_mixing(model: torch.nn.Module, *, patch: int = 5, seed: int = 0) -> float:
    """Largest change of any *other* patch's token when one patch's pixels are redrawn (eval mode)."""
    model.eval()
    generator = torch.Generator().manual_seed(seed)
    x = torch.rand(2, 1, 28, 28, generator=generator)
    grid_w = model.grid_size[1]
    side = 28 // grid_w
    row, col = divmod(patch, grid_w)
    y = x.clone()
    rows, cols = slice(row * side, (row + 1) * side), slice(col * side, (col + 1) * side)
    y[:, :, rows, cols] = torch.rand(2, 1, side, side, generator=generator)
    with torch.no_grad():
        a, b = model.to_patch_embedding(x), model.to_patch_embedding(y)
    others = [i for i in range(a.shape[1]) if i != patch]
    return (a[:, others] - b[:, others]).abs().max().item()


def run(settings: ThreeThingsSettings, force: bool = False) -> shared.PartResult:
    """Train (or reuse) the hMLP runs (``force`` retrains only them, not (a)'s linear ones) and measure each stem."""
    pairs = _pairs(settings)
    own = [c for label, c in pairs if label["variant"] == "hmlp"]
    table, trained = shared.train_labelled(pairs, force=force, own=own, train=settings.train)
    seconds = shared.median_epoch(table)

    def measure(label, run_):
        # Sizes and FLOPs are the architecture's; only the stem's mixing needs the trained weights.
        model = build_model(run_.config.model, **run_.config.model_kwargs).eval()
        return {
            "parameters": count_parameters(model),
            "stem_parameters": count_parameters(model.to_patch_embedding),
            "flops": forward_flops(model),  # counted as chapter 02's table counts them
            "train_seconds": seconds.get(run_.run_id, float("nan")),
            "mixing": runs.measured(run_, MIXING, lambda: patch_mixing(run_.load_model("cpu")), None),
        }

    return shared.PartResult(settings, table, shared.per_run(pairs, trained, measure))


def stem_figure(result: shared.PartResult):
    """Accuracy per epoch, training time and the stem's parameters; saved as ``new/hmlp_stem``."""
    summary = shared.means(result.per_run, "train_seconds", "stem_parameters")
    summary["stem_k"] = summary["stem_parameters"] / 1000
    caption = (
        "The hMLP stem against the linear patch embedding, each with the model's own norm: test accuracy "
        "per epoch (solid linear, dashed hMLP), training time per epoch and the stem's parameters. "
        f"({figures.spread_label(result.table)}; {shared.times_note(result.table)})."
    )
    return shared.part_figure(
        result,
        "hmlp_stem",
        STYLES,
        [(result.table, f"accuracy (depth {result.settings.depths[0]})")],
        summary,
        [
            ("train_seconds", "train time per epoch (s)", "training time"),
            ("stem_k", "stem parameters (thousands)", "patch-embedding parameters"),
        ],
        "Linear patch embedding vs hMLP stem (7x7 patches: 7x7 conv, then two 1x1 stages)",
        caption,
        width=15,
    )


def stem_table(result: shared.PartResult):
    """Per model and stem: parameters, FLOPs, final accuracy, training time, patch mixing; saved."""
    rows = shared.table(
        result.per_run,
        ["model", "variant"],
        lambda key, group: {
            "model": key[0],
            "stem": key[1],
            "parameters": int(group["parameters"].iloc[0]),
            "stem parameters": int(group["stem_parameters"].iloc[0]),
            "MFLOPs per image": group["flops"].iloc[0] / 1e6,
            "final accuracy (%)": results.accuracy(group["final_acc"], 2),
            "train s/epoch (median epoch, mean over seeds)": group["train_seconds"].mean(),
            "max change of other patches' tokens": group["mixing"].max(),
        },
    )
    caption = (
        "Linear patch embedding vs hMLP stem (forward FLOPs per image counted as in chapter 2's table: "
        "matrix products, attention's included, and convolutions at 2 FLOPs per multiply-add, norms and softmax "
        f"not counted; patch mixing: eval mode, one patch's pixels redrawn; {shared.times_note(result.table)})"
    )
    return shared._save(rows, "hmlp_stem_table", result, caption)


def comparison(result: shared.PartResult):
    """Touvron et al.'s statements about the hMLP stem next to what this run measured."""
    per_run = result.per_run
    flops = per_run.groupby(["model", "variant"], sort=False)["flops"].first().unstack()
    mixing = per_run.groupby("variant", sort=False)["mixing"].max()
    extra = (f"{m} {100 * (flops.loc[m, 'hmlp'] / flops.loc[m, 'linear'] - 1):+.1f} % FLOPs" for m in flops.index)
    changed = ", ".join(f"{variant} {value:.1e}" for variant, value in mixing.items())
    changed = f"largest change of another patch's token when one patch changes: {changed}"
    return shared.said_and_measured(
        [
            ("accuracy, hMLP - linear (pp)", "hmlp_accuracy", shared.difference_text(per_run, "hmlp", "linear")),
            ("extra compute of hMLP", "hmlp_flops", ", ".join(extra)),
            ("patches never mixed", "hmlp_patches", changed),
        ]
    )
