"""Chapter 07: Touvron et al.'s "three things" on the book's ViTs, its plan and protocol: (a) parallel blocks, (b)
attention-only fine-tuning, (c) the hMLP stem; (a)'s sequential runs serve (b) and (c), trained once."""

from __future__ import annotations

import json

import pandas as pd

from ...store.runs import RunConfig
from . import attention_finetune, hmlp_stem, parallel_blocks
from .common import CHAPTER, parallel_pairs, sentences, sequential_configs
from .settings import ThreeThingsSettings

__all__ = ["CHAPTER", "app_model", "parallel_pairs", "plan", "protocol", "sequential_configs"]


def plan(settings: ThreeThingsSettings) -> list[RunConfig]:
    """Every run of the chapter, each once: (a)'s, (b)'s fine-tunings and (c)'s hMLP runs."""
    configs = [*parallel_blocks.plan(settings), *attention_finetune.plan(settings), *hmlp_stem.plan(settings)]
    unique = {json.dumps(c.to_dict(), sort_keys=True): c for c in configs}
    return list(unique.values())


def protocol(settings: ThreeThingsSettings):
    """What each part trains, on which data, for how long (one row per part)."""

    def images(size, full):
        return f"{full:,}" if size is None else f"{size:,}"

    depth, b, seeds = settings.depths[0], settings.branches, settings.seeds
    models = ", ".join(settings.models)
    data28 = (
        f"MNIST 28x28: {images(settings.train_size, 60000)} train / {images(settings.test_size, 10000)} test images"
    )
    depths = ", ".join(f"{d} vs {d // b} x {b}" for d in settings.depths)
    return sentences(
        pd.DataFrame(
            [
                {
                    "part": "(a) parallel blocks",
                    "models": models,
                    "what is compared": f"depth {depths} branches",
                    "data": data28,
                    "epochs": settings.epochs,
                    "lr": settings.lr,
                    "seeds": seeds,
                    "runs": 2 * len(settings.depths) * len(settings.models) * seeds,
                },
                {
                    "part": "(b) fine-tuning",
                    "models": models,
                    "what is compared": f"full vs attention-only, from (a)'s depth-{depth} sequential models",
                    "data": (
                        f"MNIST upscaled to 56x56: {images(settings.ft_train_size, 60000)} train / "
                        f"{images(settings.ft_test_size, 10000)} test images"
                    ),
                    "epochs": settings.ft_epochs,
                    "lr": settings.ft_lr,
                    "seeds": seeds,
                    "runs": 2 * len(settings.models) * seeds,
                },
                {
                    "part": "(c) hMLP stem",
                    "models": models,
                    "what is compared": f"hMLP vs linear stem at depth {depth} (linear = (a)'s sequential runs)",
                    "data": data28,
                    "epochs": settings.epochs,
                    "lr": settings.lr,
                    "seeds": seeds,
                    "runs": len(settings.models) * seeds,
                },
            ]
        )
    )


def app_model():
    """Which stored run ``python -m vitbn_nb.app`` would serve, and why."""
    from ...app import model_choice

    run = model_choice()
    if run is None:
        return sentences(
            pd.DataFrame([{"run": "(none yet)", "note": "the app trains a small ViTBNFFN on first start"}])
        )
    chosen = run.config
    return sentences(
        pd.DataFrame(
            [
                {
                    "run": run.run_id,
                    "model": chosen.model,
                    "depth": chosen.model_kwargs.get("depth"),
                    "dataset": chosen.dataset,
                    "train images": run.record["train_images"],
                    "final accuracy (%)": round(run.final_accuracy, 2),
                }
            ]
        )
    )
