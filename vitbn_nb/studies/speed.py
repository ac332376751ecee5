"""Chapter 08: where the speed comes from -- depth, data pipeline and normalisation, measured.

Article 1 reports that ViTBNFFN and ViTBN train 2.5-4.3x and infer 2.5-2.7x faster than ViT
(gains of 60-77 %), but it compares a depth-6 ViT with depth-1 BatchNorm models and times
whole epochs through a per-sample PIL pipeline. This chapter measures, on the machine it
runs on, the three things mixed in that number: depth (ViT at depth 6 against ViT at depth
1), normalisation at equal depth (each BatchNorm model against ViT of its own depth), and
the data pipeline (the seeds' against the book's engine), plus what BatchNorm can truly buy
at inference (folding it into the neighbouring Linear layers). Every number comes from
:func:`vitbn_nb.bench.measure`, the function behind ``python -m vitbn_nb bench``, called
afresh by :func:`measure`; nothing is read back from an earlier bench file.
"""
from __future__ import annotations

import dataclasses
import math

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from IPython.display import Markdown
from matplotlib.patches import Patch

from .. import bench, figures
from .bayes_opt import SEED_REPORTED as OPTIMISED_REPORTED
from .fixed_lr import SEED_REPORTED as FIXED_LR_REPORTED

CHAPTER = "08_where_the_speed_comes_from"
MODELS = ("ViT", "ViTBNFFN", "ViTBN")
BN_MODELS = ("ViTBNFFN", "ViTBN")
PIPELINE_LABELS = {"engine": "book's engine", "reference": "seeds' pipeline"}
SETTING_KEYS = tuple(f.name for f in dataclasses.fields(bench.BenchSettings) if f.name not in ("models", "lr", "seed"))
REQUIRED = ("profile", "depths", "batch_size", "test_batch_size", "steps", "warmup", "repeats")

#: Article 1's ratios r = T(ViT) / T(model) of mean time per epoch, ViT depth 6 against the
#: BatchNorm models at depth 1: Table 1 (lr 0.0005, 0.005, 0.01) and Table 3 (optimised),
#: as chapters 3 and 4 quote them.
REPORTED = {
    kind: {model: (*(quoted[key][model] for quoted in FIXED_LR_REPORTED.values()), OPTIMISED_REPORTED[key][model])
           for model in ("ViTBNFFN", "ViTBN")}
    for kind, key in (("training", "r_t"), ("inference", "r_v"))
}
REPORTED_SETUP = ("article 1, Tables 1 and 3: NVIDIA L4 (Colab), MNIST without augmentation, a DataLoader "
                  "over ToTensor, time per epoch, ViT depth 6 against BatchNorm models of depth 1")


# ---------------------------------------------------------------------------------------------
# measuring
# ---------------------------------------------------------------------------------------------
def _check(settings: dict) -> None:
    missing = [key for key in REQUIRED if key not in settings]
    if missing:
        raise ValueError(f"settings for {CHAPTER} lack {missing}; build them with profiles.settings('{CHAPTER}', profile)")
    depths = settings["depths"]
    if not isinstance(depths, (list, tuple)) or not {1, 6} <= set(depths):
        raise ValueError(f"settings['depths']={depths!r} is not allowed; the accounting needs depths 1 and 6 "
                         "(the seeds' depths), e.g. [1, 6]")


def bench_settings(settings: dict) -> bench.BenchSettings:
    """The chapter's profile settings as the bench's (all three models, the profile's sizes)."""
    _check(settings)
    return bench.BenchSettings(models=MODELS, **{k: settings[k] for k in SETTING_KEYS if k in settings})


def measure(settings: dict, device=None) -> dict:
    """Every measurement of the chapter, fresh: ``bench.measure`` with the profile's sizes."""
    results = bench.measure(bench_settings(settings), device, log=None)
    results["profile"] = settings["profile"]
    return results


def overview(results: dict) -> pd.DataFrame:
    """Where and how the numbers were taken."""
    peak = results["matmul_peak"]
    s = results["settings"]
    sizes = lambda n: "all" if n is None else f"{n:,}"  # noqa: E731
    rows = [
        ("hardware", f"{results['hardware_label']} ({results['device']})"),
        ("torch, threads", f"{results['versions'].get('torch')}, {peak['threads']} threads"),
        ("fp32 matmul peak", f"{peak['flops_per_s'] / 1e9:,.1f} GFLOP/s ({peak['size']}³, median of {peak['repeats']})"),
        ("data", f"MNIST without augmentation (article 1's data): {sizes(s['train_size'])} training and {sizes(s['test_size'])} test images"),
        ("training", f"batch {s['batch_size']}, {s['warmup']} warm-up steps, then {s['repeats']} repeats of "
                     f"{s['steps']} steps (median)"),
        ("inference", f"test batch {s['test_batch_size']}, {s['eval_warmup']} warm-up batch(es), then "
                      f"{s['repeats']} repeats of {s['eval_batches']} batch(es) (median)"),
        ("memory", results["memory_measure"]),
        ("timing", results["timing"]),
    ]
    return pd.DataFrame(rows, columns=["", "this run"])


def hardware_note(results: dict) -> Markdown:
    """A sentence for the chapter: which machine, and what that means for the numbers."""
    where = f"These numbers were measured on **{results['hardware_label']}** ({results['date'][:10]})."
    if results["device"] == "cpu":
        return Markdown(where + " There is **no GPU** on this machine, so every time below is a CPU time; the seeds "
                "timed an NVIDIA L4. On a CPU the model's arithmetic dominates and small per-operation "
                "overheads hardly show; on a GPU the arithmetic of these small models shrinks to milliseconds, "
                "so the data pipeline and the many small kernels should weigh far more. Run this chapter "
                "under the `paper` profile on a GPU (the default there) and the same code fills every figure "
                "and table with GPU numbers.")
    return Markdown(where + " This is a GPU run, the kind of device the seeds timed (theirs an NVIDIA L4, on "
                    "MNIST without augmentation, whole epochs), so the ratios below are the closest this book "
                    "comes to theirs.")


# ---------------------------------------------------------------------------------------------
# lookups
# ---------------------------------------------------------------------------------------------
def _rows(results: dict, kind: str, *, norms_removed: bool = False, **where) -> list[dict]:
    if kind == "training":
        rows = results["training"]
    else:
        where.setdefault("folded", False)
        rows = [r for r in results["inference"] if bool(r.get("norms_removed")) == norms_removed]
    return [r for r in rows if all(r.get(k) == v for k, v in where.items())]


def _one(results: dict, kind: str, **where) -> dict:
    found = _rows(results, kind, **where)
    if not found:
        raise ValueError(f"the measurements hold no {kind} row for {where}; measure() with depths 1 and 6 "
                         "and all three models")
    return found[0]


def seconds_per_image(results: dict, kind: str, model: str, depth: int, pipeline: str = "engine") -> float:
    return 1 / _one(results, kind, model=model, depth=depth, pipeline=pipeline)["images_per_s"]


def _name(model: str, depth: int) -> str:
    return f"{model} d{depth}"


def _ratio_text(value: float) -> str:
    return f"{value:.2f}" if math.isfinite(value) else "n/a"


def _pct(value: float) -> str:
    return f"{100 * value:.0f} %" if math.isfinite(value) else "n/a"


def _share(part: float, whole: float) -> float:
    """The share of ln(whole) that ln(part) accounts for (ratios multiply, so their logs add)."""
    return math.log(part) / math.log(whole) if whole > 0 and part > 0 and abs(math.log(whole)) > 1e-9 else float("nan")


# ---------------------------------------------------------------------------------------------
# equal depth
# ---------------------------------------------------------------------------------------------
def equal_depth_table(results: dict) -> pd.DataFrame:
    """Per model and depth: images/s through both pipelines, and the ratio to ViT of the same depth."""
    rows = []
    for depth in results["settings"]["depths"]:
        for model in MODELS:
            row = {"model": model, "depth": depth,
                   "article 1 as run": "yes" if _one(results, "training", model=model, depth=depth,
                                                 pipeline="engine")["as_run"] else ""}
            for kind in ("training", "inference"):
                for pipeline in ("engine", "reference"):
                    ips = _one(results, kind, model=model, depth=depth, pipeline=pipeline)["images_per_s"]
                    row[f"{kind}, {PIPELINE_LABELS[pipeline]} (images/s)"] = round(ips, 1)
                short = "r_t" if kind == "training" else "r_v"
                row[f"{short} = T(ViT) / T(model), same depth, engine"] = round(
                    seconds_per_image(results, kind, "ViT", depth) / seconds_per_image(results, kind, model, depth), 2)
            rows.append(row)
    return pd.DataFrame(rows)


def _bars(ax, groups, series, *, ylabel: str, title: str):
    """Grouped bars: ``series`` = [(label, color, hatch, alpha, values per group, marks per group)]."""
    width = 0.8 / len(series)
    for i, (label, color, hatch, alpha, values, marks) in enumerate(series):
        x = np.arange(len(groups)) + (i - (len(series) - 1) / 2) * width
        bars = ax.bar(x, values, width, label=label, color=color, alpha=alpha, hatch=hatch,
                      edgecolor=color if hatch else "white", linewidth=0.8)
        for bar, mark in zip(bars, marks):
            if mark:
                ax.annotate(mark, (bar.get_x() + bar.get_width() / 2, bar.get_height()), ha="center", va="bottom",
                            fontsize=11 if mark == "*" else 7, xytext=(0, 1), textcoords="offset points")
    ax.set_xticks(np.arange(len(groups)), groups)
    ax.grid(axis="x", visible=False)
    ax.set(ylabel=ylabel, title=title)
    ax.set_ylim(bottom=0)
    ax.margins(y=0.12)


def equal_depth_figure(results: dict, settings: dict):
    """Time per 1,000 images, training and inference, each model at depth 1 and 6, through both pipelines."""
    figures.use_style()
    depths = list(results["settings"]["depths"])
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.6))
    for ax, kind in zip(axes, ("training", "inference")):
        series = []
        for model in MODELS:
            for pipeline in ("engine", "reference"):
                rows = [_one(results, kind, model=model, depth=d, pipeline=pipeline) for d in depths]
                series.append((f"{model}, {PIPELINE_LABELS[pipeline]}", figures.color(model),
                               "///" if pipeline == "reference" else None, 0.45 if pipeline == "reference" else 1.0,
                               [1000 / r["images_per_s"] for r in rows], ["*" if r["as_run"] else "" for r in rows]))
        _bars(ax, [f"depth {d}" for d in depths], series, ylabel="seconds per 1,000 images",
              title=f"{kind} ({'batch ' + str(results['settings']['batch_size']) if kind == 'training' else 'test batch ' + str(results['settings']['test_batch_size'])})")
    handles = [Patch(color=figures.color(m), label=m) for m in MODELS] + [
        Patch(facecolor="0.5", label="book's engine"),
        Patch(facecolor="white", edgecolor="0.4", hatch="///", label="seeds' pipeline")]
    axes[1].legend(handles=handles, loc="upper left", bbox_to_anchor=(1.02, 1), fontsize=8)
    fig.suptitle("Equal depth: time per 1,000 MNIST images (* = article 1 as run)")
    return figures.save_figure(
        fig, "new_equal_depth_timing", chapter=CHAPTER, reproduces="new/equal_depth_timing", profile=settings["profile"],
        caption="Training and inference time per 1,000 images of ViT, ViTBNFFN and ViTBN at depths 1 and 6, "
                "through the book's engine (solid) and the seeds' per-sample pipeline (hatched); * marks the "
                "configurations article 1 compared (ViT depth 6, BatchNorm models depth 1).",
        extra={"hardware_line": results["hardware_label"]})


# ---------------------------------------------------------------------------------------------
# the data pipeline
# ---------------------------------------------------------------------------------------------
SPLIT_COLORS = {"data": "#E1A95F", "compute": "#6C8EBF", "forward": "#6C8EBF", "bookkeeping": "#B85450"}


def pipeline_table(results: dict) -> pd.DataFrame:
    """Per configuration and pipeline: the share of time spent producing batches, and engine / seeds' speed."""
    rows = []
    ratio = {(r["model"], r["depth"]): r for r in results["ratios"]}
    for depth in results["settings"]["depths"]:
        for model in MODELS:
            for pipeline in ("reference", "engine"):
                train = _one(results, "training", model=model, depth=depth, pipeline=pipeline)
                infer = _one(results, "inference", model=model, depth=depth, pipeline=pipeline)
                r = ratio[(model, depth)]
                rows.append({
                    "configuration": _name(model, depth) + (" *" if train["as_run"] else ""),
                    "pipeline": PIPELINE_LABELS[pipeline],
                    "training: data share": _pct(train["data_share"]),
                    "training: data ms / step": round(1e3 * train["data_seconds"], 1),
                    "training: compute ms / step": round(1e3 * train["compute_seconds"], 1),
                    "inference: data share": _pct(infer["data_share"]),
                    "inference: bookkeeping share": _pct(infer["bookkeeping_seconds"] / infer["batch_seconds"]),
                    "engine / seeds' (training)": _ratio_text(r["train_engine_over_reference"]) if pipeline == "engine" else "",
                    "engine / seeds' (inference)": _ratio_text(r["eval_engine_over_reference"]) if pipeline == "engine" else "",
                })
    return pd.DataFrame(rows)


def pipeline_split_figure(results: dict, settings: dict):
    """Stacked bars: seconds per 1,000 images spent producing batches and computing, both pipelines."""
    labels, train_parts, infer_parts = [], [], []
    for depth in results["settings"]["depths"]:
        for model in MODELS:
            for pipeline in ("reference", "engine"):
                train = _one(results, "training", model=model, depth=depth, pipeline=pipeline)
                infer = _one(results, "inference", model=model, depth=depth, pipeline=pipeline)
                labels.append(f"{_name(model, depth)}{'*' if train['as_run'] else ''} · {PIPELINE_LABELS[pipeline]}")
                per_train = 1000 / (train["images_per_s"] * train["step_seconds"])  # steps per 1,000 images
                train_parts.append({"data": train["data_seconds"] * per_train,
                                    "compute": train["compute_seconds"] * per_train})
                per_infer = 1000 / (infer["images_per_s"] * infer["batch_seconds"])  # batches per 1,000 images
                infer_parts.append({"data": infer["data_seconds"] * per_infer,
                                    "forward": infer["forward_seconds"] * per_infer,
                                    "bookkeeping": infer["bookkeeping_seconds"] * per_infer})
    figures.use_style()
    fig, axes = plt.subplots(1, 2, figsize=(13, 0.36 * len(labels) + 1.6), sharey=True)
    y = np.arange(len(labels))[::-1]
    for ax, parts, title in ((axes[0], train_parts, "training"), (axes[1], infer_parts, "inference")):
        left = np.zeros(len(labels))
        for part in parts[0]:
            values = np.array([p[part] for p in parts])
            ax.barh(y, values, left=left, color=SPLIT_COLORS[part], label=part, height=0.7)
            left += values
        ax.set(xlabel="seconds per 1,000 images", title=title)
        ax.legend(loc="lower right", fontsize=8)
    axes[0].set_yticks(y, labels, fontsize=8)
    fig.suptitle("Where the time goes: producing batches (data) against the model's work (* = article 1 as run)")
    return figures.save_figure(
        fig, "new_pipeline_split", chapter=CHAPTER, reproduces="new/pipeline_split", profile=settings["profile"],
        caption="Time per 1,000 MNIST images split into producing batches (data: loading, converting, "
                "collating, copying to the device) and the model's work (training: forward, backward, Adam; "
                "inference: forward pass, then per-class accuracy bookkeeping), for the seeds' per-sample "
                "pipeline and the book's engine.", extra={"hardware_line": results["hardware_label"]})


# ---------------------------------------------------------------------------------------------
# folding
# ---------------------------------------------------------------------------------------------
def folding_table(results: dict) -> pd.DataFrame:
    rows = []
    for r in results["folding"]:
        rows.append({"model": _name(r["model"], r["depth"]),
                     "unfolded (images/s)": round(r["unfolded_images_per_s"], 1),
                     "folded (images/s)": round(r["folded_images_per_s"], 1),
                     "folded / unfolded": _ratio_text(r["folded_over_unfolded"]),
                     "ViT, same depth (images/s)": round(r["vit_images_per_s"], 1),
                     "folded / ViT": _ratio_text(r["folded_over_vit"]),
                     "ViT's LayerNorm share of its inference time": _pct(r["vit_layernorm_share"]),
                     "max |logit difference|": f"{r['max_abs_logit_difference']:.1e}"})
    return pd.DataFrame(rows)


def folding_figure(results: dict, settings: dict):
    """Inference images/s: ViT (and ViT with its LayerNorms removed), each BatchNorm model unfolded and folded."""
    depths = list(results["settings"]["depths"])
    fold = {(r["model"], r["depth"]): r for r in results["folding"]}
    series = [("ViT (LayerNorm)", figures.color("ViT"), None, 1.0,
               [_one(results, "inference", model="ViT", depth=d, pipeline="engine")["images_per_s"] for d in depths]),
              ("ViT with its LayerNorms removed (not a model: what LayerNorm costs)", figures.color("ViT"), "///", 0.45,
               [_one(results, "inference", model="ViT", depth=d, pipeline="engine", norms_removed=True)["images_per_s"]
                for d in depths])]
    for model in BN_MODELS:
        series.append((f"{model}", figures.color(model), None, 1.0,
                       [fold[(model, d)]["unfolded_images_per_s"] for d in depths]))
        series.append((f"{model}, BatchNorm folded (× = folded / unfolded)", figures.darker(figures.color(model), 0.35),
                       "xx", 1.0, [fold[(model, d)]["folded_images_per_s"] for d in depths],
                       [f"×{fold[(model, d)]['folded_over_unfolded']:.2f}" for d in depths]))
    figures.use_style()
    fig, ax = plt.subplots(figsize=(12, 4.6))
    _bars(ax, [f"depth {d}" for d in depths], [s if len(s) == 6 else (*s, [""] * len(depths)) for s in series],
          ylabel="images per second (higher is faster)",
          title=f"Inference, book's engine, test batch {results['settings']['test_batch_size']}")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1))
    fig.suptitle("What BatchNorm can buy at inference: folding it into the neighbouring Linear layers")
    return figures.save_figure(
        fig, "new_bn_folding", chapter=CHAPTER, reproduces="new/bn_folding", profile=settings["profile"],
        caption="Inference throughput of ViTBNFFN and ViTBN before and after folding every eval-mode BatchNorm "
                "into its neighbouring Linear layer (same outputs to float precision), against ViT of the same "
                "depth; the hatched bar removes ViT's LayerNorms outright (wrong outputs) to show what LayerNorm, "
                "which cannot fold, costs.", extra={"hardware_line": results["hardware_label"]})


# ---------------------------------------------------------------------------------------------
# the accounting
# ---------------------------------------------------------------------------------------------
def _published(kind: str, model: str) -> str:
    values = REPORTED[kind][model]
    low, high = min(values), max(values)
    return f"{low:.1f}–{high:.1f} (g {100 * (1 - 1 / low):.0f}–{100 * (1 - 1 / high):.0f} %)"


def _spread(row: dict) -> float:
    """Relative spread of a row's repeats (fastest / slowest - 1): how far apart two timings can be by chance."""
    values = row.get("images_per_s_repeats") or [row["images_per_s"]]
    return max(values) / min(values) - 1


def accounting(results: dict) -> dict:
    """The decomposition behind the accounting table, as numbers, per BatchNorm model and kind.

    r(as run) = T(ViT d6) / T(model d1) = [T(ViT d6) / T(ViT d1)] x [T(ViT d1) / T(model d1)]
                    = r(depth) x r(normalisation at depth 1), exactly, within one pipeline.
    """
    out = {}
    for model in BN_MODELS:
        for kind in ("training", "inference"):
            t = lambda m, d, p="engine": seconds_per_image(results, kind, m, d, p)  # noqa: E731
            published_engine = t("ViT", 6) / t(model, 1)
            published_seeds = t("ViT", 6, "reference") / t(model, 1, "reference")
            depth = t("ViT", 6) / t("ViT", 1)
            norm1 = t("ViT", 1) / t(model, 1)
            norm6 = t("ViT", 6) / t(model, 6)
            vit6_ref = _one(results, kind, model="ViT", depth=6, pipeline="reference")
            model1_ref = _one(results, kind, model=model, depth=1, pipeline="reference")
            vit6_eng = _one(results, kind, model="ViT", depth=6, pipeline="engine")
            model1_eng = _one(results, kind, model=model, depth=1, pipeline="engine")
            out[(model, kind)] = {
                "published_engine": published_engine, "published_seeds": published_seeds, "depth": depth,
                "norm_depth1": norm1, "norm_depth6": norm6,
                "depth_share": _share(depth, published_engine), "norm_share": _share(norm1, published_engine),
                "pipeline_factor": published_seeds / published_engine,
                "data_share_seeds": (vit6_ref["data_share"], model1_ref["data_share"]),
                "data_share_engine": (vit6_eng["data_share"], model1_eng["data_share"]),
                # Below this, "faster" or "slower" at equal depth would be reading the repeats' noise.
                "tie": max(TIE, _spread(_one(results, kind, model="ViT", depth=1, pipeline="engine")),
                           _spread(_one(results, kind, model=model, depth=1, pipeline="engine"))),
            }
    return out


def accounting_frame(results: dict) -> pd.DataFrame:
    numbers = accounting(results)
    rows = []
    for model in BN_MODELS:
        def row(quantity, fn):
            rows.append({"model": model, "quantity": quantity,
                         **{kind: fn(numbers[(model, kind)], kind) for kind in ("training", "inference")}})

        row("published r = T(ViT d6) / T(model d1) (article 1)", lambda n, k: _published(k, model))
        row("as run, seeds' pipeline, this machine", lambda n, k: f"{n['published_seeds']:.2f} "
            f"(g {100 * (1 - 1 / n['published_seeds']):.0f} %)")
        row("as run, book's engine, this machine", lambda n, k: f"{n['published_engine']:.2f} "
            f"(g {100 * (1 - 1 / n['published_engine']):.0f} %)")
        row("depth: T(ViT d6) / T(ViT d1)", lambda n, k: _ratio_text(n["depth"]))
        row(f"normalisation at depth 1: T(ViT d1) / T({model} d1)", lambda n, k: _ratio_text(n["norm_depth1"]))
        row(f"normalisation at depth 6: T(ViT d6) / T({model} d6)", lambda n, k: _ratio_text(n["norm_depth6"]))
        row("share of ln r (engine) explained by depth", lambda n, k: _pct(n["depth_share"]))
        row("share of ln r (engine) explained by normalisation", lambda n, k: _pct(n["norm_share"]))
        row("data loading, share of time, seeds' pipeline (ViT d6 / model d1)",
            lambda n, k: f"{_pct(n['data_share_seeds'][0])} / {_pct(n['data_share_seeds'][1])}")
        row("data loading, share of time, book's engine (ViT d6 / model d1)",
            lambda n, k: f"{_pct(n['data_share_engine'][0])} / {_pct(n['data_share_engine'][1])}")
        row("pipeline: r(seeds' pipeline) / r(engine)", lambda n, k: _ratio_text(n["pipeline_factor"]))
    return pd.DataFrame(rows)


def accounting_table(results: dict, settings: dict):
    """``new/speedup_accounting``: the published gain and how much of it depth, pipeline and normalisation explain."""
    return figures.save_table(
        accounting_frame(results), "new_speedup_accounting", chapter=CHAPTER, reproduces="new/speedup_accounting",
        profile=settings["profile"],
        caption="The published speed-up and what explains it on this machine: r(as run) = r(depth) × "
                "r(normalisation at depth 1), exactly; shares are of ln r; the data pipeline's share of time in "
                "each pipeline", extra={"hardware_line": results["hardware_label"], "published": REPORTED_SETUP})


def _attribution(n: dict, model: str) -> str:
    depth, norm, tie = n["depth"], n["norm_depth1"], n["tie"]
    if depth > 1 and norm > 1 + tie:
        return (f"In log terms depth explains {_pct(n['depth_share'])} of it and the normalisation "
                f"{_pct(n['norm_share'])}.")
    if depth > 1 and norm >= 1 - tie:
        return (f"So depth explains (nearly) all of it: at equal depth {model} and ViT are about as fast (within "
                f"the {100 * tie:.0f} % the repeats spread).")
    if depth > 1:
        return (f"So depth explains all of it and more: at equal depth {model} is slower than ViT, which takes "
                "back part of what depth gave.")
    if norm > 1:
        return "Here depth bought nothing, and the whole gain is the normalisation's."
    return "Neither depth nor the normalisation made the BatchNorm model faster on this run."


def accounting_statement(results: dict) -> Markdown:
    """The chapter's answer in words, computed from this run's numbers."""
    numbers = accounting(results)
    lines = []
    for kind in ("training", "inference"):
        parts = []
        for model in BN_MODELS:
            n = numbers[(model, kind)]
            norm = n["norm_depth1"]
            tie = n["tie"]
            norm_word = "faster than" if norm > 1 + tie else "slower than" if norm < 1 - tie else "about as fast as"
            parts.append(
                f"**{model}** as article 1 ran it: r = {n['published_engine']:.2f} with the book's engine "
                f"({n['published_seeds']:.2f} through the seeds' pipeline; article 1: {_published(kind, model)}). "
                f"Depth alone (ViT with 6 blocks against 1) gives r = {n['depth']:.2f}; at equal depth 1 {model} is "
                f"{norm_word} ViT (r = {norm:.2f}), at equal depth 6 r = {n['norm_depth6']:.2f}. "
                + _attribution(n, model))
        lines.append(f"*{kind.capitalize()}.* " + " ".join(parts))
    factors = [numbers[(m, k)]["pipeline_factor"] for m in BN_MODELS for k in ("training", "inference")]
    shares = [numbers[(m, "training")]["data_share_seeds"][1] for m in BN_MODELS]
    engine_shares = [numbers[(m, "training")]["data_share_engine"][1] for m in BN_MODELS]
    if all(f < 1 for f in factors):
        effect = f"it shrinks every as-run ratio (by a factor {min(factors):.2f}–{max(factors):.2f})"
    else:
        effect = (f"on this run the ratios through it differ from the engine's by a factor "
                  f"{min(factors):.2f}–{max(factors):.2f}; a factor above 1 cannot come from a cost that is the "
                  f"same for every model, so read it as timing noise")
    lines.append(
        f"*The data pipeline.* The seeds' per-sample pipeline spends {_pct(min(shares))}–{_pct(max(shares))} of a "
        f"depth-1 BatchNorm model's training time producing batches (the book's engine "
        f"{_pct(min(engine_shares))}–{_pct(max(engine_shares))}). That cost is the same for every model, so it "
        f"explains none of the published gain: it pulls every ratio towards 1; {effect}.")
    return Markdown("\n\n".join(lines))


def effects_statement(results: dict) -> Markdown:
    """The corrected account in one sentence per effect, computed from this run's numbers.

    Article 1's gain = its effective depth, 6 blocks against 1 (the early return of the reference code's
    BatchNorm models), times what the normalisation changes at that depth, pulled towards 1 by the data
    pipeline; at equal depth 6, as article 1 wrote it, only the normalisation (and folding) is left.
    """
    numbers = accounting(results)

    def span(key, kind):
        values = [numbers[(m, kind)][key] for m in BN_MODELS]
        return f"{min(values):.2f}–{max(values):.2f}" if len(set(round(v, 2) for v in values)) > 1 else f"{values[0]:.2f}"

    depth = {kind: numbers[(BN_MODELS[0], kind)]["depth"] for kind in ("training", "inference")}
    folding = [r for r in results.get("folding", []) if r["depth"] == 6]
    fold_text = (", ".join(f"{r['model']} {r['folded_over_unfolded']:.2f}×" for r in folding)
                 if folding else "not measured")
    lines = [
        f"- **Depth (the early return).** Article 1's BatchNorm models computed one block instead of six, and on "
        f"{results['hardware_label']} one block instead of six makes the model {depth['training']:.2f}× as fast "
        f"to train and {depth['inference']:.2f}× as fast at inference (ViT d6 against ViT d1).",
        f"- **Normalisation at equal depth, as article 1 wrote it.** At depth 6 the BatchNorm models train "
        f"{span('norm_depth6', 'training')}× and infer {span('norm_depth6', 'inference')}× as fast as ViT "
        f"(T(ViT d6) / T(model d6); 1 = no change).",
        f"- **Normalisation at depth 1.** With one block each, the same ratio is {span('norm_depth1', 'training')}× "
        f"(training) and {span('norm_depth1', 'inference')}× (inference).",
        f"- **The data pipeline.** Article 1's pipeline (DataLoader over ToTensor MNIST, .item() per step, a "
        f"per-sample test loop) multiplies the as-run ratios by {span('pipeline_factor', 'training')} (training) "
        f"and {span('pipeline_factor', 'inference')} (inference) against the book's engine: a cost every model "
        f"pays alike can only pull a ratio towards 1.",
        f"- **Folding BatchNorm into its Linear (inference only).** At depth 6, folded ÷ unfolded throughput: "
        f"{fold_text}; no LayerNorm can fold.",
    ]
    return Markdown("\n".join(lines))


def seed_reported() -> pd.DataFrame:
    """What article 1 reports, ratio by ratio."""
    settings = ("lr 0.0005 (Table 1)", "lr 0.005 (Table 1)", "lr 0.01 (Table 1)", "optimised (Table 3)")
    rows = []
    for kind, short in (("training", "r_t"), ("inference", "r_v")):
        for model in BN_MODELS:
            rows.append({"ratio": short, "model": model,
                         **{s: v for s, v in zip(settings, REPORTED[kind][model])},
                         "gain g = 1 − 1/r": f"{100 * (1 - 1 / min(REPORTED[kind][model])):.0f}–"
                                             f"{100 * (1 - 1 / max(REPORTED[kind][model])):.0f} %"})
    return pd.DataFrame(rows)


# ---------------------------------------------------------------------------------------------
# BatchNorm forms, utilisation, targets
# ---------------------------------------------------------------------------------------------
def norm_forms_frame(results: dict) -> pd.DataFrame:
    frame = pd.DataFrame(results["norm_forms"])
    frame["shape"] = frame["shape"].map(lambda s: " × ".join(map(str, s)))
    frame = frame.rename(columns={"microseconds": "time (µs)", "relative_to_fastest": "× fastest",
                                  "max_abs_difference": "max |difference| from flattened"})
    return frame[["form", "mode", "shape", "time (µs)", "× fastest", "max |difference| from flattened"]]


def norm_forms_table(results: dict, settings: dict):
    """``new/batchnorm_forms``: the three ways of writing BatchNorm on tokens, timed (SPEC §5)."""
    return figures.save_table(
        norm_forms_frame(results), "new_batchnorm_forms", chapter=CHAPTER, reproduces="new/batchnorm_forms",
        profile=settings["profile"],
        caption="BatchNorm on (batch, tokens, features): article 1's BatchNorm1d over b d n, article 2's "
                "BatchNorm2d over b d n 1 and the book's flattened (b n) d BatchNorm1d, median time per call",
        extra={"hardware_line": results["hardware_label"]})


#: Timings this close (relative) count as a tie: closer than a quiet machine's repeat-to-repeat spread.
TIE = 0.02


def norm_forms_statement(results: dict) -> Markdown:
    """Which form was fastest where, and by how much the flattened form trails where it is not."""
    frame = pd.DataFrame(results["norm_forms"])
    flat = "BatchNorm1d over flattened (b n) d (vitbn_nb)"
    wins, ties, behind = 0, 0, []
    for (mode, dim), group in frame.groupby(["mode", "dim"], sort=False):
        fastest = group.loc[group["microseconds"].idxmin()]
        mine = float(group.loc[group["form"] == flat, "microseconds"].iloc[0])
        if fastest["form"] == flat:
            wins += 1
        elif mine <= (1 + TIE) * fastest["microseconds"]:
            ties += 1
        else:
            behind.append(f"{mode} at d = {dim}: {fastest['form']} is {100 * (mine / fastest['microseconds'] - 1):.0f} % "
                          "faster")
    cases = wins + ties + len(behind)
    text = (f"The flattened form, which the book's models use, is the fastest in {wins} of the {cases} cases "
            f"measured" + (f" and within {100 * TIE:.0f} % of the fastest in {ties} more" if ties else ""))
    text += "." if not behind else "; elsewhere it trails: " + "; ".join(behind) + "."
    return Markdown(text + " The transposed forms hand the kernel a permuted, non-contiguous view that it (or the "
                           "next layer) has to copy or stride through; the flattened form reshapes a contiguous "
                           "tensor without a copy. All three compute the same statistics: the last column is the "
                           "largest difference in their outputs.")


def utilisation_table(results: dict) -> pd.DataFrame:
    """FLOPs per training step, achieved FLOP/s and model FLOP utilisation against the measured matmul peak."""
    peak = results["matmul_peak"]["flops_per_s"]
    rows = []
    for r in results["training"]:
        rows.append({"configuration": _name(r["model"], r["depth"]) + (" *" if r["as_run"] else ""),
                     "pipeline": PIPELINE_LABELS[r["pipeline"]], "GFLOP per step": round(r["flops_per_step"] / 1e9, 2),
                     "achieved GFLOP/s": round(r["achieved_flops"] / 1e9, 1), "MFU": _pct(r["mfu"]),
                     "MFU of the compute part": _pct(r["compute_mfu"]),
                     "peak memory (MiB)": round(r["peak_memory_mib"], 1)})
    frame = pd.DataFrame(rows)
    frame.attrs["peak"] = f"{peak / 1e9:,.1f} GFLOP/s"
    return frame


def targets_frame(results: dict) -> pd.DataFrame:
    names = {"train_engine_over_reference_min": "training: engine ≥ 3× the seeds' pipeline (every configuration)",
             "eval_engine_over_reference_min": "evaluation: engine ≥ 5× the seeds' pipeline (every configuration)",
             "train_mfu_vit_d6": "training MFU of ViT d6 ≥ 40 % of the matmul peak",
             "folded_vitbn_over_unfolded_min": "folded ViTBN ≥ 1.2× unfolded ViTBN (same depth)"}
    return pd.DataFrame([{"target": names.get(k, k), "reached": f"{t['value']:.2f}" if math.isfinite(t["value"]) else "n/a",
                          "target value": t["target"], "met": "yes" if t["met"] else "no"}
                         for k, t in results["targets"].items()])
