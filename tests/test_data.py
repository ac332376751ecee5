"""Tests for vitbn_nb.data: exact offline MNIST, the augmentation and the EMNIST/fallback set.

The real data directory is only read (the session fixture makes sure MNIST is there); every
damaged or rebuilt file lives under tmp_path.
"""

from __future__ import annotations

import math
import shutil
import socket

import numpy as np
import pytest
import torch
import torchvision
from PIL import Image
from torchvision.transforms import InterpolationMode
from torchvision.transforms import functional as TF
from torchvision.transforms.v2 import functional as F2

from vitbn_nb import data

TEST_LABEL_COUNTS = [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009]


@pytest.fixture(scope="session")
def mnist_root():
    return data.ensure_mnist()


@pytest.fixture(scope="session")
def test_images(mnist_root):
    return data.load_mnist(False, mnist_root)[0]


@pytest.fixture
def no_network(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the network was touched")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)


# --- IDX and MNIST --------------------------------------------------------------------------


def test_idx_round_trip_and_header(tmp_path):
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (5, 28, 27), dtype=np.uint8)
    labels = rng.integers(0, 10, 5, dtype=np.uint8)
    data.write_idx(tmp_path / "im", images)
    data.write_idx(tmp_path / "lb", labels)
    header = bytes.fromhex("00000803000000050000001c0000001b")
    assert (tmp_path / "im").read_bytes()[:16] == header
    assert (tmp_path / "lb").read_bytes()[:8] == bytes.fromhex("0000080100000005")
    read = torchvision.datasets.mnist.read_sn3_pascalvincent_tensor  # torchvision reads what the book writes
    np.testing.assert_array_equal(read(tmp_path / "im", strict=False).numpy(), images)
    np.testing.assert_array_equal(read(tmp_path / "lb", strict=False).numpy(), labels)
    assert not list(tmp_path.glob(".*tmp"))  # the atomic write leaves no temp file behind


def test_offline_rebuild_gives_the_published_md5s(tmp_path, no_network, monkeypatch, capsys):
    data.prepare(tmp_path, download=False)
    raw = tmp_path / "MNIST" / "raw"
    for name, (md5, _) in data.MNIST_FILES.items():
        assert data.files._md5(raw / name) == md5, name
    printed = capsys.readouterr().out
    assert "MNIST" in printed and "from sklearn-digits" in printed

    # A second check trusts the cached verification instead of hashing 55 MB again.
    monkeypatch.setattr(data.files, "_md5", lambda path: pytest.fail(f"re-hashed {path}"))
    assert data.ensure_mnist(tmp_path, download=False) == tmp_path


def test_mnist_sizes_dtypes_and_label_counts(mnist_root):
    x_train, y_train = data.load_mnist(True, mnist_root)
    x_test, y_test = data.load_mnist(False, mnist_root)
    assert x_train.shape == (60000, 1, 28, 28) and x_test.shape == (10000, 1, 28, 28)
    assert x_train.dtype == x_test.dtype == torch.uint8
    assert y_train.dtype == y_test.dtype == torch.int64 and len(y_train) == 60000
    assert torch.bincount(y_test).tolist() == TEST_LABEL_COUNTS
    assert int(x_test.max()) == 255 and int(x_test.min()) == 0


def test_torchvision_loads_the_files_without_network(mnist_root, no_network):
    data.ensure_mnist(mnist_root)
    test_set = torchvision.datasets.MNIST(mnist_root, train=False)
    assert len(test_set) == 10000
    image, label = test_set[0]
    assert image.size == (28, 28) and label == 7


def _copy_raw_file(mnist_root, tmp_path, name):
    """A real copy (not a link) of one MNIST file, so damaging it leaves the data dir alone."""
    raw = tmp_path / "MNIST" / "raw"
    raw.mkdir(parents=True)
    shutil.copyfile(mnist_root / "MNIST" / "raw" / name, raw / name)
    return raw / name


def test_truncated_file_raises_and_is_kept(mnist_root, tmp_path, no_network):
    path = _copy_raw_file(mnist_root, tmp_path, "t10k-labels-idx1-ubyte")
    path.write_bytes(path.read_bytes()[:5000])
    with pytest.raises(data.DataError) as err:
        data.ensure_mnist(tmp_path, download=False)
    message = str(err.value)
    assert str(path) in message and "wrong size" in message and "python -m vitbn_nb data" in message
    assert path.stat().st_size == 5000  # not silently replaced


def test_corrupted_byte_raises_and_is_kept(mnist_root, tmp_path, no_network):
    path = _copy_raw_file(mnist_root, tmp_path, "t10k-images-idx3-ubyte")
    blob = bytearray(path.read_bytes())
    blob[1000] ^= 0xFF
    path.write_bytes(bytes(blob))
    with pytest.raises(data.DataError) as err:
        data.ensure_mnist(tmp_path, download=False)
    assert str(path) in str(err.value) and "MD5" in str(err.value)
    assert path.read_bytes() == bytes(blob)


# --- augmentation ---------------------------------------------------------------------------


def test_reference_pipeline_runs(mnist_root):
    image, label = data.reference_dataset(train=False, augment=True, root=mnist_root)[0]
    assert image.shape == (1, 28, 28) and image.dtype == torch.float32
    assert float(image.min()) >= 0 and float(image.max()) <= 1 and label == 7
    plain, _ = data.reference_dataset(train=False, augment=False, root=mnist_root)[0]
    torch.testing.assert_close(plain, data.to_float(data.load_mnist(False, mnist_root)[0][0]))


def test_augment_batch_shape_range_determinism(test_images):
    x = test_images[:256]
    out = data.augment_batch(x, torch.Generator().manual_seed(3))
    assert out.shape == (256, 1, 28, 28) and out.dtype == torch.float32
    assert float(out.min()) >= 0 and float(out.max()) <= 1
    again = data.augment_batch(x, torch.Generator().manual_seed(3))
    assert torch.equal(out, again)
    assert not torch.equal(out, data.augment_batch(x, torch.Generator().manual_seed(4)))
    with pytest.raises(ValueError):
        data.augment_batch(x.float(), torch.Generator())


def _pillow_with_params(image, p, i):
    """The reference transforms' kernels, fed the batched version's parameters for sample i."""
    im = Image.fromarray(image[0].numpy(), mode="L")
    im = TF.rotate(im, float(p["angle"][i]), InterpolationMode.NEAREST, fill=0)
    im = TF.affine(im, angle=0.0, translate=[int(p["tx"][i]), int(p["ty"][i])], scale=1.0, shear=[0.0, 0.0], fill=0)
    if p["zoom"][i]:
        side, left, top = int(p["canvas"][i]), int(p["left"][i]), int(p["top"][i])
        im = TF.resize(F2.pad(im, [left, top, side - 28 - left, side - 28 - top], fill=0), 28)
    return TF.to_tensor(im)


def test_augment_batch_matches_pillow_given_the_same_parameters(test_images):
    x = test_images[:600]
    p = data.augment._params_from(data.augment.uniforms(len(x), torch.Generator().manual_seed(5)))
    p["zoom"][:300] = True
    ours = data.augment._apply_params(x, p)
    ref = torch.stack([_pillow_with_params(x[i], p, i) for i in range(len(x))])
    # Nearest rotation differs only where a sample point falls within ~1e-4 px of a pixel edge.
    assert (ours != ref).float().mean() < 1e-3

    # Without rotation the zoom-out reimplements Pillow's resize bit for bit.
    p["angle"].zero_()
    ours = data.augment._apply_params(x, p)
    ref = torch.stack([_pillow_with_params(x[i], p, i) for i in range(len(x))])
    assert torch.equal(ours, ref)


def test_zooming_only_the_chosen_samples_equals_zooming_all(test_images):
    """The CPU path zooms only the chosen fifth; the result must equal zooming every sample and keeping
    the chosen ones (the accelerator path), bit for bit, whatever the batch."""
    for seed, size in ((0, 1), (1, 37), (2, 500)):
        x = test_images[:size]
        p = data.augment._params_from(data.augment.uniforms(size, torch.Generator().manual_seed(seed)))
        rotated = data.augment._rotate_translate(x, p["angle"], p["tx"], p["ty"])
        every = data.augment._zoom_out(rotated, p["canvas"], p["left"], p["top"])
        expected = torch.where(p["zoom"][:, None, None, None], every, rotated) / 255
        assert torch.equal(data.augment._apply_params(x, p), expected)


def _ink_extent(images):
    ink = images[:, 0] > 0.2
    pos = torch.arange(28)

    def span(mask):
        return torch.where(mask, pos, -1).amax(1) - torch.where(mask, pos, 99).amin(1) + 1

    return torch.maximum(span(ink.any(2)), span(ink.any(1)))


def _reference_outputs(images, repeats, seed=0):
    transform = data.reference_augmentation()
    pils = [Image.fromarray(image[0].numpy(), mode="L") for image in images]
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return torch.stack([transform(pil) for _ in range(repeats) for pil in pils])


def test_augment_batch_distribution_matches_reference(test_images):
    x, repeats = test_images[:400], 20
    ref = _reference_outputs(x, repeats)
    g = torch.Generator().manual_seed(0)
    ours = torch.cat([data.augment_batch(x, g) for _ in range(repeats)])
    mean_ref, mean_ours = ref.mean(0).flatten(), ours.mean(0).flatten()
    assert (mean_ref - mean_ours).abs().max() < 0.035
    assert torch.corrcoef(torch.stack([mean_ref, mean_ours]))[0, 1] > 0.99
    # A zoomed digit shrinks by 2-3x: its ink spans <= 13 px, an unzoomed one >= 15 px.
    zoomed_ref = (_ink_extent(ref) <= 13).float().mean()
    zoomed_ours = (_ink_extent(ours) <= 13).float().mean()
    assert abs(zoomed_ref - 0.2) < 0.025 and abs(zoomed_ours - 0.2) < 0.025
    assert abs(zoomed_ref - zoomed_ours) < 0.03


def _bar():
    image = torch.zeros(1, 1, 28, 28, dtype=torch.uint8)
    image[..., 13:15, 4:24] = 255  # 20 px long, centred on the rotation centre
    return image


def _bar_angles(outputs):
    """Orientation (degrees) of the bar in each unzoomed output, from second moments."""
    w = outputs[:, 0].double()
    mass = w.sum((1, 2))
    keep = mass > 20  # the bar has 40 px of ink (>= 34 after clipping); zoomed, <= 10
    w, mass = w[keep], mass[keep]
    ys, xs = torch.meshgrid(torch.arange(28.0), torch.arange(28.0), indexing="ij")
    ys, xs = ys.double(), xs.double()
    cx = (w * xs).sum((1, 2)) / mass
    cy = (w * ys).sum((1, 2)) / mass
    dx, dy = xs - cx[:, None, None], ys - cy[:, None, None]
    mu20, mu02, mu11 = ((w * dx * dx).sum((1, 2)), (w * dy * dy).sum((1, 2)), (w * dx * dy).sum((1, 2)))
    return torch.rad2deg(0.5 * torch.atan2(2 * mu11, mu20 - mu02))


def _rotation_ok(angles):
    limit = data.augment.ROTATION_DEG
    return bool(
        angles.abs().max() <= 21.5
        and angles.abs().max() >= 18.5
        and abs(float(angles.std()) - 2 * limit / math.sqrt(12)) < 1.0
    )


def test_rotation_range(monkeypatch):
    bars = _bar().expand(3000, -1, -1, -1)
    angles = _bar_angles(data.augment_batch(bars, torch.Generator().manual_seed(1)))
    assert len(angles) > 2200 and _rotation_ok(angles)
    reference = _bar_angles(_reference_outputs(_bar(), 1500))
    assert _rotation_ok(reference)
    # The check has teeth: a 40 degree range fails it.
    monkeypatch.setattr(data.augment, "ROTATION_DEG", 40.0)
    wide = _bar_angles(data.augment_batch(bars, torch.Generator().manual_seed(1)))
    monkeypatch.undo()
    assert not _rotation_ok(wide)


def _blob_shifts(outputs):
    """Shift of a centred 2x2 blob in each unzoomed output, and the fraction zoomed."""
    w = outputs[:, 0].double()
    mass = w.sum((1, 2))
    keep = mass > 2  # 4 px of ink survive a nearest rotation; a zoomed blob keeps <= 1
    pos = torch.arange(28.0).double()
    cx = (w.sum(1) * pos).sum(1)[keep] / mass[keep] - 13.5
    cy = (w.sum(2) * pos).sum(1)[keep] / mass[keep] - 13.5
    return cx, cy, 1 - keep.double().mean()


def _translation_ok(shift):
    return bool(shift.abs().max() <= 6.5 and shift.abs().max() >= 5.5)


def test_translation_range_and_zoom_rate(monkeypatch):
    blob = torch.zeros(4000, 1, 28, 28, dtype=torch.uint8)
    blob[..., 13:15, 13:15] = 255
    cx, cy, zoomed = _blob_shifts(data.augment_batch(blob, torch.Generator().manual_seed(2)))
    assert _translation_ok(cx) and _translation_ok(cy)
    assert abs(float(zoomed) - 0.2) < 0.025
    cx_ref, cy_ref, zoomed_ref = _blob_shifts(_reference_outputs(blob[:1], 1500))
    assert _translation_ok(cx_ref) and _translation_ok(cy_ref)
    assert abs(float(zoomed_ref) - 0.2) < 0.04
    # A range of +-0.3 * 28 = 8.4 px fails the check.
    monkeypatch.setattr(data.augment, "TRANSLATE_FRAC", 0.3)
    cx, cy, _ = _blob_shifts(data.augment_batch(blob, torch.Generator().manual_seed(2)))
    monkeypatch.undo()
    assert not (_translation_ok(cx) and _translation_ok(cy))


def _disc():
    yy, xx = torch.meshgrid(torch.arange(28.0), torch.arange(28.0), indexing="ij")
    return ((((yy - 13.5) ** 2 + (xx - 13.5) ** 2) <= 49).to(torch.uint8) * 255)[None, None]


def _zoom_canvases(outputs):
    """Canvas side implied by each zoomed output of a centred disc of radius 7 (rotation can't
    change it and a shift of <= 6 px can't clip it): the antialiased resize keeps the ink's
    mass up to rounding, so mass shrinks by (28 / canvas)^2, between 1/9 and 1/4."""
    full = float(_disc().double().sum())
    mass = outputs[:, 0].double().sum((1, 2)) * 255
    zoomed = mass < 0.5 * full  # unzoomed outputs keep 0.97-1.05 of it
    return 28 * torch.sqrt(full / mass[zoomed])


def _zoom_range_ok(canvas):
    # int(28 * U(2, 3)) is uniform on 56..83: mean 69.5, and both ends reached.
    low, high = torch.quantile(canvas, torch.tensor([0.05, 0.95], dtype=canvas.dtype)).tolist()
    return bool(
        canvas.min() >= 54 and canvas.max() <= 85 and low < 59 and high > 80 and abs(float(canvas.mean()) - 69.5) < 1.5
    )


def test_zoom_out_factor_range(monkeypatch):
    discs = _disc().expand(4000, -1, -1, -1)
    ours = _zoom_canvases(data.augment_batch(discs, torch.Generator().manual_seed(3)))
    assert len(ours) > 650 and _zoom_range_ok(ours)
    reference = _zoom_canvases(_reference_outputs(_disc(), 2000))
    assert len(reference) > 300 and _zoom_range_ok(reference)
    # A canvas of 1.5-2x the image (a milder zoom-out) fails the check.
    monkeypatch.setattr(data.augment, "ZOOM_SIDE", (1.5, 2.0))
    mild = _zoom_canvases(data.augment_batch(discs, torch.Generator().manual_seed(3)))
    monkeypatch.undo()
    assert not _zoom_range_ok(mild)


# --- EMNIST and its offline fallback --------------------------------------------------------


def test_emnist_orientation_fix(tmp_path, no_network):
    upright = np.zeros((3, 28, 28), dtype=np.uint8)
    upright[:, 4:24, 6] = 255  # an "F": a stem on the left,
    upright[:, 4, 6:20] = 255  # a long top arm,
    upright[:, 13, 6:15] = 200  # a shorter middle arm
    upright[1, 20:24, 20:24] = 90  # and per-image marks so images stay distinct
    labels = np.array([3, 1, 4], dtype=np.uint8)
    raw = tmp_path / "EMNIST" / "raw"
    stored = upright.transpose(0, 2, 1)  # EMNIST's on-disk orientation
    np.testing.assert_array_equal(np.flip(np.rot90(stored, k=-1, axes=(1, 2)), axis=2), upright)
    data.write_idx(raw / "emnist-digits-test-images-idx3-ubyte", stored)
    data.write_idx(raw / "emnist-digits-test-labels-idx1-ubyte", labels)

    images, got_labels, source = data.load_emnist_digits(root=tmp_path)
    assert source == "emnist-digits"
    assert images.shape == (3, 1, 28, 28) and images.dtype == torch.uint8
    np.testing.assert_array_equal(images[:, 0].numpy(), upright)
    assert got_labels.tolist() == [3, 1, 4] and got_labels.dtype == torch.int64


def test_sklearn_fallback_is_mnist_like(tmp_path, no_network):
    images, labels, source = data.load_emnist_digits(root=tmp_path, download=False)
    assert source.startswith("sklearn-digits")
    assert images.shape == (1797, 1, 28, 28) and images.dtype == torch.uint8
    assert labels.dtype == torch.int64 and sorted(set(labels.tolist())) == list(range(10))
    assert int(images.max()) == 255
    w = images[:, 0].double()
    pos = torch.arange(28.0).double()
    mass = w.sum((1, 2))
    cy = (w.sum(2) * pos).sum(1) / mass
    cx = (w.sum(1) * pos).sum(1) / mass
    # Centred on the mass as MNIST is (its centres of mass lie within 14 +- 0.5).
    assert (cy - 14).abs().max() <= 0.6 and (cx - 14).abs().max() <= 0.6
    assert int(images[:, :, :2].max()) == 0 and int(images[:, :, :, -2:].max()) == 0
    # Cached: the second call reads the file instead of rebuilding.
    assert any(tmp_path.glob("sklearn-digits*.pt"))
    again, again_labels, _ = data.load_emnist_digits(root=tmp_path, download=False)
    assert torch.equal(again, images) and torch.equal(again_labels, labels)
