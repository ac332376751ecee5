"""Many runs of one architecture trained at once as one stacked model (``engine="stacked"``): parameters stacked each
step (``vmap`` over ``functional_call``), each member keeping its own module, Adam, lr, BatchNorm statistics and data
order, so it equals its run alone up to fp32 rounding. On CUDA a full batch's step is replayed from a CUDA graph."""

from __future__ import annotations

import contextlib
import copy
import functools
import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.func import functional_call, vmap
from torch.nn.attention import SDPBackend, sdpa_kernel

from .. import data, timing
from ..data import Batches
from ..models import build_model
from ..system import nondeterminism_recorded, watch_determinism
from . import engine

#: Attention under ``vmap`` uses the math backend: on a GPU the fused choice can pick a kernel whose backward fails
#: there, the CPU's has no batching rule, and at 17 tokens the fused kernels buy next to nothing.
ATTENTION_BACKENDS = [SDPBackend.MATH]


@dataclass
class Member:
    """One run of a stack: its model, its optimiser and the seed its data order and augmentation come from."""

    model: nn.Module
    optimizer: torch.optim.Optimizer
    seed: int


class Stack:
    """The members' models run as one: parameters stacked per step, buffers stacked for the whole run."""

    def __init__(self, members: list[Member], device: torch.device, *, graph: bool = True):
        self.members, self.device = members, device
        first = members[0].model
        self.skeleton = copy.deepcopy(first)  # only its structure is used: functional_call swaps every tensor
        self.parameter_names = [name for name, _ in first.named_parameters()]
        # Listed once (rebuilding name -> tensor maps every step cost more than the step's arithmetic at depth 1): per
        # name, every member's own parameter, stacked anew each step so that its gradient reaches that member's leaf.
        self._parameters = list(zip(*([p for _, p in m.model.named_parameters()] for m in members)))
        self.buffers = {  # allocated once: a captured CUDA graph keeps reading and updating these very tensors
            name: torch.stack([dict(m.model.named_buffers())[name] for m in members])
            for name, _ in first.named_buffers()
        }
        self.graph: torch.cuda.CUDAGraph | None = None
        self.graph_failed: str | None = None if graph else "not asked for"
        self._static: tuple[Tensor, Tensor, Tensor] | None = None
        self._eager_steps = 0
        self._full_shape: torch.Size | None = None
        self._side_stream = None

    def gather_buffers(self, back: bool = False) -> None:
        """Copy each member's BatchNorm statistics into the stacked ones (a resumed member brings its own); ``back``:
        the stacked ones back into each member's model (before testing, before saving)."""
        with torch.no_grad():
            for i, member in enumerate(self.members):
                own = dict(member.model.named_buffers())
                for name, stacked in self.buffers.items():
                    source, target = (stacked[i], own[name]) if back else (own[name], stacked[i])
                    target.copy_(source)

    def forward(self, x: Tensor) -> Tensor:
        """Logits ``[members, batch, classes]`` for inputs ``[members, batch, ...]`` (training mode)."""
        parameters = {name: torch.stack(tensors) for name, tensors in zip(self.parameter_names, self._parameters)}
        self.skeleton.train()
        with sdpa_kernel(ATTENTION_BACKENDS):
            return vmap(lambda p, b, xi: functional_call(self.skeleton, (p, b), (xi,)), randomness="error")(
                parameters, self.buffers, x
            )

    def eager_step(self, x: Tensor, y: Tensor) -> Tensor:
        """One Adam step for every member on its own batch; returns each member's mean loss, on the device."""
        for member in self.members:
            member.optimizer.zero_grad(set_to_none=True)
        logits = self.forward(x)
        losses = F.cross_entropy(logits.flatten(0, 1), y.flatten(), reduction="none").view(y.shape).mean(dim=1)
        losses.sum().backward()  # members are independent: each gets exactly the gradient of its own loss
        for member in self.members:
            member.optimizer.step()
        return losses.detach()

    def step(self, x: Tensor, y: Tensor) -> Tensor:
        """``eager_step``, replayed from a CUDA graph on a GPU after a few warm-up steps; returns its own tensor."""
        if self.device.type != "cuda" or self.graph_failed is not None:
            return self.eager_step(x, y)
        if self._full_shape is None:
            self._full_shape = x.shape  # an epoch's first batch is a full one (or the whole, smaller, set)
        if x.shape != self._full_shape:
            return self.eager_step(x, y)  # a short last batch: the same kernels, eagerly; the graph keeps the full
        if self.graph is not None:
            static_x, static_y, losses = self._static
            static_x.copy_(x)
            static_y.copy_(y)
            self.graph.replay()
            return losses.clone()
        if self._eager_steps < GRAPH_WARMUP_STEPS:
            self._eager_steps += 1
            return self._warm_up(x, y)
        return self._capture(x, y)

    def _warm_up(self, x: Tensor, y: Tensor) -> Tensor:
        """An eager step on a side stream (PyTorch's recipe: what is created lazily is created before the capture)."""
        current = torch.cuda.current_stream(self.device)
        if self._side_stream is None:
            self._side_stream = torch.cuda.Stream(self.device)
        self._side_stream.wait_stream(current)
        with torch.cuda.stream(self._side_stream):
            losses = self.eager_step(x, y)
        current.wait_stream(self._side_stream)
        return losses

    def _capture(self, x: Tensor, y: Tensor) -> Tensor:
        """Capture the step once (nothing runs while capturing), then replay it for this batch."""
        stream = torch.cuda.current_stream(self.device)
        pool = torch.cuda.graph_pool_handle()
        static_x, static_y = x.clone(), y.clone()
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph, pool=pool):
                losses = self.eager_step(static_x, static_y)
        except Exception as error:  # an op that cannot be captured: train on eagerly, same kernels and numbers
            self._abandon_capture(stream, pool)
            self.graph_failed = f"{type(error).__name__}: {error}"
            warnings.warn(
                f"the stacked step could not be captured as a CUDA graph ({self.graph_failed}); training on without it",
                stacklevel=2,
            )
            return self.eager_step(x, y)
        self.graph, self._static = graph, (static_x, static_y, losses)
        graph.replay()
        return losses.clone()

    def _abandon_capture(self, stream, pool) -> None:
        """Undo a failed capture: where ending it raised, put back the current stream and the allocator's pool."""
        if torch.cuda.current_stream(self.device) != stream:
            torch.cuda.set_stream(stream)
            index = self.device.index if self.device.index is not None else torch.cuda.current_device()
            with contextlib.suppress(RuntimeError):  # already ended where torch's exit got that far
                torch.cuda.memory._cuda_endAllocateToPool(index, pool)
        torch.cuda.synchronize(self.device)


#: Eager steps before the capture: the allocator, the optimisers' state and cuBLAS's workspace settle first.
GRAPH_WARMUP_STEPS = 3


def train_epoch(
    stack: Stack, train_data: Batches, *, batch_size: int, generators: list[torch.Generator], bar=None
) -> list[dict]:
    """One epoch of every member; one dict per member (its own mean loss; the stack's shared timings)."""
    device = stack.device
    stack.gather_buffers()
    sums = torch.zeros(len(stack.members), device=device)
    seen = 0
    epoch = engine.TimedBatches(train_data.stacked_batches(batch_size, generators, min_batch=2), device, bar)
    with watch_determinism():
        for x, y in epoch:
            sums += stack.step(x, y) * y.shape[1]
            seen += y.shape[1]
    stack.gather_buffers(back=True)
    shared = {**epoch.timings, "stacked_runs": len(stack.members), "cuda_graph": stack.graph is not None}
    shared |= nondeterminism_recorded()
    if stack.graph_failed not in (None, "not asked for"):
        shared["cuda_graph_failed"] = stack.graph_failed[:300]
    return [{"train_loss": loss, **shared} for loss in (sums / max(seen, 1)).tolist()]


def optimizer_for(model: nn.Module, lr: float, device: torch.device) -> torch.optim.Adam:
    """A member's Adam: fused (one kernel per step) and, on a GPU, capturable (for a CUDA graph)."""
    return torch.optim.Adam(model.parameters(), lr=lr, fused=True, capturable=device.type == "cuda")


def train_models(
    members: list[Member],
    train_data: Batches,
    *,
    epochs: int,
    start_epoch: int,
    batch_size: int,
    device: torch.device,
    evaluate: Callable[[nn.Module], dict],
    on_epoch_end: Callable[[list[dict]], bool],
    bar=None,
    refused: dict[str, str],
) -> None:
    """Train the members from ``start_epoch + 1`` to ``epochs``; ``on_epoch_end(metrics per member)`` says whether to
    stop, as a diverged member does. An engine in ``refused`` is not used, and the members' metrics say why."""
    alone, graph = refused.get("stacked"), "graphed" not in refused
    stack = None if alone else Stack(members, device, graph=graph)
    note = {} if graph or device.type != "cuda" else {"cuda_graph_off": refused["graphed"]}
    note = {"engine_fallback": alone} if alone else note
    for epoch in range(start_epoch + 1, epochs + 1):
        if stack is not None:
            generators = [engine.epoch_generator(m.seed, epoch) for m in members]
            per_member = train_epoch(stack, train_data, batch_size=batch_size, generators=generators, bar=bar)
        else:  # the eager engine: each member alone, on its own seed's data order and augmentation
            per_member = []
            for i, member in enumerate(members):
                torch.manual_seed(engine.epoch_seed(member.seed, epoch))
                generator = engine.epoch_generator(member.seed, epoch)
                options = dict(batch_size=batch_size, device=device, bar=bar if i == 0 else None)  # the stack's steps
                per_member.append(
                    engine.train_epoch(member.model, member.optimizer, train_data, generator=generator, **options)
                )
        for member, metrics in zip(members, per_member):
            metrics.update(epoch=epoch, diverged=not math.isfinite(metrics["train_loss"]), **note)
            metrics.update(engine.tested(functools.partial(evaluate, member.model)))
        if on_epoch_end(per_member) or any(m["diverged"] for m in per_member):
            return


#: Runs in a timed stack (a configuration's three random seeds).
STACK_MEMBERS = 3


def time_engines(
    device: torch.device, *, steps: int, warmup: int, repeats: int, depths: tuple[int, ...] = (1, 6), batch: int = 100
):
    """Seconds per training image of one ViT run on one batch (compute only), by engine, in interleaved repeats."""
    train_set, _ = data.image_sets("mnist", 1000, 100, str(device))
    images = next(iter(train_set.batches(batch)))
    rows = []
    for depth in depths:
        runners = engine_runners(depth, images, device)
        timings = timing.interleave(runners, warmup=warmup + GRAPH_WARMUP_STEPS, repeats=repeats, length=steps)
        for name, repeats_ in timings.items():
            seconds = timing.median_repeat(repeats_)["seconds"] / (batch * (1 if name == "eager" else STACK_MEMBERS))
            row = dict(depth=depth, image=28, pipeline="engine (compute only)", engine=name, seconds_per_image=seconds)
            rows.append({**row, "device": device.type})
    return pd.DataFrame(rows)


def engine_runners(depth: int, batch: tuple, device: torch.device) -> dict:
    """``run(n)`` per engine: ``n`` training steps in a row, their seconds per step."""
    x, y = batch
    models = []
    for seed in range(STACK_MEMBERS):
        torch.manual_seed(seed)
        models.append(build_model("ViT", depth=depth).to(device))
    alone = torch.optim.Adam(models[0].parameters(), lr=1e-4)
    members = [Member(m, optimizer_for(m, 1e-4, device), seed) for seed, m in enumerate(models)]
    xs, ys = torch.stack([x] * STACK_MEMBERS), torch.stack([y] * STACK_MEMBERS)
    runs = {"eager": lambda: engine.train_step(models[0], alone, x, y)}
    runs["stacked"] = functools.partial(Stack(members, device, graph=False).step, xs, ys)
    if device.type == "cuda":
        runs["graphed"] = functools.partial(Stack(members, device).step, xs, ys)
    return {
        name: functools.partial(lambda n, f: {"seconds": timing.block(f, calls=n, device=device)}, f=fn)
        for name, fn in runs.items()
    }
