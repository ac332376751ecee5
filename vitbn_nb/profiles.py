"""The three scales of the book, in one place.

A profile is a named set of papermill parameters per chapter. ``paper`` is the seeds'
protocol unchanged (with 3 seeds where the articles ran one); ``cpu`` keeps every effect
visible on a 2-core laptop in about an hour for the whole book; ``smoke`` only proves that
everything runs and every output is produced (CI, a few minutes).

``train_size`` / ``test_size`` of ``None`` mean the whole split (60,000 / 10,000 images).
"""
from __future__ import annotations

import copy

import torch

PROFILE_NAMES = ("smoke", "cpu", "paper")

PROFILES: dict[str, dict[str, dict]] = {
    "paper": {
        "01_batchnorm_intro": dict(seeds=3, epochs=15, lrs=[0.01, 0.1], batch_size=100, test_batch_size=5000,
                                   train_size=None, test_size=None),
        "02_models": dict(),
        "03_fixed_lr": dict(seeds=3, epochs=30, lrs=[0.0005, 0.005, 0.01], batch_size=100, test_batch_size=5000,
                            train_size=None, test_size=None),
        "04_bayes_opt": dict(seeds=3, trials=20, trial_epochs=3, epochs=30, test_batch_size=5000,
                             train_size=None, test_size=None),
        "05_depth_study": dict(seeds=3, epochs=10, batch_size=100, test_batch_size=5000, train_size=None,
                               test_size=None, depths={0.003: [2, 3, 4, 5, 6, 7], 0.005: [1, 2, 3, 4]}),
        "06_emnist_transfer": dict(seeds=3, reoptimise=True, trials=20, trial_epochs=3, epochs=30,
                                   test_batch_size=5000, train_size=None, test_size=None, inference_repeats=10),
    },
    "cpu": {
        "01_batchnorm_intro": dict(seeds=1, epochs=15, lrs=[0.01, 0.1], batch_size=100, test_batch_size=5000,
                                   train_size=20000, test_size=5000),
        "02_models": dict(),
        "03_fixed_lr": dict(seeds=1, epochs=10, lrs=[0.0005, 0.005, 0.01], batch_size=100, test_batch_size=5000,
                            train_size=10000, test_size=2000),
        "04_bayes_opt": dict(seeds=1, trials=6, trial_epochs=1, epochs=10, test_batch_size=5000,
                             train_size=5000, test_size=2000),
        "05_depth_study": dict(seeds=1, epochs=8, batch_size=100, test_batch_size=5000, train_size=6000,
                               test_size=2000, depths={0.003: [2, 3, 4, 5, 6, 7], 0.005: [1, 2, 3, 4]}),
        "06_emnist_transfer": dict(seeds=1, reoptimise=False, trials=0, trial_epochs=1, epochs=6,
                                   test_batch_size=5000, train_size=10000, test_size=2000, inference_repeats=5),
    },
    "smoke": {
        "01_batchnorm_intro": dict(seeds=1, epochs=2, lrs=[0.01, 0.1], batch_size=100, test_batch_size=5000,
                                   train_size=600, test_size=500),
        "02_models": dict(),
        "03_fixed_lr": dict(seeds=1, epochs=2, lrs=[0.0005, 0.005, 0.01], batch_size=100, test_batch_size=5000,
                            train_size=600, test_size=500),
        "04_bayes_opt": dict(seeds=1, trials=3, trial_epochs=1, epochs=2, test_batch_size=5000,
                             train_size=400, test_size=300),
        "05_depth_study": dict(seeds=1, epochs=2, batch_size=100, test_batch_size=5000, train_size=400,
                               test_size=300, depths={0.003: [2, 3, 4, 5, 6, 7], 0.005: [1, 2, 3, 4]}),
        "06_emnist_transfer": dict(seeds=1, reoptimise=False, trials=0, trial_epochs=1, epochs=1,
                                   test_batch_size=5000, train_size=400, test_size=300, inference_repeats=2),
    },
}


def resolve(profile: str) -> str:
    """``'auto'`` becomes ``'paper'`` where a GPU is present and ``'cpu'`` otherwise."""
    if profile == "auto":
        return "paper" if torch.cuda.is_available() else "cpu"
    if profile not in PROFILE_NAMES:
        raise ValueError(f"profile={profile!r} is not allowed; choose one of 'auto', {', '.join(map(repr, PROFILE_NAMES))}")
    return profile


def settings(chapter: str, profile: str, **overrides) -> dict:
    """The parameters of ``chapter`` under ``profile``; overrides that are not ``None`` win."""
    profile = resolve(profile)
    chapters = PROFILES[profile]
    if chapter not in chapters:
        raise ValueError(f"chapter={chapter!r} has no settings; known chapters: {', '.join(chapters)}")
    unknown = set(overrides) - set(chapters[chapter])
    if unknown:
        raise ValueError(f"unknown parameter(s) {sorted(unknown)} for {chapter}; it takes {sorted(chapters[chapter])}")
    chosen = copy.deepcopy(chapters[chapter])
    chosen.update({k: v for k, v in overrides.items() if v is not None})
    return {"profile": profile, **chosen}
