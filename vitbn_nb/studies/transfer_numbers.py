"""Chapter 06's numbers: timed passes over the transfer set, one row per model from the measurements, and
article 1's claims beside them."""

from __future__ import annotations

import numpy as np
import pandas as pd

from .. import articles, data, engine, results
from ..bench import timing
from ..system import pick_device

MODELS = ("ViT", "ViTBNFFN", "ViTBN")
REFERENCE = "CNN"
ALL_MODELS = (*MODELS, REFERENCE)


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
        rows.append(
            {
                "model": model,
                "depth": "—" if depth is None or pd.isna(depth) else int(depth),
                "parameters": int(one["parameters"].iloc[0]),
                "lr / batch": f"{one['lr'].iloc[0]:.3g} / {int(one['batch_size'].iloc[0])}",
                "augmented-MNIST test acc (%)": results.mean_sd(one["mnist_aug_acc"]),
                "transfer acc (%)": results.mean_sd(one["transfer_acc"]),
                "time per pass (s, median)": results.mean_sd(one["seconds"], 3),
                "images/s": f"{one['images_per_second'].mean():,.0f}",
                "speed-up vs ViT (T_ViT / T)": results.mean_sd(speedups, 2),
                "speed-up mean": float(np.mean(speedups)) if speedups else np.nan,
                "seeds": int(one["seed"].nunique()),
            }
        )
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


def timed_on(measured: pd.DataFrame) -> str:
    """The machines that timed the passes, from the runs' stored measurements."""
    from ..run_measurements import timed_on as machines

    return ", ".join(machines(measured["run_id"])) or "this machine"


def rule_verdicts(measured: pd.DataFrame) -> list:
    from .. import claims

    return claims.transfer(measured, timed_on(measured))


def comparison(measured: pd.DataFrame) -> pd.DataFrame:
    """The article's claims beside this run's numbers, with the book's rule's verdict."""
    frame = summary(measured).set_index("model")
    source = measured["transfer_set"].iloc[0]
    judged = {v.condition.split(" ")[0]: v for v in rule_verdicts(measured)}
    rows = []
    for model in ("ViTBNFFN", "ViTBN"):
        if model in frame.index:
            rows.append(
                {
                    "claim (article 1, on the transfer article)": articles.ARTICLE1_TRANSFER["bn_faster"],
                    "model": model,
                    "this run": f"T_ViT / T = {frame.loc[model, 'speed-up vs ViT (T_ViT / T)']}; inference gain "
                    f"{judged[model].shown}",
                    "verdict": judged[model].text,
                }
            )
    if REFERENCE in frame.index:
        rows.append(
            {
                "claim (article 1, on the transfer article)": articles.ARTICLE1_TRANSFER["cnn"],
                "model": REFERENCE,
                "this run": f"T_ViT / T_CNN = {frame.loc[REFERENCE, 'speed-up vs ViT (T_ViT / T)']}",
                "verdict": "not a claim: a reference, for which article 1 gives no number",
            }
        )
    rows.append(
        {
            "claim (article 1, on the transfer article)": "evaluated on EMNIST digits (40,000 images)",
            "model": "all",
            "this run": f"{source} ({int(measured['images'].iloc[0]):,} images)",
            "verdict": "not a claim: "
            + ("the same set" if source == data.EMNIST_SOURCE else "a different digit set (EMNIST unreachable)"),
        }
    )
    return pd.DataFrame(rows)


def time_passes(model, images, labels, *, batch_size: int, repeats: int, device=None) -> dict:
    """Accuracy (%) and the wall time of ``repeats`` full passes over ``images`` (after one untimed warm-up).

    Each pass is ``engine.evaluate``: eval mode, ``torch.inference_mode``, batches of
    ``batch_size``, the device synchronised before every clock read.
    """
    device = pick_device(device)
    model = model.to(device)
    images_set = data.ImageSet(images.to(device), labels.to(device))
    first = engine.evaluate(model, images_set, batch_size=batch_size, device=device)  # warm-up: allocator, caches
    passes = timing.repeat(
        lambda: engine.evaluate(model, images_set, batch_size=batch_size, device=device),
        repeats=repeats,
        device=device,
        warmup=0,
    )
    return {
        "accuracy": first["test_acc"],
        "class_acc": first["class_acc"],
        "seconds": passes.seconds,
        "all_seconds": list(passes.samples),
        "images": len(labels),
        "images_per_second": len(labels) / passes.seconds,
    }
