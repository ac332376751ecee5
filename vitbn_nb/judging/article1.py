"""What article 1 ("Speeding up the Vision Transformer with BatchNorm") states that more than one chapter, or the
README, reads: its Experiment 1 (Figs 3-6) and Experiment 2 (Fig 8) as data, the machine it names, and its speed
ratios. Chapter 03's ``article.py`` and chapter 04's judge these; chapter 08 and the README set measurements beside
them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .verdicts import Margin


@dataclass(frozen=True)
class Reported:
    """What article 1 reports of one set of runs (a rate of Experiment 1, or Experiment 2's optimised runs): final
    accuracies in % ("≈", and "above" where it gives only a bound), ratios r = T_ViT / T_model per BatchNorm model
    (``r_t`` training, ``r_v`` inference), the figure, the epoch near which ViT became unstable, and its finding."""

    accuracy: dict[str, float] = field(default_factory=dict)
    r_t: dict[str, float] = field(default_factory=dict)
    r_v: dict[str, float] = field(default_factory=dict)
    accuracy_above: dict[str, float] = field(default_factory=dict)
    figure: str = ""
    vit_unstable_epoch: int | None = None
    note: str = ""

    def ratios(self, key: str) -> dict[str, float]:
        """``r_t`` or ``r_v``."""
        return {"r_t": self.r_t, "r_v": self.r_v}[key]


#: Per rate. The text swaps a label at lr 0.0005 ("r_t(ViTBNFFN) = 2.5" is ViTBN's); it is read as ViTBN's here.
EXPERIMENT1 = {
    0.0005: Reported(
        figure="Fig 3",
        accuracy={"ViT": 98.2, "ViTBNFFN": 97.8, "ViTBN": 97.1},
        r_t={"ViTBNFFN": 2.7, "ViTBN": 2.5},
        r_v={"ViTBNFFN": 2.6, "ViTBN": 2.5},
        note="ViT converges in fewer epochs and ends slightly more accurate; BN models >2x faster (~60 % gain)",
    ),
    0.005: Reported(
        figure="Fig 4",
        r_t={"ViTBNFFN": 3.6, "ViTBN": 3.5},
        r_v={"ViTBNFFN": 2.5, "ViTBN": 2.5},
        note="ViT has no convergence advantage; its training time rises (~70 % training gain, ~60 % inference)",
    ),
    0.01: Reported(
        figure="Fig 5",
        accuracy_above={"ViTBNFFN": 97.0, "ViTBN": 97.0},
        r_t={"ViTBNFFN": 2.7, "ViTBN": 4.3},
        r_v={"ViTBNFFN": 2.6, "ViTBN": 2.7},
        vit_unstable_epoch=15,
        note="ViT unstable from about epoch 15 (loss stops converging, accuracy plummets); BN models stay stable",
    ),
}
#: What article 1 states in its text about Experiment 2 (its optimised runs, Fig 8; accuracies after 30 epochs with
#: the optimised settings). Table 2's lr and batch sizes and Table 3's gains are images in the article; its text
#: gives neither, so none is quoted.
EXPERIMENT2 = Reported(
    figure="Fig 8",
    accuracy={"ViT": 98.1, "ViTBNFFN": 97.6, "ViTBN": 97.8},
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
        model: (*(quoted.ratios(key)[model] for quoted in EXPERIMENT1.values()), EXPERIMENT2.ratios(key)[model])
        for model in ("ViTBNFFN", "ViTBN")
    }
    for kind, key in (("training", "r_t"), ("inference", "r_v"))
}

_fig3 = EXPERIMENT1[0.0005].accuracy
#: The equivalence margins article 1 resolves (the rule's :class:`~vitbn_nb.judging.verdicts.Margin`), per measure.
#: Final accuracy: the smallest gap between the models it reads as a difference is Fig 3's ViT ≈ 98.2 % against
#: ViTBNFFN ≈ 97.8 % ("marginally higher"); convergence (mean accuracy over the epochs): it gives no number.
MARGINS = {
    "final accuracy": Margin(
        round(_fig3["ViT"] - _fig3["ViTBNFFN"], 6),
        _fig3["ViTBNFFN"],
        "by which article 1 calls ViT's final accuracy 'marginally higher' than ViTBNFFN's (Fig 3, lr 0.0005)",
    ),
    "convergence": Margin(None, min(_fig3.values()), "its accuracies are above 95 % (Fig 3)"),
    # how a model's time per epoch moves with the lr (Fig 6): the smallest move of a time ratio across its rates that
    # it reads as significant, ViTBN's r_t from lr 0.005 (Fig 4's text) to 0.01 (Fig 5's: "significantly higher")
    "time across lrs": Margin(
        round(100 * (EXPERIMENT1[0.01].r_t["ViTBN"] / EXPERIMENT1[0.005].r_t["ViTBN"] - 1), 1),
        float("nan"),
        "by which ViTBN's r_t moves from lr 0.005 to 0.01 (3.5 in Fig 4's text, 4.3 in Fig 5's, which calls it "
        "'significantly higher'), the smallest change of a time ratio across its rates that article 1 reads as "
        "significant",
        unit="%",
    ),
}
