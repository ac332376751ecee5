"""One Vision Transformer family whose normalisation is a constructor choice.

``ViT`` is the standard pre-norm encoder of the einops-style vit-pytorch (its state-dict names, so checkpoints of that
layout load). ``ViTBNFFN``, ``ViTBN`` and ``ViTDyT`` are the same class with other norms, each a layer factory of
:mod:`vitbn_nb.models.norms` (or its name in ``NORMS``):

=========  ==================  ======================  ===============  ==========
model      patch embedding     attention               feed-forward     final norm
=========  ==================  ======================  ===============  ==========
ViT        LayerNorm           LayerNorm -> MHSA       LN -> Lin-GELU   LayerNorm
ViTBNFFN   LayerNorm           LayerNorm -> MHSA       Lin -> BN-GELU   LayerNorm
ViTBN      BatchNorm           BatchNorm -> MHSA       Lin -> BN-GELU   BatchNorm
ViTDyT     DyT                 DyT -> MHSA             DyT -> Lin-GELU  DyT
=========  ==================  ======================  ===============  ==========

``norm`` is the norm of the patch embedding, the attention and the end; ``ffn_norm`` the feed-forward network's before
its first Linear, ``ffn_hidden_norm`` after it (either may be ``None``). ``branches`` and ``stem='hmlp'`` are from
Touvron et al.'s "Three things" (2022), with every norm.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from einops import rearrange, repeat
from einops.layers.torch import Rearrange
from torch import Tensor, nn

from .norms import NormLayer, check_choice, check_positive, check_probability, map_norm, norm_layer


def pair(t: int | tuple[int, int]) -> tuple[int, int]:
    return t if isinstance(t, tuple) else (t, t)


def posemb_sincos_1d(n: int, dim: int) -> Tensor:
    """Fixed 1-D sinusoidal embedding, ``(1, n, dim)``: sines in the first half, cosines in the second."""
    position = torch.arange(n, dtype=torch.float32)[:, None]
    omega = 1.0 / 10000.0 ** (torch.arange(dim // 2, dtype=torch.float32) / max(dim // 2 - 1, 1))
    angles = position * omega[None, :]
    return torch.cat((angles.sin(), angles.cos()), dim=1)[None]


class FeedForward(nn.Module):
    """Linear -> GELU -> Linear, with ``norm`` before it and ``hidden_norm`` after its first Linear (either None)."""

    def __init__(
        self,
        dim: int,
        hidden_dim: int,
        dropout: float = 0.0,
        norm: NormLayer | None = nn.LayerNorm,
        hidden_norm: NormLayer | None = None,
    ):
        super().__init__()
        layers = [] if norm is None else [norm(dim)]
        layers.append(nn.Linear(dim, hidden_dim))
        if hidden_norm is not None:
            layers.append(hidden_norm(hidden_dim))
        layers.append(nn.GELU())
        self.net = nn.Sequential(*layers, nn.Dropout(dropout), nn.Linear(hidden_dim, dim), nn.Dropout(dropout))

    def forward(self, x: Tensor) -> Tensor:
        return self.net(x)


class Attention(nn.Module):
    """Multi-head self-attention with its own pre-norm."""

    def __init__(
        self,
        dim: int,
        heads: int = 8,
        dim_head: int = 64,
        dropout: float = 0.0,
        norm: NormLayer = nn.LayerNorm,
        qkv_bias: bool = False,
    ):
        super().__init__()
        inner_dim = dim_head * heads
        self.heads = heads
        self.dropout = dropout
        self.norm = norm(dim)
        self.to_qkv = nn.Linear(dim, inner_dim * 3, bias=qkv_bias)
        project_out = not (heads == 1 and dim_head == dim)
        self.to_out = nn.Sequential(nn.Linear(inner_dim, dim), nn.Dropout(dropout)) if project_out else nn.Identity()

    def forward(self, x: Tensor) -> Tensor:
        x = self.norm(x)
        q, k, v = (rearrange(t, "b n (h d) -> b h n d", h=self.heads) for t in self.to_qkv(x).chunk(3, dim=-1))
        # Same maths as softmax(q k^T / sqrt(d)) v, in PyTorch's fused kernel.
        out = F.scaled_dot_product_attention(q, k, v, dropout_p=self.dropout if self.training else 0.0)
        return self.to_out(rearrange(out, "b h n d -> b n (h d)"))


def hmlp_kernels(patch_size: int) -> tuple[int, int, int]:
    """Kernel sizes of the three hMLP stages for one patch side, their product ``patch_size``: the smallest prime
    factors move to the later stages (16 -> (4, 2, 2), 14 -> (7, 2, 1), the book's 7 -> (7, 1, 1))."""
    check_positive("patch_size", patch_size)
    kernels = [patch_size, 1, 1]
    for stage in (1, 2):
        q = next(d for d in range(2, kernels[0] + 1) if kernels[0] % d == 0) if kernels[0] > 1 else 1
        if q == 1 or kernels[0] // q < q:
            break
        kernels[0] //= q
        kernels[stage] = q
    return (kernels[0], *sorted(kernels[1:], reverse=True))


def _kernel_pairs(kernels) -> list[tuple[int, int]] | None:
    """Three kernel sizes as (h, w) pairs (lists too, as they come back from JSON), or None if malformed."""
    is_size = lambda k: isinstance(k, int) and not isinstance(k, bool) and k >= 1
    is_pair = lambda k: isinstance(k, (tuple, list)) and len(k) == 2 and all(map(is_size, k))
    valid = isinstance(kernels, (tuple, list)) and len(kernels) == 3 and all(is_size(k) or is_pair(k) for k in kernels)
    return [(k, k) if is_size(k) else tuple(k) for k in kernels] if valid else None


class HMLPStem(nn.Sequential):
    """Touvron et al.'s hierarchical MLP stem: three convolutions whose kernel equals their stride, of widths dim/4,
    dim/4, dim, each followed by ``norm`` over the channels (:func:`.norms.map_norm`)."""

    def __init__(
        self,
        *,
        patch_size: int | tuple[int, int],
        channels: int,
        dim: int,
        norm: NormLayer = nn.LayerNorm,
        kernels: list[int] | tuple[int, ...] | None = None,
    ):
        patch_height, patch_width = pair(patch_size)
        pairs = _kernel_pairs(
            list(zip(hmlp_kernels(patch_height), hmlp_kernels(patch_width))) if kernels is None else kernels
        )
        if pairs is None or tuple(map(math.prod, zip(*pairs))) != (patch_height, patch_width):
            raise ValueError(
                f"hmlp_kernels={kernels!r} is not allowed with patch_size={patch_size!r}: give three "
                "positive kernel sizes (ints or (h, w) pairs) whose product is the patch size"
            )
        channel_norm = map_norm(norm)
        hidden = max(dim // 4, 1)
        widths = [channels, hidden, hidden, dim]
        layers = []
        for stage, kernel in enumerate(pairs):
            conv = nn.Conv2d(widths[stage], widths[stage + 1], kernel_size=kernel, stride=kernel)
            layers += [conv, channel_norm(widths[stage + 1]), *([nn.GELU()] if stage < 2 else [])]
        super().__init__(*layers, Rearrange("b d h w -> b (h w) d"))
        self.kernels = tuple(pairs)


class Parallel(nn.ModuleList):
    """Branches applied to the same input and summed (Touvron et al.'s parallel blocks)."""

    def forward(self, x: Tensor) -> Tensor:
        return sum(branch(x) for branch in self)


class Transformer(nn.Module):
    def __init__(
        self,
        dim: int,
        depth: int,
        heads: int,
        dim_head: int,
        mlp_dim: int,
        dropout: float = 0.0,
        norm: NormLayer = nn.LayerNorm,
        ffn_norm: NormLayer | None = nn.LayerNorm,
        ffn_hidden_norm: NormLayer | None = None,
        branches: int = 1,
        qkv_bias: bool = False,
    ):
        super().__init__()
        attention = lambda: Attention(
            dim, heads=heads, dim_head=dim_head, dropout=dropout, norm=norm, qkv_bias=qkv_bias
        )
        ffn = lambda: FeedForward(dim, mlp_dim, dropout=dropout, norm=ffn_norm, hidden_norm=ffn_hidden_norm)
        branch = lambda make: make() if branches == 1 else Parallel(make() for _ in range(branches))
        self.layers = nn.ModuleList(nn.ModuleList([branch(attention), branch(ffn)]) for _ in range(depth))
        self.norm = norm(dim)

    def forward(self, x: Tensor) -> Tensor:
        for attn, ff in self.layers:
            x = attn(x) + x
            x = ff(x) + x
        return self.norm(x)


class ViT(nn.Module):
    """Vision Transformer with the keyword signature of the einops-based vit-pytorch (norms: the module docstring).
    ``branches > 1``: parallel MHSA and FFN branches per block; ``stem='hmlp'``: :class:`HMLPStem`; ``qkv_bias`` (as
    timm's) matches the reference BatchNorm checkpoints."""

    def __init__(
        self,
        *,
        image_size: int | tuple[int, int],
        patch_size: int | tuple[int, int],
        num_classes: int,
        dim: int,
        depth: int,
        heads: int,
        mlp_dim: int,
        pool: str = "cls",
        channels: int = 3,
        dim_head: int = 64,
        dropout: float = 0.0,
        emb_dropout: float = 0.0,
        pos_emb: str = "learn",
        norm: str | NormLayer = "layer",
        ffn_norm: str | NormLayer | None = "layer",
        ffn_hidden_norm: str | NormLayer | None = None,
        branches: int = 1,
        stem: str = "linear",
        hmlp_kernels: list[int] | tuple[int, ...] | None = None,
        qkv_bias: bool = False,
    ):
        super().__init__()
        image_height, image_width = pair(image_size)
        patch_height, patch_width = pair(patch_size)
        sizes = [("image_size", image_height), ("image_size", image_width), ("patch_size", patch_height)]
        sizes += [("patch_size", patch_width), ("num_classes", num_classes), ("channels", channels), ("dim", dim)]
        sizes += [("depth", depth), ("heads", heads), ("dim_head", dim_head), ("mlp_dim", mlp_dim)]
        sizes += [("branches", branches)]
        for name, value in sizes:
            check_positive(name, value)
        if image_height % patch_height or image_width % patch_width:
            raise ValueError(
                f"image_size={image_size!r} is not allowed with patch_size={patch_size!r}: "
                "every image dimension must be divisible by the patch size"
            )
        check_choice("pool", pool, ("cls", "mean"))
        check_choice("pos_emb", pos_emb, ("learn", "pe1d"))
        norm = norm_layer("norm", norm)
        ffn_norm = norm_layer("ffn_norm", ffn_norm, optional=True)
        ffn_hidden_norm = norm_layer("ffn_hidden_norm", ffn_hidden_norm, optional=True)
        check_choice("stem", stem, ("linear", "hmlp"))
        if not isinstance(qkv_bias, bool):
            raise ValueError(f"qkv_bias={qkv_bias!r} is not allowed; it must be True or False")
        if stem == "linear" and hmlp_kernels is not None:
            raise ValueError(f"hmlp_kernels={hmlp_kernels!r} is not allowed with stem='linear'; use stem='hmlp'")
        check_probability("dropout", dropout)
        check_probability("emb_dropout", emb_dropout)
        if pos_emb == "pe1d" and dim % 2:
            raise ValueError(
                f"dim={dim!r} is not allowed with pos_emb='pe1d': the sinusoidal embedding needs an even dim"
            )

        num_patches = (image_height // patch_height) * (image_width // patch_width)
        patch_dim = channels * patch_height * patch_width
        self.pool = pool
        self.grid_size = (image_height // patch_height, image_width // patch_width)
        if stem == "linear":
            self.to_patch_embedding = nn.Sequential(
                Rearrange("b c (h p1) (w p2) -> b (h w) (p1 p2 c)", p1=patch_height, p2=patch_width),
                norm(patch_dim),
                nn.Linear(patch_dim, dim),
                norm(dim),
            )
        else:
            self.to_patch_embedding = HMLPStem(
                patch_size=patch_size, channels=channels, dim=dim, norm=norm, kernels=hmlp_kernels
            )
        if pos_emb == "learn":
            self.pos_embedding = nn.Parameter(torch.randn(1, num_patches + 1, dim))
        else:  # a buffer, so .to(device) moves it, but not a parameter to learn or save
            self.register_buffer("pos_embedding", posemb_sincos_1d(num_patches + 1, dim), persistent=False)
        self.cls_token = nn.Parameter(torch.randn(1, 1, dim))
        self.dropout = nn.Dropout(emb_dropout)
        self.transformer = Transformer(
            dim, depth, heads, dim_head, mlp_dim, dropout, norm, ffn_norm, ffn_hidden_norm, branches, qkv_bias
        )
        self.mlp_head = nn.Linear(dim, num_classes)

    def forward(self, img: Tensor) -> Tensor:
        x = self.to_patch_embedding(img)
        cls_tokens = repeat(self.cls_token, "1 1 d -> b 1 d", b=x.shape[0])
        x = torch.cat((cls_tokens, x), dim=1) + self.pos_embedding
        x = self.dropout(x)
        x = self.transformer(x)
        x = x.mean(dim=1) if self.pool == "mean" else x[:, 0]
        return self.mlp_head(x)


class ViTBNFFN(ViT):
    """ViT with BatchNorm after the first Linear of every feed-forward network and no LayerNorm before it."""

    def __init__(self, **kwargs: Any):
        super().__init__(norm="layer", ffn_norm=None, ffn_hidden_norm="batch", **kwargs)


class ViTBN(ViT):
    """ViT with every LayerNorm replaced by BatchNorm (and the feed-forward form of ViTBNFFN)."""

    def __init__(self, **kwargs: Any):
        super().__init__(norm="batch", ffn_norm=None, ffn_hidden_norm="batch", **kwargs)


class ViTDyT(ViT):
    """ViT with every LayerNorm replaced by DyT (Zhu et al., CVPR 2025): no normalisation anywhere."""

    def __init__(self, **kwargs: Any):
        super().__init__(norm="dyt", ffn_norm="dyt", **kwargs)
