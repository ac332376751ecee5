import os
import shutil
import tempfile

import pytest

os.environ.setdefault("TQDM_DISABLE", "1")  # tqdm's own: no progress bars in the tests' output
os.environ.setdefault("MPLBACKEND", "Agg")
# Tests kill and resume runs at epoch boundaries: a checkpoint every epoch (the book default is every 60 s).
os.environ.setdefault("VITBN_CHECKPOINT_SECONDS", "0")
# A test trains into its own store: the records committed beside figures/ stay out unless a test brings them in.
os.environ.setdefault("VITBN_COMMITTED_RECORDS", "ignore")
# Under pytest-xdist (`make test` runs a worker per core) each worker keeps to one torch thread, as do the
# kernels and commands it starts: a second thread would wait on the core another worker holds.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture(scope="session")
def mnist_ready():
    """The real MNIST files in the project's data folder (rebuilt offline once if absent)."""
    from vitbn_nb.data import ensure_mnist

    return ensure_mnist()


@pytest.fixture
def figures_store(tmp_path, monkeypatch):
    """A private, empty figures folder (and manifest) for one test."""
    folder = tmp_path / "figures"
    folder.mkdir()
    monkeypatch.setenv("VITBN_FIGURES_DIR", str(folder))
    return folder


@pytest.fixture
def run_store(tmp_path, monkeypatch):
    """A private, empty run store for one test."""
    folder = tmp_path / "runs"
    monkeypatch.setenv("VITBN_RUNS_DIR", str(folder))
    return folder


CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=1280,1024",
]


@pytest.fixture(scope="session")
def browser():
    """Debian's headless Chromium driven by Selenium through Debian's matching chromedriver."""
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (pip install -e '.[test]')")
    from selenium.webdriver.chrome.service import Service

    binary = next(filter(None, map(shutil.which, ("chromium", "chromium-browser"))), None)
    driver_path = shutil.which("chromedriver")
    if not binary or not driver_path:
        pytest.skip(
            "Chromium and chromedriver are not installed and could not be installed "
            "(`make test` runs `apt-get install chromium chromium-driver`, which needs root)"
        )
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    profile_dir = tempfile.mkdtemp(prefix="vitbn-chromium-")
    for flag in [*CHROMIUM_FLAGS, f"--user-data-dir={profile_dir}"]:
        options.add_argument(flag)
    options.page_load_strategy = "eager"  # the DOM is enough; tests wait for what they need
    driver = webdriver.Chrome(options=options, service=Service(driver_path))
    driver.set_page_load_timeout(60)
    yield driver
    driver.quit()
    shutil.rmtree(profile_dir, ignore_errors=True)


#: Fixtures whose tests execute chapters with papermill or build the HTML book.
_BOOK_FIXTURES = {"small_book", "full_book", "small_chapters"}
#: Fixtures that time the bench, serve a trained model or train one: seconds to minutes each.
_SLOW_FIXTURES = {"quick_run", "measured", "served", "confident_digit"}
#: Modules whose every test optimises with Ax or mirrors runs to MLflow.
_SLOW_MODULES = {"test_hpo", "test_tracking"}


def pytest_collection_modifyitems(items):
    """``browser``, ``book`` and ``slow`` marks follow from what a test uses (``make test-fast`` skips all three).

    A test that asks for both a private run store and the real MNIST trains real runs: slow.
    """
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        if "browser" in names:
            item.add_marker(pytest.mark.browser)
        if names & _BOOK_FIXTURES:
            item.add_marker(pytest.mark.book)
        trains = {"run_store", "mnist_ready"} <= names
        if trains or names & _SLOW_FIXTURES or item.module.__name__.rsplit(".", 1)[-1] in _SLOW_MODULES:
            item.add_marker(pytest.mark.slow)
