"""A short calibration of this device's training step, and the time of a run estimated from it (for planning).

``calibrate`` times ViT training steps and test passes through both pipelines at depths 1 and 6 (and 56-pixel
images), the other models on their own, and the engines against one another (pricing a stacked run);
``estimate_seconds`` turns it into a run's time (linear in depth between the two measured depths)."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import math
import statistics
from types import SimpleNamespace

import pandas as pd
import torch

from .. import atomic, data
from ..engines import engine
from ..models import VIT_FAMILY, build_model
from ..paths import runs_dir
from ..store.run_config import RunConfig
from ..system import hardware_label, host, machine_load, pick_device
from .pipelines import _build, time_training_many

#: (depth, image side, pipeline) measured; the ViT stands for its family (its norms cost alike to a few %).
POINTS = ((1, 28, "engine"), (6, 28, "engine"), (1, 28, "reference"), (6, 28, "reference"), (6, 56, "engine"))
TRAIN_IMAGES, TEST_IMAGES = 60_000, 10_000
#: The models outside the ViT family, each timed on the dataset the book trains it on (``model``, ``dataset``).
OTHER_MODELS = (("DNN_d3", "mnist_aug"), ("DNNBN_d3", "mnist_aug"), ("CNN", "mnist_aug"))
#: Test images per timed test pass.
TEST_PASS_IMAGES = 500
BATCH = 100


def calibrate(
    device: str | torch.device | None = None,
    *,
    steps: int = 5,
    warmup: int = 2,
    repeats: int = 3,
    points: tuple = POINTS,
    with_engines: bool = True,
    others: tuple = OTHER_MODELS,
) -> pd.DataFrame:
    """Seconds per training image at each of ``points`` on ``device`` (``pass`` "train"), seconds per test image
    at those of 28 pixels (``pass`` "test"), then each of ``others`` (``model`` named; a training and a test row,
    through the book's pipeline), then the engines' rows (``engines.stack.time_engines``) when ``with_engines``.
    The ViT's rows have ``model`` "ViT"."""
    device = pick_device(device)
    settings = SimpleNamespace(batch_size=BATCH, steps=steps, warmup=warmup, repeats=repeats, seed=0, lr=1e-3)
    variants, tests = {}, {}
    for depth, side, pipeline in points:
        dataset = "mnist" if side == 28 else "mnist56"
        sets = (data.image_sets if pipeline == "engine" else data.reference_sets)(
            dataset, 1000, TEST_PASS_IMAGES, str(device) if pipeline == "engine" else device
        )
        model = _build("ViT", depth, 0, device, image_size=side)
        variants[(depth, side, pipeline)] = (model, sets[0], pipeline)
        if side == 28:
            tests[(depth, side, pipeline)] = (model, sets[1])
    timed = time_training_many(variants, settings=settings, device=device, split=False)
    row = lambda key, kind, seconds, model="ViT": (
        dict(zip(("depth", "image", "pipeline"), key), engine="eager", seconds_per_image=seconds, device=device.type)
        | {"pass": kind, "model": model}
    )
    rows = [row(key, "train", timed[key]["step_seconds"] / BATCH) for key in variants]
    rows += [row(key, "test", _test_seconds(*tests[key], key[2], device, repeats)) for key in tests]
    models = {}
    for name, dataset in others:
        sets = data.image_sets(dataset, 1000, TEST_PASS_IMAGES, str(device))
        torch.manual_seed(0)
        models[name] = (build_model(name).to(device), sets[0], "engine")
        tests[name] = (models[name][0], sets[1])
    timed = time_training_many(models, settings=settings, device=device, split=False)
    for name in timed:
        rows.append(row((1, 28, "engine"), "train", timed[name]["step_seconds"] / BATCH, name))
        rows.append(row((1, 28, "engine"), "test", _test_seconds(*tests[name], "engine", device, repeats), name))
    frames = [pd.DataFrame(rows)]
    if with_engines:
        from ..engines import stack  # the stacked engine, loaded only to be timed

        timed = stack.time_engines(device, steps=steps, warmup=warmup, repeats=repeats, batch=BATCH)
        frames.append(timed.assign(**{"pass": "train"}))
    return pd.concat(frames, ignore_index=True)


#: A calibration taken on a quiet machine is kept in the run store and reused for this many days, so that ``train
#: --dry-run``, ``campaign --dry-run`` and a deadline's estimate price runs from one measurement, taken once.
KEEP_DAYS = 7
#: The columns a kept calibration must have (a file in the store is data: anything else is measured anew).
_KEPT_COLUMNS = {"depth", "image", "pipeline", "engine", "seconds_per_image", "pass"}


def calibrated(
    device: str | torch.device | None = None,
    *,
    points: tuple = POINTS,
    with_engines: bool = True,
    others: tuple = OTHER_MODELS,
    beside: int = 0,
) -> pd.DataFrame:
    """:func:`calibrate`, or the same calibration kept from the last :data:`KEEP_DAYS` days on this machine (its
    hardware and host, torch and device, the same points). Only a calibration that ran with no more than ``beside``
    other busy processes (a campaign's own workers) is kept. ``attrs``: ``taken`` (when), ``kept`` (reused),
    ``busy``."""
    device = pick_device(device)
    # one host's, not one CPU name's: machines of one name differ in speed
    identity = [hardware_label(), host(), torch.__version__, device.type, points, with_engines, others]
    key = hashlib.sha256(json.dumps(identity, default=str).encode()).hexdigest()[:16]
    path = runs_dir() / ".calibration" / f"{key}.json"
    now = dt.datetime.now(dt.UTC)
    if (kept := _kept(path, now)) is not None:
        return kept
    before = machine_load()["busy_processes"] or 0
    table = calibrate(device, points=points, with_engines=with_engines, others=others)
    busy = max(before, machine_load()["busy_processes"] or 0)
    table.attrs.update(taken=now.isoformat(timespec="seconds"), kept=False, busy=busy)
    if busy <= beside:
        try:
            rows = json.loads(table.to_json(orient="records"))
            atomic.write_text(path, json.dumps({"taken": table.attrs["taken"], "identity": identity, "rows": rows}))
        except OSError:  # a store that cannot be written keeps nothing; the calibration is still used
            pass
    return table


def _kept(path, now: dt.datetime) -> pd.DataFrame | None:
    """The calibration kept at ``path`` when it is recent and of the right shape, else None."""
    try:
        kept = json.loads(path.read_text())
        taken = dt.datetime.fromisoformat(kept["taken"])
        table = pd.DataFrame(kept["rows"])
        seconds = pd.to_numeric(table["seconds_per_image"])
        fresh = dt.timedelta(0) <= now - taken <= dt.timedelta(days=KEEP_DAYS)  # naive: TypeError
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    if not fresh or not set(table.columns) >= _KEPT_COLUMNS or not all(math.isfinite(v) and v > 0 for v in seconds):
        return None
    table.attrs.update(taken=kept["taken"], kept=True, busy=0)
    return table


def _test_seconds(model, test_set, pipeline: str, device: torch.device, repeats: int) -> float:
    """Seconds per image of a test pass as a run makes it (one warm-up pass, then the median of ``repeats``)."""
    passes = [
        engine.evaluate(model, test_set, batch_size=TEST_PASS_IMAGES, device=device, per_sample=pipeline == "reference")
        for _ in range(repeats + 1)
    ]
    return statistics.median(p["test_seconds"] for p in passes[1:]) / len(test_set)


def points_for(configs: list[RunConfig]) -> tuple[tuple, bool, tuple]:
    """The :data:`POINTS` that price ``configs``, whether the engines' rows are needed (a stacked run), and the
    :data:`OTHER_MODELS` among them."""
    vits = [c for c in configs if c.model in VIT_FAMILY]
    wanted = {(d, 28, c.pipeline) for c in vits for d in (1, 6)}
    if any(data.IMAGE_SIZE[c.dataset] == 56 for c in vits):
        wanted |= {(6, 28, "engine"), (6, 56, "engine")}
    names = {c.model for c in configs}
    others = tuple(other for other in OTHER_MODELS if other[0] in names)
    return tuple(p for p in POINTS if p in wanted), any(c.engine == "stacked" for c in configs), others


def engine_speedups(calibration: pd.DataFrame) -> pd.DataFrame:
    """Per depth: how many times faster per run each engine trains than the eager one (from one calibration)."""
    compute = calibration[calibration["pipeline"] == "engine (compute only)"]
    table = compute.pivot_table(index="depth", columns="engine", values="seconds_per_image")
    return table.rdiv(table["eager"], axis=0).round(2)


def _per_image(
    calibration: pd.DataFrame, depth: int, side: int, pipeline: str, engine_kind: str = "eager", kind: str = "train"
) -> float:
    vits = calibration if "model" not in calibration else calibration[calibration["model"].fillna("ViT") == "ViT"]
    eager = vits[vits["engine"] == "eager"]
    table = lambda p: eager[eager["pass"] == p].set_index(["depth", "image", "pipeline"])["seconds_per_image"]
    one, six = table(kind)[(1, 28, pipeline)], table(kind)[(6, 28, pipeline)]
    at_depth = one + (six - one) * (depth - 1) / 5
    if side == 56:
        at_depth *= table("train")[(6, 56, "engine")] / table("train")[(6, 28, "engine")]
    if engine_kind == "stacked" and kind == "train":
        at_depth /= _stack_speedup(calibration, depth)
    return max(at_depth, 0.0)


def _stack_speedup(calibration: pd.DataFrame, depth: int) -> float:
    """How many times faster per run a stack trains at ``depth`` (linear between the measured depths 1 and 6)."""
    speedups = engine_speedups(calibration)
    best = speedups["graphed"] if "graphed" in speedups else speedups["stacked"]  # a GPU stack replays a graph
    return best[1] + (best[6] - best[1]) * (min(depth, 6) - 1) / 5


def _own_rows(calibration: pd.DataFrame, model: str) -> pd.Series | None:
    """Seconds per image by ``pass`` of ``model`` timed itself (:data:`OTHER_MODELS`), or None."""
    if "model" not in calibration or model in VIT_FAMILY:
        return None
    own = calibration[calibration["model"] == model].set_index("pass")["seconds_per_image"]
    return own if {"train", "test"} <= set(own.index) else None


def estimate_seconds(config: RunConfig, calibration: pd.DataFrame, *, epochs: int | None = None) -> float:
    """The estimated time of training ``config`` (``epochs`` of it when given) on the calibrated device: its
    training images and its test pass after every epoch, each priced through the run's own pipeline (a DNN or
    the CNN at its own timed price where the calibration has it)."""
    runs_for = config.epochs if epochs is None else epochs
    own = _own_rows(calibration, config.model)
    if own is not None:
        stacked = _stack_speedup(calibration, 1) if config.engine == "stacked" else 1.0
        train = (config.train_size or TRAIN_IMAGES) * own["train"] / stacked
        return runs_for * (train + (config.test_size or TEST_IMAGES) * own["test"])
    kwargs = config.model_kwargs
    depth = kwargs.get("depth", 1) * kwargs.get("branches", 1) if config.model in VIT_FAMILY else 1
    side = data.IMAGE_SIZE[config.dataset]
    train = (config.train_size or TRAIN_IMAGES) * _per_image(calibration, depth, side, config.pipeline, config.engine)
    test = (config.test_size or TEST_IMAGES) * _per_image(calibration, depth, side, config.pipeline, kind="test")
    return runs_for * (train + test)


def describe(calibration: pd.DataFrame) -> str:
    """The calibration as ``train --dry-run`` and ``make bench`` print it: the table, then the engines' ratios."""
    lines = [
        f"calibration on {hardware_label()} (seconds per training image, or per test image where pass is test; "
        f"batch {BATCH}, ViT; the median of the repeats, each a block of steps between two clock reads):",
        calibration.to_string(index=False),
    ]
    if (calibration["pipeline"] == "engine (compute only)").any():
        from ..engines.stack import STACK_MEMBERS  # heavy: the stacked engine, loaded only where it was timed

        speedups = engine_speedups(calibration)
        lines += [
            f"stacking: each run's speed in a stack of {STACK_MEMBERS} runs against one run trained alone (x; "
            "> 1 pays), per depth, the engines' repeats interleaved in this one calibration (the graphed engine "
            "only on a GPU):",
            speedups.to_string(),
        ]
    return "\n".join(lines)
