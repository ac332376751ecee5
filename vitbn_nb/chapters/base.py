"""What the settings of the chapters that train or time a model share: the test batch, how much of each MNIST split
(``None``: all of it) and, for those that train runs, the seeds of each configuration."""

from __future__ import annotations

from dataclasses import dataclass

from ..profiles import ChapterSettings


@dataclass(frozen=True)
class DataSettings(ChapterSettings):
    test_batch_size: int = 5000
    train_size: int | None = None
    test_size: int | None = None


@dataclass(frozen=True)
class RunSettings(DataSettings):
    seeds: int = 3


@dataclass(frozen=True)
class OptimisedSettings(RunSettings):
    """Settings of a chapter whose runs take their lr and batch size from an Ax study (``hpo``): trials, each of
    ``trial_epochs``, then ``epochs`` with the best."""

    trials: int = 20
    trial_epochs: int = 3
    epochs: int = 30
