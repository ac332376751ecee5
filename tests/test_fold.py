"""BatchNorm folding: the folded copy computes what the eval-mode model computes, with no BatchNorm left."""

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from vitbn_nb.models import build_model, fold_batchnorm
from vitbn_nb.models.fold import batchnorm_affine, count_batchnorms


def trained(name, steps=6, seed=0, **overrides):
    """A model after a few Adam steps at a high rate on skewed inputs, so running statistics and
    affine parameters are far from their initial 0/1 (a fold that ignores them would pass otherwise).

    Returned in float64: these statistics make the fold ill-conditioned in float32, where its rounding
    depends on the CPU and its thread count (5e-4 relative on logits seen with one thread)."""
    torch.manual_seed(seed)
    model = build_model(name, **overrides)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.05)
    model.train()
    for _ in range(steps):
        x = torch.rand(16, 1, 28, 28) * 3 + 0.5
        y = torch.randint(0, 10, (16,))
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()
    return model.double()


def assert_same_outputs(model, folded, x, tolerance=None):
    dtype = next(model.parameters()).dtype
    tolerance = tolerance or (1e-9 if dtype == torch.float64 else 1e-4)
    model.eval()
    with torch.no_grad():
        expected, got = model(x.to(dtype)), folded(x.to(dtype))
    torch.testing.assert_close(got, expected, rtol=tolerance, atol=tolerance)


@pytest.mark.parametrize("name", ["ViTBNFFN", "ViTBN"])
@pytest.mark.parametrize("pool", ["cls", "mean"])
@pytest.mark.parametrize("depth", [1, 2])
def test_folded_vit_equals_the_eval_mode_model(name, pool, depth):
    model = trained(name, pool=pool, depth=depth)
    bns = [m for m in model.modules() if isinstance(m, nn.BatchNorm1d)]
    assert all(m.running_mean.abs().max() > 1e-2 for m in bns)  # the statistics are not trivial
    before = {k: v.clone() for k, v in model.state_dict().items()}
    folded = fold_batchnorm(model)
    assert count_batchnorms(folded) == 0
    assert_same_outputs(model, folded, torch.rand(32, 1, 28, 28) * 3 + 0.5)
    after = model.state_dict()
    assert before.keys() == after.keys() and all(torch.equal(before[k], after[k]) for k in before)
    assert count_batchnorms(model) == len(bns)


def test_a_float32_model_folds_to_float32_within_its_rounding():
    # the book folds float32 models; these skewed statistics leave it only float32's ill-conditioned rounding
    model = trained("ViTBN", depth=2).float()
    folded = fold_batchnorm(model)
    assert {p.dtype for p in folded.parameters()} == {torch.float32}
    assert_same_outputs(model, folded, torch.rand(32, 1, 28, 28) * 3 + 0.5, tolerance=1e-2)


def test_vitbn_folds_every_norm_and_the_qkv_projection_gains_a_bias():
    model = trained("ViTBN", depth=1)
    assert model.transformer.layers[0][0].to_qkv.bias is None
    folded = fold_batchnorm(model)
    assert folded.transformer.layers[0][0].to_qkv.bias is not None
    assert not any(isinstance(m, (nn.BatchNorm1d, nn.LayerNorm)) for m in folded.modules())


def test_layernorm_stays_and_vitbnffn_keeps_its_attention_layernorm():
    vit = trained("ViT", depth=2)
    folded = fold_batchnorm(vit)
    layernorms = sum(isinstance(m, nn.LayerNorm) for m in vit.modules())
    assert layernorms == sum(isinstance(m, nn.LayerNorm) for m in folded.modules()) > 0
    assert_same_outputs(vit, folded, torch.rand(8, 1, 28, 28))

    hybrid = fold_batchnorm(trained("ViTBNFFN", depth=2))
    assert count_batchnorms(hybrid) == 0
    assert all(isinstance(block[0].norm, nn.LayerNorm) for block in hybrid.transformer.layers)


def test_a_model_in_training_mode_folds_its_eval_behaviour_and_keeps_its_mode():
    model = trained("ViTBN", depth=1)
    assert model.training
    folded = fold_batchnorm(model)
    assert model.training and not folded.training
    assert not any(m.training for m in folded.modules())
    x = torch.rand(8, 1, 28, 28, dtype=torch.float64) * 3 + 0.5
    with torch.no_grad():
        got = folded(x)
        evaluated = copy.deepcopy(model).eval()(x)
        train_mode = model(x)  # batch statistics: not what a fold can reproduce
    torch.testing.assert_close(got, evaluated, rtol=1e-4, atol=1e-4)
    assert not torch.allclose(got, train_mode, atol=1e-3)


def test_dnnbn_folds_and_parallel_blocks_fold():
    dnn = trained("DNNBN_d3")
    folded = fold_batchnorm(dnn)
    assert count_batchnorms(folded) == 0
    assert_same_outputs(dnn, folded, torch.rand(16, 1, 28, 28))

    parallel = trained("ViTBN", depth=1, branches=2)
    folded = fold_batchnorm(parallel)
    assert count_batchnorms(folded) == 0
    assert_same_outputs(parallel, folded, torch.rand(16, 1, 28, 28) * 3)


def test_batchnorm_with_no_linear_neighbour_stays_unless_strict():
    model = nn.Sequential(nn.Linear(4, 5), nn.ReLU(), nn.BatchNorm1d(5), nn.ReLU(), nn.Linear(5, 2))
    model[2].running_mean.fill_(0.3)
    model[2].running_var.fill_(2.0)
    folded = fold_batchnorm(model)
    assert count_batchnorms(folded) == 1
    assert_same_outputs(model, folded, torch.randn(6, 4))
    with pytest.raises(ValueError, match="2"):
        fold_batchnorm(model, strict=True)
    # Between two Linears it folds into the one before it.
    sandwich = nn.Sequential(nn.Linear(4, 5), nn.BatchNorm1d(5), nn.Linear(5, 2))
    sandwich[1].running_mean.fill_(-0.7)
    sandwich[1].running_var.fill_(0.25)
    sandwich[1].weight.data.uniform_(0.5, 2)
    folded = fold_batchnorm(sandwich, strict=True)
    assert isinstance(folded[1], nn.Identity)
    assert_same_outputs(sandwich, folded, torch.randn(6, 4))


def test_batchnorm_without_running_statistics_is_refused_by_name():
    bn = nn.BatchNorm1d(3, track_running_stats=False)
    with pytest.raises(ValueError, match="track_running_stats"):
        batchnorm_affine(bn)
    model = nn.Sequential(nn.Linear(3, 3), bn)
    assert count_batchnorms(fold_batchnorm(model)) == 1  # left alone: eval mode still uses batch statistics
    with pytest.raises(TypeError, match="nn.Module"):
        fold_batchnorm("ViTBN")


def test_the_hmlp_stem_folds_its_convolution_batchnorms():
    model = trained("ViTBN", depth=1, stem="hmlp")
    assert any(isinstance(m, nn.BatchNorm2d) for m in model.modules())
    folded = fold_batchnorm(model, strict=True)
    assert count_batchnorms(folded) == 0
    assert_same_outputs(model, folded, torch.rand(16, 1, 28, 28) * 3)
