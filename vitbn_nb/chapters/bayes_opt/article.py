"""The claims chapter 04 tests of what article 1 states in its text about Experiment 2 (its optimised runs, Fig 8:
:data:`vitbn_nb.judging.article1.EXPERIMENT2`). Table 2's lr and batch sizes and Table 3's gains are images in the
article; its text gives neither, so none is quoted."""

from __future__ import annotations

from ...judging.article1 import CODE_DEVICE, EXPERIMENT2, HARDWARE, MARGINS
from ...judging.claims import ABSOLUTE, BN_MODELS, CURVE, RATIO, Claim
from .settings import BayesOptSettings

EPOCHS = BayesOptSettings.epochs
DEVICES = f"no machine stated for Experiment 2 (an {HARDWARE} for Experiment 1), {CODE_DEVICE}"


def findings() -> list[Claim]:
    """The optimised runs' accuracies, gains and convergence, as article 1's text on Fig 8 states them."""
    where = "article 1, text on Fig 8"
    found = [
        Claim(
            f"article1/optimised/accuracy/{model}",
            where,
            f"{model} {value:g} % after {EPOCHS} epochs with the optimised settings",
            ABSOLUTE,
            f"{model} final test accuracy, optimised (%)",
            level=value,
            epochs=EPOCHS,
            margin=MARGINS["final accuracy"],
        )
        for model, value in EXPERIMENT2.accuracy.items()
    ]
    summary = f"{where} and its summary of results"
    for model in BN_MODELS:
        for kind, key, level, words in (
            ("training", "r_t", 70.0, "above 70 %"),
            ("inference", "r_v", 60.0, "a little above 60 %"),
        ):
            says = (
                f"gain in {kind} time per epoch {words} (its {key} = {EXPERIMENT2.ratios(key)[model]:g}; it names no "
                "machine for Experiment 2)"
            )
            measure = f"{model} {kind} gain, optimised (%)"
            found.append(Claim(f"article1/optimised/{key}/{model}", summary, says, RATIO, measure, +1, level))
    says = "ViT converges in fewer epochs than ViTBNFFN and ViTBN"
    measure = "ViT − BatchNorm model mean test accuracy over the epochs, optimised (pt)"
    found.append(Claim("article1/optimised/converges", where, says, CURVE, measure, +1))
    return found
