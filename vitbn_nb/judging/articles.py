"""What the articles report, in one place: every number and finding the chapters compare against.

Article 1 is "Speeding up the Vision Transformer with BatchNorm" (Experiments 1 and 2), article 2
the series' depth study (with its DNN introduction), both in ``../shared/seeds/``; the summary of
Touvron et al. (2022), "Three things everyone should know about Vision Transformers", is the
source of chapter 07's claims. A chapter imports these; none types an article's number itself.
"""

from __future__ import annotations

from dataclasses import dataclass

#: Article 2 describes Figures 1-3 in words only (it gives no accuracies); quoted, in translation.
ARTICLE2_DNN = {
    "article2/fig1": "lr 0.01: with BatchNorm the network converges faster; DNNBN_d3 reaches a higher test "
    "accuracy and a lower training loss than DNN_d3 within the 15 epochs.",
    "article2/fig2": "lr 0.1: the high learning rate makes DNN_d3 unstable, while the model with BatchNorm "
    "stays very stable.",
    "article2/fig3": "DNN_d3 stops learning at the high learning rate; DNNBN_d3's accuracy is affected much less.",
}

#: What article 1 reports ("Experiment 1"); accuracies in %, ratios r = T_ViT / T_model.
#: The text swaps a label at lr 0.0005 ("r_t(ViTBNFFN) = 2.5" is ViTBN's); it is read as ViTBN's here.
ARTICLE1_EXPERIMENT1 = {
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
ARTICLE1_FIG6 = (
    "training time per epoch varies with lr most for ViT; ViTBN stays roughly the same; "
    "ViTBNFFN changes appreciably only at lr 0.01"
)

#: What article 1 states in its text about Experiment 2. Table 2's lr and batch sizes
#: and Table 3's gains are images in the article; its text gives neither, so none is quoted.
ARTICLE1_EXPERIMENT2 = dict(
    accuracy={"ViT": 98.1, "ViTBNFFN": 97.6, "ViTBN": 97.8},  # after 30 epochs with the optimised settings
    r_t={"ViTBNFFN": 3.9, "ViTBN": 3.5},
    r_v={"ViTBNFFN": 2.6, "ViTBN": 2.5},
    trials=20,
    lr_range={"ViT": "[1e-5, 1e-3]", "ViTBNFFN": "[1e-5, 1e-2]", "ViTBN": "[1e-5, 1e-2]"},
    batch_range="[20, 120]",
    notes=(
        "the optimised ViT converges in fewer epochs than the BN models",
        "g_t above 70 % for both BN models, g_v a little above 60 % (Table 3)",
    ),
)


#: What article 1's introduction says of the series' transfer article (not among the sources) (no numbers are given).
ARTICLE1_TRANSFER = {
    "bn_faster": "the models with BatchNorm register a significant gain in inference time on EMNIST",
    "cnn": "as an order-of-magnitude estimate, the inference times are compared with a CNN trained on the same data",
}

#: Article 1's ratios r = T(ViT) / T(model) of mean time per epoch, as its text gives them (its Tables 1 and 3 hold
#: the gains): lr 0.0005, 0.005, 0.01 and the optimised settings. The article says depth 6 for all three; that its
#: BatchNorm models computed one block is the reference repository's (REFERENCE_FACTS.md), not the article's.
ARTICLE1_RATIOS = {
    kind: {
        model: (*(quoted[key][model] for quoted in ARTICLE1_EXPERIMENT1.values()), ARTICLE1_EXPERIMENT2[key][model])
        for model in ("ViTBNFFN", "ViTBN")
    }
    for kind, key in (("training", "r_t"), ("inference", "r_v"))
}
#: The machine article 1 names for Experiment 1 ("I have used the NVIDIA L4 Tensor Core GPU available at Google
#: Colab"), none for Experiment 2; and the device its reference code runs on: no commit of the reference repository
#: moves a model or a batch to a GPU (``../shared/REFERENCE_FACTS.md``, "Where the scripts put the model"). Which of
#: the two timed its epochs the repository cannot tell: every comparison names both, none is GPU against CPU.
ARTICLE1_HARDWARE = "NVIDIA L4 GPU (Colab)"
ARTICLE1_CODE_DEVICE = "the CPU as its reference code runs (no commit moves a model or a batch to a GPU)"
ARTICLE1_DEVICES = f"an {ARTICLE1_HARDWARE} as the article states, {ARTICLE1_CODE_DEVICE}"
ARTICLE1_DEVICES_SHORT = f"stated: {ARTICLE1_HARDWARE}; reference code: CPU"
ARTICLE1_DEVICES_EXPERIMENT2 = (
    f"no machine stated for Experiment 2 (an {ARTICLE1_HARDWARE} for Experiment 1), {ARTICLE1_CODE_DEVICE}"
)
ARTICLE1_RATIOS_SETUP = (
    f"article 1's text on Figures 3-5 and 8 (its Tables 1 and 3 hold the gains): {ARTICLE1_DEVICES}; MNIST without "
    "augmentation, a DataLoader over ToTensor, time per epoch; all three at depth 6 as the article says, the "
    "BatchNorm models computing one block as the reference repository shows"
)

#: The summary of Touvron et al. (2022), "Three things everyone should know about Vision Transformers",
#: among the source texts: what chapter 07 sets its runs beside, per question.
TOUVRON = {
    "parallel_parameters": "each parallel block has the parameters and compute of the blocks it replaces",
    "parallel_accuracy": "2 branches is the best choice; parallel helps deeper, harder-to-optimise models "
    "(ViT-S60: S20x3 ~ S30x2)",
    "parallel_latency_1": "a significant speed-up when processing one image at a time, on V100 GPUs",
    "parallel_latency_n": "no gain once the batch is large",
    "parallel_training": "(not reported in the summary)",
    "finetune_accuracy": "MHSA-only fine-tuning at 384x384 is very close to full fine-tuning (ImageNet-val and -V2); "
    "with FFN-only fine-tuning the results differ significantly",
    "finetune_memory": "about 10 % of GPU memory",
    "finetune_time": "about 10 % faster (fewer gradients to compute)",
    "finetune_storage": "MHSA weights are about 1/3 of the total: 66 % less storage per extra resolution",
    "hmlp_accuracy": "no accuracy against the linear stem; among the stems compared, hMLP 'achieved better "
    "accuracy-computation balance'",
    "hmlp_flops": "ViT-B with the hMLP stem needs 17.73 GFLOPs, less than 1 % more than with a linear projection",
    "hmlp_patches": "each 16x16 patch is processed on its own",
}


# -- the claims the book judges, each once, with its direction and kind ---------------------------------------

#: The kinds of claim, which decide how the one rule (:mod:`vitbn_nb.judging.verdicts`) applies.
DIFFERENCE = "difference"  # between two models, from paired per-seed values
CURVE = "curve"  # about a whole curve (converges faster, becomes unstable), from a per-seed number read off it
ABSOLUTE = "absolute"  # a number at the article's protocol: judged only where the runs reached it
RATIO = "ratio"  # a timing ratio on the article's hardware: judged on the article's qualitative claim
KINDS = (DIFFERENCE, CURVE, ABSOLUTE, RATIO)

#: The article's wording, encoded once: the same words give the same direction wherever they occur. "X slightly
#: better" and "X clearly better" both point to X (how large a lead is, the interval shows); "comparable" and "almost
#: no difference" point nowhere (0).
WORDING = {
    "comparable": 0,
    "almost no difference": 0,
    "affected much the same": 0,
    "slightly better": +1,
    "slightly exceeds": +1,
    "slightly higher": +1,
    "significantly better": +1,
    "clearly better": +1,
    "milder": +1,
}

#: The articles' protocols in training steps (batch 100 on 60,000 images: 600 steps an epoch).
STEPS_PER_EPOCH = 600
ARTICLE_STEPS = {"article 1, Experiment 1": 30 * STEPS_PER_EPOCH, "article 2": 10 * STEPS_PER_EPOCH}


@dataclass(frozen=True)
class Claim:
    """One finding of a source, as the book judges it.

    ``measure`` names the per-seed quantity (oriented: ``direction`` +1 means the source says it is positive,
    -1 negative, 0 "no difference"); ``level`` is the threshold of a ratio claim (a gain in %) or the value of an
    absolute one; ``epochs`` the article's epochs behind an absolute number.
    """

    key: str
    source: str
    says: str
    kind: str
    measure: str
    direction: int = 0
    level: float | None = None
    epochs: int | None = None

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"{self.key}: kind={self.kind!r} is not one of {KINDS}")
        if self.direction not in (-1, 0, 1):
            raise ValueError(f"{self.key}: direction={self.direction!r} is not +1, -1 or 0")


def worded_direction(lead: str, words: str) -> int:
    """The direction of "``lead`` ``words``" for the measure "ViTBNFFN − ViT" (ViT leading points the other way)."""
    return WORDING[words] * (-1 if lead == "ViT" else 1)


def _dnn_claims() -> list[Claim]:
    return [
        Claim(
            "article2/fig1/converges",
            "article 2, Fig 1",
            ARTICLE2_DNN["article2/fig1"],
            CURVE,
            "DNNBN_d3 − DNN_d3 mean test accuracy over the epochs, lr 0.01 (pt)",
            +1,
        ),
        Claim(
            "article2/fig1/final",
            "article 2, Fig 1",
            ARTICLE2_DNN["article2/fig1"],
            DIFFERENCE,
            "DNNBN_d3 − DNN_d3 final test accuracy, lr 0.01 (pt)",
            +1,
        ),
        Claim(
            "article2/fig2/stable",
            "article 2, Fig 2",
            ARTICLE2_DNN["article2/fig2"],
            CURVE,
            # a network that never learns never falls below its best: staying stable is read as still learning
            "DNNBN_d3 − DNN_d3 mean test accuracy over the epochs, lr 0.1 (pt)",
            +1,
        ),
        Claim(
            "article2/fig3/cost",
            "article 2, Fig 3",
            ARTICLE2_DNN["article2/fig3"],
            DIFFERENCE,
            "DNN_d3's fall − DNNBN_d3's fall in final accuracy, lr 0.01 → 0.1 (pt)",
            +1,
        ),
    ]


def _experiment1_claims() -> list[Claim]:
    claims = []
    for lr, quoted in ARTICLE1_EXPERIMENT1.items():
        where = f"article 1, {quoted['figure']}"
        for model, value in quoted["accuracy"].items():
            claims.append(
                Claim(
                    f"article1/lr{lr:g}/accuracy/{model}",
                    where,
                    f"{model} ≈ {value:g} % after 30 epochs",
                    ABSOLUTE,
                    f"{model} final test accuracy, lr {lr:g} (%)",
                    level=value,
                    epochs=30,
                )
            )
        for model, value in quoted["accuracy_above"].items():
            claims.append(
                Claim(
                    f"article1/lr{lr:g}/accuracy/{model}",
                    where,
                    f"{model} above {value:g} % after 30 epochs",
                    ABSOLUTE,
                    f"{model} final test accuracy, lr {lr:g} (%)",
                    +1,
                    level=value,
                    epochs=30,
                )
            )
        for model in ("ViTBNFFN", "ViTBN"):
            for kind, key in (("training", "r_t"), ("inference", "r_v")):
                claims.append(
                    Claim(
                        f"article1/lr{lr:g}/{key}/{model}",
                        f"article 1, {quoted['figure']} and conclusion",
                        f"{kind} time per epoch sped up by at least 60 % (its {key} = {quoted[key][model]:g}; it "
                        "names an NVIDIA L4)",
                        RATIO,
                        f"{model} {kind} gain g = 1 − T({model}) / T(ViT), lr {lr:g} (%)",
                        +1,
                        level=60.0,
                    )
                )
    claims.append(
        Claim(
            "article1/lr0.0005/converges",
            "article 1, Fig 3",
            "the standard ViT converges in fewer epochs than the other models",
            CURVE,
            "ViT − BatchNorm model mean test accuracy over the epochs, lr 0.0005 (pt)",
            +1,
        )
    )
    claims.append(
        Claim(
            "article1/lr0.01/breakdown",
            "article 1, Fig 5",
            "ViT becomes unstable, its accuracy plummeting near epoch 15; ViTBNFFN and ViTBN remain stable",
            CURVE,
            "ViT − BatchNorm model largest fall below the best accuracy so far over the whole run (a diverged run "
            "falls to chance), lr 0.01 (pt)",
            +1,
            # stability over the whole run (ViT near epoch 15, the BatchNorm models to the end): judged only where the
            # runs reached the article's 30 epochs
            epochs=30,
        )
    )
    # Judged at equal depth over chapter 03's learning-rate sweep, at article 1's largest rate and beyond, from each
    # run's stability over the whole run (not its final accuracy): judged only where the runs reached 30 epochs.
    claims += [
        Claim(
            f"article1/larger_lr/{model}",
            "article 1, summary of results and conclusion",
            "models with BatchNorm allow one to use a larger learning rate during training without rendering the "
            "model unstable",
            CURVE,
            f"ViT − {model} largest fall below the best accuracy so far over the whole run (a diverged run falls to "
            f"chance), both at depth 6, at a learning rate of {max(ARTICLE1_EXPERIMENT1):g} or more (pt)",
            +1,
            epochs=30,
        )
        for model in ("ViTBNFFN", "ViTBN")
    ]
    return claims


def _experiment2_claims() -> list[Claim]:
    claims = [
        Claim(
            f"article1/optimised/accuracy/{model}",
            "article 1, text on Fig 8",
            f"{model} {value:g} % after 30 epochs with the optimised settings",
            ABSOLUTE,
            f"{model} final test accuracy, optimised (%)",
            level=value,
            epochs=30,
        )
        for model, value in ARTICLE1_EXPERIMENT2["accuracy"].items()
    ]
    for model in ("ViTBNFFN", "ViTBN"):
        for kind, key, level, words in (
            ("training", "r_t", 70.0, "above 70 %"),
            ("inference", "r_v", 60.0, "a little above 60 %"),
        ):
            claims.append(
                Claim(
                    f"article1/optimised/{key}/{model}",
                    "article 1, text on Fig 8 and its summary of results",
                    f"gain in {kind} time per epoch {words} (its {key} = {ARTICLE1_EXPERIMENT2[key][model]:g}; it "
                    "names no machine for Experiment 2)",
                    RATIO,
                    f"{model} {kind} gain, optimised (%)",
                    +1,
                    level=level,
                )
            )
    claims.append(
        Claim(
            "article1/optimised/converges",
            "article 1, text on Fig 8",
            "ViT converges in fewer epochs than ViTBNFFN and ViTBN",
            CURVE,
            "ViT − BatchNorm model mean test accuracy over the epochs, optimised (pt)",
            +1,
        )
    )
    return claims


def _transfer_claims() -> list[Claim]:
    return [
        Claim(
            f"article1/transfer/{model}",
            "article 1, on the series' transfer article",
            ARTICLE1_TRANSFER["bn_faster"],
            RATIO,
            f"{model} inference gain over ViT on the transfer set, at equal depth 6 (%)",
            +1,
            level=0.0,
        )
        for model in ("ViTBNFFN", "ViTBN")
    ]


def claims() -> list[Claim]:
    """The claims whose words and keys do not depend on a chapter's settings, in chapter order; each key once. Chapter
    05's follow its settings' learning rates and live in its folder (``chapters.depth_study.article.claims``)."""
    found = [*_dnn_claims(), *_experiment1_claims(), *_experiment2_claims(), *_transfer_claims()]
    keys = [c.key for c in found]
    if len(keys) != len(set(keys)):
        raise ValueError(f"claim keys repeat: {sorted({k for k in keys if keys.count(k) > 1})}")
    return found
