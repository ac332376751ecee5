"""Chapter 08's helpers on tiny settings, and its accounting on numbers whose answer is known."""
import copy
import math

import pandas as pd
import pytest

from vitbn_nb import profiles
from vitbn_nb.studies import speed
from vitbn_nb.figures import read_manifest

TINY = dict(profile="smoke", depths=[1, 6], batch_size=4, test_batch_size=16, steps=1, warmup=0, repeats=1,
            eval_batches=1, eval_warmup=0, train_size=32, test_size=16, matmul_size=64, matmul_repeats=1,
            norm_iterations=1)


@pytest.fixture(scope="module")
def measured(mnist_ready):
    return speed.measure(TINY, device="cpu")


def with_speeds(results, train, infer):
    """A copy of ``results`` whose engine and reference throughputs are the given images/s."""
    fake = copy.deepcopy(results)
    for kind, speeds in (("training", train), ("inference", infer)):
        for row in fake[kind]:
            if row.get("folded") or row.get("norms_removed"):
                continue
            row["images_per_s"] = speeds[(row["model"], row["depth"], row["pipeline"])]
            row["images_per_s_repeats"] = [row["images_per_s"]] * 3  # no spread: every difference counts
    return fake


def test_every_profile_has_settings_the_bench_accepts():
    for name in profiles.PROFILE_NAMES:
        settings = profiles.settings(speed.CHAPTER, name)
        bench_settings = speed.bench_settings(settings)
        assert bench_settings.models == speed.MODELS and {1, 6} <= set(bench_settings.depths)


def test_settings_without_both_depths_are_refused():
    with pytest.raises(ValueError, match="depths"):
        speed.bench_settings({**TINY, "depths": [1, 2]})
    with pytest.raises(ValueError, match="lack"):
        speed.bench_settings({"profile": "smoke"})


def test_figures_and_tables_are_saved_and_listed(measured, figures_store):
    speed.equal_depth_figure(measured, TINY)
    speed.pipeline_split_figure(measured, TINY)
    speed.folding_figure(measured, TINY)
    speed.accounting_table(measured, TINY)
    speed.norm_forms_table(measured, TINY)
    manifest = read_manifest()["outputs"]
    expected = {"new_equal_depth_timing": "new/equal_depth_timing", "new_pipeline_split": "new/pipeline_split",
                "new_bn_folding": "new/bn_folding", "new_speedup_accounting": "new/speedup_accounting",
                "new_batchnorm_forms": "new/batchnorm_forms"}
    for name, reproduces in expected.items():
        assert manifest[name]["reproduces"] == reproduces and manifest[name]["chapter"] == speed.CHAPTER
        assert manifest[name]["profile"] == "smoke"
        for file in manifest[name]["files"]:
            assert (figures_store / file).stat().st_size > 0
    accounting = pd.read_csv(figures_store / "new_speedup_accounting.csv")
    assert set(accounting["model"]) == {"ViTBNFFN", "ViTBN"} and list(accounting.columns[-2:]) == ["training", "inference"]


def test_display_tables_have_a_row_per_configuration(measured):
    assert len(speed.equal_depth_table(measured)) == 6
    assert len(speed.pipeline_table(measured)) == 12
    assert len(speed.folding_table(measured)) == 4
    assert len(speed.utilisation_table(measured)) == 12
    assert len(speed.targets_frame(measured)) == 4
    assert len(speed.norm_forms_frame(measured)) == 12
    assert len(speed.seed_reported()) == 4
    overview = speed.overview(measured)
    assert "hardware" in set(overview[""]) and "CPU" in overview.iloc[0, 1]
    assert "no GPU" in speed.hardware_note(measured).data


def test_the_accounting_splits_the_published_ratio_into_depth_and_normalisation(measured):
    # ViT 6x slower at depth 6 than at 1; at equal depth ViTBNFFN 1.5x and ViTBN 2x faster than ViT;
    # the seeds' pipeline adds 1 ms per image (images/s of 1 / (t + 0.001)).
    engine_t = {("ViT", 1): 0.001, ("ViT", 6): 0.006, ("ViTBNFFN", 1): 0.001 / 1.5, ("ViTBNFFN", 6): 0.004,
                ("ViTBN", 1): 0.0005, ("ViTBN", 6): 0.003}
    speeds = {}
    for (model, depth), t in engine_t.items():
        speeds[(model, depth, "engine")] = 1 / t
        speeds[(model, depth, "reference")] = 1 / (t + 0.001)
    fake = with_speeds(measured, speeds, speeds)
    numbers = speed.accounting(fake)
    for kind in ("training", "inference"):
        n = numbers[("ViTBNFFN", kind)]
        assert n["published_engine"] == pytest.approx(9.0) and n["depth"] == pytest.approx(6.0)
        assert n["norm_depth1"] == pytest.approx(1.5) and n["norm_depth6"] == pytest.approx(1.5)
        assert n["depth"] * n["norm_depth1"] == pytest.approx(n["published_engine"])
        assert n["depth_share"] + n["norm_share"] == pytest.approx(1.0)
        assert n["depth_share"] == pytest.approx(math.log(6) / math.log(9))
        assert n["published_seeds"] == pytest.approx(0.007 / (0.001 / 1.5 + 0.001))
        assert n["pipeline_factor"] < 1  # a cost every model pays pulls the ratio towards 1
        m = numbers[("ViTBN", kind)]
        assert m["published_engine"] == pytest.approx(12.0) and m["norm_depth1"] == pytest.approx(2.0)
    text = speed.accounting_statement(fake).data
    assert "r = 9.00" in text and "In log terms depth explains 82 %" in text and "shrinks" in text
    frame = speed.accounting_frame(fake)
    depth_row = frame[(frame["model"] == "ViTBN") & frame["quantity"].str.startswith("depth")]
    assert depth_row[["training", "inference"]].values.tolist() == [["6.00", "6.00"]]


def test_a_slower_batchnorm_model_is_said_to_be_slower(measured):
    speeds = {(m, d, p): 1000.0 / d for m in speed.MODELS for d in (1, 6) for p in ("engine", "reference")}
    speeds[("ViTBN", 1, "engine")] = 500.0  # half ViT's speed at depth 1
    text = speed.accounting_statement(with_speeds(measured, speeds, speeds)).data
    assert "ViTBN is slower than ViT (r = 0.50)" in text and "depth explains all of it and more" in text


def test_a_difference_within_the_repeats_spread_is_called_a_tie(measured):
    speeds = {(m, d, p): 1000.0 / d for m in speed.MODELS for d in (1, 6) for p in ("engine", "reference")}
    speeds[("ViTBN", 1, "engine")] = 960.0  # 4 % slower than ViT ...
    fake = with_speeds(measured, speeds, speeds)
    vit = next(r for r in fake["training"] if (r["model"], r["depth"], r["pipeline"]) == ("ViT", 1, "engine"))
    vit["images_per_s_repeats"] = [900.0, 1000.0, 1050.0]  # ... while ViT's own repeats spread by 17 %
    text = speed.accounting_statement(fake).data
    assert "ViTBN is about as fast as ViT (r = 0.96)" in text
