"""Chapter 03: Experiment 1 of article 1, the "as published" trio at three fixed learning rates.

ViT (depth 6), ViTBNFFN (depth 1) and ViTBN (depth 1) -- the depths of the reference
repository, so the speed ratios mix BatchNorm with a 6x difference in depth -- are trained
on MNIST without augmentation with Adam, batch 100, test batch 5000, no lr decay, testing
after every epoch. The chapter redraws article 1's Figures 3-5 (four panels per lr),
Figure 6 (training time per epoch at each lr, per model) and Table 1 (the ratios
r = T_ViT / T_model and gains g = 1 - 1/r), each beside the numbers the article reports.
"""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from .. import figures, results, runs
from ..models import AS_PUBLISHED_DEPTH
from ..runs import RunConfig

CHAPTER = "03_fixed_lr"
MODELS = ("ViT", "ViTBNFFN", "ViTBN")
BN_MODELS = ("ViTBNFFN", "ViTBN")
#: Which figure of article 1 each learning rate reproduces.
FIGURE_OF_LR = {0.0005: "fig3", 0.005: "fig4", 0.01: "fig5"}
#: A ratio "reproduces" when ours lies within this fraction of the article's (read off its plots).
RATIO_TOLERANCE = 0.20
#: A final accuracy "reproduces" within this many points of the article's.
ACCURACY_TOLERANCE = 1.0
#: A run is called unstable at the first epoch whose accuracy falls this many points below its best so far.
UNSTABLE_DROP = 10.0
REQUIRED = ("seeds", "epochs", "lrs", "batch_size", "test_batch_size", "train_size", "test_size", "profile")

#: What article 1 reports (seed 000, "Experiment 1"); accuracies in %, ratios r = T_ViT / T_model.
#: The text swaps a label at lr 0.0005 ("r_t(ViTBNFFN) = 2.5" is ViTBN's); it is read as ViTBN's here.
SEED_REPORTED = {
    0.0005: dict(figure="Fig 3", accuracy={"ViT": 98.2, "ViTBNFFN": 97.8, "ViTBN": 97.1}, accuracy_above={},
                 r_t={"ViTBNFFN": 2.7, "ViTBN": 2.5}, r_v={"ViTBNFFN": 2.6, "ViTBN": 2.5}, vit_unstable_epoch=None,
                 note="ViT converges in fewer epochs and ends slightly more accurate; BN models >2x faster (~60 % gain)"),
    0.005: dict(figure="Fig 4", accuracy={}, accuracy_above={},
                r_t={"ViTBNFFN": 3.6, "ViTBN": 3.5}, r_v={"ViTBNFFN": 2.5, "ViTBN": 2.5}, vit_unstable_epoch=None,
                note="ViT has no convergence advantage; its training time rises (~70 % training gain, ~60 % inference)"),
    0.01: dict(figure="Fig 5", accuracy={}, accuracy_above={"ViTBNFFN": 97.0, "ViTBN": 97.0},
               r_t={"ViTBNFFN": 2.7, "ViTBN": 4.3}, r_v={"ViTBNFFN": 2.6, "ViTBN": 2.7}, vit_unstable_epoch=15,
               note="ViT unstable from about epoch 15 (loss stops converging, accuracy plummets); BN models stay stable"),
}
SEED_FIG6 = ("training time per epoch varies with lr most for ViT; ViTBN stays roughly the same; "
             "ViTBNFFN changes appreciably only at lr 0.01")


# ---------------------------------------------------------------------------------------------
# runs
# ---------------------------------------------------------------------------------------------
def _check(settings: dict) -> None:
    missing = [key for key in REQUIRED if key not in settings]
    if missing:
        raise ValueError(f"settings for {CHAPTER} lack {missing}; build them with profiles.settings('{CHAPTER}', profile)")
    if not settings["lrs"]:
        raise ValueError("settings['lrs'] is empty; give at least one learning rate")
    if not isinstance(settings["seeds"], int) or settings["seeds"] < 1:
        raise ValueError(f"settings['seeds']={settings['seeds']!r} is not allowed; it must be an integer >= 1")


def configs(settings: dict) -> list[RunConfig]:
    """One run per lr, seed and model; every model at its "as published" depth (``build_model`` defaults)."""
    _check(settings)
    return [RunConfig(model=model, model_kwargs={}, dataset="mnist", epochs=settings["epochs"], lr=float(lr),
                      batch_size=settings["batch_size"], test_batch_size=settings["test_batch_size"], seed=seed,
                      train_size=settings["train_size"], test_size=settings["test_size"])
            for lr in settings["lrs"] for seed in range(settings["seeds"]) for model in MODELS]


def run(settings: dict, force: bool = False) -> pd.DataFrame:
    """Train (or fetch from the run store) every run of the chapter; one row per run and epoch."""
    return runs.load_table(runs.train_all(configs(settings), force=force))


def overview(settings: dict) -> pd.DataFrame:
    """What the profile trains: one row per model."""
    _check(settings)
    size = lambda n, full: f"{full:,} (all)" if n is None else f"{n:,} of {full:,}"
    return pd.DataFrame([{
        "model": model, "depth": AS_PUBLISHED_DEPTH[model], "dataset": "MNIST (no augmentation)",
        "learning rates": ", ".join(f"{lr:g}" for lr in settings["lrs"]), "epochs": settings["epochs"],
        "batch (train / test)": f"{settings['batch_size']} / {settings['test_batch_size']}",
        "train images": size(settings["train_size"], 60000), "test images": size(settings["test_size"], 10000),
        "seeds": settings["seeds"], "runs": len(settings["lrs"]) * settings["seeds"],
    } for model in MODELS])


# ---------------------------------------------------------------------------------------------
# numbers
# ---------------------------------------------------------------------------------------------
def _at_lr(table: pd.DataFrame, lr: float) -> pd.DataFrame:
    subset = table[np.isclose(table["lr"], lr)]
    if subset.empty:
        raise ValueError(f"lr={lr!r} has no runs in this table; it holds lr {sorted(table['lr'].unique())}")
    return subset


def unstable_epoch(run: pd.DataFrame, drop: float = UNSTABLE_DROP):
    """First epoch at which one run's accuracy is ``drop`` points below its best so far, or its loss is NaN/inf."""
    run = run.sort_values("epoch")
    best = run["test_acc"].cummax().shift(fill_value=-np.inf)
    bad = (run["test_acc"] < best - drop) | run["diverged"].astype(bool) | ~np.isfinite(run["train_loss"])
    return int(run.loc[bad, "epoch"].iloc[0]) if bad.any() else None


def stability(table: pd.DataFrame, model: str = "ViT") -> dict:
    """Per ``model``: how many runs diverged (NaN/inf loss) or turned unstable, and at which epochs."""
    rows = table[table["model"] == model]
    diverged, unstable = [], []
    for _, one in rows.groupby("run_id"):
        if (one["status"] == "diverged").any():
            diverged.append(int(one.loc[one["diverged"].astype(bool), "epoch"].min()))
        epoch = unstable_epoch(one)
        if epoch is not None:
            unstable.append(epoch)
    return {"runs": rows["run_id"].nunique(), "diverged": sorted(diverged), "unstable": sorted(unstable)}


def _stability_text(info: dict, what: str) -> str:
    epochs = info[what]
    if not epochs:
        return f"no (0/{info['runs']})"
    return f"yes ({len(epochs)}/{info['runs']}, at epoch {', '.join(map(str, epochs))})"


def ratios(table: pd.DataFrame) -> pd.DataFrame:
    """r_t, r_v, g_t, g_v per lr and BN model (mean ± sd over seeds, paired by seed), via ``results.speed_ratios``."""
    return results.speed_ratios(table, baseline="ViT", by=("lr",))


def _within(ours: float, seed: float, tolerance: float = RATIO_TOLERANCE) -> bool:
    return bool(np.isfinite(ours)) and abs(ours / seed - 1) <= tolerance


def this_run(table: pd.DataFrame, lr: float) -> pd.DataFrame:
    """This run's numbers at ``lr``: final accuracy, mean time per epoch, ratios, divergence, per model."""
    subset = _at_lr(table, lr)
    accuracy = results.accuracy_summary(subset, by=("model",)).set_index("model")
    speed = ratios(subset).set_index("model")
    rows = []
    for model in MODELS:
        one = subset[subset["model"] == model]
        if one.empty:
            continue
        per_run = one.groupby("run_id")[["train_seconds", "test_seconds"]].mean()
        info = stability(subset, model)
        rows.append({
            "model": model, "depth": int(one["depth"].iloc[0]),
            "final accuracy (%)": accuracy.loc[model, "accuracy (%)"],
            "train s/epoch": results.mean_sd(per_run["train_seconds"], 2),
            "test s/epoch": results.mean_sd(per_run["test_seconds"], 3),
            "r_t": speed.loc[model, "r_t"] if model in speed.index else "baseline",
            "r_v": speed.loc[model, "r_v"] if model in speed.index else "baseline",
            "diverged (NaN loss)": _stability_text(info, "diverged"),
            f"unstable (acc {UNSTABLE_DROP:g} pt below best)": _stability_text(info, "unstable"),
            "seeds": int(one["seed"].nunique()),
        })
    return pd.DataFrame(rows)


def seed_reported(lr: float | None = None) -> pd.DataFrame:
    """Article 1's reported numbers for Experiment 1 (all lrs, or one), one row per quantity."""
    rows = []
    for rate, seed in SEED_REPORTED.items():
        if lr is not None and not np.isclose(rate, lr):
            continue
        where = f"article 1, {seed['figure']} (lr {rate:g})"
        for model, value in seed["accuracy"].items():
            rows.append({"source": where, "model": model, "quantity": "final accuracy (%)", "reported": f"≈ {value:g}"})
        for model, value in seed["accuracy_above"].items():
            rows.append({"source": where, "model": model, "quantity": "final accuracy (%)", "reported": f"> {value:g}"})
        for key in ("r_t", "r_v"):
            for model, value in seed[key].items():
                rows.append({"source": where, "model": model, "quantity": key, "reported": f"{value:g}"})
        for key, label in (("r_t", "g_t (%)"), ("r_v", "g_v (%)")):
            for model, value in seed[key].items():
                rows.append({"source": f"article 1, Table 1 (lr {rate:g})", "model": model, "quantity": label,
                             "reported": f"{results.gain(value):.0f} (= 1 − 1/{value:g})"})
        if seed["vit_unstable_epoch"]:
            rows.append({"source": where, "model": "ViT", "quantity": "unstable from epoch",
                         "reported": f"≈ {seed['vit_unstable_epoch']}"})
        rows.append({"source": where, "model": "all", "quantity": "finding", "reported": seed["note"]})
    if lr is None:
        rows.append({"source": "article 1, Fig 6", "model": "all", "quantity": "finding", "reported": SEED_FIG6})
    if not rows:
        raise ValueError(f"lr={lr!r} is not one of article 1's learning rates {list(SEED_REPORTED)}")
    return pd.DataFrame(rows)


def comparison(table: pd.DataFrame, lr: float) -> pd.DataFrame:
    """The article's number, ours (mean ± sd over seeds) and whether it reproduced, per model and quantity."""
    subset = _at_lr(table, lr)
    seed = _seed_at(lr)
    accuracy = results.accuracy_summary(subset, by=("model",)).set_index("model")
    speed = ratios(subset).set_index("model")
    rows = []
    for model in MODELS:
        if model not in accuracy.index:
            continue
        ours = accuracy.loc[model, "mean"]
        if model in seed.get("accuracy", {}):
            reported = seed["accuracy"][model]
            verdict = f"Δ {ours - reported:+.1f} pt ({'within' if abs(ours - reported) <= ACCURACY_TOLERANCE else 'outside'} ± {ACCURACY_TOLERANCE:g} pt)"
            reported = f"≈ {reported:g}"
        elif model in seed.get("accuracy_above", {}):
            bound = seed["accuracy_above"][model]
            verdict = f"above {bound:g} %: {'yes' if ours > bound else 'no'}"
            reported = f"> {bound:g}"
        else:
            reported, verdict = "not quoted", ""
        rows.append({"model": model, "quantity": "final accuracy (%)", "article 1": reported,
                     "this run": accuracy.loc[model, "accuracy (%)"], "verdict": verdict})
    for key in ("r_t", "r_v"):
        for model in BN_MODELS:
            if model not in speed.index:
                continue
            ours = speed.loc[model, f"{key}_mean"]
            reported = seed.get(key, {}).get(model)
            verdict = "" if reported is None else (
                f"{'within' if _within(ours, reported) else 'outside'} ± {RATIO_TOLERANCE:.0%} of the article's")
            rows.append({"model": model, "quantity": key, "article 1": "not quoted" if reported is None else f"{reported:g}",
                         "this run": speed.loc[model, key], "verdict": verdict})
    if "ViT" in accuracy.index:
        info = stability(subset, "ViT")
        expected = seed.get("vit_unstable_epoch")
        rows.append({"model": "ViT", "quantity": "diverged (NaN loss)", "article 1": "—",
                     "this run": _stability_text(info, "diverged"), "verdict": ""})
        rows.append({"model": "ViT", "quantity": f"unstable (acc drops > {UNSTABLE_DROP:g} pt)",
                     "article 1": f"yes, ≈ epoch {expected}" if expected else "no",
                     "this run": _stability_text(info, "unstable"),
                     "verdict": "reproduced" if bool(info["unstable"]) == bool(expected) else "not reproduced"})
    return pd.DataFrame(rows)


def _seed_at(lr: float) -> dict:
    for rate, seed in SEED_REPORTED.items():
        if np.isclose(rate, lr):
            return seed
    return {}


def statement(table: pd.DataFrame, lr: float) -> str:
    """One line: what reproduced at ``lr`` (ratios within ± 20 %, accuracies, ViT's stability)."""
    compared = comparison(table, lr)
    parts = [f"lr {lr:g}"]
    for key in ("r_t", "r_v"):
        judged = compared[(compared["quantity"] == key) & (compared["verdict"] != "")]
        if len(judged):
            hits = judged["verdict"].str.startswith("within").sum()
            parts.append(f"{key} within ± {RATIO_TOLERANCE:.0%} of the article's for {hits}/{len(judged)} BN models")
    judged = compared[(compared["quantity"] == "final accuracy (%)") & (compared["verdict"] != "")]
    if len(judged):
        hits = judged["verdict"].str.contains("within|yes").sum()
        parts.append(f"final accuracy as reported for {hits}/{len(judged)} models")
    vit = stability(_at_lr(table, lr), "ViT")
    if vit["runs"]:
        parts.append(f"ViT diverged: {_stability_text(vit, 'diverged')}")
        parts.append(f"ViT unstable: {_stability_text(vit, 'unstable')}")
    return "; ".join(parts) + "."


# ---------------------------------------------------------------------------------------------
# figures and tables
# ---------------------------------------------------------------------------------------------
def _label(model: str, depth) -> str:
    return f"{model} (depth {int(depth)})"


def _names(lr: float) -> tuple[str, str]:
    """(file name, reproduces id) of the figure at ``lr``."""
    fig = FIGURE_OF_LR.get(next((k for k in FIGURE_OF_LR if np.isclose(k, lr)), None))
    if fig is None:
        return f"fixed_lr_lr{lr:g}", f"new/fixed_lr_lr{lr:g}"
    return f"article1_{fig}", f"article1/{fig}"


def four_panel_figure(table: pd.DataFrame, settings: dict, lr: float):
    """Article 1's Figure 3, 4 or 5: train/test time per epoch, training loss and test accuracy at ``lr``."""
    figures.use_style()
    subset = _at_lr(table, lr)
    name, reproduces = _names(lr)
    fig = figures.four_panel(subset, title=(
        f"Article 1 {reproduces.split('/')[1].replace('fig', 'Fig ')} · MNIST, lr = {lr:g}, Adam, batch 100\n"
        "depths differ as published: ViT depth 6 vs ViTBNFFN / ViTBN depth 1"),
        label=lambda model, group: _label(model, group["depth"].iloc[0]))
    if subset["diverged"].astype(bool).any():
        # lower left: a falling loss leaves it empty, and the × of a diverged run sits at the top edge
        fig.axes[2].text(0.02, 0.03, "× = loss became NaN/inf (run stopped there)", transform=fig.axes[2].transAxes,
                         ha="left", va="bottom", fontsize=9)
    caption = (f"Experiment 1 at lr {lr:g}: ViT (depth 6) vs ViTBNFFN and ViTBN (depth 1) -- the depths differ, "
               "as published; mean over seeds, band = min-max; × marks a diverged run")
    return figures.save_figure(fig, name, chapter=CHAPTER, reproduces=reproduces, profile=settings["profile"],
                               caption=caption, run_ids=subset["run_id"].unique())


def comparison_table(table: pd.DataFrame, settings: dict, lr: float):
    """The article's numbers beside this run's at ``lr``, saved; the caption is the one-line verdict."""
    name, reproduces = _names(lr)
    subset = _at_lr(table, lr)
    return figures.save_table(comparison(subset, lr), f"{name}_vs_article", chapter=CHAPTER, reproduces=reproduces,
                              profile=settings["profile"], caption=statement(subset, lr),
                              run_ids=subset["run_id"].unique())


def numbers_table(table: pd.DataFrame, settings: dict, lr: float):
    """This run's numbers at ``lr`` (times per epoch, ratios, accuracy, stability), saved."""
    name, reproduces = _names(lr)
    subset = _at_lr(table, lr)
    return figures.save_table(this_run(subset, lr), f"{name}_numbers", chapter=CHAPTER, reproduces=reproduces,
                              profile=settings["profile"], run_ids=subset["run_id"].unique(),
                              caption=f"This run at lr {lr:g}: mean ± sd over seeds (ViT depth 6, BN models depth 1)")


def _lr_styles(lrs) -> dict:
    """Line style, marker and darkening (0 = the model's colour) per lr, so model_1..model_3 tell apart in grey too."""
    styles = [("-", "o", 0.0), ("--", "s", 0.3), (":", "^", 0.55), ("-.", "D", 0.7)]
    return {lr: styles[i % len(styles)] for i, lr in enumerate(sorted(lrs))}


def lr_variation(table: pd.DataFrame) -> pd.DataFrame:
    """Per model: mean training time per epoch at each lr, and how much it varies across lrs (max/min − 1)."""
    rows = []
    for model in MODELS:
        one = table[table["model"] == model]
        if one.empty:
            continue
        per_lr = one.groupby("lr")["train_seconds"].mean()
        row = {"model": model, "depth": int(one["depth"].iloc[0])}
        for i, lr in enumerate(sorted(table["lr"].unique()), 1):
            row[f"i={i}: lr {lr:g} (s/epoch)"] = per_lr.get(lr, np.nan)
        row["variation across lrs (%)"] = round(100 * (per_lr.max() / per_lr.min() - 1), 1)
        rows.append(row)
    return pd.DataFrame(rows)


def fig6_statement(table: pd.DataFrame) -> str:
    variation = lr_variation(table).set_index("model")["variation across lrs (%)"]
    spread = ", ".join(f"{model} {value:.0f} %" for model, value in variation.items())
    largest = variation.idxmax()
    return (f"Training time per epoch varies across the lrs by {spread} (max/min − 1); "
            f"largest for {largest} ({'as' if largest == 'ViT' else 'unlike'} the article, where ViT varies most).")


def figure6(table: pd.DataFrame, settings: dict):
    """Article 1's Figure 6: per model, training time per epoch at each lr (model_i = i-th lr)."""
    figures.use_style()
    lrs = sorted(table["lr"].unique())
    styles = _lr_styles(lrs)
    present = [m for m in MODELS if m in set(table["model"])]
    fig, axes = plt.subplots(1, len(present), figsize=(5 * len(present), 4.2), squeeze=False)
    for ax, model in zip(axes.flat, present):
        one = table[table["model"] == model]
        for i, lr in enumerate(lrs, 1):
            group = one[np.isclose(one["lr"], lr)]
            if group.empty:
                continue
            linestyle, marker, dark = styles[lr]
            figures.mean_band(ax, group, x="epoch", y="train_seconds", label=f"{model}_{i}: lr {lr:g}",
                              color=figures.darker(figures.color(model), dark), linestyle=linestyle, marker=marker)
        ax.set(title=_label(model, one["depth"].iloc[0]), xlabel="epoch", ylabel="train time per epoch (s)")
        ax.set_ylim(bottom=0)
        figures.integer_epochs(ax)
        ax.legend(fontsize=9)
    fig.suptitle("Article 1 Fig 6 · training time per epoch at each learning rate, per model\n"
                 "depths differ as published: ViT depth 6 vs ViTBNFFN / ViTBN depth 1")
    caption = ("Training time per epoch vs epoch for each model at the three learning rates (model_i = i-th lr); "
               "ViT depth 6, BN models depth 1, as published; mean over seeds, band = min-max")
    return figures.save_figure(fig, "article1_fig6", chapter=CHAPTER, reproduces="article1/fig6",
                               profile=settings["profile"], caption=caption, run_ids=table["run_id"].unique())


def figure6_table(table: pd.DataFrame, settings: dict):
    """Figure 6's numbers: mean training time per epoch per model and lr, with the computed verdict as caption."""
    return figures.save_table(lr_variation(table), "article1_fig6_numbers", chapter=CHAPTER,
                              reproduces="article1/fig6", profile=settings["profile"], caption=fig6_statement(table),
                              run_ids=table["run_id"].unique(), precision=3)


def table1_frame(table: pd.DataFrame) -> pd.DataFrame:
    """Table 1 with the article's ratios and gains beside ours (mean ± sd over seeds) and a verdict per ratio."""
    ours = ratios(table)
    rows = []
    for _, row in ours.iterrows():
        seed = _seed_at(row["lr"])
        reported_t, reported_v = seed.get("r_t", {}).get(row["model"]), seed.get("r_v", {}).get(row["model"])
        fmt = lambda v, f: "—" if v is None else f(v)
        vit = stability(table[np.isclose(table["lr"], row["lr"])], "ViT")
        rows.append({
            "lr": f"{row['lr']:g}", "model": row["model"],
            "r_t": row["r_t"], "r_t (article)": fmt(reported_t, lambda v: f"{v:g}"),
            "r_v": row["r_v"], "r_v (article)": fmt(reported_v, lambda v: f"{v:g}"),
            "g_t (%)": row["g_t"], "g_t (article, %)": fmt(reported_t, lambda v: f"{results.gain(v):.0f}"),
            "g_v (%)": row["g_v"], "g_v (article, %)": fmt(reported_v, lambda v: f"{results.gain(v):.0f}"),
            "r_t verdict": "" if reported_t is None else ("within ± 20 %" if _within(row["r_t_mean"], reported_t) else "outside ± 20 %"),
            "r_v verdict": "" if reported_v is None else ("within ± 20 %" if _within(row["r_v_mean"], reported_v) else "outside ± 20 %"),
            "ViT diverged": _stability_text(vit, "diverged"), "seeds": row["seeds"],
        })
    return pd.DataFrame(rows)


def table1_statement(table: pd.DataFrame) -> str:
    frame = table1_frame(table)
    parts = []
    for key in ("r_t", "r_v"):
        judged = frame[frame[f"{key} verdict"] != ""]
        parts.append(f"{key} within ± {RATIO_TOLERANCE:.0%} of the article's in {judged[f'{key} verdict'].str.startswith('within').sum()}"
                     f"/{len(judged)} cases")
    mean_t = ratios(table)["r_t_mean"]
    parts.append(f"the BN models train {mean_t.min():.1f}-{mean_t.max():.1f}× faster per epoch than the depth-6 ViT")
    return "Table 1: " + "; ".join(parts) + "."


def table1(table: pd.DataFrame, settings: dict):
    """Article 1's Table 1 (r_t, r_v, g_t, g_v per BN model and lr), with the article's values beside ours."""
    caption = (f"{table1_statement(table)} r = T_ViT / T_model (mean time per epoch), g = 1 − 1/r; "
               "ViT depth 6 vs BN models depth 1 (as published); the article's g are derived from its quoted r")
    return figures.save_table(table1_frame(table), "article1_table1", chapter=CHAPTER, reproduces="article1/table1",
                              profile=settings["profile"], caption=caption, run_ids=table["run_id"].unique())
