"""Chapter 07: Touvron et al.'s "three things" on the book's ViTs, its plan and protocol: (a) parallel blocks, (b)
attention-only fine-tuning, (c) the hMLP stem; (a)'s sequential runs serve (b) and (c), trained once."""

from __future__ import annotations

import json

import pandas as pd

from ...store import servable
from ...store.runs import RunConfig
from . import attention_finetune, hmlp_stem, parallel_blocks
from .common import sentences
from .settings import ThreeThingsSettings


def plan(settings: ThreeThingsSettings) -> list[RunConfig]:
    """Every run of the chapter, each once: (a)'s, (b)'s fine-tunings and (c)'s hMLP runs."""
    configs = [*parallel_blocks.plan(settings), *attention_finetune.plan(settings), *hmlp_stem.plan(settings)]
    unique = {json.dumps(c.to_dict(), sort_keys=True): c for c in configs}
    return list(unique.values())


def protocol(settings: ThreeThingsSettings):
    """What each part trains, on which data, for how long (one row per part)."""

    images = lambda train, test: f"{train or 60000:,} train / {test or 10000:,} test images"
    depth, b, seeds = settings.depths[0], settings.branches, settings.seeds
    models, n = ", ".join(settings.models), len(settings.models)
    data28 = f"MNIST 28x28: {images(settings.train_size, settings.test_size)}"
    data56 = f"MNIST upscaled to 56x56: {images(settings.ft_train_size, settings.ft_test_size)}"
    depths = ", ".join(f"{d} vs {d // b} x {b}" for d in settings.depths)
    finetuned = f"full vs attention-only, from (a)'s depth-{depth} sequential models"
    stems = f"hMLP vs linear stem at depth {depth} (linear = (a)'s sequential runs)"
    parallel = 2 * len(settings.depths) * n  # each depth sequential and parallel, each model
    parts = [
        ("(a) parallel blocks", f"depth {depths} branches", data28, settings.epochs, settings.lr, parallel),
        ("(b) fine-tuning", finetuned, data56, settings.ft_epochs, settings.ft_lr, 2 * n),
        ("(c) hMLP stem", stems, data28, settings.epochs, settings.lr, n),
    ]
    columns = ["part", "models", "what is compared", "data", "epochs", "lr", "seeds", "runs"]
    rows = [(part, models, what, data, epochs, lr, seeds, runs * seeds) for part, what, data, epochs, lr, runs in parts]
    return sentences(pd.DataFrame(rows, columns=columns))


def app_model():
    """Which stored run ``python -m vitbn_nb.app`` would serve, and why."""
    run = servable.model_choice()
    if run is None:
        return sentences(
            pd.DataFrame([{"run": "(none yet)", "note": "the app trains a small ViTBNFFN on first start"}])
        )
    chosen, columns = run.config, ["run", "model", "depth", "dataset", "train images", "final accuracy (%)"]
    row = (run.run_id, chosen.model, chosen.model_kwargs.get("depth"), chosen.dataset, run.record["train_images"])
    return sentences(pd.DataFrame([(*row, round(run.final_accuracy, 2))], columns=columns))
