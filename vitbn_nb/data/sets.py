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

from .augment import augment_batch, augment_drawn, augment_members, reference_dataset, to_float, uniforms
from .files import load_mnist

DATASETS = ("mnist", "mnist_aug", "mnist56")
#: Image side of each dataset: ``mnist56`` is MNIST upscaled 2x (bilinear), for fine-tuning at a new resolution.
IMAGE_SIZE = {"mnist": 28, "mnist_aug": 28, "mnist56": 56}
#: The images in each dataset's training and test split (all three are MNIST's), the most a run can ask for.
SPLIT_SIZES = {name: {"train_size": 60_000, "test_size": 10_000} for name in DATASETS}
#: The augmented test set is drawn once with this random seed, so every model is tested on the same images.
TEST_AUGMENTATION_SEED = 20241108
SUBSET_SEED = 0


#: The data stream of every run trained since it was named: every random draw of a run's data (order, augmentation, the
#: augmented test set) comes from a CPU generator seeded by (seed, epoch), so a seed's batches and test images are the
#: same on a CPU, a GPU, eager or stacked. On the CPU it is the stream every CPU run drew before it had a name.
STREAM = "cpu-generators"


def legacy_stream(device_type: str) -> str:
    """The stream of a run trained before :data:`STREAM` was named: its device's own generators (a CUDA run's batches
    and augmented test images differ from a CPU run's of the same seed)."""
    return STREAM if device_type == "cpu" else f"{device_type}-generators"


def epoch_draws(
    n: int, batch_size: int, generator: torch.Generator | None, *, shuffle: bool, augment: bool, min_batch: int
) -> tuple[list[Tensor], list[Tensor] | None]:
    """An epoch's random draws from ``generator`` in the order a run has always made them: each batch's image indices
    and, when ``augment``, its uniform draws; all at once, so an accelerator receives them in one copy."""
    order = torch.randperm(n, generator=generator) if shuffle else torch.arange(n)
    # a BatchNorm model cannot train on a final batch of one: ``min_batch`` drops a last batch that small
    index = [part for part in order.split(batch_size) if len(part) >= min_batch]
    draws = [uniforms(len(part), generator) for part in index] if augment else None
    return index, draws


def _to_device(parts: list[Tensor] | None, device: torch.device) -> list[Tensor] | None:
    """``parts`` on ``device`` in one copy (on the CPU, as they are)."""
    if parts is None or not parts or parts[0].device == device:
        return parts
    flat = torch.cat([part.flatten() for part in parts])
    # pinned and non-blocking on an accelerator: the copy is queued, the host does not wait for the device
    flat = flat.pin_memory().to(device, non_blocking=True) if device.type == "cuda" else flat.to(device)
    return [chunk.view(part.shape) for chunk, part in zip(flat.split([part.numel() for part in parts]), parts)]


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
        n, device = len(self.labels), self.labels.device
        if not shuffle and not self.augment:  # a test pass: slices, no draws
            for start in range(0, n, batch_size):
                if min(batch_size, n - start) < min_batch:
                    return
                yield to_float(self.images[start : start + batch_size]), self.labels[start : start + batch_size]
            return
        index, draws = epoch_draws(n, batch_size, generator, shuffle=shuffle, augment=self.augment, min_batch=min_batch)
        index, draws = _to_device(index, device), _to_device(draws, device)
        for k, part in enumerate(index):
            x, y = self.images[part], self.labels[part]
            yield (augment_drawn(x, draws[k]) if self.augment else to_float(x)), y

    def stacked_batches(
        self, batch_size: int, generators: list[torch.Generator], *, min_batch: int = 1
    ) -> Iterator[tuple[Tensor, Tensor]]:
        """The members' shuffled batches side by side (``[M, B, ...]``), each as ``batches`` with its generator."""
        n, device = len(self.labels), self.labels.device
        members = [
            epoch_draws(n, batch_size, g, shuffle=True, augment=self.augment, min_batch=min_batch) for g in generators
        ]
        side_by_side = lambda per_member: _to_device([torch.stack(parts) for parts in zip(*per_member)], device)
        index = side_by_side(m[0] for m in members)
        draws = side_by_side(m[1] for m in members) if self.augment else None
        for k, part in enumerate(index):
            x, y = self.images[part], self.labels[part]
            yield (augment_members(x, draws[k]) if self.augment else to_float(x)), y


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
        order = dict(batch_size=batch_size, shuffle=shuffle, generator=sampler_generator)
        loader = torch.utils.data.DataLoader(self.dataset, num_workers=self.num_workers, **order)
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
    """Train and test ``ImageSet``s on ``device`` (the augmented test set drawn once); cached, being read-only."""
    if dataset not in DATASETS:
        raise ValueError(f"dataset={dataset!r} is not allowed; choose one of {', '.join(map(repr, DATASETS))}")
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
        generator = torch.Generator().manual_seed(TEST_AUGMENTATION_SEED)  # on the CPU: one stream on every device
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
