"""Normalisation layers as layer factories (timm's ``norm_layer``: number of features -> a module over the last
dimension), and :data:`NORMS`, which names them: a new norm is one class and one entry there. BatchNorm on tokens
``(b, n, d)`` runs ``BatchNorm1d`` on the ``(b n) d`` view: the articles' transposed forms' arithmetic, with no copy."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch
from torch import Tensor, nn

#: A norm layer factory: number of features -> a module over the last dimension.
NormLayer = Callable[[int], nn.Module]


class BatchNorm(nn.BatchNorm1d):
    """``BatchNorm1d`` for ``(b, d)`` features or ``(b, n, d)`` tokens. Training mode refuses a batch of one image by
    name: PyTorch's message is cryptic, or with several tokens there is none and the statistics become per-image."""

    def forward(self, x: Tensor) -> Tensor:
        if self.training and x.shape[0] < 2:
            raise ValueError(
                f"BatchNorm in training mode needs at least 2 images per batch, got a batch of "
                f"{x.shape[0]}: use batch_size >= 2 (or call model.eval() for inference)"
            )
        if x.dim() == 3:
            return super().forward(x.reshape(-1, x.shape[-1])).view_as(x)
        return super().forward(x)


class DyT(nn.Module):
    """Dynamic Tanh (Zhu et al., CVPR 2025): ``weight * tanh(alpha * x) + bias`` over the last dimension, no statistic.
    ``alpha`` is one scalar (0.5, the paper's default for non-LLM models); ``weight``, ``bias`` as LayerNorm's."""

    def __init__(self, dim: int, alpha_init: float = 0.5):
        super().__init__()
        self.alpha = nn.Parameter(torch.full((1,), float(alpha_init)))
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim))

    def forward(self, x: Tensor) -> Tensor:
        return self.weight * torch.tanh(self.alpha * x) + self.bias

    def extra_repr(self) -> str:
        return f"{self.weight.shape[0]}, alpha_init={float(self.alpha.detach()[0]):g}"


#: The norms by name: one entry per norm. A value is a layer factory (a class taking the number of features).
NORMS: dict[str, NormLayer] = {"layer": nn.LayerNorm, "batch": BatchNorm, "dyt": DyT}


def norm_layer(name: str, norm: str | NormLayer | None, *, optional: bool = False) -> NormLayer | None:
    """The layer factory ``norm`` names (a key of :data:`NORMS`), or ``norm`` itself when it is one already;
    ``optional=True`` lets ``None`` through (no norm at that place)."""
    if norm is None and optional:
        return None
    if isinstance(norm, str) or norm is None:
        check_choice(name, norm, NORMS)
        return NORMS[norm]
    if not callable(norm):
        raise ValueError(
            f"{name}={norm!r} is not allowed; give a norm name ({', '.join(map(repr, NORMS))}) or a factory"
        )
    return norm


class LayerNorm2d(nn.LayerNorm):
    """LayerNorm over the channels of a ``(b, c, h, w)`` map: every position on its own."""

    def forward(self, x: Tensor) -> Tensor:
        return super().forward(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


class ChannelsLast(nn.Module):
    """Any token norm applied over the channels of a ``(b, c, h, w)`` map (each position's channels as one token)."""

    def __init__(self, norm: NormLayer, channels: int):
        super().__init__()
        self.norm = norm(channels)

    def forward(self, x: Tensor) -> Tensor:
        return self.norm(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


#: Norms with a form of their own for ``(b, c, h, w)`` maps; any other norm is applied over the channels as tokens.
_MAP_FORMS: dict[NormLayer, NormLayer] = {nn.LayerNorm: LayerNorm2d, BatchNorm: nn.BatchNorm2d}


def map_norm(norm: NormLayer) -> NormLayer:
    """The form of the token norm ``norm`` for ``(b, c, h, w)`` maps, normalising over the channels:
    LayerNorm per position, BatchNorm as ``BatchNorm2d`` (over batch and positions), any other per position."""
    return _MAP_FORMS.get(norm) or (lambda channels: ChannelsLast(norm, channels))


def check_choice(name: str, value: object, allowed: Iterable) -> None:
    if value not in allowed:
        raise ValueError(f"{name}={value!r} is not allowed; choose one of {', '.join(map(repr, allowed))}")


def check_positive(name: str, value: object) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name}={value!r} is not allowed; it must be an integer >= 1")


def check_probability(name: str, value: float) -> None:
    if not 0.0 <= float(value) < 1.0:
        raise ValueError(f"{name}={value!r} is not allowed; it must lie in [0, 1)")
