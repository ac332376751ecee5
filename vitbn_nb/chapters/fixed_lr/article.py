"""What article 1 reports of its Experiment 1 (Figs 3-6), and the claims chapter 03 tests (the settings default to
its facts); what other chapters read of it too lives in :mod:`vitbn_nb.judging.article1`."""

from __future__ import annotations

from ...judging.article1 import EXPERIMENT1, MARGINS
from ...judging.claims import ABSOLUTE, BN_MODELS, CURVE, RATIO, WORDING, Claim

#: Article 1's protocol as it reports it (the settings' ``paper`` defaults, and the book's quotes of the article).
EPOCHS = 30
BATCH_SIZE = 100

#: Claims encoded after chapter 03's seed plan was written and its runs trained (read off the article's text, not the
#: runs): judged by the test and at the seeds the plan had fixed, and said so under the plan.
ENCODED_AFTER_PLAN = {"article1/lr0.005/converges": "2026-11-29"}

FIG6 = (
    "training time per epoch varies with lr most for ViT; ViTBN stays roughly the same; "
    "ViTBNFFN changes appreciably only at lr 0.01"
)


def findings() -> list[Claim]:
    """The claims of Experiment 1 (per rate: accuracies, gains, convergence, breakdown) and of its conclusion."""
    found = []
    for lr, quoted in EXPERIMENT1.items():
        where = f"article 1, {quoted.figure}"
        bounds = [(model, value, 0, f"≈ {value:g} %") for model, value in quoted.accuracy.items()]
        bounds += [(model, value, +1, f"above {value:g} %") for model, value in quoted.accuracy_above.items()]
        for model, value, direction, words in bounds:
            says, measure = f"{model} {words} after {EPOCHS} epochs", f"{model} final test accuracy, lr {lr:g} (%)"
            key = f"article1/lr{lr:g}/accuracy/{model}"
            margin = MARGINS["final accuracy"] if direction == 0 else None
            found.append(Claim(key, where, says, ABSOLUTE, measure, direction, value, EPOCHS, margin))
        for model in BN_MODELS:
            for kind, key in (("training", "r_t"), ("inference", "r_v")):
                says = (
                    f"{kind} time per epoch sped up by at least 60 % (its {key} = {quoted.ratios(key)[model]:g}; it "
                    "names an NVIDIA L4)"
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
        # "very similar" is an equivalence (the rule's margin), judged over the article's 30-epoch curves as Fig 3's is
        Claim(
            "article1/lr0.005/converges",
            "article 1, Fig 4 and summary of results",
            "the standard ViT does not seem to have any advantage in faster convergence; the three models have very "
            "similar convergences",
            CURVE,
            "ViT − BatchNorm model mean test accuracy over the epochs, lr 0.005 (pt)",
            WORDING["very similar"],
            epochs=EPOCHS,
            margin=MARGINS["convergence"],
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
    # Fig 6 (as run, its figure's models): each rate's time per epoch against lr 0.0005's, seed by seed on one machine
    where6, base = "article 1, Fig 6", min(EXPERIMENT1)
    relative = lambda model, lr: f"{model} training time per epoch at lr {lr:g} over lr {base:g}'s, minus one (%)"
    found += [
        Claim(
            f"article1/fig6/vit_most/{model}",
            where6,
            "the variation of the training time with the learning rate is most significant for ViT",
            CURVE,
            f"ViT's largest |change| of training time per epoch across the rates minus {model}'s (pt of %)",
            +1,
        )
        for model in BN_MODELS
    ]
    found += [
        Claim(
            f"article1/fig6/ViTBN/lr{lr:g}",
            where6,
            "the training time for ViTBN remains roughly the same as we vary the learning rate",
            CURVE,
            relative("ViTBN", lr),
            0,
            margin=MARGINS["time across lrs"],
        )
        for lr in sorted(EXPERIMENT1)[1:]
    ]
    largest = max(EXPERIMENT1)
    found += [
        Claim(
            f"article1/fig6/ViTBNFFN/lr{lr:g}",
            where6,
            "for ViTBNFFN, the variation becomes significant only at a relatively large value (~0.01) of the learning "
            "rate",
            CURVE if lr != largest else RATIO,
            relative("ViTBNFFN", lr),
            0 if lr != largest else +1,
            MARGINS["time across lrs"].points if lr == largest else None,
            margin=MARGINS["time across lrs"] if lr != largest else None,
        )
        for lr in sorted(EXPERIMENT1)[1:]
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
