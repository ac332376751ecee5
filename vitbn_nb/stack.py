"""Many runs of one architecture trained at once, as one stacked model (``engine="stacked"``).

The members' parameters are stacked for every forward and backward pass (``torch.func.vmap`` over
``functional_call``), so one set of kernels trains them all; each member keeps its own ``nn.Module``
(its own parameters, as leaves), its own Adam and learning rate, its own BatchNorm statistics (the
buffers are stacked and updated in place by the vmapped forward), and its own data order and
augmentation (a generator per member, seeded as its run alone would be). The members' losses are
independent, so the gradient of their sum gives each member exactly its own gradient: a stacked run
equals the same runs trained one by one up to fp32 rounding (the batched matrix products round
differently), which ``tests/test_stack.py`` checks.

On CUDA, with ``Adam(capturable=True)``, the whole step (forward, backward, optimiser) is captured
once as a CUDA graph and replayed; a capture that fails falls back to the eager step, which runs the
same kernels and gives the same numbers.
"""

from __future__ import annotations

import copy
import math
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.func import functional_call, vmap

from . import engine
from .data import Batches

#: The CPU's attention kernel has no batching rule, so vmap runs it once per member; it says so on every step.
_NO_BATCH_RULE = "There is a performance drop because we have not yet implemented the batching rule"


def refusal(config) -> str | None:
    """Why runs like ``config`` (a ``RunConfig``) cannot be stacked (None when they can)."""
    if any(config.model_kwargs.get(name, 0) for name in ("dropout", "emb_dropout")):
        return "dropout draws from the global random stream, which the members would share"
    if config.pipeline == "reference" and config.dataset == "mnist_aug":
        return "the reference pipeline's augmentation draws from the global random stream"
    if config.init_from is not None or config.trainable != "all":
        return "fine-tuning runs start from other runs' weights and train one at a time"
    return None


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
        self.buffers = {  # allocated once: a captured CUDA graph keeps reading and updating these very tensors
            name: torch.stack([dict(m.model.named_buffers())[name] for m in members])
            for name, _ in first.named_buffers()
        }
        self.graph: torch.cuda.CUDAGraph | None = None
        self.graph_failed: str | None = None if graph else "not asked for"
        self._static: tuple[Tensor, Tensor, Tensor] | None = None
        self._eager_steps = 0

    def gather_buffers(self) -> None:
        """Copy each member's BatchNorm statistics into the stacked ones (a resumed member brings its own)."""
        with torch.no_grad():
            for i, member in enumerate(self.members):
                own = dict(member.model.named_buffers())
                for name, stacked in self.buffers.items():
                    stacked[i].copy_(own[name])

    def scatter_buffers(self) -> None:
        """Copy the stacked statistics back into each member's model (before testing, before saving)."""
        with torch.no_grad():
            for i, member in enumerate(self.members):
                own = dict(member.model.named_buffers())
                for name, stacked in self.buffers.items():
                    own[name].copy_(stacked[i])

    def forward(self, x: Tensor) -> Tensor:
        """Logits ``[members, batch, classes]`` for inputs ``[members, batch, ...]`` (training mode)."""
        parameters = {
            name: torch.stack([dict(m.model.named_parameters())[name] for m in self.members])
            for name in self.parameter_names
        }
        self.skeleton.train()
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=_NO_BATCH_RULE)
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
        """``eager_step``, replayed from a CUDA graph on a GPU once a few eager steps have warmed it up."""
        if self.device.type != "cuda" or self.graph_failed is not None:
            return self.eager_step(x, y)
        if self.graph is not None and self._static[0].shape == x.shape:
            static_x, static_y, losses = self._static
            static_x.copy_(x)
            static_y.copy_(y)
            self.graph.replay()
            return losses
        if self.graph is not None or self._eager_steps < GRAPH_WARMUP_STEPS:
            self._eager_steps += 1  # a warm-up step, or a short last batch: the same kernels, run eagerly
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                losses = self.eager_step(x, y)
            torch.cuda.current_stream().wait_stream(stream)
            return losses
        return self._capture(x, y)

    def _capture(self, x: Tensor, y: Tensor) -> Tensor:
        """Capture the step once (nothing runs while capturing), then replay it for this batch."""
        try:
            static_x, static_y = x.clone(), y.clone()
            for member in self.members:
                member.optimizer.zero_grad(set_to_none=True)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                losses = self.eager_step(static_x, static_y)
        except Exception as error:  # an op that cannot be captured: train on eagerly, same kernels and numbers
            self.graph_failed = f"{type(error).__name__}: {error}"
            warnings.warn(
                f"the stacked step could not be captured as a CUDA graph ({self.graph_failed}); training on without it",
                stacklevel=2,
            )
            torch.cuda.synchronize(self.device)
            return self.eager_step(x, y)
        self.graph, self._static = graph, (static_x, static_y, losses)
        graph.replay()
        return losses


#: Eager steps before the capture: the allocator, the optimisers' state and cuBLAS's workspace settle first.
GRAPH_WARMUP_STEPS = 3


def _batches_in_step(
    train_data: Batches, generators: list[torch.Generator], batch_size: int
) -> Iterator[tuple[Tensor, Tensor]]:
    """Each member's own batch of ``train_data`` side by side: ``[members, batch, ...]`` images and
    ``[members, batch]`` labels."""
    streams = [iter(train_data.batches(batch_size, generator=g, shuffle=True, min_batch=2)) for g in generators]
    for parts in zip(*streams):
        yield torch.stack([x for x, _ in parts]), torch.stack([y for _, y in parts])


def train_epoch(
    stack: Stack, train_data: Batches, *, batch_size: int, generators: list[torch.Generator], bar=None
) -> list[dict]:
    """One epoch of every member; one dict per member (its own mean loss; the stack's shared timings)."""
    device = stack.device
    stack.gather_buffers()
    sums = torch.zeros(len(stack.members), device=device)
    seen = 0
    epoch = engine.TimedBatches(_batches_in_step(train_data, generators, batch_size), device, bar)
    for x, y in epoch:
        sums += stack.step(x, y) * y.shape[1]
        seen += y.shape[1]
    stack.scatter_buffers()
    shared = {**epoch.timings, "stacked_runs": len(stack.members), "cuda_graph": stack.graph is not None}
    return [{"train_loss": loss, **shared} for loss in (sums / max(seen, 1)).tolist()]


def optimizer_for(model: nn.Module, lr: float, device: torch.device) -> torch.optim.Adam:
    """A member's Adam: capturable on a GPU, so its step can live inside a CUDA graph."""
    return torch.optim.Adam(model.parameters(), lr=lr, capturable=device.type == "cuda")


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
) -> None:
    """Train the members from ``start_epoch + 1`` to ``epochs``. After each epoch ``on_epoch_end(metrics per
    member)`` stores it and says whether to stop there; a member whose loss is no longer finite stops the
    stack there (its run records the divergence; the caller trains the others on without it)."""
    stack = Stack(members, device)
    for epoch in range(start_epoch + 1, epochs + 1):
        generators = [torch.Generator(device=device).manual_seed(engine.epoch_seed(m.seed, epoch)) for m in members]
        per_member = train_epoch(stack, train_data, batch_size=batch_size, generators=generators, bar=bar)
        for member, metrics in zip(members, per_member):
            metrics["epoch"] = epoch
            metrics["diverged"] = not math.isfinite(metrics["train_loss"])
            metrics.update(evaluate(member.model))
        if on_epoch_end(per_member) or any(m["diverged"] for m in per_member):
            return
