"""What may stop training (a session's deadline), and what a configuration from elsewhere
may build: :func:`model_problem` refuses one past the model families' bounds before any model is built."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass
class Deadline:
    """Stop at an epoch boundary when the next epoch (the last one's length times ``margin``) would end after ``at``."""

    at: float
    clock: Callable[[], float] = time.monotonic
    margin: float = 1.2
    #: Epochs trained under this deadline: a stop after none is no reason to run the same command again.
    epochs_trained: int = 0
    #: A configuration's estimated seconds per epoch (None: unknown): a run that cannot end one does not start.
    epoch_estimate: Callable[[object], float | None] | None = None

    @classmethod
    def after(cls, seconds: float) -> Deadline:
        if isinstance(seconds, bool) or not (isinstance(seconds, (int, float)) and 0 < seconds < math.inf):
            raise ValueError(f"deadline={seconds!r} is not allowed; give a positive, finite number of seconds")
        return cls(time.monotonic() + seconds)

    def passed(self) -> bool:
        return self.clock() >= self.at

    def no_room_for(self, seconds: float) -> bool:
        return self.clock() + self.margin * seconds >= self.at

    def refuses(self, config) -> bool:
        """Whether the deadline has passed, or leaves no room for one epoch of ``config`` by the estimate."""
        seconds = self.epoch_estimate(config) if self.epoch_estimate is not None else None
        return self.passed() or (seconds is not None and self.no_room_for(seconds))


class DeadlineReached(RuntimeError):
    """Training stopped at the deadline; every finished epoch is stored and the run resumes where it stopped."""

    def __init__(self, run_id: str, done: int | None = None, epochs: int | None = None):
        self.run_id = run_id
        where = f" after epoch {done} of {epochs}" if done is not None else " before it started"
        super().__init__(f"stopped at the deadline: run {run_id}{where}; run the same command again to resume")


# -- what a run's configuration may build --------------------------------------------------------------------
# A record from elsewhere is held to these bounds before any model is built (a ViT of depth 100,000 costs minutes and
# gigabytes even on the meta device); the book's largest model, a ViT of depth 12 under 2M parameters, is well within.

#: The bound of each size-like constructor argument (a number, or each number of a list such as a kernel list).
MODEL_BOUNDS = {"depth": 64, "branches": 8, "heads": 64, "image_size": 512, "patch_size": 512}
#: The bound of every other number among a model's arguments (dim, mlp_dim, dim_head, hidden, width, channels ...).
MAX_WIDTH = 4096
#: Parameters a model may have (counted on the meta device: no memory spent).
MAX_PARAMETERS = 10_000_000


def _numbers(value, depth: int = 0):
    """The numbers of a constructor argument: itself, or those of a (nested) list."""
    if isinstance(value, bool) or depth > 3:
        return
    if isinstance(value, (int, float)):
        yield value
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _numbers(item, depth + 1)


def model_problem(config: dict, *, count: bool = True) -> str | None:
    """Why the model a record's ``config`` names is past the book's bounds (:data:`MODEL_BOUNDS`, :data:`MAX_WIDTH`;
    with ``count``, its parameters counted on the meta device), else None."""
    kwargs = config.get("model_kwargs") if isinstance(config, dict) else None
    if not isinstance(kwargs, dict):
        return None
    for name, value in kwargs.items():
        bound = MODEL_BOUNDS.get(name, MAX_WIDTH)
        if any(not math.isfinite(n) or abs(n) > bound for n in _numbers(value)):
            return f"model_kwargs {name}={value!r:.40} is past the book's bounds (at most {bound:,})"
    if count and (parameters := model_size(config)) is not None and parameters[0] > MAX_PARAMETERS:
        return f"its model has {parameters[0]:,} parameters (the book's models have at most {MAX_PARAMETERS:,})"
    return None


def model_size(config: dict) -> tuple[int, int, int] | None:
    """(parameters, bytes of its state dict, tensors in it) of the model ``config`` builds on the meta device; None when
    it builds none. Call only on a configuration :func:`model_problem` passed without counting."""
    import torch  # heavy: a deadline needs none

    from .models import build_model  # heavy (torch)

    try:
        with torch.device("meta"):
            model = build_model(config["model"], **config["model_kwargs"])
    except Exception:  # any refusal of the arguments: the caller's own build names it
        return None
    state = model.state_dict()
    size = sum(t.numel() * t.element_size() for t in state.values())
    return sum(p.numel() for p in model.parameters()), size, len(state)
