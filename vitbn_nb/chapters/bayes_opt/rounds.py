"""Chapter 04's timing claims (article 1's Table 3: r_t and r_v of the optimised models), measured in interleaved
rounds on one host rather than read off the retrains' epochs: hosts that give one CPU name have trained one
configuration at speeds 1.6x apart, and a seed's two 30-epoch runs do not fit one host's session.

Every optimised model of the chapter's configurations starts from seed 0's initial weights (its retrain's) with its
own best lr and batch size. In each round each model in turn trains ``timing_images`` more images through its
retrain's pipeline and then passes the test set once (:func:`vitbn_nb.timing.interleave`): a busy spell slows every
model alike, and a round's gain pairs a model with ViT's turn in the same round. The measurement is kept with its host
and date in the optimisation state (``runs_dir()/hpo/timing-<profile>.json``, committed beside the searches), and is
taken on a quiet machine (``campaign measure``, or a chapter run that trains)."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pandas as pd
import torch
from tqdm.auto import tqdm

from ... import atomic, timing
from ...bench import pipelines
from ...engines import engine
from ...engines.training import engine_options, seeded_model, training_sets
from ...judging.claims import TIMED
from ...paths import runs_dir, stored_path
from ...publishing import results
from ...store.records import STATE_FOLDER
from ...store.run_config import RunConfig
from ...store.run_folder import run_lock, timestamp
from ...system import OtherWork, contended, hardware, host_label, pick_device, versions

SCHEMA = 1
#: A kept measurement of five models' twenty rounds takes a few kB; a file far larger is not one, and is not read.
MAX_BYTES = 1 << 20
#: What each round does, in the words of every caption and condition.
WHAT = (
    "{rounds} interleaved rounds on one host; in each, every model trains {images:,} more images at its own batch "
    "size through its retrain's pipeline, from seed 0's initial weights, then passes the test set once"
)


def path(profile: str) -> Path:
    """Where the store keeps the profile's measurement (a committed copy is read where the store has none)."""
    return runs_dir() / STATE_FOLDER / f"timing-{profile}.json"


def timed_configs(final: list[RunConfig]) -> list[RunConfig]:
    """The runs the rounds time: each model and depth of the retrains at its first seed (one per configuration's
    model; ViT d6 serves both configurations)."""
    first = {}
    for config in sorted(final, key=lambda c: c.seed):
        first.setdefault((config.model, config.model_kwargs.get("depth")), config)
    return list(first.values())


def _identity(settings, configs: list[RunConfig]) -> dict:
    """What a kept measurement must match to be these settings' (the runs' ids name model, depth, lr and batch)."""
    return {
        "rounds": settings.timing_rounds,
        "images": settings.timing_images,
        "runs": sorted(c.run_id("cpu") for c in configs),
    }


def _problem(measured) -> str | None:
    """What is wrong with a kept measurement's shape (None: nothing); it is data from a file, never trusted."""
    if not isinstance(measured, dict) or measured.get("schema") != SCHEMA:
        return f"it is not a schema-{SCHEMA} timing measurement"
    for field in ("rounds", "images"):
        if not isinstance(measured.get(field), int) or measured[field] < 1:
            return f"its {field} is not a positive integer"
    models = measured.get("models")
    if not isinstance(models, list) or not models:
        return "it names no model"
    rounds = measured["rounds"]
    for entry in models:
        if not isinstance(entry, dict) or not isinstance(entry.get("model"), str):
            return "a model entry is not an object with a model name"
        for field in ("depth", "batch_size", "images", "train_images", "test_images"):
            if not isinstance(entry.get(field), int) or entry[field] < 1:
                return f"{entry['model']}: {field} is not a positive integer"
        for field in ("train_seconds", "test_seconds"):
            values = entry.get(field)
            if not isinstance(values, list) or len(values) != rounds:
                return f"{entry['model']}: {field} does not hold one value per round ({rounds})"
            if not all(isinstance(v, (int, float)) and math.isfinite(v) and v > 0 for v in values):
                return f"{entry['model']}: {field} holds a value that is not a positive number"
    machine, started = measured.get("hardware"), measured.get("started")
    named = (
        isinstance(machine, dict) and isinstance(machine.get("cpu"), str) and isinstance(machine.get("cpu_cores"), int)
    )
    if (
        not named
        or not isinstance(started, str)
        or not re.fullmatch(r"\d{4}-\d\d-\d\dT[\d:.]+(Z|[+-]\d\d:\d\d)?", started)
    ):
        return "it does not say which machine took it, or when (an ISO time)"
    return None


def load(settings, configs: list[RunConfig]) -> dict | None:
    """The profile's kept measurement of exactly these runs and rounds (None where none is kept, or it measured other
    settings); a damaged file raises one line naming it."""
    held = stored_path(path(settings.profile).relative_to(runs_dir()))
    if not held.is_file():
        return None
    if held.stat().st_size > MAX_BYTES:
        raise ValueError(f"{held}: {held.stat().st_size:,} bytes is no timing measurement (at most {MAX_BYTES:,})")
    try:
        measured = json.loads(held.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as error:
        fix = "fix: delete it and measure again"
        raise ValueError(f"{held}: the timing measurement cannot be read ({error}); {fix}") from None
    if (problem := _problem(measured)) is not None:
        raise ValueError(f"{held}: {problem}; fix: delete it and measure again (python -m vitbn_nb campaign measure)")
    same = {k: measured.get(k) for k in ("rounds", "images", "runs")} == _identity(settings, configs)
    return measured if same else None


def busy(measured: dict) -> bool:
    """Whether other work ran beside the measurement (the other processes' CPU time over it)."""
    return contended(None, None, measured.get("other_cpu_seconds"), measured.get("seconds"))


def _runner(config: RunConfig, data, images: int, device: torch.device):
    """``run(n)``: ``n`` rounds' worth of one model's turn: ``images`` training images (whole batches) through its
    retrain's step, then one test pass; each part clocked on its own."""
    model, _ = seeded_model(config, device)
    optimizer = torch.optim.Adam(model.parameters(), lr=config.lr)
    options = engine_options(config, device)
    generator = torch.Generator().manual_seed(config.seed)
    train, test = data
    steps = max(1, round(images / config.batch_size))

    stream = pipelines.endless(train, config.batch_size, generator)

    def run(turns: int) -> dict:
        trained = tested = 0.0
        seen = 0
        for _ in range(turns):
            model.train()
            start = timing.clock(device)
            for _ in range(steps):
                x, y = next(stream)
                loss = engine.train_step(model, optimizer, x, y)
                if options["item_per_step"]:
                    loss.item()
                seen += len(y)
            trained += timing.clock(device) - start
            passed = engine.evaluate(
                model, test, batch_size=config.test_batch_size, device=device, per_sample=options["per_sample_eval"]
            )
            tested += passed["test_seconds"]
        return {"seconds": trained + tested, "train": trained, "test": tested, "images": seen}

    return run


def take(settings, configs: list[RunConfig], device=None) -> dict:
    """Time ``configs`` in ``settings.timing_rounds`` interleaved rounds and keep the measurement (atomically, under
    the optimisation state's lock); returns it."""
    device = pick_device(device)
    data = training_sets(configs[0], device)
    rounds, images = settings.timing_rounds, settings.timing_images
    runners = {c.run_id("cpu"): _runner(c, data, images, device) for c in configs}
    bar = tqdm(total=(rounds + 1) * len(runners), desc="timing rounds (a warm-up, then rounds)", unit="turn")

    def counted(run):
        def turn(n):
            done = run(n)
            bar.update(1)  # after the clock is read: the bar costs the turn nothing
            return done

        return turn

    started, other_work, clock = timestamp(), OtherWork(), timing.clock(device)
    with bar:
        timed = timing.interleave({k: counted(r) for k, r in runners.items()}, warmup=1, repeats=rounds, length=1)
    seconds = timing.clock(device) - clock
    models = []
    for config in configs:
        turns = timed[config.run_id("cpu")]
        models.append(
            {
                "model": config.model,
                "depth": int(config.model_kwargs["depth"]),
                "run_id": config.run_id("cpu"),
                "lr": config.lr,
                "batch_size": config.batch_size,
                "pipeline": config.pipeline,
                "images": int(turns[0]["images"]),
                "train_images": len(data[0]),
                "test_images": len(data[1]),
                "train_seconds": [t["train"] for t in turns],
                "test_seconds": [t["test"] for t in turns],
            }
        )
    measured = {
        "schema": SCHEMA,
        **_identity(settings, configs),
        "profile": settings.profile,
        "what": WHAT.format(rounds=rounds, images=images),
        "hardware": hardware(device),
        "versions": versions(),
        "started": started,
        "finished": timestamp(),
        "seconds": round(seconds, 2),
        "other_cpu_seconds": other_work.seconds(),
        "models": models,
    }
    target = path(settings.profile)
    with run_lock(STATE_FOLDER, progress=False):
        atomic.write_text(target, json.dumps(measured, indent=1) + "\n")
    return measured


def frame(measured: dict | None) -> pd.DataFrame:
    """One row per model, depth and round: the seconds of an epoch of the whole training set at that round's pace
    (``train_seconds``) and of its test pass (``test_seconds``), with the host and start of the measurement."""
    columns = ["model", "depth", "round", "train_seconds", "test_seconds", "machine", "started", "busy", "images"]
    if measured is None:
        return pd.DataFrame(columns=columns)
    rows = []
    for entry in measured["models"]:
        per_epoch = entry["train_images"] / entry["images"]
        for number, (trained, tested) in enumerate(zip(entry["train_seconds"], entry["test_seconds"]), 1):
            rows.append(
                {
                    "model": entry["model"],
                    "depth": entry["depth"],
                    "round": number,
                    "train_seconds": trained * per_epoch,
                    "test_seconds": tested,
                    "machine": host_label(measured["hardware"]),
                    "started": measured["started"],
                    "busy": busy(measured),
                    "images": measured["images"],  # asked of every turn (whole batches make each model's own)
                }
            )
    return pd.DataFrame(rows, columns=columns)


def rows_of(timed: pd.DataFrame, model: str, depth: int) -> pd.DataFrame:
    return timed[(timed["model"] == model) & (timed["depth"] == depth)].set_index("round")


def round_gains(timed: pd.DataFrame, model: tuple[str, int], vit: tuple[str, int], kind: str) -> pd.Series:
    """Per round: the gain 100 x (1 - T(model) / T(ViT)) of the time behind ``kind`` (r_t: training, r_v: the test
    pass), each model's turn paired with ViT's in the same round."""
    column = TIMED[kind]
    mine, theirs = rows_of(timed, *model)[column], rows_of(timed, *vit)[column]
    both = pd.concat([mine, theirs], axis=1, keys=["model", "vit"]).dropna()
    return 100 * (1 - both["model"] / both["vit"])


def ratios(timed: pd.DataFrame, model: tuple[str, int], vit: tuple[str, int]) -> dict:
    """Article 1's r_t, r_v (T_ViT / T_model) and gains g_t, g_v (%) over the rounds, each with its interval."""
    found = {"rounds": 0}
    for kind, gain in (("r_t", "g_t"), ("r_v", "g_v")):
        gains = round_gains(timed, model, vit, kind)
        found[kind] = results.spread(100 / (100 - gains), 2) if len(gains) else "n/a"
        found[gain] = results.spread(gains, 0) if len(gains) else "n/a"
        found["rounds"] = max(found["rounds"], len(gains))
    return found


def off_plan(timed: pd.DataFrame) -> str:
    """How the rounds differ from the committed plan's ("" where they are its protocol, or no plan is committed)."""
    fixed = plan()
    if fixed is None or timed.empty:
        return ""
    held = (int(timed["round"].max()), int(timed["images"].iloc[0]))
    if held == (fixed["rounds"], fixed["images"]):
        return ""
    return f"{held[0]} rounds of {held[1]:,} images, where the plan fixed {fixed['rounds']} of {fixed['images']:,}"


def described(timed: pd.DataFrame) -> str:
    """The measurement in words for a caption: what each round did, where and when (or that none was taken)."""
    if timed.empty:
        return (
            "the timing rounds are not measured here (on a quiet machine: python -m vitbn_nb campaign measure, or a "
            "chapter run that trains)"
        )
    rounds = int(timed["round"].max())
    busy_note = "; other work ran beside them" if bool(timed["busy"].iloc[0]) else ""
    return f"{rounds} interleaved rounds on {timed['machine'].iloc[0]}, {timed['started'].iloc[0][:10]}{busy_note}"


# -- the plan the rounds were fixed by, committed before any of them was timed ----------------------------------------

#: The plan, as committed (data: what :func:`.timing_plan.derive` wrote from the ``paper`` settings, not typed).
PLAN_FILE = Path(__file__).with_name("timing_plan.json")


def plan() -> dict | None:
    """The committed timing plan (None where none is committed)."""
    return json.loads(PLAN_FILE.read_text()) if PLAN_FILE.exists() else None
