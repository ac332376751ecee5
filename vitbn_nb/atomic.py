"""Writes that never leave a half-written file: write a sibling temporary, then rename over."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

import torch


def write_with(path: Path, write: Callable[[BinaryIO], object]) -> None:
    """``write(file)`` into a temporary beside ``path``, synced, then renamed over ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_bytes(path: Path, data: bytes) -> None:
    write_with(path, lambda f: f.write(data))


def write_text(path: Path, text: str) -> None:
    write_bytes(path, text.encode())


def write_json(path: Path, obj) -> None:
    write_text(path, json.dumps(obj, indent=1, allow_nan=True, default=str) + "\n")


def torch_save(obj, path: Path) -> None:
    write_with(path, lambda f: torch.save(obj, f))
