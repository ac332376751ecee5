"""What article 1 ("Speeding up the Vision Transformer with BatchNorm") states that more than one chapter, or the
README, reads: its Experiment 1 (Figs 3-6) and Experiment 2 (Fig 8) as data, the machine it names, and its speed
ratios. Chapter 03's ``article.py`` and chapter 04's judge these; chapter 08 and the README set measurements beside
them.
"""

from __future__ import annotations

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
#: What article 1 states in its text about Experiment 2 (its optimised runs, Fig 8). Table 2's lr and batch sizes
#: and Table 3's gains are images in the article; its text gives neither, so none is quoted.
EXPERIMENT2 = dict(
    accuracy={"ViT": 98.1, "ViTBNFFN": 97.6, "ViTBN": 97.8},  # after 30 epochs with the optimised settings
    r_t={"ViTBNFFN": 3.9, "ViTBN": 3.5},
    r_v={"ViTBNFFN": 2.6, "ViTBN": 2.5},
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


#: Per kind and BatchNorm model: at lr 0.0005, 0.005, 0.01, then the optimised settings. The article says depth 6
#: for all three; that its BatchNorm models computed one block is the reference repository's, not the article's.
RATIOS = {
    kind: {
        model: (*(quoted[key][model] for quoted in EXPERIMENT1.values()), EXPERIMENT2[key][model])
        for model in ("ViTBNFFN", "ViTBN")
    }
    for kind, key in (("training", "r_t"), ("inference", "r_v"))
}
