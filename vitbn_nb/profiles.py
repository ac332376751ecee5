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
        # The seeds' protocol: 20 trials per model (the article), each trial 3 epochs (the default n_epochs of
        # the reference hypopt_train.py), then 30 epochs with the best lr and batch size, here with 3 seeds.
        "04_bayes_opt": dict(seeds=3, trials=20, trial_epochs=3, epochs=30, test_batch_size=5000,
                             train_size=None, test_size=None),
        "05_depth_study": dict(seeds=3, epochs=10, batch_size=100, test_batch_size=5000, train_size=None,
                               test_size=None, depths={0.003: [2, 3, 4, 5, 6, 7], 0.005: [1, 2, 3, 4]}),
        # The series' protocol: the depth-6 trio optimised again on augmented MNIST (20 trials of 3 epochs),
        # 30 epochs each, and the CNN; 10 timed passes over the transfer set (the reference eval_emnist.py's 10).
        "06_emnist_transfer": dict(seeds=3, reoptimise=True, trials=20, trial_epochs=3, epochs=30, depth=6,
                                   test_batch_size=5000, train_size=None, test_size=None, inference_repeats=10,
                                   cnn_lr=1e-3, cnn_batch_size=100),
        # Full MNIST, 3 seeds. Depth 6 (the reference ViT) and 12, each against half the depth with 2 branches
        # (Touvron et al.'s best branch count; their claim is that parallel helps the deeper, harder model).
        # Fine-tuning at 56x56 starts from the depth-6 runs: 3 epochs at a lower lr, as a fine-tuning is.
        "07_three_things": dict(seeds=3, models=["ViT", "ViTBNFFN", "ViTBN"], depths=[6, 12], branches=2, epochs=10,
                                lr=0.0005, batch_size=100, test_batch_size=5000, train_size=None, test_size=None,
                                ft_epochs=3, ft_lr=0.0002, ft_train_size=None, ft_test_size=None,
                                latency_batch=256, latency_repeats=20),
        # The bench on a GPU: the seeds' batch sizes, 50 timed steps x 5 repeats, the full splits.
        "08_where_the_speed_comes_from": dict(depths=[1, 6], batch_size=100, test_batch_size=5000, steps=50, warmup=10,
                                              repeats=5, eval_batches=2, eval_warmup=1, train_size=None,
                                              test_size=None, matmul_size=4096, matmul_repeats=10,
                                              norm_iterations=200),
    },
    "cpu": {
        # The DNNs are tiny: after the batched augmentation moved to the chosen samples only, a quiet
        # 2-core machine did 4 runs x 15 epochs x 8,000 images in 20 s (~0.04 ms per image-epoch). So the
        # cpu profile keeps the article's protocol whole (full MNIST, 15 epochs) and adds the paper
        # profile's 3 seeds: 12 runs x 15 x 60,000 images, about 7-8 minutes.
        "01_batchnorm_intro": dict(seeds=3, epochs=15, lrs=[0.01, 0.1], batch_size=100, test_batch_size=5000,
                                   train_size=None, test_size=None),
        "02_models": dict(),
        # ~1,000 steps per run (10 epochs x 100 batches): a step costs ~117 ms for ViT d6 and ~20 ms for each
        # depth-1 model on 2 quiet cores, a 2,000-image test pass ~1.6 s for the trio -> ~9-10 min for the
        # 9 runs. The article's ViT broke down near epoch 15 (~9,000 steps), out of reach here: the chapter
        # says whether it happens within these 1,000 steps rather than assuming it.
        "03_fixed_lr": dict(seeds=1, epochs=10, lrs=[0.0005, 0.005, 0.01], batch_size=100, test_batch_size=5000,
                            train_size=10000, test_size=2000),
        # 12 trials per model: Ax's default strategy spends 5 on initialisation (the centre, then Sobol), so
        # BoTorch proposes the last 7. A trial is 2 epochs of 6,000 images; at ~117 ms per step of 100 for ViT d6
        # (more per image at small batches) and ~20 ms for the depth-1 models on 2 quiet cores that is ~4.5 min
        # for ViT's 12 trials and ~1 min for each BN model's; the 10-epoch retrains ~3 min; Ax ~30 s
        # (import ~4 s, a BoTorch suggestion ~1 s): ~10 min in all.
        "04_bayes_opt": dict(seeds=1, trials=12, trial_epochs=2, epochs=10, test_batch_size=5000,
                             train_size=6000, test_size=2000),
        # Every depth of the three figures (20 runs, 74 encoder blocks in all), 8 epochs x 60 steps: at
        # ~11.5-19 ms per block per step and ~0.6 s per block per 5,000 test images that is ~8-12 min of
        # training plus ~2 min of testing on 2 quiet cores. 480 steps is early training (the article ran
        # 6,000), where the faster convergence of the deeper BatchNorm model shows first.
        "05_depth_study": dict(seeds=1, epochs=8, batch_size=100, test_batch_size=5000, train_size=6000,
                               test_size=2000, depths={0.003: [2, 3, 4, 5, 6, 7], 0.005: [1, 2, 3, 4]}),
        # Chapter 04's hyperparameters are reused (no new optimisation). Three depth-6 models at ~1.3 ms per
        # augmented image-step (6 epochs x 10,000) ~4.5 min, the CNN ~20 s, test and timed passes ~1 min.
        "06_emnist_transfer": dict(seeds=1, reoptimise=False, trials=12, trial_epochs=2, epochs=6, depth=6,
                                   test_batch_size=5000, train_size=10000, test_size=2000, inference_repeats=5,
                                   cnn_lr=1e-3, cnn_batch_size=100),
        # ~6 min on 2 quiet cores. Costs: ~11.5 ms per depth unit per training step of 100 images at 28x28 and
        # ~6-7x that at 56x56 (4x the tokens); a test pass costs about a third of training per image.
        # (a) 6 runs x 6 units x 200 steps ~ 85 s + 24 test passes ~ 35 s; (b) 6 fine-tunings x 6 units x
        # 40 steps at 56x56 ~ 110 s + test passes ~ 40 s; (c) 3 hMLP runs ~ 60 s. The linear-stem
        # baselines of (c) are (a)'s sequential runs and (b) starts from them: nothing is trained twice.
        # 40 fine-tuning steps are few, so they use the training lr (still climbing after 2 epochs at
        # 0.0002 in a trial at depth 2); the paper profile's 1,800 steps use a fine-tuning lr.
        "07_three_things": dict(seeds=1, models=["ViT", "ViTBNFFN", "ViTBN"], depths=[6], branches=2, epochs=4,
                                lr=0.0005, batch_size=100, test_batch_size=5000, train_size=5000, test_size=2000,
                                ft_epochs=2, ft_lr=0.0005, ft_train_size=2000, ft_test_size=1000,
                                latency_batch=100, latency_repeats=10),
        # The seeds' batch sizes, 3 x 10 timed training steps and 3 timed test batches of 5,000 per model,
        # depth and pipeline: ~3 min on 2 quiet cores (ViT d6 ~0.12 s a step, a test batch ~2 s; the
        # seeds' pipeline adds ~15 ms per 100 training images and ~1 s per 5,000 test images).
        "08_where_the_speed_comes_from": dict(depths=[1, 6], batch_size=100, test_batch_size=5000, steps=10, warmup=2,
                                              repeats=3, eval_batches=1, eval_warmup=1, train_size=10000,
                                              test_size=5000, matmul_size=2048, matmul_repeats=5,
                                              norm_iterations=30),
    },
    "smoke": {
        "01_batchnorm_intro": dict(seeds=1, epochs=2, lrs=[0.01, 0.1], batch_size=100, test_batch_size=5000,
                                   train_size=600, test_size=500),
        "02_models": dict(),
        "03_fixed_lr": dict(seeds=1, epochs=2, lrs=[0.0005, 0.005, 0.01], batch_size=100, test_batch_size=5000,
                            train_size=600, test_size=500),
        # 3 trials per model stay inside Ax's initialisation (the centre and 2 Sobol points): no BoTorch step,
        # which is slow on a CPU; the chapter says so.
        "04_bayes_opt": dict(seeds=1, trials=3, trial_epochs=1, epochs=2, test_batch_size=5000,
                             train_size=400, test_size=300),
        # Only the depths that give every figure content: Fig 8 (d6), Fig 9 (d1, d3), Fig 10 (d3 at both lrs).
        "05_depth_study": dict(seeds=1, epochs=2, batch_size=100, test_batch_size=5000, train_size=400,
                               test_size=300, depths={0.003: [3, 6], 0.005: [1, 3]}),
        "06_emnist_transfer": dict(seeds=1, reoptimise=False, trials=3, trial_epochs=1, epochs=1, depth=6,
                                   test_batch_size=5000, train_size=400, test_size=300, inference_repeats=2,
                                   cnn_lr=1e-3, cnn_batch_size=100),
        # Depth 2 against 1 x 2 branches, 3 steps each: every run, figure and table, in well under a minute.
        "07_three_things": dict(seeds=1, models=["ViT", "ViTBNFFN", "ViTBN"], depths=[2], branches=2, epochs=1,
                                lr=0.0005, batch_size=100, test_batch_size=5000, train_size=300, test_size=200,
                                ft_epochs=1, ft_lr=0.0002, ft_train_size=200, ft_test_size=200,
                                latency_batch=16, latency_repeats=3),
        # Every measurement and output on tiny batches (the numbers mean nothing).
        "08_where_the_speed_comes_from": dict(depths=[1, 6], batch_size=16, test_batch_size=128, steps=2, warmup=1,
                                              repeats=2, eval_batches=1, eval_warmup=0, train_size=256,
                                              test_size=128, matmul_size=256, matmul_repeats=2, norm_iterations=2),
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


def flag(name: str, value) -> bool:
    """A yes/no parameter as papermill or a Lab user may give it: a bool, or the string 'true' / 'false'.

    Papermill's ``-p force false`` arrives as the string ``'false'``, which Python reads as true: taken
    as it is, it would delete and retrain every run of a chapter. Anything else is refused by name.
    """
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise ValueError(f"{name}={value!r} is not allowed; give True or False (or the strings 'true' / 'false')")

