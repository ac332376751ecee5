"""Chapters 01 (BatchNorm in a DNN) and 02 (the architectures): their study helpers."""

import numpy as np
import pandas as pd
import pytest
import torch

from vitbn_nb import chapters, profiles
from vitbn_nb.chapters.architectures import sizes as model_sizes
from vitbn_nb.chapters.architectures import study as architectures
from vitbn_nb.chapters.batchnorm_intro import study as batchnorm_intro
from vitbn_nb.models import build_model, count_parameters
from vitbn_nb.publishing.figures import read_manifest

SMOKE = chapters.settings("01_batchnorm_intro", "smoke")


# --- chapter 01 -------------------------------------------------------------------------------


@pytest.mark.parametrize("profile", profiles.PROFILE_NAMES)
def test_configs_follow_article2_protocol_and_the_profile(profile):
    settings = chapters.settings("01_batchnorm_intro", profile)
    configs = batchnorm_intro.plan(settings)
    assert len(configs) == 2 * len(settings.lrs) * settings.seeds
    assert {c.model for c in configs} == {"DNN_d3", "DNNBN_d3"}
    assert {c.dataset for c in configs} == {"mnist_aug"}
    assert sorted({c.lr for c in configs}) == sorted(settings.lrs) == [0.01, 0.1]
    assert {(c.epochs, c.batch_size, c.test_batch_size, c.train_size, c.test_size) for c in configs} == {
        (settings.epochs, 100, 5000, settings.train_size, settings.test_size)
    }
    assert {c.seed for c in configs} == set(range(settings.seeds))
    assert len({c.run_id("cpu") for c in configs}) == len(configs)


def test_paper_profile_is_the_seed_protocol():
    settings = chapters.settings("01_batchnorm_intro", "paper")
    assert (settings.epochs, settings.seeds, settings.train_size, settings.test_size) == (15, 3, None, None)


def test_bad_settings_are_refused_by_name():
    with pytest.raises(ValueError, match="no setting 'learning_rate'"):
        chapters.settings("01_batchnorm_intro", "smoke", learning_rate=0.1)
    with pytest.raises(ValueError, match="seeds"):
        chapters.settings("01_batchnorm_intro", "smoke", seeds=0)
    with pytest.raises(ValueError, match="lrs"):
        chapters.settings("01_batchnorm_intro", "smoke", lrs=[])
    with pytest.raises(ValueError, match=r"epochs='two' is not allowed; it must be an integer"):
        chapters.settings("01_batchnorm_intro", "smoke", epochs="two")
    with pytest.raises(ValueError, match=r"lrs\[1\]"):
        chapters.settings("01_batchnorm_intro", "smoke", lrs=[0.1, "fast"])
    assert chapters.settings("01_batchnorm_intro", "smoke", lrs=[1, 0.5]).lrs == (1.0, 0.5)  # an int is a number


def test_figures_and_summaries_from_a_tiny_real_run(run_store, figures_store, mnist_ready):
    settings = chapters.settings("01_batchnorm_intro", "smoke", epochs=1, train_size=200, test_size=100)
    result = batchnorm_intro.run(settings)
    table = result.table
    assert len(table) == 4 and set(table["model"]) == {"DNN_d3", "DNNBN_d3"}
    assert batchnorm_intro.run(settings).table["test_acc"].tolist() == table["test_acc"].tolist()  # read back

    for lr in settings.lrs:
        batchnorm_intro.accuracy_loss_figure(result, lr)
    batchnorm_intro.lr_comparison_figure(result)
    outputs = read_manifest()["outputs"]
    reproduces = {entry["reproduces"]: entry for entry in outputs.values()}
    assert set(reproduces) == {"article2/fig1", "article2/fig2", "article2/fig3"}
    for entry in reproduces.values():
        assert entry["chapter"] == "01_batchnorm_intro" and entry["profile"] == "smoke"
        assert all((figures_store / name).exists() for name in entry["files"])
    assert set(reproduces["article2/fig3"]["run_ids"]) == set(table["run_id"])
    assert set(reproduces["article2/fig1"]["run_ids"]) == set(table.loc[table["lr"] == 0.01, "run_id"])

    shown = batchnorm_intro.summary(result, 0.1)
    assert list(shown.table["model"]) == ["DNN_d3", "DNNBN_d3"] and set(shown.table["lr"]) == {0.1}
    assert "article 2" in shown.verdicts[0].lower()
    # one epoch of 200 images: article 2's stability over its 15 epochs is not judged from it
    assert shown.verdicts[1].endswith(
        "by the book's rule: not testable at this scale (2 of the article's 9,000 steps)."
    )
    both = batchnorm_intro.summary(result)
    assert len(both.table) == 4 and any("from lr 0.01 to lr 0.1" in v for v in both.verdicts)
    assert "<table" in both._repr_html_()
    with pytest.raises(ValueError, match="no rows"):
        batchnorm_intro.accuracy_loss_figure(result, 0.5)


def synthetic(final: dict[tuple[str, float], list[float]], epochs: int = 15) -> pd.DataFrame:
    """A run table with given final accuracies per (model, lr), one run per listed seed."""
    rows = []
    for (model, lr), accuracies in final.items():
        for seed, acc in enumerate(accuracies):
            run_id = f"{model}-{lr}-{seed}"
            # article 2's protocol: 15 epochs of 600 steps, the last one at the given accuracy
            for epoch, value in [(e, acc / 2) for e in range(1, epochs)] + [(epochs, acc)]:
                rows.append(
                    dict(
                        run_id=run_id,
                        status="finished",
                        model=model,
                        lr=lr,
                        seed=seed,
                        epoch=epoch,
                        test_acc=value,
                        train_loss=1.0,
                        batch_size=100,
                        diverged=False,
                    )
                )
    return pd.DataFrame(rows)


def test_the_verdict_weighs_the_gap_against_the_spread():
    clear = synthetic({("DNN_d3", 0.01): [10.2, 9.8, 10.0], ("DNNBN_d3", 0.01): [90.0, 91.0, 89.0]})
    lines = batchnorm_intro.summary(batchnorm_intro.IntroResult(SMOKE, clear), 0.01).verdicts
    assert (
        "final test accuracy, lr 0.01 (pt): +80.0 pt [+77.2, +82.8] (3 seeds); by the book's rule: agrees"
        in " ".join(lines)
    )
    assert "lr 0.01: DNN_d3 did not learn" in lines[-1]
    noisy = synthetic({("DNN_d3", 0.01): [80.0, 90.0, 85.0], ("DNNBN_d3", 0.01): [86.0, 84.0, 88.0]})
    lines = batchnorm_intro.summary(batchnorm_intro.IntroResult(SMOKE, noisy), 0.01).verdicts
    assert "final test accuracy, lr 0.01 (pt): +1.0 pt [-14.5, +16.5] (3 seeds); by the book's rule: within noise" in (
        " ".join(lines)
    )
    assert not any("did not learn" in line for line in lines)
    # two epochs of article 2's fifteen: the final accuracies are measured, not judged against its Figure 1
    short = synthetic({("DNN_d3", 0.01): [10.2, 9.8, 10.0], ("DNNBN_d3", 0.01): [90.0, 91.0, 89.0]}, epochs=2)
    lines = batchnorm_intro.summary(batchnorm_intro.IntroResult(SMOKE, short), 0.01).verdicts
    assert "not testable at this scale (1,200 of the article's 9,000 steps)" in " ".join(lines)


# --- chapter 02 -------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["ViT", "ViTBNFFN", "ViTBN"])
def test_shape_walkthrough_reads_the_real_shapes(name):
    table = architectures.shape_walkthrough(name, batch_size=3)
    shapes = list(table["output shape"])
    for expected in [
        "(3, 1, 28, 28)",
        "(3, 16, 49)",
        "(3, 16, 64)",
        "(3, 17, 64)",
        "(3, 17, 128)",
        "(3, 64)",
        "(3, 10)",
    ]:
        assert expected in shapes
    assert shapes.index("(3, 16, 64)") < shapes.index("(3, 17, 64)") < shapes.index("(3, 64)")
    assert table["parameters"].sum() == count_parameters(build_model(name)) == table.attrs["total_parameters"]
    with pytest.raises(ValueError, match="model_name"):
        architectures.shape_walkthrough("ResNet")


def test_norm_sites_match_the_model_definitions():
    sites = architectures.norm_sites().set_index("place")
    assert set(sites.loc[["final norm", "attention pre-norm"], "ViTBNFFN"]) == {"LayerNorm(64)"}
    assert set(sites.loc[["final norm", "attention pre-norm"], "ViTBN"]) == {"BatchNorm(64)"}
    assert sites.loc["feed-forward network", "ViT"].startswith("LayerNorm(64) → Linear")
    assert sites.loc["feed-forward network", "ViTBNFFN"].startswith("Linear(64→128) → BatchNorm(128)")


def test_norm_axes_demo_states_the_true_properties():
    demo = architectures.norm_axes_demo().set_index("norm")
    ln, bn = demo.loc["LayerNorm"], demo.loc["BatchNorm (train mode)"]
    assert ln["max |mean| per token (over features)"] < 1e-5
    assert bn["max |mean| per feature (over batch & tokens)"] < 1e-5
    # ... and not along the other axes, or the demo would show nothing.
    assert ln["max |mean| per feature (over batch & tokens)"] > 0.1
    assert bn["max |mean| per token (over features)"] > 0.1
    assert ln["std per token (over features)"] == "1.000 – 1.000"
    assert bn["std per feature (over batch & tokens)"] == "1.000 – 1.000"
    with pytest.raises(ValueError, match="shape"):
        architectures.norm_axes_demo(torch.zeros(1, 5, 6))


def test_batchnorm_output_depends_on_the_batch_only_in_train_mode(mnist_ready):
    table = architectures.batch_dependence().set_index("model")
    assert table.loc["ViT", "max |Δ logit| in train mode"] < 1e-5
    for name in ("ViTBNFFN", "ViTBN"):
        assert table.loc[name, "max |Δ logit| in train mode"] > 1e-4
        assert table.loc[name, "max |Δ logit| in eval mode"] < 1e-5
    assert (table["max |Δ logit| in eval mode"] < 1e-5).all()


def test_running_mean_converges_like_its_momentum_says(mnist_ready):
    trace = architectures.running_mean_trace(steps=40)
    error = trace["max |error|"].to_numpy()
    assert error[-1] < 0.1 * error[0]
    # Early on, the initial error dominates and shrinks as 0.9^k; later batch noise takes over.
    envelope = trace["(1 − momentum)^step × initial error"].to_numpy()
    assert np.allclose(error[:6], envelope[:6], rtol=0.1)


def test_model_sizes_count_parameters_and_flops_of_every_configuration():
    sizes = model_sizes.model_sizes()
    keys = list(zip(sizes["model"], sizes["depth"].astype(object).where(sizes["depth"].notna(), None)))
    assert len(keys) == len(set(keys))
    expected = {
        ("ViT", 6),
        ("ViTBNFFN", 1),
        ("ViTBN", 1),
        ("ViTBN", 6),
        ("ViTDyT", 1),  # chapter 08's equal depths
        ("ViTDyT", 6),  # and chapter 05's, beside article 2's models
        ("DNN_d3", None),
        ("DNNBN_d3", None),
        ("CNN", None),
    } | {(m, d) for m in ("ViT", "ViTBNFFN") for d in range(1, 8)}
    assert set(keys) == expected
    for (model, depth), params in zip(keys, sizes["parameters"]):
        assert params == count_parameters(build_model(model, **({} if depth is None else {"depth": depth})))
    flops = sizes.set_index(["model", "depth"])["MFLOPs per image"] * 1e6
    vit = np.array([flops[("ViT", d)] for d in range(1, 8)])
    assert np.allclose(np.diff(vit), np.diff(vit)[0])  # every block costs the same
    # No norm is counted, DyT's elementwise ops as LayerNorm's: DyT's FLOPs are ViT's, its parameters 1 more per norm.
    assert flops[("ViTDyT", 6)] == flops[("ViT", 6)] and flops[("ViTDyT", 1)] == flops[("ViT", 1)]
    params = sizes.set_index(["model", "depth"])["parameters"]
    assert params[("ViTDyT", 6)] - params[("ViT", 6)] == 2 + 2 * 6 + 1
    # One block by hand: qkv, q·k and attn·v, output projection, the two FFN Linears (2 FLOPs per MAC).
    tokens, dim, inner, mlp, heads = 17, 64, 512, 128, 8
    block = 2 * (
        tokens * dim * 3 * inner
        + 2 * heads * tokens * tokens * (inner // heads)
        + tokens * inner * dim
        + 2 * tokens * dim * mlp
    )
    assert np.diff(vit)[0] == pytest.approx(block)
    assert flops[("ViT", 1)] == pytest.approx(block + 2 * (16 * 49 * 64 + 64 * 10))
    dnn = sizes[sizes["model"] == "DNN_d3"]["MFLOPs per image"].iloc[0] * 1e6
    assert dnn == pytest.approx(2 * (784 * 100 + 2 * 100 * 100 + 100 * 10))


def test_size_outputs_are_saved_with_their_ids(figures_store):
    sizes = model_sizes.model_sizes(model_sizes.configurations().query("model in ['ViT', 'ViTBNFFN', 'CNN']"))
    result = architectures.ModelsResult(chapters.settings("02_models", "smoke"), None, sizes)
    model_sizes.model_table(result)
    model_sizes.model_size_figure(result)
    outputs = read_manifest()["outputs"]
    assert {e["reproduces"] for e in outputs.values()} == {"new/model_table", "new/model_sizes"}
    saved = pd.read_csv(figures_store / "02_model_table.csv")
    assert list(saved["parameters"]) == list(sizes["parameters"])
    notes = model_sizes.size_summary(result)
    assert any("each encoder block adds" in line for line in notes) and notes._repr_markdown_().startswith("- ")


def test_chapter_01s_claims_do_not_depend_on_the_order_of_its_rates():
    from vitbn_nb.chapters.batchnorm_intro import article

    given = [chapters.settings("01_batchnorm_intro", "paper", lrs=lrs) for lrs in ((0.01, 0.1), (0.1, 0.01))]
    first, second = ([(c.key, c.measure) for c in article.findings(s)] for s in given)
    assert first == second and "lr 0.01" in first[0][1]
