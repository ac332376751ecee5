"""Chapter 07's settings: the ``paper`` protocol as the defaults, ``cpu`` and ``smoke`` as differences."""

from __future__ import annotations

from dataclasses import dataclass

from ..base import RunSettings


@dataclass(frozen=True)
class ThreeThingsSettings(RunSettings):
    """Chapter 07: depth 6 (the reference ViT) and 12 against half the depth with 2 branches (Touvron et al.'s
    best branch count); fine-tuning at 56x56 starts from the depth-6 runs, 3 epochs at a lower lr."""

    chapter = "07_three_things"  # its notebook's name (a class attribute, not a setting)

    models: tuple[str, ...] = ("ViT", "ViTBNFFN", "ViTBN")
    depths: tuple[int, ...] = (6, 12)
    branches: int = 2
    epochs: int = 10
    lr: float = 0.0005
    batch_size: int = 100
    ft_epochs: int = 3
    ft_lr: float = 0.0002
    ft_train_size: int | None = None
    ft_test_size: int | None = None
    latency_batch: int = 256
    latency_repeats: int = 20

    def __post_init__(self):
        super().__post_init__()
        if self.branches < 1 or any(d < 1 or d % self.branches for d in self.depths):
            raise ValueError(
                f"depths={self.depths!r} is not allowed; give depths >= 1, multiples of branches={self.branches}"
            )


#: One seed: an illustration, its differences shown, not judged. 40 fine-tuning steps are few, so they use the
#: training lr; paper's 1,800 steps use a fine-tuning lr.
CPU = dict(seeds=1, depths=(6,), epochs=4, train_size=5000, test_size=2000, latency_batch=100, latency_repeats=10)
CPU |= dict(ft_epochs=2, ft_lr=0.0005, ft_train_size=2000, ft_test_size=1000)

#: Depth 2 against 1 x 2 branches: every run, figure and table, in well under a minute.
SMOKE = dict(seeds=1, depths=(2,), epochs=1, train_size=300, test_size=200, latency_batch=16, latency_repeats=3)
SMOKE |= dict(ft_epochs=1, ft_train_size=200, ft_test_size=200)
