"""What names a run: its configuration, checked whole when it is made, and the run id it gives with a device type
(a digest of :meth:`RunConfig.to_dict`: a field added must leave it as it was for every stored run)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch

from .. import profiles
from ..data import DATASETS, IMAGE_SIZE, SPLIT_SIZES
from ..models import MODELS, VIT_FAMILY, build_model, model_kwargs
from ..models.norms import check_choice
from ..models.vit import pair as vit_pair

PIPELINES = ("engine", "reference")
#: Device types a run id can name; a finished run of either is reused wherever the book renders.
DEVICE_TYPES = ("cpu", "cuda")
#: Records and run ids spell the engine pipeline "fast" (its name when the first runs were stored); a record
#: read back says "engine" again. Keeping the spelling keeps every run id, so no run trains twice.
_STORED_AS = {"engine": "fast"}
_READ_AS = {name: pipeline for pipeline, name in _STORED_AS.items()}


def stacking_refusal(config: RunConfig) -> str | None:
    """Why runs like ``config`` cannot be trained as one stack (``vitbn_nb.engines.stack``); None when they can."""
    if any(config.model_kwargs.get(name, 0) for name in ("dropout", "emb_dropout")):
        return "dropout draws from the global random stream, which the members would share"
    if config.pipeline == "reference" and config.dataset == "mnist_aug":
        return "the reference pipeline's augmentation draws from the global random stream"
    if config.init_from is not None or config.trainable != "all":
        return "fine-tuning runs start from other runs' weights and train one at a time"
    return None


#: The model configurations this process has built once (by class and arguments): a chapter's plan makes thousands of
#: runs of a few models, and building one, even on the meta device, costs more than all the other checks of a run.
_BUILT: set[tuple] = set()


def _check_model(name: str, kwargs: dict) -> None:
    """Refuse a bad model configuration when its run is made, not hours into a sweep: the model built on the meta
    device (no memory, no random numbers drawn), once per class and arguments."""
    key = (MODELS[name], repr(sorted(kwargs.items())))
    if key not in _BUILT:
        with torch.device("meta"):
            build_model(name, **kwargs)
        _BUILT.add(key)


@dataclass(frozen=True)
class RunConfig:
    """Everything that determines a run's numbers (with the device type)."""

    model: str
    model_kwargs: dict = field(default_factory=dict)
    dataset: str = "mnist"
    epochs: int = 30
    lr: float = 5e-4
    batch_size: int = 100
    test_batch_size: int = 5000
    seed: int = 0
    train_size: int | None = None
    test_size: int | None = None
    pipeline: str = "engine"
    #: Fine-tuning: the run id of a finished run whose weights start this one (position embedding
    #: interpolated when the patch grid differs), and which weights train ("all" | "attention").
    init_from: str | None = None
    trainable: str = "all"
    #: ``"eager"`` trains the run alone; ``"stacked"`` trains it with the other stacked runs of its kind (same
    #: everything but seed and lr) as one model (``vitbn_nb.engines.stack``): equal up to fp32 rounding, so another id.
    engine: str = "eager"
    #: A run trained again to be timed on another machine (``0``: the run itself): the same numbers (the run is
    #: deterministic), another id, so that a comparison's runs can all be timed on one machine.
    replica: int = 0

    def __post_init__(self):
        object.__setattr__(self, "model_kwargs", model_kwargs(self.model, **self.model_kwargs))
        _check_model(self.model, self.model_kwargs)
        check_choice("dataset", self.dataset, DATASETS)
        object.__setattr__(self, "pipeline", _READ_AS.get(self.pipeline, self.pipeline))
        check_choice("pipeline", self.pipeline, PIPELINES)
        profiles.check_run_fields(self)
        for name, images in SPLIT_SIZES[self.dataset].items():
            if (value := getattr(self, name)) is not None and value > images:
                raise ValueError(
                    f"{name}={value!r} is not allowed; dataset {self.dataset!r} has {images:,} images in that split"
                )
        if not isinstance(self.seed, int) or isinstance(self.seed, bool) or not 0 <= self.seed < 2**63:
            raise ValueError(f"seed={self.seed!r} is not allowed; it must be an integer in [0, 2**63)")
        if self.batch_size < 2:
            raise ValueError(f"batch_size={self.batch_size!r} is not allowed; training batches need >= 2 images")
        if not (isinstance(self.lr, (int, float)) and 0 < self.lr < 10):
            raise ValueError(f"lr={self.lr!r} is not allowed; it must be a number in (0, 10)")
        check_choice("trainable", self.trainable, ("all", "attention"))
        if self.engine == "stacked" and (why := stacking_refusal(self)):
            raise ValueError(f"engine='stacked' is not allowed for {self.label()}: {why}")
        if self.trainable == "attention" and self.model not in VIT_FAMILY:
            raise ValueError(f"trainable='attention' is not allowed with model={self.model!r}: it has no attention")
        if not isinstance(self.replica, int) or isinstance(self.replica, bool) or self.replica < 0:
            raise ValueError(f"replica={self.replica!r} is not allowed; it must be an integer >= 0")
        if self.init_from is not None and (not isinstance(self.init_from, str) or not self.init_from):
            raise ValueError(f"init_from={self.init_from!r} is not allowed; give a run id or None")
        image_size, side = self.model_kwargs.get("image_size", 28), IMAGE_SIZE[self.dataset]
        if vit_pair(tuple(image_size) if isinstance(image_size, list) else image_size) != (side, side):
            raise ValueError(
                f"dataset={self.dataset!r} has {IMAGE_SIZE[self.dataset]}-pixel images; the model's "
                f"image_size={image_size!r} must match"
            )
        if self.pipeline == "reference" and self.dataset not in ("mnist", "mnist_aug"):
            raise ValueError(f"pipeline='reference' is not allowed with dataset={self.dataset!r}; use 'engine'")

    #: The fine-tuning, engine and replica fields: in :meth:`to_dict` only when set, so every earlier run keeps its id.
    OPTIONAL: ClassVar = ("init_from", "trainable", "engine", "replica")
    #: The fields a chapter's settings supply to every run it plans (when the settings have them).
    FROM_SETTINGS: ClassVar = ("epochs", "batch_size", "test_batch_size", "train_size", "test_size", "engine")

    @classmethod
    def from_settings(cls, settings: object, **fields: Any) -> RunConfig:
        """A run of a chapter: ``FROM_SETTINGS`` taken from ``settings``, then ``fields`` (which win)."""
        given = {name: getattr(settings, name) for name in cls.FROM_SETTINGS if hasattr(settings, name)}
        return cls(**{**given, **fields})

    def to_dict(self) -> dict:
        config = dataclasses.asdict(self)
        for name in self.OPTIONAL:
            if config[name] == RunConfig.__dataclass_fields__[name].default:
                del config[name]
        config["pipeline"] = _STORED_AS.get(self.pipeline, self.pipeline)
        return config

    def run_id(self, device_type: str) -> str:
        key = json.dumps({**self.to_dict(), "device": device_type}, sort_keys=True)
        digest = hashlib.sha1(key.encode()).hexdigest()[:10]
        depth = self.model_kwargs.get("depth")
        tune = "" if self.init_from is None else f"-ft{self.trainable}"
        return (
            f"{self.model}{'' if depth is None else f'-d{depth}'}{tune}-lr{self.lr:g}-bs{self.batch_size}"
            f"-s{self.seed}-{digest}"
        )

    def variants(self) -> list[RunConfig]:
        """This run as each engine that can train it would: one protocol under two ids (equal up to fp32 rounding),
        its own engine first."""
        engines = (self.engine, *(e for e in profiles.ENGINES if e != self.engine))
        return [
            dataclasses.replace(self, engine=e) for e in engines if e != "stacked" or stacking_refusal(self) is None
        ]

    def ids(self, device_types: tuple[str, ...] | set[str] = DEVICE_TYPES) -> list[str]:
        """The ids this run can be stored under: each of :meth:`variants` on each device type, in that order."""
        return [variant.run_id(device_type) for variant in self.variants() for device_type in device_types]

    def stack_key(self) -> str | None:
        """What the runs trained together as one stack share (everything but seed and lr); None: trained alone."""
        if self.engine != "stacked":
            return None
        return json.dumps({k: v for k, v in self.to_dict().items() if k not in ("seed", "lr")}, sort_keys=True)

    def label(self) -> str:
        depth = self.model_kwargs.get("depth")
        tune = "" if self.init_from is None else f" fine-tune({self.trainable}) on {self.dataset}"
        again = f" (replica {self.replica})" if self.replica else ""
        return (
            f"{self.model}{'' if depth is None else f' d{depth}'}{tune} lr={self.lr:g} bs={self.batch_size} "
            f"seed={self.seed}{again}"
        )
