"""Chapter 05's settings: article 2's protocol (each figure's lr and depths) as the ``paper`` defaults, ``cpu`` and
``smoke`` as differences; runs, panels and claim keys all derive from these fields."""

from __future__ import annotations

import types
from collections.abc import Mapping
from dataclasses import dataclass

from ...models import VIT_FAMILY
from ...profiles import AUTO_ENGINE
from ..base import RunSettings
from . import article


@dataclass(frozen=True)
class DepthSettings(RunSettings):
    """Chapter 05: article 2's depth study; each figure's lr and the depths it shows; its seed plan."""

    chapter = "05_depth_study"  # its notebook's name (a class attribute, not a setting)

    #: The seed plan (``plan.seed_plan``, decided before its runs): every configuration trains ``seeds`` seeds, the
    #: primary contrast's (beyond the critical depth, at each figure's rate) these. A verdict reads exactly these.
    fig8_primary_seeds: int = 6
    fig9_primary_seeds: int = 10
    #: Train and judge the confirmatory replication (``confirmation.PLAN_FILE``: fresh seeds, planned from the
    #: exploratory runs' spreads, committed before its runs), reported apart from the exploratory verdicts.
    confirmation: bool = True
    epochs: int = article.EPOCHS
    batch_size: int = article.BATCH_SIZE
    #: Fig 8: ViT against ViTBNFFN at lr 0.003, depths 4-7 (its text adds d < 4, trained for Fig 10).
    fig8_lr: float = article.RATES["fig8"]
    fig8_depths: tuple[int, ...] = article.DEPTHS["fig8"]
    #: Fig 9: the same at lr 0.005, depths 1-4.
    fig9_lr: float = article.RATES["fig9"]
    fig9_depths: tuple[int, ...] = article.DEPTHS["fig9"]
    #: Fig 10: how far each model falls from Fig 8's lr to Fig 9's, at these depths (trained at both rates).
    fig10_depths: tuple[int, ...] = article.DEPTHS["fig10"]
    #: Not article 2's: further ViT-family models trained beside ViT and ViTBNFFN at one (depth, lr) the study trains
    #: (elsewhere none train). DyT (Zhu et al., 2025) asks where a ViT with no normalisation stands.
    extra_models: tuple[str, ...] | None = ("ViTDyT",)
    extra_depth: int = 6
    #: ``None``: Fig 8's rate (``fig8_lr``), so that the extra models follow the protocol's rate.
    extra_lr: float | None = None
    #: On a GPU a configuration's seeds train as one stacked model (the chapter shows no timings).
    engine: str = AUTO_ENGINE

    def __post_init__(self):
        super().__post_init__()
        if self.fig8_lr <= 0 or self.fig9_lr <= 0 or self.fig8_lr == self.fig9_lr:
            raise ValueError(
                f"fig8_lr={self.fig8_lr!r}, fig9_lr={self.fig9_lr!r} are not allowed; give two different rates > 0"
            )
        for name in ("fig8_depths", "fig9_depths", "fig10_depths"):
            if any(d < 1 for d in getattr(self, name)):
                raise ValueError(f"{name}={getattr(self, name)!r} is not allowed; give depths >= 1")
        if self.extra_lr is None:
            object.__setattr__(self, "extra_lr", self.fig8_lr)
        if self.extra_models:
            allowed = [m for m in VIT_FAMILY if m not in ("ViT", "ViTBNFFN")]  # those two train anyway
            if any(m not in allowed for m in self.extra_models):
                raise ValueError(f"extra_models={self.extra_models!r} is not allowed; choose from {', '.join(allowed)}")

    @property
    def depths(self) -> Mapping[float, tuple[int, ...]]:
        """The depths trained at each lr: a figure's own, and Fig 10's at both rates."""
        return types.MappingProxyType(
            {
                self.fig8_lr: tuple(sorted({*self.fig8_depths, *self.fig10_depths})),
                self.fig9_lr: tuple(sorted({*self.fig9_depths, *self.fig10_depths})),
            }
        )

    def figures(self) -> dict[str, dict]:
        """Each of article 2's figures as redrawn: its output name, lr(s) and the depths of its panels (article 2's,
        whatever a smaller profile trains: a depth it leaves out is drawn as "not run")."""
        spec = lambda figure, **more: dict(
            name=f"article2_{figure}", reproduces=f"article2/{figure}", label=f"Fig {figure[3:]}", **more
        )
        return {
            "fig8": spec("fig8", lr=self.fig8_lr, depths=article.DEPTHS["fig8"]),
            "fig9": spec("fig9", lr=self.fig9_lr, depths=article.DEPTHS["fig9"]),
            "fig10": spec("fig10", lrs=(self.fig8_lr, self.fig9_lr), depths=article.DEPTHS["fig10"]),
        }

    def figure_lr(self, figure: str) -> float:
        """The lr of article 2's Fig 8 or Fig 9 under these settings."""
        return {"fig8": self.fig8_lr, "fig9": self.fig9_lr}[figure]

    def primary_seeds(self, figure: str) -> int:
        """The seeds the seed plan gives the primary contrast's configurations at ``figure``'s rate."""
        return {"fig8": self.fig8_primary_seeds, "fig9": self.fig9_primary_seeds}[figure]

    def seeds_at(self, lr: float, depth: int) -> int:
        """The planned seeds at ``lr`` and ``depth``: the primary contrast's past the critical depth, else ``seeds``."""
        for figure in ("fig8", "fig9"):
            if abs(self.figure_lr(figure) - lr) < 1e-12 and depth in article.BEYOND_CRITICAL[figure]:
                return max(self.seeds, self.primary_seeds(figure))
        return self.seeds


#: Every depth of the three figures, three seeds each, 200 steps a run: article 2's findings are about
#: its 10-epoch runs, so these claims read "not testable at this scale"; the figures show early training.
CPU = dict(
    confirmation=False,
    fig8_primary_seeds=3,
    fig9_primary_seeds=3,
    epochs=4,
    train_size=5000,
    test_size=2000,
    engine="eager",
)

#: Only the depths that give every figure content: Fig 8 (d6), Fig 9 (d1, d3), Fig 10 (d3 at both lrs).
SMOKE = dict(
    confirmation=False, seeds=1, fig8_primary_seeds=1, fig9_primary_seeds=1, epochs=2, train_size=400, test_size=300
)
SMOKE |= dict(fig8_depths=(6,), fig9_depths=(1, 3), fig10_depths=(3,), engine="eager")
