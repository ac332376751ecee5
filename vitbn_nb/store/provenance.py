"""Where a stored run came from, kept beside its record as ``provenance.json``, a file no bundle carries (an export
leaves it out, an import refuses it): a run trained by this store has none and is trusted; a run imported from a
bundle is *unverified* until ``runs verify`` replays it (:mod:`vitbn_nb.engines.replay`), and ``campaign commit``
commits only trusted or verified runs, with this file beside the committed record, so the claims page says which
committed records were verified where.

A record's checksum proves a file is whole, not that a run happened: anyone can seal a record anew. What a replay
checks is what the record says the run did, so the note names the record's training (the record without the
measurements ``campaign measure`` adds later), and a record changed in anything else is unverified again."""

from __future__ import annotations

import contextlib
import hashlib
import json
from pathlib import Path

from .. import atomic
from .records import RunStoreError, read_record

FILE = "provenance.json"
TRAINED_HERE, UNVERIFIED, VERIFIED, REFUSED = "trained here", "imported, unverified", "verified", "refused"


def training_digest(record: dict) -> str:
    """What a replay vouches for: the record without its checksum and its added measurements."""
    body = {k: v for k, v in record.items() if k not in ("record_sha256", "measurements")}
    return hashlib.sha256(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest()


def read(folder: Path) -> dict | None:
    """A run folder's provenance note, or None (trained by the store that holds it). One that cannot be read is
    treated as an import never verified: it cannot vouch for anything."""
    path = Path(folder) / FILE
    if not path.is_file() or path.is_symlink():
        return None
    try:
        note = json.loads(path.read_text())
    except (OSError, ValueError):
        return {"imported": None}
    return note if isinstance(note, dict) else {"imported": None}


def status(folder: Path, record: dict | None = None) -> str:
    """:data:`TRAINED_HERE`, :data:`UNVERIFIED`, :data:`VERIFIED` or :data:`REFUSED` for the run in ``folder``."""
    note = read(folder)
    if note is None:
        return TRAINED_HERE
    record = read_record(folder) if record is None else record
    replay = note.get("replay")
    if not isinstance(replay, dict) or replay.get("training") != training_digest(record):
        return UNVERIFIED if "imported" in note else TRAINED_HERE
    return VERIFIED if replay.get("passed") is True else REFUSED


def note_imported(folder: Path, record: dict, bundle_digest: str, when: str) -> None:
    """Mark a run just moved in from a bundle: unverified until replayed."""
    atomic.write_json(Path(folder) / FILE, {"imported": when, "bundle_sha256": bundle_digest})


def note_replay(folder: Path, record: dict, replay: dict) -> None:
    """Keep a replay's outcome (``passed``, where and how it was compared) in the run's note."""
    note = read(folder) or {}
    atomic.write_json(Path(folder) / FILE, {**note, "replay": {**replay, "training": training_digest(record)}})


def describe(note: dict | None) -> str:
    """One line of a committed note for the claims page: where and how the run was verified."""
    replay = note.get("replay") if isinstance(note, dict) and isinstance(note.get("replay"), dict) else {}
    if replay.get("passed") is not True:
        return TRAINED_HERE if note is None or "imported" not in note else UNVERIFIED
    return f"replayed on {replay.get('on', 'an unknown machine')} ({replay.get('how', 'compared')})"


def waiting(store: Path) -> list[str]:
    """The runs of ``store`` imported from a bundle and not replayed since (or changed since their replay)."""
    store = Path(store)
    folders = sorted(p for p in store.iterdir() if not p.name.startswith(".")) if store.is_dir() else []
    found = []
    for folder in folders:
        if (folder / FILE).is_file() and (folder / "record.json").is_file():
            with contextlib.suppress(RunStoreError):
                if status(folder) == UNVERIFIED:
                    found.append(folder.name)
    return found
