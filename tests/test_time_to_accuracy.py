"""Chapter 03's time to accuracy, on made-up run tables: the first epoch at a target, steps and cumulative seconds
to its end, targets never reached, seeds paired under the rule."""

import math
import types

import pandas as pd

from vitbn_nb.chapters.fixed_lr import time_to_accuracy as tta
from vitbn_nb.judging import verdicts


def runs(curves: dict) -> pd.DataFrame:
    """``{(model, depth, seed): [(test_acc, train_seconds), ...]}`` as a run table (1,000 images, batch 100)."""
    rows = []
    for (model, depth, seed), epochs in curves.items():
        for epoch, (acc, seconds) in enumerate(epochs, start=1):
            rows.append(
                dict(
                    run_id=f"{model}-d{depth}-s{seed}",
                    model=model,
                    depth=depth,
                    lr=0.0005,
                    seed=seed,
                    epoch=epoch,
                    test_acc=acc,
                    train_seconds=seconds,
                    batch_size=100,
                    train_size=1000,
                    load_1min=0.5,
                    cpu_cores=2,
                )
            )
    return pd.DataFrame(rows)


def test_a_target_reached_mid_run_counts_at_that_epochs_end_and_one_never_reached_is_nan():
    table = runs({("ViT", 6, 0): [(70.0, 10.0), (85.0, 12.0), (91.0, 11.0)]})
    reached = tta.per_run(table, targets=(80.0, 90.0, 95.0)).set_index("target")
    assert (reached.loc[80.0, "epoch"], reached.loc[80.0, "steps"], reached.loc[80.0, "seconds"]) == (2, 20, 22.0)
    assert reached.loc[90.0, "seconds"] == 33.0 and reached.loc[90.0, "steps"] == 30
    assert math.isnan(reached.loc[95.0, "seconds"]) and reached.loc[95.0, "steps_trained"] == 30


def test_a_busy_epoch_before_the_target_is_flagged_and_its_seconds_left_out():
    table = runs({("ViT", 6, 0): [(85.0, 10.0), (91.0, 10.0)]})
    table.loc[table["epoch"] == 2, "load_1min"] = 9.0
    reached = tta.per_run(table, targets=(80.0, 90.0)).set_index("target")
    assert not reached.loc[80.0, "busy"] and reached.loc[90.0, "busy"]
    assert reached.loc[80.0, "seconds"] == 10.0 and math.isnan(reached.loc[90.0, "seconds"])
    assert reached.loc[90.0, "steps"] == 20  # reached all the same: only its time is left out


def test_a_seed_timed_beside_other_work_leaves_the_comparison():
    curves = {}
    for seed, (vit, bn) in enumerate([(30.0, 10.0), (33.0, 11.0), (27.0, 9.0)]):
        curves[("ViT", 6, seed)] = [(95.0, vit)]
        curves[("ViTBN", 1, seed)] = [(95.0, bn)]
    table = runs(curves)
    table["load_1min"] = [0.5, 0.5, 0.5, 0.5, 9.0, 0.5]  # seed 2's ViT run was timed beside other work
    verdict = tta.comparison(tta.per_run(table), "ViTBN", 1, 0.0005, 90.0, "")
    assert verdict.seeds == 2


def test_seeds_are_paired_and_judged_by_the_rule():
    curves = {}
    for seed, (vit, bn) in enumerate([(30.0, 10.0), (33.0, 11.0), (27.0, 9.0)]):
        curves[("ViT", 6, seed)] = [(95.0, vit)]
        curves[("ViTBN", 1, seed)] = [(95.0, bn)]
    reached = tta.per_run(runs(curves))
    verdict = tta.comparison(reached, "ViTBN", 1, 0.0005, 90.0, "CPU: test")
    assert verdict.outcome == verdicts.AGREES and verdict.seeds == 3 and abs(verdict.estimate - 3.0) < 1e-9
    assert verdicts.speed_text(verdict).startswith("a speed-up of 3.00× [3.00, 3.00] (3 seeds)")
    one = tta.comparison(
        tta.per_run(runs({k: v for k, v in curves.items() if k[2] == 0})), "ViTBN", 1, 0.0005, 90.0, ""
    )
    assert verdicts.speed_text(one) == "1 seed: shown, not judged: 3.00×"


def test_a_seed_where_one_model_never_reached_the_target_leaves_the_comparison():
    curves = {("ViT", 6, 0): [(95.0, 30.0)], ("ViTBN", 1, 0): [(50.0, 10.0)]}
    verdict = tta.comparison(tta.per_run(runs(curves)), "ViTBN", 1, 0.0005, 90.0, "")
    assert verdict.outcome == verdicts.NOT_RUN


def test_a_seed_whose_runs_were_timed_on_two_machines_leaves_the_comparison():
    curves = {}
    for seed, (vit, bn) in enumerate([(30.0, 10.0), (33.0, 11.0), (27.0, 9.0)]):
        curves[("ViT", 6, seed)] = [(85.0, vit), (95.0, vit)]
        curves[("ViTBN", 1, seed)] = [(85.0, bn), (95.0, bn)]
    table = runs(curves).assign(machine="CPU: A (2 cores)")
    # seed 1's ViTBN run was trained elsewhere; seed 2's resumed elsewhere after its first epoch
    table.loc[(table["run_id"] == "ViTBN-d1-s1"), "machine"] = "CPU: B (2 cores)"
    table.loc[(table["run_id"] == "ViTBN-d1-s2") & (table["epoch"] == 2), "machine"] = "CPU: B (2 cores)"
    reached = tta.per_run(table).set_index(["run_id", "target"])
    assert reached.loc[("ViTBN-d1-s2", 80.0), "seconds"] == 9.0  # its first epoch: one machine
    assert math.isnan(reached.loc[("ViTBN-d1-s2", 90.0), "seconds"])  # summed over two machines: no time
    assert reached.loc[("ViTBN-d1-s1", 90.0), "seconds"] == 22.0  # one machine, another than its ViT's
    assert tta.comparison(tta.per_run(table), "ViTBN", 1, 0.0005, 90.0, "").seeds == 1
    assert tta.comparison(tta.per_run(table), "ViTBN", 1, 0.0005, 80.0, "").seeds == 2


def test_the_seconds_shown_are_one_machines_while_each_seed_is_judged_on_its_own(run_store):
    curves = {}
    for seed, (vit, bn) in enumerate([(30.0, 10.0), (33.0, 11.0), (270.0, 90.0)]):
        curves[("ViT", 6, seed)] = [(95.0, vit)]
        curves[("ViTBN", 1, seed)] = [(95.0, bn)]
    table = runs(curves).assign(machine="CPU: A (2 cores)")
    table.loc[table["seed"] == 2, "machine"] = "CPU: B (2 cores)"  # seed 2 trained on a slower machine
    found = tta.summary(types.SimpleNamespace(table=table)).set_index("target (%)")
    row = found.loc[90.0]
    assert (row["ViT d6: seconds"], row["model: seconds"]) == (31.5, 10.5)  # A's seeds: B's 270 s never pooled in
    assert row["ViT d6: seeds reaching it"] == "3 of 3" and row[tta.LEFT_OUT] == 2
    # every seed's pair was timed on one machine, A or B: all three are judged
    assert row["T(ViT) / T(model), by the rule"].startswith("a speed-up of 3.00× [3.00, 3.00] (3 seeds)")
