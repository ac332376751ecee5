"""Chapter 02's settings: the ``paper`` protocol as the defaults, ``cpu`` and ``smoke`` as differences."""

from __future__ import annotations

from dataclasses import dataclass

from ...profiles import ChapterSettings


@dataclass(frozen=True)
class ModelsSettings(ChapterSettings):
    """Chapter 02 trains nothing; its figures are measured on freshly built models."""

    chapter = "02_models"  # its notebook's name (a class attribute, not a setting)


CPU: dict = {}

SMOKE: dict = {}
