"""Chapter 08's helpers on tiny settings, and its accounting on numbers whose answer is known."""

import copy
import math

import pandas as pd
import pytest

from vitbn_nb import profiles
from vitbn_nb.figures import read_manifest
from vitbn_nb.studies import speed, speed_accounting

TINY = profiles.settings(
    "08_where_the_speed_comes_from",
    "smoke",
    batch_size=4,
    test_batch_size=16,
    steps=1,
    warmup=0,
    repeats=1,
    eval_batches=1,
    eval_warmup=0,
    train_size=32,
    test_size=16,
    matmul_size=64,
    matmul_repeats=1,
    norm_seconds=0.01,
)


@pytest.fixture(scope="module")
def measured(mnist_ready):
    return speed.run(TINY, device="cpu")


def with_speeds(result, train, infer, repeats=None):
    """A copy of ``result`` whose engine and reference throughputs are the given images/s."""
    fake = copy.deepcopy(result.bench)
    for kind, speeds in (("training", train), ("inference", infer)):
        frame = getattr(fake, kind)
        for index, row in frame.iterrows():
            if row["folded"] or row["norms_removed"]:
                continue
            key = (row["model"], row["depth"], row["pipeline"])
            frame.at[index, "images_per_s"] = speeds[key]
            # no spread unless given: every difference counts
            frame.at[index, "images_per_s_repeats"] = (repeats or {}).get((kind, *key), [speeds[key]] * 3)
    return speed.SpeedResult(result.settings, fake)


def test_every_profile_has_the_depths_the_accounting_needs():
    for name in profiles.PROFILE_NAMES:
        settings = profiles.settings(speed.CHAPTER, name)
        assert settings.models == speed.MODELS and {1, 6} <= set(settings.depths)
        assert not speed.plan(settings)


def test_settings_without_both_depths_are_refused():
    with pytest.raises(ValueError, match="depths"):
        speed.run(profiles.settings(speed.CHAPTER, "smoke", depths=[1, 2]))


def test_figures_and_tables_are_saved_and_listed(measured, figures_store):
    speed.equal_depth_figure(measured)
    speed.pipeline_split_figure(measured)
    speed.folding_figure(measured)
    speed_accounting.accounting_table(measured)
    speed_accounting.norm_forms_table(measured)
    speed_accounting.op_counts_table(measured)
    manifest = read_manifest()["outputs"]
    expected = {
        "new_equal_depth_timing": "new/equal_depth_timing",
        "new_pipeline_split": "new/pipeline_split",
        "new_bn_folding": "new/bn_folding",
        "new_speedup_accounting": "new/speedup_accounting",
        "new_batchnorm_forms": "new/batchnorm_forms",
        "new_op_counts": "new/op_counts",
    }
    for name, reproduces in expected.items():
        assert manifest[name]["reproduces"] == reproduces and manifest[name]["chapter"] == speed.CHAPTER
        assert manifest[name]["profile"] == "smoke"
        for file in manifest[name]["files"]:
            assert (figures_store / file).stat().st_size > 0
    accounting = pd.read_csv(figures_store / "new_speedup_accounting.csv")
    assert set(accounting["model"]) == {"ViTBNFFN", "ViTBN"} and list(accounting.columns[-2:]) == [
        "training",
        "inference",
    ]


def test_display_tables_have_a_row_per_configuration(measured):
    assert len(speed.equal_depth(measured)) == 6
    assert len(speed.pipeline_split(measured)) == 12
    assert len(speed.folding(measured)) == 4
    assert len(speed_accounting.utilisation(measured)) == 12
    assert len(speed_accounting.norm_forms(measured)) == 12
    assert len(speed_accounting.op_counts(measured)) == 3 * len(measured.settings.count_depths)
    statement = speed_accounting.op_counts_statement(measured).data
    assert "As article 1 ran it" in statement and measured.bench.hardware_label in statement
    assert len(speed_accounting.article_reported()) == 4
    overview = speed.overview(measured)
    assert "hardware" in set(overview[""]) and "CPU" in overview.iloc[0, 1]
    assert "no GPU" in speed.hardware_note(measured).data


def test_the_accounting_splits_the_published_ratio_into_depth_and_normalisation(measured):
    # ViT 6x slower at depth 6 than at 1; at equal depth ViTBNFFN 1.5x and ViTBN 2x faster than ViT;
    # article 1's pipeline adds 1 ms per image (images/s of 1 / (t + 0.001)).
    engine_t = {
        ("ViT", 1): 0.001,
        ("ViT", 6): 0.006,
        ("ViTBNFFN", 1): 0.001 / 1.5,
        ("ViTBNFFN", 6): 0.004,
        ("ViTBN", 1): 0.0005,
        ("ViTBN", 6): 0.003,
    }
    speeds = {}
    for (model, depth), t in engine_t.items():
        speeds[(model, depth, "engine")] = 1 / t
        speeds[(model, depth, "reference")] = 1 / (t + 0.001)
    fake = with_speeds(measured, speeds, speeds)
    numbers = speed_accounting.accounting(fake)
    for kind in ("training", "inference"):
        n = numbers[("ViTBNFFN", kind)]
        assert n["published_engine"] == pytest.approx(9.0) and n["depth"] == pytest.approx(6.0)
        assert n["norm_depth1"] == pytest.approx(1.5) and n["norm_depth6"] == pytest.approx(1.5)
        assert n["depth"] * n["norm_depth1"] == pytest.approx(n["published_engine"])
        assert n["depth_share"] + n["norm_share"] == pytest.approx(1.0)
        assert n["depth_share"] == pytest.approx(math.log(6) / math.log(9))
        assert n["published_reference"] == pytest.approx(0.007 / (0.001 / 1.5 + 0.001))
        assert n["pipeline_factor"] < 1  # a cost every model pays pulls the ratio towards 1
        m = numbers[("ViTBN", kind)]
        assert m["published_engine"] == pytest.approx(12.0) and m["norm_depth1"] == pytest.approx(2.0)
    text = speed_accounting.accounting_statement(fake).data
    assert "r = 9.00" in text and "In log terms depth explains 82 %" in text and "shrinks" in text
    frame = speed_accounting.accounting_summary(fake)
    depth_row = frame[(frame["model"] == "ViTBN") & frame["quantity"].str.startswith("depth")]
    assert depth_row[["training", "inference"]].values.tolist() == [["6.00", "6.00"]]


def test_a_slower_batchnorm_model_is_said_to_be_slower(measured):
    speeds = {(m, d, p): 1000.0 / d for m in speed.MODELS for d in (1, 6) for p in ("engine", "reference")}
    speeds[("ViTBN", 1, "engine")] = 500.0  # half ViT's speed at depth 1
    text = speed_accounting.accounting_statement(with_speeds(measured, speeds, speeds)).data
    assert "ViTBN against ViT at equal depth 1: no speed-up: 0.50× [0.50, 0.50] (3 rounds)" in text
    assert "depth explains all of it and more" in text


def test_a_difference_within_the_rounds_noise_is_judged_within_noise(measured):
    speeds = {(m, d, p): 1000.0 / d for m in speed.MODELS for d in (1, 6) for p in ("engine", "reference")}
    speeds[("ViTBN", 1, "engine")] = 960.0  # 4 % slower than ViT ...
    # ... while ViT's own rounds spread by 17 %
    fake = with_speeds(measured, speeds, speeds, repeats={("training", "ViT", 1, "engine"): [900.0, 1000.0, 1050.0]})
    text = speed_accounting.accounting_statement(fake).data
    assert "ViTBN against ViT at equal depth 1: within noise: 0.98× [" in text
    assert "depth explains all of it that the timings can resolve" in text
