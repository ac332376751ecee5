"""What article 1's introduction says of the series' transfer article (not among the sources; it gives no numbers),
and the claim chapter 06 tests."""

from __future__ import annotations

from ...judging.claims import BN_MODELS, RATIO, Claim

SAID = {
    "bn_faster": "the models with BatchNorm register a significant gain in inference time on EMNIST",
    "cnn": "as an order-of-magnitude estimate, the inference times are compared with a CNN trained on the same data",
}


def findings() -> list[Claim]:
    return [
        Claim(
            f"article1/transfer/{model}",
            "article 1, on the series' transfer article",
            SAID["bn_faster"],
            RATIO,
            f"{model} inference gain g = 1 − T({model}) / T(ViT d6) on the transfer set (%)",
            +1,
            level=0.0,
        )
        for model in BN_MODELS
    ]
