import os

import pytest

os.environ.setdefault("VITBN_PROGRESS", "0")
os.environ.setdefault("MPLBACKEND", "Agg")


@pytest.fixture(scope="session")
def mnist_ready():
    """The real MNIST files in the project's data folder (rebuilt offline once if absent)."""
    from vitbn_nb.data import ensure_mnist

    return ensure_mnist()


@pytest.fixture
def run_store(tmp_path, monkeypatch):
    """A private, empty run store for one test."""
    folder = tmp_path / "runs"
    monkeypatch.setenv("VITBN_RUNS_DIR", str(folder))
    return folder
