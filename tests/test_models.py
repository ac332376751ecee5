import pytest
import torch
from einops import rearrange
from torch import nn

from vitbn_nb.models import (
    CNN,
    REFERENCE_VIT,
    BatchNorm,
    DNN_d3,
    DNNBN_d3,
    ViT,
    ViTBN,
    ViTBNFFN,
    build_model,
    count_parameters,
)

VITS = [ViT, ViTBNFFN, ViTBN]


def vit(cls=ViT, **overrides):
    return cls(**{**REFERENCE_VIT, "depth": 2, **overrides})


@pytest.mark.parametrize("cls", VITS)
@pytest.mark.parametrize("pool", ["cls", "mean"])
@pytest.mark.parametrize("pos_emb", ["learn", "pe1d"])
def test_vit_shapes_for_every_option(cls, pool, pos_emb):
    model = vit(cls, pool=pool, pos_emb=pos_emb)
    x = torch.rand(3, 1, 28, 28)
    assert model(x).shape == (3, 10)
    tokens = model.to_patch_embedding(x)
    assert tokens.shape == (3, 16, 64)  # 4 x 4 patches of 7 x 7 pixels, embedded in 64 dimensions
    model.eval()
    assert model(x[:1]).shape == (1, 10)


def test_rectangular_images_and_colour_channels():
    model = ViT(
        image_size=(32, 48), patch_size=(8, 16), num_classes=5, channels=3, dim=32, depth=1, heads=2, mlp_dim=64
    )
    assert model(torch.rand(2, 3, 32, 48)).shape == (2, 5)
    assert model.pos_embedding.shape == (1, 4 * 3 + 1, 32)


@pytest.mark.parametrize("cls", [DNN_d3, DNNBN_d3, CNN])
def test_other_models_shapes(cls):
    assert cls()(torch.rand(4, 1, 28, 28)).shape == (4, 10)


def test_pe1d_is_a_fixed_buffer_that_moves_with_the_model():
    model = vit(pos_emb="pe1d")
    assert "pos_embedding" not in dict(model.named_parameters())
    assert "pos_embedding" in dict(model.named_buffers())
    pe = model.pos_embedding[0]
    assert torch.allclose(pe[:, :32].pow(2) + pe[:, 32:].pow(2), torch.ones(17, 32))  # sin^2 + cos^2
    assert model.to(torch.float64).pos_embedding.dtype == torch.float64


def hand_batchnorm(x, bn, training):
    """(b, n, d): each feature normalised over batch and tokens, then scaled and shifted."""
    if training:
        mean = x.mean(dim=(0, 1))
        var = x.var(dim=(0, 1), unbiased=False)
    else:
        mean, var = bn.running_mean, bn.running_var
    return (x - mean) / torch.sqrt(var + bn.eps) * bn.weight + bn.bias


def test_token_batchnorm_equals_the_formula_in_train_and_eval_mode():
    torch.manual_seed(0)
    bn = BatchNorm(8)
    nn.init.normal_(bn.weight)
    nn.init.normal_(bn.bias)
    x = torch.randn(5, 17, 8) * 3 + 1
    out = bn.train()(x)
    assert torch.allclose(out, hand_batchnorm(x, bn, training=True), atol=1e-5)
    # running statistics move towards the batch statistics (unbiased variance, momentum 0.1)
    assert torch.allclose(bn.running_mean, 0.1 * x.mean(dim=(0, 1)), atol=1e-6)
    assert torch.allclose(bn.running_var, 0.9 + 0.1 * x.var(dim=(0, 1), unbiased=True), atol=1e-5)
    y = torch.randn(2, 17, 8)
    assert torch.allclose(bn.eval()(y), hand_batchnorm(y, bn, training=False), atol=1e-5)
    assert not torch.allclose(bn.eval()(y), hand_batchnorm(y, bn, training=True), atol=1e-3)


def test_token_batchnorm_equals_the_articles_transposed_forms():
    torch.manual_seed(1)
    x = torch.randn(4, 17, 8)
    ours, one_d, two_d = BatchNorm(8), nn.BatchNorm1d(8), nn.BatchNorm2d(8)
    expected_1d = rearrange(one_d(rearrange(x, "b n d -> b d n")), "b d n -> b n d")  # article 1
    expected_2d = rearrange(two_d(rearrange(x, "b n d -> b d n 1")), "b d n 1 -> b n d")  # article 2
    got = ours(x)
    assert torch.allclose(got, expected_1d, atol=1e-5) and torch.allclose(got, expected_2d, atol=1e-5)
    assert torch.allclose(ours.running_var, one_d.running_var) and torch.allclose(ours.running_var, two_d.running_var)


def norms_in(module):
    return [type(m) for m in module.modules() if isinstance(m, (nn.LayerNorm, nn.BatchNorm1d, nn.BatchNorm2d))]


def test_vitbnffn_has_batchnorm_in_the_ffn_and_layernorm_in_attention():
    model = vit(ViTBNFFN)
    for attn, ff in model.transformer.layers:
        assert norms_in(attn) == [nn.LayerNorm]
        assert norms_in(ff) == [BatchNorm]
        kinds = [type(m) for m in ff.net]
        assert kinds[:3] == [nn.Linear, BatchNorm, nn.GELU]  # Linear -> BatchNorm -> GELU, no norm before
    assert norms_in(model.to_patch_embedding) == [nn.LayerNorm, nn.LayerNorm]
    assert isinstance(model.transformer.norm, nn.LayerNorm)


def test_vitbn_has_no_layernorm_anywhere():
    model = vit(ViTBN)
    assert not any(isinstance(m, nn.LayerNorm) for m in model.modules())
    assert norms_in(model.to_patch_embedding) == [BatchNorm, BatchNorm]
    assert isinstance(model.transformer.norm, BatchNorm)


def test_vit_has_only_layernorm_and_the_einops_vit_state_dict_layout():
    model = vit(ViT)
    assert not any(isinstance(m, nn.BatchNorm1d) for m in model.modules())
    keys = set(model.state_dict())
    for key in [
        "to_patch_embedding.1.weight",
        "to_patch_embedding.2.weight",
        "to_patch_embedding.3.weight",
        "pos_embedding",
        "cls_token",
        "transformer.layers.0.0.norm.weight",
        "transformer.layers.0.0.to_qkv.weight",
        "transformer.layers.0.0.to_out.0.weight",
        "transformer.layers.1.1.net.0.weight",
        "transformer.layers.1.1.net.1.weight",
        "transformer.layers.1.1.net.4.weight",
        "transformer.norm.weight",
        "mlp_head.weight",
    ]:
        assert key in keys, key


def reference_parameter_count(depth, ffn_batchnorm, dim=64, patch_dim=49, tokens=17, inner=512, mlp=128, classes=10):
    """Counted by hand from the architecture (norms have 2 x width parameters)."""
    embedding = 2 * patch_dim + (patch_dim * dim + dim) + 2 * dim + tokens * dim + dim
    attention = 2 * dim + dim * 3 * inner + (inner * dim + dim)
    ffn = (dim * mlp + mlp) + (mlp * dim + dim) + (2 * mlp if ffn_batchnorm else 2 * dim)
    return embedding + depth * (attention + ffn) + 2 * dim + (dim * classes + classes)


def test_parameter_counts_of_the_reference_configurations():
    assert count_parameters(build_model("ViT")) == reference_parameter_count(6, ffn_batchnorm=False) == 893_164
    assert count_parameters(build_model("ViTBNFFN")) == reference_parameter_count(1, ffn_batchnorm=True)
    assert count_parameters(build_model("ViTBN")) == reference_parameter_count(1, ffn_batchnorm=True)
    assert count_parameters(build_model("ViTBNFFN", depth=6)) == reference_parameter_count(6, ffn_batchnorm=True)
    assert count_parameters(DNN_d3()) == 784 * 100 + 100 + 2 * (100 * 100 + 100) + 100 * 10 + 10
    assert count_parameters(DNNBN_d3()) == count_parameters(DNN_d3()) + 3 * 2 * 100


def test_parallel_blocks_keep_the_parameter_count():
    assert count_parameters(vit(depth=3, branches=2)) == count_parameters(vit(depth=6))
    assert count_parameters(vit(ViTBN, depth=2, branches=3)) == count_parameters(vit(ViTBN, depth=6))


@pytest.mark.parametrize("cls", VITS)
@pytest.mark.parametrize(
    "overrides, argument",
    [
        (dict(image_size=30), "image_size"),
        (dict(patch_size=5), "image_size"),
        (dict(pool="max"), "pool"),
        (dict(pos_emb="rope"), "pos_emb"),
        (dict(pos_emb="pe1d", dim=63), "dim"),
        (dict(depth=0), "depth"),
        (dict(heads=0), "heads"),
        (dict(dim_head=0), "dim_head"),
        (dict(mlp_dim=-1), "mlp_dim"),
        (dict(dim=2.5), "dim"),
        (dict(num_classes=0), "num_classes"),
        (dict(channels=0), "channels"),
        (dict(dropout=1.5), "dropout"),
        (dict(emb_dropout=-0.1), "emb_dropout"),
        (dict(branches=0), "branches"),
    ],
)
def test_bad_configurations_raise_a_value_error_naming_the_argument(cls, overrides, argument):
    with pytest.raises(ValueError, match=argument) as error:
        vit(cls, **overrides)
    assert repr(overrides[next(iter(overrides))]) in str(error.value) or argument == "image_size"


def test_bad_norm_choices_and_model_names():
    with pytest.raises(ValueError, match="norm='group'.*'layer', 'batch'"):
        vit(norm="group")
    with pytest.raises(ValueError, match="ffn_norm"):
        vit(ffn_norm="none")
    with pytest.raises(ValueError, match="model='ResNet'"):
        build_model("ResNet")
    with pytest.raises(ValueError, match="hidden=0"):
        DNN_d3(hidden=0)
    with pytest.raises(ValueError, match="image_size"):
        CNN(image_size=30)


@pytest.mark.parametrize("model", [vit(ViTBN), vit(ViTBNFFN), DNNBN_d3(), CNN()], ids=lambda m: type(m).__name__)
def test_training_a_batchnorm_model_on_one_image_raises_a_clear_error(model):
    x = torch.rand(1, 1, 28, 28)
    if isinstance(model, CNN):  # nn.BatchNorm2d has 28 x 28 values per channel: PyTorch allows it
        model(x)
        return
    with pytest.raises(ValueError, match="at least 2 images per batch, got a batch of 1"):
        model.train()(x)
    assert model.eval()(x).shape == (1, 10)


def test_a_new_model_is_one_class_and_one_card_and_chapter_2_tables_it():
    from vitbn_nb.chapters.architectures import study
    from vitbn_nb.models import cards
    from vitbn_nb.publishing import figures
    from vitbn_nb.store.run_config import RunConfig

    class ViTRMS(ViT):
        """ViT with every LayerNorm replaced by RMSNorm."""

        def __init__(self, **kwargs):
            super().__init__(norm=nn.RMSNorm, ffn_norm=nn.RMSNorm, **kwargs)

    cards.register(cards.Card(ViTRMS, "vit", "RMSNorm in place of every LayerNorm", "#222222", 6))
    try:
        model = build_model("ViTRMS", depth=2)
        assert any(isinstance(m, nn.RMSNorm) for m in model.modules()) and model(torch.rand(2, 1, 28, 28)).shape == (
            2,
            10,
        )
        table = study.norm_sites()
        assert "RMSNorm" in " ".join(table["ViTRMS"]) and {"ViT", "ViTBN"} <= set(table.columns)
        assert figures.color("ViTRMS") == "#222222" and "ViTRMS" in study.batch_dependence()["model"].tolist()
        assert RunConfig(model="ViTRMS", epochs=1).model_kwargs["depth"] == 6  # trains like any other
        with pytest.raises(ValueError, match="has a card already"):
            cards.register(cards.Card(ViTRMS, "vit", "again", "#000000", 6))
    finally:
        cards.unregister("ViTRMS")
    assert "ViTRMS" not in cards.MODELS and "ViTRMS" not in cards.VIT_FAMILY


def test_the_cards_keep_article_1s_as_run_depths_as_the_build_defaults():
    from vitbn_nb.models import AS_RUN_DEPTH, DEFAULT_DEPTH

    assert {m: DEFAULT_DEPTH[m] for m in AS_RUN_DEPTH} == AS_RUN_DEPTH  # every run id keeps its meaning
