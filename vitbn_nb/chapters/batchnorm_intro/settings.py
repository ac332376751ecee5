"""Chapter 01's settings: the ``paper`` protocol as the defaults, ``cpu`` and ``smoke`` as differences."""

from __future__ import annotations

from dataclasses import dataclass

from ...profiles import AUTO_ENGINE
from ..base import RunSettings


@dataclass(frozen=True)
class IntroSettings(RunSettings):
    """Chapter 01: article 2's DNN experiment (15 epochs of augmented MNIST at two learning rates)."""

    chapter = "01_batchnorm_intro"  # its notebook's name (a class attribute, not a setting)

    epochs: int = 15
    lrs: tuple[float, ...] = (0.01, 0.1)
    batch_size: int = 100
    #: On a GPU a configuration's seeds and learning rates train as one stacked model (``vitbn_nb.engines.stack``).
    engine: str = AUTO_ENGINE


#: The DNNs are tiny: chapter 01 keeps the article's whole protocol, one run at a time (on a CPU a stack is slower).
CPU = dict(engine="eager")

SMOKE = dict(seeds=1, epochs=2, train_size=600, test_size=500, engine="eager")
