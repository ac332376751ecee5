"""Writes that never leave a half-written file: a sibling temporary, synced, then renamed over. A failed write
raises :class:`WriteError` naming the file, which is left as it was."""

from __future__ import annotations

import errno
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

import torch


class WriteError(OSError):
    """A file could not be written; what it would have replaced is untouched."""


def write_with(path: Path, write: Callable[[BinaryIO], object]) -> None:
    path = Path(path)
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as error:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
        if not isinstance(error, (OSError, RuntimeError)):  # torch's zip writer reports a full disk as a RuntimeError
            raise
        number = getattr(error, "errno", None)
        if isinstance(error, RuntimeError):  # torch's zip writer, in its own internals' words
            number = errno.ENOSPC if _nearly_full(path.parent) else None
            reason = "no space left on device" if number else "torch could not write it"
        else:
            reason = getattr(error, "strerror", None) or str(error).splitlines()[0]
        failure = WriteError(f"{path} could not be written ({reason}); it is unchanged; {write_fix(path, error)}")
        failure.errno = number
        raise failure from error


def _nearly_full(folder: Path) -> bool:
    """Whether the disk under ``folder`` has (almost) no room left: why a write torch reports without an errno
    failed."""
    try:
        return shutil.disk_usage(folder).free < 64 * 2**20
    except OSError:
        return False


def write_fix(path: Path, error: BaseException) -> str:
    """The fix for a file that could not be written: a folder made writable, or space freed (torch reports a full disk
    with no error number)."""
    if getattr(error, "errno", None) in (errno.EROFS, errno.EACCES, errno.EPERM):
        return (
            f"fix: make {Path(path).parent} writable (or point the VITBN_*_DIR setting that chose it at a writable "
            "folder) and run the same command again"
        )
    return f"fix: free some disk space where {Path(path).parent} lies, then run the same command again"


def write_bytes(path: Path, data: bytes) -> None:
    write_with(path, lambda f: f.write(data))


def write_text(path: Path, text: str) -> None:
    write_bytes(path, text.encode())


def write_json(path: Path, obj) -> None:
    write_text(path, json.dumps(obj, indent=1, allow_nan=True, default=str) + "\n")


def torch_save(obj, path: Path) -> None:
    write_with(path, lambda f: torch.save(obj, f))
