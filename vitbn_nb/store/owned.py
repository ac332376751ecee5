"""Working folders owned by the live process that made them (an import's ``.import-*`` folder in the run store).

Before such a folder exists, its owner takes an OS lock (``flock``) on a lock file among the store's run locks
(``.locks/<folder name>.lock``) and holds it for the folder's whole life. The operating system lets go of that lock
when the process ends, however it ends (kill -9 included), so a lock another process can take means an owner that
is gone. Another command therefore cleans up only folders whose owner is gone (:func:`taken_over`), never one a
live process is still working in, and two commands cleaning up at once never clean the same folder twice: the
first one holds the lock while it works.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

#: The store's lock folder, shared with the run locks (``run_folder.run_lock``); run ids never begin with a dot, so
#: a working folder's lock (``.import-*.lock``) is never a run's.
LOCKS = ".locks"


def _lock_path(folder: Path) -> Path:
    return folder.parent / LOCKS / f"{folder.name}.lock"


def _try_lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


@contextlib.contextmanager
def owned_folder(parent: Path, prefix: str) -> Iterator[Path]:
    """A new folder ``parent/<prefix><random>``, owned by this process until the block ends.

    The lock is taken before the folder is made and let go after the block, so the folder never exists unowned
    while this process lives. The block decides what becomes of the folder (removed, or left for
    :func:`taken_over` to finish); the lock file goes when the block ends."""
    folder = Path(parent) / f"{prefix}{uuid.uuid4().hex[:12]}"
    lock = _lock_path(folder)
    lock.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # a new file: nobody else holds it
        folder.mkdir()
        yield folder
    finally:
        lock.unlink(missing_ok=True)  # before letting go: a folder left behind then reads as ownerless
        os.close(fd)


def is_owned(folder: Path) -> bool:
    """Whether a live process owns ``folder`` (read only: nothing is created or removed)."""
    try:
        fd = os.open(_lock_path(folder), os.O_RDONLY)
    except FileNotFoundError:
        return False  # the lock comes before the folder and goes after it: no lock file, no owner
    except OSError:
        return True  # cannot tell: assume someone is at work rather than call it abandoned
    try:
        if not _try_lock(fd):
            return True
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)


@contextlib.contextmanager
def taken_over(folder: Path) -> Iterator[bool]:
    """Whether ``folder`` is this process's to clean up: True when its owner is gone and the folder is still there.
    Then this process holds the folder's lock until the block ends (no other command cleans it at the same time),
    and the lock file is removed with it. False for a folder a live process owns, or one that cannot be locked
    (a store this process cannot write: nothing could be cleaned there anyway)."""
    lock = _lock_path(folder)
    try:
        lock.parent.mkdir(parents=True, exist_ok=True)
        # Created when missing: a folder left by a version of the book that took no lock, or whose lock file was
        # deleted by hand, is taken over by one process only.
        fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError:
        yield False
        return
    held = False
    try:
        held = _try_lock(fd)
        yield held and folder.is_dir()  # the owner may have finished (and removed it) since it was seen
    finally:
        if held:
            lock.unlink(missing_ok=True)
        os.close(fd)
