"""Which committed plan fixed each claim, and whether its verdict is confirmatory: every run the verdict reads trained
after that plan's commit, a time read from git (``python -m vitbn_nb plans stamp``) and kept in a committed file
(:data:`STAMPS`), so a checkout without history labels alike. Otherwise the verdict is exploratory, and says why."""

from __future__ import annotations

import dataclasses
import fnmatch
import hashlib
import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pandas as pd

from ..paths import book_figures_dir
from .verdicts import EQUIVALENCE_TEST, NOT_RUN, UNTESTABLE, Verdict

CONFIRMATORY, EXPLORATORY = "confirmatory", "exploratory"
#: Outcomes that decide nothing (no run, or a scale that cannot test the claim): no label.
NO_VERDICT = (NOT_RUN, UNTESTABLE)
#: The committed stamps: per plan, the commit git names for it and that commit's time.
STAMPS = "plan_commits.json"
#: The repository's root (plan files are named relative to it).
ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Plan:
    """A committed plan: the file that holds it, the claims (key patterns) whose test and seeds it fixed, and the
    equivalence margin it fixed (None: none). ``fixed_in``: for a plan committed as code before plans were files, the
    commit that wrote it (git confirms it and gives its time); otherwise the file's own last commit."""

    name: str
    file: str
    claims: tuple[str, ...]
    margin_pt: float | None = None
    fixed_in: str | None = None
    excludes: tuple[str, ...] = ()

    def fixes(self, key: str) -> bool:
        matched = any(fnmatch.fnmatchcase(key, pattern) for pattern in self.claims)
        return matched and not any(fnmatch.fnmatchcase(key, pattern) for pattern in self.excludes)

    def digest(self) -> str | None:
        """The plan file's sha256 (a data plan's stamp must match it: an edit after the stamp is a new plan)."""
        path = ROOT / self.file
        return hashlib.sha256(path.read_bytes()).hexdigest() if self.fixed_in is None and path.exists() else None


#: Every plan the book has committed, oldest first. The first two were code (their seeds in the chapters' settings,
#: the rule's ±2 pt margin); the confirmation and chapter 04's protocol and timing are data files, written by
#: ``depth_study.confirmation_plan.write``, ``bayes_opt.protocol_plan.write`` and ``bayes_opt.timing_plan.write``.
PLANS = (
    Plan("05_depth_study/first", "vitbn_nb/chapters/depth_study/plan.py",
         ("article2/primary/*", "article2/depth/*", "article2/fig10/*", "article2/converges/*"), 2.0, "c2b2ec9"),
    Plan("03_fixed_lr/first", "vitbn_nb/chapters/fixed_lr/plan.py", ("article1/lr*",), 2.0, "fdba3c5"),
    # encoded after its runs trained: its own plan, later than them
    Plan("03_fixed_lr/fig4-convergence", "vitbn_nb/chapters/fixed_lr/article.py", ("article1/lr0.005/converges",),
         2.0, "a929106"),
    Plan("05_depth_study/confirmation", "vitbn_nb/chapters/depth_study/confirmation_plan.json",
         ("article2/confirm/*",), 2.0),
    Plan("04_bayes_opt/protocol", "vitbn_nb/chapters/bayes_opt/protocol_plan.json", ("article1/optimised/*",), 0.2),
    # fixes no claim's test: which lr 0.01 runs train again, and on which machine, before any of them trains
    Plan("03_fixed_lr/retime", "vitbn_nb/chapters/fixed_lr/retime_plan.json", ()),
    # Table 3's gains from interleaved rounds on one host, in place of the protocol plan's seed pairs of retrains
    Plan("04_bayes_opt/timing", "vitbn_nb/chapters/bayes_opt/timing_plan.json",
         ("article1/optimised/r_t/*", "article1/optimised/r_v/*")),
)  # fmt: skip


@cache
def stamps() -> dict:
    """The committed stamps (:data:`STAMPS` in ``figures/``): {plan: {commit, committed, sha256}}; {} where none."""
    path = book_figures_dir() / STAMPS
    return json.loads(path.read_text()) if path.exists() else {}


def committed(plan: Plan) -> str | None:
    """When git says ``plan`` was committed (ISO), from the stamps; None where it is not stamped, or its file changed
    since its stamp."""
    stamp = stamps().get(plan.name)
    if not stamp or (plan.digest() is not None and stamp.get("sha256") != plan.digest()):
        return None
    return stamp["committed"]


def committed_at(name: str) -> str:
    """:func:`committed` of the plan ``name``, or a ValueError saying how to stamp it."""
    when = committed(named(name))
    if when is None:
        raise ValueError(f"plan {name} has no stamp in figures/{STAMPS}; fix: python -m vitbn_nb plans stamp")
    return when


def named(name: str) -> Plan:
    return next(plan for plan in PLANS if plan.name == name)


def plan_for(key: str) -> Plan | None:
    """The latest plan that fixes ``key`` (a claim is fixed only once its last plan is)."""
    fixing = [plan for plan in PLANS if plan.fixes(key)]
    return fixing[-1] if fixing else None


def label(verdict: Verdict) -> Verdict:
    """``verdict`` labelled confirmatory or exploratory (:func:`why_exploratory`), with its plan and commit time."""
    plan = plan_for(verdict.claim)
    when = committed(plan) if plan else None
    if verdict.outcome in NO_VERDICT:  # nothing decided, so nothing to label
        return dataclasses.replace(verdict, plan=plan.name if plan else "", plan_committed=when or "")
    why = why_exploratory(verdict, plan, when)
    evidence = EXPLORATORY if why else CONFIRMATORY
    note = f"{verdict.note}; {why}" if why and verdict.note else why or verdict.note
    return dataclasses.replace(
        verdict, evidence=evidence, plan=plan.name if plan else "", plan_committed=when or "", note=note
    )


def why_exploratory(verdict: Verdict, plan: Plan | None, when: str | None) -> str:
    """Why ``verdict`` is exploratory, in words ("" where it is confirmatory)."""
    if plan is None:
        return "exploratory: no committed plan fixed this claim"
    if when is None:
        return f"exploratory: plan {plan.name} has no stamp matching its file (python -m vitbn_nb plans stamp)"
    if verdict.off_plan:
        return f"exploratory: {verdict.off_plan}, not plan {plan.name}'s protocol"
    if verdict.test == EQUIVALENCE_TEST and plan.margin_pt != verdict.margin:
        return f"exploratory: its margin (±{verdict.margin:g} pt) was set after plan {plan.name}"
    if not verdict.first_started:
        return "exploratory: the runs it reads are not named"
    if pd.Timestamp(verdict.first_started) <= pd.Timestamp(when):
        return (
            f"exploratory: a run it reads started {verdict.first_started[:16]}, before plan {plan.name} ({when[:16]})"
        )
    return ""


def first_started(runs: pd.DataFrame) -> str:
    """When the earliest of ``runs`` started (ISO; "" where none is named)."""
    if runs is None or runs.empty or "started" not in runs:
        return ""
    started = runs["started"].dropna()
    return str(min(started, key=pd.Timestamp)) if len(started) else ""


def reading(verdict: Verdict, runs: pd.DataFrame) -> Verdict:
    """``verdict`` with the start of the earliest run it reads (what :func:`label` compares with its plan)."""
    return dataclasses.replace(verdict, first_started=first_started(runs))
