# ---
# jupyter:
#   jupytext:
#     cell_metadata_filter: tags,-all
#     formats: ipynb,py:percent
#     notebook_metadata_filter: kernelspec,jupytext
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 5. ViT and ViTBNFFN at the same depth
#
# Chapter 3 compared a depth-6 ViT with the one-block BatchNorm models article 1's reference code
# ran (an early return, from commit 5c9074d until its fixes 27ca0f8 and 297070d), and, as article 1 wrote it, all three at
# depth 6. Article 2 ("Vision Transformer with
# BatchNorm: optimizing the depth", a later article by the same author) isolates the norm
# instead: it gives **ViT and ViTBNFFN the same configuration, depth included**, and varies the
# depth. Its two findings, which this chapter tests:
#
# 1. with a reasonable learning rate and batch size, ViTBNFFN **converges faster** than ViT
#    once the encoder is deep enough;
# 2. as the learning rate rises, ViTBNFFN is **more stable** than ViT, the more so the deeper
#    the encoder.
#
# We redraw its Figures 8, 9 and 10 from our own runs, each beside the article's finding and a
# verdict by the book's one rule (only over runs of article 2's whole protocol), and
# add a summary of final accuracy against depth. Beside them, and not a claim of either article, a
# third model answers article 2's question without any normalisation: ViTDyT (chapter 2), trained
# at one depth and learning rate of the study with the same protocol and seeds.

# %%
# On Colab: install the book's package here once the book is public: set repository and ref under [tool.vitbn-book] in pyproject.toml, then run `python -m vitbn_nb colab-cell`.

# %% tags=["parameters"]
profile = "auto"
force = False
# Any of the chapter's settings (the table below shows them), as `papermill -p epochs 3` sets them; None
# keeps the profile's value, and another value trains runs of its own and never writes figures/.
train = None
test_batch_size = None
train_size = None
test_size = None
seeds = None
fig8_primary_seeds = None
fig9_primary_seeds = None
confirmation = None
epochs = None
batch_size = None
fig8_lr = None
fig8_depths = None
fig9_lr = None
fig9_depths = None
fig10_depths = None
extra_models = None
extra_depth = None
extra_lr = None
engine = None

# %% [markdown]
# The profile sets the scale: `paper` is article 2's protocol (the full training set, 10
# epochs) with the seeds its plan gives (three, more for the primary contrast; the article shows one curve per model and states no seeds); `cpu` trains every depth on a subset for
# a few epochs, also with three seeds (the settings below give the numbers); `smoke` trains only the depths that give every
# figure some content, on a few hundred images (its numbers say nothing).

# %%
from vitbn_nb import chapters
from vitbn_nb.chapters.depth_study import study as depth, numbers as depth_numbers

settings, force = chapters.from_notebook("05_depth_study", globals())
settings

# %% [markdown]
# ## The protocol
#
# Both models have the reference configuration of the series (28 × 28 images in 7 × 7
# patches, 16 + 1 tokens with the CLS token, embedding 64, 8 heads of 64, FFN width 128, a
# single Linear as head, dropout 0); they differ only in the feed-forward network of each
# encoder block: ViT normalises its input with LayerNorm, ViTBNFFN drops that LayerNorm and
# puts a BatchNorm between the FFN's first Linear and its GELU. Attention keeps its LayerNorm
# in both. The **depth** $d$, the number of encoder blocks, is the one thing that varies, and
# it is **the same for both models** in every comparison.
#
# The data is **augmented MNIST** (random rotation up to 20°, translation up to 20 %, and with
# probability 0.2 a zoom-out by 2–3 then resize to 28 × 28). Article 2 augments its
# validation set too; our run store augments the test set **once, with a fixed seed**, drawn on
# the CPU whatever the device, so both models and every epoch are tested on the same images (runs
# a GPU trained before the book's one data stream drew their own, and pair with no other run).
# Adam, cross-entropy, training batch
# 100, test batch 5000, 10 epochs. Learning rate 0.003 at depths 4–7 (Figure 8), 0.005 at
# depths 1–4 (Figure 9); Figure 10 needs depths 2 and 3 at 0.003 as well. These numbers are
# written once, in the chapter's settings (`fig8_lr`, `fig8_depths`, `fig9_lr`, `fig9_depths`,
# `fig10_depths`): the runs, the panels, the captions and the claims below all follow them.

# %%
depth.overview(settings)

# %% [markdown]
# Training (or, when the runs are already in the run store, reading them back; `force=True`
# retrains). The result is one tidy table with a row per run and epoch.

# %%
result = depth.run(settings, force=force)

# %% [markdown]
# ## How we call a difference
#
# For each depth we take the final test accuracies and their difference **ViTBNFFN − ViT**,
# paired by seed, and judge it by the book's one rule (the book's claims page, "How this book
# judges a claim"). A seed's two runs pair only where they drew one data stream: the same
# training order, the same augmentations and the same test images, drawn on the CPU from the
# seed on every device. A difference the article asserts gets its 95 % interval: "agrees",
# "disagrees", or "within noise" with **the smallest difference its seeds could have
# detected** (80 % power) from the spread of the figure's cells. An article's "comparable", and
# the accuracies it quotes, are judged by **equivalence** within a stated margin: "equivalent",
# "not equivalent" or "undecided", never "within noise". Article 2 draws one conclusion from
# Figures 8 and 9, that beyond a critical depth ViTBNFFN **converges** significantly faster;
# that is the chapter's one **primary contrast** per learning rate (each seed's mean test
# accuracy over the epochs, ViTBNFFN − ViT, averaged over the depths its text places beyond
# the critical depth), fixed in the chapter's first plan. Where any run it reads trained before
# that plan was committed, its verdict is **exploratory** (the claims table says which and when); a
# **confirmatory replication** on fresh seeds (below) tests an exploratory one again, planned from the
# spreads these runs measured and committed before any of its runs. Each panel's cell is secondary, decided
# after Holm's correction over its figure's cells. Article 2's findings are about its whole
# protocol (10 epochs of augmented MNIST's training set at batch 100), so the rule judges them
# only over runs that reached it; shorter runs get "not testable at this scale", with the steps
# they reached, and their measured differences are shown without a verdict. The article's
# findings, as reported:

# %%
depth_numbers.article_reported(settings)

# %% [markdown]
# ## The seed plan
#
# How many seeds each claim reads was fixed by a power analysis over the full-protocol runs held
# when the plan was committed (the time git gives, kept in `figures/plan_commits.json`), and
# written in the chapter's settings (`seeds`, `fig8_primary_seeds`, `fig9_primary_seeds`). A
# verdict reads exactly those seeds, never more; each row of the claims table says whether every
# run it reads started after that commit (confirmatory) or not (exploratory). The table gives,
# per claim, its test, the spread of its claim family, the effect to detect (the article gives no number of its own, so the rule's 2 points), the seeds that detect
# it, the seeds planned, what those detect, and the runs and hours left to train:

# %%
depth.seed_plan_table(result)

# %% [markdown]
# ## The confirmatory replication
#
# Where a primary contrast is exploratory, the replication tests it again on fresh seeds, never
# trained for this chapter before, planned from the spread its primary statistic realised (at an
# upper confidence bound, since a few seeds measure a spread loosely) to detect the smallest effect
# the first result leaves standing. The "comparable" cells are planned as equivalences at the
# margin article 2 resolves, capped by the rule's ceiling, each from its own cell's spread; those the
# budget cannot afford say what they would take. Its verdicts are never pooled with the first
# ones: they are rows of their own (`article2/confirm/...`) in the claims table below, its primary
# contrast beside the first ones:

# %%
depth.confirmation_plan_table(result)

# %% [markdown]
# ## Figure 8: learning rate 0.003, depths 4 to 7
#
# **Article 2 reports (Figure 8):** at $d = 4$ and $d = 5$ the two models are comparable (ViT
# slightly ahead at $d = 4$, ViTBNFFN slightly ahead at $d = 5$), and they stay comparable for
# $d < 4$; at $d = 6$ and $d = 7$ ViTBNFFN is **significantly better**, which the article says
# holds for any $d \ge 6$.
#
# Each panel shows the mean over seeds with a band from the lowest to the highest seed, and
# the final difference with our call.

# %%
depth.fig8_figure(result)

# %%
depth.fig8_table(result)

# %% [markdown]
# ## Figure 9: learning rate 0.005, depths 1 to 4
#
# **Article 2 reports (Figure 9):** at $d = 1$ and $d = 2$ the models are comparable (ViT
# slightly ahead at $d = 1$, hardly any difference at $d = 2$); at $d = 3$ ViTBNFFN is
# **slightly better**; at $d = 4$ it is **clearly better**, and so for any $d \ge 4$. The
# article concludes that beyond a critical depth ViTBNFFN converges significantly faster, and that,
# within the range it tried, this critical depth seems to fall as the learning rate rises (at a
# fixed batch size).

# %%
depth.fig9_figure(result)

# %%
depth.fig9_table(result)

# %% [markdown]
# ## Figure 10: the same depth at both learning rates
#
# Each panel is one model at one depth, trained at lr 0.003 (solid) and 0.005 (dashed); rows
# are depths 2, 3, 4, the left column ViT and the right ViTBNFFN.
#
# **Article 2 reports (Figure 10):** at $d = 2$ the higher learning rate affects both models
# in much the same way. At $d = 3$ the difference is significant: after 10 epochs **ViT falls
# from ≈ 91 % to ≈ 78 %**, while **ViTBNFFN only goes from ≈ 92 % to ≈ 90 %**; the same
# qualitative feature holds at $d = 4$. For a deep enough encoder, the effect of a high
# learning rate on ViTBNFFN appears clearly milder.

# %%
depth.fig10_figure(result)

# %% [markdown]
# Each model's final accuracy at both learning rates, the drop (paired by seed), and which
# model the higher learning rate hurts less, beside the article's finding:

# %%
depth.fig10_table(result)

# %% [markdown]
# ## Summary: final accuracy against depth
#
# The book's own view of the same runs: the final test accuracy of each model against depth,
# one panel per learning rate, with bars from the lowest to the highest seed. If the article's
# picture holds, the two curves run together at small depths and part beyond a critical depth,
# with ViTBNFFN above.

# %%
depth.depth_summary_figure(result)

# %%
depth.depth_summary_table(result)

# %% [markdown]
# ## Beside article 2: a ViT without normalisation
#
# Neither article trains a ViT without normalisation; this section is the book's addition and
# carries no verdict. ViTDyT replaces every LayerNorm of ViT by DyT (Zhu et al., "Transformers
# without Normalization", CVPR 2025: $w \odot \tanh(\alpha x) + b$, chapter 2), which computes no
# statistic at all. Its runs use the protocol and the chapter's `seeds` of the article's two models at the depth
# and learning rate the settings name (`extra_models`, `extra_depth`, and `extra_lr`, Figure 8's
# rate unless set: ViTDyT at depth 6 and lr 0.003, one of Figure 8's panels), so the runs of ViT
# and ViTBNFFN there are the same runs the figures above show. The table gives each model's final accuracy and ViTDyT's
# differences from the other two, paired by seed, as measured; Zhu et al. tuned DyT on far larger
# models and data, and nothing here says how it would fare at another depth, rate or scale.

# %%
depth.extra_models_figure(result)

# %%
depth.extra_models_table(result)

# %% [markdown]
# ## The claims, judged by the book's rule
#
# Every one of article 2's depth-study claims (Figures 8–10) that this chapter can test, the
# primary contrasts first, with the measured value, its interval and the verdict of the book's
# one decision rule (the book's claims page, "How this book judges a claim"): a difference's
# 95 % interval and, within noise, what its seeds could have detected; an equivalence's 90 %
# interval against its margin; no verdict with fewer than three seeds; and "not testable at
# this scale" for a number the article reached at a protocol these runs did not. The four
# accuracies article 2 quotes at Figure 10, $d = 3$, are numbers of its whole protocol, each
# judged by equivalence within the margin around the article's value.

# %%
depth.claims_table(result)

# %% [markdown]
# ## What to take from this
#
# Computed from the claims table above, so it says what this run's verdicts say:

# %%
result.takeaway()

# %% [markdown]
# Unlike chapter 3's as-run comparison, every comparison here is at equal depth, and a seed's two
# runs drew one data stream: the norm is the one thing they differ in. Article 2 compares accuracy only, not speed: at equal depth the two models do
# nearly the same arithmetic, and chapter 8 ("where the speed comes from") measures what that
# means for their training and inference times.
