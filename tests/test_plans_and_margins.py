"""Margins from each article's facts, the confirmatory/exploratory label read from git, and the replication's plan."""

import dataclasses
import json
import math
import shutil
import subprocess

import pandas as pd
import pytest
from test_studies_fixed_lr_depth import synthetic

from vitbn_nb import chapters
from vitbn_nb.chapters.depth_study import article as depth_article
from vitbn_nb.chapters.depth_study import confirmation
from vitbn_nb.chapters.depth_study import judge as depth_judge
from vitbn_nb.chapters.depth_study import study as depth
from vitbn_nb.judging import article1, plans, verdicts

CPU_DEPTH = chapters.settings("05_depth_study", "cpu")


def _cells(d4_gap: float):
    """Three seeds at d = 4 and d = 6, lr 0.003, article 2's 10 epochs: ViTBNFFN ahead by ``d4_gap`` ± 0.1 at d = 4."""
    rows = []
    for seed, wobble in enumerate((-0.1, 0.0, 0.1)):
        for epoch in range(1, 11):
            rows += [
                ("ViT", 4, 0.003, seed, epoch, 1.0, 1.0, 80.0, 0.5),
                ("ViTBNFFN", 4, 0.003, seed, epoch, 1.0, 1.0, 80.0 + d4_gap + wobble, 0.5),
                ("ViT", 6, 0.003, seed, epoch, 1.0, 1.0, 80.0, 0.5),
                ("ViTBNFFN", 6, 0.003, seed, epoch, 1.0, 1.0, 85.0 + wobble, 0.5),
            ]
    return synthetic(rows).assign(dataset="mnist_aug")


def test_article_margins_follow_the_rule_from_the_articles_own_numbers():
    # article 1 reads ViT's ≈ 98.2 % as "marginally higher" than ViTBNFFN's ≈ 97.8 %: half that gap, 0.2 pt
    assert article1.MARGINS["final accuracy"].points == pytest.approx(0.2)
    assert "half the 0.4 pt gap" in article1.MARGINS["final accuracy"].source
    # no gap at the convergence measure, accuracies above 95 %: the 1 pt ceiling
    assert article1.MARGINS["convergence"].points == 1.0 and "ceiling" in article1.MARGINS["convergence"].source
    # article 2 (augmented MNIST near 90 %): its smallest gap read as real (12 pt) halves past the 2 pt ceiling
    assert depth_article.MARGINS["final accuracy"].points == 2.0
    assert verdicts.Margin(3.0, 99.0, "x").points == 1.0 and verdicts.Margin(1.0, 80.0, "x").points == 0.5


def test_a_no_difference_claim_without_its_articles_margin_is_refused():
    with pytest.raises(ValueError, match="needs its article's margin"):
        verdicts.difference("c", [0.1, 0.2, 0.0], 0)
    claim = next(c for c in depth_article.findings(CPU_DEPTH) if c.direction == 0)
    with pytest.raises(ValueError, match="needs its article's margin"):
        dataclasses.replace(claim, margin=None)


def test_changing_a_margin_in_article_py_changes_that_claims_verdict_and_no_other(monkeypatch):
    table = _cells(0.5)
    before = {v.claim: v for v in depth_judge.figures_8_to_10(table, CPU_DEPTH)}
    d4 = "article2/depth/lr0.003/d4"
    assert before[d4].outcome == verdicts.EQUIVALENT and before[d4].margin == 2.0
    assert before[d4].sensitivity == "±0.5: undecided; ±1: equivalent; ±2: equivalent"
    # the margin article 2 resolves, made as narrow as half a 0.4 pt gap: +0.5 [0.3, 0.7] lies wholly outside ±0.2
    narrow = verdicts.Margin(0.4, 85.0, "a test's")
    monkeypatch.setitem(depth_article.MARGINS, "final accuracy", narrow)
    after = {v.claim: v for v in depth_judge.figures_8_to_10(table, CPU_DEPTH)}
    assert after[d4].outcome == verdicts.NOT_EQUIVALENT and after[d4].margin == pytest.approx(0.2)
    changed = {key for key in before if before[key].outcome != after[key].outcome}
    assert changed == {d4}  # the d = 6 difference and every other row stand as they were


def test_an_equivalence_interval_says_its_level():
    judged = verdicts.equivalence("c", [90.0, 91.0, 92.0], depth_article.MARGINS["final accuracy"], center=91.0)
    assert "(90 % interval, 3 seeds)" in judged.shown
    assert "90 %" not in verdicts.difference("c", [1.0, 1.5, 2.0], +1).shown  # a difference's 95 % is the rule's


def _stamped(tmp_path, monkeypatch, committed: str):
    stamps = {plan.name: {"commit": "0" * 40, "committed": committed, "file": plan.file} for plan in plans.PLANS}
    for plan in plans.PLANS:
        if plan.digest() is not None:
            stamps[plan.name]["sha256"] = plan.digest()
    (tmp_path / plans.STAMPS).write_text(json.dumps(stamps))
    monkeypatch.setenv("VITBN_BOOK_FIGURES_DIR", str(tmp_path))
    plans.stamps.cache_clear()


def test_a_verdict_is_confirmatory_only_when_every_run_it_reads_started_after_its_plans_commit(tmp_path, monkeypatch):
    _stamped(tmp_path, monkeypatch, "2026-11-28T02:51:57+00:00")
    try:
        agrees = verdicts.difference("article2/primary/lr0.003", [5.0, 6.0, 5.5], +1)
        after = plans.label(dataclasses.replace(agrees, first_started="2026-11-28T03:00:00+00:00"))
        before = plans.label(dataclasses.replace(agrees, first_started="2026-11-27T12:00:00+00:00"))
        assert after.evidence == plans.CONFIRMATORY and after.plan == "05_depth_study/first"
        assert before.evidence == plans.EXPLORATORY and "before plan 05_depth_study/first" in before.note
        unnamed = plans.label(agrees)  # no run named: never confirmatory
        assert unnamed.evidence == plans.EXPLORATORY
        nobody = plans.label(dataclasses.replace(agrees, claim="article2/fig1/x", first_started="2027-01-01"))
        assert nobody.evidence == plans.EXPLORATORY and "no committed plan" in nobody.note
        # an equivalence whose margin is not the one its plan fixed (article 1's is now 0.2 pt, the plan's 2 pt)
        equal = verdicts.equivalence(
            "article1/lr0.0005/accuracy/ViT", [98.2, 98.2, 98.3], article1.MARGINS["final accuracy"], center=98.2
        )
        moved = plans.label(dataclasses.replace(equal, first_started="2026-12-01T00:00:00+00:00"))
        assert moved.evidence == plans.EXPLORATORY and "margin" in moved.note
    finally:
        plans.stamps.cache_clear()


def test_a_data_plan_edited_after_its_stamp_labels_nothing_confirmatory(tmp_path, monkeypatch):
    _stamped(tmp_path, monkeypatch, "2026-12-01T22:40:33+00:00")
    try:
        plan = plans.named("05_depth_study/confirmation")
        assert plans.committed(plan) == "2026-12-01T22:40:33+00:00"
        stamps = json.loads((tmp_path / plans.STAMPS).read_text())
        stamps[plan.name]["sha256"] = "0" * 64  # the file no longer what was stamped
        (tmp_path / plans.STAMPS).write_text(json.dumps(stamps))
        plans.stamps.cache_clear()
        assert plans.committed(plan) is None
    finally:
        plans.stamps.cache_clear()


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_the_committed_stamps_agree_with_git():
    inside = subprocess.run(["git", "rev-parse", "--is-inside-work-tree"], cwd=plans.ROOT, capture_output=True)
    shallow = subprocess.run(["git", "rev-parse", "--is-shallow-repository"], cwd=plans.ROOT, capture_output=True)
    if inside.returncode != 0 or shallow.stdout.strip() == b"true":
        pytest.skip("no full git history here: the committed stamps are what a render reads")
    from vitbn_nb.publishing import plan_stamps

    assert plan_stamps.check() == []


def test_the_replication_reads_only_its_fresh_seeds_and_is_never_pooled():
    plan = confirmation.plan()
    exploratory = {c.seed for c in depth.plan(chapters.settings("05_depth_study", "paper")) if c.seed < 100}
    fresh = {c.seed for c in confirmation.configs(chapters.settings("05_depth_study", "paper"))}
    assert fresh and not fresh & exploratory and min(fresh) == plan["first_seed"]
    primary = plan["claims"][0]
    assert primary["key"] == "article2/confirm/primary/lr0.003" and primary["depths"] == [6, 7]
    # the primary statistic's spread taken at its upper bound, to detect the exploratory interval's lower end
    assert primary["spread_bound"] > primary["spread"] and primary["effect"] > 0
    assert verdicts.detectable_difference(primary["spread_bound"], primary["seeds"]) <= primary["effect"]
    table = pd.DataFrame({"seed": [0, 9, 100, 114]})
    assert list(confirmation.is_confirmation(table)) == [False, False, True, True]
    # no run yet: the replication's rows say so and decide nothing
    found = confirmation.judge(pd.DataFrame(), chapters.settings("05_depth_study", "paper"))
    assert found[0].claim == primary["key"] and found[0].outcome == verdicts.NOT_RUN
    unafforded = [v for v in found if "not afforded" in v.note]
    assert unafforded and all(v.outcome == verdicts.NOT_RUN for v in unafforded)


def test_a_count_that_cannot_reach_the_level_is_not_planned_as_a_test():
    from vitbn_nb.judging import power

    three = power.count_plan("c", verdicts.PRIMARY, 50.0, "x", 3)
    assert three.test.startswith("not decidable with 3 runs") and "needs 4" in three.test
    assert verdicts.smallest_count_p(3, 3) >= verdicts.ALPHA > verdicts.smallest_count_p(4, 4)


def test_chapter_04s_committed_plan_is_what_chapter_03s_records_give():
    """The protocol plan is data computed, not typed: derived again from chapter 03's committed 30-epoch records (all
    finished before the plan), it is the committed file; each claim's ask follows from its spread's upper bound, the
    seeds planned never fall below the rule's minimum, and searches and retrains fit the budget."""
    from vitbn_nb.chapters.bayes_opt import plan as protocol
    from vitbn_nb.chapters.bayes_opt import protocol_plan
    from vitbn_nb.store import runs
    from vitbn_nb.store.run_folder import Run

    folders = sorted((plans.ROOT / "figures" / "records").glob("*-lr0.00*5-bs100-s*/record.json"))
    table = runs.load_table([Run(f.parent) for f in folders])
    derived = json.loads(json.dumps(protocol_plan.derive(table)))
    assert derived == protocol.plan()
    fixed = protocol.plan()
    assert fixed["search_hours"] + fixed["retrain_hours"] <= fixed["budget_hours"]
    for claim in fixed["claims"]:
        assert claim["planned"] >= verdicts.MIN_SEEDS
        if claim["test"] == verdicts.EQUIVALENCE_TEST:
            reach = verdicts.equivalence_reach(claim["spread_bound"], claim["needed"])
            assert reach <= claim["margin"] < verdicts.equivalence_reach(claim["spread_bound"], claim["needed"] - 1)
    assert plans.plan_for("article1/optimised/accuracy/ViT").name == "04_bayes_opt/protocol"


def test_every_planned_row_shows_the_power_its_plan_promised():
    """A verdict of a seed plan's claim carries the power the plan promised (its planned seeds against its effect or
    margin at the spread it planned from); one that already has a planned power keeps it; a count has none."""
    from vitbn_nb.judging import power

    frame = pd.DataFrame(
        [
            {"claim": "a", "test": verdicts.DIFFERENCE_TEST, "spread": 1.0, "effect": 2.0, "planned": 6},
            {"claim": "b", "test": verdicts.EQUIVALENCE_TEST, "spread": 0.1, "effect": 0.2, "planned": 8},
            {"claim": "c", "test": verdicts.COUNT_TEST, "spread": float("nan"), "effect": 33.3, "planned": 3},
        ]
    )
    found = [verdicts.Verdict(key, verdicts.AGREES) for key in "abc"]
    found.append(dataclasses.replace(verdicts.Verdict("a", verdicts.AGREES), power_planned=0.5))
    given = power.with_planned_power(found, frame)
    assert given[0].power_planned == pytest.approx(verdicts.realised_power(2.0, 1.0, 6))
    assert given[1].power_planned == pytest.approx(verdicts.realised_equivalence_power(0.2, 0.1, 8))
    assert math.isnan(given[2].power_planned) and given[3].power_planned == 0.5
