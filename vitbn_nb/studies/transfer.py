"""Chapter 06: the optimised trio on a digit set they never saw (the series' EMNIST transfer, announced in article 1).

ViT, ViTBNFFN and ViTBN, all at depth 6 (as the reference repository's transfer checkpoints
are), are trained on augmented MNIST for the same number of epochs with optimised learning
rates and batch sizes (under ``paper`` optimised again on augmented MNIST at depth 6, as the
series did; smaller profiles reuse chapter 04's), together with a small CNN trained on the
same data (Adam, fixed lr and batch) as the order-of-magnitude reference for inference time.
Each is then evaluated on EMNIST digits: accuracy, and the time of one full pass over the set
(eval mode, ``inference_mode``, the device synchronised before each clock read; the median of
several passes after a warm-up pass).

EMNIST cannot be downloaded without internet; ``data.load_emnist_digits`` then returns
scikit-learn's 1,797 8x8 digits made MNIST-style, and says so in its ``source`` string, which
this module puts in every caption and in the manifest (``transfer_set``).
"""
from __future__ import annotations

import functools
import statistics

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from .. import data, engine, figures, hpo, results, runs
from ..models import build_model, count_parameters
from ..paths import runs_dir
from ..runs import RunConfig
from ..system import pick_device
from . import bayes_opt

CHAPTER = "06_emnist_transfer"
DATASET = "mnist_aug"
MODELS = ("ViT", "ViTBNFFN", "ViTBN")
REFERENCE = "CNN"
ALL_MODELS = (*MODELS, REFERENCE)
REQUIRED = ("seeds", "reoptimise", "trials", "trial_epochs", "epochs", "depth", "test_batch_size", "train_size",
            "test_size", "inference_repeats", "cnn_lr", "cnn_batch_size", "profile")
#: "A significant gain": the BN model's pass at least this much shorter than ViT's (g_v = 1 - 1/r_v).
SIGNIFICANT_GAIN = 0.10
#: What article 1's introduction says of the series' transfer article (not among the sources) (no numbers are given).
SEED_CLAIM = {
    "bn_faster": "the models with BatchNorm register a significant gain in inference time on EMNIST",
    "cnn": "as an order-of-magnitude estimate, the inference times are compared with a CNN trained on the same data",
}


def _check(settings: dict) -> None:
    missing = [key for key in REQUIRED if key not in settings]
    if missing:
        raise ValueError(f"settings for {CHAPTER} lack {missing}; build them with profiles.settings('{CHAPTER}', profile)")
    for key in ("seeds", "epochs", "depth", "inference_repeats", "cnn_batch_size"):
        if not isinstance(settings[key], int) or settings[key] < 1:
            raise ValueError(f"settings[{key!r}]={settings[key]!r} is not allowed; it must be an integer >= 1")


@functools.lru_cache(maxsize=2)
def _transfer_set(root_key: str):
    return data.load_emnist_digits()


def transfer_set():
    """(images uint8 [N,1,28,28], labels, source) of the digit set the models are tested on."""
    return _transfer_set(str(data.data_dir()))


def transfer_source() -> str:
    return transfer_set()[2]


def transfer_note():
    """A sentence for the chapter: which transfer set this run used, and how many images."""
    from IPython.display import Markdown

    images, _, source = transfer_set()
    if source == data.EMNIST_SOURCE:
        text = f"**Transfer set used in this run: EMNIST digits**, test split ({len(images):,} images, orientation fixed)."
    else:
        text = (f"**Transfer set used in this run: not EMNIST.** EMNIST could not be downloaded here, so the models are "
                f"tested on scikit-learn's 8×8 handwritten digits, upsampled and centred MNIST-style "
                f"({len(images):,} images; source: `{source}`). Every caption below says so too.")
    return Markdown(text)


# ---------------------------------------------------------------------------------------------
# hyperparameters and training
# ---------------------------------------------------------------------------------------------
def hyperparameters(settings: dict, force: bool = False) -> pd.DataFrame:
    """The lr and batch size of each model and where they come from (optimising first under ``reoptimise``)."""
    _check(settings)
    if settings["reoptimise"]:
        bayes_opt.optimise(settings, force=force, dataset=DATASET, depth=settings["depth"])
        best = hpo.load_best(DATASET, settings["profile"])
        origin = "optimised here: augmented MNIST, tuned at depth {depth}, {trials} trials"
        print(f"Hyperparameters: {settings['trials']} Ax trials of {settings['trial_epochs']} epoch(s) per model "
              f"on augmented MNIST at depth {settings['depth']}.")
    else:
        best, where = bayes_opt.best_hyperparameters(settings["profile"])
        origin = "chapter 04: MNIST (no augmentation), tuned at depth {depth}, {trials} trials"
        print(f"Hyperparameters: {where}.")
    rows = [{"model": model, "depth": settings["depth"], "lr": best[model]["lr"], "batch_size": best[model]["batch_size"],
             "found by": origin.format(depth=best[model]["depth"], trials=best[model]["trials"])} for model in MODELS]
    rows.append({"model": REFERENCE, "depth": "—", "lr": settings["cnn_lr"], "batch_size": settings["cnn_batch_size"],
                 "found by": "fixed, not optimised"})
    return pd.DataFrame(rows)


def configs(hyper: pd.DataFrame, settings: dict) -> list[RunConfig]:
    """Every model (and the CNN) on augmented MNIST, equal epochs, each seed."""
    _check(settings)
    out = []
    for seed in range(settings["seeds"]):
        for _, row in hyper.iterrows():
            kwargs = {} if row["model"] == REFERENCE else {"depth": int(row["depth"])}
            out.append(RunConfig(model=row["model"], model_kwargs=kwargs, dataset=DATASET, epochs=settings["epochs"],
                                 lr=float(row["lr"]), batch_size=int(row["batch_size"]),
                                 test_batch_size=settings["test_batch_size"], seed=seed,
                                 train_size=settings["train_size"], test_size=settings["test_size"]))
    return out


def train(hyper: pd.DataFrame, settings: dict, force: bool = False) -> pd.DataFrame:
    """Train (or read back) every run; one row per run and epoch."""
    return runs.load_table(runs.train_all(configs(hyper, settings), force=force))


def overview(settings: dict) -> pd.DataFrame:
    """What the profile trains and measures: one row per model."""
    _check(settings)
    size = lambda n, full: f"{full:,} (all)" if n is None else f"{n:,} of {full:,}"
    return pd.DataFrame([{
        "model": model, "depth": settings["depth"] if model != REFERENCE else "—",
        "parameters": count_parameters(_blank(model, settings)),
        "training data": "augmented MNIST", "epochs": settings["epochs"], "seeds": settings["seeds"],
        "train images": size(settings["train_size"], 60000), "test images": size(settings["test_size"], 10000),
        "timed passes": settings["inference_repeats"],
    } for model in ALL_MODELS])


def _blank(model: str, settings: dict):
    return build_model(model) if model == REFERENCE else build_model(model, depth=settings["depth"])


# ---------------------------------------------------------------------------------------------
# measuring on the transfer set
# ---------------------------------------------------------------------------------------------
def time_passes(model, images, labels, *, batch_size: int, repeats: int, device=None) -> dict:
    """Accuracy (%) and the wall time of ``repeats`` full passes over ``images`` (after one untimed warm-up).

    Each pass is ``engine.evaluate``: eval mode, ``torch.inference_mode``, batches of
    ``batch_size``, the device synchronised before every clock read.
    """
    if repeats < 1:
        raise ValueError(f"repeats={repeats!r} is not allowed; time at least one pass")
    device = pick_device(device)
    model = model.to(device)
    images_set = engine.ImageSet(images.to(device), labels.to(device))
    first = engine.evaluate(model, images_set, batch_size=batch_size, device=device)  # warm-up: allocator, caches
    passes = [engine.evaluate(model, images_set, batch_size=batch_size, device=device) for _ in range(repeats)]
    seconds = [p["test_seconds"] for p in passes]
    return {"accuracy": first["test_acc"], "class_acc": first["class_acc"], "seconds": statistics.median(seconds),
            "all_seconds": seconds, "images": len(labels), "images_per_second": len(labels) / statistics.median(seconds)}


def measure(table: pd.DataFrame, settings: dict, device=None) -> pd.DataFrame:
    """Every trained run on the transfer set: one row per run (accuracy, median seconds per pass, images/s)."""
    _check(settings)
    images, labels, source = transfer_set()
    last = results.final_epochs(table)
    rows = []
    for _, run_row in last.iterrows():
        run = runs.Run(runs_dir() / run_row["run_id"])
        model = run.load_model(device)
        timing = time_passes(model, images, labels, batch_size=settings["test_batch_size"],
                             repeats=settings["inference_repeats"], device=device)
        rows.append({"model": run_row["model"], "depth": run_row["depth"], "seed": run_row["seed"],
                     "run_id": run_row["run_id"], "status": run_row["status"], "lr": run_row["lr"],
                     "batch_size": run_row["batch_size"], "parameters": count_parameters(model),
                     "mnist_aug_acc": run_row["test_acc"], "transfer_acc": timing["accuracy"],
                     "seconds": timing["seconds"], "images_per_second": timing["images_per_second"],
                     "images": timing["images"], "passes": len(timing["all_seconds"]), "transfer_set": source})
    return pd.DataFrame(rows)


def summary(measured: pd.DataFrame) -> pd.DataFrame:
    """One row per model: accuracies (mean ± sd over seeds), time per pass, images/s, speed-up vs ViT."""
    per_seed_vit = measured[measured["model"] == "ViT"].set_index("seed")["seconds"]
    rows = []
    for model in ALL_MODELS:
        one = measured[measured["model"] == model]
        if one.empty:
            continue
        speedups = [per_seed_vit[s] / t for s, t in zip(one["seed"], one["seconds"]) if s in per_seed_vit.index]
        depth = one["depth"].iloc[0]
        rows.append({
            "model": model, "depth": "—" if depth is None or pd.isna(depth) else int(depth),
            "parameters": int(one["parameters"].iloc[0]),
            "lr / batch": f"{one['lr'].iloc[0]:.3g} / {int(one['batch_size'].iloc[0])}",
            "augmented-MNIST test acc (%)": results.mean_sd(one["mnist_aug_acc"]),
            "transfer acc (%)": results.mean_sd(one["transfer_acc"]),
            "time per pass (s, median)": results.mean_sd(one["seconds"], 3),
            "images/s": f"{one['images_per_second'].mean():,.0f}",
            "speed-up vs ViT (T_ViT / T)": results.mean_sd(speedups, 2),
            "speed-up mean": float(np.mean(speedups)) if speedups else np.nan,
            "seeds": int(one["seed"].nunique()),
        })
    return pd.DataFrame(rows)


def findings(measured: pd.DataFrame) -> str:
    """What this run found, computed: the BN models' and the CNN's inference speed against ViT, and accuracy."""
    frame = summary(measured).set_index("model")
    source = measured["transfer_set"].iloc[0]
    parts = []
    for model in ("ViTBNFFN", "ViTBN"):
        if model in frame.index and np.isfinite(frame.loc[model, "speed-up mean"]):
            r = frame.loc[model, "speed-up mean"]
            parts.append(f"{model} passes the set {r:.2f}× as fast as ViT (g_v = {results.gain(r):.0f} %)")
    if REFERENCE in frame.index and np.isfinite(frame.loc[REFERENCE, "speed-up mean"]):
        r = frame.loc[REFERENCE, "speed-up mean"]
        parts.append(f"the CNN, the order-of-magnitude reference, {r:.1f}× as fast as ViT")
    accuracy = ", ".join(f"{m} {frame.loc[m, 'transfer acc (%)']} %" for m in ALL_MODELS if m in frame.index)
    return f"On {source}: " + "; ".join(parts) + f". Transfer accuracy: {accuracy}."


def transfer_table(measured: pd.DataFrame, settings: dict):
    """The chapter's table (saved): accuracy, inference time per pass, ratio to ViT, parameters."""
    source = measured["transfer_set"].iloc[0]
    frame = summary(measured).drop(columns="speed-up mean")
    caption = (f"Transfer set: {source} ({int(measured['images'].iloc[0]):,} images). Models trained on augmented "
               f"MNIST for {_epochs(settings['epochs'])}; time = median of {settings['inference_repeats']} full passes "
               f"(batch {settings['test_batch_size']}, eval mode, device synchronised), mean ± sd over seeds. "
               + findings(measured))
    return figures.save_table(frame, "emnist_transfer_table", chapter=CHAPTER, reproduces="new/emnist_transfer_table",
                              profile=settings["profile"], caption=caption, run_ids=measured["run_id"],
                              extra={"transfer_set": source}, precision=3)


def transfer_figure(measured: pd.DataFrame, settings: dict):
    """Accuracy and inference time per model on the transfer set (log time axis when the CNN is far faster)."""
    figures.use_style()
    source = measured["transfer_set"].iloc[0]
    present = [m for m in ALL_MODELS if m in set(measured["model"])]
    colours = [figures.color(m) for m in present]
    x = np.arange(len(present))
    fig, (left, right) = plt.subplots(1, 2, figsize=(12.5, 4.8))

    width = 0.38
    for offset, column, label, style in ((-width / 2, "mnist_aug_acc", "augmented-MNIST test set (trained on)",
                                          dict(alpha=0.35, hatch="//")),
                                         (width / 2, "transfer_acc", "transfer set (never seen)", dict(alpha=0.95))):
        means = [measured.loc[measured["model"] == m, column].mean() for m in present]
        bars = left.bar(x + offset, means, width, color=colours, edgecolor="0.25", label=label, **style)
        left.bar_label(bars, fmt="%.1f", fontsize=8, padding=2)
        for i, m in enumerate(present):
            values = measured.loc[measured["model"] == m, column]
            if len(values) > 1:
                left.scatter(np.full(len(values), x[i] + offset), values, color="0.15", s=10, zorder=3)
    left.set_xticks(x, [_tick(m, measured) for m in present])
    left.set(ylabel="accuracy (%)", ylim=(0, 122), title="accuracy")
    left.set_yticks(range(0, 101, 20))
    left.legend(loc="upper center", ncol=2, fontsize=8)  # above 100 %, clear of every bar

    seconds = [measured.loc[measured["model"] == m, "seconds"].mean() for m in present]
    bars = right.bar(x, seconds, 0.6, color=colours, edgecolor="0.25")
    log = max(seconds) / min(seconds) >= 10
    if log:
        figures.plain_log_axis(right)
    vit = seconds[present.index("ViT")] if "ViT" in present else None
    labels = []
    for m, t in zip(present, seconds):
        rate = measured.loc[measured["model"] == m, "images_per_second"].mean()
        text = f"{t * 1000:.0f} ms\n{rate:,.0f} img/s"
        if vit and m != "ViT":
            text += f"\n×{vit / t:.1f} vs ViT"
        labels.append(text)
    right.bar_label(bars, labels=labels, fontsize=8, padding=2)
    right.set_xticks(x, [_tick(m, measured) for m in present])
    top = max(seconds) * (4 if log else 1.35)
    right.set_ylim(top=top, **({} if log else {"bottom": 0}))
    right.set(ylabel=f"seconds per full pass{' (log scale)' if log else ''}",
              title=f"inference time per pass (median of {settings['inference_repeats']})")

    fig.suptitle(f"EMNIST transfer · trained on augmented MNIST ({_epochs(settings['epochs'])}), tested on: {source}\n"
                 f"ViT, ViTBNFFN, ViTBN at depth {settings['depth']}; the CNN as the order-of-magnitude reference")
    caption = (f"Transfer set: {source} ({int(measured['images'].iloc[0]):,} images). Left: accuracy on the "
               "augmented-MNIST test set and on the transfer set; right: time of one full pass over the transfer "
               f"set (batch {settings['test_batch_size']}, eval mode, device synchronised). " + findings(measured))
    return figures.save_figure(fig, "emnist_transfer_figure", chapter=CHAPTER, reproduces="new/emnist_transfer_figure",
                               profile=settings["profile"], caption=caption, run_ids=measured["run_id"],
                               extra={"transfer_set": source})


def _epochs(n: int) -> str:
    return f"{n} epoch{'' if n == 1 else 's'}"


def _tick(model: str, measured: pd.DataFrame) -> str:
    depth = measured.loc[measured["model"] == model, "depth"].iloc[0]
    return model if depth is None or pd.isna(depth) else f"{model}\n(depth {int(depth)})"


def samples_figure(settings: dict, n: int = 10):
    """A row of training digits (augmented MNIST) above a row of the transfer set, so the shift shows."""
    figures.use_style()
    images, labels, source = transfer_set()
    test = runs.image_sets(DATASET, settings["train_size"], settings["test_size"], "cpu")[1]
    train_x, train_y = test.images, test.labels
    fig, axes = plt.subplots(2, n, figsize=(1.1 * n, 2.9))
    for digit in range(n):
        for row, (x, y) in enumerate(((train_x, train_y), (images, labels))):
            index = int((y == digit).nonzero()[0, 0]) if (y == digit).any() else 0
            axes[row, digit].imshow(x[index, 0].cpu(), cmap="gray_r", vmin=0, vmax=255)
            axes[row, digit].set_xticks([])
            axes[row, digit].set_yticks([])
    axes[0, 0].set_ylabel("aug. MNIST", fontsize=9)
    axes[1, 0].set_ylabel("transfer", fontsize=9)
    fig.suptitle(f"first image of each digit: augmented MNIST test set (top) and the transfer set (bottom)\n"
                 f"transfer set: {source}", fontsize=10)
    return figures.save_figure(fig, "new_transfer_samples", chapter=CHAPTER, reproduces="new/transfer_samples",
                               profile=settings["profile"], caption=f"Digits the models trained on and the transfer "
                               f"set ({source})", extra={"transfer_set": source})


def comparison(measured: pd.DataFrame) -> pd.DataFrame:
    """The article's claims beside this run's numbers."""
    frame = summary(measured).set_index("model")
    source = measured["transfer_set"].iloc[0]
    rows = []
    for model in ("ViTBNFFN", "ViTBN"):
        if model in frame.index:
            r = frame.loc[model, "speed-up mean"]
            rows.append({"claim (article 1, on the transfer article)": SEED_CLAIM["bn_faster"], "model": model,
                         "this run": f"T_ViT / T = {frame.loc[model, 'speed-up vs ViT (T_ViT / T)']} (g_v = {results.gain(r):.0f} %)",
                         "verdict": ("as claimed" if results.gain(r) >= 100 * SIGNIFICANT_GAIN else "not as claimed")
                         + f" (significant: g_v ≥ {100 * SIGNIFICANT_GAIN:.0f} %)"})
    if REFERENCE in frame.index:
        r = frame.loc[REFERENCE, "speed-up mean"]
        rows.append({"claim (article 1, on the transfer article)": SEED_CLAIM["cnn"], "model": REFERENCE,
                     "this run": f"T_ViT / T_CNN = {frame.loc[REFERENCE, 'speed-up vs ViT (T_ViT / T)']}",
                     "verdict": "a reference, not a claim: article 1 gives no number for the CNN"})
    rows.append({"claim (article 1, on the transfer article)": "evaluated on EMNIST digits (40,000 images)", "model": "all",
                 "this run": f"{source} ({int(measured['images'].iloc[0]):,} images)",
                 "verdict": "same set" if source == data.EMNIST_SOURCE else "a different digit set (EMNIST unreachable)"})
    return pd.DataFrame(rows)


def comparison_table(measured: pd.DataFrame, settings: dict):
    source = measured["transfer_set"].iloc[0]
    return figures.save_table(comparison(measured), "emnist_transfer_vs_article", chapter=CHAPTER,
                              reproduces="new/emnist_transfer_vs_article", profile=settings["profile"],
                              caption=f"Article 1's statements about the transfer experiment beside this run "
                                      f"(transfer set: {source}). {findings(measured)}",
                              run_ids=measured["run_id"], extra={"transfer_set": source})
