"""Chapter 07: Touvron et al.'s "three things" on this book's LayerNorm and BatchNorm ViTs.

(a) parallel blocks: depth ``d`` against ``d / branches`` blocks of ``branches`` MHSA and FFN
branches, the same parameters; (b) attention-only against full fine-tuning of the (a) models
at a new resolution (MNIST upscaled to 56x56, position embeddings interpolated); (c) the hMLP
stem against the linear patch embedding. The sequential runs of (a) are the baselines of (c)
and the starting points of (b), so every model is trained once and reused from the run store.
"""
from __future__ import annotations

import functools

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch
from torch.utils.flop_counter import FlopCounterMode

from .. import engine, figures, finetune, profiles, results, runs
from ..models import count_parameters
from ..runs import RunConfig
from ..system import pick_device

CHAPTER = "07_three_things"
SEED_SOURCE = "seed 003 (summary of Touvron et al., 2022)"


# ---------------------------------------------------------------------------------------------
# Configurations
# ---------------------------------------------------------------------------------------------
def _config(settings: dict, model: str, seed: int, **model_kwargs) -> RunConfig:
    return RunConfig(model=model, model_kwargs=model_kwargs, dataset="mnist", epochs=settings["epochs"],
                     lr=settings["lr"], batch_size=settings["batch_size"],
                     test_batch_size=settings["test_batch_size"], seed=seed, train_size=settings["train_size"],
                     test_size=settings["test_size"])


def _check_depth(depth: int, branches: int) -> None:
    if depth % branches:
        raise ValueError(f"depths must be multiples of branches={branches}; got depth {depth}")


def parallel_configs(settings: dict) -> list[tuple[dict, RunConfig]]:
    """(labels, config): each model at each depth, sequential and with ``branches`` parallel branches."""
    out = []
    b = settings["branches"]
    for depth in settings["depths"]:
        _check_depth(depth, b)
        for model in settings["models"]:
            for seed in range(settings["seeds"]):
                for variant, kwargs in (("sequential", dict(depth=depth)),
                                        ("parallel", dict(depth=depth // b, branches=b))):
                    blocks = f"{kwargs['depth']} x {kwargs.get('branches', 1)}"
                    out.append(({"variant": variant, "blocks": blocks, "total_depth": depth},
                                _config(settings, model, seed, **kwargs)))
    return out


def hmlp_configs(settings: dict) -> list[tuple[dict, RunConfig]]:
    """(labels, config): linear stem (the sequential runs of (a)) and hMLP stem, at the first depth."""
    depth = settings["depths"][0]
    out = []
    for model in settings["models"]:
        for seed in range(settings["seeds"]):
            for stem in ("linear", "hmlp"):
                kwargs = dict(depth=depth) if stem == "linear" else dict(depth=depth, stem="hmlp")
                out.append(({"variant": stem}, _config(settings, model, seed, **kwargs)))
    return out


_RETRAINED: set[str] = set()


def _train_configs(configs: list[RunConfig], force: bool, progress: bool) -> list[runs.Run]:
    """``runs.train_all``, where ``force`` retrains each run once per session, not once per part that
    uses it (the sequential runs of (a) serve (b) and (c) too)."""
    device_type = pick_device().type
    force = profiles.flag("force", force)
    if force:
        fresh = [c for c in configs if c.run_id(device_type) not in _RETRAINED]
        runs.train_all(fresh, force=True, progress=progress)
        _RETRAINED.update(c.run_id(device_type) for c in fresh)
    return runs.train_all(configs, progress=progress and not force)


def _train(pairs, force: bool, progress: bool = True) -> tuple[pd.DataFrame, list]:
    """Train (or reuse) every config; a tidy per-epoch table with the labels added."""
    trained = _train_configs([config for _, config in pairs], force, progress)
    table = runs.load_table(trained)
    labels = pd.DataFrame([{"run_id": run.run_id, **label} for (label, _), run in zip(pairs, trained)])
    return table.merge(labels, on="run_id"), trained


def _text_table(table: pd.DataFrame):
    """A table of sentences, shown whole (pandas would cut long cells at 50 characters); ``.data`` is the frame."""
    return (table.style.hide(axis="index")
            .set_properties(**{"text-align": "left", "white-space": "normal", "vertical-align": "top"})
            .set_table_styles([{"selector": "th", "props": [("text-align", "left")]}]))


def _steps(images: int, batch_size: int) -> int:
    """Training steps per epoch (the engine skips a last batch of one image)."""
    return images // batch_size + (1 if images % batch_size >= 2 else 0)


def protocol(settings: dict):
    """What each part trains, on which data, for how long (one row per part)."""
    def images(size, full):
        return f"{full:,}" if size is None else f"{size:,}"

    depth, b, seeds = settings["depths"][0], settings["branches"], settings["seeds"]
    models = ", ".join(settings["models"])
    data28 = (f"MNIST 28x28: {images(settings['train_size'], 60000)} train / "
              f"{images(settings['test_size'], 10000)} test images")
    depths = ", ".join(f"{d} vs {d // b} x {b}" for d in settings["depths"])
    return _text_table(pd.DataFrame([
        {"part": "(a) parallel blocks", "models": models, "what is compared": f"depth {depths} branches",
         "data": data28, "epochs": settings["epochs"], "lr": settings["lr"], "seeds": seeds,
         "runs": 2 * len(settings["depths"]) * len(settings["models"]) * seeds},
        {"part": "(b) fine-tuning", "models": models,
         "what is compared": f"full vs attention-only, from (a)'s depth-{depth} sequential models",
         "data": (f"MNIST upscaled to 56x56: {images(settings['ft_train_size'], 60000)} train / "
                  f"{images(settings['ft_test_size'], 10000)} test images"),
         "epochs": settings["ft_epochs"], "lr": settings["ft_lr"], "seeds": seeds,
         "runs": 2 * len(settings["models"]) * seeds},
        {"part": "(c) hMLP stem", "models": models,
         "what is compared": f"hMLP vs linear stem at depth {depth} (linear = (a)'s sequential runs)",
         "data": data28, "epochs": settings["epochs"], "lr": settings["lr"], "seeds": seeds,
         "runs": len(settings["models"]) * seeds},
    ]))


# ---------------------------------------------------------------------------------------------
# Measurements on stored models (cached per run id: the figure, table and claims cells share them)
# ---------------------------------------------------------------------------------------------
def _run(run_id: str) -> runs.Run:
    return runs.Run(runs.runs_dir() / run_id)


@functools.lru_cache(maxsize=None)
def _test_images(n: int, device: str) -> torch.Tensor:
    from ..data import load_mnist, to_float

    images, _ = load_mnist(train=False)
    return to_float(images[:n]).to(device)


@functools.lru_cache(maxsize=None)
def latency_ms(run_id: str, batch: int, repeats: int) -> float:
    """Milliseconds per image of an eval-mode forward pass over a batch of ``batch`` test images."""
    device = pick_device()
    model = _run(run_id).load_model(device)
    return 1000 * finetune.inference_latency(model, _test_images(batch, str(device)), repeats=repeats) / batch


@functools.lru_cache(maxsize=None)
def flops_per_image(run_id: str) -> float:
    model = _run(run_id).load_model("cpu")
    with FlopCounterMode(display=False) as counter:
        model(torch.zeros(1, 1, 28, 28))
    return counter.get_total_flops()


def _bars(ax, summary: pd.DataFrame, *, value: str, variants: list[str], ylabel: str, title: str, annotate=None):
    """Grouped bars: one group per model, one bar per variant (hatched after the first).

    ``annotate(row) -> str`` writes a label above each bar."""
    models = list(dict.fromkeys(summary["model"]))
    width = 0.8 / len(variants)
    for i, variant in enumerate(variants):
        rows = summary[summary["variant"] == variant].set_index("model").reindex(models)
        x = np.arange(len(models)) + (i - (len(variants) - 1) / 2) * width
        bars = ax.bar(x, rows[value], width,
                      color=[figures.color(m) for m in models], alpha=1.0 if i == 0 else 0.55,
                      hatch=None if i == 0 else "//", edgecolor="0.25", linewidth=0.6)
        if annotate is not None:
            ax.bar_label(bars, labels=[annotate(row) for _, row in rows.iterrows()], fontsize=8, padding=2)
    ax.set_xticks(np.arange(len(models)), models)
    ax.set(ylabel=ylabel, title=title)
    top = np.nanmax(summary[value].to_numpy(dtype=float))
    ax.set_ylim(0, 1.2 * top if np.isfinite(top) and top > 0 else 1)  # room for the labels above the bars


def _variant_legend(ax, variants: list[str], styles: dict[str, str]):
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], color="0.3", linestyle=styles[v], label=v) for v in variants]
    return ax.legend(handles=handles, loc="best", title="variant")


def _model_legend(fig, models: list[str], variants: list[str]):
    """One legend under the figure: a colour per model, then the bar style of each variant."""
    from matplotlib.patches import Patch

    handles = [Patch(color=figures.color(m), label=m) for m in models]
    handles += [Patch(facecolor="0.6", alpha=1.0 if i == 0 else 0.55, hatch=None if i == 0 else "//",
                      edgecolor="0.25", label=f"{variant} (bars)") for i, variant in enumerate(variants)]
    fig.legend(handles=handles, loc="outside lower center", ncol=len(handles), title=None)


def _accuracy_panel(ax, table: pd.DataFrame, variants: list[str], styles: dict[str, str], title: str):
    for (model, variant), group in table.groupby(["model", "variant"], sort=False):
        figures.mean_band(ax, group, x="epoch", y="test_acc", label=f"{model} {variant}",
                          color=figures.color(model), linestyle=styles[variant], marker="o")
    ax.set(xlabel="epoch", ylabel="test accuracy (%)", title=title)
    epochs = sorted(table["epoch"].unique())
    if len(epochs) <= 12:
        ax.set_xticks(epochs)
        ax.set_xlim(epochs[0] - 0.5, epochs[-1] + 0.5)
    else:
        figures.integer_epochs(ax)
    _variant_legend(ax, variants, styles)


# ---------------------------------------------------------------------------------------------
# (a) Parallel blocks
# ---------------------------------------------------------------------------------------------
PARALLEL_STYLES = {"sequential": "-", "parallel": "--"}


def _parallel(settings: dict, force: bool = False, progress: bool = False):
    table, trained = _train(parallel_configs(settings), force, progress)
    rows = []
    for run in trained:
        label = table.loc[table["run_id"] == run.run_id].iloc[0]
        model = run.load_model("cpu")
        rows.append({"run_id": run.run_id, "model": label["model"], "variant": label["variant"],
                     "blocks": label["blocks"], "total_depth": label["total_depth"], "seed": label["seed"],
                     "parameters": count_parameters(model),
                     "train_seconds": run.metrics["train_seconds"].median(),
                     "latency_1": latency_ms(run.run_id, 1, settings["latency_repeats"]),
                     "latency_n": latency_ms(run.run_id, settings["latency_batch"], settings["latency_repeats"]),
                     "final_acc": run.final_accuracy})
    return table, pd.DataFrame(rows)


def parallel_blocks(settings: dict, force: bool = False):
    """Train sequential and parallel models; save and return the figure ``new/parallel_blocks``."""
    table, per_run = _parallel(settings, force, progress=True)
    depths = settings["depths"]
    variants = list(PARALLEL_STYLES)
    fig, axes = plt.subplots(1, len(depths) + 2, figsize=(5 * (len(depths) + 2), 4.4))
    for ax, depth in zip(axes, depths):
        _accuracy_panel(ax, table[table["total_depth"] == depth], variants, PARALLEL_STYLES,
                        f"accuracy: depth {depth} vs {depth // settings['branches']} x {settings['branches']}")
    first = f"depth {depths[0]} vs {depths[0] // settings['branches']} x {settings['branches']}"
    summary = per_run[per_run["total_depth"] == depths[0]].groupby(["model", "variant"], sort=False).agg(
        train_seconds=("train_seconds", "mean"), latency_1=("latency_1", "mean")).reset_index()
    _bars(axes[-2], summary, value="train_seconds", variants=variants, ylabel="train time per epoch (s)",
          title=f"training time ({first})")
    _bars(axes[-1], summary, value="latency_1", variants=variants, ylabel="latency per image (ms)",
          title=f"inference latency, batch of 1 ({first})")
    _model_legend(fig, settings["models"], variants)
    fig.suptitle(f"Parallel blocks: {settings['branches']} MHSA + {settings['branches']} FFN branches per block "
                 "at the same parameter count")
    return figures.save_figure(
        fig, "07_parallel_blocks", chapter=CHAPTER, reproduces="new/parallel_blocks", profile=settings["profile"],
        caption="Sequential blocks against parallel blocks with the same parameters: test accuracy per epoch "
                "(solid sequential, dashed parallel), training time per epoch (median over epochs) and inference "
                "latency at batch 1 (fastest of several passes).",
        run_ids=per_run["run_id"])


def parallel_blocks_table(settings: dict):
    """Per model and structure: parameters, final accuracy (mean ± sd), train time, latency."""
    table, per_run = _parallel(settings)
    rows = []
    for (depth, model, variant), group in per_run.groupby(["total_depth", "model", "variant"], sort=False):
        rows.append({"model": model, "blocks (depth x branches)": group["blocks"].iloc[0],
                     "parameters": int(group["parameters"].iloc[0]),
                     "final accuracy (%)": results.mean_sd(group["final_acc"], 2),
                     "train s/epoch (median)": group["train_seconds"].mean(),
                     "latency, batch 1 (ms/image)": group["latency_1"].mean(),
                     f"latency, batch {settings['latency_batch']} (ms/image)": group["latency_n"].mean(),
                     "seeds": len(group)})
    out = pd.DataFrame(rows)
    return figures.save_table(
        out, "07_parallel_blocks_table", chapter=CHAPTER, reproduces="new/parallel_blocks_table",
        profile=settings["profile"], run_ids=per_run["run_id"],
        caption="Sequential vs parallel blocks at equal parameters (latency: eval-mode forward pass, fastest of "
                f"{settings['latency_repeats']})")


def _ratio_text(per_run: pd.DataFrame, value: str, a: str, b: str, fmt="{:.2f}x") -> str:
    """Per model: mean(value of variant a) / mean(value of variant b)."""
    parts = []
    for model, group in per_run.groupby("model", sort=False):
        means = group.groupby("variant")[value].mean()
        parts.append(f"{model} {fmt.format(means[a] / means[b])}")
    return ", ".join(parts)


def _difference_text(per_run: pd.DataFrame, a: str, b: str, value: str = "final_acc") -> str:
    """Per model: final accuracy of a minus b (pp), paired by seed; ± sd when several seeds."""
    parts = []
    for model, group in per_run.groupby("model", sort=False):
        pivot = group.pivot_table(index="seed", columns="variant", values=value)
        diff = pivot[a] - pivot[b]
        parts.append(f"{model} {results.mean_sd(diff, 2)} pp")
    return ", ".join(parts)


def parallel_blocks_claims(settings: dict):
    """The seed's statements about parallel blocks next to what this run measured."""
    _, per_run = _parallel(settings)
    seeds = settings["seeds"]
    out = []
    for depth, group in per_run.groupby("total_depth", sort=False):
        params = group.groupby(["model", "variant"])["parameters"].first().unstack()
        out.append({
            "question": f"same parameters (depth {depth})",
            "seed reports": "each parallel block has the parameters and compute of the blocks it replaces",
            "this run": "equal for every model" if (params["parallel"] == params["sequential"]).all()
            else f"differ: {params.to_dict()}"})
        out.append({
            "question": f"accuracy, parallel - sequential (depth {depth})",
            "seed reports": "2 branches is the best choice; parallel helps deeper, harder-to-optimise models "
                            "(ViT-S60: S20x3 ~ S30x2)",
            "this run": f"{_difference_text(group, 'parallel', 'sequential')} ({seeds} seed{'s' * (seeds > 1)})"})
        out.append({
            "question": f"latency at batch 1, sequential / parallel (depth {depth})",
            "seed reports": "clearly faster for one image at a time on a V100 GPU",
            "this run": _ratio_text(group, "latency_1", "sequential", "parallel") + " (>1 = parallel faster)"})
        out.append({
            "question": f"latency at batch {settings['latency_batch']}, sequential / parallel (depth {depth})",
            "seed reports": "no gain once the batch is large",
            "this run": _ratio_text(group, "latency_n", "sequential", "parallel")})
        out.append({
            "question": f"training time per epoch, sequential / parallel (depth {depth})",
            "seed reports": "(not reported in the summary)",
            "this run": _ratio_text(group, "train_seconds", "sequential", "parallel")})
    return _text_table(pd.DataFrame(out))


# ---------------------------------------------------------------------------------------------
# (b) Attention-only fine-tuning at a new resolution
# ---------------------------------------------------------------------------------------------
FINETUNE_STYLES = {"full": "-", "attention only": "--"}
FINETUNE_MODES = {"full": "all", "attention only": "attention"}


def _source_configs(settings: dict) -> list[RunConfig]:
    depth = settings["depths"][0]
    return [config for label, config in parallel_configs(settings)
            if label["variant"] == "sequential" and label["total_depth"] == depth]


def finetune_configs(settings: dict, force: bool = False, progress: bool = False) -> list[tuple[dict, RunConfig]]:
    """(labels, config) for each source model (trained first if need be) and each fine-tuning mode."""
    sources = _train_configs(_source_configs(settings), force, progress)
    out = []
    for source in sources:
        config = source.config
        for variant, trainable in FINETUNE_MODES.items():
            ft = RunConfig(model=config.model, model_kwargs={**config.model_kwargs, "image_size": 56},
                           dataset="mnist56", epochs=settings["ft_epochs"], lr=settings["ft_lr"],
                           batch_size=settings["batch_size"], test_batch_size=settings["test_batch_size"],
                           seed=config.seed, train_size=settings["ft_train_size"],
                           test_size=settings["ft_test_size"], init_from=source.run_id, trainable=trainable)
            out.append(({"variant": variant, "source": source.run_id}, ft))
    return out


@functools.lru_cache(maxsize=None)
def accuracy_before_finetuning(source_id: str, train_size: int | None, test_size: int | None,
                               test_batch_size: int) -> float:
    """The MNIST-trained model moved to 56x56 (position embedding interpolated) with no training: test accuracy."""
    device = pick_device()
    source = _run(source_id)
    kwargs = {**source.config.model_kwargs, "image_size": 56}
    from ..models import build_model

    model = build_model(source.config.model, **kwargs)
    state = torch.load(source.folder / "model.pt", map_location="cpu", weights_only=True)
    grid = source.load_model("cpu").grid_size
    finetune.load_resized(model, state, grid).to(device).eval()
    _, test = runs.image_sets("mnist56", train_size, test_size, str(device))  # the fine-tuning's own test set
    return engine.evaluate(model, test, batch_size=test_batch_size, device=device)["test_acc"]


@functools.lru_cache(maxsize=None)
def step_memory(run_id: str, batch_size: int, train_size: int | None, test_size: int | None) -> dict:
    """Memory of one training step of the fine-tuning run's model with its trainable set (MiB)."""
    device = pick_device()
    run = _run(run_id)
    model = run.load_model(device)
    finetune.set_trainable(model, run.config.trainable)
    train, _ = runs.image_sets("mnist56", train_size, test_size, str(device))
    images, labels = next(train.batches(batch_size))
    return finetune.step_memory(model, images, labels)


def _finetune(settings: dict, force: bool = False, progress: bool = False):
    pairs = finetune_configs(settings, force, progress)
    table, trained = _train(pairs, force, progress)
    rows = []
    for (label, _), run in zip(pairs, trained):
        record = run.record
        steps = _steps(record["train_images"], run.config.batch_size)
        compute = run.metrics["train_seconds"] - run.metrics["data_seconds"]
        memory = step_memory(run.run_id, run.config.batch_size, settings["ft_train_size"], settings["ft_test_size"])
        rows.append({"run_id": run.run_id, "model": run.config.model, "variant": label["variant"],
                     "seed": run.config.seed, "source": label["source"],
                     "trainable": record["parameters"]["trainable"], "total": record["parameters"]["total"],
                     "step_ms": 1000 * compute.median() / steps,
                     "memory_accounted": memory["accounted"], "memory_activations": memory["activations"],
                     "memory_cuda_peak": memory["cuda_peak"], "final_acc": run.final_accuracy,
                     "before": accuracy_before_finetuning(label["source"], settings["ft_train_size"],
                                                          settings["ft_test_size"], settings["test_batch_size"])})
    return table, pd.DataFrame(rows)


def _memory_column(per_run: pd.DataFrame) -> tuple[str, str]:
    if per_run["memory_cuda_peak"].notna().all():
        return "memory_cuda_peak", "peak GPU memory per step (MiB)"
    return "memory_accounted", "tensor memory per step (MiB)"


def attention_finetune(settings: dict, force: bool = False):
    """Fine-tune every source model at 56x56, fully and attention-only; figure ``new/attention_finetune``."""
    table, per_run = _finetune(settings, force, progress=True)
    variants = list(FINETUNE_STYLES)
    start = per_run[["run_id", "model", "variant", "seed", "before"]].rename(columns={"before": "test_acc"})
    start = start.assign(epoch=0)
    curves = pd.concat([start, table[["run_id", "model", "variant", "seed", "epoch", "test_acc"]]])
    fig, axes = plt.subplots(1, 4, figsize=(19, 4.4))
    _accuracy_panel(axes[0], curves.sort_values("epoch"), variants, FINETUNE_STYLES,
                    "accuracy at 56x56 (epoch 0: no fine-tuning)")
    summary = per_run.groupby(["model", "variant"], sort=False).agg(
        trainable=("trainable", "mean"), total=("total", "mean"), step_ms=("step_ms", "mean"),
        memory_accounted=("memory_accounted", "mean"),
        memory_cuda_peak=("memory_cuda_peak", "mean")).reset_index()
    summary["trainable_k"] = summary["trainable"] / 1000
    _bars(axes[1], summary, value="trainable_k", variants=variants, ylabel="trainable parameters (thousands)",
          title="weights updated (and stored per task)",
          annotate=lambda row: f"{100 * row['trainable'] / row['total']:.0f} %")
    column, label = _memory_column(per_run)
    _bars(axes[2], summary, value=column, variants=variants, ylabel=label, title="memory of a training step")
    _bars(axes[3], summary, value="step_ms", variants=variants, ylabel="compute time per step (ms)",
          title="time per training step")
    _model_legend(fig, settings["models"], variants)
    depth = settings["depths"][0]
    fig.suptitle(f"Fine-tuning depth-{depth} MNIST models at 56x56: every weight vs attention only")
    caption = ("Fine-tuning models trained on 28x28 MNIST on MNIST upscaled to 56x56 (64 patches instead of 16; "
               "position embeddings interpolated bicubically): test accuracy, trainable parameters, memory of "
               "one training step (" + ("CUDA peak allocated" if column == "memory_cuda_peak" else
               "weights + gradients + Adam state + tensors saved for backward") + ") and compute time per step.")
    return figures.save_figure(fig, "07_attention_finetune", chapter=CHAPTER, reproduces="new/attention_finetune",
                               profile=settings["profile"], caption=caption,
                               run_ids=list(per_run["run_id"]) + list(per_run["source"]))


def attention_finetune_table(settings: dict):
    _, per_run = _finetune(settings)
    rows = []
    for (model, variant), group in per_run.groupby(["model", "variant"], sort=False):
        rows.append({"model": model, "fine-tuned": variant,
                     "before fine-tuning (%)": results.mean_sd(group["before"], 2),
                     "final accuracy (%)": results.mean_sd(group["final_acc"], 2),
                     "trainable parameters": int(group["trainable"].iloc[0]),
                     "of total (%)": 100 * group["trainable"].iloc[0] / group["total"].iloc[0],
                     "tensor memory per step (MiB)": group["memory_accounted"].mean(),
                     "of which activations (MiB)": group["memory_activations"].mean(),
                     "CUDA peak per step (MiB)": group["memory_cuda_peak"].mean(),
                     "compute ms/step": group["step_ms"].mean(), "seeds": len(group)})
    out = pd.DataFrame(rows)
    if out["CUDA peak per step (MiB)"].isna().all():
        out = out.drop(columns="CUDA peak per step (MiB)")
    return figures.save_table(
        out, "07_attention_finetune_table", chapter=CHAPTER, reproduces="new/attention_finetune_table",
        profile=settings["profile"], run_ids=list(per_run["run_id"]) + list(per_run["source"]),
        caption="Full vs attention-only fine-tuning at 56x56 (memory: one Adam step, batch "
                f"{settings['batch_size']}; step time: training compute without the data pipeline)")


def attention_finetune_claims(settings: dict):
    _, per_run = _finetune(settings)
    column, _ = _memory_column(per_run)

    def saving(value: str) -> str:
        parts = []
        for model, group in per_run.groupby("model", sort=False):
            means = group.groupby("variant")[value].mean()
            parts.append(f"{model} {100 * (1 - means['attention only'] / means['full']):.0f} %")
        return ", ".join(parts)

    attention = per_run[per_run["variant"] == "attention only"]
    fractions = (100 * attention["trainable"] / attention["total"]).groupby(attention["model"], sort=False).mean()
    before = per_run.groupby("model", sort=False)["before"].mean()
    return _text_table(pd.DataFrame([
        {"question": "accuracy, attention only - full (pp)",
         "seed reports": "MHSA-only fine-tuning at 384x384 is very close to full fine-tuning (ImageNet-val and "
                         "-V2); FFN-only is clearly worse",
         "this run": _difference_text(per_run, "attention only", "full")
                     + "; before fine-tuning: " + ", ".join(f"{m} {v:.1f} %" for m, v in before.items())},
        {"question": "memory saved by attention only",
         "seed reports": "about 10 % of GPU memory",
         "this run": saving(column) + (" (CUDA peak)" if column == "memory_cuda_peak" else
                                       " (tensor accounting: weights, gradients, Adam state, saved activations)")},
        {"question": "training time saved per step",
         "seed reports": "about 10 % faster (fewer gradients to compute)",
         "this run": saving("step_ms")},
        {"question": "weights to store per fine-tuned model",
         "seed reports": "MHSA weights are about 1/3 of the total: 66 % less storage per extra resolution",
         "this run": ", ".join(f"{m} {v:.0f} % of the weights" for m, v in fractions.items())},
    ]))


# ---------------------------------------------------------------------------------------------
# (c) hMLP stem
# ---------------------------------------------------------------------------------------------
HMLP_STYLES = {"linear": "-", "hmlp": "--"}


def patch_mixing(model: torch.nn.Module, *, patch: int = 5, seed: int = 0) -> float:
    """Largest change of any *other* patch's token when one patch's pixels are redrawn (eval mode)."""
    model.eval()
    generator = torch.Generator().manual_seed(seed)
    x = torch.rand(2, 1, 28, 28, generator=generator)
    grid_w = model.grid_size[1]
    side = 28 // grid_w
    row, col = divmod(patch, grid_w)
    y = x.clone()
    y[:, :, row * side:(row + 1) * side, col * side:(col + 1) * side] = torch.rand(2, 1, side, side,
                                                                                 generator=generator)
    with torch.no_grad():
        a, b = model.to_patch_embedding(x), model.to_patch_embedding(y)
    others = [i for i in range(a.shape[1]) if i != patch]
    return (a[:, others] - b[:, others]).abs().max().item()


def _hmlp(settings: dict, force: bool = False, progress: bool = False):
    pairs = hmlp_configs(settings)
    table, trained = _train(pairs, force, progress)
    rows = []
    for (label, _), run in zip(pairs, trained):
        model = run.load_model("cpu")
        rows.append({"run_id": run.run_id, "model": run.config.model, "variant": label["variant"],
                     "seed": run.config.seed, "parameters": count_parameters(model),
                     "stem_parameters": count_parameters(model.to_patch_embedding),
                     "flops": flops_per_image(run.run_id), "train_seconds": run.metrics["train_seconds"].median(),
                     "final_acc": run.final_accuracy, "mixing": patch_mixing(model)})
    return table, pd.DataFrame(rows)


def hmlp_stem(settings: dict, force: bool = False):
    """Linear patch embedding vs hMLP stem: figure ``new/hmlp_stem``."""
    table, per_run = _hmlp(settings, force, progress=True)
    variants = list(HMLP_STYLES)
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.4))
    _accuracy_panel(axes[0], table, variants, HMLP_STYLES, f"accuracy (depth {settings['depths'][0]})")
    summary = per_run.groupby(["model", "variant"], sort=False).agg(
        train_seconds=("train_seconds", "mean"), stem_k=("stem_parameters", "mean")).reset_index()
    summary["stem_k"] = summary["stem_k"] / 1000
    _bars(axes[1], summary, value="train_seconds", variants=variants, ylabel="train time per epoch (s)",
          title="training time")
    _bars(axes[2], summary, value="stem_k", variants=variants, ylabel="stem parameters (thousands)",
          title="patch-embedding parameters")
    _model_legend(fig, settings["models"], variants)
    fig.suptitle("Linear patch embedding vs hMLP stem (7x7 patches: 7x7 conv, then two 1x1 stages)")
    return figures.save_figure(
        fig, "07_hmlp_stem", chapter=CHAPTER, reproduces="new/hmlp_stem", profile=settings["profile"],
        caption="The hMLP stem against the linear patch embedding, each with the model's own norm: test accuracy "
                "per epoch (solid linear, dashed hMLP), training time per epoch and the stem's parameters.",
        run_ids=per_run["run_id"])


def hmlp_stem_table(settings: dict):
    _, per_run = _hmlp(settings)
    rows = []
    for (model, variant), group in per_run.groupby(["model", "variant"], sort=False):
        rows.append({"model": model, "stem": variant, "parameters": int(group["parameters"].iloc[0]),
                     "stem parameters": int(group["stem_parameters"].iloc[0]),
                     "MFLOPs per image": group["flops"].iloc[0] / 1e6,
                     "final accuracy (%)": results.mean_sd(group["final_acc"], 2),
                     "train s/epoch (median)": group["train_seconds"].mean(),
                     "max change of other patches' tokens": group["mixing"].max(), "seeds": len(group)})
    return figures.save_table(
        pd.DataFrame(rows), "07_hmlp_stem_table", chapter=CHAPTER, reproduces="new/hmlp_stem_table",
        profile=settings["profile"], run_ids=per_run["run_id"],
        caption="Linear patch embedding vs hMLP stem (FLOPs: torch's FlopCounterMode, one forward pass; patch "
                "mixing: eval mode, one patch's pixels redrawn)")


def hmlp_stem_claims(settings: dict):
    _, per_run = _hmlp(settings)
    flops = per_run.groupby(["model", "variant"], sort=False)["flops"].first().unstack()
    return _text_table(pd.DataFrame([
        {"question": "accuracy, hMLP - linear (pp)",
         "seed reports": "no accuracy against the linear stem; among the stems compared, hMLP 'achieved better "
                         "accuracy-computation balance'",
         "this run": _difference_text(per_run, "hmlp", "linear")},
        {"question": "extra compute of hMLP",
         "seed reports": "less than 1 % more FLOPs than a linear projection for ViT-B (17.73 GFLOPs)",
         "this run": ", ".join(f"{m} {100 * (flops.loc[m, 'hmlp'] / flops.loc[m, 'linear'] - 1):+.1f} % FLOPs"
                               for m in flops.index)},
        {"question": "patches never mixed",
         "seed reports": "each 16x16 patch is processed on its own",
         "this run": "largest change of another patch's token when one patch changes: "
                     + ", ".join(f"{variant} {value:.1e}" for variant, value in
                                 per_run.groupby("variant", sort=False)["mixing"].max().items())},
    ]))


# ---------------------------------------------------------------------------------------------
# The web app's model
# ---------------------------------------------------------------------------------------------
def app_model():
    """Which stored run ``python -m vitbn_nb.app`` would serve, and why."""
    from ..app import model_choice

    run = model_choice()
    if run is None:
        return _text_table(pd.DataFrame([{"run": "(none yet)",
                                          "note": "the app trains a small ViTBNFFN on first start"}]))
    config = run.config
    return _text_table(pd.DataFrame([{"run": run.run_id, "model": config.model,
                                      "depth": config.model_kwargs.get("depth"), "dataset": config.dataset,
                                      "train images": run.record["train_images"],
                                      "final accuracy (%)": round(run.final_accuracy, 2)}]))


__all__ = ["accuracy_before_finetuning", "app_model", "attention_finetune", "attention_finetune_claims",
           "attention_finetune_table", "finetune_configs", "hmlp_configs", "hmlp_stem", "hmlp_stem_claims",
           "hmlp_stem_table", "latency_ms", "parallel_blocks", "parallel_blocks_claims", "parallel_blocks_table",
           "parallel_configs", "patch_mixing", "protocol", "step_memory"]
