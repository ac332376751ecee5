"""Moving runs between machines: ``python -m vitbn_nb runs export FILE`` / ``runs import FILE``.

A bundle is a ``.tar.gz`` of the run store's records, its optimisation state (``hpo/``), the checkpoints
of unfinished runs (so training resumes on the other machine) and, with ``weights="needed"``, only the
weights the other machine still loads (:func:`needed_weights`): what chapters 06 and 07 measure of
their trained runs travels in the records (``runs.measured``), so their weights stay behind once
measured. ``weights="all"`` takes every finished run's weights. Importing verifies every record and
weight file, never overwrites a finished run with a different one (it names the conflict), and
replaces an unfinished run only by the same run further on.
"""

from __future__ import annotations

import io
import json
import shutil
import tarfile
import tempfile
from pathlib import Path

from . import atomic, profiles
from .paths import runs_dir
from .records import RunStoreError, read_record, sha256, write_record
from .runs import Run, RunConfig, run_lock

WEIGHTS = ("needed", "all")


def _run_folders(store: Path) -> list[Path]:
    return sorted(p for p in store.iterdir() if p.is_dir() and (p / "record.json").is_file()) if store.is_dir() else []


def _measured_plans(profile: str) -> list[RunConfig]:
    """The runs of the chapters that measure trained runs (``train.MEASURED_BY``) under ``profile``; chapter 06's
    final runs follow from its stored hyperparameters (read, never optimised here)."""
    from .studies import three_things, transfer

    settings = profiles.settings("06_emnist_transfer", profile)
    return [
        *three_things.plan(profiles.settings("07_three_things", profile)),
        *transfer.plan(settings),
        *transfer.stored_runs(settings),
    ]


def needed_weights(profile: str, store: Path | None = None) -> set[str]:
    """Run ids whose ``model.pt`` the receiving machine loads: the app's choice; the source of every fine-tuning run
    not finished yet (stored or planned), to train it there; and each run of the measuring chapters that has no
    stored measurement yet, which a render there would take. Measured runs travel as records alone."""
    from .app import model_choice

    store = Path(store) if store is not None else runs_dir()
    stored = {folder.name: read_record(folder) for folder in _run_folders(store)}
    ended = {run_id for run_id, record in stored.items() if record["status"] in ("finished", "diverged")}
    needed = {r["config"]["init_from"] for i, r in stored.items() if r["config"].get("init_from") and i not in ended}
    choice = model_choice(store)
    if choice is not None:
        needed.add(choice.run_id)
    device_types = {record["hardware"]["device"] for record in stored.values()}
    for config in _measured_plans(profile):
        ids = {config.run_id(device) for device in device_types} & ended
        if config.init_from and not ids:
            needed.add(config.init_from)
        needed |= {run_id for run_id in ids if not stored[run_id].get("measurements")}
    return needed


def export(
    file: str | Path, *, profile: str = "auto", weights: str = "needed", store: str | Path | None = None
) -> dict:
    """Write the bundle ``file`` (atomically); returns what it holds (runs, weight files, bytes)."""
    if weights not in WEIGHTS:
        raise ValueError(f"weights={weights!r} is not allowed; choose one of {', '.join(map(repr, WEIGHTS))}")
    store = Path(store) if store is not None else runs_dir()
    keep = needed_weights(profiles.resolve(profile), store) if weights == "needed" else None
    members: list[tuple[Path, str]] = []
    counts = {"runs": 0, "weights": 0, "checkpoints": 0}
    for folder in _run_folders(store):
        record = read_record(folder)  # a damaged record stops the export, naming the run
        members.append((folder / "record.json", f"runs/{folder.name}/record.json"))
        counts["runs"] += 1
        checkpoint, model = folder / "checkpoint.pt", folder / "model.pt"
        if checkpoint.is_file():
            members.append((checkpoint, f"runs/{folder.name}/checkpoint.pt"))
            counts["checkpoints"] += 1
        elif model.is_file() and (keep is None or record["run_id"] in keep):
            members.append((model, f"runs/{folder.name}/model.pt"))
            counts["weights"] += 1
    hpo = store / "hpo"
    if hpo.is_dir():
        members += [(p, f"runs/hpo/{p.relative_to(hpo)}") for p in sorted(hpo.rglob("*")) if p.is_file()]
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        manifest = json.dumps({**counts, "profile": profile, "weights": weights}).encode()
        info = tarfile.TarInfo("bundle.json")
        info.size = len(manifest)
        tar.addfile(info, io.BytesIO(manifest))
        for path, name in members:
            tar.add(path, arcname=name, recursive=False)
    atomic.write_bytes(Path(file), buffer.getvalue())
    return {**counts, "bytes": len(buffer.getvalue()), "file": str(file)}


def _same_run(a: Path, b: Path) -> bool:
    return read_record(a).get("record_sha256") == read_record(b).get("record_sha256")


def _same_but_measurements(a: dict, b: dict) -> bool:
    """The same training, one of them measured more (a render elsewhere measured what training had not)."""
    strip = lambda record: {k: v for k, v in record.items() if k not in ("measurements", "record_sha256")}
    return strip(a) == strip(b)


def _checked(folder: Path) -> dict:
    """The record of an unpacked run, its weight files verified against their checksums."""
    record = read_record(folder)
    for name, expected in record.get("checksums", {}).items():
        path = folder / name
        if path.is_file() and sha256(path) != expected:
            raise RunStoreError(folder.name, f"{name} in the bundle does not match its checksum (damaged bundle)")
    return record


def import_bundle(file: str | Path, *, store: str | Path | None = None) -> dict:
    """Unpack ``file`` into the run store; returns what was added, updated or already there."""
    store = Path(store) if store is not None else runs_dir()
    file = Path(file)
    if not file.is_file():
        raise ValueError(f"{file} is not a file; give a bundle written by `python -m vitbn_nb runs export`")
    done = {"added": 0, "updated": 0, "unchanged": 0, "state files": 0}
    with tempfile.TemporaryDirectory() as scratch:
        try:
            with tarfile.open(file, "r:gz") as tar:
                tar.extractall(scratch, filter="data")
        except (tarfile.TarError, OSError, EOFError) as error:
            raise ValueError(f"{file} is not a readable bundle ({error})") from None
        unpacked = Path(scratch) / "runs"
        for folder in _run_folders(unpacked):
            record = _checked(folder)
            RunConfig(**record["config"])  # a record this code cannot read is refused now, not at render time
            target = store / folder.name
            with run_lock(folder.name, progress=False):
                if (target / "record.json").is_file():
                    if _same_run(folder, target):
                        done["unchanged"] += 1
                        continue
                    mine = Run(target)
                    if _same_but_measurements(record, mine.record):
                        # Both kept: the bundle's measurements win where both took one (it comes from training).
                        mine.record["measurements"] = {
                            **mine.record.get("measurements", {}),
                            **record.get("measurements", {}),
                        }
                        write_record(target / "record.json", mine.record)
                        done["updated"] += 1
                        continue
                    if mine.status in ("finished", "diverged") or record["status"] not in ("finished", "diverged"):
                        raise RunStoreError(
                            folder.name,
                            f"the bundle's copy differs from the one in {store} ({record['status']} there, "
                            f"{mine.status} here); nothing of it was imported",
                            fix="fix: keep one: delete the folder here and import again, or leave it as it is",
                        )
                    done["updated"] += 1
                else:
                    done["added"] += 1
                staged = store / f".{folder.name}.import"
                shutil.rmtree(staged, ignore_errors=True)
                shutil.copytree(folder, staged)
                if target.exists():
                    shutil.rmtree(target)
                staged.rename(target)
        state = unpacked / "hpo"
        for path in sorted(state.rglob("*")) if state.is_dir() else []:
            if path.is_file():
                target = store / "hpo" / path.relative_to(state)
                if target.is_file() and target.read_bytes() != path.read_bytes():
                    raise RunStoreError(
                        "hpo",
                        f"{target} differs from the bundle's copy; it was left as it is",
                        fix="fix: delete one of them and import again",
                    )
                if not target.is_file():
                    atomic.write_bytes(target, path.read_bytes())
                    done["state files"] += 1
    return done
