"""Models of the book, and the reference configuration of the reference repository."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

# re-exported: ``X as X`` marks a name the package gives on (PEP 484)
from .cards import CARDS as CARDS
from .cards import DEFAULT_DEPTH as DEFAULT_DEPTH
from .cards import MODELS as MODELS
from .cards import VIT_FAMILY as VIT_FAMILY
from .cards import Card as Card
from .cards import register as register
from .cnn import CNN as CNN
from .dnn import DNN_d3 as DNN_d3
from .dnn import DNNBN_d3 as DNNBN_d3
from .fold import fold_batchnorm as fold_batchnorm
from .norms import NORMS as NORMS
from .norms import BatchNorm as BatchNorm
from .norms import DyT as DyT
from .norms import check_choice
from .vit import ViT as ViT
from .vit import ViTBN as ViTBN
from .vit import ViTBNFFN as ViTBNFFN
from .vit import ViTDyT as ViTDyT

#: Shared by every ViT of the book (article 1, Code Block 5; article 2, "Experiment").
REFERENCE_VIT = dict(image_size=28, patch_size=7, num_classes=10, channels=1, dim=64, heads=8, dim_head=64, mlp_dim=128)
REFERENCE_VIT |= dict(dropout=0.0, emb_dropout=0.0, pool="cls", pos_emb="learn")
#: Article 1 "as run": a depth-6 ViT against BatchNorm models that computed one block (the reference code of that time
#: returned from their encoder after its first block: commits 5c9074d, 5fcc4ac, 99a16b1; fixed for ViTBN in 27ca0f8,
#: for ViTBNFFN in 297070d; its README later says depth = 1, 97d7366). The build_model defaults, so every run id of the
#: book keeps its meaning.
AS_RUN_DEPTH = {"ViT": 6, "ViTBNFFN": 1, "ViTBN": 1}
#: Article 1 "as written": L = 6 for all three models (its text and the README of 2024-08-06, f8eea92).
AS_WRITTEN_DEPTH = {"ViT": 6, "ViTBNFFN": 6, "ViTBN": 6}
CONFIGURATIONS = {"as run": AS_RUN_DEPTH, "as written": AS_WRITTEN_DEPTH}


def model_kwargs(name: str, **overrides: Any) -> dict:
    """The full constructor arguments of ``name``: the reference configuration plus ``overrides``."""
    check_choice("model", name, tuple(MODELS))
    base = dict(REFERENCE_VIT, depth=DEFAULT_DEPTH[name]) if name in VIT_FAMILY else {}
    return {**base, **overrides}


def build_model(name: str, **overrides: Any) -> nn.Module:
    """``build_model("ViTBN", depth=6)``: the named model in its reference configuration, with overrides."""
    kwargs = model_kwargs(name, **overrides)
    return MODELS[name](**kwargs)


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def forward_flops(model: nn.Module, image_size: int = 28, channels: int = 1) -> int:
    """Forward FLOPs for one image (eval mode): matmuls, attention products and convolutions, 2 per multiply-add;
    norms (LayerNorm, BatchNorm and DyT alike), softmax, activations and additions are not counted. Attention runs on
    its math backend: ``FlopCounterMode`` does not count the fused CPU kernel."""
    model = model.eval()
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter, torch.no_grad():
        model(torch.zeros(1, channels, image_size, image_size))
    return counter.get_total_flops()
