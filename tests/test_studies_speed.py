"""Chapter 08's helpers on tiny settings, and its accounting on numbers whose answer is known."""

import contextlib
import copy
import io
import json
import math

import pandas as pd
import pytest

from vitbn_nb import bench, chapters, profiles
from vitbn_nb.chapters.speed import accounting as speed_accounting
from vitbn_nb.chapters.speed import kernels as speed_kernels
from vitbn_nb.chapters.speed import study as speed
from vitbn_nb.judging import verdicts
from vitbn_nb.publishing.figures import read_manifest

#: Article 1's models, whose measurements the tables below are built from.
MODELS = ("ViT", "ViTBNFFN", "ViTBN")

TINY = chapters.settings(
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
def measured_and_said(mnist_ready):
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        result = speed.run(TINY, device="cpu", measure=True)
    return result, printed.getvalue()


@pytest.fixture(scope="module")
def measured(measured_and_said):
    return measured_and_said[0]


def test_measuring_says_each_stage_as_it_starts(measured_and_said):
    said = [line for line in measured_and_said[1].splitlines() if line.startswith("measuring: ")]
    assert len(said) >= 4 and any("train" in line for line in said) and any("infer" in line for line in said)


def with_speeds(result, train, infer, repeats=None):
    """A copy of ``result`` whose engine and reference throughputs are the given images/s."""
    fake = copy.deepcopy(result.bench)
    for kind, speeds in (("training", train), ("inference", infer)):
        frame = getattr(fake, kind)
        for index, row in frame.iterrows():
            if row["folded"] or row["norms_removed"]:  # as measured, in as many rounds as the others
                frame.at[index, "images_per_s_repeats"] = [row["images_per_s"]] * 3
                continue
            key = (row["model"], row["depth"], row["pipeline"])
            if key not in speeds:  # a model the case leaves as measured (ViTDyT), in as many rounds
                frame.at[index, "images_per_s_repeats"] = [row["images_per_s"]] * 3
                continue
            frame.at[index, "images_per_s"] = speeds[key]
            # no spread unless given: every difference counts
            frame.at[index, "images_per_s_repeats"] = (repeats or {}).get((kind, *key), [speeds[key]] * 3)
    return speed.SpeedResult(result.settings, fake)


def test_every_profile_has_the_depths_the_accounting_needs():
    for name in profiles.PROFILE_NAMES:
        settings = chapters.settings(speed.SpeedSettings.chapter, name)
        assert settings.models == (*MODELS, "ViTDyT") and {1, 6} <= set(settings.depths)
        assert not speed.plan(settings)


def test_settings_without_both_depths_are_refused():
    with pytest.raises(ValueError, match="depths"):
        speed.run(chapters.settings(speed.SpeedSettings.chapter, "smoke", depths=[1, 2]))


def test_figures_and_tables_are_saved_and_listed(measured, figures_store):
    speed.equal_depth_figure(measured)
    speed.pipeline_split_figure(measured)
    speed.folding_figure(measured)
    speed_accounting.accounting_table(measured)
    speed_kernels.norm_forms_table(measured)
    speed_kernels.op_counts_table(measured)
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
        assert manifest[name]["reproduces"] == reproduces and manifest[name]["chapter"] == speed.SpeedSettings.chapter
        assert manifest[name]["profile"] == "smoke"
        for file in manifest[name]["files"]:
            assert (figures_store / file).stat().st_size > 0
    accounting = pd.read_csv(figures_store / "new_speedup_accounting.csv")
    assert set(accounting["model"]) == {"ViTBNFFN", "ViTBN"} and list(accounting.columns[-2:]) == [
        "training",
        "inference",
    ]


def test_display_tables_have_a_row_per_configuration(measured):
    assert measured.models == ("ViT", "ViTBNFFN", "ViTBN", "ViTDyT") and measured.source == "measured"
    assert len(speed.equal_depth(measured)) == 8
    assert len(speed.pipeline_split(measured)) == 16
    assert len(speed.folding(measured)) == 4  # BatchNorm models only: DyT has nothing to fold
    assert len(speed_kernels.utilisation(measured)) == 16
    assert len(speed_kernels.norm_forms(measured)) == 12
    assert len(speed_kernels.op_counts(measured)) == 4 * len(measured.settings.count_depths)
    statement = speed_kernels.op_counts_statement(measured).data
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
    assert "a speed-up of 9.00× [9.00, 9.00] (3 rounds) with the book's engine" in text
    assert "In log terms depth explains 82 %" in text and "it shrinks every as-run ratio" in text
    frame = speed_accounting.accounting_summary(fake)
    depth_row = frame[(frame["model"] == "ViTBN") & frame["quantity"].str.startswith("depth")]
    assert depth_row[["training", "inference"]].values.tolist() == [["a speed-up of 6.00× [6.00, 6.00] (3 rounds)"] * 2]
    pipeline_row = frame[(frame["model"] == "ViTBN") & frame["quantity"].str.startswith("pipeline")]
    assert pipeline_row["training"].iloc[0].startswith("below 1: ")


def test_a_slower_batchnorm_model_is_said_to_be_slower(measured):
    speeds = {(m, d, p): 1000.0 / d for m in MODELS for d in (1, 6) for p in ("engine", "reference")}
    speeds[("ViTBN", 1, "engine")] = 500.0  # half ViT's speed at depth 1
    text = speed_accounting.accounting_statement(with_speeds(measured, speeds, speeds)).data
    assert "ViTBN against ViT at equal depth 1: no speed-up, slower: 0.50× [0.50, 0.50] (3 rounds)" in text
    assert "depth explains all of it and more" in text


def test_a_difference_within_the_rounds_noise_is_judged_within_noise(measured):
    speeds = {(m, d, p): 1000.0 / d for m in MODELS for d in (1, 6) for p in ("engine", "reference")}
    speeds[("ViTBN", 1, "engine")] = 960.0  # 4 % slower than ViT ...
    # ... while ViT's own rounds spread by 17 %
    fake = with_speeds(measured, speeds, speeds, repeats={("training", "ViT", 1, "engine"): [900.0, 1000.0, 1050.0]})
    text = speed_accounting.accounting_statement(fake).data
    assert "ViTBN against ViT at equal depth 1: within noise: 0.98× [" in text
    assert "depth explains all of it that the timings can resolve" in text


def _flat(measured, repeats=None):
    """Every configuration at 1000 / depth images/s (ViT, ViTBNFFN and ViTBN alike), ``repeats`` overriding rounds."""
    speeds = {(m, d, p): 1000.0 / d for m in MODELS for d in (1, 6) for p in ("engine", "reference")}
    return with_speeds(measured, speeds, speeds, repeats=repeats)


def test_a_busy_round_common_to_both_models_cancels_in_the_chapter_s_ratio(measured):
    # round 2 ran at half speed for every configuration (a busy spell); ViTBN d1 is 1.5x ViT d1 in every round
    busy = [1.0, 0.5, 1.0]
    repeats = {
        ("training", m, d, p): [1000.0 / d * b for b in busy]
        for m in MODELS
        for d in (1, 6)
        for p in ("engine", "reference")
    }
    repeats[("training", "ViTBN", 1, "engine")] = [1500.0 * b for b in busy]
    numbers = speed_accounting.accounting(_flat(measured, repeats))[("ViTBN", "training")]
    assert verdicts.speed_text(numbers["judged_depth1"]) == "a speed-up of 1.50× [1.50, 1.50] (3 rounds)"
    # the same throughputs, the baseline's rounds in another order: the busy round no longer pairs up
    shuffled = dict(repeats)
    shuffled[("training", "ViT", 1, "engine")] = [500.0, 1000.0, 1000.0]
    unpaired = speed_accounting.accounting(_flat(measured, shuffled))[("ViTBN", "training")]["judged_depth1"]
    assert unpaired.outcome == verdicts.NOISE


def test_the_split_into_depth_and_normalisation_stays_exact_with_noisy_rounds(measured):
    repeats = {
        ("inference", "ViT", 6, "engine"): [150.0, 170.0, 160.0, 166.0],
        ("inference", "ViT", 1, "engine"): [990.0, 1010.0, 1000.0, 1040.0],
        ("inference", "ViTBNFFN", 1, "engine"): [1200.0, 1100.0, 1300.0, 1000.0],
    }
    fake = _flat(measured, repeats)
    for frame in (fake.bench.training, fake.bench.inference):  # four rounds everywhere, so that they pair up
        frame["images_per_s_repeats"] = [[*r, r[-1]] if len(r) == 3 else r for r in frame["images_per_s_repeats"]]
    n = speed_accounting.accounting(fake)[("ViTBNFFN", "inference")]
    assert n["depth"] * n["norm_depth1"] == pytest.approx(n["published_engine"])
    assert n["depth_share"] + n["norm_share"] == pytest.approx(1.0)
    assert n["judged_depth"].seeds == n["judged_depth1"].seeds == 4


def test_fewer_than_three_rounds_are_shown_not_judged(measured):
    fake = _flat(measured)
    for frame in (fake.bench.training, fake.bench.inference):
        frame["images_per_s_repeats"] = [list(r)[:2] for r in frame["images_per_s_repeats"]]
    frame = speed_accounting.accounting_summary(fake)
    judged = frame[frame["quantity"].str.contains("by the rule")]
    assert len(judged) and all(
        text.startswith("2 rounds: shown, not judged: ") for text in judged[["training", "inference"]].values.ravel()
    )


def test_chapter_08_words_every_ratio_it_states_by_the_rule(measured):
    fake = _flat(measured, {("inference", "ViTBN", 6, "engine"): [180.0, 170.0, 175.0]})
    numbers = speed_accounting.accounting(fake)
    summary = speed_accounting.accounting_summary(fake)
    for text in summary[summary["quantity"].str.contains("by the rule")][["training", "inference"]].values.ravel():
        assert verdicts.is_rule_text(text), text
    effects = speed_accounting.effects_statement(fake).data
    statement = speed_accounting.accounting_statement(fake).data
    for n in numbers.values():
        for key in ("judged_as_run", "judged_depth", "judged_depth1", "judged_depth6"):
            assert verdicts.speed_text(n[key]) in statement
        for key in ("judged_depth", "judged_depth1", "judged_depth6"):
            assert verdicts.speed_text(n[key]) in effects
        assert verdicts.factor_text(n["judged_pipeline"]) in effects
    assert verdicts.speed_text(numbers[("ViTBN", "inference")]["judged_depth6"]).startswith("within noise: 1.05× [")
    for column in ("engine / article 1's (training), by the rule", "engine / article 1's (inference), by the rule"):
        cells = [c for c in speed.pipeline_split(fake)[column] if c]
        assert cells and all(verdicts.is_rule_text(c) for c in cells)
    for column in (c for c in speed.folding(fake).columns if "by the rule" in c):
        assert all(verdicts.is_rule_text(c) for c in speed.folding(fake)[column])
    for column in (c for c in speed.equal_depth(fake).columns if "by the rule" in c):
        assert all(verdicts.is_rule_text(c) or c == "1 (itself)" for c in speed.equal_depth(fake)[column])


def test_the_batchnorm_forms_are_compared_by_the_rule_round_by_round(measured):
    fake = copy.deepcopy(measured)
    frame = fake.bench.norm_forms
    busy = [1.0, 2.0, 1.0]  # round 2 twice as slow for every form
    base = {speed_kernels.FLAT: 100.0, "BatchNorm1d over b d n (article 1)": 300.0}
    frame["microseconds_rounds"] = [[base.get(f, 101.0) * b for b in busy] for f in frame["form"]]
    judged = speed_kernels.flattened_against(fake)
    assert len(judged) == 2 * frame.groupby(["mode", "dim"]).ngroups
    for (_, _, form), verdict in judged.items():
        expected = "a speed-up of 3.00× [3.00, 3.00]" if "article 1" in form else "a speed-up of 1.01× [1.01, 1.01]"
        assert verdicts.speed_text(verdict).startswith(expected)
    statement = speed_kernels.norm_forms_statement(fake).data
    assert f"faster in {len(judged)}, slower in 0 of {len(judged)} comparisons" in statement
    column = speed_kernels.norm_forms(fake)["flattened against this form, by the rule"]
    assert all(verdicts.is_rule_text(c) or c == "itself" for c in column)
    frame["microseconds_rounds"] = [[m] for m in frame["microseconds"]]  # one round: no verdict
    assert all(v.outcome == verdicts.NOT_JUDGED for v in speed_kernels.flattened_against(fake).values())


def test_vitdyt_is_timed_at_equal_depth_beside_vit_by_the_rule(measured):
    table = speed.equal_depth(measured).set_index(["model", "depth"])
    column = "r_t = T(ViT) / T(model), same depth, engine, by the rule"
    for depth in measured.settings.depths:
        assert table.loc[("ViTDyT", depth), column] != "1 (itself)"
        assert table.loc[("ViTDyT", depth), "article 1 as run"] == ""
        judged = measured.bench.against_vit("training", "ViTDyT", depth)
        assert table.loc[("ViTDyT", depth), column] == verdicts.speed_text(judged)


def _committed_file(measured, folder, models=MODELS):
    """``measured`` written as the book's committed ``bench.json`` in ``folder``, holding only ``models``."""
    found = json.loads(bench.to_json(measured.bench))
    found["settings"]["models"] = list(models)
    for kind in ("training", "inference"):
        found[kind] = [row for row in found[kind] if row["model"] in models]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "bench.json").write_text(json.dumps(found))
    return found


def test_the_chapter_renders_the_committed_measurement_without_measuring(measured, tmp_path, monkeypatch):
    committed = tmp_path / "book-figures"
    _committed_file(measured, committed)  # taken before ViTDyT was added
    monkeypatch.setenv("VITBN_BOOK_FIGURES_DIR", str(committed))
    monkeypatch.setenv("VITBN_FIGURES_DIR", str(tmp_path / "staging"))

    def no_measuring(*args, **kwargs):
        raise AssertionError("rendering from the committed measurement must not measure")

    monkeypatch.setattr(speed.bench, "measure", no_measuring)
    settings = chapters.settings(speed.SpeedSettings.chapter, "cpu")  # the settings ask for ViTDyT too
    result = speed.run(settings)
    assert result.source == "committed" and result.not_measured == ("ViTDyT",)
    assert result.models == MODELS and result.settings.profile == "smoke"  # as the file was measured
    note = speed.hardware_note(result).data
    assert "committed measurement" in note and measured.bench.meta["date"][:10] in note
    assert "ViTDyT is not in this measurement" in note and speed.MEASURE_COMMAND in note
    assert "committed" in speed.overview(result).set_index("").loc["measurement", "this run"]
    # every view draws from it, saying what it read
    monkeypatch.setenv("VITBN_FIGURES_DIR", str(tmp_path / "figures"))
    speed.equal_depth_figure(result)
    assert len(speed.equal_depth(result)) == 6
    entry = read_manifest()["outputs"]["new_equal_depth_timing"]
    assert "committed" in entry["reads"] and "not in this measurement: ViTDyT" in entry["caption"]
    assert not (tmp_path / "figures" / "bench.json").exists()  # nothing measured, nothing written


def test_measuring_anew_is_asked_for_and_kept_beside_the_outputs(measured, tmp_path, monkeypatch):
    _committed_file(measured, tmp_path / "book-figures")
    monkeypatch.setenv("VITBN_BOOK_FIGURES_DIR", str(tmp_path / "book-figures"))
    monkeypatch.setenv("VITBN_FIGURES_DIR", str(tmp_path / "staging"))
    monkeypatch.setattr(speed.bench, "measure", lambda settings, device, log=None: measured.bench)
    monkeypatch.setattr(speed.op_counts, "table", lambda *args: [])
    settings = chapters.settings(speed.SpeedSettings.chapter, "cpu")
    result = speed.run(settings, measure=True)  # python -m vitbn_nb book --measure: papermill's -p measure True
    assert result.source == "measured" and "measured now" in speed.hardware_note(result).data
    assert json.loads((tmp_path / "staging" / "bench.json").read_text())["date"] == measured.bench.meta["date"]
    assert speed.run(settings, measure="true").source == "measured"  # papermill's string
    assert speed.run(settings, measure="false").source == "committed"
    # no usable committed measurement: measured, and the chapter says why
    monkeypatch.setenv("VITBN_BOOK_FIGURES_DIR", str(tmp_path / "nothing"))
    result = speed.run(settings)
    assert result.source == "measured" and "no committed measurement" in speed.hardware_note(result).data


def test_the_repository_s_committed_measurement_reads_back():
    found, taken, why = speed.committed_measurement()
    assert found is not None, why
    assert set(MODELS) <= set(taken.models) and {1, 6} <= set(taken.depths)
