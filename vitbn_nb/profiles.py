"""The three scales of the book and what every chapter's settings share: ``paper`` (the articles' protocol, 3 seeds)
is the default; ``cpu`` (the whole book on a 2-core laptop in under two hours) and ``smoke`` (only proves everything
runs) are differences from it. A ``train_size`` / ``test_size`` of ``None`` means the whole split."""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass

import torch

PROFILE_NAMES = ("smoke", "cpu", "paper")
#: Larger profiles' results are not replaced by smaller ones without asking.
PROFILE_SIZE = {name: size for size, name in enumerate(PROFILE_NAMES)}
#: How a run trains: alone, or stacked with the runs that differ from it only in seed and lr (``engines.stack``).
ENGINES = ("eager", "stacked")
#: A setting's engine "auto" follows the device: stacked on a GPU, alone on a CPU (where a stack trains each run
#: slower; ``train --dry-run`` prints the calibrated ratio).
AUTO_ENGINE = "auto"


#: Each plain type a setting may have: what it accepts, and its name in an error.
_PLAIN = {
    type(None): (lambda v: v is None, "None"),
    bool: (lambda v: isinstance(v, bool), "True or False"),
    int: (lambda v: isinstance(v, int) and not isinstance(v, bool), "an integer"),
    float: (lambda v: isinstance(v, (int, float)) and not isinstance(v, bool), "a number"),
    str: (lambda v: isinstance(v, str), "a string"),
}


def _check_value(name: str, value, kind):
    """``value`` converted to ``kind`` (a list to a tuple, an int to a float), or a ValueError naming ``name``."""
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin in (typing.Union, types.UnionType):
        for option in args:
            with contextlib.suppress(ValueError):
                return _check_value(name, value, option)
    elif kind in _PLAIN:
        if _PLAIN[kind][0](value):
            return float(value) if kind is float else value
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


def _given_value(name: str, value, kind):
    """``value`` checked as :func:`_check_value` does; a string that is not allowed as it is (``-p epochs 3`` from the
    command line, ``--set fig8_depths=[4,5]``) is read as a Python literal first, so that one syntax serves papermill,
    the command line and code."""
    try:
        return _check_value(name, value, kind)
    except ValueError:
        if not isinstance(value, str):
            raise
        text = value.strip()
        text = {"true": "True", "false": "False", "none": "None"}.get(text.lower(), text)  # papermill's 'false'
        try:
            literal = ast.literal_eval(text)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            raise ValueError(f"{name}={value!r} is not allowed; it must be {_describe(kind)}") from None
        return _check_value(name, literal, kind)


def parse_assignment(text: str) -> tuple[str, str]:
    """``"epochs=3"`` as ``("epochs", "3")``: a setting given on the command line (``--set NAME=VALUE``); the value is
    read where the settings are built (:func:`_given_value`)."""
    name, equals, value = str(text).partition("=")
    if not equals or not name.strip().isidentifier():
        raise ValueError(f"--set {text!r} is not allowed; give NAME=VALUE, e.g. --set epochs=3")
    return name.strip(), value.strip()


def _describe(kind) -> str:
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_describe(option) for option in args)
    if origin is tuple:
        return f"a non-empty list, each {_describe(args[0])}"
    if origin in (Mapping, dict):
        return f"a non-empty mapping, each key {_describe(args[0])} and each value {_describe(args[1])}"
    return _PLAIN[kind][1]


def check_run_fields(obj, counts=("epochs", "batch_size", "test_batch_size")) -> None:
    """The fields a chapter's settings pass to its runs, checked alike in the settings and in a ``RunConfig``."""
    for name in counts:
        value = getattr(obj, name, 1)
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{name}={value!r} is not allowed; it must be an integer >= 1")
    if getattr(obj, "engine", "eager") not in ENGINES:
        allowed = (*ENGINES, AUTO_ENGINE) if isinstance(obj, ChapterSettings) else ENGINES
        raise ValueError(f"engine={obj.engine!r} is not allowed; choose one of {', '.join(map(repr, allowed))}")
    for name in ("train_size", "test_size"):
        value = getattr(obj, name, None)
        if value is not None and (not isinstance(value, int) or value < 2):
            raise ValueError(f"{name}={value!r} is not allowed; use None (the whole split) or an integer >= 2")


class ParameterError(ValueError):
    """A chapter's parameter (``profile``, ``force``, a setting) refused. In a notebook (Jupyter, papermill) its one
    sentence is the cell's whole output, not a traceback through the book's code: IPython shows what
    ``_render_traceback_`` returns."""

    def _render_traceback_(self) -> list[str]:
        return [str(self)]


@dataclass(frozen=True)
class ChapterSettings:
    """What every chapter's settings share: the profile they come from, and type checks on every field. ``chapter``
    (a class attribute, not a field) names the chapter; its results read it there."""

    chapter = ""
    profile: str = "paper"
    #: False: read every run from the run store (or the committed records), never train one; a run it lacks is an
    #: error naming the run. A decision of this rendering, not of the protocol: it travels with the settings.
    train: bool = True

    def __post_init__(self):
        hints = typing.get_type_hints(type(self))
        for item in dataclasses.fields(self):
            value = _given_value(item.name, getattr(self, item.name), hints[item.name])
            object.__setattr__(self, item.name, value)
        if getattr(self, "engine", None) == AUTO_ENGINE:
            object.__setattr__(self, "engine", "stacked" if torch.cuda.is_available() else "eager")
        check_run_fields(self, ("seeds", "epochs", "batch_size", "test_batch_size", "trials", "trial_epochs"))

    def _repr_html_(self) -> str:
        """In a notebook: one row per setting, so the chapter shows what it will run."""
        import html

        cells = ((html.escape(name), html.escape(repr(value))) for name, value in self.as_dict().items())
        rows = "".join(f"<tr><td>{name}</td><td>{value}</td></tr>" for name, value in cells)
        note = f"<p><b>{html.escape(note)}</b></p>" if (note := self.scale_note()) else ""
        return f"{note}<table><caption>{type(self).__name__}</caption>{rows}</table>"

    def scale_note(self) -> str:
        """Where a smaller profile's chapter shows the ``paper`` protocol's runs too (``full_protocol_lrs``): at which
        rates, and the protocol those outputs read, so that a settings table never stands alone above them."""
        lrs = getattr(self, "full_protocol_lrs", None)
        if not lrs or self.profile == "paper":
            return ""
        paper = type(self)()  # the defaults are the paper protocol
        shown = ("epochs", "train_size", "test_size", "seeds")
        differ = [
            f"{name} {getattr(paper, name)!r}"
            for name in shown
            if getattr(paper, name, None) != getattr(self, name, None)
        ]
        rates = ", ".join(f"{lr:g}" for lr in lrs)
        return (
            f"At lr {rates} this chapter shows the paper protocol's runs ({', '.join(differ)}; None: the whole split): "
            f"those rates' figures, tables and claims read them; the settings below ({self.profile}) are the rest's"
        )

    def as_dict(self) -> dict:
        """Plain values (mappings as dicts), for showing and for JSON."""
        return {
            item.name: dict(value) if isinstance(value := getattr(self, item.name), Mapping) else value
            for item in dataclasses.fields(self)
        }


def resolve(profile: str) -> str:
    """``'auto'`` becomes ``'paper'`` where a GPU is present and ``'cpu'`` otherwise."""
    if profile == "auto":
        return "paper" if torch.cuda.is_available() else "cpu"
    if profile not in PROFILE_NAMES:
        raise ValueError(
            f"profile={profile!r} is not allowed{did_you_mean(profile, ('auto', *PROFILE_NAMES))}; choose one of "
            f"'auto', {', '.join(map(repr, PROFILE_NAMES))}"
        )
    return profile


def did_you_mean(given, known, cutoff: float = 0.5) -> str:
    """``" (did you mean 'paper'?)"`` for a near miss among ``known`` names, else ''."""
    import difflib

    close = difflib.get_close_matches(str(given), [str(k) for k in known], n=1, cutoff=cutoff)
    return f" (did you mean {close[0]!r}?)" if close else ""


def flag(name: str, value) -> bool:
    """A yes/no parameter as a bool, from a bool or papermill's string 'true' / 'false' (``-p force false`` taken as
    it is would read as true and retrain every run); anything else is refused by name."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise ValueError(f"{name}={value!r} is not allowed; give True or False (or the strings 'true' / 'false')")
