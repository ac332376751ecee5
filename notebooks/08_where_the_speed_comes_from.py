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
# # 8. Where the speed comes from
#
# Article 1 reports that the BatchNorm models train **2.5–4.3×** and infer **2.5–2.7×** faster
# than the standard ViT: gains of 60–77 % in time per epoch. Article 1 says all three models
# had depth 6. What it ran was different: the reference code of that time returned from the
# encoder after the first block in the BatchNorm models (chapter 3 gives the commits and
# audits the checkpoints), so its numbers compare a **6-block ViT with BatchNorm models that
# computed one block**, and its times are whole epochs through the reference code's data
# pipeline (a `DataLoader` over `ToTensor` MNIST, `.item()` per step, a per-sample test loop in
# the reference repository's Experiment-1 script, `mlflow_modules/train_mnist.py` as of commit
# 74b1791). So:
#
# $$\text{article 1's gain} = \text{effective depth (6 blocks against 1, the early return)}
#   \times \text{normalisation at that depth} \times \text{pipeline effects}.$$
#
# This chapter measures each factor on the machine it runs on:
#
# 1. **depth**: one encoder block instead of six;
# 2. **normalisation**: BatchNorm instead of LayerNorm at the same depth, at depth 1 (as run)
#    and at depth 6 (as article 1 wrote it);
# 3. **the data pipeline**: article 1's against the book's engine, a cost every model pays alike.
#
# It separates data loading from compute, and measures what BatchNorm can truly buy at
# inference: in eval mode a BatchNorm is a fixed affine map that **folds into the neighbouring
# Linear layer**, which no LayerNorm can do. It ends with one sentence per effect. Beside the
# articles' three models it times a fourth that neither article has, **ViTDyT** (chapter 2: DyT,
# $w \odot \tanh(\alpha x) + b$, in the place of every LayerNorm), at the same depths: what a
# ViT costs with no normalisation at all.

# %%
# On Colab: install the book's package here once the book is public: set repository and ref under [tool.vitbn-book] in pyproject.toml, then run `python -m vitbn_nb colab-cell`.

# %% tags=["parameters"]
profile = "auto"
force = False
measure = False
# Any of the chapter's settings (the table below shows them), as `papermill -p epochs 3` sets them; None
# keeps the profile's value, and another value trains runs of its own and never writes figures/.
train = None
test_batch_size = None
train_size = None
test_size = None
models = None
depths = None
batch_size = None
steps = None
warmup = None
repeats = None
eval_batches = None
eval_warmup = None
matmul_size = None
matmul_repeats = None
norm_seconds = None
count_depths = None
lr = None
seed = None

# %% [markdown]
# **This is the one chapter whose numbers are timings of fresh models**, not runs' records: they
# change with the machine and its load. Measuring them takes tens of minutes on a CPU, so by
# default the chapter shows **the committed measurement** (`figures/bench.json`) and says below
# which machine took it, when, and with which profile's settings; `measure = True` (or
# `python -m vitbn_nb book --measure`) times them anew on the machine that renders the chapter.
# The profile sets how long each new measurement runs (the settings below: repeats, training
# steps, test batches); `smoke` runs every measurement on tiny batches, and its numbers mean
# nothing. No run is trained, so `force` has nothing to retrain.

# %%
from vitbn_nb import chapters
from vitbn_nb.chapters.speed import study as speed, accounting as speed_accounting, kernels as speed_kernels

settings, force, measure = chapters.from_notebook("08_where_the_speed_comes_from", globals(), "measure")
settings

# %% [markdown]
# ## What article 1 reports
#
# The ratios $r = T_\text{ViT} / T_\text{model}$ of mean time per epoch and the gains
# $g = 1 - 1/r$: the ratios $r$ are in article 1's text (its Tables 1 and 3, images in the
# article, hold the gains), for three fixed learning rates and for the optimised
# hyperparameters, with MNIST without augmentation. Article 1 names an NVIDIA L4 GPU on Colab
# for Experiment 1 (and no machine for Experiment 2); its reference scripts, as committed,
# never move a model or a batch to a GPU, so they run on the CPU, and which of the two timed its
# epochs the repository cannot tell: this chapter sets no GPU against a CPU. Article 1 says all three
# models had depth 6; the reference repository shows that its BatchNorm models computed one
# block (chapter 3: the configuration as run).

# %%
speed_accounting.article_reported()

# %% [markdown]
# ## How we measure
#
# Every number below comes from one function, `vitbn_nb.bench.measure`, the same one that
# `python -m vitbn_nb bench` (`make bench`) runs. For **ViT, ViTBNFFN and ViTBN at depths 1
# and 6** (which include both of article 1's configurations, as run and as written), and ViTDyT
# beside them, it times,
# on MNIST without augmentation (article 1's data):
#
# * **training**: a fixed number of Adam steps after a warm-up, repeated, the median repeat
#   kept (not whole epochs: an epoch's time is the step time times the number of steps); the
#   repeats of all configurations take turns, so a busy spell on a shared machine slows them
#   all alike instead of skewing one ratio;
# * **inference**: forward passes over test batches of 5,000 plus the per-class accuracy
#   counts;
#
# each through **two pipelines**: **article 1's pipeline**, the reference code's loop (a `DataLoader`
# over torchvision's MNIST with `ToTensor`, train batch 100, test batch 5000, the loss read
# back with `.item()` every step, per-class accuracy counted in a Python loop over the
# samples), and the **book's engine** (the images held as uint8 on the device, batches cut
# there, the counts vectorised).
# Before each clock read the device is synchronised, and the time spent producing a batch is
# clocked apart from the model's work.
#
# Every ratio below (one model against another, one depth against another, one pipeline against
# the other, folded against unfolded) is read from those **rounds**: in round $i$ both were timed
# back to back, so $\ln(T_{\text{baseline},i} / T_{\text{model},i})$ is one paired value, and a
# busy spell that slows both cancels in it. The book's rule (see the book's claims page) takes the
# 95 % interval of their mean and shows it back as a ratio: **a speed-up of x [low, high]** when it
# lies above 1, **no speed-up, slower** when below, **within noise** when it holds 1, and no
# verdict (**shown, not judged**) with fewer than 3 rounds.

# %% [markdown]
# The measurement: the committed one unless `measure` asks for a new one. The note under the
# overview says which it is; a model of the settings that the committed measurement does not
# hold is named there, and the tables and figures show the models it holds.

# %%
result = speed.run(settings, force=force, measure=measure)

# %%
speed.overview(result)

# %%
speed.hardware_note(result)

# %% [markdown]
# ## Equal depth
#
# Article 1's ratio divides the time of a six-block ViT by that of one-block BatchNorm models.
# Here every model is timed at **both** depths, so each comparison can also be made at equal
# depth. At equal depth the models do almost the same arithmetic (the same matrix
# products; they differ only in which norm runs where), so if the published gain came from
# BatchNorm itself, the BatchNorm bars would be lower than ViT's **within** each depth group.
# If it came from depth, the difference would lie **between** the groups. ViTDyT, where the
# measurement holds it, shows what dropping normalisation altogether costs or saves at the same
# depth: DyT computes no statistic, but it is still an elementwise pass over every token, which
# (unlike BatchNorm in eval mode) cannot fold into a Linear layer, since its tanh is not affine.

# %%
speed.equal_depth_figure(result)

# %% [markdown]
# Images per second through both pipelines, and each model (the BatchNorm ones, and ViTDyT)
# against ViT of the same depth (above 1: faster than ViT). Every configuration was timed in the same rounds, one after
# another, so each ratio has one value per round; the book's rule (see the book's claims page)
# turns them into a verdict: a speed-up with its 95 % interval, no speed-up, or within noise.

# %%
speed.equal_depth(result)

# %% [markdown]
# ## Data loading against compute
#
# How much of each step is spent producing the batch? Article 1 trained on MNIST without
# augmentation; in the reference code's pipeline every image is read through a `DataLoader` over `ToTensor`,
# converted and collated one at a time in Python, and at evaluation the per-class accuracy is
# counted one image at a time inside the timed test pass (the Experiment-1 script,
# `mlflow_modules/train_mnist.py` at commit 74b1791). The book's engine keeps each split on the device and cuts whole
# batches there (and, for the augmented sets of other chapters, draws the augmentation for a
# whole batch, with the same distributions as torchvision's, tested against them).

# %%
speed.pipeline_split_figure(result)

# %% [markdown]
# The share of time each pipeline spends producing batches, and the engine's speed over
# article 1's pipeline for the same model, judged by the rule from their rounds. Where the
# model's arithmetic dominates a step (the compute share in the table says where it does on this
# machine), no input pipeline can speed it up by much: the pipeline's ceiling is the step time
# divided by its compute part.

# %%
speed.pipeline_split(result)

# %% [markdown]
# How close each training step comes to the machine's arithmetic limit: FLOPs per step
# (forward and backward, counted by PyTorch's `FlopCounterMode`, attention included) over the
# step time, against the measured peak of large fp32 matrix products: the model FLOP
# utilisation (MFU). These models are small (embedding 64, 17 tokens), so their matrix
# products are thin and the norms, GELU, attention softmax and Adam's update, which add few
# FLOPs, still take time. Peak memory is per configuration (see the table at the top for what
# is measured on this device).

# %%
speed_kernels.utilisation(result)

# %% [markdown]
# ## What BatchNorm can buy at inference: folding
#
# In eval mode a BatchNorm is $y = s \odot x + t$ with $s = \gamma / \sqrt{\sigma^2_\text{run} +
# \epsilon}$ and $t = \beta - \mu_\text{run} s$: fixed numbers. Next to a Linear layer it
# disappears into the weights. After a Linear (the feed-forward network's `Linear → BN`, the
# patch embedding's `Linear → BN`): $W' = \operatorname{diag}(s) W$, $b' = s \odot b + t$. Before a
# Linear (ViTBN's attention pre-norm `BN → to_qkv`, the patch embedding's `BN → Linear`, the
# final `BN → CLS token → head`, since picking a token commutes with a per-feature map):
# $W' = W \operatorname{diag}(s)$, $b' = W t + b$. `vitbn_nb.models.fold_batchnorm` returns such
# a copy: no BatchNorm left, the same outputs to float precision (tested). A LayerNorm computes
# its statistics from each token at inference time, so it cannot fold; the hatched bar removes
# ViT's LayerNorms outright (wrong outputs) to show what they cost. The table judges each ratio
# by the book's rule from the rounds of interleaved timings, as above.

# %%
speed.folding_figure(result)

# %%
speed.folding(result)

# %% [markdown]
# ## BatchNorm on tokens: three ways to write it
#
# BatchNorm on a `(batch, tokens, features)` tensor normalises each feature over the batch and
# the tokens. Article 1 writes it as `BatchNorm1d` over a transposed `b d n` view, article 2 as
# `BatchNorm2d` over `b d n 1`; the book's `BatchNorm` flattens to `(b n) d` and calls
# `BatchNorm1d` on that. The same statistics, the same running estimates, the same parameters;
# here is what each costs (training forward+backward at the training batch, eval forward at the
# test batch, for the attention width 64 and the feed-forward width 128). The three forms of a
# case are timed in the same interleaved rounds, and the flattened form is judged against each
# of the others by the rule, round by round.

# %%
speed_kernels.norm_forms_table(result)

# %%
speed_kernels.norm_forms_statement(result)

# %% [markdown]
# ## The accounting
#
# Within one pipeline the ratio of the configuration as run splits exactly into a depth part
# and a normalisation part:
#
# $$r_\text{as run} = \frac{T(\text{ViT}, 6)}{T(\text{model}, 1)}
#   = \underbrace{\frac{T(\text{ViT}, 6)}{T(\text{ViT}, 1)}}_{\text{depth}} \times
#     \underbrace{\frac{T(\text{ViT}, 1)}{T(\text{model}, 1)}}_{\text{normalisation at depth 1}},$$
#
# so each effect's share of the gain is its share of $\ln r$. Each ratio is the mean of its
# rounds' log ratios, and in every round the logs add up as above, so the split holds exactly for
# the numbers shown, each with its own verdict by the rule. The data pipeline adds the same
# seconds to every model, so it cannot create a ratio; it can only pull one towards 1, and the
# table shows by how much, with each pipeline's share of time spent loading data. The first row
# is article 1's (MNIST without augmentation; an NVIDIA L4 GPU as it states, the CPU in its
# reference code).

# %%
speed_accounting.accounting_table(result)

# %% [markdown]
# In words, computed from this run's numbers:

# %%
speed_accounting.accounting_statement(result)

# %% [markdown]
# ## The corrected account, one sentence per effect
#
# Article 1's speed-up is what its code ran: six blocks against one, through its own pipeline.
# What BatchNorm itself buys is what is left at equal depth, as the article wrote it. Each line
# below is computed from this run's measurements:

# %%
speed_accounting.effects_statement(result)

# %% [markdown]
# ## Beyond this machine: operations per step
#
# Every timing above belongs to the machine that rendered this chapter. What does not depend on
# its speed is the number of operations each model dispatches: every ATen operation that is not
# a view runs at least one kernel on a GPU, and for models this small a fast GPU may spend
# longer launching a kernel than running it; where it does, time follows the operation count
# rather than the FLOPs.
# That is an expectation, untested here: no GPU has timed this chapter's measurements yet, and the `paper` profile
# measures it with the same code. The counts below are taken on the CPU under a dispatch mode
# (nothing is timed), with Adam's multi-tensor update as a GPU runs it; a GPU's dispatcher may
# pick other kernels for attention or BatchNorm, so for a GPU they are an estimate.

# %%
speed_kernels.op_counts_table(result)

# %%
speed_kernels.op_counts_statement(result)

# %% [markdown]
# ## What to take from this
#
# Read the numbers with the hardware line in mind. On the machine measured here the arithmetic
# of the models grows with depth, so the deeper a model, the smaller the share of the input
# pipeline, the per-sample bookkeeping and the norms' own cost, and the smaller the gains that
# removing them can bring (the data-loading table above gives the shares per model and depth: an
# engine cannot make a matrix product faster). On a GPU the products take less time and the balance may shift towards the
# pipeline and the many small kernels; that is untested here, and the `paper` profile measures
# it with the same code.
#
# Whatever the machine, the accounting table answers the chapter's question: the published
# speed-up compares models that differ six-fold in depth, and the depth factor is measured
# here on the LayerNorm ViT alone. What is left for BatchNorm is the ratio at equal depth, and
# at inference what folding removes.
