"""Fold eval-mode BatchNorm into the neighbouring Linear layer: an inference copy without BatchNorm.

In eval mode a BatchNorm is ``y = s * x + t`` with ``s = gamma / sqrt(running_var + eps)``, ``t = beta -
running_mean * s``. After a Linear (or a ``BatchNorm2d`` after a ``Conv2d``): ``W' = diag(s) W``, ``b' = s * b + t``
(``torch.nn.utils.fusion``). Before a Linear, also through the CLS/mean pooling: ``W' = W diag(s)``, ``b' = W t + b``.
A LayerNorm computes its statistics at inference, so it cannot fold and stays in place.
"""

from __future__ import annotations

import copy

import torch
from torch import Tensor, nn
from torch.nn.utils.fusion import fuse_conv_bn_eval, fuse_linear_bn_eval

from .vit import Attention, ViT

__all__ = ["batchnorm_affine", "count_batchnorms", "fold_batchnorm"]


def batchnorm_affine(bn: nn.BatchNorm1d) -> tuple[Tensor, Tensor]:
    """The eval-mode map of ``bn`` as ``(scale, shift)`` in float64: ``bn(x) = scale * x + shift``."""
    if bn.running_mean is None or bn.running_var is None:
        raise ValueError(
            f"{bn!r} keeps no running statistics (track_running_stats=False): in eval mode it still normalises with "
            "batch statistics, so it is not a fixed affine map and cannot fold"
        )
    var = bn.running_var.detach().double()
    scale = torch.rsqrt(var + bn.eps)
    if bn.weight is not None:
        scale = scale * bn.weight.detach().double()
    shift = -bn.running_mean.detach().double() * scale
    if bn.bias is not None:
        shift = shift + bn.bias.detach().double()
    return scale, shift


def _foldable(bn: nn.Module) -> bool:
    return isinstance(bn, nn.BatchNorm1d) and bn.running_mean is not None


def _fold_before(bn: nn.BatchNorm1d, linear: nn.Linear) -> nn.Linear:
    """``linear(bn(x))`` as one Linear."""
    if bn.num_features != linear.in_features:
        raise ValueError(
            f"cannot fold {bn!r} before {linear!r}: {bn.num_features} features != {linear.in_features} inputs"
        )
    scale, shift = batchnorm_affine(bn)
    with torch.no_grad():
        if linear.bias is None:  # an equal Linear with a zero bias to fold into
            weight = linear.weight
            linear = nn.Linear(linear.in_features, linear.out_features, device=weight.device, dtype=weight.dtype)
            linear.weight.copy_(weight)
            linear.bias.zero_()
        # both computed before either is written: a float64 weight's .double() is the weight itself
        w, b = linear.weight.double(), linear.bias.double()
        weight, bias = w * scale[None, :], w @ shift + b
        linear.weight.copy_(weight.to(linear.weight.dtype))
        linear.bias.copy_(bias.to(linear.bias.dtype))
    return linear


def _fold_sequential(seq: nn.Sequential) -> None:
    """Fold each BatchNorm of ``seq`` into the Linear right before it, else the one right after it."""
    names = list(seq._modules)
    for i, name in enumerate(names):
        bn = seq._modules[name]
        before = seq._modules[names[i - 1]] if i > 0 else None
        after = seq._modules[names[i + 1]] if i + 1 < len(names) else None
        conv_bn = isinstance(bn, nn.BatchNorm2d) and bn.running_mean is not None
        if conv_bn and isinstance(before, nn.Conv2d) and before.out_channels == bn.num_features:
            seq._modules[names[i - 1]] = fuse_conv_bn_eval(before.eval(), bn.eval())  # the hMLP stem's Conv2d -> BN
            seq._modules[name] = nn.Identity()
            continue
        if not _foldable(bn):
            continue
        if isinstance(before, nn.Linear) and before.out_features == bn.num_features:
            seq._modules[names[i - 1]] = fuse_linear_bn_eval(before.eval(), bn.eval())
        elif isinstance(after, nn.Linear) and after.in_features == bn.num_features:
            seq._modules[names[i + 1]] = _fold_before(bn, after)
        else:
            continue
        seq._modules[name] = nn.Identity()


def count_batchnorms(model: nn.Module) -> int:
    return sum(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules())


def fold_batchnorm(model: nn.Module, *, strict: bool = False) -> nn.Module:
    """An eval-mode copy of ``model`` with every BatchNorm next to a Linear (or a Conv2d) folded into it, through the
    attention pre-norm and the final pooling too; one it cannot fold stays (``strict=True``: raises, naming it)."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"fold_batchnorm takes an nn.Module, got {type(model).__name__}")
    folded = copy.deepcopy(model).eval()
    for module in list(folded.modules()):
        if isinstance(module, nn.Sequential):
            _fold_sequential(module)
        elif isinstance(module, Attention) and _foldable(module.norm):
            module.to_qkv = _fold_before(module.norm, module.to_qkv)
            module.norm = nn.Identity()
    if isinstance(folded, ViT) and _foldable(folded.transformer.norm) and isinstance(folded.mlp_head, nn.Linear):
        folded.mlp_head = _fold_before(folded.transformer.norm, folded.mlp_head)
        folded.transformer.norm = nn.Identity()
    if strict:
        left = [name for name, m in folded.named_modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
        if left:
            raise ValueError(f"fold_batchnorm(strict=True): no Linear to fold into for {', '.join(left)}")
    return folded.eval()  # the Linears that gained a bias are new modules
