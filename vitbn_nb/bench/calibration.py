"""A short calibration of this device's training step, and the time of a run estimated from it.

``calibrate`` times ViT training steps at batch 100 on MNIST through both pipelines at depths 1 and
6, and at depth 6 on the 56-pixel images, with the bench's runners (the median of a few repeats
after a warm-up). ``estimate_seconds`` turns it into a run's time: the time per training image at
the run's depth (linear in depth through the two measured depths), pipeline and image size, times
the images it trains on, plus its test passes counted at a third of a training image each (a
forward pass, no backward). The DNNs and the CNN are priced as a depth-1 ViT, which they are not
slower than. It is an estimate for planning, said as such wherever it is shown.
"""

from __future__ import annotations

import pandas as pd
import torch

from .. import data
from ..models import VIT_FAMILY
from ..profiles import SpeedSettings
from ..runs import RunConfig
from ..system import pick_device
from .pipelines import _build, time_training_many

#: (depth, image side, pipeline) measured; the ViT stands for its family (its norms cost alike to a few %).
POINTS = ((1, 28, "engine"), (6, 28, "engine"), (1, 28, "reference"), (6, 28, "reference"), (6, 56, "engine"))
#: A test image costs about a third of a training image (forward only).
TEST_SHARE = 1 / 3
TRAIN_IMAGES, TEST_IMAGES = 60_000, 10_000


def calibrate(
    device: str | torch.device | None = None, *, steps: int = 5, warmup: int = 2, repeats: int = 3
) -> pd.DataFrame:
    """Seconds per training image at each point of :data:`POINTS` on ``device`` (one row each)."""
    device = pick_device(device)
    settings = SpeedSettings(profile="smoke", batch_size=100, steps=steps, warmup=warmup, repeats=repeats)
    variants = {}
    for depth, side, pipeline in POINTS:
        dataset = "mnist" if side == 28 else "mnist56"
        sets = (data.image_sets if pipeline == "engine" else data.reference_sets)(
            dataset, 1000, 100, str(device) if pipeline == "engine" else device
        )
        model = _build("ViT", depth, 0, device, image_size=side)
        variants[(depth, side, pipeline)] = (model, sets[0], pipeline)
    timed = time_training_many(variants, settings=settings, device=device)
    return pd.DataFrame(
        [
            {
                "depth": d,
                "image": s,
                "pipeline": p,
                "seconds_per_image": timed[(d, s, p)]["step_seconds"] / 100,
                "device": device.type,
            }
            for d, s, p in POINTS
        ]
    )


def _per_image(calibration: pd.DataFrame, depth: int, side: int, pipeline: str) -> float:
    table = calibration.set_index(["depth", "image", "pipeline"])["seconds_per_image"]
    one, six = table[(1, 28, pipeline)], table[(6, 28, pipeline)]
    at_depth = one + (six - one) * (depth - 1) / 5
    if side == 56:
        at_depth *= table[(6, 56, "engine")] / table[(6, 28, "engine")]
    return max(at_depth, 0.0)


def estimate_seconds(config: RunConfig, calibration: pd.DataFrame, *, epochs: int | None = None) -> float:
    """The estimated time of training ``config`` (``epochs`` of it when given) on the calibrated device."""
    kwargs = config.model_kwargs
    depth = kwargs.get("depth", 1) * kwargs.get("branches", 1) if config.model in VIT_FAMILY else 1
    side = data.IMAGE_SIZE[config.dataset]
    per_image = _per_image(calibration, depth, side, config.pipeline)
    images = (config.train_size or TRAIN_IMAGES) + TEST_SHARE * (config.test_size or TEST_IMAGES)
    return (config.epochs if epochs is None else epochs) * images * per_image
