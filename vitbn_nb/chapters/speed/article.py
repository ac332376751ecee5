"""How article 1's ratios r = T(ViT) / T(model) of mean time per epoch were taken (the ratios themselves, as its text
gives them, are :data:`vitbn_nb.judging.article1.RATIOS`): what chapter 08 sets its measurements beside."""

from __future__ import annotations

from ...judging.article1 import DEVICES

SETUP = (
    f"article 1's text on Figures 3-5 and 8 (its Tables 1 and 3 hold the gains): {DEVICES}; MNIST without "
    "augmentation, a DataLoader over ToTensor, time per epoch; all three at depth 6 as the article says, the "
    "BatchNorm models computing one block as the reference repository shows"
)
