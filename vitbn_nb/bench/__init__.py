"""Where the time goes: the book's engine against article 1's pipeline, model by model (``python -m vitbn_nb bench``).

With chapter 08's settings, on MNIST for ViT, ViTBNFFN and ViTBN at depths 1 and 6: training and inference
throughput through both input pipelines (:mod:`.pipelines`), FLOPs and utilisation against the measured matmul peak,
peak memory, BatchNorm folded into the Linear layers, and BatchNorm's three forms on tokens. Every timing is a median
(:mod:`vitbn_nb.timing`); the result (:class:`BenchResult`) is printed and written to ``build/bench/`` and
``figures/bench.json``, which chapter 08 shows."""

from __future__ import annotations

from .measurements import PeakMemory, inference_flops, measure, training_flops, without_norms
from .norm_forms import NORM_FORMS, time_norm_forms
from .report import BenchResult, format_report, to_json, write

__all__ = [
    "NORM_FORMS",
    "BenchResult",
    "PeakMemory",
    "format_report",
    "inference_flops",
    "measure",
    "time_norm_forms",
    "to_json",
    "training_flops",
    "without_norms",
    "write",
]
