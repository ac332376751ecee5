"""Chapter 03's learning-rate sweep: which runs it plans, and how it reads breakdowns and the largest lr that trains,
on made-up curves whose answers are known."""

import math

import pandas as pd
import pytest

from vitbn_nb import chapters
from vitbn_nb.chapters.fixed_lr import lr_sweep
from vitbn_nb.chapters.fixed_lr import study as fixed_lr
from vitbn_nb.judging import verdicts


def _curve(model, lr, seed, accuracies, *, train_size=5000):
    return [
        {
            "run_id": f"{model}-lr{lr:g}-s{seed}",
            "model": model,
            "depth": 6,
            "lr": lr,
            "seed": seed,
            "epoch": epoch,
            "test_acc": acc,
            "train_loss": 0.5 if math.isfinite(acc) else float("nan"),
            "diverged": False,
            "train_size": train_size,
            "batch_size": 100,
        }
        for epoch, acc in enumerate(accuracies, 1)
    ]


def _sweep(seeds=3):
    rows = []
    for seed in range(seeds):
        wobble = 0.3 * seed
        # ViT: best at 0.001, as good at 0.005 (small noise), worse at 0.01, breaks down at 0.05 in epoch 3
        rows += _curve("ViT", 0.001, seed, [60, 80, 90 + wobble])
        rows += _curve("ViT", 0.005, seed, [60, 80, 90 - wobble])
        rows += _curve("ViT", 0.01, seed, [50, 70, 80 + wobble])
        rows += _curve("ViT", 0.05, seed, [40, 45, 11])
        # ViTBN: trains as well at every lr up to 0.05, never breaks down
        for lr in (0.001, 0.005, 0.01, 0.05):
            rows += _curve("ViTBN", lr, seed, [70, 85, 92 + (wobble if lr < 0.01 else -wobble)])
    return pd.DataFrame(rows)


def test_breakdowns_are_found_at_their_step():
    runs = lr_sweep.per_run(_sweep())
    broke = runs[runs["broke down at epoch"].notna()]
    assert set(broke["model"]) == {"ViT"} and set(broke["lr"]) == {0.05}
    # 5,000 images in batches of 100: 50 steps an epoch, epoch 3 ends at step 150
    assert set(broke["broke down at step"]) == {150}
    assert set(runs["steps"]) == {150}


def test_largest_lr_that_trains_by_the_rule():
    runs = lr_sweep.per_run(_sweep())
    assert lr_sweep.best_lr(runs, "ViT") == 0.001
    assert lr_sweep.against_best(runs, "ViT", 0.005).outcome == verdicts.EQUIVALENT  # shown as good, not "not worse"
    assert lr_sweep.against_best(runs, "ViT", 0.01).outcome == verdicts.NOT_EQUIVALENT
    assert lr_sweep.largest_trainable(runs, "ViT") == 0.005
    assert lr_sweep.largest_trainable(runs, "ViTBN") == 0.05


def test_fewer_than_three_seeds_decide_nothing():
    runs = lr_sweep.per_run(_sweep(seeds=2))
    assert lr_sweep.largest_trainable(runs, "ViT") is None
    table = lr_sweep.summary(runs)
    assert table["verdict: as good as the best lr"].str.contains(verdicts.NOT_JUDGED).all()


def test_summary_judges_each_batchnorm_model_against_vit():
    table = lr_sweep.summary(lr_sweep.per_run(_sweep())).set_index(["model", "lr"])
    at = table.loc[("ViTBN", 0.05)]
    assert at["verdict: ahead of ViT"].startswith(verdicts.AGREES)
    assert at["against ViT (pt)"] == pytest.approx(92 - 0.3 - 11, abs=0.5)
    assert table.loc[("ViT", 0.05), "runs broke down"] == "3/3"
    assert all(verdicts.is_rule_text(t) for t in table["verdict: as good as the best lr"])


def test_plan_adds_the_depth6_trio_at_each_extra_lr():
    settings = chapters.settings("03_fixed_lr", "cpu")
    extra = lr_sweep.plan(settings, fixed_lr.PIPELINE)
    assert len(extra) == len(settings.sweep_lrs) * settings.seeds * 3
    assert {c.model for c in extra} == {"ViT", "ViTBNFFN", "ViTBN"}
    assert all(c.model_kwargs.get("depth", 6) == 6 for c in extra)
    # the sweep adds runs to the chapter's plan and shares the rest
    assert len(fixed_lr.plan(settings)) == len(settings.lrs) * settings.seeds * 5 + len(extra)


def test_statement_counts_the_rule_against_vit_over_the_grid():
    from types import SimpleNamespace

    text = lr_sweep.statement(SimpleNamespace(sweep=_sweep())).data
    assert "**ViTBN** (depth 6): best lr" in text
    assert "against ViT at the same lr: ahead at 4, behind at 0, within noise at 0 of 4 rates" in text
    assert "the largest lr shown as good as the best by the rule (equivalent): **0.005**" in text  # ViT
    assert "lr 0.05: 3/3 runs, at step 150 (last test)" in text
    assert "which no later test confirms" in text


def test_a_fall_before_the_last_test_is_not_marked_and_a_run_that_never_learned_is_named():
    rows = []
    for seed in range(3):
        rows += _curve("ViT", 0.001, seed, [60, 80, 90 + 0.3 * seed, 91])
        rows += _curve("ViT", 0.01, seed, [60, 85, 50, 70])  # falls at epoch 3 and partly recovers
        rows += _curve("ViT", 0.05, seed, [20, 25, 30, 31])  # never learned: it cannot fall 10 points
    runs = lr_sweep.per_run(pd.DataFrame(rows))
    table = lr_sweep.summary(runs).set_index(["model", "lr"])
    assert table.loc[("ViT", 0.01), "at steps"] == "150, 150, 150"
    assert table.loc[("ViT", 0.05), "runs broke down"] == "0/3"
    assert table.loc[("ViT", 0.05), "best accuracy (%)"] == pytest.approx(31)
    assert lr_sweep.never_trained(runs, "ViT") == {0.05: pytest.approx(31)}
    from types import SimpleNamespace

    text = lr_sweep.statement(SimpleNamespace(sweep=pd.DataFrame(rows))).data
    assert "unable to break down by this measure: lr 0.05 (best 31.0 %)" in text
    assert "last test" not in text


def test_article_1s_larger_lr_conclusion_is_not_testable_in_runs_shorter_than_its_protocol():
    from types import SimpleNamespace

    from vitbn_nb.chapters.fixed_lr import judge

    found = judge.larger_lr(_sweep())
    # ViT against ViTBN at 0.01 and 0.05 (0.001 and 0.005 are below article 1's largest rate); 3 epochs of 50 steps
    assert [v.condition for v in found] == ["lr 0.01: ViT d6 against ViTBN d6", "lr 0.05: ViT d6 against ViTBN d6"]
    # ViT breaks down at 0.05 in these short runs, yet article 1's stability over 30 epochs cannot be judged from them
    assert all(v.outcome == verdicts.UNTESTABLE for v in found)
    assert found[0].text == "not testable at this scale (150 of the article's 18,000 steps)"
    text = lr_sweep.takeaway(SimpleNamespace(sweep=_sweep())).data
    assert "**not testable at this scale** (150 of the article's 18,000 steps)" in text
    assert "bears it out" not in text and "epoch 15" in text


def _full_run(model, lr, seed, accuracies, *, diverged_at=None):
    """One run of article 1's protocol (30 epochs of the whole training set, batch 100), or one that diverged earlier
    and so stopped there, as the run store records it."""
    rows = _curve(model, lr, seed, accuracies, train_size=None)
    for row in rows:
        row["epochs"] = 30
        row["status"] = "finished" if diverged_at is None else "diverged"
        row["diverged"] = row["epoch"] == diverged_at
    return rows


def _full_sweep(bn_falls_at_001=False, seeds=4):
    rows = []
    for seed in range(seeds):
        rising = [min(60 + 3 * e, 95 + 0.2 * seed) for e in range(1, 31)]
        # lr 0.01: ViT plummets near epoch 15 and stays down; lr 0.05: its loss becomes NaN at epoch 5
        rows += _full_run("ViT", 0.01, seed, rising[:15] + [40.0 + seed] * 15)
        rows += _full_run("ViT", 0.05, seed, [50, 60, 70, 75 + seed, 9.8], diverged_at=5)
        stable = [min(55 + 3 * e, 96 - 0.3 * seed) for e in range(1, 31)]
        collapsed = stable[:10] + [20.0 + seed] * 20
        rows += _full_run("ViTBN", 0.01, seed, collapsed if bn_falls_at_001 else stable)
        rows += _full_run("ViTBN", 0.05, seed, stable)
    return pd.DataFrame(rows)


def test_article_1s_larger_lr_conclusion_is_judged_from_whole_runs_of_its_protocol():
    from types import SimpleNamespace

    from vitbn_nb.chapters.fixed_lr import judge

    found = judge.larger_lr(_full_sweep())
    assert [v.condition for v in found] == ["lr 0.01: ViT d6 against ViTBN d6", "lr 0.05: ViT d6 against ViTBN d6"]
    # a run that diverged at epoch 5 ended its protocol there (a collapse): it does not make the comparison untestable
    assert all(v.outcome == verdicts.AGREES for v in found)  # 4 of 4 ViT runs collapse, 0 of 4 ViTBN runs
    assert found[0].scale == "18,000 of the article's 18,000 steps"
    assert (found[0].collapsed, found[0].runs, found[0].collapsed_base, found[0].runs_base) == (4, 4, 0, 4)
    assert found[1].collapsed == 4 and found[0].estimate == pytest.approx(100.0)  # collapse rates, in points
    text = lr_sweep.takeaway(SimpleNamespace(sweep=_full_sweep())).data
    assert "ViT collapsing more often than the BatchNorm model in 2, less often in 0 and no difference" in text
    assert "bear it out at every rate they could judge" in text
    three = judge.larger_lr(_full_sweep(seeds=3))  # 3 of 3 against 0 of 3: Fisher's test cannot reach p < 0.05
    assert len(three) == len(found) and all(
        v.outcome == verdicts.NOT_DECIDABLE and "3 runs against 3" in v.text for v in three
    )


def test_a_batchnorm_model_that_breaks_down_too_is_not_counted_as_stable():
    from vitbn_nb.chapters.fixed_lr import judge

    found = {v.condition.split(":")[0]: v for v in judge.larger_lr(_full_sweep(bn_falls_at_001=True))}
    # at lr 0.01 ViTBN collapses (96 -> 20) as every ViT run does: not "stable", and no difference either way
    assert found["lr 0.01"].outcome == verdicts.NOISE and found["lr 0.01"].collapsed_base == 4
    assert found["lr 0.05"].outcome == verdicts.AGREES


def test_a_run_still_under_way_leaves_the_claim_untestable():
    from vitbn_nb.chapters.fixed_lr import judge

    sweep = _full_sweep()
    unfinished = sweep[~((sweep["model"] == "ViTBN") & (sweep["seed"] == 1) & (sweep["epoch"] > 20))]
    found = {v.condition.split(":")[0]: v for v in judge.larger_lr(unfinished)}
    assert found["lr 0.01"].outcome == verdicts.UNTESTABLE
    assert found["lr 0.01"].scale == "12,000 of the article's 18,000 steps"


def test_the_larger_lr_conclusion_reads_article_1s_whole_protocol_where_its_runs_are_held():
    """At a rate whose whole-protocol runs are held (chapter 03's paper runs at lr 0.01), the conclusion is judged over
    those, at depth 6 only (their depth-1 BatchNorm models are article 1's as run, not this comparison); at the sweep's
    other rates over the sweep's short runs."""
    from types import SimpleNamespace

    from vitbn_nb.chapters.fixed_lr import judge

    full = _full_sweep()
    full = full[full["lr"] == 0.01]
    shallow = full[full["model"] == "ViTBN"].assign(depth=1, test_acc=5.0)  # would reverse the verdict if read
    found = {v.condition.split(":")[0]: v for v in judge.larger_lr(_sweep(), pd.concat([full, shallow]))}
    assert found["lr 0.01"].outcome == verdicts.AGREES
    assert found["lr 0.01"].scale == "18,000 of the article's 18,000 steps"
    assert found["lr 0.05"].outcome == verdicts.UNTESTABLE  # the sweep's 150 steps
    text = lr_sweep.takeaway(SimpleNamespace(sweep=_sweep(), protocol_runs=full)).data
    assert (
        "collapsing more often than the BatchNorm model in 1, less often in 0 and no difference its runs "
        "could show in 0 of 1" in text
    )
    assert "1 of the comparisons are not testable at this scale" in text
    # whole-protocol runs that lack one side at a rate leave that rate to the sweep, not to an empty comparison
    vit_only = full[full["model"] == "ViT"]
    found = {v.condition.split(":")[0]: v for v in judge.larger_lr(_sweep(), vit_only)}
    assert found["lr 0.01"].scale == "150 of the article's 18,000 steps"
    assert judge.larger_lr(_sweep().iloc[0:0], full) == []
