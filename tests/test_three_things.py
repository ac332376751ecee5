"""Touvron et al.'s three things on the book's ViTs: parallel blocks, hMLP stem, attention-only fine-tuning."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from vitbn_nb import chapters, data, profiles
from vitbn_nb.chapters.three_things import attention_finetune, hmlp_stem, parallel_blocks
from vitbn_nb.chapters.three_things import study as three_things
from vitbn_nb.engines import finetune, training
from vitbn_nb.models import REFERENCE_VIT, DNN_d3, ViT, ViTBN, ViTBNFFN, build_model, count_parameters
from vitbn_nb.models.norms import BatchNorm, LayerNorm2d
from vitbn_nb.models.vit import HMLPStem, Parallel, hmlp_kernels
from vitbn_nb.publishing.figures import read_manifest
from vitbn_nb.store import runs

VITS = [ViT, ViTBNFFN, ViTBN]


def vit(cls=ViT, **overrides):
    return cls(**{**REFERENCE_VIT, "depth": 2, **overrides})


# -- parallel blocks --------------------------------------------------------------------------


@pytest.mark.parametrize("cls", VITS)
@pytest.mark.parametrize("stem", ["linear", "hmlp"])
def test_parallel_blocks_have_the_parameters_of_the_sequential_model(cls, stem):
    sequential = count_parameters(vit(cls, depth=6, stem=stem))
    assert count_parameters(vit(cls, depth=3, branches=2, stem=stem)) == sequential
    assert count_parameters(vit(cls, depth=2, branches=3, stem=stem)) == sequential
    assert count_parameters(vit(cls, depth=3, stem=stem)) < sequential


@pytest.mark.parametrize("cls", VITS)
def test_a_parallel_block_sums_its_branches_on_the_same_input(cls):
    torch.manual_seed(0)
    model = vit(cls, depth=1, branches=2).eval()
    attn, ff = model.transformer.layers[0]
    assert isinstance(attn, Parallel) and isinstance(ff, Parallel) and len(attn) == len(ff) == 2
    x = torch.randn(3, 17, 64)
    after_attention = x + attn[0](x) + attn[1](x)
    expected = model.transformer.norm(after_attention + ff[0](after_attention) + ff[1](after_attention))
    assert torch.allclose(model.transformer(x), expected, atol=1e-5)


# -- hMLP stem --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "patch, kernels",
    [
        (7, (7, 1, 1)),
        (16, (4, 2, 2)),
        (14, (7, 2, 1)),
        (12, (3, 2, 2)),
        (8, (2, 2, 2)),
        (4, (2, 2, 1)),
        (18, (3, 3, 2)),
        (1, (1, 1, 1)),
    ],
)
def test_hmlp_kernel_rule(patch, kernels):
    assert hmlp_kernels(patch) == kernels


def test_hmlp_kernels_always_multiply_to_the_patch_and_shrink():
    for patch in range(1, 65):
        k = hmlp_kernels(patch)
        assert k[0] * k[1] * k[2] == patch and k[0] >= k[1] >= k[2] >= 1, (patch, k)


@pytest.mark.parametrize("norm, norm_type", [(nn.LayerNorm, LayerNorm2d), (BatchNorm, nn.BatchNorm2d)])
def test_hmlp_stem_is_touvrons_layout(norm, norm_type):
    stem = HMLPStem(patch_size=16, channels=3, dim=64, norm=norm)
    convs = [m for m in stem if isinstance(m, nn.Conv2d)]
    assert [c.kernel_size for c in convs] == [(4, 4), (2, 2), (2, 2)] and all(c.kernel_size == c.stride for c in convs)
    assert [c.out_channels for c in convs] == [16, 16, 64]
    assert sum(isinstance(m, norm_type) for m in stem) == 3 and sum(isinstance(m, nn.GELU) for m in stem) == 2
    assert stem(torch.rand(2, 3, 64, 32)).shape == (2, 4 * 2, 64)


def _tokens_after_changing_one_patch(model, image_size, patch, which):
    torch.manual_seed(0)
    x = torch.rand(3, 1, image_size, image_size)
    y = x.clone()
    grid = image_size // patch
    row, col = divmod(which, grid)
    y[:, :, row * patch : (row + 1) * patch, col * patch : (col + 1) * patch] = torch.rand(3, 1, patch, patch)
    with torch.no_grad():
        return model.to_patch_embedding(x), model.to_patch_embedding(y)


@pytest.mark.parametrize("cls", VITS)
@pytest.mark.parametrize("stem", ["linear", "hmlp"])
@pytest.mark.parametrize("image_size, patch", [(28, 7), (56, 14), (32, 16)])
def test_no_stem_mixes_patches(cls, stem, image_size, patch):
    model = vit(cls, image_size=image_size, patch_size=patch, stem=stem).eval()
    which = 1
    a, b = _tokens_after_changing_one_patch(model, image_size, patch, which)
    others = [i for i in range(a.shape[1]) if i != which]
    assert torch.allclose(a[:, others], b[:, others], atol=1e-6, rtol=0)
    assert not torch.allclose(a[:, which], b[:, which], atol=1e-3)  # the changed patch's own token does change


def test_layer_norm_hmlp_keeps_patches_apart_in_training_mode_too():
    model = vit(ViT, stem="hmlp").train()
    a, b = _tokens_after_changing_one_patch(model, 28, 7, 5)
    assert torch.allclose(a[:, [i for i in range(16) if i != 5]], b[:, [i for i in range(16) if i != 5]], atol=1e-6)


@pytest.mark.parametrize(
    "overrides, argument",
    [
        (dict(stem="conv"), "stem='conv'"),
        (dict(stem=None), "stem=None"),
        (dict(stem="hmlp", hmlp_kernels=(4, 2, 1)), "hmlp_kernels"),
        (dict(stem="hmlp", hmlp_kernels=(7, 1)), "hmlp_kernels"),
        (dict(stem="hmlp", hmlp_kernels=(7, 0, 1)), "hmlp_kernels"),
        (dict(stem="hmlp", hmlp_kernels="7"), "hmlp_kernels"),
        (dict(stem="hmlp", hmlp_kernels=(7, True, 1)), "hmlp_kernels"),
        (dict(hmlp_kernels=(7, 1, 1)), "hmlp_kernels"),
    ],
)
def test_bad_stem_choices_raise_naming_the_argument(overrides, argument):
    with pytest.raises(ValueError, match=argument.replace("(", r"\(")):
        vit(**overrides)


def test_explicit_hmlp_kernels_and_json_lists_work():
    model = vit(stem="hmlp", hmlp_kernels=[[7, 7], [1, 1], [1, 1]], image_size=28)
    assert model(torch.rand(2, 1, 28, 28)).shape == (2, 10)
    config = runs.RunConfig(model="ViT", model_kwargs={"depth": 1, "stem": "hmlp"}, epochs=1)
    assert config.model_kwargs["stem"] == "hmlp"


# -- attention-only fine-tuning ----------------------------------------------------------------


def attention_names(depth, branches=1, norm=False):
    names = ["pos_embedding"]
    for layer in range(depth):
        for branch in [""] if branches == 1 else [f"{b}." for b in range(branches)]:
            prefix = f"transformer.layers.{layer}.0.{branch}"
            if norm:
                names += [prefix + "norm.weight", prefix + "norm.bias"]
            names += [prefix + "to_qkv.weight", prefix + "to_out.0.weight", prefix + "to_out.0.bias"]
    return [*names, "mlp_head.weight", "mlp_head.bias"]


@pytest.mark.parametrize("cls", VITS)
def test_attention_only_leaves_exactly_the_attention_head_and_positions_trainable(cls):
    model = vit(cls, depth=2)
    report = finetune.attention_only(model)
    assert sorted(report.names) == sorted(attention_names(2))
    assert report.trainable == sum(p.numel() for n, p in model.named_parameters() if n in report.names)
    assert report.total == count_parameters(model) and 0 < report.trainable < report.total
    assert sorted(finetune.attention_only(model, norm=True).names) == sorted(attention_names(2, norm=True))
    assert "pos_embedding" not in finetune.attention_only(model, pos_embedding=False).names
    full = finetune.full(model)
    assert full.trainable == full.total and len(full.names) == len(list(model.parameters()))


def test_attention_only_on_parallel_blocks_trains_every_branch():
    model = vit(ViTBNFFN, depth=2, branches=2)
    assert sorted(finetune.attention_only(model).names) == sorted(attention_names(2, branches=2))


def test_a_step_of_attention_only_training_changes_nothing_else():
    torch.manual_seed(0)
    model = vit(ViTBNFFN, depth=2)
    finetune.set_trainable(model, "attention")
    trainable = set(finetune.attention_only(model).names)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    F.cross_entropy(model(torch.rand(8, 1, 28, 28)), torch.arange(8)).backward()
    optimizer.step()
    for name, p in model.named_parameters():
        assert torch.equal(p, before[name]) != (name in trainable), name


def test_set_trainable_refuses_bad_choices_and_models():
    with pytest.raises(ValueError, match="trainable='ffn'"):
        finetune.set_trainable(vit(), "ffn")
    with pytest.raises(ValueError, match="attention_only needs a ViT"):
        finetune.attention_only(DNN_d3())


def test_step_memory_accounts_gradients_and_adam_state_of_trainable_weights_only():
    model = vit(ViT, depth=2)
    images, labels = torch.rand(16, 1, 28, 28), torch.randint(0, 10, (16,))
    full = finetune.step_memory(model, images, labels)
    finetune.attention_only(model)
    attention = finetune.step_memory(model, images, labels)
    trainable_mib = finetune.attention_only(model).trainable * 4 / 2**20
    assert attention["gradients"] == pytest.approx(trainable_mib)
    assert attention["adam_state"] == pytest.approx(2 * trainable_mib)
    assert full["gradients"] == pytest.approx(count_parameters(model) * 4 / 2**20)
    assert attention["weights"] == full["weights"]
    assert 0 < attention["activations"] < full["activations"]  # frozen weights need no saved inputs
    assert attention["accounted"] < full["accounted"]


# -- position embeddings on another grid ------------------------------------------------------


def test_interpolation_keeps_the_class_token_and_the_2d_layout():
    h, w, d = 4, 4, 8
    rows = torch.arange(h, dtype=torch.float32).repeat_interleave(w)  # row index of each patch token
    pos = torch.cat([torch.full((1, d), 7.0), rows[:, None].expand(h * w, d)])[None]
    out = finetune.interpolate_pos_embedding(pos, (h, w), (8, 8), mode="bilinear")
    assert out.shape == (1, 1 + 64, d) and torch.equal(out[:, 0], pos[:, 0])
    grid = out[0, 1:, 0].reshape(8, 8)
    assert torch.allclose(grid, grid[:, :1].expand(8, 8))  # constant along each row: rows stayed rows
    assert (grid[1:, 0] >= grid[:-1, 0]).all() and grid[0, 0] == 0 and grid[-1, 0] == 3
    assert torch.equal(finetune.interpolate_pos_embedding(pos, (4, 4), (4, 4)), pos)
    with pytest.raises(ValueError, match="old_grid"):
        finetune.interpolate_pos_embedding(pos, (5, 5), (8, 8))


def test_a_28_pixel_model_loads_into_a_56_pixel_model():
    small, big = vit(ViTBN, depth=1), vit(ViTBN, depth=1, image_size=56)
    finetune.load_resized(big, small.state_dict(), small.grid_size)
    assert big.pos_embedding.shape == (1, 65, 64)
    assert torch.equal(big.transformer.layers[0][0].to_qkv.weight, small.transformer.layers[0][0].to_qkv.weight)
    assert big.eval()(torch.rand(2, 1, 56, 56)).shape == (2, 10)


# -- fine-tuning through the run store -------------------------------------------------------

SOURCE = dict(model="ViTBNFFN", model_kwargs={"depth": 1}, epochs=1, lr=1e-3, train_size=200, test_size=100)


def test_earlier_run_ids_do_not_change():
    config = runs.RunConfig(**SOURCE)
    assert "init_from" not in config.to_dict() and "trainable" not in config.to_dict()


def test_fine_tuning_run_at_56_pixels_trains_only_attention(run_store, mnist_ready):
    source = training.train(runs.RunConfig(**SOURCE), progress=False)
    config = runs.RunConfig(
        **{**SOURCE, "model_kwargs": {"depth": 1, "image_size": 56}},
        dataset="mnist56",
        init_from=source.run_id,
        trainable="attention",
    )
    assert config.to_dict()["init_from"] == source.run_id and "-ftattention-" in config.run_id("cpu")
    tuned = training.train(config, progress=False)
    assert tuned.status == "finished" and tuned.record["parameters"]["trainable"] < tuned.record["parameters"]["total"]
    before, after = source.load_model("cpu").state_dict(), tuned.load_model("cpu").state_dict()
    assert after["pos_embedding"].shape == (1, 65, 64)
    assert torch.equal(after["transformer.layers.0.1.net.0.weight"], before["transformer.layers.0.1.net.0.weight"])
    assert torch.equal(after["to_patch_embedding.2.weight"], before["to_patch_embedding.2.weight"])
    assert not torch.equal(
        after["transformer.layers.0.0.to_qkv.weight"], before["transformer.layers.0.0.to_qkv.weight"]
    )
    # a frozen BatchNorm still follows the new data's statistics (buffers, not weights)
    assert not torch.equal(
        after["transformer.layers.0.1.net.1.running_mean"], before["transformer.layers.0.1.net.1.running_mean"]
    )
    images = data.image_sets("mnist56", 200, 100, "cpu")[0].images
    assert images.shape[-2:] == (56, 56) and images.dtype == torch.uint8


@pytest.mark.parametrize(
    "change, argument",
    [
        (dict(dataset="mnist56"), "image_size"),
        (dict(trainable="ffn"), "trainable"),
        (dict(model="DNN_d3", model_kwargs={}, trainable="attention"), "trainable"),
        (dict(init_from=""), "init_from"),
        (dict(dataset="mnist56", model_kwargs={"depth": 1, "image_size": 56}, pipeline="reference"), "pipeline"),
    ],
)
def test_bad_fine_tuning_configurations_are_refused_by_name(change, argument):
    with pytest.raises(ValueError, match=argument):
        runs.RunConfig(**{**SOURCE, **change})


def test_a_missing_or_mismatched_source_run_is_refused(run_store, mnist_ready):
    with pytest.raises(ValueError, match="init_from='nope'.*no finished run"):
        training.train(runs.RunConfig(**SOURCE, init_from="nope"), progress=False)
    source = training.train(runs.RunConfig(**SOURCE), progress=False)
    with pytest.raises(ValueError, match="is a ViTBNFFN run"):
        training.train(runs.RunConfig(**{**SOURCE, "model": "ViT"}, init_from=source.run_id), progress=False)
    with pytest.raises(ValueError, match="do not fit"):
        training.train(
            runs.RunConfig(**{**SOURCE, "model_kwargs": {"depth": 1, "dim": 32}}, init_from=source.run_id),
            progress=False,
        )


# -- profiles -------------------------------------------------------------------------------


def test_every_profile_builds_its_parallel_models():
    for profile in profiles.PROFILE_NAMES:
        chosen = chapters.settings("07_three_things", profile)
        assert all(depth % chosen.branches == 0 for depth in chosen.depths)
        for model in chosen.models:
            build_model(model, depth=chosen.depths[0] // chosen.branches, branches=chosen.branches)


# -- the chapter's three parts on tiny runs ------------------------------------------------------

TINY = chapters.settings(
    "07_three_things",
    "smoke",
    models=["ViT", "ViTBN"],
    train_size=40,
    test_size=20,
    ft_train_size=40,
    ft_test_size=20,
    latency_batch=4,
    latency_repeats=1,
)


def test_the_chapters_plan_lists_every_run_once():
    planned = three_things.plan(TINY)
    ids = [c.run_id("cpu") for c in planned]
    assert len(ids) == len(set(ids)) == 2 * 2 + 2 * 2 + 2  # (a) both variants; (b) both modes; (c) the hMLP runs
    assert {c.dataset for c in planned} == {"mnist", "mnist56"}


def test_the_three_parts_on_tiny_runs(run_store, figures_store, mnist_ready):
    parallel = parallel_blocks.run(TINY)
    assert set(parallel.per_run["variant"]) == {"sequential", "parallel"} and (parallel.per_run["latency_1"] > 0).all()
    tuned = attention_finetune.run(TINY)
    assert set(tuned.per_run["variant"]) == {"full", "attention only"}
    assert set(tuned.per_run["source"]) <= set(parallel.per_run["run_id"])  # (b) starts from (a)'s runs
    stems = hmlp_stem.run(TINY)
    linear = stems.per_run[stems.per_run["variant"] == "linear"]
    assert set(linear["run_id"]) <= set(parallel.per_run["run_id"])  # (c)'s baselines are (a)'s runs
    for view in (
        parallel_blocks.blocks_figure,
        parallel_blocks.blocks_table,
        attention_finetune.finetune_figure,
        attention_finetune.finetune_table,
        hmlp_stem.stem_figure,
        hmlp_stem.stem_table,
    ):
        view({"blocks": parallel, "finetune": tuned, "stem": stems}[view.__name__.split("_")[0]])
    for said in (
        parallel_blocks.comparison(parallel),
        attention_finetune.comparison(tuned),
        hmlp_stem.comparison(stems),
    ):
        assert "Touvron et al. report" in said.data.columns and said.data["this run"].str.len().gt(0).all()
    outputs = read_manifest()["outputs"]
    assert {e["reproduces"] for e in outputs.values()} == {
        "new/parallel_blocks",
        "new/parallel_blocks_table",
        "new/attention_finetune",
        "new/attention_finetune_table",
        "new/hmlp_stem",
        "new/hmlp_stem_table",
    }


def test_force_retrains_every_time_asked_and_only_the_runs_a_part_owns(run_store, mnist_ready, monkeypatch):
    forced = []
    real_train_all = training.train_all

    def spy(configs, *, force=False, **kwargs):
        configs = list(configs)
        if force:
            forced.extend(config.run_id("cpu") for config in configs)
        return real_train_all(configs, force=force, **kwargs)

    monkeypatch.setattr(training, "train_all", spy)
    settings = chapters.settings("07_three_things", "smoke", models=["ViTBN"], train_size=40, test_size=20)
    own = {c.run_id("cpu") for c in hmlp_stem.plan(settings) if c.model_kwargs.get("stem") == "hmlp"}
    for attempt in (1, 2):
        hmlp_stem.run(settings, force=True)
        assert len(forced) == attempt * len(own)  # retrained again on the second call: no memory of the first
    assert set(forced) == own  # the linear baselines belong to (a): never retrained by (c)


def test_latencies_are_timed_in_shared_rounds_and_judged_round_by_round():
    import pandas as pd

    from vitbn_nb.chapters.three_things import parallel_blocks
    from vitbn_nb.judging import verdicts

    timed = parallel_blocks.latencies_ms(
        {"a": torch.nn.Linear(8, 8), "b": torch.nn.Linear(8, 2)}, torch.rand(4, 8), repeats=3
    )
    assert set(timed) == {"a", "b"} and all(len(v) == 3 and min(v) > 0 for v in timed.values())
    group = pd.DataFrame(
        [
            dict(model="ViT", variant="sequential", seed=0, latency_1_rounds=[2.0, 4.0, 2.2]),
            dict(model="ViT", variant="parallel", seed=0, latency_1_rounds=[1.0, 2.0, 1.1]),
        ]
    )
    text = parallel_blocks.latency_verdict(group, "ViT", "latency_1")
    # a round twice as slow for both (a busy spell) cancels: parallel is 2x faster in every round
    assert text.startswith("a speed-up of 2.00× [") and verdicts.is_rule_text(text)


def test_chapter_07_counts_a_vits_flops_as_chapter_02_does_attention_included():
    from vitbn_nb.chapters.architectures import sizes as model_sizes

    # ViT d6 by hand: per block qkv, q·k and attn·v, output projection, the two FFN Linears; patch embedding and
    # head once (2 FLOPs per multiply-add). Torch's counter alone misses the fused CPU attention kernel.
    tokens, dim, inner, mlp, heads = 17, 64, 512, 128, 8
    block = 2 * (
        tokens * dim * 3 * inner
        + 2 * heads * tokens * tokens * (inner // heads)
        + tokens * inner * dim
        + 2 * tokens * dim * mlp
    )
    model = build_model("ViT", depth=6)
    assert model_sizes.forward_flops(model) == 6 * block + 2 * (16 * 49 * 64 + 64 * 10)
    # the hMLP stem's model is counted by the same counter: only its stem differs from the linear one's count
    stem = build_model("ViT", depth=6, stem="hmlp")
    assert model_sizes.forward_flops(stem) - 6 * block > 0


def test_a_parts_time_per_epoch_is_each_runs_median_of_the_epochs_the_book_may_show():
    import pandas as pd

    from vitbn_nb.chapters.three_things import common

    table = pd.DataFrame(
        {
            "run_id": ["a", "a", "a", "a", "b"],
            "machine": ["CPU: A (2 cores)"] * 4 + ["CPU: B (2 cores)"],
            "train_seconds": [10.0, 12.0, 11.0, 99.0, 30.0],
            "data_seconds": [1.0, 1.0, 1.0, 1.0, 1.0],
            "other_cpu_seconds": [0.0, 0.0, 0.0, 50.0, 0.0],  # a's last epoch timed beside other work
        }
    )
    seconds = common.median_epoch(table)
    assert seconds["a"] == 11.0 and pd.isna(seconds["b"])  # b: timed on another machine than the part's
    assert common.median_epoch(table, lambda e: e["train_seconds"] - e["data_seconds"])["a"] == 10.0
    assert "epochs timed beside other work left out (1/5 epochs)" in common.times_note(table)
