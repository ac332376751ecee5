"""One Vision Transformer family whose normalisation is a constructor choice.

``ViT`` is the standard pre-norm encoder of the einops-style vit-pytorch (its state-dict
names, so checkpoints of that layout load). ``ViTBNFFN`` and ``ViTBN`` are the same class
with other norms:

=========  ==================  ======================  ===============  ==========
model      patch embedding     attention               feed-forward     final norm
=========  ==================  ======================  ===============  ==========
ViT        LayerNorm           LayerNorm -> MHSA       LN -> Lin-GELU   LayerNorm
ViTBNFFN   LayerNorm           LayerNorm -> MHSA       Lin -> BN-GELU   LayerNorm
ViTBN      BatchNorm           BatchNorm -> MHSA       Lin -> BN-GELU   BatchNorm
=========  ==================  ======================  ===============  ==========
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from einops import rearrange, repeat
from einops.layers.torch import Rearrange
from torch import Tensor, nn

from .norms import BatchNorm, check_choice, check_positive, check_probability, make_norm


def pair(t):
    return t if isinstance(t, tuple) else (t, t)


def posemb_sincos_1d(n: int, dim: int, temperature: float = 10000.0) -> Tensor:
    """Fixed 1-D sinusoidal embedding, ``(1, n, dim)``: sines in the first half, cosines in the second."""
    position = torch.arange(n, dtype=torch.float32)[:, None]
    omega = 1.0 / temperature ** (torch.arange(dim // 2, dtype=torch.float32) / max(dim // 2 - 1, 1))
    angles = position * omega[None, :]
    return torch.cat((angles.sin(), angles.cos()), dim=1)[None]


class FeedForward(nn.Module):
    """Linear -> GELU -> Linear, normalised before it (``'layer'``) or after its first Linear (``'batch'``)."""

    def __init__(self, dim: int, hidden_dim: int, dropout: float = 0.0, norm: str = "layer"):
        super().__init__()
        check_choice("ffn_norm", norm, ("layer", "batch"))
        if norm == "layer":
            layers = [nn.LayerNorm(dim), nn.Linear(dim, hidden_dim), nn.GELU()]
        else:
            layers = [nn.Linear(dim, hidden_dim), BatchNorm(hidden_dim), nn.GELU()]
        self.net = nn.Sequential(*layers, nn.Dropout(dropout), nn.Linear(hidden_dim, dim), nn.Dropout(dropout))

    def forward(self, x: Tensor) -> Tensor:
        return self.net(x)


class Attention(nn.Module):
    """Multi-head self-attention with its own pre-norm."""

    def __init__(self, dim: int, heads: int = 8, dim_head: int = 64, dropout: float = 0.0, norm: str = "layer"):
        super().__init__()
        inner_dim = dim_head * heads
        self.heads = heads
        self.dropout = dropout
        self.norm = make_norm(norm, dim)
        self.to_qkv = nn.Linear(dim, inner_dim * 3, bias=False)
        project_out = not (heads == 1 and dim_head == dim)
        self.to_out = nn.Sequential(nn.Linear(inner_dim, dim), nn.Dropout(dropout)) if project_out else nn.Identity()

    def forward(self, x: Tensor) -> Tensor:
        x = self.norm(x)
        q, k, v = (rearrange(t, "b n (h d) -> b h n d", h=self.heads) for t in self.to_qkv(x).chunk(3, dim=-1))
        # Same maths as softmax(q k^T / sqrt(d)) v, in PyTorch's fused kernel.
        out = F.scaled_dot_product_attention(q, k, v, dropout_p=self.dropout if self.training else 0.0)
        return self.to_out(rearrange(out, "b h n d -> b n (h d)"))


class Parallel(nn.ModuleList):
    """Branches applied to the same input and summed (Touvron et al.'s parallel blocks)."""

    def forward(self, x: Tensor) -> Tensor:
        return sum(branch(x) for branch in self)


class Transformer(nn.Module):
    def __init__(self, dim, depth, heads, dim_head, mlp_dim, dropout=0.0, norm="layer", ffn_norm="layer", branches=1):
        super().__init__()

        def branch(make):
            return make() if branches == 1 else Parallel(make() for _ in range(branches))

        self.layers = nn.ModuleList(
            nn.ModuleList([
                branch(lambda: Attention(dim, heads=heads, dim_head=dim_head, dropout=dropout, norm=norm)),
                branch(lambda: FeedForward(dim, mlp_dim, dropout=dropout, norm=ffn_norm)),
            ])
            for _ in range(depth)
        )
        self.norm = make_norm(norm, dim)

    def forward(self, x: Tensor) -> Tensor:
        for attn, ff in self.layers:
            x = attn(x) + x
            x = ff(x) + x
        return self.norm(x)


class ViT(nn.Module):
    """Vision Transformer with the seeds' keyword signature.

    ``norm`` picks LayerNorm or BatchNorm for the patch embedding, the attention pre-norm and
    the final norm; ``ffn_norm`` picks the feed-forward form (see the module docstring).
    ``branches > 1`` makes every block run that many MHSA (then FFN) branches in parallel.
    """

    def __init__(self, *, image_size, patch_size, num_classes, dim, depth, heads, mlp_dim, pool="cls",
                 channels=3, dim_head=64, dropout=0.0, emb_dropout=0.0, pos_emb="learn",
                 norm="layer", ffn_norm="layer", branches=1):
        super().__init__()
        image_height, image_width = pair(image_size)
        patch_height, patch_width = pair(patch_size)
        for name, value in [("image_size", image_height), ("image_size", image_width), ("patch_size", patch_height),
                            ("patch_size", patch_width), ("num_classes", num_classes), ("channels", channels),
                            ("dim", dim), ("depth", depth), ("heads", heads), ("dim_head", dim_head),
                            ("mlp_dim", mlp_dim), ("branches", branches)]:
            check_positive(name, value)
        if image_height % patch_height or image_width % patch_width:
            raise ValueError(f"image_size={image_size!r} is not allowed with patch_size={patch_size!r}: "
                             "every image dimension must be divisible by the patch size")
        check_choice("pool", pool, ("cls", "mean"))
        check_choice("pos_emb", pos_emb, ("learn", "pe1d"))
        check_choice("norm", norm, ("layer", "batch"))
        check_choice("ffn_norm", ffn_norm, ("layer", "batch"))
        check_probability("dropout", dropout)
        check_probability("emb_dropout", emb_dropout)
        if pos_emb == "pe1d" and dim % 2:
            raise ValueError(f"dim={dim!r} is not allowed with pos_emb='pe1d': the sinusoidal embedding needs an even dim")

        num_patches = (image_height // patch_height) * (image_width // patch_width)
        patch_dim = channels * patch_height * patch_width
        self.pool = pool
        self.to_patch_embedding = nn.Sequential(
            Rearrange("b c (h p1) (w p2) -> b (h w) (p1 p2 c)", p1=patch_height, p2=patch_width),
            make_norm(norm, patch_dim),
            nn.Linear(patch_dim, dim),
            make_norm(norm, dim),
        )
        if pos_emb == "learn":
            self.pos_embedding = nn.Parameter(torch.randn(1, num_patches + 1, dim))
        else:  # a buffer, so .to(device) moves it, but not a parameter to learn or save
            self.register_buffer("pos_embedding", posemb_sincos_1d(num_patches + 1, dim), persistent=False)
        self.cls_token = nn.Parameter(torch.randn(1, 1, dim))
        self.dropout = nn.Dropout(emb_dropout)
        self.transformer = Transformer(dim, depth, heads, dim_head, mlp_dim, dropout, norm, ffn_norm, branches)
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

    def __init__(self, **kwargs):
        super().__init__(norm="layer", ffn_norm="batch", **kwargs)


class ViTBN(ViT):
    """ViT with every LayerNorm replaced by BatchNorm (and the feed-forward form of ViTBNFFN)."""

    def __init__(self, **kwargs):
        super().__init__(norm="batch", ffn_norm="batch", **kwargs)
