"""Where the time goes: the book's engine against article 1's pipeline, model by model (``python -m vitbn_nb bench``,
with chapter 08's settings); :mod:`.measurements` lists what it measures, :mod:`.report` what it prints and writes."""

from __future__ import annotations

from .measurements import PeakMemory, inference_flops, measure, training_flops, without_norms
from .norm_forms import NORM_FORMS, time_norm_forms
from .report import BenchResult, to_json

__all__ = ["NORM_FORMS", "BenchResult", "PeakMemory", "inference_flops", "measure", "time_norm_forms", "to_json"]
__all__ += ["training_flops", "without_norms"]
