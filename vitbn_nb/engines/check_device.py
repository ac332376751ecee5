"""``python -m vitbn_nb check-device``: does this device train the book's engines right (determinism, a stack against
its runs alone, on CUDA the graphed stack with no host sync, timings)? The verdict is kept per device, driver and
versions in ``.device-checks/``; an engine whose check failed is not used there (:func:`refused_engines`)."""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import json
import math
import re
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from .. import __version__, atomic, data, system
from ..models import build_model
from ..paths import runs_dir
from . import engine, stack

FOLDER = ".device-checks"
#: Per-epoch loss within this relative difference: an engine error (shared statistics, a doubled step) moves it more.
LOSS_TOLERANCE = 1e-4
#: Per-epoch accuracy within this many points (5 of 1,000 test images): on a GPU a stack's batched matmuls round
#: differently from single ones, flipping a few near-tie images while the loss agrees.
ACCURACY_TOLERANCE = 0.5
FAILED_HELP = (
    "check-device: a check FAILED. Training still works: an engine that failed is not used on this device "
    "(the runs' records say so). Please send the table above, the verdict file named above (JSON, a few KB) and "
    "the output of `nvidia-smi` and `pip freeze | grep -i -e torch -e nvidia` to the book's issue tracker."
)


@dataclass(frozen=True)
class CheckSettings:
    """How much the check trains: ``FULL`` for a GPU; ``QUICK`` runs every check in seconds on a CPU (smoke, tests)."""

    name: str
    train_size: int
    test_size: int
    epochs: int
    batch_size: int
    vit_depth: int
    timing_depths: tuple[int, ...]
    timing_steps: int
    timing_warmup: int
    timing_repeats: int
    vit: str = "ViTBNFFN"  # BatchNorm in the encoder: each member's own running statistics are part of the check
    dnn: str = "DNNBN_d3"
    dataset: str = "mnist_aug"  # each member's own augmentation stream is part of the check
    #: The stack's members as (random seed, learning rate): two seeds, two learning rates.
    members: tuple[tuple[int, float], ...] = ((0, 1e-3), (1, 1e-3), (0, 3e-3))


FULL = CheckSettings("full", 4000, 1000, 3, 100, 2, (1, 6), 10, 3, 5)
QUICK = CheckSettings("quick", 120, 60, 2, 50, 1, (1,), 1, 0, 1)


def device_key(device: torch.device) -> dict:
    """What a verdict holds for: the device, its driver, the libraries and the check's rule (else: checked anew)."""
    info = system.hardware(device)
    key = {"device": system.label(info), "driver": info.get("driver"), "torch": torch.__version__}
    if device.type == "cuda":
        key.update(cuda=torch.version.cuda, cudnn=torch.backends.cudnn.version())
    rule = f"loss {LOSS_TOLERANCE:g} relative, accuracy {ACCURACY_TOLERANCE:g} points"
    return {**key, "vitbn_nb": __version__, "rule": rule}


def verdict_path(device: torch.device, store: Path | None = None) -> Path:
    key = device_key(device)
    digest = hashlib.sha1(json.dumps(key, sort_keys=True).encode()).hexdigest()[:10]
    slug = re.sub(r"[^A-Za-z0-9]+", "-", key["device"]).strip("-")[:60]
    return Path(store or runs_dir()) / FOLDER / f"{slug}-{digest}.json"


def stored(device: torch.device, store: Path | None = None) -> dict | None:
    """This device's stored verdict, or None (none yet, or unreadable: checked anew)."""
    path = verdict_path(device, store)
    with contextlib.suppress(OSError, ValueError, RecursionError):
        found = json.loads(path.read_text())
        if isinstance(found, dict) and isinstance(found.get("refused"), dict):
            return found
    return None


def refused_engines(device: torch.device) -> dict[str, str]:
    """Engines this device's verdict refuses, each with why (a GPU without a verdict is checked first)."""
    verdict = stored(device)
    if verdict is None and device.type == "cuda":
        verdict = ensure(device)
    return dict(verdict["refused"]) if verdict else {}


def ensure(
    device: str | torch.device | None = None,
    *,
    quick: bool = False,
    store: Path | None = None,
    log: Callable[[str], None] = print,
) -> dict:
    """This device's stored verdict, checked first when there is none (or only a quick one and a full one is wanted)."""
    device = system.pick_device(device)
    found = stored(device, store)
    if found is not None and (quick or found.get("settings") == FULL.name):
        log(f"device check: {summary(found)} (stored {found['checked']}; python -m vitbn_nb check-device redoes it)")
        return found
    log(f"device check: no verdict stored for {system.hardware_label(device)} and these libraries; checking it now")
    return run(device, QUICK if quick else FULL, store=store, log=log)


def run(
    device: str | torch.device | None = None,
    settings: CheckSettings = FULL,
    *,
    store: Path | None = None,
    log: Callable[[str], None] = print,
) -> dict:
    """Run every check on ``device``, print the table, store the verdict and return it."""
    device = system.pick_device(device)
    start = time.perf_counter()
    log(f"checking {system.hardware_label(device)} ({settings.name} settings) ...")
    rows = _checks(device, settings)
    refused = {}
    for row in (r for r in rows if r["engine"] in ("stacked", "graphed") and r["result"] == "FAIL"):
        refused.setdefault(row["engine"], f"check-device on this device failed: {row['check']} ({row['detail']})")
    if "stacked" in refused and device.type == "cuda":
        refused.setdefault("graphed", refused["stacked"])
    verdict = {
        "key": device_key(device),
        "checked": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "settings": settings.name,
        "seconds": round(time.perf_counter() - start, 1),
        "passed": not any(r["result"] == "FAIL" for r in rows),
        "refused": refused,
        "rows": rows,
        "settings_used": asdict(settings),
    }
    path = verdict_path(device, store)
    atomic.write_json(path, verdict)
    log(table(verdict))
    log(f"verdict stored in {path}")
    return verdict


def summary(verdict: dict) -> str:
    if verdict["passed"]:
        return f"every check passed on {verdict['key']['device']}"
    used = "; ".join(f"{name} engine not used: {why}" for name, why in verdict["refused"].items())
    return f"a check FAILED on {verdict['key']['device']}" + (f" ({used})" if used else "")


def table(verdict: dict) -> str:
    """The check's one table, and what it means."""
    width = max(len(r["check"]) for r in verdict["rows"]) + 2
    lines = [f"{'check':<{width}}{'result':<8}detail"]
    lines += [f"{r['check']:<{width}}{r['result']:<8}{r['detail']}" for r in verdict["rows"]]
    lines.append(f"verdict: {summary(verdict)} ({verdict['seconds']:.0f} s, {verdict['settings']} settings)")
    if any(r["result"] == "FAIL" and r["engine"] == "eager" for r in verdict["rows"]):
        lines.append("runs on this device do not repeat bit for bit: their records say so (nondeterministic)")
    return "\n".join(lines)


# -- the checks -------------------------------------------------------------------------------------------------------
def _row(check: str, engine_: str | None, result: str, detail: str) -> dict:
    return {"check": check, "engine": engine_, "result": result, "detail": detail}


def _checks(device: torch.device, s: CheckSettings) -> list[dict]:
    train_set, test_set = data.image_sets(s.dataset, s.train_size, s.test_size, str(device))
    rows = [_repeat_check(device, s, train_set, test_set)]
    stacks, without_graph = {}, {"graphed": "the stacked engine is checked on its own"}
    for name, kwargs in ((s.vit, {"depth": s.vit_depth}), (s.dnn, {})):
        label = f"{name}{f' d{s.vit_depth}' if kwargs else ''}"
        alone = [_train_alone(name, kwargs, seed, lr, s, train_set, test_set, device) for seed, lr in s.members]
        stacks[name] = _train_stack(name, kwargs, s, train_set, test_set, device, refused=without_graph)
        rows.append(_compare(f"stack of 3 = one by one ({label})", "stacked", alone, stacks[name], s))
    if device.type == "cuda":
        graphed = _train_stack(s.vit, {"depth": s.vit_depth}, s, train_set, test_set, device, refused={})
        row = _compare(f"graphed stack = eager stack ({s.vit} d{s.vit_depth})", "graphed", stacks[s.vit], graphed, s)
        failure = next((e["cuda_graph_failed"] for m in graphed for e in m if "cuda_graph_failed" in e), None)
        if failure or not any(e["cuda_graph"] for m in graphed for e in m):
            row.update(result="FAIL", detail=f"the step was not captured ({failure or 'too few full batches'})")
        rows += [row, _sync_check(device, s, train_set)]
        peak = max(e["peak_memory_mib"] or 0 for m in graphed for e in m)
        rows.append(_row(f"peak memory, stack of 3 ({s.vit} d{s.vit_depth})", None, "info", f"{peak:.0f} MiB"))
    else:
        rows += [
            _row(check, "graphed", "n/a", "CUDA only")
            for check in ("graphed stack = eager stack", "no host sync in the step", "peak memory")
        ]
    rows += _timing_rows(device, s)
    return rows


def _model(name: str, kwargs: dict, seed: int, device: torch.device) -> torch.nn.Module:
    torch.manual_seed(seed)  # as the run store builds a run's model
    return build_model(name, **kwargs).to(device)


def _train_alone(name, kwargs, seed, lr, s, train_set, test_set, device) -> list[dict]:
    model = _model(name, kwargs, seed, device)
    options = dict(epochs=s.epochs, batch_size=s.batch_size, test_batch_size=s.test_size, progress=False)
    return engine.train_model(model, train_set, test_set, lr=lr, seed=seed, device=device, **options)


def _train_stack(name, kwargs, s, train_set, test_set, device, refused: dict) -> list[list[dict]]:
    models = [(seed, lr, _model(name, kwargs, seed, device)) for seed, lr in s.members]
    members = [stack.Member(model, stack.optimizer_for(model, lr, device), seed) for seed, lr, model in models]
    history: list[list[dict]] = [[] for _ in members]

    def epoch_end(per_member: list[dict]) -> bool:
        for mine, metrics in zip(history, per_member):
            mine.append(metrics)
        return False

    evaluate = lambda model: engine.evaluate(model, test_set, batch_size=s.test_size, device=device)
    schedule = dict(epochs=s.epochs, start_epoch=0, batch_size=s.batch_size, device=device)
    stack.train_models(members, train_set, evaluate=evaluate, on_epoch_end=epoch_end, refused=refused, **schedule)
    return history


def _repeat_check(device, s: CheckSettings, train_set, test_set) -> dict:
    seed, lr = s.members[0]
    kwargs = {"depth": s.vit_depth}
    first, second = (_train_alone(s.vit, kwargs, seed, lr, s, train_set, test_set, device) for _ in range(2))
    keys = ("train_loss", "test_acc", "class_acc")
    same = [{k: e[k] for k in keys} for e in first] == [{k: e[k] for k in keys} for e in second]
    worst = max(abs(a["train_loss"] - b["train_loss"]) for a, b in zip(first, second))
    alerts = first[-1].get("nondeterministic") or second[-1].get("nondeterministic")
    detail = f"{s.epochs} epochs of {s.vit} d{s.vit_depth}: " + (
        "identical loss and accuracies" if same else f"they differ (loss by up to {worst:.2e})"
    )
    if alerts:
        detail += f"; torch warned: {alerts[0][:80]}"
    return _row("eager run trained twice", "eager", "pass" if same else "FAIL", detail)


def _compare(check: str, engine_: str, expected: list, found: list, s: CheckSettings) -> dict:
    """Per member and epoch: loss within :data:`LOSS_TOLERANCE`, accuracy :data:`ACCURACY_TOLERANCE` or one image."""
    loss = acc = 0.0
    for mine, theirs in zip(expected, found, strict=True):
        for a, b in zip(mine, theirs, strict=True):
            scale = max(abs(a["train_loss"]), 1e-12)
            difference = abs(a["train_loss"] - b["train_loss"]) / scale
            loss = max(loss, difference) if math.isfinite(difference) else math.inf
            acc = max(acc, abs(a["test_acc"] - b["test_acc"]))
    allowed = max(ACCURACY_TOLERANCE, 100 / s.test_size)  # never less than one image
    images = round(allowed * s.test_size / 100)
    ok = loss <= LOSS_TOLERANCE and acc <= allowed + 1e-9
    detail = (
        f"loss differs by {loss:.1e} relative (<= {LOSS_TOLERANCE:g}), accuracy by {acc:.2f} points "
        f"(<= {allowed:.2f}: {images} test image{'s' * (images != 1)})"
    )
    return _row(check, engine_, "pass" if ok else "FAIL", detail)


def _sync_check(device: torch.device, s: CheckSettings, train_set) -> dict:
    """A replay, an eager stacked step, an eager step and a batch fetch with host syncs turned into errors."""
    models = [(seed, _model(s.vit, {"depth": s.vit_depth}, seed, device)) for seed, _ in s.members]
    members = [stack.Member(m, stack.optimizer_for(m, 1e-3, device), seed) for seed, m in models]
    generators = [torch.Generator().manual_seed(seed) for seed, _ in s.members]  # the data's stream: on the CPU
    x, y = next(iter(train_set.stacked_batches(s.batch_size, generators, min_batch=2)))
    graphed, eager_stack = stack.Stack(members, device), stack.Stack(members, device, graph=False)
    for _ in range(stack.GRAPH_WARMUP_STEPS + 1):
        graphed.step(x, y)  # warm-up, then the capture
    alone = members[0]
    previous = torch.cuda.get_sync_debug_mode()
    torch.cuda.synchronize(device)
    try:
        torch.cuda.set_sync_debug_mode("error")
        sums = torch.zeros(len(members), device=device)
        batches = iter(train_set.stacked_batches(s.batch_size, generators, min_batch=2))
        x, y = next(batches)
        sums += graphed.step(x, y) * y.shape[1]
        sums += eager_stack.step(x, y) * y.shape[1]
        engine.train_step(alone.model, alone.optimizer, x[0], y[0])
        done = "a replay, an eager stacked step, an eager step and a batch fetch: no sync"
        result = "pass" if graphed.graph is not None else "FAIL"
        detail = done if result == "pass" else f"the step was not captured ({graphed.graph_failed})"
    except RuntimeError as error:
        result, detail = "FAIL", f"a host sync: {str(error).splitlines()[0][:120]}"
    finally:
        torch.cuda.set_sync_debug_mode(previous)
    return _row("no host sync in the step", "graphed", result, detail)


def _timing_rows(device: torch.device, s: CheckSettings) -> list[dict]:
    timed = stack.time_engines(
        device, steps=s.timing_steps, warmup=s.timing_warmup, repeats=s.timing_repeats, depths=s.timing_depths
    )
    rows = []
    for depth, group in timed.groupby("depth"):
        per_run = {r.engine: r.seconds_per_image * 100 for r in group.itertuples()}  # ms per run-step of 100 images
        parts = [f"eager {1e3 * per_run['eager']:.1f} ms"] + [
            f"{name} {1e3 * seconds:.1f} ms ({per_run['eager'] / seconds:.2f}x)"
            for name, seconds in per_run.items()
            if name != "eager"
        ]
        detail = ", ".join(parts) + f" per run and step (batch 100, a stack of {stack.STACK_MEMBERS})"
        rows.append(_row(f"step time, ViT d{depth}", None, "info", detail))
    return rows
