"""Chapter 05's settings: the ``paper`` protocol as the defaults, ``cpu`` and ``smoke`` as differences."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from ...profiles import AUTO_ENGINE, ChapterSettings


@dataclass(frozen=True)
class DepthSettings(ChapterSettings):
    """Chapter 05: article 2's depth study; ``depths`` maps each learning rate to the depths trained at it."""

    seeds: int = 3
    epochs: int = 10
    batch_size: int = 100
    test_batch_size: int = 5000
    train_size: int | None = None
    test_size: int | None = None
    depths: Mapping[float, tuple[int, ...]] = field(
        default_factory=lambda: {0.003: (2, 3, 4, 5, 6, 7), 0.005: (1, 2, 3, 4)}
    )
    #: On a GPU a configuration's seeds train as one stacked model (``vitbn_nb.engines.stack``); the chapter shows no
    #: timings.
    engine: str = AUTO_ENGINE

    def __post_init__(self):
        super().__post_init__()
        for lr, depths in self.depths.items():
            if lr <= 0 or any(d < 1 for d in depths):
                raise ValueError(f"depths={dict(self.depths)!r} is not allowed; give {{lr > 0: [depth >= 1, ...]}}")


#: Every depth of the three figures, three seeds each, 200 steps a run: article 2's findings are about
#: its 10-epoch runs, so these claims read "not testable at this scale"; the figures show early training.
CPU = dict(seeds=3, epochs=4, train_size=5000, test_size=2000, engine="eager")

#: Only the depths that give every figure content: Fig 8 (d6), Fig 9 (d1, d3), Fig 10 (d3 at both lrs).
SMOKE = dict(seeds=1, epochs=2, train_size=400, test_size=300, depths={0.003: (3, 6), 0.005: (1, 3)}, engine="eager")
