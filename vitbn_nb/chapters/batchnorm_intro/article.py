"""What article 2 says of its DNN experiment (Figs 1-3: in words only, it gives no accuracies; quoted, in
translation), and the claims chapter 01 tests at the protocol's two rates (:class:`.settings.IntroSettings`)."""

from __future__ import annotations

from ...judging.claims import CURVE, DIFFERENCE, Claim
from .settings import IntroSettings

SAID = {
    "article2/fig1": "lr 0.01: with BatchNorm the network converges faster; DNNBN_d3 reaches a higher test "
    "accuracy and a lower training loss than DNN_d3 within the 15 epochs.",
    "article2/fig2": "lr 0.1: the high learning rate makes DNN_d3 unstable, while the model with BatchNorm "
    "stays very stable.",
    "article2/fig3": "DNN_d3 stops learning at the high learning rate; DNNBN_d3's accuracy is affected much less.",
}
#: Article 2's protocol: 15 epochs of augmented MNIST at batch 100.
EPOCHS = IntroSettings.epochs


def findings(settings: IntroSettings) -> list[Claim]:
    """Figs 1-3 at the settings' low and high rate (their keys name the figures, their measures the rates)."""
    low, high = min(settings.lrs), max(settings.lrs)
    mean = "DNNBN_d3 − DNN_d3 mean test accuracy over the epochs, lr {:g} (pt)"
    claim = lambda fig, what, kind, measure: Claim(
        f"article2/fig{fig}/{what}", f"article 2, Fig {fig}", SAID[f"article2/fig{fig}"], kind, measure, +1
    )
    return [
        claim(1, "converges", CURVE, mean.format(low)),
        claim(1, "final", DIFFERENCE, f"DNNBN_d3 − DNN_d3 final test accuracy, lr {low:g} (pt)"),
        # a network that never learns never falls below its best: staying stable is read as still learning
        claim(2, "stable", CURVE, mean.format(high)),
        claim(3, "cost", DIFFERENCE, f"DNN_d3's fall − DNNBN_d3's fall in final accuracy, lr {low:g} → {high:g} (pt)"),
    ]
