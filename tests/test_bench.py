"""The bench: its quick mode runs end to end and writes the expected JSON; its measuring pieces behave.

No test here looks at how fast anything is: timings depend on the machine and its load.
"""

import contextlib
import io
import json
import math

import pytest
import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from vitbn_nb import bench, chapters
from vitbn_nb.__main__ import main
from vitbn_nb.judging import verdicts
from vitbn_nb.models import build_model

TRAIN_KEYS = {
    "model",
    "depth",
    "pipeline",
    "as_run",
    "images_per_s",
    "step_seconds",
    "data_seconds",
    "compute_seconds",
    "data_share",
    "images_per_s_repeats",
    "flops_per_step",
    "achieved_flops",
    "mfu",
    "compute_mfu",
    "peak_memory_mib",
}
INFER_KEYS = {
    "model",
    "depth",
    "pipeline",
    "as_run",
    "folded",
    "images_per_s",
    "batch_seconds",
    "data_seconds",
    "forward_seconds",
    "bookkeeping_seconds",
    "data_share",
    "peak_memory_mib",
    "flops_per_image",
}


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory, mnist_ready):
    folder = tmp_path_factory.mktemp("bench")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("VITBN_FIGURES_DIR", str(folder / "figures"))
        patch.setenv("VITBN_BOOK_FIGURES_DIR", str(folder / "figures"))
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            code = main(["bench", "--quick", "--out", str(folder / "build"), "--device", "cpu"])
    return code, out.getvalue(), folder


def test_quick_mode_writes_the_expected_json(quick_run):
    code, _, folder = quick_run
    assert code == 0
    [dated] = list((folder / "build").glob("bench-*.json"))
    assert not (folder / "figures" / "bench.json").exists()  # a smoke run's timings never become the book's
    results = json.loads(dated.read_text(), parse_constant=lambda c: pytest.fail(f"non-JSON constant {c}"))
    assert results["profile"] == "smoke" and results["device"] == "cpu" and results["schema"] == 1
    assert {
        "hardware",
        "hardware_label",
        "versions",
        "settings",
        "timing",
        "memory_measure",
        "matmul_peak",
        "training",
        "inference",
        "ratios",
        "folding",
        "norm_forms",
    } <= set(results)
    assert "targets" not in results  # ratios are judged by the rule, against no target
    assert results["matmul_peak"]["flops_per_s"] > 0
    assert results["dataset"] == "mnist"  # article 1 timed its trio on MNIST without augmentation

    training = results["training"]
    assert len(training) == 4 * 2 * 2  # models (article 1's three and ViTDyT) x depths (1, 6) x pipelines
    assert all(set(row) >= TRAIN_KEYS for row in training)
    published = {(r["model"], r["depth"]) for r in training if r["as_run"]}
    assert published == {("ViT", 6), ("ViTBNFFN", 1), ("ViTBN", 1)}
    for row in training:
        assert row["images_per_s"] > 0 and 0 <= row["data_share"] <= 1
        assert row["step_seconds"] >= row["compute_seconds"] > 0
        assert row["flops_per_step"] > 0 and row["mfu"] > 0

    inference = results["inference"]
    plain = [r for r in inference if not r["folded"] and not r.get("norms_removed")]
    folded = [r for r in inference if r["folded"]]
    assert len(plain) == 16 and len(folded) == 4 and all(set(r) >= INFER_KEYS for r in inference)
    assert {(r["model"], r["depth"]) for r in folded} == {(m, d) for m in ("ViTBNFFN", "ViTBN") for d in (1, 6)}
    for row in folded:  # the folded copy that was timed is the same function with no BatchNorm left
        assert row["batchnorms_left"] == 0 and row["max_abs_logit_difference"] < 1e-3
    assert {(r["model"], r["depth"]) for r in inference if r.get("norms_removed")} == {("ViT", 1), ("ViT", 6)}

    assert len(results["ratios"]) == 8 and len(results["folding"]) == 4  # DyT has nothing to fold
    assert all({"train_engine_over_reference", "eval_engine_over_reference"} <= set(r) for r in results["ratios"])
    assert len(results["norm_forms"]) == 3 * 2 * 2  # forms x widths x (train, eval)
    for row in results["ratios"]:  # each ratio judged by the rule from its rounds (a quick run has 2: not judged)
        assert verdicts.is_rule_text(row["train_engine_over_reference_rule"])
    for row in results["folding"]:
        assert verdicts.is_rule_text(row["folded_over_unfolded_rule"])
        assert verdicts.is_rule_text(row["vit_without_layernorm_over_vit_rule"])


def test_quick_mode_prints_the_hardware_line_and_every_table(quick_run):
    _, printed, _ = quick_run
    for heading in (
        "hardware:",
        "fp32 matmul peak",
        "TRAINING",
        "INFERENCE",
        "ENGINE / REFERENCE",
        "BATCHNORM FOLDING",
        "BATCHNORM ON TOKENS",
        "RATIOS BY THE BOOK'S RULE",
        "wrote ",
    ):
        assert heading in printed


def test_flops_count_attention_and_scale_with_the_batch():
    model = build_model("ViT", depth=1)
    two, four = (bench.training_flops(model, n, torch.device("cpu")) for n in (2, 4))
    assert four == 2 * two
    x, y = torch.rand(2, 1, 28, 28), torch.tensor([0, 1])
    with FlopCounterMode(display=False) as plain:  # torch's own table misses the CPU attention kernels
        nn.functional.cross_entropy(model(x), y).backward()
    assert two > plain.get_total_flops()
    assert bench.inference_flops(model, 4, torch.device("cpu")) == 2 * bench.inference_flops(
        model, 2, torch.device("cpu")
    )


def test_the_three_batchnorm_forms_compute_the_same_thing():
    rows = bench.time_norm_forms("cpu", batch=4, test_batch=8, dims=(8,), min_run_time=0.01, repeats=3)
    assert {r["form"] for r in rows} == set(bench.NORM_FORMS) and len(rows) == 6
    assert all(r["max_abs_difference"] < 1e-5 and r["microseconds"] > 0 for r in rows)
    assert min(r["relative_to_fastest"] for r in rows) == 1.0
    # every form of a case in the same rounds, so that two forms pair up round by round; the median round kept
    assert all(len(r["microseconds_rounds"]) == 3 and min(r["microseconds_rounds"]) > 0 for r in rows)
    assert all(r["microseconds"] == sorted(r["microseconds_rounds"])[1] for r in rows)


def test_peak_memory_sees_an_allocation():
    with bench.PeakMemory(torch.device("cpu")) as memory:
        block = torch.ones(64 * 2**20 // 4)  # 64 MiB, touched
        del block
    assert memory.what and math.isfinite(memory.mib) and memory.mib >= 0
    if "clear_refs" in memory.what:
        assert memory.mib > 48


def test_without_norms_strips_every_norm():
    stripped = bench.without_norms(build_model("ViTBN", depth=2))
    assert not any(isinstance(m, (nn.LayerNorm, nn.BatchNorm1d)) for m in stripped.modules())
    assert stripped(torch.rand(3, 1, 28, 28)).shape == (3, 10)


@pytest.mark.parametrize(
    "change, argument",
    [
        (dict(steps=0), "steps"),
        (dict(batch_size=1), "batch_size"),
        (dict(models=("ResNet",)), "models"),
        (dict(depths=(0,)), "depths"),
        (dict(train_size=10), "train_size"),
        (dict(warmup=-1), "warmup"),
    ],
)
def test_bad_bench_settings_are_refused_by_name(change, argument):
    with pytest.raises(ValueError, match=argument):
        chapters.settings("08_where_the_speed_comes_from", "smoke", **change)


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_asking_for_cuda_without_it_is_a_clear_error(capsys, tmp_path):
    assert main(["bench", "--quick", "--device", "cuda", "--out", str(tmp_path)]) == 1
    assert "CUDA cannot be used" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())
