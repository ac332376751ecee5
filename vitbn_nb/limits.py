"""What may stop or forbid training: the deadline of a time-limited session (``train --deadline``) and
``TRAIN=never`` (render from the run store alone)."""

from __future__ import annotations

import math
import os
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

    @classmethod
    def after(cls, seconds: float) -> Deadline:
        if isinstance(seconds, bool) or not (isinstance(seconds, (int, float)) and 0 < seconds < math.inf):
            raise ValueError(f"deadline={seconds!r} is not allowed; give a positive, finite number of seconds")
        return cls(time.monotonic() + seconds)

    def passed(self) -> bool:
        return self.clock() >= self.at

    def no_room_for(self, seconds: float) -> bool:
        return self.clock() + self.margin * seconds >= self.at


class DeadlineReached(RuntimeError):
    """Training stopped at the deadline; every finished epoch is stored and the run resumes where it stopped."""

    def __init__(self, run_id: str, done: int | None = None, epochs: int | None = None):
        self.run_id = run_id
        where = f" after epoch {done} of {epochs}" if done is not None else " before it started"
        super().__init__(f"stopped at the deadline: run {run_id}{where}; run the same command again to resume")


#: ``never``: render from the run store only; a run it lacks is an error naming the run, not a training.
TRAIN_VARIABLE = "VITBN_TRAIN"


def training_is_off() -> bool:
    value = os.environ.get(TRAIN_VARIABLE, "").strip().lower()
    if value not in ("", "never", "auto"):
        raise ValueError(
            f"{TRAIN_VARIABLE}={value!r} is not allowed; use 'never' (render from the store) or leave it unset"
        )
    return value == "never"
