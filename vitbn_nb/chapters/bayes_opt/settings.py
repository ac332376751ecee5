"""Chapter 04's settings: the ``paper`` protocol as the defaults, ``cpu`` and ``smoke`` as differences."""

from __future__ import annotations

from dataclasses import dataclass

from ..base import OptimisedSettings


@dataclass(frozen=True)
class BayesOptSettings(OptimisedSettings):
    """Chapter 04: 20 trials per model (article 1), each 3 epochs (the book's choice: article 1 does not say how
    long a trial trains), then 30 epochs with the best lr and batch size."""

    chapter = "04_bayes_opt"  # its notebook's name (a class attribute, not a setting)


#: 12 trials: Ax spends 5 on initialisation (the centre, then Sobol), so BoTorch proposes 7.
CPU = dict(seeds=3, trials=12, trial_epochs=2, epochs=5, train_size=6000, test_size=2000)

#: 3 trials stay inside Ax's initialisation: no BoTorch step (slow on a CPU); the chapter says so.
SMOKE = dict(seeds=1, trials=3, trial_epochs=1, epochs=2, train_size=400, test_size=300)
