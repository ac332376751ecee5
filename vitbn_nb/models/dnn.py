"""The fully connected networks of article 2: 784 -> 3 x [Linear(100) (-> BatchNorm) -> Sigmoid] -> Linear(10)."""

from __future__ import annotations

from typing import Any

from einops.layers.torch import Rearrange
from torch import Tensor, nn

from .norms import BatchNorm, check_positive


class DNN(nn.Module):
    """Sigmoid MLP on flattened images; ``batchnorm=True`` puts BatchNorm before every sigmoid (Ioffe & Szegedy)."""

    def __init__(
        self,
        *,
        in_features: int = 784,
        hidden: int = 100,
        depth: int = 3,
        num_classes: int = 10,
        batchnorm: bool = False,
    ):
        super().__init__()
        for name, value in dict(in_features=in_features, hidden=hidden, depth=depth, num_classes=num_classes).items():
            check_positive(name, value)
        layers: list[nn.Module] = [Rearrange("b ... -> b (...)")]
        width = in_features
        for _ in range(depth):
            layers += [nn.Linear(width, hidden), *([BatchNorm(hidden)] if batchnorm else []), nn.Sigmoid()]
            width = hidden
        layers.append(nn.Linear(width, num_classes))
        self.net = nn.Sequential(*layers)

    def forward(self, x: Tensor) -> Tensor:
        return self.net(x)


class DNN_d3(DNN):
    def __init__(self, **kwargs: Any):
        super().__init__(depth=3, batchnorm=False, **kwargs)


class DNNBN_d3(DNN):
    def __init__(self, **kwargs: Any):
        super().__init__(depth=3, batchnorm=True, **kwargs)
