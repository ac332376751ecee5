"""Norms as layer factories: the registry, a new norm in one class and one entry, and DyT."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from vitbn_nb.chapters.architectures.sizes import forward_flops
from vitbn_nb.models import NORMS, REFERENCE_VIT, VIT_FAMILY, DyT, ViT, ViTDyT, build_model, count_parameters
from vitbn_nb.models.norms import BatchNorm, ChannelsLast, LayerNorm2d, map_norm
from vitbn_nb.store.run_config import RunConfig


def vit(cls=ViT, **overrides):
    return cls(**{**REFERENCE_VIT, "depth": 2, **overrides})


class Scale(nn.Module):
    """A made-up norm for the test: one learnable scale per feature, nothing else."""

    def __init__(self, dim: int):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return self.scale * x


def norm_sites(model: ViT) -> list[nn.Module]:
    """Every place a ViT-family model normalises: embedding (2), each block's attention and FFN, the end."""
    sites = [model.to_patch_embedding[1], model.to_patch_embedding[3], model.transformer.norm]
    for attn, ff in model.transformer.layers:
        sites += [attn.norm, ff.net[0]]
    return sites


def test_a_new_norm_is_one_class_and_one_registry_entry(monkeypatch):
    monkeypatch.setitem(NORMS, "scale", Scale)
    model = vit(norm="scale", ffn_norm="scale")
    assert all(isinstance(site, Scale) for site in norm_sites(model))
    assert not any(isinstance(m, (nn.LayerNorm, nn.modules.batchnorm._BatchNorm)) for m in model.modules())
    assert model(torch.rand(3, 1, 28, 28)).shape == (3, 10)
    # ... with every option of the family: the hMLP stem applies it over channels, parallel blocks in each branch.
    stem = vit(norm="scale", ffn_norm="scale", stem="hmlp", branches=2)
    assert sum(isinstance(m, ChannelsLast) and isinstance(m.norm, Scale) for m in stem.to_patch_embedding) == 3
    assert stem(torch.rand(2, 1, 28, 28)).shape == (2, 10)


def test_a_factory_works_without_a_registry_entry():
    model = vit(norm=Scale, ffn_norm=None, ffn_hidden_norm=Scale)
    assert isinstance(model.transformer.layers[0][1].net[1], Scale)  # after the FFN's first Linear
    assert isinstance(model.transformer.layers[0][1].net[0], nn.Linear)
    assert model(torch.rand(2, 1, 28, 28)).shape == (2, 10)


@pytest.mark.parametrize("name", list(NORMS))
def test_every_registered_norm_builds_a_vit(name):
    model = vit(norm=name, ffn_norm=name)
    assert all(isinstance(site, NORMS[name]) for site in norm_sites(model))
    assert model(torch.rand(2, 1, 28, 28)).shape == (2, 10)


def test_bad_norms_are_refused_by_name():
    with pytest.raises(ValueError, match="norm='group'.*'layer', 'batch', 'dyt'"):
        vit(norm="group")
    with pytest.raises(ValueError, match="ffn_hidden_norm='x'"):
        vit(ffn_hidden_norm="x")
    with pytest.raises(ValueError, match="norm=5"):
        vit(norm=5)
    with pytest.raises(ValueError, match="norm=None"):
        vit(norm=None)  # the attention and the end always have a norm; the FFN's may be None


def test_map_forms_of_the_norms():
    assert map_norm(nn.LayerNorm) is LayerNorm2d and map_norm(BatchNorm) is nn.BatchNorm2d
    x = torch.randn(2, 8, 3, 3)
    dyt = map_norm(DyT)(8)
    assert isinstance(dyt, ChannelsLast)
    with torch.no_grad():
        dyt.norm.weight.copy_(torch.arange(8.0))
    expected = torch.arange(8.0)[None, :, None, None] * torch.tanh(0.5 * x)
    assert torch.allclose(dyt(x), expected)


def test_dyt_is_weight_times_tanh_of_alpha_x_plus_bias():
    dyt = DyT(6)
    assert dyt.alpha.shape == (1,) and dyt.alpha.item() == 0.5  # one scalar, the paper's init
    assert torch.equal(dyt.weight, torch.ones(6)) and torch.equal(dyt.bias, torch.zeros(6))
    assert [name for name, _ in dyt.named_parameters()] == ["alpha", "weight", "bias"]
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        dyt.alpha.fill_(1.7)
        dyt.weight.copy_(torch.randn(6, generator=generator))
        dyt.bias.copy_(torch.randn(6, generator=generator))
    x = 3 * torch.randn(4, 5, 6, generator=generator)
    expected = dyt.weight * torch.tanh(1.7 * x) + dyt.bias
    assert torch.allclose(dyt(x), expected)
    # No statistic: each value on its own, whatever the rest of the batch.
    assert torch.allclose(dyt(x[:1]), expected[:1])
    assert DyT(3, alpha_init=2.0).alpha.item() == 2.0
    (dyt(x).sum()).backward()
    assert dyt.alpha.grad is not None and dyt.alpha.grad.shape == (1,)


def test_vitdyt_replaces_every_layernorm_and_adds_one_alpha_per_norm():
    assert "ViTDyT" in VIT_FAMILY
    for depth in (1, 6):
        dyt, ln = build_model("ViTDyT", depth=depth), build_model("ViT", depth=depth)
        assert not any(isinstance(m, (nn.LayerNorm, nn.modules.batchnorm._BatchNorm)) for m in dyt.modules())
        norms = [m for m in dyt.modules() if isinstance(m, DyT)]
        assert len(norms) == 2 + 2 * depth + 1 == sum(isinstance(m, nn.LayerNorm) for m in ln.modules())
        assert all(isinstance(site, DyT) for site in norm_sites(dyt))
        assert count_parameters(dyt) == count_parameters(ln) + len(norms)  # weight and bias as LayerNorm's, + alpha
        # The one FLOP counter counts no norm: DyT's elementwise ops are left out as LayerNorm's are.
        assert forward_flops(dyt) == forward_flops(ln)
    assert build_model("ViTDyT").transformer.layers.__len__() == 6
    model = vit(ViTDyT)
    model.train()(torch.rand(1, 1, 28, 28))  # no batch statistic: a batch of one trains


def test_vitdyt_is_a_run_like_any_other():
    config = RunConfig(model="ViTDyT", model_kwargs={"depth": 6}, lr=0.003, seed=0)
    assert config.run_id("cpu").startswith("ViTDyT-d6-lr0.003-bs100-s0-")
    assert config.model_kwargs == {**REFERENCE_VIT, "depth": 6}
