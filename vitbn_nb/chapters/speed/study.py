"""Chapter 08: where article 1's speed-up comes from (depth, data pipeline, normalisation), from the measurement
committed in ``figures/bench.json`` or one taken anew (``measure=True``); the accounting is in :mod:`.accounting`."""

from __future__ import annotations

import dataclasses
import functools
import itertools
import json
import math
from dataclasses import dataclass, field

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from IPython.display import Markdown
from matplotlib.patches import Patch

from ... import atomic, bench, paths, profiles
from ...bench import op_counts
from ...judging import verdicts
from ...judging.article1 import DEVICES
from ...publishing import figures
from ...publishing.results import ChapterResult
from .settings import SpeedSettings

#: What the chapter's outputs are drawn from: no run of the store, timings taken as it runs or committed.
TIMED = "fresh models timed by vitbn_nb.bench as the chapter ran"
COMMITTED_TIMED = "fresh models timed by vitbn_nb.bench, the measurement committed in figures/bench.json"
#: Article 1's BatchNorm models (the accounting of its gain is about them); the settings' ``models`` may add others.
BN_MODELS = ("ViTBNFFN", "ViTBN")
#: The committed measurement, beside the figures (``vitbn_nb.paths.book_figures_dir``).
BENCH_FILE = "bench.json"
#: The command that replaces the committed measurement (on a quiet machine), then renders the book from it.
MEASURE_COMMAND = "python -m vitbn_nb book --profile cpu --measure"
PIPELINE_LABELS = {"engine": "book's engine", "reference": "article 1's pipeline"}


@dataclass(frozen=True)
class SpeedResult(ChapterResult):
    """Chapter 08's measurements, their settings and operation counts; ``source``: "measured" or "committed";
    ``not_measured``: models the committed measurement lacks; ``why_measured``: why no committed one was used."""

    settings: SpeedSettings
    bench: bench.BenchResult
    op_counts: pd.DataFrame = field(default_factory=pd.DataFrame)
    source: str = "measured"
    not_measured: tuple[str, ...] = ()
    why_measured: str = ""

    @property
    def models(self) -> tuple[str, ...]:
        """The models the measurement holds, in the settings' order."""
        held = set(self.bench.training["model"]) if "model" in self.bench.training else set()
        return tuple(m for m in self.settings.models if m in held)


def _save(output, name: str, result: SpeedResult, caption: str, **about):
    """Save one of the chapter's figures or tables as ``new_<name>`` (reproducing ``new/<name>``), naming the
    measurement and its machine unless ``about`` says otherwise."""
    reads = COMMITTED_TIMED if result.source == "committed" else TIMED
    about = dict(reads=reads, extra={"hardware_line": result.bench.hardware_label}) | about
    made = (result.bench.hardware_label, result.bench.meta["date"][:10])  # the measurement's machine and day
    save = figures.save_table if isinstance(output, pd.DataFrame) else figures.save_figure
    return save(output, f"new_{name}", result, reproduces=f"new/{name}", caption=caption, made=made, **about)


def _timed(result: SpeedResult, per_round: bool) -> pd.DataFrame:
    """The measurement's training and inference rows of the chapter's models, as a figure's data: one row per timed
    configuration (``per_round``: per configuration and interleaved round, its images/s that round)."""
    frames = [
        frame[frame["model"].isin(result.models)].assign(kind=kind)
        for kind, frame in (("training", result.bench.training), ("inference", result.bench.inference))
    ]
    rows = pd.concat(frames, ignore_index=True)
    if not per_round:
        return rows.drop(columns=["images_per_s_repeats"])
    keys = ["kind", "model", "depth", "pipeline", "folded", "norms_removed", "as_run"]
    rounds = rows[[*keys, "images_per_s_repeats"]].explode("images_per_s_repeats")
    rounds["round"] = rounds.groupby(level=0).cumcount() + 1
    rounds = rounds.rename(columns={"images_per_s_repeats": "images_per_s"}).reset_index(drop=True)
    return rounds.astype({"images_per_s": float})


def plan(settings: SpeedSettings) -> list:
    """Chapter 08 trains no run: it times fresh models for a fixed number of steps."""
    return []


def _check_depths(settings: SpeedSettings) -> None:
    if not {1, 6} <= set(settings.depths) & set(settings.count_depths):
        raise ValueError(
            f"depths={settings.depths!r}, count_depths={settings.count_depths!r} are not allowed; the accounting "
            "needs depths 1 and 6 (article 1's depths) in both, e.g. (1, 6)"
        )


def committed_measurement() -> tuple[bench.BenchResult | None, SpeedSettings | None, str]:
    """The committed measurement and the settings it was taken with; or (None, None, why it cannot be used)."""
    file = paths.book_figures_dir() / BENCH_FILE
    try:
        found = json.loads(file.read_text())
        taken = dict(found["settings"])
        known = {item.name for item in dataclasses.fields(SpeedSettings)}
        settings = SpeedSettings(**{k: v for k, v in taken.items() if k in known})
        _check_depths(settings)
        result = bench.BenchResult.from_dict(found)
        for model, depth, kind in itertools.product(settings.models, settings.depths, ("training", "inference")):
            result.row(kind, model=model, depth=depth, pipeline="engine")  # every row the views read is there
        for key in ("date", "hardware_label", "device", "matmul_peak", "versions", "timing", "memory_measure"):
            found[key]
    except FileNotFoundError:
        return None, None, f"there is no committed measurement ({file} is absent)"
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
        return None, None, f"the committed measurement {file} cannot be read ({type(error).__name__}: {error})"
    return result, settings, ""


def run(settings: SpeedSettings, force: bool = False, device=None, measure=False) -> SpeedResult:
    """The committed measurement, or a new one when ``measure`` asks, under ``smoke``, or when none is usable; a new one
    (not smoke's) is kept as ``bench.json`` beside the outputs. ``force`` changes nothing: nothing is stored."""
    _check_depths(settings)
    why = ""
    requested = profiles.flag("measure", measure)  # a bool, or papermill's 'true' / 'false' (``book --measure``)
    if settings.profile != "smoke" and not requested:
        found, taken, why = committed_measurement()
        if found is not None:
            counted = _counted(taken)
            lacking = tuple(m for m in settings.models if m not in taken.models)
            return SpeedResult(taken, found, pd.DataFrame(counted), source="committed", not_measured=lacking)
    # Tens of minutes on a CPU: each stage says what it times as it starts, so a reader watching knows it works.
    measured = bench.measure(settings, device, log=lambda stage: print(f"measuring: {stage}", flush=True))
    if settings.profile != "smoke":  # a smoke run's timings mean nothing: they never stand as the book's
        atomic.write_text(paths.figures_dir() / BENCH_FILE, bench.to_json(measured))
    counted = _counted(settings)
    return SpeedResult(settings, measured, pd.DataFrame(counted), why_measured=why)


def _counted(settings: SpeedSettings) -> list[dict]:
    folders = [paths.figures_dir(), paths.book_figures_dir()]
    return op_counts.kept_table(settings.models, settings.count_depths, settings.batch_size, folders)


def overview(result: SpeedResult) -> pd.DataFrame:
    """Where and how the numbers were taken."""
    s, meta, peak = result.settings, result.bench.meta, result.bench.meta["matmul_peak"]
    sizes = lambda n: "all" if n is None else f"{n:,}"
    when = meta["date"][:10]
    taken = (
        f"committed (figures/{BENCH_FILE}), taken {when}" if result.source == "committed" else f"measured now, {when}"
    )
    matmul = f"{peak['flops_per_s'] / 1e9:,.1f} GFLOP/s ({peak['size']}³, median of {peak['repeats']})"
    rows = [
        ("hardware", f"{result.bench.hardware_label} ({meta['device']})"),
        ("measurement", taken),
        ("torch, threads", f"{meta['versions'].get('torch')}, {peak['threads']} threads"),
        ("fp32 matmul peak", matmul),
        (
            "data",
            f"MNIST without augmentation (article 1's data): {sizes(s.train_size)} training and "
            f"{sizes(s.test_size)} test images",
        ),
        (
            "training",
            f"batch {s.batch_size}, {s.warmup} warm-up steps, then {s.repeats} interleaved rounds of {s.steps} steps "
            "(images/s: the median round; ratios: every round, by the rule)",
        ),
        (
            "inference",
            f"test batch {s.test_batch_size}, {s.eval_warmup} warm-up batch(es), then "
            f"{s.repeats} interleaved rounds of {s.eval_batches} batch(es) (the median round; ratios: every round)",
        ),
        ("memory", meta["memory_measure"]),
        ("timing", meta["timing"]),
    ]
    return pd.DataFrame(rows, columns=["", "this run"])


def source_text(result: SpeedResult) -> str:
    """Whether the numbers are the committed measurement or were measured now, and which models it lacks."""
    meta = result.bench.meta
    if result.source == "committed":
        text = (
            f"**These numbers are the committed measurement** (`figures/{BENCH_FILE}`), taken on "
            f"**{result.bench.hardware_label}** on {meta['date'][:10]} with the `{meta.get('profile')}` profile's "
            "settings; rendering this chapter measured nothing. To measure anew on the rendering machine: set "
            f"`measure = True` in the parameters cell, or `{MEASURE_COMMAND}` (tens of minutes; a quiet machine)."
        )
        if result.not_measured:
            names = ", ".join(result.not_measured)
            text += (
                f" **{names} {'is' if len(result.not_measured) == 1 else 'are'} not in this measurement**: it was "
                f"taken before the book added {'it' if len(result.not_measured) == 1 else 'them'}, so no table or "
                f"figure below shows {names}; `{MEASURE_COMMAND}` on a quiet machine times every model of the "
                "chapter's settings and publishes the new measurement."
            )
        return text
    why = f" ({result.why_measured}.)" if result.why_measured else ""
    return (
        f"**These numbers were measured now**, as this chapter rendered, on **{result.bench.hardware_label}** "
        f"({meta['date'][:10]}).{why}"
    )


def hardware_note(result: SpeedResult) -> Markdown:
    """Where the numbers come from, which machine, and what that means for them."""
    where = source_text(result)
    machine = "this machine" if result.source == "measured" else "the machine that took it"
    if result.bench.meta["device"] == "cpu":
        return Markdown(
            where + f" There is **no GPU** on {machine}, so every time below is a CPU time. Article 1's times: "
            f"{DEVICES}; which of the two timed its epochs the reference repository cannot tell, "
            "so nothing below is a GPU-against-CPU contrast. How these ratios would change on a GPU is not "
            "measured here: run this chapter on one with `measure = True` (the `paper` profile is the default "
            "there) and the same code fills every figure and table with its numbers."
        )
    return Markdown(
        where + " This is a GPU run. Article 1's times (MNIST without augmentation, whole epochs): "
        f"{DEVICES}; whether they were taken on a GPU the reference repository cannot tell, so the "
        "ratios below are this GPU's, set beside article 1's, not a reproduction of its device."
    )


def name(model: str, depth: int) -> str:
    return f"{model} d{depth}"


def pct(value: float) -> str:
    return f"{100 * value:.0f} %" if math.isfinite(value) else "n/a"


def share(part: float, whole: float) -> float:
    """The share of ln(whole) that ln(part) accounts for (ratios multiply, so their logs add)."""
    return math.log(part) / math.log(whole) if whole > 0 and part > 0 and abs(math.log(whole)) > 1e-9 else float("nan")


def equal_depth(result: SpeedResult) -> pd.DataFrame:
    """Per model and depth: images/s through both pipelines, and the ratio to ViT of the same depth."""
    rows = []
    for depth, model in itertools.product(result.settings.depths, result.models):
        of = functools.partial(result.bench.row, model=model, depth=depth)
        as_run = of("training", pipeline="engine")["as_run"]
        row = {"model": model, "depth": depth, "article 1 as run": "yes" if as_run else ""}
        for kind, short in (("training", "r_t"), ("inference", "r_v")):
            for pipeline, label in PIPELINE_LABELS.items():
                row[f"{kind}, {label} (images/s)"] = round(of(kind, pipeline=pipeline)["images_per_s"], 1)
            judged = (
                verdicts.speed_text(result.bench.against_vit(kind, model, depth)) if model != "ViT" else "1 (itself)"
            )
            row[f"{short} = T(ViT) / T(model), same depth, engine, by the rule"] = judged
        rows.append(row)
    return pd.DataFrame(rows)


def _bars(ax, groups, series, *, ylabel: str, title: str):
    """Grouped bars: ``series`` = [(label, color, hatch, alpha, values per group[, marks per group[, (low, high) per
    group: whiskers]])]."""
    width, text = 0.8 / len(series), dict(ha="center", va="bottom", xytext=(0, 1), textcoords="offset points")
    for i, (label, color, hatch, alpha, values, *extra) in enumerate(series):
        marks, spans = (extra[0] if extra else ()), (extra[1] if len(extra) > 1 else None)
        x = np.arange(len(groups)) + (i - (len(series) - 1) / 2) * width
        style = dict(color=color, alpha=alpha, hatch=hatch, edgecolor=color if hatch else "white", linewidth=0.8)
        bars = ax.bar(x, values, width, label=label, **style)
        tops = [bar.get_height() for bar in bars]
        if spans is not None:
            below = [v - low for v, (low, _) in zip(values, spans)]
            above = [high - v for v, (_, high) in zip(values, spans)]
            ax.errorbar(x, values, yerr=[below, above], fmt="none", ecolor="0.2", elinewidth=0.8, capsize=2)
            tops = [high for _, high in spans]
        for at_x, top, mark in zip(x, tops, marks):
            if mark:
                ax.annotate(mark, (at_x, top), fontsize=11 if mark == "*" else 7, **text)
    ax.set_xticks(np.arange(len(groups)), groups)
    ax.grid(axis="x", visible=False)
    ax.set(ylabel=ylabel, title=title)
    ax.set_ylim(bottom=0)
    ax.margins(y=0.12)


def _rounds_text(result: SpeedResult) -> str:
    """How many interleaved rounds each training timing of the bench took ("5 rounds"), from the measurement itself."""
    configurations = itertools.product(result.models, result.settings.depths, PIPELINE_LABELS)
    counts = sorted({len(result.bench.rounds("training", model=m, depth=d, pipeline=p)) for m, d, p in configurations})
    return f"{'–'.join(map(str, counts))} round{'s' * (counts[-1] != 1)}"


def equal_depth_figure(result: SpeedResult):
    """Time per 1,000 images, training and inference, each model at depth 1 and 6, through both pipelines."""
    figures.use_style()
    depths = list(result.settings.depths)
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.6))
    titles = {
        "training": f"training (batch {result.settings.batch_size})",
        "inference": f"inference (test batch {result.settings.test_batch_size})",
    }
    for ax, kind in zip(axes, titles):
        series = []
        for model in result.models:
            for pipeline, label in PIPELINE_LABELS.items():
                where = [dict(model=model, depth=d, pipeline=pipeline) for d in depths]
                rows, hatched = [result.bench.row(kind, **w) for w in where], pipeline == "reference"
                look = (figures.color(model), "///" if hatched else None, 0.45 if hatched else 1.0)
                marks = ["*" if r["as_run"] else "" for r in rows]
                rounds = [result.bench.rounds(kind, **w) for w in where]
                spans = [(1000 / max(ips), 1000 / min(ips)) for ips in rounds]  # the fastest and slowest round
                series.append((f"{model}, {label}", *look, [1000 / r["images_per_s"] for r in rows], marks, spans))
        _bars(ax, [f"depth {d}" for d in depths], series, ylabel="seconds per 1,000 images", title=titles[kind])
    handles = [Patch(color=figures.color(m), label=m) for m in result.models] + [
        Patch(facecolor="0.5", label="book's engine"),
        Patch(facecolor="white", edgecolor="0.4", hatch="///", label="article 1's pipeline"),
    ]
    axes[1].legend(handles=handles, loc="upper left", bbox_to_anchor=(1.02, 1), fontsize=8)
    fig.suptitle("Equal depth: time per 1,000 MNIST images (* = article 1 as run)")
    return _save(
        fig,
        "equal_depth_timing",
        result,
        f"Training and inference time per 1,000 images of {', '.join(result.models)} at depths "
        f"{' and '.join(map(str, depths))}, through the book's engine (solid) and article 1's per-sample pipeline "
        "(hatched); each bar the median of the interleaved rounds, its whisker the fastest to the slowest round "
        f"(min-max over {_rounds_text(result)}); * marks the configurations article 1 compared (ViT depth 6, BatchNorm "
        "models depth 1)"
        + ("; ViTDyT (DyT in place of LayerNorm) is not a model of the articles" if "ViTDyT" in result.models else "")
        + (f"; not in this measurement: {', '.join(result.not_measured)}" if result.not_measured else "")
        + ".",
        data=_timed(result, per_round=True),
    )


SPLIT_COLORS = {"data": "#E1A95F", "compute": "#6C8EBF", "forward": "#6C8EBF", "bookkeeping": "#B85450"}


def pipeline_split(result: SpeedResult) -> pd.DataFrame:
    """Per configuration and pipeline: the share of time spent producing batches, and engine / article 1's pipeline."""
    rows = []
    ratio = {(r["model"], r["depth"]): r for r in result.bench.ratios.to_dict("records")}
    for depth, model, pipeline, train, infer in _split_rows(result):
        r, engine = ratio[(model, depth)], pipeline == "engine"
        rows.append(
            {
                "configuration": name(model, depth) + (" *" if train["as_run"] else ""),
                "pipeline": PIPELINE_LABELS[pipeline],
                "training: data share": pct(train["data_share"]),
                "training: data ms / step": round(1e3 * train["data_seconds"], 1),
                "training: compute ms / step": round(1e3 * train["compute_seconds"], 1),
                "inference: data share": pct(infer["data_share"]),
                "inference: bookkeeping share": pct(infer["bookkeeping_seconds"] / infer["batch_seconds"]),
                "engine / article 1's (training), by the rule": r["train_engine_over_reference_rule"] if engine else "",
                "engine / article 1's (inference), by the rule": r["eval_engine_over_reference_rule"] if engine else "",
            }
        )
    return pd.DataFrame(rows)


def _split_rows(result: SpeedResult):
    """(depth, model, pipeline, training row, inference row) of every configuration, in the split's order."""
    for depth, model, pipeline in itertools.product(result.settings.depths, result.models, ("reference", "engine")):
        train, infer = (
            result.bench.row(kind, model=model, depth=depth, pipeline=pipeline) for kind in ("training", "inference")
        )
        yield depth, model, pipeline, train, infer


def pipeline_split_figure(result: SpeedResult):
    """Stacked bars: seconds per 1,000 images spent producing batches and computing, both pipelines."""
    labels, train_parts, infer_parts = [], [], []
    for depth, model, pipeline, train, infer in _split_rows(result):
        labels.append(f"{name(model, depth)}{'*' if train['as_run'] else ''} · {PIPELINE_LABELS[pipeline]}")
        per_train = 1000 / (train["images_per_s"] * train["step_seconds"])  # steps per 1,000 images
        train_parts.append({part: train[f"{part}_seconds"] * per_train for part in ("data", "compute")})
        per_infer = 1000 / (infer["images_per_s"] * infer["batch_seconds"])  # batches per 1,000 images
        infer_parts.append({part: infer[f"{part}_seconds"] * per_infer for part in ("data", "forward", "bookkeeping")})
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
        ax.legend(loc="best", fontsize=8)  # where the bars leave room (the short depth-1 rows)
    axes[0].set_yticks(y, labels, fontsize=8)
    fig.suptitle("Where the time goes: producing batches (data) against the model's work (* = article 1 as run)")
    return _save(
        fig,
        "pipeline_split",
        result,
        "Time per 1,000 MNIST images split into producing batches (data: loading, converting, "
        "collating, copying to the device) and the model's work (training: forward, backward, Adam; "
        "inference: forward pass, then per-class accuracy bookkeeping), for article 1's per-sample "
        "pipeline and the book's engine.",
        data=_timed(result, per_round=False),
    )


def folding(result: SpeedResult) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "model": name(r["model"], r["depth"]),
            "unfolded (images/s)": round(r["unfolded_images_per_s"], 1),
            "folded (images/s)": round(r["folded_images_per_s"], 1),
            "folded / unfolded, by the rule": r["folded_over_unfolded_rule"],
            "ViT, same depth (images/s)": round(r["vit_images_per_s"], 1),
            "folded / ViT, by the rule": r["folded_over_vit_rule"],
            "ViT without its LayerNorms / ViT, by the rule": r["vit_without_layernorm_over_vit_rule"],
            "max |logit difference|": f"{r['max_abs_logit_difference']:.1e}",
        }
        for r in result.bench.folding.to_dict("records")
    )


def folding_figure(result: SpeedResult):
    """Inference images/s: ViT (and ViT with its LayerNorms removed), each BatchNorm model unfolded and folded."""
    depths = list(result.settings.depths)
    fold = {(r["model"], r["depth"]): r for r in result.bench.folding.to_dict("records")}
    images = lambda model, key: [fold[(model, d)][key] for d in depths]
    unfolded = lambda model, d: dict(model=model, depth=d, pipeline="engine")
    speedup = lambda model, d: result.bench.speed(
        "inference", dict(folded=True, **unfolded(model, d)), unfolded(model, d)
    )
    removed = "ViT with its LayerNorms removed (not a model: what LayerNorm costs)"
    series = [
        ("ViT (LayerNorm)", figures.color("ViT"), None, 1.0, images(BN_MODELS[0], "vit_images_per_s")),
        (removed, figures.color("ViT"), "///", 0.45, images(BN_MODELS[0], "vit_without_layernorm_images_per_s")),
    ]
    for model in BN_MODELS:
        series.append((model, figures.color(model), None, 1.0, images(model, "unfolded_images_per_s")))
        folded = f"{model}, BatchNorm folded (× = folded / unfolded, mean of the rounds)"
        marks = [f"×{speedup(model, d).estimate:.2f}" for d in depths]  # by the rule from their rounds
        look = (figures.darker(figures.color(model), 0.35), "xx", 1.0)
        series.append((folded, *look, images(model, "folded_images_per_s"), marks))
    figures.use_style()
    fig, ax = plt.subplots(figsize=(12, 4.6))
    _bars(
        ax,
        [f"depth {d}" for d in depths],
        series,
        ylabel="images per second (higher is faster)",
        title=f"Inference, book's engine, test batch {result.settings.test_batch_size}",
    )
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1))
    fig.suptitle("What BatchNorm can buy at inference: folding it into the neighbouring Linear layers")
    return _save(
        fig,
        "bn_folding",
        result,
        "Inference throughput of ViTBNFFN and ViTBN before and after folding every eval-mode BatchNorm "
        "into its neighbouring Linear layer (same outputs to float precision), against ViT of the same "
        "depth; the hatched bar removes ViT's LayerNorms outright (wrong outputs) to show what LayerNorm, "
        "which cannot fold, costs.",
        data=_timed(result, per_round=True),
    )
