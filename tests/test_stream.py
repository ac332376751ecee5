"""One data stream per seed on every device: the draws that define a run's data (training order, augmentation, the
once-augmented test set) are made on the CPU and only then moved, so a seed's batches are the same wherever it
trains. No GPU here: the training device is the ``meta`` device (tensors with shapes and no values), and what the
sets draw is read where the draws are moved to it."""

import pytest
import torch

from vitbn_nb.data import augment, sets
from vitbn_nb.data.sets import STREAM, ImageSet, legacy_stream
from vitbn_nb.engines import engine

META = torch.device("meta")


@pytest.fixture
def moved(monkeypatch):
    """Every list of draws the sets move to the training device, as drawn (on the CPU)."""
    seen, real = [], sets._to_device

    def record(parts, device):
        if parts is not None:
            assert all(part.device.type == "cpu" for part in parts)  # drawn on the CPU whatever the device
            seen.append([part.clone() for part in parts])
        return real(parts, device)

    monkeypatch.setattr(sets, "_to_device", record)
    return seen


def _images(n=50):
    generator = torch.Generator().manual_seed(1)
    return torch.randint(0, 256, (n, 1, 28, 28), dtype=torch.uint8, generator=generator), torch.randint(0, 10, (n,))


def _first_batch(train: ImageSet, seed: int, epoch: int):
    return next(iter(train.batches(20, generator=engine.epoch_generator(seed, epoch), shuffle=True, min_batch=2)))


def test_a_seeds_batch_indices_and_augmentation_are_the_same_on_another_device(moved):
    images, labels = _images()
    on_cpu = ImageSet(images, labels, augment=True)
    elsewhere = ImageSet(images.to(META), labels.to(META), augment=True)
    x, _ = _first_batch(on_cpu, seed=3, epoch=2)
    x_meta, _ = _first_batch(elsewhere, seed=3, epoch=2)
    assert x_meta.device == META and x.device.type == "cpu"
    (cpu_index, cpu_draws), (meta_index, meta_draws) = moved[:2], moved[2:]
    assert len(cpu_index) == len(meta_index) == 3  # 50 images at 20: 20, 20, 10
    assert all(torch.equal(a, b) for a, b in zip(cpu_index, meta_index))
    assert all(torch.equal(a, b) for a, b in zip(cpu_draws, meta_draws))
    other_seed = ImageSet(images, labels, augment=True)
    _first_batch(other_seed, seed=4, epoch=2)
    assert not torch.equal(moved[4][0], cpu_index[0])  # a seed's stream is its own


def test_a_stacks_members_draw_what_each_run_alone_draws_on_any_device(moved):
    images, labels = _images()
    elsewhere = ImageSet(images.to(META), labels.to(META), augment=True)
    generators = [engine.epoch_generator(seed, 1) for seed in (0, 1, 2)]
    next(iter(elsewhere.stacked_batches(20, generators, min_batch=2)))
    stacked_index, stacked_draws = moved
    for i, seed in enumerate((0, 1, 2)):
        alone = ImageSet(images, labels, augment=True)
        _first_batch(alone, seed=seed, epoch=1)
        index, draws = moved[-2:]
        assert all(torch.equal(s[i], a) for s, a in zip(stacked_index, index))
        assert all(torch.equal(s[i], a) for s, a in zip(stacked_draws, draws))


def test_the_cpu_stream_is_the_one_every_cpu_run_drew_before(moved):
    """The stream as the engine drew it on the CPU before it had a name: the order, then each batch's uniforms."""
    images, labels = _images()
    x, y = _first_batch(ImageSet(images, labels, augment=True), seed=5, epoch=7)
    generator = torch.Generator().manual_seed(engine.epoch_seed(5, 7))
    order = torch.randperm(50, generator=generator)
    first = torch.rand(20, 7, generator=generator)
    assert torch.equal(moved[0][0], order[:20]) and torch.equal(moved[1][0], first)
    assert torch.equal(y, labels[order[:20]])
    assert torch.equal(x, augment.augment_drawn(images[order[:20]], first))


def test_the_augmented_test_set_is_drawn_on_the_cpu_for_every_device(monkeypatch, mnist_ready):
    drawn, real = [], augment.uniforms

    def record(batch, generator):
        assert generator is not None and generator.device.type == "cpu"
        drawn.append(real(batch, generator))
        return drawn[-1]

    monkeypatch.setattr(augment, "uniforms", record)
    sets.image_sets.cache_clear()
    try:
        sets.image_sets("mnist_aug", 100, 60, "cpu")
        sets.image_sets("mnist_aug", 100, 60, "meta")
    finally:
        sets.image_sets.cache_clear()
    assert len(drawn) == 2 and torch.equal(drawn[0], drawn[1])


def test_a_record_names_its_stream():
    assert legacy_stream("cpu") == STREAM  # every CPU run drew this stream already
    assert legacy_stream("cuda") != STREAM  # a GPU run from before drew its own: never paired with a CPU run
