"""What article 1 ("Speeding up the Vision Transformer with BatchNorm") reports of its Experiment 1 (Figs 3-6), the
machine it names, and the claims chapter 03 tests: the article's facts, as data (the settings default to them).
"""

from __future__ import annotations

from ...judging.claims import ABSOLUTE, BN_MODELS, CURVE, RATIO, Claim

#: Article 1's protocol as it reports it: every model at every rate for this many epochs (batch 100). The settings'
#: ``paper`` defaults read it; what the book says the article did reads it too, whatever a setting is changed to.
EPOCHS = 30
BATCH_SIZE = 100

#: Accuracies in %, ratios r = T_ViT / T_model. The text swaps a label at lr 0.0005 ("r_t(ViTBNFFN) = 2.5" is
#: ViTBN's); it is read as ViTBN's here.
EXPERIMENT1 = {
    0.0005: dict(
        figure="Fig 3",
        accuracy={"ViT": 98.2, "ViTBNFFN": 97.8, "ViTBN": 97.1},
        accuracy_above={},
        r_t={"ViTBNFFN": 2.7, "ViTBN": 2.5},
        r_v={"ViTBNFFN": 2.6, "ViTBN": 2.5},
        vit_unstable_epoch=None,
        note="ViT converges in fewer epochs and ends slightly more accurate; BN models >2x faster (~60 % gain)",
    ),
    0.005: dict(
        figure="Fig 4",
        accuracy={},
        accuracy_above={},
        r_t={"ViTBNFFN": 3.6, "ViTBN": 3.5},
        r_v={"ViTBNFFN": 2.5, "ViTBN": 2.5},
        vit_unstable_epoch=None,
        note="ViT has no convergence advantage; its training time rises (~70 % training gain, ~60 % inference)",
    ),
    0.01: dict(
        figure="Fig 5",
        accuracy={},
        accuracy_above={"ViTBNFFN": 97.0, "ViTBN": 97.0},
        r_t={"ViTBNFFN": 2.7, "ViTBN": 4.3},
        r_v={"ViTBNFFN": 2.6, "ViTBN": 2.7},
        vit_unstable_epoch=15,
        note="ViT unstable from about epoch 15 (loss stops converging, accuracy plummets); BN models stay stable",
    ),
}
FIG6 = (
    "training time per epoch varies with lr most for ViT; ViTBN stays roughly the same; "
    "ViTBNFFN changes appreciably only at lr 0.01"
)
#: The machine article 1 names for Experiment 1, and the device its reference code runs on (no commit of the reference
#: repository moves a model or a batch to a GPU: ``../shared/REFERENCE_FACTS.md``). Which of the two timed its epochs
#: the repository cannot tell: every comparison names both, none is GPU against CPU.
HARDWARE = "NVIDIA L4 GPU (Colab)"
CODE_DEVICE = "the CPU as its reference code runs (no commit moves a model or a batch to a GPU)"
DEVICES = f"an {HARDWARE} as the article states, {CODE_DEVICE}"
DEVICES_SHORT = f"stated: {HARDWARE}; reference code: CPU"


def against_article(hardware: str, devices: str = DEVICES) -> str:
    """A ratio's scale: the machines that timed this book's runs, and article 1's (both of them)."""
    return f"{hardware} here; article 1: {devices}"


def claims() -> list[Claim]:
    """The claims of Experiment 1 (per rate: accuracies, gains, convergence, breakdown) and of its conclusion."""
    found = []
    for lr, quoted in EXPERIMENT1.items():
        where = f"article 1, {quoted['figure']}"
        bounds = [(model, value, 0, f"≈ {value:g} %") for model, value in quoted["accuracy"].items()]
        bounds += [(model, value, +1, f"above {value:g} %") for model, value in quoted["accuracy_above"].items()]
        for model, value, direction, words in bounds:
            says, measure = f"{model} {words} after {EPOCHS} epochs", f"{model} final test accuracy, lr {lr:g} (%)"
            key = f"article1/lr{lr:g}/accuracy/{model}"
            found.append(Claim(key, where, says, ABSOLUTE, measure, direction, level=value, epochs=EPOCHS))
        for model in BN_MODELS:
            for kind, key in (("training", "r_t"), ("inference", "r_v")):
                says = (
                    f"{kind} time per epoch sped up by at least 60 % (its {key} = {quoted[key][model]:g}; it names an "
                    "NVIDIA L4)"
                )
                measure = f"{model} {kind} gain g = 1 − T({model}) / T(ViT), lr {lr:g} (%)"
                where_said = f"{where} and conclusion"
                found.append(Claim(f"article1/lr{lr:g}/{key}/{model}", where_said, says, RATIO, measure, +1, 60.0))
    fall = (
        "collapses: runs whose accuracy ends at least the rule's collapse threshold below their best so far, or "
        "diverged (counted per model)"
    )
    found += [
        Claim(
            "article1/lr0.0005/converges",
            "article 1, Fig 3",
            "the standard ViT converges in fewer epochs than the other models",
            CURVE,
            "ViT − BatchNorm model mean test accuracy over the epochs, lr 0.0005 (pt)",
            +1,
            epochs=EPOCHS,  # a claim about how the article's 30-epoch curves went: judged over them only
        ),
        # stability over the whole run (ViT near epoch 15, the BatchNorm models to the end): judged at its length only
        Claim(
            "article1/lr0.01/breakdown",
            "article 1, Fig 5",
            "ViT becomes unstable, its accuracy plummeting near epoch 15; ViTBNFFN and ViTBN remain stable",
            CURVE,
            f"ViT's {fall} against each BatchNorm model's, lr 0.01",
            +1,
            epochs=EPOCHS,
        ),
    ]
    # judged at equal depth over the learning-rate sweep, at article 1's largest rate and beyond
    found += [
        Claim(
            f"article1/larger_lr/{model}",
            "article 1, summary of results and conclusion",
            "models with BatchNorm allow one to use a larger learning rate during training without rendering the "
            "model unstable",
            CURVE,
            f"ViT's {fall} against {model}'s, both at depth 6, at a learning rate of {max(EXPERIMENT1):g} or more",
            +1,
            epochs=EPOCHS,
        )
        for model in BN_MODELS
    ]
    return found
