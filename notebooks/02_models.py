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
# # 2. The models: ViT, ViTBNFFN and ViTBN
#
# This chapter takes the three Vision Transformers of the articles apart (and a fourth, ViTDyT,
# that the book adds to see a ViT without normalisation). We follow a batch of
# images through every stage, see where each model normalises and with what, compare
# BatchNorm and LayerNorm on the same token batch, watch BatchNorm switch from batch
# statistics to running statistics between training and evaluation, and count the parameters
# and FLOPs of every configuration the later chapters train. Nothing here trains a model:
# every number is read from the real modules of `vitbn_nb.models`.

# %%
# On Colab: install the book's package here once the book is public: set repository and ref under [tool.vitbn-book] in pyproject.toml, then run `python -m vitbn_nb colab-cell`.

# %% tags=["parameters"]
profile = "auto"
force = False
# Any of the chapter's settings (the table below shows them), as `papermill -p epochs 3` sets them; None
# keeps the profile's value, and another value trains runs of its own and never writes figures/.
train = None

# %% [markdown]
# The profile changes nothing in this chapter (it trains nothing); it is recorded on the
# figures and tables like everywhere else.

# %%
from vitbn_nb import chapters
from vitbn_nb.models import build_model
from vitbn_nb.chapters.architectures import study as architectures, sizes as model_sizes

settings, force = chapters.from_notebook("02_models", globals())
settings

# %% [markdown]
# ## A batch through the standard ViT
#
# All the models share the reference configuration of the series: $28 \times 28$ grey
# images, patch size $p = 7$, embedding dimension $d_e = 64$, 8 heads of dimension 64,
# feed-forward hidden dimension 128, a CLS token, learned positional embedding, no dropout.
#
# - **Embedding.** The image is cut into $N = (28/7)^2 = 16$ patches of $d_p = 7^2 = 49$
#   pixels; each patch vector is normalised, mapped to $d_e = 64$ by a Linear layer and
#   normalised again. A learned CLS token is prepended ($N + 1 = 17$ tokens) and a positional
#   embedding of the same shape is added.
# - **Encoder.** $L$ blocks (the *depth*), each $x \leftarrow x + \text{MHSA}(\text{norm}(x))$,
#   then $x \leftarrow x + \text{FFN}(x)$, keep the shape $(b, 17, 64)$. Self-attention is the
#   only place where tokens exchange information.
# - **Head.** After a final norm, the CLS token $(b, 64)$ goes through one Linear layer to the
#   10 logits.
#
# The shapes below are read by forward hooks from a real forward pass of a batch of two images
# through the reference ViT (depth 6); the parameter column counts each stage's own weights.

# %%
architectures.shape_walkthrough("ViT")

# %% [markdown]
# ## ViTBNFFN: BatchNorm inside the feed-forward network
#
# ViTBNFFN (article 2's main model) changes one thing per block: the feed-forward network
# loses the LayerNorm in front of it and gains a BatchNorm between its first Linear and the
# GELU, over the 128 hidden features. Attention keeps its LayerNorm. The shapes are the same;
# it is shown at depth 1, the depth article 1's code effectively ran (chapter 3 explains why).

# %%
architectures.shape_walkthrough("ViTBNFFN")

# %% [markdown]
# ## ViTBN: BatchNorm everywhere
#
# ViTBN (article 1) replaces every LayerNorm, in the patch embedding, before attention and at
# the end, by BatchNorm, and uses ViTBNFFN's feed-forward network.

# %%
architectures.shape_walkthrough("ViTBN")

# %% [markdown]
# ## ViTDyT: no normalisation at all (not a model of the articles)
#
# The book adds a fourth member, which neither article has: ViTDyT puts **DyT** (Zhu et al.,
# "Transformers without Normalization", CVPR 2025) in the place of every LayerNorm of ViT,
# final norm included: $\mathrm{DyT}(x) = w \odot \tanh(\alpha x) + b$, with one learnable
# scalar $\alpha$ (initialised to 0.5) and a per-feature scale $w$ and shift $b$ (ones and zeros, as
# LayerNorm's). It computes no statistic, neither over the features of a token (LayerNorm) nor
# over the batch (BatchNorm): each value is squashed on its own. In the package a norm is a
# layer factory named in `vitbn_nb.models.NORMS`, so ViTDyT is ViT built with `norm="dyt"`.
# Chapter 5 trains it beside ViT and ViTBNFFN at one depth and learning rate of article 2's
# study, and chapter 8 times it at equal depth.

# %%
architectures.shape_walkthrough("ViTDyT")

# %% [markdown]
# Side by side, read off the built models: which norm sits where.

# %%
architectures.norm_sites()

# %% [markdown]
# The full module tree of ViTBNFFN at depth 1 (the state-dict names follow the widely used
# einops-style ViT, so checkpoints of that layout load):

# %%
build_model("ViTBNFFN")

# %% [markdown]
# ## BatchNorm vs LayerNorm on a token batch
#
# A token batch $z^{a\alpha}_i$ has three indices: the image $a = 1..b$, the token
# $\alpha = 1..n$ and the feature $i = 1..d$. The two norms average over different ones:
#
# - **LayerNorm** normalises each token of each image **over its features**:
#   $\mu^{a\alpha} = \frac1d \sum_i z^{a\alpha}_i$, so there are $b \cdot n$ means, each of $d$ numbers,
#   and a token's output does not depend on any other token or image.
# - **BatchNorm** (in article 1's form, BatchNorm1d over `b d n`; article 2 uses BatchNorm2d over
#   `b d n 1`, the same statistics) normalises each
#   feature **over the batch and the tokens**: $\mu_i = \frac{1}{bn} \sum_{a, \alpha} z^{a\alpha}_i$,
#   so there are $d$ means, each of $b \cdot n$ numbers. (The book computes it on a `(b·n, d)`
#   view: the same statistics without a transposed copy. Which form is fastest depends on the
#   machine and the mode: chapter 8's `new_batchnorm_forms` table times each form, with the
#   machine that measured it.)
#
# On a small batch with $b = 4$ images, $n = 5$ tokens and $d = 6$ features, whose features have
# very different offsets and scales (as real activations do), the outputs are zero-mean with
# unit standard deviation exactly along the axes each norm averages over, and not along the
# others:

# %%
architectures.norm_axes_demo()

# %% [markdown]
# ## Training vs evaluation: batch statistics and running statistics
#
# In training mode BatchNorm normalises with the statistics of the current batch, so a model's
# answer for one image depends on which other images share its batch. In evaluation mode it
# uses its running estimates and the answer is the image's own. LayerNorm never looks across
# images. Here the same MNIST test image is sent in two batches of 101 images whose other 100
# images differ; the table gives the largest change of its 10 logits (untrained, seeded models:
# this is about the mechanism, not about accuracy).

# %%
architectures.batch_dependence()

# %% [markdown]
# The running estimates follow the batch statistics with momentum $m = 0.1$:
# $\hat\mu \leftarrow 0.9\,\hat\mu + 0.1\,\mu_{\text{batch}}$. Starting from $\hat\mu = 0$, the error
# against the true mean shrinks like $0.9^k$ after $k$ batches until it reaches the noise of a
# single batch's mean. Below: ViTBN's first norm (BatchNorm over the 49 pixels of each 7 × 7
# patch) fed MNIST training batches of 100 images, against the mean over the whole training set.

# %%
result = architectures.run(settings)

# %%
architectures.running_stats_figure(result)

# %% [markdown]
# After a few dozen batches the running mean sits at the data mean up to batch noise. An epoch
# of the full training set is 600 batches, so by the time a model is first tested its running
# estimates follow the (slowly drifting) batch statistics closely. Article 1 notes that
# a model evaluated with the default running statistics could in principle test differently
# from how it trains, and says one can check that this is not the case for its datasets.
#
# ## Size of every configuration in the book
#
# The later chapters compare models of different depths: article 1 *as run* pits a depth-6 ViT
# against BatchNorm models that computed one block (chapters 3 and 4: the reference code of its
# time returned from the encoder after the first block, commits 5c9074d, 5fcc4ac and 99a16b1), and article 1 *as written* has all
# three at depth 6 (chapter 3); the EMNIST transfer uses all three at depth 6 (chapter 6); the depth study
# trains ViT and ViTBNFFN at depths 1–7, and ViTDyT beside them at depth 6 (chapter 5); and the book's
# equal-depth control adds ViTBN, ViTDyT (and ViT) at depths 1 and 6. The table counts parameters with `count_parameters` and
# forward FLOPs per image with PyTorch's `torch.utils.flop_counter.FlopCounterMode` on a batch
# of one image in eval mode.
#
# What is counted: matrix multiplications (the Linear layers and the two products inside
# attention) and convolutions, at 2 FLOPs per multiply-add. Norms, softmax, GELU/sigmoid and
# additions are **not** counted: they do work proportional to $d$ per token against the $d^2$
# of a Linear layer, but, being memory-bound, they can take a larger share of the time than of
# the FLOPs. DyT's multiplications and tanh are left out in the same way, so at equal depth
# ViTDyT's counted FLOPs are ViT's, and its parameters exceed ViT's by one $\alpha$ per norm. PyTorch's fused CPU attention kernel is
# invisible to the counter, so attention is counted on its math backend (the same products).

# %%
model_sizes.model_table(result)

# %%
model_sizes.model_size_figure(result)

# %% [markdown]
# What the table says, computed from it:

# %%
model_sizes.size_summary(result)

# %% [markdown]
# Two things to carry into the next chapters. First, in counted arithmetic the norm itself is
# almost free: at equal depth the models have the same counted FLOPs and differ by at most
# a few hundred parameters (what the norms cost in time, which the counter does not see, chapter
# 8 measures). Second, the published speed-up compares a ViT with six encoder blocks against
# BatchNorm models with one, and the table shows how much smaller those are. Chapter 3
# reproduces that comparison as article 1 ran it and adds it as written (all at depth 6); the
# equal-depth control of the later chapter "where
# the speed comes from" separates the part of the gain that comes from depth from the part that
# comes from BatchNorm.
