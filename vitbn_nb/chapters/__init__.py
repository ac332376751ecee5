"""The book's chapters, one folder each (its ``settings``, ``study`` and the modules only it uses), and their one
registry."""

from __future__ import annotations

import dataclasses
import hashlib
import re
from importlib import import_module
from types import ModuleType
from typing import Any

from ..profiles import ChapterSettings, ParameterError, did_you_mean, flag, resolve
from ..store import run_folder
from .architectures import settings as architectures
from .batchnorm_intro import settings as batchnorm_intro
from .bayes_opt import settings as bayes_opt
from .depth_study import settings as depth_study
from .emnist_transfer import settings as emnist_transfer
from .fixed_lr import settings as fixed_lr
from .speed import settings as speed
from .three_things import settings as three_things


def _settings_class(module: ModuleType) -> type[ChapterSettings]:
    (kind,) = [v for v in vars(module).values() if isinstance(v, type) and v.__module__ == module.__name__]
    return kind


#: Every chapter in the book's order: its name (its notebook's, held by its settings class) and its settings module.
CHAPTERS: dict[str, ModuleType] = {
    _settings_class(module).chapter: module
    for module in (
        batchnorm_intro,
        architectures,
        fixed_lr,
        bayes_opt,
        depth_study,
        emnist_transfer,
        three_things,
        speed,
    )
}


#: Each chapter's settings class.
SETTINGS: dict[str, type[ChapterSettings]] = {chapter: _settings_class(module) for chapter, module in CHAPTERS.items()}


def changes(chapter: str, profile: str) -> dict:
    """How ``profile`` differs from ``paper`` for ``chapter`` (its settings module's ``CPU`` or ``SMOKE``)."""
    return {} if profile == "paper" else dict(getattr(CHAPTERS[chapter], profile.upper()))


#: The fields of every chapter's settings that say how this rendering goes, not what the protocol is: a value given by
#: hand for one of them leaves a chapter's outputs where they would be.
NOT_PROTOCOL = ("profile", "train", "full_protocol_lrs")


def settings(chapter: str, profile: str = "auto", **overrides) -> ChapterSettings:
    """The settings of ``chapter`` under ``profile``; overrides that are not ``None`` win (a string is read as a
    Python literal where the field is not a string: ``"3"``, ``"[4, 5]"``). An unknown name or an ill-typed value
    raises ``ValueError`` naming the field."""
    profile = resolve(profile)
    if chapter not in CHAPTERS:
        raise ValueError(f"chapter={chapter!r} has no settings; known chapters: {', '.join(CHAPTERS)}")
    names = setting_names(chapter)
    unknown = sorted(set(overrides) - set(names))
    if unknown:
        raise ValueError(
            f"{chapter} has no setting {unknown[0]!r}{did_you_mean(unknown[0], names)}; it takes {', '.join(names)}"
        )
    chosen = {**changes(chapter, profile), **{k: v for k, v in overrides.items() if v is not None}}
    return SETTINGS[chapter](profile=profile, **chosen)


def setting_names(chapter: str) -> list[str]:
    """The settings a chapter takes by name (a papermill parameter, ``--set NAME=VALUE``): every field but the
    profile, which is named on its own."""
    return [item.name for item in dataclasses.fields(SETTINGS[chapter]) if item.name != "profile"]


def variant(chosen: ChapterSettings) -> str:
    """How ``chosen`` departs from its profile's protocol, as a folder name (``"epochs-3"``), or '' where it does not:
    such a chapter's outputs are a variant's, never the book's ``figures/``."""
    chapter = chosen.chapter
    base = settings(chapter, chosen.profile)
    changed = [
        (name, getattr(chosen, name))
        for name in setting_names(chapter)
        if name not in NOT_PROTOCOL and getattr(chosen, name) != getattr(base, name)
    ]
    if not changed:
        return ""
    words = "_".join(f"{name}-{value!r}" for name, value in changed)
    words = re.sub(r"[^\w.-]+", "", words.replace(", ", "-"))
    if len(words) > 60:  # a folder name stays short: the changes' digest beside the first one's name
        words = f"{changed[0][0]}-and-{len(changed) - 1}-more-{hashlib.sha1(words.encode()).hexdigest()[:8]}"
    return words


def parameters(chapter: str, profile: str = "auto", force=False, given=None, **flags) -> tuple:
    """A notebook's parameters read once: ``(settings, force, *flags)``, each yes/no flag as a bool (papermill's
    ``-p force false`` arrives as the string 'false'); ``given``: settings by name (a notebook's parameters, ``--set``).
    ``"auto"`` shows what the book shows, the largest profile whose runs are held (:func:`evidence_profile`), and
    trains nothing; a profile named trains what it lacks (unless ``train=False`` is given). A protocol setting given
    by hand makes ``auto`` this machine's own profile: the runs held are the protocol's, not the variant's."""
    _KEPT_PLANS.clear()  # what an earlier reading kept is not this one's (the store may have changed since)
    try:
        given = {k: v for k, v in dict(given or {}).items() if v is not None}
        asked, profile = profile, resolve(profile)
        protocol_given = set(given) - set(NOT_PROTOCOL)
        if asked == "auto" and not protocol_given and (held := evidence_profile(chapter, profile)) != profile:
            print(
                f"profile 'auto': {chapter} shows the {held} runs the book shows (held, so nothing trains); "
                f"profile='{profile}' trains its own {profile} runs"
            )
            profile, given = held, {**given, "train": False}
        held = full_protocol_lrs(chapter, profile)
        chosen = settings(chapter, profile, **({"full_protocol_lrs": held} if held else {}) | given)
        if where := variant(chosen):
            print(
                f"{chapter}: settings given by hand ({where}) differ from the {chosen.profile} protocol: its runs are "
                "their own, and a book run writes its outputs to a folder of their own, never figures/"
            )
        return chosen, *(flag(name, value) for name, value in {"force": force, **flags}.items())
    except ValueError as error:  # the sentence that names the parameter, as the cell's only output
        raise ParameterError(str(error)) from None


#: What a notebook's namespace holds that is not a parameter (IPython's own names).
_NOT_PARAMETERS = {"In", "Out", "exit", "quit", "get_ipython", "open"}


def from_notebook(chapter: str, namespace: dict, *flags: str) -> tuple:
    """:func:`parameters` from a notebook's namespace (``globals()``): ``profile``, ``force``, the ``flags`` named and
    every setting of the chapter its parameters cell declares (``None``: the profile's value), as papermill's ``-p``
    sets them. A plain value under a name close to a setting's is refused with its likely meaning (a misspelt
    ``-p epoch 3`` would otherwise train the profile's epochs)."""
    from ..publishing import figures  # matplotlib and seaborn: a notebook's, not the chapter registry's

    figures.plain_tables()  # the tables its cells show, as its saved ones
    names = setting_names(chapter)
    known = {"profile", "force", *flags, *names}
    for name, value in namespace.items():
        plain = value is None or isinstance(value, (bool, int, float, str, list, tuple))
        if name in known or name.startswith("_") or name in _NOT_PARAMETERS or not plain:
            continue
        if near := did_you_mean(name, names, cutoff=0.8):
            raise ParameterError(f"{chapter} has no setting {name!r}{near}; it takes {', '.join(names)}")
    given = {name: namespace[name] for name in names if namespace.get(name) is not None}
    extra = {name: namespace.get(name, False) for name in flags}
    return parameters(chapter, namespace.get("profile", "auto"), namespace.get("force", False), given, **extra)


def full_protocol_lrs(chapter: str, profile: str) -> tuple[float, ...]:
    """The lrs at which a ``cpu`` rendering of a chapter with ``full_protocol_lrs`` takes the ``paper`` runs: those
    whose every ``paper`` run the run store or the committed records hold finished."""
    fields = {item.name for item in dataclasses.fields(SETTINGS[chapter])} if chapter in CHAPTERS else set()
    if profile != "cpu" or "full_protocol_lrs" not in fields:
        return ()
    paper = settings(chapter, "paper")
    planned = _kept_plan(paper)
    at = lambda lr: [config for config in planned if abs(config.lr - lr) <= 1e-12 * max(1.0, abs(lr))]
    return tuple(lr for lr in paper.lrs if at(lr) and not run_folder.missing_runs(at(lr)))


def evidence_profile(chapter: str, profile: str) -> str:
    """The profile a chapter renders at in a ``cpu`` book: ``paper`` once every run of its ``paper`` plan's first
    ``seeds`` seeds is held (a seed plan's further seeds are read where held; a chapter that optimises first, once
    its searches are complete and their final runs held), else ``profile``."""
    if profile != "cpu" or chapter not in CHAPTERS:
        return profile
    paper = settings(chapter, "paper")
    planned = _kept_plan(paper)
    if getattr(planned, "optimisations", None):
        return "paper" if _optimised_and_retrained(chapter, paper, planned.optimisations) else profile
    if not planned:
        return profile
    first = [c for c in planned if c.seed < getattr(paper, "seeds", c.seed + 1)]
    return "paper" if not run_folder.missing_runs(first) else profile


def _optimised_and_retrained(chapter: str, paper: ChapterSettings, studies: list) -> bool:
    """Whether every search of a chapter's ``paper`` plan is complete and every final run it leads to is held (a
    chapter whose final runs are not its ``final_plan``'s is never upgraded)."""
    import pandas as pd  # heavy: the registry is imported by every command, this check by few

    from .. import hpo  # heavy (torch), as the chapters' studies are: imported on demand like them
    from ..system import pick_device  # torch, likewise

    module, device = study(chapter), pick_device(None).type
    if not hasattr(module, "final_plan"):
        return False
    if not all(hpo.search_complete(s, paper.trials, device) for s in studies):
        return False
    trials = pd.concat([hpo.read_trials(s, paper.trials, device) for s in studies], ignore_index=True)
    return not run_folder.missing_runs(module.final_plan(trials, paper))


#: The plans computed while a chapter's scale was chosen (:func:`evidence_profile`), kept for its run to take once.
_KEPT_PLANS: dict[tuple, Any] = {}


def _plan_key(chosen: ChapterSettings) -> tuple:
    """What a plan depends on: the chapter, the profile and every protocol setting (not ``train``)."""
    names = [n for n in setting_names(chosen.chapter) if n not in NOT_PROTOCOL]
    return (chosen.chapter, chosen.profile, *(repr(getattr(chosen, n)) for n in names))


def _kept_plan(chosen: ChapterSettings):
    """The chapter's plan under ``chosen``, computed once while this rendering chooses its scale."""
    key = _plan_key(chosen)
    if key not in _KEPT_PLANS:
        _KEPT_PLANS[key] = study(chosen.chapter).plan(chosen)
    return _KEPT_PLANS[key]


def planned(chosen: ChapterSettings, compute):
    """A chapter's plan for its run: the one computed while choosing its scale (handed on, and taken once: a later run
    plans anew, after whatever training changed), else ``compute(chosen)``."""
    found = _KEPT_PLANS.pop(_plan_key(chosen), None)
    return found if found is not None else compute(chosen)


def study(chapter: str) -> ModuleType:
    """The chapter's ``study`` module (imported on demand: a chapter's plan and views load torch and matplotlib)."""
    return import_module(f"{CHAPTERS[chapter].__package__}.study")


def part(chapter: str, name: str) -> ModuleType:
    """A module of the chapter's folder other than its study (chapter 07's parts)."""
    return import_module(f"{CHAPTERS[chapter].__package__}.{name}")


def names(selected: list[str] | None = None) -> list[str]:
    """Chapter names from numbers or names (``3``, ``"03"``, ``"03_fixed_lr"``); all when ``selected`` is None."""
    if not selected:
        return list(CHAPTERS)
    found = []
    for wanted in selected:
        key = f"{int(wanted):02d}" if str(wanted).isdigit() else str(wanted)
        matches = [c for c in CHAPTERS if c == key or c[:2] == key]
        if not matches:
            near = did_you_mean(key, [*CHAPTERS, *(c.split("_", 1)[1] for c in CHAPTERS)])
            raise ValueError(f"chapters: {wanted!r} is not a chapter{near}; choose from {', '.join(CHAPTERS)}")
        found += [m for m in matches if m not in found]
    return found


class Plan(list):
    """The run configurations a chapter trains (a list), plus the optimisations (``hpo.Study`` objects) that choose
    further runs; ``then`` says in words what their best trials lead to."""

    def __init__(self, configs=(), *, optimisations: list[Any] | None = None, then: str = ""):
        super().__init__(configs)
        self.optimisations = list(optimisations or [])
        self.then = then
