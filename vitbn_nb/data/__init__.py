"""Data for the book: its files and their checks (:mod:`.files`), article 2's augmentation (:mod:`.augment`), and the
dataset registry with its in-memory sets (:mod:`.sets`); under ``paths.data_dir()`` unless a ``root`` is given."""

from __future__ import annotations

from ..paths import data_dir
from .augment import augment_batch, reference_augmentation, reference_dataset, to_float
from .files import (
    EMNIST_SOURCE,
    FALLBACK_SOURCE,
    MNIST_FILES,
    DataError,
    ensure_mnist,
    fix_emnist_orientation,
    load_emnist_digits,
    load_mnist,
    prepare,
    read_idx,
    write_idx,
)
from .sets import (
    DATASETS,
    IMAGE_SIZE,
    Batches,
    ImageSet,
    ReferenceSet,
    check_dataset,
    image_sets,
    reference_sets,
    upscale,
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
    "check_dataset",
    "data_dir",
    "ensure_mnist",
    "fix_emnist_orientation",
    "image_sets",
    "load_emnist_digits",
    "load_mnist",
    "prepare",
    "read_idx",
    "reference_augmentation",
    "reference_dataset",
    "reference_sets",
    "to_float",
    "upscale",
    "write_idx",
]
