"""Chapter 04's settings: the ``paper`` protocol as the defaults, ``cpu`` and ``smoke`` as differences."""

from __future__ import annotations

from dataclasses import dataclass

from ...models import CONFIGURATIONS
from ...profiles import did_you_mean
from ..base import OptimisedSettings


@dataclass(frozen=True)
class BayesOptSettings(OptimisedSettings):
    """Chapter 04: 20 trials per model (article 1), each 3 epochs (the reference code's default:
    ``protocol_plan.TRIAL_EPOCHS_SOURCE``), then 30 epochs with the best lr and batch size, in each of
    ``configurations`` (as run: ViT d6, the BatchNorm models d1; as written: all at d6)."""

    chapter = "04_bayes_opt"  # its notebook's name (a class attribute, not a setting)

    configurations: tuple[str, ...] = tuple(CONFIGURATIONS)
    #: The retrains take the seeds of the committed plan (``plan.PLAN_FILE``, at least ``seeds``), judged by its tests.
    seed_plan: bool = True
    #: Searches per model and configuration, each at its own seed (Ax's and its trials'); the first is retrained, a
    #: second shows what the search's own seed changes (the plan says whether it affords one).
    searches: int = 2
    #: Table 3's times: interleaved rounds on one host (:mod:`.rounds`), each training this many images per model,
    #: then one test pass; the committed timing plan (``timing_plan.json``) fixed both before any round was timed.
    timing_rounds: int = 20
    timing_images: int = 6000

    def __post_init__(self):
        super().__post_init__()
        for which in self.configurations:
            if which not in CONFIGURATIONS:
                near = did_you_mean(which, CONFIGURATIONS)
                known = ", ".join(map(repr, CONFIGURATIONS))
                raise ValueError(f"configurations: {which!r} is not a configuration{near}; choose from {known}")
        for name in ("searches", "timing_rounds", "timing_images"):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise ValueError(f"{name}={getattr(self, name)!r} is not allowed; it must be an integer >= 1")


#: 12 trials: Ax spends 5 on initialisation (the centre, then Sobol), so BoTorch proposes 7.
CPU = dict(
    seeds=3, trials=12, trial_epochs=2, epochs=5, train_size=6000, test_size=2000,
    configurations=("as run",), seed_plan=False, searches=1, timing_images=1000,
)  # fmt: skip

#: 3 trials stay inside Ax's initialisation: no BoTorch step (slow on a CPU); the chapter says so.
SMOKE = dict(
    seeds=1, trials=3, trial_epochs=1, epochs=2, train_size=400, test_size=300,
    configurations=("as run",), seed_plan=False, searches=1, timing_rounds=3, timing_images=100,
)  # fmt: skip
