"""Where the book keeps data, runs and figures.

Each location can be moved with an environment variable (the test-suite uses this to keep
its smoke runs away from the committed ``figures/``); otherwise it lies in the project
checkout, found by walking up from the working directory to ``pyproject.toml``.
"""

from __future__ import annotations

import os
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


def book_figures_dir() -> Path:
    """``figures/``: the book's results, which only a complete cpu or paper book run replaces."""
    return _location("VITBN_BOOK_FIGURES_DIR", "figures")


def figures_dir() -> Path:
    """Where a chapter saves its outputs: the book runner's staging folder (``VITBN_FIGURES_DIR``), or, for a
    chapter run by hand in Lab or Colab, ``build/figures-interactive/``, so that it never overwrites the
    book's results in ``figures/``."""
    return _location("VITBN_FIGURES_DIR", "build/figures-interactive")
