"""Article 1's ratios r = T(ViT) / T(model) of mean time per epoch, as its text gives them (its Tables 1 and 3 hold
the gains), and how they were taken: what chapter 08 sets its measurements beside."""

from __future__ import annotations

from ..bayes_opt.article import EXPERIMENT2
from ..fixed_lr.article import DEVICES, EXPERIMENT1

#: Per kind and BatchNorm model: at lr 0.0005, 0.005, 0.01, then the optimised settings. The article says depth 6
#: for all three; that its BatchNorm models computed one block is the reference repository's, not the article's.
RATIOS = {
    kind: {
        model: (*(quoted[key][model] for quoted in EXPERIMENT1.values()), EXPERIMENT2[key][model])
        for model in ("ViTBNFFN", "ViTBN")
    }
    for kind, key in (("training", "r_t"), ("inference", "r_v"))
}
SETUP = (
    f"article 1's text on Figures 3-5 and 8 (its Tables 1 and 3 hold the gains): {DEVICES}; MNIST without "
    "augmentation, a DataLoader over ToTensor, time per epoch; all three at depth 6 as the article says, the "
    "BatchNorm models computing one block as the reference repository shows"
)
