"""Which stored run the digit app serves (``python -m vitbn_nb.app``), read from the store alone, so that chapter 7
shows the choice without loading the app: the best finished full-scale 28x28 ViT-family run, augmented-MNIST runs
first; and the small run the app trains when the store holds none."""

from __future__ import annotations

from pathlib import Path

from ..models import VIT_FAMILY
from ..paths import runs_dir
from .records import RunStoreError
from .run_config import RunConfig
from .run_folder import Run

#: An augmented-MNIST run is preferred when it reaches this accuracy on its (augmented) test set.
GOOD_ENOUGH = 90.0

#: Trained when the store holds no usable run: a small BatchNorm ViT on augmented MNIST (drawn digits
#: are less tidy than MNIST's), about a minute on two CPU cores.
FALLBACK = RunConfig(
    model="ViTBNFFN",
    model_kwargs={"depth": 2},
    dataset="mnist_aug",
    epochs=4,
    lr=0.003,
    batch_size=100,
    train_size=20_000,
    test_size=2_000,
)


def usable(run: Run) -> bool:
    """Whether ``run`` can answer a drawing: a finished 28x28 ViT-family digit classifier with its weights here."""
    config = run.record["config"]
    kwargs = config["model_kwargs"]
    return (
        run.status == "finished"
        and (run.folder / "model.pt").is_file()
        and config["model"] in VIT_FAMILY
        and (kwargs.get("image_size"), kwargs.get("channels"), kwargs.get("num_classes")) == (28, 1, 10)
        and bool(run.record["epochs"])
    )


#: A run that saw fewer training images than this (images x epochs) is smoke-scale: the smoke profile's runs see
#: 1,200 at most, the cpu profile's 20,000 or more. The app's own fallback never is.
SMOKE_SCALE_IMAGES = 5_000


def _rank(run: Run):
    augmented = run.record["config"]["dataset"] == "mnist_aug" and run.final_accuracy >= GOOD_ENOUGH
    return augmented, run.final_accuracy, run.record.get("train_images", 0)


def candidates(store=None) -> tuple[list[Run], list[str]]:
    """Servable runs, best first, and a note per run passed over (smoke-scale, or a record that is damaged)."""
    folder = Path(store) if store is not None else runs_dir()
    found, skipped = [], []
    for record in sorted(folder.glob("*/record.json")):
        try:
            run = Run(record.parent)
            if not usable(run):
                continue
            run.config  # noqa: B018 -- serving logs it: a configuration this code refuses would stop the app there
        except RunStoreError as error:
            skipped.append(f"{record.parent.name}: damaged ({error})")
            continue
        except (OSError, ValueError, KeyError):  # a foreign folder is not a candidate
            continue
        images, epochs = run.record.get("train_images", 0), len(run.record["epochs"])
        if images * epochs < SMOKE_SCALE_IMAGES and run.record["config"] != FALLBACK.to_dict():
            skipped.append(f"{run.run_id}: smoke-scale ({images:,} images x {epochs} epochs)")
            continue
        found.append(run)
    return sorted(found, key=_rank, reverse=True), skipped


def model_choice(store=None) -> Run | None:
    """The run the app serves, or None: the best finished full-scale 28x28 ViT-family run, augmented-MNIST runs
    first when they reach :data:`GOOD_ENOUGH` % (they cope better with drawn digits), then accuracy."""
    found, _ = candidates(store)
    return found[0] if found else None
