"""Chapter 08's settings: the ``paper`` protocol as the defaults, ``cpu`` and ``smoke`` as differences."""

from __future__ import annotations

from dataclasses import dataclass

from ...models import VIT_FAMILY
from ..base import DataSettings


@dataclass(frozen=True)
class SpeedSettings(DataSettings):
    """Chapter 08 and ``python -m vitbn_nb bench``: article 1's batch sizes, timed steps after a warm-up."""

    chapter = "08_where_the_speed_comes_from"  # its notebook's name (a class attribute, not a setting)

    #: Article 1's three, and ViTDyT (no normalisation; not the articles') timed beside them at equal depth.
    models: tuple[str, ...] = ("ViT", "ViTBNFFN", "ViTBN", "ViTDyT")
    depths: tuple[int, ...] = (1, 6)
    batch_size: int = 100
    steps: int = 50
    warmup: int = 10
    repeats: int = 5
    eval_batches: int = 2
    eval_warmup: int = 1
    matmul_size: int = 4096
    matmul_repeats: int = 10
    #: seconds of calls per BatchNorm form (``torch.utils.benchmark``'s ``blocked_autorange``)
    norm_seconds: float = 1.0
    #: depths whose dispatched operations are counted (no timing: seconds on any machine)
    count_depths: tuple[int, ...] = (1, 2, 3, 4, 5, 6, 7)
    lr: float = 1e-3
    seed: int = 0

    def __post_init__(self):
        super().__post_init__()
        unknown = [m for m in self.models if m not in VIT_FAMILY]
        if unknown:
            raise ValueError(f"models={self.models!r} is not allowed; choose from {', '.join(VIT_FAMILY)}")
        if self.norm_seconds <= 0:
            raise ValueError(f"norm_seconds={self.norm_seconds!r} is not allowed; it must be a number > 0")
        least = dict.fromkeys(("steps", "repeats", "eval_batches", "matmul_size", "matmul_repeats"), 1)
        for name, low in (least | dict(warmup=0, eval_warmup=0)).items():
            if getattr(self, name) < low:
                raise ValueError(f"{name}={getattr(self, name)!r} is not allowed; it must be an integer >= {low}")
        if self.batch_size < 2:
            raise ValueError(f"batch_size={self.batch_size!r} is not allowed; BatchNorm training needs >= 2 images")
        if any(d < 1 for d in self.depths):
            raise ValueError(f"depths={self.depths!r} is not allowed; give depths >= 1")
        if self.train_size is not None and self.train_size < self.batch_size:
            raise ValueError(f"train_size={self.train_size!r} is not allowed; it must be at least batch_size")


#: paper's 5 interleaved rounds: the rule judges a ratio from at least 3, and 5 narrow its interval (t = 2.8).
CPU = dict(steps=10, warmup=2, eval_batches=1, train_size=10000, test_size=5000)
CPU |= dict(matmul_size=2048, matmul_repeats=5, norm_seconds=0.2)

#: Every measurement and output on tiny batches (the numbers mean nothing).
SMOKE = dict(batch_size=16, test_batch_size=128, steps=2, warmup=1, repeats=2, eval_batches=1, eval_warmup=0)
SMOKE |= dict(train_size=256, test_size=128, matmul_size=256, matmul_repeats=2, norm_seconds=0.01, count_depths=(1, 6))
