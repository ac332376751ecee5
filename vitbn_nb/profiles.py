"""The three scales of the book and every chapter's settings, in one place.

Each chapter has a frozen settings class whose defaults are the ``paper`` profile: the
articles' protocol unchanged (with 3 random seeds where the articles ran one). ``cpu`` and
``smoke`` are written as differences from it: ``cpu`` keeps every effect visible on a 2-core
laptop in under two hours for the whole book, with three seeds behind every judged difference;
``smoke`` only proves that everything runs and every output is produced.
``settings(chapter, profile, **overrides)`` builds one, refusing unknown names and ill-typed
values with a ``ValueError`` that names the field.

``train_size`` / ``test_size`` of ``None`` mean the whole split (60,000 / 10,000 images).
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field

import torch

PROFILE_NAMES = ("smoke", "cpu", "paper")
#: Larger profiles' results are not replaced by smaller ones without asking.
PROFILE_SIZE = {"smoke": 0, "cpu": 1, "paper": 2}
#: How a run trains: alone, or stacked with the runs that differ from it only in seed and lr (``vitbn_nb.stack``).
ENGINES = ("eager", "stacked")
#: A setting's engine "auto" follows the device: stacked on a GPU, where a stack's graph replays many runs for the
#: launches of one; alone on a CPU, where a stack trains each run slower than one alone (``train --dry-run`` prints
#: the calibrated ratio).
AUTO_ENGINE = "auto"


def _check_value(name: str, value, kind):
    """``value`` converted to ``kind`` (a list to a tuple, an int to a float), or a ValueError naming ``name``."""
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin in (typing.Union, types.UnionType):
        for option in args:
            try:
                return _check_value(name, value, option)
            except ValueError:
                continue
        raise ValueError(f"{name}={value!r} is not allowed; it must be {_describe(kind)}")
    if kind is type(None):
        if value is None:
            return None
    elif kind is bool:
        if isinstance(value, bool):
            return value
    elif kind is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif kind is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    elif kind is str:
        if isinstance(value, str):
            return value
    elif origin is tuple:
        if isinstance(value, (list, tuple)) and value:
            return tuple(_check_value(f"{name}[{i}]", item, args[0]) for i, item in enumerate(value))
    elif origin in (Mapping, dict):
        if isinstance(value, Mapping) and value:
            return types.MappingProxyType(
                {
                    _check_value(f"{name} key", k, args[0]): _check_value(f"{name}[{k!r}]", v, args[1])
                    for k, v in value.items()
                }
            )
    else:  # pragma: no cover - a settings class with a type this checker does not know
        raise TypeError(f"{name}: no check for type {kind!r}")
    raise ValueError(f"{name}={value!r} is not allowed; it must be {_describe(kind)}")


def _describe(kind) -> str:
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_describe(option) for option in args)
    if origin is tuple:
        return f"a non-empty list, each {_describe(args[0])}"
    if origin in (Mapping, dict):
        return f"a non-empty mapping, each key {_describe(args[0])} and each value {_describe(args[1])}"
    return {type(None): "None", bool: "True or False", int: "an integer", float: "a number", str: "a string"}[kind]


@dataclass(frozen=True)
class ChapterSettings:
    """What every chapter's settings share: the profile they come from, and type checks on every field."""

    profile: str = "paper"

    def __post_init__(self):
        hints = typing.get_type_hints(type(self))
        for item in dataclasses.fields(self):
            object.__setattr__(self, item.name, _check_value(item.name, getattr(self, item.name), hints[item.name]))
        for name in ("seeds", "epochs", "batch_size", "test_batch_size", "trials", "trial_epochs"):
            value = getattr(self, name, 1)
            if value < 1:
                raise ValueError(f"{name}={value!r} is not allowed; it must be an integer >= 1")
        if getattr(self, "engine", None) == AUTO_ENGINE:
            object.__setattr__(self, "engine", "stacked" if torch.cuda.is_available() else "eager")
        if getattr(self, "engine", "eager") not in ENGINES:
            allowed = ", ".join(map(repr, (*ENGINES, AUTO_ENGINE)))
            raise ValueError(f"engine={self.engine!r} is not allowed; choose one of {allowed}")
        for name in ("train_size", "test_size"):
            value = getattr(self, name, None)
            if value is not None and value < 2:
                raise ValueError(f"{name}={value!r} is not allowed; use None (the whole split) or an integer >= 2")

    def _repr_html_(self) -> str:
        """In a notebook: one row per setting, so the chapter shows what it will run."""
        import html

        cells = ((html.escape(name), html.escape(repr(value))) for name, value in self.as_dict().items())
        rows = "".join(f"<tr><td>{name}</td><td>{value}</td></tr>" for name, value in cells)
        return f"<table><caption>{type(self).__name__}</caption>{rows}</table>"

    def as_dict(self) -> dict:
        """Plain values (mappings as dicts), for showing and for JSON."""
        return {
            item.name: dict(value) if isinstance(value := getattr(self, item.name), Mapping) else value
            for item in dataclasses.fields(self)
        }


@dataclass(frozen=True)
class IntroSettings(ChapterSettings):
    """Chapter 01: article 2's DNN experiment (15 epochs of augmented MNIST at two learning rates)."""

    seeds: int = 3
    epochs: int = 15
    lrs: tuple[float, ...] = (0.01, 0.1)
    batch_size: int = 100
    test_batch_size: int = 5000
    train_size: int | None = None
    test_size: int | None = None
    #: On a GPU a configuration's seeds and learning rates train as one stacked model (``vitbn_nb.stack``).
    engine: str = AUTO_ENGINE


@dataclass(frozen=True)
class ModelsSettings(ChapterSettings):
    """Chapter 02 trains nothing; its figures are measured on freshly built models."""


@dataclass(frozen=True)
class FixedLrSettings(ChapterSettings):
    """Chapter 03: article 1's Experiment 1, 30 epochs at each of three fixed learning rates."""

    seeds: int = 3
    epochs: int = 30
    lrs: tuple[float, ...] = (0.0005, 0.005, 0.01)
    #: The learning-rate sweep's further rates (``studies.lr_sweep``): the depth-6 trio trains at these too, from
    #: between the articles' rates to five times article 1's largest.
    sweep_lrs: tuple[float, ...] = (0.002, 0.02, 0.05)
    batch_size: int = 100
    test_batch_size: int = 5000
    train_size: int | None = None
    test_size: int | None = None


@dataclass(frozen=True)
class BayesOptSettings(ChapterSettings):
    """Chapter 04: 20 trials per model (article 1), each 3 epochs (the book's choice: article 1 does not say how
    long a trial trains), then 30 epochs with the best lr and batch size."""

    seeds: int = 3
    trials: int = 20
    trial_epochs: int = 3
    epochs: int = 30
    test_batch_size: int = 5000
    train_size: int | None = None
    test_size: int | None = None


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
    #: Not article 2's: further ViT-family models trained beside ViT and ViTBNFFN at one (depth, lr) the study trains,
    #: with as many seeds (``None``: none; at a (depth, lr) that ``depths`` lacks, none train and the chapter says so).
    #: DyT (Zhu et al., 2025) asks where a ViT with no normalisation stands.
    extra_models: tuple[str, ...] | None = ("ViTDyT",)
    extra_depth: int = 6
    extra_lr: float = 0.003
    #: On a GPU a configuration's seeds train as one stacked model (``vitbn_nb.stack``); the chapter shows no timings.
    engine: str = AUTO_ENGINE

    def __post_init__(self):
        super().__post_init__()
        for lr, depths in self.depths.items():
            if lr <= 0 or any(d < 1 for d in depths):
                raise ValueError(f"depths={dict(self.depths)!r} is not allowed; give {{lr > 0: [depth >= 1, ...]}}")
        if self.extra_models:
            from .models import VIT_FAMILY

            allowed = [m for m in VIT_FAMILY if m not in ("ViT", "ViTBNFFN")]  # those two train anyway
            if any(m not in allowed for m in self.extra_models):
                raise ValueError(f"extra_models={self.extra_models!r} is not allowed; choose from {', '.join(allowed)}")


@dataclass(frozen=True)
class TransferSettings(ChapterSettings):
    """Chapter 06: the depth-6 trio optimised again on augmented MNIST, 30 epochs each, and the CNN;
    10 timed passes over the transfer set (the reference ``eval_emnist.py``'s 10)."""

    seeds: int = 3
    reoptimise: bool = True
    trials: int = 20
    trial_epochs: int = 3
    epochs: int = 30
    depth: int = 6
    test_batch_size: int = 5000
    train_size: int | None = None
    test_size: int | None = None
    inference_repeats: int = 10
    cnn_lr: float = 1e-3
    cnn_batch_size: int = 100


@dataclass(frozen=True)
class ThreeThingsSettings(ChapterSettings):
    """Chapter 07: depth 6 (the reference ViT) and 12 against half the depth with 2 branches (Touvron et al.'s
    best branch count); fine-tuning at 56x56 starts from the depth-6 runs, 3 epochs at a lower lr."""

    seeds: int = 3
    models: tuple[str, ...] = ("ViT", "ViTBNFFN", "ViTBN")
    depths: tuple[int, ...] = (6, 12)
    branches: int = 2
    epochs: int = 10
    lr: float = 0.0005
    batch_size: int = 100
    test_batch_size: int = 5000
    train_size: int | None = None
    test_size: int | None = None
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


@dataclass(frozen=True)
class SpeedSettings(ChapterSettings):
    """Chapter 08 and ``python -m vitbn_nb bench``: article 1's batch sizes, timed steps after a warm-up."""

    #: Article 1's three, and ViTDyT (no normalisation; not the articles') timed beside them at equal depth.
    models: tuple[str, ...] = ("ViT", "ViTBNFFN", "ViTBN", "ViTDyT")
    depths: tuple[int, ...] = (1, 6)
    batch_size: int = 100
    test_batch_size: int = 5000
    steps: int = 50
    warmup: int = 10
    repeats: int = 5
    eval_batches: int = 2
    eval_warmup: int = 1
    train_size: int | None = None
    test_size: int | None = None
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
        from .models import VIT_FAMILY

        unknown = [m for m in self.models if m not in VIT_FAMILY]
        if unknown:
            raise ValueError(f"models={self.models!r} is not allowed; choose from {', '.join(VIT_FAMILY)}")
        if self.norm_seconds <= 0:
            raise ValueError(f"norm_seconds={self.norm_seconds!r} is not allowed; it must be a number > 0")
        for name in ("steps", "repeats", "eval_batches", "matmul_size", "matmul_repeats"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}={getattr(self, name)!r} is not allowed; it must be an integer >= 1")
        for name in ("warmup", "eval_warmup"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name}={getattr(self, name)!r} is not allowed; it must be an integer >= 0")
        if self.batch_size < 2:
            raise ValueError(f"batch_size={self.batch_size!r} is not allowed; BatchNorm training needs >= 2 images")
        if any(d < 1 for d in self.depths):
            raise ValueError(f"depths={self.depths!r} is not allowed; give depths >= 1")
        if self.train_size is not None and self.train_size < self.batch_size:
            raise ValueError(f"train_size={self.train_size!r} is not allowed; it must be at least batch_size")


SETTINGS: dict[str, type[ChapterSettings]] = {
    "01_batchnorm_intro": IntroSettings,
    "02_models": ModelsSettings,
    "03_fixed_lr": FixedLrSettings,
    "04_bayes_opt": BayesOptSettings,
    "05_depth_study": DepthSettings,
    "06_emnist_transfer": TransferSettings,
    "07_three_things": ThreeThingsSettings,
    "08_where_the_speed_comes_from": SpeedSettings,
}

#: How ``cpu`` and ``smoke`` differ from ``paper``, per chapter. The cost of each is measured by a book run
#: (``figures/manifest.json`` and the executed chapters' timings), not written here.
CHANGES: dict[str, dict[str, dict]] = {
    "paper": {},
    "cpu": {
        # The DNNs are tiny: chapter 01 keeps the article's whole protocol. On a CPU a stack trains slower per
        # run than one run alone (`train --dry-run` prints the ratio), so the CPU profiles train runs one by one.
        "01_batchnorm_intro": dict(engine="eager"),
        # Three seeds wherever a difference is judged, paid for with fewer steps: chapter 03's accuracy and stability
        # claims need the article's 30 epochs anyway, its timing ratios few. The learning-rate sweep shares these runs.
        "03_fixed_lr": dict(seeds=3, epochs=4, train_size=5000, test_size=2000),
        # 12 trials: Ax spends 5 on initialisation (the centre, then Sobol), so BoTorch proposes 7.
        "04_bayes_opt": dict(seeds=3, trials=12, trial_epochs=2, epochs=5, train_size=6000, test_size=2000),
        # Every depth of the three figures, three seeds each, 200 steps a run: article 2's findings are about
        # its 10-epoch runs, so these claims read "not testable at this scale"; the figures show early training.
        "05_depth_study": dict(seeds=3, epochs=4, train_size=5000, test_size=2000, engine="eager"),
        # Each depth-6 model tuned for itself on augmented MNIST (a short search), so that no model trains with
        # another's hyperparameters; one seed: its accuracy differences are shown, not judged.
        "06_emnist_transfer": dict(
            seeds=1,
            reoptimise=True,
            trials=8,
            trial_epochs=1,
            epochs=6,
            train_size=10000,
            test_size=2000,
            inference_repeats=5,
        ),
        # One seed: an illustration, its differences shown, not judged. 40 fine-tuning steps are few, so they use the
        # training lr; paper's 1,800 steps use a fine-tuning lr.
        "07_three_things": dict(
            seeds=1,
            depths=(6,),
            epochs=4,
            train_size=5000,
            test_size=2000,
            ft_epochs=2,
            ft_lr=0.0005,
            ft_train_size=2000,
            ft_test_size=1000,
            latency_batch=100,
            latency_repeats=10,
        ),
        # paper's 5 interleaved rounds: the rule judges a ratio from at least 3, and 5 narrow its interval (t = 2.8).
        "08_where_the_speed_comes_from": dict(
            steps=10,
            warmup=2,
            eval_batches=1,
            train_size=10000,
            test_size=5000,
            matmul_size=2048,
            matmul_repeats=5,
            norm_seconds=0.2,
        ),
    },
    "smoke": {
        "01_batchnorm_intro": dict(seeds=1, epochs=2, train_size=600, test_size=500, engine="eager"),
        "03_fixed_lr": dict(seeds=1, epochs=2, train_size=600, test_size=500, sweep_lrs=(0.05,)),
        # 3 trials stay inside Ax's initialisation: no BoTorch step (slow on a CPU); the chapter says so.
        "04_bayes_opt": dict(seeds=1, trials=3, trial_epochs=1, epochs=2, train_size=400, test_size=300),
        # Only the depths that give every figure content: Fig 8 (d6), Fig 9 (d1, d3), Fig 10 (d3 at both lrs).
        "05_depth_study": dict(
            seeds=1, epochs=2, train_size=400, test_size=300, depths={0.003: (3, 6), 0.005: (1, 3)}, engine="eager"
        ),
        "06_emnist_transfer": dict(
            seeds=1,
            reoptimise=False,
            trials=3,
            trial_epochs=1,
            epochs=1,
            train_size=400,
            test_size=300,
            inference_repeats=2,
        ),
        # Depth 2 against 1 x 2 branches: every run, figure and table, in well under a minute.
        "07_three_things": dict(
            seeds=1,
            depths=(2,),
            epochs=1,
            train_size=300,
            test_size=200,
            ft_epochs=1,
            ft_train_size=200,
            ft_test_size=200,
            latency_batch=16,
            latency_repeats=3,
        ),
        # Every measurement and output on tiny batches (the numbers mean nothing).
        "08_where_the_speed_comes_from": dict(
            batch_size=16,
            test_batch_size=128,
            steps=2,
            warmup=1,
            repeats=2,
            eval_batches=1,
            eval_warmup=0,
            train_size=256,
            test_size=128,
            matmul_size=256,
            matmul_repeats=2,
            norm_seconds=0.01,
            count_depths=(1, 6),
        ),
    },
}


def resolve(profile: str) -> str:
    """``'auto'`` becomes ``'paper'`` where a GPU is present and ``'cpu'`` otherwise."""
    if profile == "auto":
        return "paper" if torch.cuda.is_available() else "cpu"
    if profile not in PROFILE_NAMES:
        raise ValueError(
            f"profile={profile!r} is not allowed; choose one of 'auto', {', '.join(map(repr, PROFILE_NAMES))}"
        )
    return profile


def settings(chapter: str, profile: str = "auto", **overrides) -> ChapterSettings:
    """The settings of ``chapter`` under ``profile``; overrides that are not ``None`` win.

    An unknown name or an ill-typed value raises ``ValueError`` naming the field.
    """
    profile = resolve(profile)
    if chapter not in SETTINGS:
        raise ValueError(f"chapter={chapter!r} has no settings; known chapters: {', '.join(SETTINGS)}")
    kind = SETTINGS[chapter]
    names = {item.name for item in dataclasses.fields(kind)} - {"profile"}
    unknown = set(overrides) - names
    if unknown:
        raise ValueError(f"unknown setting(s) {sorted(unknown)} for {chapter}; it takes {sorted(names)}")
    chosen = {**CHANGES[profile].get(chapter, {}), **{k: v for k, v in overrides.items() if v is not None}}
    return kind(profile=profile, **chosen)


def flag(name: str, value) -> bool:
    """A yes/no parameter as papermill or a Lab user may give it: a bool, or the string 'true' / 'false'.

    Papermill's ``-p force false`` arrives as the string ``'false'``, which Python reads as true: taken
    as it is, it would delete and retrain every run of a chapter. Anything else is refused by name.
    """
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise ValueError(f"{name}={value!r} is not allowed; give True or False (or the strings 'true' / 'false')")
