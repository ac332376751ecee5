"""Where the time goes: the book's engine against article 1's pipeline, model by model.

``python -m vitbn_nb bench`` (or ``make bench``) measures, on MNIST without augmentation (article 1's
data, which it timed), for ViT, ViTBNFFN and ViTBN at depths 1 and 6 (which include article 1's
trio "as run": ViT depth 6 against BatchNorm models of depth 1), with chapter 08's settings:

* training and inference throughput (images/s) through two input pipelines (:mod:`.pipelines`):
  ``reference``, written to match article 1's loop, and ``engine``, the book's; and the ratio
  engine / reference, with each pipeline's time split into data loading and compute;
* FLOPs per training step (``torch.utils.flop_counter.FlopCounterMode``, attention included), the
  achieved FLOP/s and the model FLOP utilisation against this machine's measured fp32 matmul peak;
* peak memory of each configuration;
* inference with BatchNorm folded into the neighbouring Linear layers
  (:func:`vitbn_nb.models.fold_batchnorm`) against the unfolded model and the LayerNorm ViT;
* the three ways of writing BatchNorm on ``(b, n, d)`` tokens.

Every timing is a median (:mod:`vitbn_nb.timing`, the book's one home for clocks). The result is a
:class:`BenchResult` of DataFrames; the command prints it and writes JSON to
``build/bench/bench-<date>.json`` and ``figures/bench.json``. Chapter 08 shows the committed
``figures/bench.json`` (saying so, with its machine and date), or calls :func:`measure` itself when asked.
"""

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
