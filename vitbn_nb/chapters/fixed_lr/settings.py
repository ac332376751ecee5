"""Chapter 03's settings: the ``paper`` protocol as the defaults, ``cpu`` and ``smoke`` as differences."""

from __future__ import annotations

from dataclasses import dataclass

from ..base import RunSettings
from . import article


@dataclass(frozen=True)
class FixedLrSettings(RunSettings):
    """Chapter 03: article 1's Experiment 1, 30 epochs at each of three fixed learning rates; its seed plan
    (``plan.seed_plan``, as committed; which runs trained after it git says) keeps ``seeds`` = 3 and says what they
    detect."""

    chapter = "03_fixed_lr"  # its notebook's name (a class attribute, not a setting)

    epochs: int = article.EPOCHS
    lrs: tuple[float, ...] = tuple(article.EXPERIMENT1)
    #: The learning-rate sweep's further rates (:mod:`.lr_sweep`): the depth-6 trio trains at these too, from
    #: between the articles' rates to five times article 1's largest.
    sweep_lrs: tuple[float, ...] = (0.002, 0.02, 0.05)
    batch_size: int = article.BATCH_SIZE
    #: The lrs at which a smaller profile also takes article 1's whole protocol (the ``paper`` plan's own runs; a
    #: ``cpu`` rendering sets those all held): that lr's figure, tables and claims read them, the outputs across lrs
    #: keep the profile's own runs.
    full_protocol_lrs: tuple[float, ...] | None = None


#: Three seeds wherever a difference is judged, paid for with fewer steps (the accuracy and stability claims need the
#: article's 30 epochs anyway, its timing ratios few).
CPU = dict(seeds=3, epochs=4, train_size=5000, test_size=2000)

SMOKE = dict(seeds=1, epochs=2, train_size=600, test_size=500, sweep_lrs=(0.05,))
