"""Chapter 06's settings: the ``paper`` protocol as the defaults, ``cpu`` and ``smoke`` as differences."""

from __future__ import annotations

from dataclasses import dataclass

from ..base import OptimisedSettings


@dataclass(frozen=True)
class TransferSettings(OptimisedSettings):
    """Chapter 06: the depth-6 trio optimised again on augmented MNIST, 30 epochs each, and the CNN; the BatchNorm
    models also at the one block the series' transfer checkpoints computed (``as_run``, with their depth-6 lr and
    batch size); ``inference_repeats`` interleaved rounds of passes over ``transfer_images`` images (the reference
    ``eval_emnist.py`` times 10 passes; the rule's intervals ask for 20 rounds)."""

    chapter = "06_emnist_transfer"  # its notebook's name (a class attribute, not a setting)

    reoptimise: bool = True
    depth: int = 6
    as_run: bool = True
    inference_repeats: int = 20
    #: Images per timed pass: the transfer set repeated up to this count (a pass's time does not depend on the
    #: pixels); EMNIST's digits test split holds 40,000. Accuracy is always read on the set itself.
    transfer_images: int = 40000
    cnn_lr: float = 1e-3
    cnn_batch_size: int = 100


#: Each depth-6 model tuned for itself on augmented MNIST (a short search), so that no model trains with
#: another's hyperparameters; one seed: its accuracy differences are shown, not judged.
CPU = dict(seeds=1, trials=8, trial_epochs=1, epochs=6, train_size=10000, test_size=2000)

SMOKE = dict(seeds=1, reoptimise=False, trials=3, trial_epochs=1, epochs=1, train_size=400, test_size=300)
SMOKE |= dict(inference_repeats=2, transfer_images=600)
