"""Data for the book: its files and their checks (:mod:`.files`), article 2's augmentation (:mod:`.augment`), and the
dataset registry with its in-memory sets (:mod:`.sets`); under ``paths.data_dir()`` unless a ``root`` is given."""

from __future__ import annotations

from .augment import augment_batch, reference_augmentation, reference_dataset, to_float
from .files import (
    EMNIST_SOURCE,
    FALLBACK_SOURCE,
    MNIST_FILES,
    DataError,
    ensure_mnist,
    load_emnist_digits,
    load_mnist,
    prepare,
    write_idx,
)
from .sets import (
    DATASETS,
    IMAGE_SIZE,
    Batches,
    ImageSet,
    ReferenceSet,
    image_sets,
    reference_sets,
)

__all__ = [
    "DATASETS",
    "EMNIST_SOURCE",
    "FALLBACK_SOURCE",
    "IMAGE_SIZE",
    "MNIST_FILES",
    "Batches",
    "DataError",
    "ImageSet",
    "ReferenceSet",
    "augment_batch",
    "ensure_mnist",
    "image_sets",
    "load_emnist_digits",
    "load_mnist",
    "prepare",
    "reference_augmentation",
    "reference_dataset",
    "reference_sets",
    "to_float",
    "write_idx",
]
