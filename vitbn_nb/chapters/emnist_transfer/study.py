"""Chapter 06: the optimised depth-6 trio, trained on augmented MNIST, tested on a digit set they never saw (EMNIST
digits; offline, scikit-learn's 8x8 digits made MNIST-style, named in every caption), beside a small CNN as the
order-of-magnitude reference for inference time."""

from __future__ import annotations

from dataclasses import dataclass

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from ... import chapters, data, hpo
from ...engines import training
from ...limits import Deadline
from ...models import AS_RUN_DEPTH, build_model, count_parameters
from ...paths import stored_path
from ...publishing import figures, results
from ...publishing.results import epochs_text
from ...store import runs
from ...store.runs import RunConfig
from ...system import pick_device
from .. import Plan, panels
from . import article
from .judge import entries, rows_of
from .numbers import (
    ALL_MODELS,
    MODELS,
    REFERENCE,
    comparison,
    findings,
    predictions,
    rule_verdicts,
    set_text,
    summary,
    time_passes_interleaved,
)
from .settings import TransferSettings

DATASET = "mnist_aug"


def transfer_set() -> tuple:
    """(images uint8 [N,1,28,28], labels, source) of the digit set the models are tested on."""
    return data.load_emnist_digits()


def transfer_note():
    """A sentence for the chapter: which transfer set this run used, and how many images."""
    images, _, source = transfer_set()
    if source == data.EMNIST_SOURCE:
        return panels.markdown(
            f"**Transfer set used in this run: EMNIST digits**, test split ({len(images):,} images, orientation fixed)."
        )
    return panels.markdown(
        f"**Transfer set used in this run: not EMNIST.** EMNIST could not be downloaded here, so the models are "
        f"tested on scikit-learn's 8×8 handwritten digits, upsampled and centred MNIST-style "
        f"({len(images):,} images; source: `{source}`). Every caption below says so too."
    )


@dataclass(frozen=True)
class TransferResult(results.ChapterResult):
    """Chapter 06: the hyperparameters used (``hyper``), the training runs (``table``: one row per run and epoch)
    and the measurements on the transfer set (``measured``: one row per run)."""

    settings: TransferSettings
    hyper: pd.DataFrame
    table: pd.DataFrame
    measured: pd.DataFrame


def plan(settings: TransferSettings) -> Plan:
    """The CNN's runs; the transformers' follow from their optimised hyperparameters (here or chapter 04's)."""
    cnn = pd.DataFrame([{"model": REFERENCE, "lr": settings.cnn_lr, "batch_size": settings.cnn_batch_size}])
    studies = [hpo.model_study(model, settings, dataset=DATASET, depth=settings.depth) for model in MODELS]
    return Plan(
        hpo.best_runs(settings, cnn, dataset=DATASET),
        optimisations=studies if settings.reoptimise else [],
        then=(
            f"ViT, ViTBNFFN and ViTBN at depth {settings.depth} with their best lr and batch size"
            + "".join(f", {m} at depth {d}" for m, d in as_run_models(settings))
            + f", {settings.epochs} epochs x {settings.seeds} random seed(s)"
            + ("" if settings.reoptimise else " (hyperparameters from chapter 04)")
        ),
    )


def run(settings: TransferSettings, force: bool = False, device=None) -> TransferResult:
    """Choose the hyperparameters, train every model (or read them back), then time each on the transfer set."""
    hyper = _hyperparameters(settings, force=force)
    table = runs.load_table(
        training.train_all(hpo.best_runs(settings, hyper, dataset=DATASET), force=force, train=settings.train)
    )
    return TransferResult(settings, hyper, table, _measure(table, settings, device))


def after_optimisation(
    settings: TransferSettings, force: bool = False, deadline: Deadline | None = None
) -> list[RunConfig]:
    """Every model's runs with its hyperparameters (optimised now under ``reoptimise`` if not stored)."""
    return hpo.best_runs(settings, _hyperparameters(settings, force=force, deadline=deadline), dataset=DATASET)


def _hyperparameters(settings: TransferSettings, force: bool = False, deadline: Deadline | None = None) -> pd.DataFrame:
    """The lr and batch size of each model and where they come from (optimising first under ``reoptimise``)."""
    if settings.reoptimise:
        hpo.optimise_models(settings, force=force, dataset=DATASET, depth=settings.depth, deadline=deadline)
        best = hpo.load_best(DATASET, settings.profile)
        origin = "optimised here: augmented MNIST, tuned at depth {depth}, {trials} trials"
        print(
            f"Hyperparameters: {settings.trials} Ax trials of {settings.trial_epochs} epoch(s) per model "
            f"on augmented MNIST at depth {settings.depth}."
        )
    else:
        best, where = hpo.best_hyperparameters(chapters.settings("04_bayes_opt", settings.profile), deadline=deadline)
        origin = "chapter 04: MNIST (no augmentation), tuned at depth {depth}, {trials} trials"
        print(f"Hyperparameters: {where}.")
    return _hyperparameter_table(best, settings, origin)


def _hyperparameter_table(best: dict, settings: TransferSettings, origin: str) -> pd.DataFrame:
    """Each model's lr and batch size, where they come from, and the trial that chose them (its record, and through it
    the study's ledger, one hop from the table); the CNN's, fixed."""
    rows = []
    for model in MODELS:
        chosen = best[model]
        found = origin.format(depth=chosen["depth"], trials=chosen["trials"])
        rows.append((model, settings.depth, chosen["lr"], chosen["batch_size"], found, chosen.get("run_id", "—")))
    for model, depth in as_run_models(settings):
        _, _, lr, batch_size, found, trial = rows[MODELS.index(model)]
        found = f"as run: its depth-{settings.depth} values, {found}"
        rows.append((model, depth, lr, batch_size, found, trial))
    rows.append((REFERENCE, "—", settings.cnn_lr, settings.cnn_batch_size, "fixed, not optimised", "—"))
    return pd.DataFrame(rows, columns=["model", "depth", "lr", "batch_size", "found by", "best trial"])


def as_run_models(settings: TransferSettings) -> list[tuple[str, int]]:
    """(model, depth) of each BatchNorm model at the depth the series' transfer checkpoints computed (chapter 03's
    audit: one block), where ``as_run`` asks for it and it is not the chapter's depth already."""
    wanted = settings.as_run
    return [(m, AS_RUN_DEPTH[m]) for m in MODELS if wanted and m != "ViT" and AS_RUN_DEPTH[m] != settings.depth]


def stored_runs(settings: TransferSettings) -> list[RunConfig]:
    """The runs the stored hyperparameters lead to, nothing optimised here (none before the optimisation)."""
    best = hpo.load_best(DATASET if settings.reoptimise else hpo.MNIST, settings.profile)
    if best is None:
        return []
    return hpo.best_runs(settings, _hyperparameter_table(best, settings, origin="stored"), dataset=DATASET)


def hyperparameters(result: TransferResult):
    """The lr and batch size each model trained with, where they came from and the trial that chose them (saved)."""
    trials = [t for t in result.hyper["best trial"] if t != "—"]
    caption = (
        f"The learning rate and batch size each model trained with at depth {result.settings.depth}, and where they "
        "came from (the CNN is a fixed reference, not optimised)"
    )
    about = dict(reproduces="new/hyperparameters", caption=caption, runs=[*trials, *result.run_ids], precision=5)
    return figures.save_table(result.hyper, "06_hyperparameters", result, **about)


def measurements(result: TransferResult) -> pd.DataFrame:
    """One row per run: accuracy on the transfer set, median seconds per pass, images/s."""
    return result.measured


def overview(settings: TransferSettings) -> pd.DataFrame:
    """What the profile trains and measures: one row per model and depth."""
    entries = [(m, settings.depth) for m in MODELS] + as_run_models(settings) + [(REFERENCE, None)]
    return pd.DataFrame(
        [
            {
                "model": model,
                "depth": depth or "—",
                "parameters": count_parameters(build_model(model, **({"depth": depth} if depth else {}))),
                "training data": "augmented MNIST",
                "epochs": settings.epochs,
                "seeds": settings.seeds,
                "train images": panels.images(settings.train_size, 60000),
                "test images": panels.images(settings.test_size, 10000),
                "timed rounds": settings.inference_repeats,
                "images per timed pass": f"{settings.transfer_images:,}",
            }
            for model, depth in entries
        ]
    )


def _measure(table: pd.DataFrame, settings: TransferSettings, device=None) -> pd.DataFrame:
    """Every trained run on the transfer set, one row per run; all runs' passes are timed in the same interleaved
    rounds (so that they pair up under the book's rule), all again when one lacks them."""
    images, labels, source = transfer_set()
    last = results.final_epochs(table)
    stored = {run_id: runs.Run(stored_path(run_id)) for run_id in last["run_id"]}
    count = settings.transfer_images
    repeated = "" if count == len(labels) else f" repeated to {count:,} a pass"
    name = (
        f"transfer passes: {source}, {len(labels)} images{repeated}, batch {settings.test_batch_size}, "
        f"{settings.inference_repeats} rounds interleaved with the chapter's other runs"
    )
    timed = {}
    if any(name not in run.record.get("measurements", {}) for run in stored.values()):
        models = {run_id: run.load_model(device) for run_id, run in stored.items()}
        passes = dict(batch_size=settings.test_batch_size, repeats=settings.inference_repeats, device=device)
        timed = time_passes_interleaved(models, images, labels, timed_images=count, **passes)
    predicting = f"transfer predictions per class: {source}, {len(labels)} images; and accuracy with the images "
    predicting += "binarised at half intensity"
    rows = []
    for _, run_row in last.iterrows():
        run = stored[run_row["run_id"]]
        # when one run had to be timed, every run was, in the same rounds: all keep the new rounds
        timing = runs.measured(run, name, lambda run=run: timed[run.run_id], pick_device(device), retake=bool(timed))
        predict = lambda run=run: predictions(run.load_model(device), images, labels, device=device)
        predicted = runs.measured(run, predicting, predict, None)
        rows.append(
            {
                **run_row[["model", "depth", "seed", "run_id", "status", "lr", "batch_size"]],
                "parameters": run.record["parameters"]["total"],
                "mnist_aug_acc": run_row["test_acc"],
                "transfer_acc": timing["accuracy"],
                "seconds": timing["seconds"],
                "round_seconds": list(timing["all_seconds"]),
                "images_per_second": timing["images_per_second"],
                "images": timing["images"],
                "distinct_images": timing.get("distinct_images", timing["images"]),
                "passes": len(timing["all_seconds"]),
                "transfer_set": source,
                "largest_predicted_class": int(np.argmax(predicted["counts"])),
                "largest_predicted_share": max(predicted["counts"]) / sum(predicted["counts"]),
                "binarised_acc": predicted["binarised_accuracy"],
            }
        )
    return pd.DataFrame(rows)


def transfer_table(result: TransferResult):
    """The chapter's table (saved): accuracy, inference time per pass, ratio to ViT, parameters."""
    measured, settings = result.measured, result.settings
    source = measured["transfer_set"].iloc[0]
    frame = summary(measured).drop(columns="speed-up mean")
    caption = (
        f"Transfer set: {set_text(measured)}. Models trained on augmented MNIST for {epochs_text(settings.epochs)}; "
        f"time = median of {settings.inference_repeats} full passes in interleaved rounds (batch "
        f"{settings.test_batch_size}, eval mode, device synchronised), {figures.interval_label(measured)}. "
        + findings(measured)
    )
    return _save(frame, "emnist_transfer_table", result, caption, source, precision=3)


def transfer_figure(result: TransferResult):
    """Accuracy and inference time per model on the transfer set (log time axis when the CNN is far faster)."""
    measured, settings = result.measured, result.settings
    figures.use_style()
    source = measured["transfer_set"].iloc[0]
    present = entries(measured)
    rows = [rows_of(measured, model, depth) for model, depth in present]
    colours = [figures.color(model) for model, _ in present]
    # the BatchNorm models as run (one block) drawn lighter than the same models at the chapter's depth
    shade = [0.55 if depth not in (None, settings.depth) else 1.0 for _, depth in present]
    ticks = [_tick(model, depth) for model, depth in present]
    x = np.arange(len(present))
    fig, (left, right) = plt.subplots(1, 2, figsize=(13.5, 4.8))

    width = 0.38
    for offset, column, label, style in (
        (-width / 2, "mnist_aug_acc", "augmented-MNIST test set (trained on)", dict(alpha=0.35, hatch="//")),
        (width / 2, "transfer_acc", "transfer set (never seen)", dict(alpha=0.95)),
    ):
        means = [one[column].mean() for one in rows]
        bars = left.bar(x + offset, means, width, color=colours, edgecolor="0.25", label=label, **style)
        for bar, lighter in zip(bars, shade):
            bar.set_alpha(style["alpha"] * lighter)
        left.bar_label(bars, fmt="%.1f", fontsize=8, padding=2)
        for i, one in enumerate(rows):
            if len(one) > 1:
                left.scatter(np.full(len(one), x[i] + offset), one[column], color="0.15", s=10, zorder=3)
    left.set_xticks(x, ticks)
    left.set(ylabel="accuracy (%)", ylim=(0, 122), title="accuracy")
    left.set_yticks(range(0, 101, 20))
    left.legend(loc="upper center", ncol=2, fontsize=8)  # above 100 %, clear of every bar

    seconds = [one["seconds"].mean() for one in rows]
    bars = right.bar(x, seconds, 0.6, color=colours, edgecolor="0.25")
    for bar, lighter in zip(bars, shade):
        bar.set_alpha(lighter)
    log = max(seconds) / min(seconds) >= 10
    if log:
        figures.plain_log_axis(right)
    vit = next((t for (model, _), t in zip(present, seconds) if model == "ViT"), None)
    rates = [one["images_per_second"].mean() for one in rows]
    shown = lambda t: f"{t * 1000:.0f} ms" if t < 1 else f"{t:.1f} s"
    labels = [
        f"{shown(t)}\n{rate:,.0f} img/s" + (f"\n×{vit / t:.1f} vs ViT" if vit and model != "ViT" else "")
        for (model, _), t, rate in zip(present, seconds, rates)
    ]
    right.bar_label(bars, labels=labels, fontsize=8, padding=2)
    right.set_xticks(x, ticks)
    top = max(seconds) * (4 if log else 1.35)
    right.set_ylim(top=top, **({} if log else {"bottom": 0}))
    images = int(measured["images"].iloc[0])
    right.set(
        ylabel=f"seconds per pass over {images:,} images{' (log scale)' if log else ''}",
        title=f"inference time per pass (median of {settings.inference_repeats} interleaved rounds)",
    )

    fig.suptitle(
        f"EMNIST transfer · trained on augmented MNIST ({epochs_text(settings.epochs)}), tested on: {source}\n"
        f"ViT, ViTBNFFN, ViTBN at depth {settings.depth}"
        + ("; ViTBNFFN and ViTBN also as run (1 block, lighter)" if len(present) > len(ALL_MODELS) else "")
        + "; the CNN as the order-of-magnitude reference"
    )
    caption = (
        f"Transfer set: {set_text(measured)}. Left: accuracy on the augmented-MNIST test set and on the transfer set; "
        f"right: time of one full pass (batch {settings.test_batch_size}, eval mode, device synchronised). "
        + findings(measured)
    )
    return _save(fig, "emnist_transfer_figure", result, caption, source)


def _save(output, name: str, result, caption: str, source: str, **about):
    """Save a figure or table of the transfer set (``name``, reproducing ``new/<name>``), naming the set it used."""
    save = figures.save_table if isinstance(output, pd.DataFrame) else figures.save_figure
    about = dict(reproduces=f"new/{name.removeprefix('new_')}", caption=caption) | about
    return save(output, name, result, **about, extra={"transfer_set": source})


def _tick(model: str, depth: int | None) -> str:
    return model if depth is None else f"{model}\n(depth {depth})"


def samples_figure(settings: TransferSettings, n: int = 10):
    """A row of training digits (augmented MNIST) above a row of the transfer set, so the shift shows."""
    figures.use_style()
    images, labels, source = transfer_set()
    # The very test set the models were tested on: its augmentation is drawn on the training device (a GPU's random
    # stream differs from the CPU's), and the runs' set is already held there.
    test = data.image_sets(DATASET, settings.train_size, settings.test_size, str(pick_device()))[1]
    train_x, train_y = test.images.cpu(), test.labels.cpu()
    fig, axes = plt.subplots(2, n, figsize=(1.1 * n, 2.9))
    shown = []  # the figure's data: each image drawn, its set, digit and place in the set, and its 28 x 28 pixels
    for digit in range(n):
        for row, (x, y, name) in enumerate(((train_x, train_y, "augmented MNIST test"), (images, labels, "transfer"))):
            index = int((y == digit).nonzero()[0, 0]) if (y == digit).any() else 0
            pixels = x[index, 0].cpu()
            axes[row, digit].imshow(pixels, cmap="gray_r", vmin=0, vmax=255)
            axes[row, digit].set(xticks=[], yticks=[])
            flat = pixels.flatten().tolist()
            shown.append({"set": name, "digit": digit, "index": index, **{f"p{i}": v for i, v in enumerate(flat)}})
    axes[0, 0].set_ylabel("aug. MNIST", fontsize=9)
    axes[1, 0].set_ylabel("transfer", fontsize=9)
    fig.suptitle(
        f"first image of each digit: augmented MNIST test set (top) and the transfer set (bottom)\n"
        f"transfer set: {source}",
        fontsize=10,
    )
    caption = f"Digits the models trained on and the transfer set ({source})"
    reads = f"the augmented MNIST test set and the transfer set ({source})"
    result = results.ChapterResult(settings)
    return _save(fig, "new_transfer_samples", result, caption, source, reads=reads, data=pd.DataFrame(shown))


def comparison_table(result: TransferResult):
    measured = result.measured
    source = measured["transfer_set"].iloc[0]
    caption = f"Article 1's statements about the transfer experiment beside this run (transfer set: {source}). "
    caption += findings(measured)
    return _save(comparison(measured), "emnist_transfer_vs_article", result, caption, source)


def claims_table(result: TransferResult):
    """Article 1's claim about the transfer set, judged by the book's one rule; saved as ``NN_claims``."""
    return figures.save_claims(result, rule_verdicts(result.measured), article.findings())
