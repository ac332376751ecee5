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
# # 7. Three things, with BatchNorm: parallel blocks, attention-only fine-tuning, the hMLP stem
#
# Touvron et al.'s *Three things everyone should know about Vision Transformers* (2022) makes
# three practical claims about the standard ViT, measured with models from ViT-Ti to ViT-L (the
# summary among this book's sources names those models and ImageNet-val and ImageNet-V2 for the
# fine-tuning; it gives no parameter counts, and names neither the dataset of the other two
# experiments nor the norm layers):
#
# 1. **Parallel blocks.** Two multi-head self-attention (MHSA) branches and two feed-forward
#    (FFN) branches per block, at half the depth, have the same parameters and compute, train
#    at least as well (better for deep models) and answer faster for one image at a time.
# 2. **Attention-only fine-tuning.** To move a trained ViT to a higher resolution or a new
#    task, fine-tuning only the MHSA weights is about as accurate as fine-tuning everything,
#    while it needs less memory and time and stores fewer new weights.
# 3. **The hMLP stem.** A patch pre-processing that is a small MLP on each patch (convolutions
#    whose kernel equals their stride) gives a good accuracy–compute balance among the stems
#    compared, in supervised and in BEiT's self-supervised training, and, unlike
#    convolutional stems, never mixes neighbouring patches, which keeps it compatible with
#    masked self-supervised training.
#
# This chapter repeats the three experiments on this book's small MNIST models, with LayerNorm
# (ViT), BatchNorm in the FFN (ViTBNFFN) and BatchNorm everywhere (ViTBN), and ends with the
# digit-drawing web app of the series' third article. All three ideas are constructor options
# of the book's one ViT family (`branches=`, `stem='hmlp'`) or a helper of `vitbn_nb.engines.finetune`;
# no model is copied.

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
models = None
depths = None
branches = None
epochs = None
lr = None
batch_size = None
ft_epochs = None
ft_lr = None
ft_train_size = None
ft_test_size = None
latency_batch = None
latency_repeats = None

# %% [markdown]
# The profile sets the scale: `paper` trains on all of MNIST with three seeds and compares
# depth 6 and depth 12 with their parallel versions; `cpu` uses subsets, one seed and depth 6;
# `smoke` only proves that every run, figure and table is
# produced (depth 2, three training steps: its numbers mean nothing).

# %%
from vitbn_nb import chapters
from vitbn_nb.publishing import figures
from vitbn_nb.chapters.three_things import attention_finetune, hmlp_stem, parallel_blocks, study as three_things

figures.use_style()
settings, force = chapters.from_notebook("07_three_things", globals())
settings

# %% [markdown]
# What is trained. The sequential models of part (a) are reused: they are the linear-stem
# baselines of part (c) and the starting points of the fine-tunings of part (b), so each is
# trained once and read back from the run store afterwards.

# %%
three_things.protocol(settings)

# %% [markdown]
# ## (a) Parallel blocks
#
# A pre-norm block computes $x \leftarrow x + \mathrm{MHSA}(x)$, then
# $x \leftarrow x + \mathrm{FFN}(x)$ (in ViT each branch normalises its own input first; the BatchNorm
# models' feed-forward branch normalises after its first linear layer instead). The parallel
# block of Touvron et al. (their Equation 2, which the summary refers to; this is the book's
# reading of it) runs $b$ branches of each on the **same** input and sums them:
#
# $$x \leftarrow x + \sum_{i=1}^{b} \mathrm{MHSA}_i(x), \qquad x \leftarrow x + \sum_{i=1}^{b} \mathrm{FFN}_i(x).$$
#
# A depth-$d/b$ model of such blocks has exactly the parameters and FLOPs of the depth-$d$
# sequential one, but only $d/b$ steps one after the other: fewer, wider layers, which allow
# more parallel processing (the summary adds that the actual acceleration depends on the
# implementation and the hardware). Each of our models is trained at depth $d$ and at $d/2 \times 2$
# branches, with the same data, learning rate and random seed.
#
# **Touvron et al. report** (in the summary among the source texts): with ViT-S and ViT-B, two branches gave the best
# accuracy; the parallel form helps the deeper models that are harder to optimise (for a
# 60-block ViT-S, 20 × 3 and 30 × 2 were comparable); on V100 GPUs they observed a significant
# speed-up when processing a single image, and none once the batch is large. No numbers are
# given in the summary.

# %%
parallel = parallel_blocks.run(settings, force=force)
parallel_blocks.blocks_figure(parallel)

# %% [markdown]
# Per model and structure: parameters, final accuracy (mean with its 95 % interval over seeds where
# there are several), training time per epoch, and inference latency per image at batch 1 and at a
# large batch (the median of several timed passes, measured on the machine that trained the run
# and stored in its record; the footer names the records). Our `Parallel` module runs its branches one after the other in Python: the same
# kernels, just ordered differently, so on these kernels no latency gain is to be expected unless
# the hardware overlaps them.

# %%
parallel_blocks.blocks_table(parallel)

# %%
parallel_blocks.comparison(parallel)

# %% [markdown]
# ## (b) Attention-only fine-tuning at a higher resolution
#
# Touvron et al. fine-tune ImageNet models trained at 224 × 224 pixels at 384 × 384. The
# analogue here: models trained on MNIST at 28 × 28 are fine-tuned on **MNIST upscaled to
# 56 × 56** (bilinear, every image twice as large). We upscale rather than place the digit at a
# random spot of a larger canvas because that keeps the task the same and changes only the
# resolution, as Touvron et al.'s fine-tuning from 224 × 224 to 384 × 384 does. The patch stays 7 × 7, so the image now
# has 8 × 8 = 64 patches instead of 4 × 4 = 16; each patch sees a quarter of what it saw before,
# and the 16 learned position embeddings are **interpolated bicubically on their 2-D grid** to
# 64 (the class token's embedding is kept), as DeiT does (`finetune.interpolate_pos_embedding`).
#
# Two fine-tunings start from the same trained model:
#
# - **full**: every weight trains;
# - **attention only**: the summary fine-tunes only the MHSA weights and freezes the FFN; here
#   the MHSA projections (`to_qkv`, `to_out`), the classification head and the position
#   embedding train, and the patch embedding, the FFNs, every norm (the attention's pre-norm
#   included) and the class token are frozen (the head, the position embedding and the norms
#   are the book's choice; the paper's code is not among the sources). A frozen BatchNorm still re-estimates its running
#   statistics from the new images, because they are buffers, not weights: the BatchNorm models
#   get this adaptation for free, the LayerNorm one cannot.
#
# "Epoch 0" in the figure is the trained model moved to 56 × 56 with no training at all.
# Memory is measured for one Adam training step at the training batch size. On a GPU it is the
# allocator's peak (`torch.cuda.max_memory_allocated`). PyTorch's CPU allocator keeps no peak,
# so on a CPU the chapter reports an accounting of the tensors a step holds instead: weights,
# gradients, Adam's two moments and the tensors autograd saves for the backward pass (counted
# with saved-tensor hooks); the table shows it on every device. Step time is the training
# compute per step from the run records, without the data pipeline.
#
# **Touvron et al. report:** fine-tuning only the MHSA weights at 384 × 384 is very close to full
# fine-tuning on ImageNet-val and ImageNet-V2 (when only the FFN is fine-tuned, the results
# differ significantly); it
# saves about 10 % of GPU memory and about 10 % of training time, and since the MHSA weights are
# about a third of the total, each further fine-tuned resolution stores 66 % fewer weights.

# %%
tuned = attention_finetune.run(settings, force=force)
attention_finetune.finetune_figure(tuned)

# %% [markdown]
# The same runs in numbers. Note the share of the weights that attention-only fine-tuning
# trains: this book's reference ViT has 8 heads of dimension 64 on an embedding of 64, so each
# MHSA layer projects to 3 × 512 dimensions and back, while its FFN is only 64 → 128 → 64. Here
# the attention holds most of the weights, not about a third as the summary says of the
# paper's models.

# %%
attention_finetune.finetune_table(tuned)

# %%
attention_finetune.comparison(tuned)

# %% [markdown]
# ## (c) The hMLP stem
#
# The standard patch embedding flattens each $p \times p$ patch and applies one linear map (the
# book's models normalise before and after it). Touvron et al.'s hierarchical MLP stem processes
# a 16 × 16 patch in three stages, each a convolution whose kernel equals its stride:
# 4 × 4 → norm → GELU → 2 × 2 → norm → GELU → 2 × 2 → norm (the summary among the sources gives
# the 4 × 4, 2 × 2, 2 × 2 stages; the norm and GELU placement and the widths $d/4$, $d/4$, $d$ are
# the book's choice). Because kernel = stride, no
# output ever sees two patches.
#
# Our patches are 7 × 7 and 7 is prime, so the hierarchy cannot be cut the same way. The rule of
# `models.vit.hmlp_kernels` moves the smallest prime factor of the first stage's kernel to a later
# stage while the first stays at least as large (16 → 4, 2, 2; 14 → 7, 2, 1; 12 → 3, 2, 2) and
# fills the remaining stages with 1 × 1 kernels. For 7 it gives 7, 1, 1: a 7 × 7 stage, then two
# per-patch 1 × 1 stages. On this book's images the hMLP stem is therefore a three-layer MLP
# applied to each patch on its own, with the model's norm between the layers (LayerNorm over
# the channels for ViT and ViTBNFFN, `BatchNorm2d` for ViTBN). BatchNorm's training-mode statistics
# pool all patches of the batch (two numbers per channel); in evaluation mode every patch is
# processed on its own, which the table checks by redrawing one patch's pixels.
#
# **Touvron et al. report:** among the stems Touvron et al. compared in supervised and in BEiT's
# self-supervised training, the hMLP stem "achieved better accuracy-computation balance"; it
# makes ViT-B need 17.73 GFLOPs, less than 1 % more than with the linear projection, and
# processes each 16 × 16 patch independently.
# It does not say how the hMLP stem's accuracy compares with the linear embedding's; this run
# measures it. Nor does it say how it counts FLOPs; the table below counts them as chapter 2's
# table does (2 per multiply-add, attention's products included), so the same ViT has the same
# count in both chapters, and only the relative change compares with the summary's.

# %%
stems = hmlp_stem.run(settings, force=force)
hmlp_stem.stem_figure(stems)

# %%
hmlp_stem.stem_table(stems)

# %%
hmlp_stem.comparison(stems)

# %% [markdown]
# ## What to take from this
#
# The "this run" columns above are computed from the runs of this profile; read them with its
# scale in mind. Under `smoke` nothing can be concluded. Under `cpu` there is one seed and a
# few epochs on a subset: every accuracy difference here is shown, not judged (the book's rule
# needs three seeds, which the `paper` profile trains), and a time measured once on a shared CPU
# is shown, not judged, unless it comes from the interleaved rounds that the latency rows are
# judged from. Two findings do not depend on the scale: the parameter counts are equal
# by construction in (a), and in (b) the share of weights that attention-only fine-tuning
# trains is a property of the architecture, large here because this book's ViT puts most of its
# weights into attention.
#
# ## The digit app
#
# The series' third article wraps the best BatchNorm ViT in a Flask app where one draws a digit
# and the model answers. The book's version is `python -m vitbn_nb.app` (or `make app`): it
# serves a page on http://127.0.0.1:5000/ with a drawing pad (mouse, pen or touch); when the
# stroke ends the page sends the canvas to the server, which prepares it the way MNIST's digits
# were made (crop to the ink, scale the longer side to 20 pixels keeping the aspect ratio,
# centre the centre of mass in 28 × 28) and answers with the digit, its confidence and the
# top three. The model is loaded once at start: the best finished ViT-family run in the run
# store by final accuracy, preferring runs trained on augmented MNIST (they cope better with
# hand-drawn digits) when they reach 90 % on their augmented test set. With an empty store the
# app first trains a small ViTBNFFN through the run store (how long that takes depends on the
# machine) and says so. The tests draw a stroke in headless Chromium and check the answer on the page.
#
# In this run's store the app would serve:

# %%
three_things.app_model()
