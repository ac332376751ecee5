"""Normalisation layers shared by every model family.

BatchNorm on token tensors ``(b, n, d)`` normalises each feature ``d`` over the batch
*and* the tokens. Article 1 writes this as ``BatchNorm1d`` over ``b d n`` and article 2 as
``BatchNorm2d`` over ``b d n 1``; both need a transposed copy. Flattening to ``(b n) d``
and calling ``BatchNorm1d`` on the 2-D view is the same arithmetic (same statistics,
same running estimates, same parameters) with no copy; ``tests/test_models.py`` checks
the equality and ``vitbn_nb.bench`` measures the three forms.
"""

from __future__ import annotations

from collections.abc import Iterable

from torch import Tensor, nn

NORMS = ("layer", "batch")


class BatchNorm(nn.BatchNorm1d):
    """``BatchNorm1d`` for ``(b, d)`` features or ``(b, n, d)`` tokens.

    A batch of one image cannot give batch statistics; PyTorch's own message for it is
    cryptic (or, with several tokens per image, there is none and the statistics silently
    become per-image), so training mode refuses it by name.
    """

    def forward(self, x: Tensor) -> Tensor:
        if self.training and x.shape[0] < 2:
            raise ValueError(
                f"BatchNorm in training mode needs at least 2 images per batch, got a batch of "
                f"{x.shape[0]}: use batch_size >= 2 (or call model.eval() for inference)"
            )
        if x.dim() == 3:
            return super().forward(x.reshape(-1, x.shape[-1])).view_as(x)
        return super().forward(x)


def make_norm(kind: str, dim: int) -> nn.Module:
    """``'layer'`` -> LayerNorm over features; ``'batch'`` -> BatchNorm over batch (and tokens)."""
    check_choice("norm", kind, NORMS)
    return nn.LayerNorm(dim) if kind == "layer" else BatchNorm(dim)


def check_choice(name: str, value: object, allowed: Iterable) -> None:
    if value not in allowed:
        raise ValueError(f"{name}={value!r} is not allowed; choose one of {', '.join(map(repr, allowed))}")


def check_positive(name: str, value: object) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name}={value!r} is not allowed; it must be an integer >= 1")


def check_probability(name: str, value: float) -> None:
    if not 0.0 <= float(value) < 1.0:
        raise ValueError(f"{name}={value!r} is not allowed; it must lie in [0, 1)")
