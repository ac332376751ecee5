"""Chapter 05: article 2's depth study -- ViT against ViTBNFFN at the same depth.

Both models share every setting but the norm in the feed-forward network (SPEC §5); they
are trained on augmented MNIST (the test set augmented once, with a fixed seed, by the run
store -- as article 2 augmented its validation set) for 10 epochs with Adam, batch 100,
test batch 5000. Article 2 ran lr 0.003 at depths 4-7 (its Fig 8), lr 0.005 at depths 1-4
(Fig 9), and compared the two lrs at depths 2, 3, 4 (Fig 10), so depths 2 and 3 also run
at lr 0.003. Every figure sits beside the article's finding and a verdict computed from
the final accuracies, with their spread over seeds.
"""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from .. import figures, results, runs
from ..runs import RunConfig

CHAPTER = "05_depth_study"
MODELS = ("ViT", "ViTBNFFN")
#: The article's figures: which lr and depths each shows.
FIG8 = dict(name="article2_fig8", reproduces="article2/fig8", lr=0.003, depths=(4, 5, 6, 7), label="Fig 8")
FIG9 = dict(name="article2_fig9", reproduces="article2/fig9", lr=0.005, depths=(1, 2, 3, 4), label="Fig 9")
FIG10 = dict(name="article2_fig10", reproduces="article2/fig10", lrs=(0.003, 0.005), depths=(2, 3, 4), label="Fig 10")
#: Final accuracies closer than this (points) count as "comparable", the article's word; the article gives no threshold.
COMPARABLE_POINTS = 1.0
REQUIRED = ("seeds", "epochs", "batch_size", "test_batch_size", "train_size", "test_size", "depths", "profile")

#: Article 2's findings (seed 001, "实验"), per (lr, depth): (where, what it says, expectation).
#: Expectation "comparable", "ViTBNFFN ahead" (the article's "slightly better": any lead of ViTBNFFN agrees,
#: however small, unless the seeds' spread swallows it) or "ViTBNFFN better"; depths 2-3 at lr 0.003 are from its text ("d < 4: comparable").
SEED_FINDINGS = {
    (0.003, 2): ("Fig 8 text", "comparable (the text: accuracies stay comparable for d < 4)", "comparable"),
    (0.003, 3): ("Fig 8 text", "comparable (the text: accuracies stay comparable for d < 4)", "comparable"),
    (0.003, 4): ("Fig 8", "comparable; ViT slightly better", "comparable"),
    (0.003, 5): ("Fig 8", "comparable; ViTBNFFN slightly ahead", "comparable"),
    (0.003, 6): ("Fig 8", "ViTBNFFN clearly better", "ViTBNFFN better"),
    (0.003, 7): ("Fig 8", "ViTBNFFN clearly better (and for any d ≥ 6)", "ViTBNFFN better"),
    (0.005, 1): ("Fig 9", "comparable; ViT slightly better", "comparable"),
    (0.005, 2): ("Fig 9", "comparable; almost no difference", "comparable"),
    (0.005, 3): ("Fig 9", "ViTBNFFN slightly better", "ViTBNFFN ahead"),
    (0.005, 4): ("Fig 9", "ViTBNFFN clearly better (and for any d ≥ 4)", "ViTBNFFN better"),
}
#: Fig 10 (accuracy at epoch 10 when lr goes 0.003 -> 0.005): per depth, what the article says and whether
#: ViTBNFFN is hit less than ViT; at d = 3 it quotes numbers (ViT ≈ 91 -> 78 %, ViTBNFFN ≈ 92 -> 90 %).
SEED_FIG10 = {
    2: ("both models are affected by the higher lr in much the same way", "similar"),
    3: ("ViT ≈ 91 % → ≈ 78 %; ViTBNFFN ≈ 92 % → ≈ 90 % (epoch 10)", "ViTBNFFN milder"),
    4: ("as at d = 3: ViT hit much harder than ViTBNFFN", "ViTBNFFN milder"),
}


# ---------------------------------------------------------------------------------------------
# runs
# ---------------------------------------------------------------------------------------------
def _check(settings: dict) -> None:
    missing = [key for key in REQUIRED if key not in settings]
    if missing:
        raise ValueError(f"settings for {CHAPTER} lack {missing}; build them with profiles.settings('{CHAPTER}', profile)")
    depths = settings["depths"]
    if not isinstance(depths, dict) or not depths:
        raise ValueError(f"settings['depths']={depths!r} is not allowed; give {{lr: [depth, ...]}}, e.g. {{0.003: [4, 5]}}")
    for lr, ds in depths.items():
        if not ds or any(not isinstance(d, int) or d < 1 for d in ds):
            raise ValueError(f"settings['depths'][{lr!r}]={ds!r} is not allowed; give integer depths >= 1")
    if not isinstance(settings["seeds"], int) or settings["seeds"] < 1:
        raise ValueError(f"settings['seeds']={settings['seeds']!r} is not allowed; it must be an integer >= 1")


def configs(settings: dict) -> list[RunConfig]:
    """Per lr and depth of the profile, per seed: ViT and ViTBNFFN at that same depth, on augmented MNIST."""
    _check(settings)
    return [RunConfig(model=model, model_kwargs={"depth": depth}, dataset="mnist_aug", epochs=settings["epochs"],
                      lr=float(lr), batch_size=settings["batch_size"], test_batch_size=settings["test_batch_size"],
                      seed=seed, train_size=settings["train_size"], test_size=settings["test_size"])
            for lr, depths in settings["depths"].items() for depth in sorted(depths)
            for seed in range(settings["seeds"]) for model in MODELS]


def run(settings: dict, force: bool = False) -> pd.DataFrame:
    """Train (or fetch from the run store) every run of the chapter; one row per run and epoch."""
    return runs.load_table(runs.train_all(configs(settings), force=force))


def overview(settings: dict) -> pd.DataFrame:
    """What the profile trains: one row per lr."""
    _check(settings)
    size = lambda n, full: f"{full:,} (all)" if n is None else f"{n:,} of {full:,}"
    return pd.DataFrame([{
        "lr": lr, "depths": ", ".join(map(str, sorted(depths))), "models": " vs ".join(MODELS) + " (same depth)",
        "dataset": "MNIST, augmented", "epochs": settings["epochs"],
        "batch (train / test)": f"{settings['batch_size']} / {settings['test_batch_size']}",
        "train images": size(settings["train_size"], 60000), "test images": size(settings["test_size"], 10000),
        "seeds": settings["seeds"], "runs": 2 * len(depths) * settings["seeds"],
    } for lr, depths in settings["depths"].items()])


# ---------------------------------------------------------------------------------------------
# numbers
# ---------------------------------------------------------------------------------------------
def _select(table: pd.DataFrame, lr: float, depth: int, model: str | None = None) -> pd.DataFrame:
    keep = np.isclose(table["lr"], lr) & (table["depth"] == depth)
    if model is not None:
        keep &= table["model"] == model
    return table[keep]


def final_accuracy(table: pd.DataFrame, lr: float, depth: int, model: str) -> pd.Series:
    """Final test accuracy per seed (a diverged run's is at the epoch it diverged)."""
    last = results.final_epochs(_select(table, lr, depth, model))
    return last.set_index("seed")["test_acc"].sort_index()


def difference(table: pd.DataFrame, lr: float, depth: int) -> pd.Series:
    """ViTBNFFN − ViT final accuracy per seed (points), paired by seed."""
    return (final_accuracy(table, lr, depth, "ViTBNFFN") - final_accuracy(table, lr, depth, "ViT")).dropna()


def call(deltas: pd.Series, comparable: float = COMPARABLE_POINTS) -> str:
    """Our reading of per-seed differences ViTBNFFN − ViT: 'within spread', 'comparable', or who is better.

    "Within spread" when the mean difference is no larger than its standard deviation over
    seeds; with one seed there is no spread, and only the ``comparable`` threshold applies.
    """
    deltas = pd.Series(deltas, dtype=float).dropna()
    if deltas.empty:
        return "not run"
    mean = deltas.mean()
    if len(deltas) > 1 and abs(mean) <= deltas.std(ddof=1):
        return "within spread"
    if abs(mean) < comparable:
        return "comparable"
    return "ViTBNFFN better" if mean > 0 else "ViT better"


def _agrees(ours: str, expected: str, deltas=None) -> str:
    if ours == "not run":
        return "—"
    if expected == "ViTBNFFN ahead":
        mean = pd.Series(deltas, dtype=float).mean() if deltas is not None else float("nan")
        same = ours == "ViTBNFFN better" or (ours == "comparable" and mean > 0)
    else:
        same = ours in ("within spread", "comparable") if expected == "comparable" else ours == expected
    return "yes" if same else "no"


def verdicts(table: pd.DataFrame, lr: float, depths) -> pd.DataFrame:
    """Per depth at ``lr``: final accuracies (mean ± sd), ViTBNFFN − ViT, our call, the article's, agreement."""
    rows = []
    for depth in depths:
        deltas = difference(table, lr, depth)
        where, said, expected = SEED_FINDINGS.get((lr, depth), ("—", "not reported", ""))
        ours = call(deltas)
        rows.append({
            "lr": f"{lr:g}", "depth": depth,
            "ViT (%)": results.mean_sd(final_accuracy(table, lr, depth, "ViT")),
            "ViTBNFFN (%)": results.mean_sd(final_accuracy(table, lr, depth, "ViTBNFFN")),
            "ViTBNFFN − ViT (pt)": results.mean_sd(deltas), "this run": ours,
            "article 2": f"{said} ({where})" if expected else said,
            "agrees": _agrees(ours, expected, deltas) if expected else "—",
            "seeds": len(deltas),
        })
    return pd.DataFrame(rows)


def _statement(frame: pd.DataFrame, what: str) -> str:
    judged = frame[frame["agrees"].isin(["yes", "no"])]
    if judged.empty:
        return f"{what}: nothing to compare under this profile."
    agree = judged.loc[judged["agrees"] == "yes", "depth"].tolist()
    differ = judged.loc[judged["agrees"] == "no", "depth"].tolist()
    seeds = int(judged["seeds"].min())
    spread = "one seed, so no spread" if seeds < 2 else f"{seeds} seeds; 'within spread' = |mean| ≤ sd"
    return (f"{what}: agrees with article 2 at {len(agree)}/{len(judged)} depths"
            f"{' (d = ' + ', '.join(map(str, agree)) + ')' if agree else ''}"
            f"{'; differs at d = ' + ', '.join(map(str, differ)) if differ else ''} ({spread}).")


def lr_effect(table: pd.DataFrame, depths=FIG10["depths"], lrs=FIG10["lrs"]) -> pd.DataFrame:
    """Fig 10's question per depth: how far each model's final accuracy falls when lr goes up, and who is hit less."""
    low, high = lrs
    rows = []
    for depth in depths:
        row = {"depth": depth}
        drops = {}
        for model in MODELS:
            a, b = final_accuracy(table, low, depth, model), final_accuracy(table, high, depth, model)
            drops[model] = (a - b).dropna()
            row[f"{model} lr {low:g} (%)"] = results.mean_sd(a)
            row[f"{model} lr {high:g} (%)"] = results.mean_sd(b)
            row[f"{model} drop (pt)"] = results.mean_sd(drops[model])
        # Positive = ViTBNFFN loses less accuracy than ViT; paired by seed.
        relief = (drops["ViT"] - drops["ViTBNFFN"]).dropna()
        said, expected = SEED_FIG10.get(depth, ("not reported", ""))
        if relief.empty:
            ours = "not run"
        elif len(relief) > 1 and abs(relief.mean()) <= relief.std(ddof=1):
            ours = "similar (within spread)"
        elif abs(relief.mean()) < COMPARABLE_POINTS:
            ours = "similar"
        else:
            ours = "ViTBNFFN milder" if relief.mean() > 0 else "ViT milder"
        row.update({"this run": ours, "article 2": said, "seeds": len(relief),
                    "agrees": "—" if ours == "not run" or not expected else
                    ("yes" if ours.split(" (")[0] == expected else "no")})
        rows.append(row)
    return pd.DataFrame(rows)


def seed_reported() -> pd.DataFrame:
    """Article 2's reported findings of the depth study, one row per figure and depth."""
    rows = [{"figure": where, "lr": f"{lr:g}", "depth": depth, "article 2 reports": said}
            for (lr, depth), (where, said, _) in sorted(SEED_FINDINGS.items(), key=lambda kv: (kv[1][0], kv[0]))]
    rows += [{"figure": "Fig 10", "lr": "0.003 → 0.005", "depth": depth, "article 2 reports": said}
             for depth, (said, _) in SEED_FIG10.items()]
    return pd.DataFrame(rows)


def summary(table: pd.DataFrame) -> pd.DataFrame:
    """Final accuracy vs depth per model and lr: mean ± sd, min, max over seeds."""
    last = results.final_epochs(table)
    grouped = last.groupby(["lr", "depth", "model"])["test_acc"]
    frame = pd.DataFrame({"final accuracy (%)": grouped.apply(results.mean_sd), "mean": grouped.mean(),
                          "min": grouped.min(), "max": grouped.max(), "seeds": grouped.size(),
                          "diverged": last.groupby(["lr", "depth", "model"])["status"].apply(
                              lambda s: int((s == "diverged").sum()))}).reset_index()
    return frame.sort_values(["lr", "model", "depth"]).reset_index(drop=True)


# ---------------------------------------------------------------------------------------------
# figures and tables
# ---------------------------------------------------------------------------------------------
def _missing(ax, text: str) -> None:
    ax.text(0.5, 0.5, text, transform=ax.transAxes, ha="center", va="center", fontsize=10, color="0.4", wrap=True)
    # Not set_xticks([]): the panels share their y axis, and emptying one axis's ticks would empty them all.
    ax.tick_params(left=False, bottom=False, labelleft=False, labelbottom=False)
    ax.grid(False)


def _delta_note(ax, deltas: pd.Series) -> None:
    if deltas.empty:
        return
    ax.text(0.97, 0.05, f"final ViTBNFFN − ViT: {results.mean_sd(deltas)} pt\n{call(deltas)}",
            transform=ax.transAxes, ha="right", va="bottom", fontsize=9,
            bbox=dict(boxstyle="round", facecolor="white", edgecolor="0.8", alpha=0.9))


def _accuracy_grid(table: pd.DataFrame, settings: dict, spec: dict):
    """One panel per depth at ``spec['lr']``: both models' test accuracy per epoch (mean, min-max band)."""
    figures.use_style()
    lr, depths = spec["lr"], spec["depths"]
    fig, axes = plt.subplots(2, 2, figsize=(11, 7.5), sharey=True)
    legend_drawn = False
    for ax, depth in zip(axes.flat, depths):
        rows = _select(table, lr, depth)
        ax.set_title(f"depth {depth}")
        if rows.empty:
            _missing(ax, f"depth {depth} at lr {lr:g}\nnot run under profile '{settings['profile']}'")
            continue
        for model in MODELS:
            one = rows[rows["model"] == model]
            if not one.empty:
                figures.mean_band(ax, one, x="epoch", y="test_acc", label=model,
                                  color=figures.color(model), marker="o")
        _delta_note(ax, difference(table, lr, depth))
        ax.set(xlabel="epoch", ylabel="test accuracy (%)")
        figures.integer_epochs(ax)
        if not legend_drawn:  # one legend: the colours mean the same model in every panel
            ax.legend(loc="upper left", frameon=True, framealpha=0.85, edgecolor="0.8")
            legend_drawn = True
    fig.suptitle(f"Article 2 {spec['label']} · augmented MNIST, lr = {lr:g}: ViT vs ViTBNFFN at the same depth\n"
                 "mean over seeds, band = min-max")
    used = table[np.isclose(table["lr"], lr) & table["depth"].isin(depths)]
    caption = (f"Test accuracy per epoch of ViT and ViTBNFFN at equal depth d = {', '.join(map(str, depths))}, "
               f"lr {lr:g}, augmented MNIST; mean over seeds with min-max band")
    return figures.save_figure(fig, spec["name"], chapter=CHAPTER, reproduces=spec["reproduces"],
                               profile=settings["profile"], caption=caption, run_ids=used["run_id"].unique())


def figure8(table: pd.DataFrame, settings: dict):
    """Article 2's Figure 8: accuracy curves at lr 0.003, depths 4-7."""
    return _accuracy_grid(table, settings, FIG8)


def figure9(table: pd.DataFrame, settings: dict):
    """Article 2's Figure 9: accuracy curves at lr 0.005, depths 1-4."""
    return _accuracy_grid(table, settings, FIG9)


def _verdict_table(table: pd.DataFrame, settings: dict, spec: dict):
    frame = verdicts(table, spec["lr"], spec["depths"])
    used = table[np.isclose(table["lr"], spec["lr"]) & table["depth"].isin(spec["depths"])]
    return figures.save_table(frame, f"{spec['name']}_vs_article", chapter=CHAPTER, reproduces=spec["reproduces"],
                              profile=settings["profile"], caption=_statement(frame, f"{spec['label']} (lr {spec['lr']:g})"),
                              run_ids=used["run_id"].unique())


def figure8_verdicts(table: pd.DataFrame, settings: dict):
    """Fig 8's depths: this run's final accuracies and call beside the article's finding (saved)."""
    return _verdict_table(table, settings, FIG8)


def figure9_verdicts(table: pd.DataFrame, settings: dict):
    """Fig 9's depths: this run's final accuracies and call beside the article's finding (saved)."""
    return _verdict_table(table, settings, FIG9)


def figure10(table: pd.DataFrame, settings: dict):
    """Article 2's Figure 10: rows = depth 2, 3, 4; columns = model; each panel both lrs."""
    figures.use_style()
    depths, lrs = FIG10["depths"], FIG10["lrs"]
    styles = {lrs[0]: ("-", "o", 0.0), lrs[1]: ("--", "s", 0.4)}
    fig, axes = plt.subplots(len(depths), len(MODELS), figsize=(11, 3.2 * len(depths)), sharey=True, squeeze=False)
    for row, depth in enumerate(depths):
        for col, model in enumerate(MODELS):
            ax = axes[row, col]
            ax.set_title(f"{model}_d{depth}")
            plotted = []
            for lr in lrs:
                one = _select(table, lr, depth, model)
                if one.empty:
                    continue
                linestyle, marker, dark = styles[lr]
                figures.mean_band(ax, one, x="epoch", y="test_acc", label=f"lr = {lr:g}",
                                  color=figures.darker(figures.color(model), dark), linestyle=linestyle, marker=marker)
                plotted.append(lr)
            if not plotted:
                _missing(ax, f"{model} at depth {depth}\nnot run under profile '{settings['profile']}'")
                continue
            if len(plotted) == 2:
                drop = (final_accuracy(table, lrs[0], depth, model) - final_accuracy(table, lrs[1], depth, model)).dropna()
                ax.text(0.97, 0.05, f"final accuracy drop\nlr {lrs[0]:g} → {lrs[1]:g}: {results.mean_sd(drop)} pt",
                        transform=ax.transAxes, ha="right", va="bottom", fontsize=9,
                        bbox=dict(boxstyle="round", facecolor="white", edgecolor="0.8", alpha=0.9))
            ax.set(xlabel="epoch" if row == len(depths) - 1 else "", ylabel="test accuracy (%)" if col == 0 else "")
            figures.integer_epochs(ax)
            ax.legend(loc="upper left", frameon=True, framealpha=0.85, edgecolor="0.8")
    fig.suptitle("Article 2 Fig 10 · augmented MNIST: each model at lr 0.003 and 0.005\n"
                 "rows = depth 2, 3, 4 (same depth for both models); mean over seeds, band = min-max")
    used = table[table["depth"].isin(depths) & table["lr"].apply(lambda v: any(np.isclose(v, lrs)))]
    caption = ("Test accuracy per epoch of ViT (left) and ViTBNFFN (right) at lr 0.003 (solid) and 0.005 (dashed), "
               "depths 2, 3, 4; mean over seeds with min-max band")
    return figures.save_figure(fig, FIG10["name"], chapter=CHAPTER, reproduces=FIG10["reproduces"],
                               profile=settings["profile"], caption=caption, run_ids=used["run_id"].unique())


def figure10_verdicts(table: pd.DataFrame, settings: dict):
    """Fig 10's depths: each model's accuracy at both lrs, the drop, and who is hit less, beside the article."""
    frame = lr_effect(table)
    judged = frame[frame["agrees"].isin(["yes", "no"])]
    agree = judged.loc[judged["agrees"] == "yes", "depth"].tolist()
    caption = (f"Fig 10 (lr 0.003 → 0.005; article 2: the higher lr costs ViTBNFFN less than ViT from d = 3): "
               f"this run agrees at {len(agree)}/{len(judged)} depths{' (d = ' + ', '.join(map(str, agree)) + ')' if agree else ''}; "
               "'drop' = final accuracy at lr 0.003 minus at lr 0.005, paired by seed")
    used = table[table["depth"].isin(FIG10["depths"])]
    return figures.save_table(frame, f"{FIG10['name']}_vs_article", chapter=CHAPTER, reproduces=FIG10["reproduces"],
                              profile=settings["profile"], caption=caption, run_ids=used["run_id"].unique())


def depth_summary_figure(table: pd.DataFrame, settings: dict):
    """The book's summary: final accuracy vs depth, per model, one panel per lr (mean, min-max error bars)."""
    figures.use_style()
    frame = summary(table)
    lrs = sorted(frame["lr"].unique())
    fig, axes = plt.subplots(1, len(lrs), figsize=(5.5 * len(lrs), 4.2), sharey=True, squeeze=False)
    for ax, lr in zip(axes.flat, lrs):
        at_lr = frame[np.isclose(frame["lr"], lr)]
        for offset, model in zip((-0.06, 0.06), MODELS):
            one = at_lr[at_lr["model"] == model].sort_values("depth")
            ax.errorbar(one["depth"] + offset, one["mean"], yerr=[one["mean"] - one["min"], one["max"] - one["mean"]],
                        color=figures.color(model), marker="o", capsize=3, label=model)
        ax.set(title=f"lr = {lr:g}", xlabel="depth (encoder blocks, same for both models)",
               ylabel="final test accuracy (%)")
        figures.integer_epochs(ax)
        ax.legend()
    epochs = int(table["epoch"].max())
    fig.suptitle(f"Depth study summary · augmented MNIST, accuracy after {epochs} epochs\n"
                 "mean over seeds, bars = min-max")
    caption = (f"Final test accuracy (epoch {epochs}) of ViT and ViTBNFFN at equal depth, per lr; "
               "mean over seeds with min-max bars")
    return figures.save_figure(fig, "new_depth_summary", chapter=CHAPTER, reproduces="new/depth_summary",
                               profile=settings["profile"], caption=caption, run_ids=table["run_id"].unique())


def depth_summary_table(table: pd.DataFrame, settings: dict):
    """The summary's numbers, with ViTBNFFN − ViT and our call per lr and depth, saved."""
    frame = summary(table)
    wide = frame.pivot_table(index=["lr", "depth"], columns="model", values="final accuracy (%)", aggfunc="first")
    wide = wide.reindex(columns=[m for m in MODELS if m in wide.columns]).reset_index()
    wide.columns.name = None
    wide = wide.rename(columns={m: f"{m} (%)" for m in MODELS})
    wide["ViTBNFFN − ViT (pt)"] = [results.mean_sd(difference(table, lr, d)) for lr, d in zip(wide["lr"], wide["depth"])]
    wide["this run"] = [call(difference(table, lr, d)) for lr, d in zip(wide["lr"], wide["depth"])]
    parts = []
    for lr, rows in wide.groupby("lr"):
        better = rows.loc[rows["this run"] == "ViTBNFFN better", "depth"].tolist()
        parts.append(f"lr {lr:g}: at d = {', '.join(map(str, better))}" if better else f"lr {lr:g}: at no depth")
    caption = ("ViTBNFFN better than ViT in this run -- " + "; ".join(parts) +
               " (article 2: clearly better from d = 6 at lr 0.003 and from d = 4 at lr 0.005)")
    wide["lr"] = wide["lr"].map(lambda lr: f"{lr:g}")
    return figures.save_table(wide, "new_depth_summary_table", chapter=CHAPTER, reproduces="new/depth_summary",
                              profile=settings["profile"], caption=caption, run_ids=table["run_id"].unique())
