"""Chapter 06's numbers: timed passes over the transfer set, one row per model from the measurements, and
article 1's claims beside them."""

from __future__ import annotations

from functools import partial

import numpy as np
import pandas as pd
import torch
from tqdm import tqdm

from ... import data, timing
from ...engines import engine
from ...judging import verdicts
from ...publishing import results
from ...store import runs
from ...system import pick_device
from .article import SAID
from .judge import entries, label, round_pairs, rows_of, transfer, transfer_by_run

MODELS = ("ViT", "ViTBNFFN", "ViTBN")
REFERENCE = "CNN"
ALL_MODELS = (*MODELS, REFERENCE)

#: The summary's column of speed ratios, each judged by the rule from the interleaved rounds.
RULE_COLUMN = "speed-up vs ViT (T_ViT / T), by the rule"


def summary(measured: pd.DataFrame) -> pd.DataFrame:
    """One row per model and depth: accuracies (mean [95 % interval] over seeds), time per pass, images/s, speed-up
    vs ViT."""
    rows = []
    for model, depth in entries(measured):
        one = rows_of(measured, model, depth)
        pairs = round_pairs(measured, model, depth)
        judged = verdicts.speed_ratio(
            f"{label(model, depth)} against ViT", [1 / a for a, _ in pairs], [1 / b for _, b in pairs]
        )
        rows.append(
            {
                "model": model,
                "depth": "—" if depth is None else depth,
                "parameters": int(one["parameters"].iloc[0]),
                "lr / batch": f"{one['lr'].iloc[0]:.3g} / {int(one['batch_size'].iloc[0])}",
                "augmented-MNIST test acc (%)": results.accuracy(one["mnist_aug_acc"]),
                "transfer acc (%)": results.accuracy(one["transfer_acc"]),
                "time per pass (s, median)": results.spread(one["seconds"], 3),
                "images/s": f"{one['images_per_second'].mean():,.0f}",
                RULE_COLUMN: "itself" if model == "ViT" else verdicts.speed_text(judged),
                "speed-up mean": judged.estimate,
                "most predicted class on the transfer set (share)": _most(one),
                "transfer acc, images binarised (%)": results.accuracy(one["binarised_acc"]),
                "seeds": int(one["seed"].nunique()),
            }
        )
    return pd.DataFrame(rows)


def set_text(measured: pd.DataFrame) -> str:
    """The transfer set and what a timed pass ran over: '<source> (1,797 images; each timed pass over 40,000, the
    set repeated)'."""
    source, images = measured["transfer_set"].iloc[0], int(measured["images"].iloc[0])
    distinct = int(measured["distinct_images"].iloc[0]) if "distinct_images" in measured else images
    if distinct == images:
        return f"{source} ({images:,} images)"
    return (
        f"{source} ({distinct:,} images; each timed pass runs over {images:,}, the set repeated: a pass's time does "
        "not depend on the pixels)"
    )


def findings(measured: pd.DataFrame) -> str:
    """What this run found, computed: the BN models' and the CNN's inference speed against ViT (by the rule, from
    the interleaved rounds), the accuracies, and which class each model sees most on the transfer set."""
    frame = summary(measured)
    source = measured["transfer_set"].iloc[0]
    named = lambda row: label(row["model"], None if row["depth"] == "—" else row["depth"])
    who = lambda row: "the CNN, the order-of-magnitude reference," if row["model"] == REFERENCE else named(row)
    parts = [f"{who(row)} against ViT: {row[RULE_COLUMN]}" for _, row in frame.iterrows() if row["model"] != "ViT"]
    accuracy = ", ".join(f"{named(row)} {row['transfer acc (%)']} %" for _, row in frame.iterrows())
    seeds = int(measured.groupby("model")["seed"].nunique().min())
    if seeds < verdicts.MIN_SEEDS:
        accuracy += f" ({seeds} seed{'s' * (seeds != 1)}: its differences are {verdicts.NOT_JUDGED})"
    text = f"On {source}: " + "; ".join(parts) + f". Transfer accuracy: {accuracy}."
    return text + " " + _collapse(measured)


def _collapse(measured: pd.DataFrame) -> str:
    """The model that piles most of the transfer set into one class, and what binarising the images does to it."""
    worst = measured.loc[measured["largest_predicted_share"].idxmax()]
    return (
        f"{worst['model']} puts {100 * worst['largest_predicted_share']:.0f} % of the transfer images in one class "
        f"({int(worst['largest_predicted_class'])}); with every pixel set to 0 or 1 at half intensity, as MNIST's "
        f"nearly binary strokes are, its transfer accuracy is {worst['binarised_acc']:.1f} % instead of "
        f"{worst['transfer_acc']:.1f} %, which suggests that it reads the grey of the upsampled 8x8 digits, where "
        "MNIST's strokes are not grey (a reading of this run, not a judged claim)."
        if worst["largest_predicted_share"] > 0.5
        else ""
    )


def _most(one: pd.DataFrame) -> str:
    row = one.loc[one["largest_predicted_share"].idxmax()]
    return f"{int(row['largest_predicted_class'])} ({100 * row['largest_predicted_share']:.0f} %)"


def timed_on(measured: pd.DataFrame) -> str:
    """The machines that timed the passes, from the runs' stored measurements."""
    return ", ".join(runs.timed_on(measured["run_id"])) or "this machine"


def rule_verdicts(measured: pd.DataFrame) -> list:
    return transfer(measured, timed_on(measured))


def comparison(measured: pd.DataFrame) -> pd.DataFrame:
    """The article's claims beside this run's numbers, with the book's rule's verdict."""
    frame = summary(measured)
    rows = []
    add = lambda claim, model, found, verdict: rows.append(
        {"claim (article 1, on the transfer article)": claim, "model": model, "this run": found, "verdict": verdict}
    )
    verdict_of = dict(transfer_by_run(measured, timed_on(measured)))
    for _, row in frame.iterrows():
        depth = None if row["depth"] == "—" else row["depth"]
        if (row["model"], depth) in verdict_of:
            verdict = verdict_of[(row["model"], depth)]
            found = f"T_ViT / T: {row[RULE_COLUMN]}; inference gain {verdict.shown}"
            add(SAID["bn_faster"], label(row["model"], depth), found, verdict.text)
        elif row["model"] == REFERENCE:
            found = f"T_ViT / T_CNN: {row[RULE_COLUMN]}"
            add(SAID["cnn"], REFERENCE, found, "not a claim: a reference, for which article 1 gives no number")
    source = measured["transfer_set"].iloc[0]
    add(
        "evaluated on EMNIST digits (article 1 gives no count; torchvision's test split holds 40,000)",
        "all",
        set_text(measured),
        "not a claim: "
        + ("the same set" if source == data.EMNIST_SOURCE else "a different digit set (EMNIST unreachable)"),
    )
    return pd.DataFrame(rows)


def timed_set(images: torch.Tensor, labels: torch.Tensor, count: int | None) -> tuple[torch.Tensor, torch.Tensor]:
    """The set repeated, then cut, to ``count`` images (None: the set as it is): what a timed pass runs over."""
    if count is None or count == len(labels):
        return images, labels
    if not isinstance(count, int) or count < 1:
        raise ValueError(f"transfer_images={count!r} is not allowed; it must be an integer >= 1")
    times = -(-count // len(labels))
    return images.repeat(times, 1, 1, 1)[:count], labels.repeat(times)[:count]


def time_passes_interleaved(
    models: dict, images, labels, *, batch_size: int, repeats: int, timed_images: int | None = None, device=None
) -> dict:
    """Accuracy (%) of each model on the set (an untimed pass, through ``engine.evaluate``) and the wall time of its
    full passes over ``timed_images`` images (the set repeated, :func:`timed_set`), one pass of every model per round
    after one untimed warm-up pass each, ``repeats`` rounds (:func:`vitbn_nb.timing.interleave`): a busy spell slows
    them alike and their times pair up round by round."""
    if not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"repeats={repeats!r} is not allowed; it must be an integer >= 1")
    device = pick_device(device)
    on_device = lambda x, y: data.ImageSet(x.to(device), y.to(device))
    evaluate = lambda model, images_set: partial(
        engine.evaluate, model.to(device), images_set, batch_size=batch_size, device=device
    )
    the_set, timed = on_device(images, labels), on_device(*timed_set(images, labels, timed_images))
    first = {key: evaluate(model, the_set)() for key, model in models.items()}
    passes = {key: evaluate(model, timed) for key, model in models.items()}
    bar = tqdm(total=(repeats + 1) * len(passes), desc="timed passes (warm-up, then rounds)", unit="pass", leave=False)

    def runner(one_pass):
        def timed(n):
            seconds = timing.block(one_pass, calls=n, device=device)
            bar.update(n)  # after the clock is read: the bar costs the passes nothing
            return {"seconds": seconds}

        return timed

    with bar:
        rounds = timing.interleave({key: runner(f) for key, f in passes.items()}, warmup=1, repeats=repeats, length=1)
    out = {}
    for key, timed_rounds in rounds.items():
        seconds = [r["seconds"] for r in timed_rounds]
        median = float(np.median(seconds))
        out[key] = {
            "accuracy": first[key]["test_acc"],
            "class_acc": first[key]["class_acc"],
            "seconds": median,
            "all_seconds": seconds,
            "images": len(timed.labels),
            "distinct_images": len(labels),
            "images_per_second": len(timed.labels) / median,
        }
    return out


def predictions(model, images, labels, *, device=None) -> dict:
    """How often the model predicts each class on the transfer set, and its accuracy when every pixel is set to 0
    or 1 at half intensity (MNIST's strokes are nearly binary; an upsampled 8x8 digit is mostly grey)."""
    device = pick_device(device)
    model = model.to(device).eval()
    x = data.to_float(images).to(device)
    with torch.inference_mode():
        predicted = model(x).argmax(1).cpu()
        binarised = model((x > 0.5).float()).argmax(1).cpu()
    return {
        "counts": torch.bincount(predicted, minlength=10).tolist(),
        "binarised_accuracy": 100 * float((binarised == labels.cpu()).float().mean()),
    }
