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
# # 1. BatchNorm in a plain deep network
#
# Before we put BatchNorm into a Vision Transformer, we look at what it does where it was
# born: a small fully connected network. Article 2 ("Vision Transformer with BatchNorm:
# optimizing the depth", a later article by the author of article 1, "Speeding up the Vision
# Transformer with BatchNorm"; not the "second article" article 1 announces, which is its EMNIST
# transfer article) opens with this experiment, and its two lessons frame the
# whole book:
#
# 1. with BatchNorm a network **converges faster** at a reasonable learning rate, and
# 2. it **stays stable at a learning rate** that stops the same network without BatchNorm from learning.
#
# This chapter trains both networks under the article's protocol and redraws its Figures 1–3
# from our own runs, with the spread over seeds that the article does not report.

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
epochs = None
lrs = None
batch_size = None
engine = None

# %% [markdown]
# The profile sets the scale: `paper` is article 2's protocol on the full MNIST training set
# with three seeds; these networks are so small that `cpu` runs the same protocol (a laptop
# trains it in minutes); `smoke` is a tiny run that only proves everything works (its curves
# say nothing).

# %%
from vitbn_nb import chapters
from vitbn_nb.chapters.batchnorm_intro import study as batchnorm_intro

settings, force = chapters.from_notebook("01_batchnorm_intro", globals())
settings

# %% [markdown]
# ## What BatchNorm computes
#
# Let $z^a_i$ be the input of a layer, with $a = 1, \dots, N_s$ the index of an example in
# the batch and $i = 1, \dots, C$ the index of a feature (here one of the $C = 100$ hidden
# units). In training mode BatchNorm does three things for every feature $i$:
#
# 1. it computes the mean and the (biased) variance of that feature **over the batch**:
#
#    $$\mu_i = \frac{1}{N_s}\sum_{a=1}^{N_s} z^a_i, \qquad
#      \sigma_i^2 = \frac{1}{N_s}\sum_{a=1}^{N_s}\left(z^a_i - \mu_i\right)^2;$$
#
# 2. it normalises the feature with them ($\epsilon$ is a small positive number, $10^{-5}$ in PyTorch):
#
#    $$\hat z^a_i = \frac{z^a_i - \mu_i}{\sqrt{\sigma_i^2 + \epsilon}};$$
#
# 3. it shifts and rescales the result with two trainable parameters per feature:
#
#    $$y^a_i = \gamma_i\, \hat z^a_i + \beta_i \qquad \text{(no sum over } a \text{ or } i\text{)}.$$
#
# **Training vs evaluation.** A trained model must answer for one image at a time, so the
# layer also keeps running estimates of the statistics, updated after every training batch
# with momentum $m$ ($m = 0.1$ in PyTorch):
#
# $$\hat\mu_i \leftarrow (1 - m)\,\hat\mu_i + m\,\mu_i, \qquad
#   \hat\sigma^2_i \leftarrow (1 - m)\,\hat\sigma^2_i + m\,\tfrac{N_s}{N_s - 1}\,\sigma^2_i .$$
#
# In evaluation mode (`model.eval()`) the layer normalises with $\hat\mu_i, \hat\sigma^2_i$
# instead: it becomes a fixed affine map per feature, and an image's output no longer depends
# on the other images of its batch. Chapter 2 shows both behaviours numerically.
#
# ## The two networks and the data
#
# - **DNN_d3**: $784 \to 3 \times [\text{Linear}(100) \to \text{Sigmoid}] \to \text{Linear}(10)$
#   on the flattened $28 \times 28$ image;
# - **DNNBN_d3**: the same with a BatchNorm between every hidden Linear and its sigmoid.
#
# The sigmoid is deliberate: article 2 calls the network similar to the one discussed in the
# original BatchNorm paper of Ioffe & Szegedy (three hidden layers of 100 sigmoid units on MNIST). A sigmoid saturates when its input is
# large, and its gradient then vanishes; BatchNorm keeps each pre-activation at the scale
# $\gamma_i$ learns, whatever the scale of the weights before it, which is the intuition
# (their Section 3.3) for why it tolerates larger learning rates.
#
# The data is **augmented MNIST** (article 2): a random rotation of up to 20°, a random
# translation of up to 20 % of the side, and with probability 0.2 a zoom-out by a factor 2–3
# followed by a resize back to 28 × 28. Then `ToTensor` and no normalisation: article 2's text
# names no normalisation step, and the reference code's function of the same name
# (`get_datasets_mnist` in `mlflow_modules/train_augs_mnist.py` at commit 3b59bbf, with exactly
# these transforms) ends with `ToTensor` and applies none. As in article 2, **the test images are
# augmented too** (its Code Block 1 augments the validation set; in the reference code at 3b59bbf
# that augmentation is the validation set's dataset transform, so it is redrawn on every pass); this book's run store draws it
# **once, with a fixed seed** (drawn on the CPU whatever the device), so every model and every
# epoch is tested on exactly the same images, and the curves do not wobble with the redrawn test
# set. Training batches are
# augmented afresh every epoch. Both models are trained with Adam and cross-entropy, train
# batch 100, test batch 5000, at two learning rates.

# %%
batchnorm_intro.protocol(settings)

# %% [markdown]
# Training (or, when the runs are already in the run store, reading them back; `force=True`
# retrains). The result is one tidy table with a row per run and epoch.

# %%
result = batchnorm_intro.run(settings, force=force)

# %% [markdown]
# ## Figure 1: learning rate 0.01
#
# **Article 2 reports** (in words; it gives no accuracies): with BatchNorm the network
# converges faster, DNNBN_d3 reaching a higher test accuracy and a lower training loss than
# DNN_d3 over the 15 epochs.
#
# Our curves: the mean over seeds, with a band from the lowest to the highest seed where
# there are several.

# %%
batchnorm_intro.accuracy_loss_figure(result, settings.lrs[0])

# %% [markdown]
# This run's final accuracies next to the article's statement, with the verdicts of the book's
# one rule (the book's claims page, "How this book judges a claim").

# %%
batchnorm_intro.summary(result, settings.lrs[0])

# %% [markdown]
# ## Figure 2: learning rate 0.1
#
# **Article 2 reports:** the high learning rate makes DNN_d3 unstable, while the model with
# BatchNorm stays very stable. A model that has stopped learning sits at chance (10 % for ten
# digits) with a training loss near $\ln 10 \approx 2.30$, the loss of a uniform guess.

# %%
batchnorm_intro.accuracy_loss_figure(result, settings.lrs[-1])

# %%
batchnorm_intro.summary(result, settings.lrs[-1])

# %% [markdown]
# ## Figure 3: each model at both learning rates
#
# The same runs, grouped by model instead of learning rate. **Article 2 reports:** DNN_d3
# stops learning at the high learning rate, while DNNBN_d3's accuracy is affected much less.

# %%
batchnorm_intro.lr_comparison_figure(result)

# %%
batchnorm_intro.summary_table(result)

# %% [markdown]
# ## The claims, judged by the book's rule
#
# Article 2's claims about its DNNs (Figures 1–3), each judged on test accuracy (Figure 1's "lower training loss"
# is drawn in Figure 1 above, not judged: the rule's effects and margins are in accuracy points), with the measured
# value, its 95 % interval and the verdict of the book's one decision rule (the book's claims page, "How this book judges a
# claim"): paired per-seed differences, no verdict with fewer than three seeds, and "not testable at
# this scale" for a number the article reached at a protocol these runs did not.

# %%
batchnorm_intro.claims_table(result)

# %% [markdown]
# ## What to take from this
#
# Computed from the claims table above, so it says what this run's verdicts say:

# %%
result.takeaway()

# %% [markdown]
# The mechanism is what carries over to the Vision Transformer: BatchNorm rescales every
# feature by statistics of the batch, which makes the layer insensitive to the scale of the
# weights feeding it. Chapter 2 takes the Transformer apart to show where such a layer can
# go, and chapters 3–5 test whether the two lessons above hold there.
