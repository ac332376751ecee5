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
# # 4. The optimised models: Bayesian optimisation with Ax and BoTorch
#
# Chapter 3 compared the three models at learning rates chosen by hand. Article 1's
# **Experiment 2** asks the fairer question: what does each model do at *its own* best
# learning rate and batch size? It finds them with a Bayesian optimisation (the BoTorch engine
# of the Ax platform), then trains each optimised model for 30 epochs and compares them as
# before, epoch by epoch: training time, test time, training loss and test accuracy.
#
# This chapter runs that protocol with the current Ax API and redraws the article's
# **Table 2** (the optimised hyperparameters), **Figure 7** (how the best accuracy grows with
# the trials; the article showed ViTBNFFN only, we show every model), **Figure 8** (the four
# panels of the optimised trio) and **Table 3** (the speed-up ratios and gains), each beside
# what the article reports.
#
# Article 1's figures are of the models it actually ran: **ViT with 6 encoder blocks, ViTBNFFN
# and ViTBN with 1**. Article 1 says depth 6 for all three, but the reference code of its time
# returned from the encoder after the first block in the BatchNorm models (chapter 3 gives the
# commits, and the audit there shows blocks 2-6 of their checkpoints never trained); Experiment 2
# came before the fix. Its speed-ups therefore mix the norm with a six-fold difference in
# effective depth. At its protocol (`paper`) this chapter searches and retrains **both
# configurations**: as run (ViT d6 against the BatchNorm models at d1) and as written (all three
# at d6; ViT's search serves both); chapter 8 separates the norm from the depth.

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
trials = None
trial_epochs = None
epochs = None
configurations = None
seed_plan = None
searches = None
timing_rounds = None
timing_images = None

# %% [markdown]
# The profile sets the scale. `paper` is the article's protocol: 20 trials per model on the
# full MNIST training set, each trial trained for 3 epochs (article 1's text does not say how
# long a trial trains; the reference code's Ax objective trains each for `n_epochs = 3` by
# default: `optimization/hypopt_train.py` from commit 5c73cc8, the folder article 1 names, which
# loads MNIST without augmentation; the later `Ax_modules/hypopt_train.py` at 76e01e7 keeps that default), then 30
# epochs with the best settings, with the seeds the committed plan below fixes (article 1 states
# none). `cpu` runs a shorter search on a subset and retrains the best settings
# for a few epochs with three seeds (the settings below give the numbers). `smoke` runs 3 tiny trials per model, which
# never leave Ax's initialisation (the centre of the search space and Sobol points, see below):
# it proves that everything runs, and its numbers say nothing.

# %%
from vitbn_nb import chapters
from vitbn_nb.chapters.bayes_opt import study as bayes_opt, search as bayes_opt_search

settings, force = chapters.from_notebook("04_bayes_opt", globals())
settings

# %% [markdown]
# ## The search
#
# As in the article: MNIST **without augmentation**, Adam, cross-entropy, test batches of
# 5000, and the objective is the **test accuracy** reached at the end of a trial. The search
# space is two-dimensional:
#
# - the learning rate in $[10^{-5}, 10^{-3}]$ for ViT and in $[10^{-5}, 10^{-2}]$ for ViTBNFFN
#   and ViTBN (article 1's ranges; it does not say on which scale, and the book searches it on a
#   log scale; it found the BatchNorm
#   models stable at lr 0.01, where its ViT broke down; chapter 3's instability note says which
#   runs broke down at its scale);
# - the batch size, an integer in $[20, 120]$.
#
# Ax's default generation strategy first spends **5 trials on initialisation**: the centre of
# the search space, then quasi-random Sobol points. From the 6th trial on, **BoTorch** fits a
# Gaussian process to the accuracies seen so far and proposes the point with the highest
# expected improvement. Each trial is an ordinary run of the book's run store: a finished
# trial is never trained again, and the optimisation's state is saved after every suggestion
# and every result, so an interrupted chapter picks up where it stopped. Ax is seeded, so the
# same settings propose the same trials.
#
# The optimisation **maximises test accuracy**, as the article's did: the set article 1 calls
# validation data is MNIST's test split (the reference checkpoint `ViTBNFFN_opt_30` at a84dfed
# counts 600 training steps per epoch, as all 60,000 training images at batch 100 give), and there is
# no third, held-out split. Choosing hyperparameters by their test accuracy and then reporting test accuracy
# flatters the winner, so the retrain's accuracy below is an optimistic estimate of how these
# settings do on unseen digits, not a held-out one. We keep the article's objective to
# reproduce it. The retrain is longer than a trial (the full epoch count) but not independent
# of the search: its first run uses seed 0, the seed every trial used; under profiles with
# several seeds, the further seeds add runs the search never saw.

# %%
bayes_opt.overview(settings)

# %% [markdown]
# Running the optimisation and the final trainings that follow from it (or reading both back
# from the run store). One line per trial says where it came from and what it scored.

# %%
result = bayes_opt.run(settings, force=force)
bayes_opt.trial_summary(result)

# %% [markdown]
# ## The plan, fixed before the runs
#
# How many seeds each retrain takes, and by which test each accuracy claim is judged, was fixed
# before any search of the protocol trained (the speed ratios' test was fixed later, by the timing
# plan below, before any of its rounds ran), from the spreads of chapter 3's 30-epoch runs (each spread at its
# one-sided 80 % upper bound, since it rests on a few seeds) and priced by their epochs. A claim
# that asks more seeds than the budget affords is judged at the seeds planned, its planned power
# shown beside it. The table is read from the committed file; the claims table below labels each
# verdict confirmatory only where every run it reads started after this plan's commit.

# %%
bayes_opt.protocol_plan_table(result)

# %% [markdown]
# ## Figure 7: how the best accuracy grows with the trials
#
# **Article 1 reports (Figure 7):** the convergence plot of ViTBNFFN, the best accuracy so far
# against the iteration of the optimisation, over 20 iterations; the text gives no numbers
# from it. Here every model has its curve (top), and the lower panels show where in the
# (learning rate, batch size) plane each trial went, coloured by its accuracy, with the
# winner circled. Shapes tell who proposed a trial: ◆ the centre, ● Sobol, ★ BoTorch.

# %%
bayes_opt_search.fig7_figure(result)

# %% [markdown]
# What the optimisation cost on this machine: importing Ax, one suggestion of each kind, and a
# trial's training. A BoTorch suggestion fits a Gaussian process; how its cost compares with a
# trial's depends on the machine, and the table gives this one's.

# %%
bayes_opt_search.ax_costs(result)

# %% [markdown]
# ## Training the optimised models
#
# Each model now trains for the full epoch count with its best learning rate and batch size,
# once per seed. These runs are timed as the reference code timed its own: a `DataLoader` over
# `ToTensor` MNIST, the loss read back with `.item()` every step, and a loop over every test
# image counting per-class hits one image at a time inside the timed test pass (the reference
# repository's Experiment-1 script, `mlflow_modules/train_mnist.py` at commit 74b1791). The
# trials above ran on the book's faster engine, which changes no accuracy they are chosen by. So Figure 8 and Table 3 compare like with
# like with the article. The best settings are also written to the run store
# (`runs/hpo/best-mnist-<profile>.json`), where chapter 6 reads them.

# %%
bayes_opt.final_runs(result)

# %% [markdown]
# ## Table 2: the optimised hyperparameters
#
# **Article 1 reports (Table 2)** the optimised learning rate and batch size of each model. The table is an image in the article, and its text does not repeat its values, so we
# cannot quote them; the text does give the accuracies after 30 epochs of training with those
# settings: **ViT 98.1 %, ViTBNFFN 97.6 %, ViTBN 97.8 %**. Our table gives both the best
# trial's accuracy (after the short trial training) and the accuracy after the full training
# (mean ± sd over seeds). At the `paper` protocol each model has two searches at different
# seeds; only the first is retrained, and the second's row shows how much the chosen settings
# depend on the search's own seed.

# %%
bayes_opt.best_settings_table(result)

# %% [markdown]
# ## Figure 8: the optimised trio, epoch by epoch
#
# **Article 1 reports (Figure 8):** the models with BatchNorm are significantly faster in
# training and in inference per epoch; the optimised ViT converges in fewer epochs; after 30
# epochs ViT, ViTBNFFN and ViTBN reach **98.1 %, 97.6 % and 97.8 %**.
#
# Each model trains with its own batch size here, so its time per epoch reflects the batch
# size as well as the architecture (a smaller batch means more, smaller steps); the article's
# comparison has the same property.

# %%
bayes_opt.fig8_figure(result)

# %% [markdown]
# The same panels as written, all three models at depth 6, each with its own search's best
# settings: the comparison article 1 describes, which its figures do not show (trained at the
# `paper` protocol; a smaller profile says it did not train it).

# %%
bayes_opt.fig8_figure(result, "as written")

# %% [markdown]
# ## Table 3: the speed-up of the optimised models
#
# With $r_t = T(\text{ViT}|\text{train}) / T(\text{model}|\text{train})$ and $r_v$ the same for
# the test pass (times per epoch), and gains $g = 1 - 1/r$:
#
# **Article 1 reports:** $r_t$(ViTBNFFN) = **3.9**, $r_v$(ViTBNFFN) = **2.6**,
# $r_t$(ViTBN) = **3.5**, $r_v$(ViTBN) = **2.5**; the training gain is above 70 % for both
# BatchNorm models and the inference gain a little above 60 %. Table 3 itself is an image; the
# gains in the table below are derived from the quoted ratios.
#
# Absolute times are this machine's (see the footer), so only ratios compare with the
# article's. Article 1 names no machine for Experiment 2 (an NVIDIA L4 on Colab for Experiment
# 1), and its reference scripts, as committed, never move a model or a batch to a GPU, so they
# run on the CPU; the claims table names both beside this machine. Each ratio is judged by the
# book's rule against article 1's qualitative claim (a training gain above 70 %, an inference
# gain above 60 %).
#
# The times are not the retrains' epochs. Machines that report the same CPU name ran one
# configuration at clearly different speeds, and a seed's two 30-epoch retrains do not fit one
# session on one machine. So the optimised models are timed together on one host, in
# interleaved rounds fixed by a plan committed before any round ran (`timing_plan.json`). In
# each round every model, starting from seed 0's initial weights, trains a share of an epoch at
# its own lr and batch size through its retrain's pipeline and then passes the test set once.
# The models take turns, so a busy spell slows them all alike, and each round gives one gain,
# paired with ViT's turn in the same round. Figure 8 still shows the retrains' own epoch times.

# %%
bayes_opt.ratios_table(result)

# %% [markdown]
# ## The claims, judged by the book's rule
#
# Every one of article 1's Experiment 2 claims that this chapter can test, with the measured value, its interval
# (95 % for a difference, 90 % for an equivalence; each row gives its level) and the verdict of the book's one
# decision rule (the book's claims page, "How this book judges a claim"): an accuracy against the article's value
# over seeds, convergence paired by seed, a speed ratio over the timing rounds (each paired with ViT's turn in its round), no verdict with fewer
# than three seeds, and "not testable at this scale" for a number the article reached at a protocol these runs did
# not.

# %%
bayes_opt.claims_table(result)

# %% [markdown]
# ## This run against the article
#
# Every number the article's text gives for Experiment 2, beside ours. Under `smoke` and `cpu`
# the training is far shorter than the article's, so the accuracies are not expected to match;
# the claims table above says which claims this scale can test.

# %%
bayes_opt.comparison_table(result)

# %% [markdown]
# ## What to take from this
#
# Computed from the claims table above, so it says what this run's verdicts say:

# %%
result.takeaway()
