"""Derives chapter 04's timing plan (:data:`.rounds.PLAN_FILE`) from the ``paper`` settings and writes it, to be
committed and stamped before any timing round is taken: Table 3's claims judged from interleaved rounds on one host
(:mod:`.rounds`), the rounds and what each does, the test, and what that many rounds can detect. The chapter only
reads the committed file."""

from __future__ import annotations

import json
from pathlib import Path

from ... import atomic
from ...judging.claims import TIMED
from ...judging.verdicts import detectable_difference
from . import article
from .rounds import PLAN_FILE, WHAT


def derive(settings) -> dict:
    """The timing plan of ``settings`` (the ``paper`` protocol's): the rounds, what each does, the test and the claims
    it fixes, with what that many rounds can detect."""
    claims = [c for c in article.findings() if c.key.split("/")[2] in TIMED]
    return {
        "plan": "04_bayes_opt/timing",
        "what": (
            "article 1's Table 3 claims (each BatchNorm model's training and inference gain against ViT, each at its "
            "optimised settings, in every configuration) judged from "
            + WHAT.format(rounds=settings.timing_rounds, images=settings.timing_images)
        ),
        "why": (
            "hosts that give one CPU name have trained one configuration at clearly different speeds (found after "
            "the protocol plan, 04_bayes_opt/protocol, which read a seed's two retrains' epochs), and a seed's two "
            "30-epoch retrains do not fit one host's session; the retrains' epoch times are shown (Fig 8), not judged"
        ),
        "rounds": settings.timing_rounds,
        "images": settings.timing_images,
        "configurations": list(settings.configurations),
        "test": "one-sided t over the rounds' gains, each 100 x (1 - T_model / T_ViT) of one round, above its level",
        "detectable_sd": round(detectable_difference(1.0, settings.timing_rounds), 3),
        "detectable_sd_is": (
            "the smallest mean distance from the level, in standard deviations of a round's gain, that the rounds "
            "detect with 80 % power (two-sided t at 5 %); a round's spread is unknown before the rounds are timed"
        ),
        "claims": [{"key": c.key, "level": c.level} for c in claims],
    }


def write(settings) -> Path:
    """Write :func:`derive` to :data:`.rounds.PLAN_FILE` (then commit it, and stamp it, before any round is timed)."""
    atomic.write_text(PLAN_FILE, json.dumps(derive(settings), indent=1, ensure_ascii=False) + "\n")
    return PLAN_FILE
