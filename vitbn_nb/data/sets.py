"""The datasets a run can train on, held in memory: the registry, its subsets and the two pipelines, ``ImageSet``
(the book's engine: uint8 on the device, batches cut and augmented there) and ``ReferenceSet`` (article 1's
per-sample ``DataLoader``, kept to measure what it costs)."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from .augment import augment_batch, augment_members, reference_dataset, to_float
from .files import load_mnist

DATASETS = ("mnist", "mnist_aug", "mnist56")
#: Image side of each dataset: ``mnist56`` is MNIST upscaled 2x (bilinear), for fine-tuning at a new resolution.
IMAGE_SIZE = {"mnist": 28, "mnist_aug": 28, "mnist56": 56}
#: The augmented test set is drawn once with this random seed, so every model is tested on the same images.
TEST_AUGMENTATION_SEED = 20241108
SUBSET_SEED = 0


@dataclass
class ImageSet:
    """A split held as uint8 ``[N, C, H, W]`` on the training device; ``augment`` redraws augmentations per batch."""

    images: Tensor
    labels: Tensor
    augment: bool = False

    def __len__(self) -> int:
        return len(self.labels)

    def batches(
        self, batch_size: int, *, generator: torch.Generator | None = None, shuffle: bool = False, min_batch: int = 1
    ) -> Iterator[tuple[Tensor, Tensor]]:
        n = len(self.labels)
        order = torch.randperm(n, generator=generator, device=self.labels.device) if shuffle else None
        for start in range(0, n, batch_size):
            index = order[start : start + batch_size] if shuffle else slice(start, start + batch_size)
            x, y = self.images[index], self.labels[index]
            if len(y) < min_batch:  # a BatchNorm model cannot train on a final batch of one
                return
            yield (augment_batch(x, generator) if self.augment else to_float(x)), y

    def stacked_batches(
        self, batch_size: int, generators: list[torch.Generator], *, min_batch: int = 1
    ) -> Iterator[tuple[Tensor, Tensor]]:
        """Shuffled training batches of a stack's members side by side (``[M, B, ...]`` images, ``[M, B]``
        labels): member ``i``'s are those of ``batches(batch_size, generator=generators[i], shuffle=True)``,
        cut and augmented for all members at once."""
        n = len(self.labels)
        orders = torch.stack([torch.randperm(n, generator=g, device=self.labels.device) for g in generators])
        for start in range(0, n, batch_size):
            index = orders[:, start : start + batch_size]
            if index.shape[1] < min_batch:
                return
            x, y = self.images[index], self.labels[index]
            yield (augment_members(x, generators) if self.augment else to_float(x)), y


@dataclass
class ReferenceSet:
    """Article 1's pipeline: a DataLoader over a torchvision dataset with per-sample PIL transforms."""

    dataset: torch.utils.data.Dataset
    device: torch.device
    num_workers: int = 0

    def __len__(self) -> int:
        return len(self.dataset)

    def batches(
        self, batch_size: int, *, generator: torch.Generator | None = None, shuffle: bool = False, min_batch: int = 1
    ) -> Iterator[tuple[Tensor, Tensor]]:
        # The sampler needs a CPU generator whatever the training device; seed one from the epoch's.
        sampler_generator = torch.Generator().manual_seed(generator.initial_seed()) if generator is not None else None
        loader = torch.utils.data.DataLoader(
            self.dataset,
            batch_size=batch_size,
            shuffle=shuffle,
            generator=sampler_generator,
            num_workers=self.num_workers,
        )
        for x, y in loader:
            if len(y) < min_batch:
                return
            yield x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)

    def stacked_batches(
        self, batch_size: int, generators: list[torch.Generator], *, min_batch: int = 1
    ) -> Iterator[tuple[Tensor, Tensor]]:
        """Each member's own shuffled batches side by side (a DataLoader per member, as its run alone has)."""
        streams = [self.batches(batch_size, generator=g, shuffle=True, min_batch=min_batch) for g in generators]
        for parts in zip(*streams):
            yield torch.stack([x for x, _ in parts]), torch.stack([y for _, y in parts])


#: What the engine trains and tests on: either pipeline's set.
Batches = ImageSet | ReferenceSet


def check_dataset(dataset: str) -> None:
    if dataset not in DATASETS:
        raise ValueError(f"dataset={dataset!r} is not allowed; choose one of {', '.join(map(repr, DATASETS))}")


def _subset_index(n: int, size: int | None, salt: int) -> Tensor | None:
    """The same fixed subset for every run: the first ``size`` of one seeded permutation."""
    if size is None or size >= n:
        return None
    return torch.randperm(n, generator=torch.Generator().manual_seed(SUBSET_SEED + salt))[:size]


def upscale(images: Tensor, factor: int = 2, chunk: int = 10_000) -> Tensor:
    """uint8 ``[N, C, H, W]`` -> ``[N, C, factor*H, factor*W]``, bilinear: the same digits at a finer resolution."""
    parts = [
        F.interpolate(to_float(part), scale_factor=factor, mode="bilinear", align_corners=False)
        for part in images.split(chunk)
    ]
    return (torch.cat(parts) * 255).round().clamp(0, 255).to(torch.uint8)


@functools.lru_cache(maxsize=4)
def image_sets(dataset: str, train_size: int | None, test_size: int | None, device: str) -> tuple[ImageSet, ImageSet]:
    """Train and test ``ImageSet``s on ``device``; the augmented test set is drawn once, with a fixed random seed.

    Cached (four entries): the sets are read-only, and a chapter asks for the same ones for every run.
    """
    check_dataset(dataset)
    splits = []
    for train, size, salt in ((True, train_size, 0), (False, test_size, 1)):
        images, labels = load_mnist(train=train)
        index = _subset_index(len(labels), size, salt)
        if index is not None:
            images, labels = images[index], labels[index]
        splits.append((images.to(device), labels.to(device)))
    (train_x, train_y), (test_x, test_y) = splits
    if dataset == "mnist56":
        train_x, test_x = upscale(train_x), upscale(test_x)
    augment = dataset == "mnist_aug"
    if augment:
        generator = torch.Generator(device=device).manual_seed(TEST_AUGMENTATION_SEED)
        test_x = (augment_batch(test_x, generator) * 255).round().to(torch.uint8)
    return ImageSet(train_x, train_y, augment=augment), ImageSet(test_x, test_y)


def reference_sets(
    dataset: str, train_size: int | None, test_size: int | None, device: torch.device
) -> tuple[ReferenceSet, ReferenceSet]:
    """Article 1's per-sample pipeline over the same subsets (the test set is augmented per pass, as theirs was)."""
    augment = dataset == "mnist_aug"
    sets = []
    for train, size, salt in ((True, train_size, 0), (False, test_size, 1)):
        dataset_ = reference_dataset(train=train, augment=augment)
        index = _subset_index(len(dataset_), size, salt)
        if index is not None:
            dataset_ = torch.utils.data.Subset(dataset_, index.tolist())
        sets.append(ReferenceSet(dataset_, device))
    return tuple(sets)
