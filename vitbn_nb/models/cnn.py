"""A small CNN: the order-of-magnitude reference for inference time in the transfer chapter."""

from __future__ import annotations

from torch import Tensor, nn

from .norms import check_positive


class CNN(nn.Module):
    """Two conv-BN-ReLU-pool stages and a linear head (28x28 -> 7x7 feature maps)."""

    def __init__(self, *, channels: int = 1, num_classes: int = 10, width: int = 32, image_size: int = 28):
        super().__init__()
        for name, value in dict(channels=channels, num_classes=num_classes, width=width, image_size=image_size).items():
            check_positive(name, value)
        if image_size % 4:
            raise ValueError(f"image_size={image_size!r} is not allowed: the two 2x2 poolings need a multiple of 4")

        def stage(c_in: int, c_out: int) -> list[nn.Module]:
            return [nn.Conv2d(c_in, c_out, 3, padding=1, bias=False), nn.BatchNorm2d(c_out), nn.ReLU(), nn.MaxPool2d(2)]

        self.features = nn.Sequential(*stage(channels, width), *stage(width, 2 * width))
        self.head = nn.Sequential(nn.Flatten(), nn.Linear(2 * width * (image_size // 4) ** 2, num_classes))

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.features(x))
