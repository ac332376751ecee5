"""Determinism on a GPU, decided in one place: the settings, and what a run records when torch says a kernel
it ran is not deterministic.

* ``torch.use_deterministic_algorithms(True, warn_only=True)``: every op that has a deterministic CUDA kernel
  uses it; one that has none warns (naming itself) instead of stopping a run that may be hours in. The warning
  is not lost: :func:`watch` notes it and every epoch after it records it (``nondeterministic`` in the run's
  record), so no record claims bit-for-bit repeats it does not have, and ``python -m vitbn_nb check-device``
  trains a run twice on the device and compares. torch warns some of these once per process, so the list is the
  process's: a run records every alert seen since the process started, its own included.
* ``torch.utils.deterministic.fill_uninitialized_memory = False``: with deterministic algorithms on, torch
  fills every ``torch.empty`` (and ``resize_``) with NaN, one more kernel per allocation, inside a captured
  CUDA graph too. The book's code never reads memory it has not written; a kernel that did would make two
  identical runs differ, which the device check looks for. So the fill would only cost.
* ``CUBLAS_WORKSPACE_CONFIG`` (cuBLAS's deterministic workspace) is set when the package is imported
  (``vitbn_nb/__init__.py``): cuBLAS reads it once, when it starts, whichever module starts it.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator

import torch

#: Words of torch's non-determinism alerts: "... does not have a deterministic implementation, but you set
#: 'torch.use_deterministic_algorithms(True, warn_only=True)'" and "... defaults to a non-deterministic algorithm".
_ALERTS = ("deterministic implementation", "non-deterministic algorithm", "use_deterministic_algorithms")
#: Every alert this process has seen (first sentence), in order.
_SEEN: dict[str, None] = {}
#: Re-emitted warnings, so each shows once per place (as Python's default filter would have shown it).
_SHOWN: dict = {}


def use() -> None:
    """Deterministic kernels and settings on CUDA (the CPU's kernels are deterministic as they are)."""
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.utils.deterministic.fill_uninitialized_memory = False


def is_alert(text: str) -> bool:
    return any(words in text for words in _ALERTS)


@contextlib.contextmanager
def watch() -> Iterator[None]:
    """Note torch's non-determinism alerts raised inside the block; every warning still reaches the user (once
    per place, when the block ends)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield
    for warning in caught:
        text = str(warning.message)
        if is_alert(text):
            _SEEN.setdefault(text.split(". ")[0][:200])
        warnings.warn_explicit(
            warning.message, warning.category, warning.filename, warning.lineno, registry=_SHOWN, source=warning.source
        )


def recorded() -> dict:
    """What an epoch records: ``{"nondeterministic": [alerts]}`` once this process has seen one, else nothing."""
    return {"nondeterministic": list(_SEEN)} if _SEEN else {}
