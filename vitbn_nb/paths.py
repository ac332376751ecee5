"""Where the book keeps data, runs and figures: each in the project checkout unless an environment variable moves
it."""

from __future__ import annotations

import os
import re
import tomllib
from pathlib import Path

_PACKAGE_ROOT = Path(__file__).resolve().parent.parent


def project_root() -> Path:
    for folder in (Path.cwd(), *Path.cwd().parents):
        if (folder / "pyproject.toml").is_file() and (folder / "vitbn_nb").is_dir():
            return folder
    if (_PACKAGE_ROOT / "pyproject.toml").is_file():  # an editable install: the checkout itself
        return _PACKAGE_ROOT
    return Path.home() / ".cache" / "vitbn_nb"


def _location(variable: str, default: str) -> Path:
    path = Path(os.environ.get(variable) or project_root() / default)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise ValueError(f"{variable}={str(path)!r} is a file; point it at a folder (or leave it unset)") from None
    except OSError as error:
        raise ValueError(f"{variable}={str(path)!r} cannot be made a folder ({error.strerror}); give another") from None
    return path


def data_dir() -> Path:
    return _location("VITBN_DATA_DIR", "data")


def runs_dir() -> Path:
    return _location("VITBN_RUNS_DIR", "runs")


#: ``ignore``: leave the records committed beside ``figures/`` out of every lookup (a reproduction from scratch).
COMMITTED_VARIABLE = "VITBN_COMMITTED_RECORDS"
#: Where the MLflow server that mirrors the runs lives (MLflow's own variable); unset: no mirror unless asked.
MLFLOW_URI_VARIABLE = "MLFLOW_TRACKING_URI"


def mirror_asked(mlflow: bool | None = None) -> bool:
    """Whether runs are mirrored to MLflow: ``mlflow`` when given, else whether :data:`MLFLOW_URI_VARIABLE` is set."""
    return bool(mlflow) if mlflow is not None else bool(os.environ.get(MLFLOW_URI_VARIABLE))


#: The committed records' folder inside ``figures/``: a run store without weight files.
RECORDS_FOLDER = "records"


def committed_records_dir() -> Path | None:
    """``figures/records/``: the records behind the committed figures (no weights), read beneath the run store so that
    a fresh clone renders without training; None when ``VITBN_COMMITTED_RECORDS=ignore``."""
    if os.environ.get(COMMITTED_VARIABLE, "").strip().lower() == "ignore":
        return None
    return book_figures_dir() / RECORDS_FOLDER


def stored_path(name: str | os.PathLike, store: Path | None = None) -> Path:
    """Where the entry ``name`` of ``store`` (default: the run store) is read: its own, or the committed record's when
    only that exists (everything is written to the run store alone)."""
    own = (store if store is not None else runs_dir()) / name
    committed = committed_records_dir()
    if own.exists() or own.is_symlink() or committed is None:
        return own
    candidate = committed / name
    return candidate if candidate.exists() and not candidate.is_symlink() else own


def is_committed(path: Path) -> bool:
    """Whether ``path`` lies among the committed records (read-only: never written, never trained into)."""
    committed = committed_records_dir()
    return committed is not None and Path(path).resolve().is_relative_to(committed.resolve())


def book_figures_dir() -> Path:
    """``figures/``: the book's results, which only a complete cpu or paper book run replaces."""
    return _location("VITBN_BOOK_FIGURES_DIR", "figures")


def figures_dir() -> Path:
    """Where a chapter saves its outputs: the book runner's staging folder, or, run by hand,
    ``build/figures-interactive/`` (never the book's ``figures/``)."""
    return _location("VITBN_FIGURES_DIR", "build/figures-interactive")


def published_repository(pyproject=None) -> dict:
    """``[tool.vitbn-book]`` of pyproject.toml: ``repository`` and ``ref`` (both may be empty)."""
    path = Path(pyproject) if pyproject is not None else project_root() / "pyproject.toml"
    found = tomllib.loads(path.read_text()).get("tool", {}).get("vitbn-book", {})
    repository, ref = str(found.get("repository", "")).rstrip("/"), str(found.get("ref", ""))
    if repository and not re.fullmatch(r"https://github\.com/[\w.-]+/[\w.-]+", repository):
        raise ValueError(
            f"[tool.vitbn-book] repository={repository!r} in {path} is not allowed; give the https "
            "address of a GitHub repository (https://github.com/ then owner/name), or leave it empty "
            "until the book is public"
        )
    if ref and not re.fullmatch(r"[\w][\w.+/-]{0,99}", ref):
        raise ValueError(
            f"[tool.vitbn-book] ref={ref!r} in {path} is not allowed; give a tag, branch or commit (letters, digits "
            "and . _ + / -), or leave it empty until the book is public"
        )
    return {"repository": repository, "ref": ref}
