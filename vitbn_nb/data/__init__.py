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
from .sets import DATASETS, IMAGE_SIZE, SPLIT_SIZES, Batches, ImageSet, ReferenceSet, image_sets, reference_sets

# what the package gives on, module by module
__all__ = ["augment_batch", "reference_augmentation", "reference_dataset", "to_float"]
__all__ += ["EMNIST_SOURCE", "FALLBACK_SOURCE", "MNIST_FILES", "DataError", "ensure_mnist", "load_emnist_digits"]
__all__ += ["load_mnist", "prepare", "write_idx"]
__all__ += [
    "DATASETS",
    "IMAGE_SIZE",
    "SPLIT_SIZES",
    "Batches",
    "ImageSet",
    "ReferenceSet",
    "image_sets",
    "reference_sets",
]
