"""Chapter 08's accounting: the published speed-up decomposed into depth, normalisation and data pipeline, the
three forms of BatchNorm on tokens, utilisation and the engine's targets; views of :class:`.speed.SpeedResult`."""

from __future__ import annotations

import math

import pandas as pd
from IPython.display import Markdown

from .. import articles, figures
from .speed import (
    BN_MODELS,
    PIPELINE_LABELS,
    TIMED,
    SpeedResult,
    name,
    pct,
    ratio_text,
    seconds_per_image,
    share,
)

#: Timings this close (relative) count as a tie: closer than a quiet machine's repeat-to-repeat spread.
TIE = 0.02


# ---------------------------------------------------------------------------------------------
# the accounting
# ---------------------------------------------------------------------------------------------
def _published(kind: str, model: str) -> str:
    values = articles.ARTICLE1_RATIOS[kind][model]
    low, high = min(values), max(values)
    return f"{low:.1f}–{high:.1f} (g {100 * (1 - 1 / low):.0f}–{100 * (1 - 1 / high):.0f} %)"


def _spread(row: dict) -> float:
    """Relative spread of a row's repeats (fastest / slowest - 1): how far apart two timings can be by chance."""
    values = row.get("images_per_s_repeats") or [row["images_per_s"]]
    return max(values) / min(values) - 1


def accounting(result: SpeedResult) -> dict:
    """The decomposition behind the accounting table, as numbers, per BatchNorm model and kind.

    r(as run) = T(ViT d6) / T(model d1) = [T(ViT d6) / T(ViT d1)] x [T(ViT d1) / T(model d1)]
                    = r(depth) x r(normalisation at depth 1), exactly, within one pipeline.
    """
    out = {}
    for model in BN_MODELS:
        for kind in ("training", "inference"):
            t = lambda m, d, p="engine", kind=kind: seconds_per_image(result, kind, m, d, p)
            published_engine = t("ViT", 6) / t(model, 1)
            published_reference = t("ViT", 6, "reference") / t(model, 1, "reference")
            depth = t("ViT", 6) / t("ViT", 1)
            norm1 = t("ViT", 1) / t(model, 1)
            norm6 = t("ViT", 6) / t(model, 6)
            vit6_ref = result.row(kind, model="ViT", depth=6, pipeline="reference")
            model1_ref = result.row(kind, model=model, depth=1, pipeline="reference")
            vit6_eng = result.row(kind, model="ViT", depth=6, pipeline="engine")
            model1_eng = result.row(kind, model=model, depth=1, pipeline="engine")
            out[(model, kind)] = {
                "published_engine": published_engine,
                "published_reference": published_reference,
                "depth": depth,
                "norm_depth1": norm1,
                "norm_depth6": norm6,
                "depth_share": share(depth, published_engine),
                "norm_share": share(norm1, published_engine),
                "pipeline_factor": published_reference / published_engine,
                "data_share_reference": (vit6_ref["data_share"], model1_ref["data_share"]),
                "data_share_engine": (vit6_eng["data_share"], model1_eng["data_share"]),
                # Below this, "faster" or "slower" at equal depth would be reading the repeats' noise.
                "tie": max(
                    TIE,
                    _spread(result.row(kind, model="ViT", depth=1, pipeline="engine")),
                    _spread(result.row(kind, model=model, depth=1, pipeline="engine")),
                ),
            }
    return out


def accounting_summary(result: SpeedResult) -> pd.DataFrame:
    numbers = accounting(result)
    rows = []
    for model in BN_MODELS:

        def row(quantity, fn, model=model):
            rows.append(
                {
                    "model": model,
                    "quantity": quantity,
                    **{kind: fn(numbers[(model, kind)], kind) for kind in ("training", "inference")},
                }
            )

        row("published r = T(ViT d6) / T(model d1) (article 1)", lambda n, k, model=model: _published(k, model))
        row(
            "as run, article 1's pipeline, this machine",
            lambda n, k: f"{n['published_reference']:.2f} (g {100 * (1 - 1 / n['published_reference']):.0f} %)",
        )
        row(
            "as run, book's engine, this machine",
            lambda n, k: f"{n['published_engine']:.2f} (g {100 * (1 - 1 / n['published_engine']):.0f} %)",
        )
        row("depth: T(ViT d6) / T(ViT d1)", lambda n, k: ratio_text(n["depth"]))
        row(f"normalisation at depth 1: T(ViT d1) / T({model} d1)", lambda n, k: ratio_text(n["norm_depth1"]))
        row(f"normalisation at depth 6: T(ViT d6) / T({model} d6)", lambda n, k: ratio_text(n["norm_depth6"]))
        row("share of ln r (engine) explained by depth", lambda n, k: pct(n["depth_share"]))
        row("share of ln r (engine) explained by normalisation", lambda n, k: pct(n["norm_share"]))
        row(
            "data loading, share of time, article 1's pipeline (ViT d6 / model d1)",
            lambda n, k: f"{pct(n['data_share_reference'][0])} / {pct(n['data_share_reference'][1])}",
        )
        row(
            "data loading, share of time, book's engine (ViT d6 / model d1)",
            lambda n, k: f"{pct(n['data_share_engine'][0])} / {pct(n['data_share_engine'][1])}",
        )
        row("pipeline: r(article 1's pipeline) / r(engine)", lambda n, k: ratio_text(n["pipeline_factor"]))
    return pd.DataFrame(rows)


def accounting_table(result: SpeedResult):
    """``new/speedup_accounting``: the published gain and how much of it depth, pipeline and normalisation explain."""
    return figures.save_table(
        accounting_summary(result),
        "new_speedup_accounting",
        result,
        reproduces="new/speedup_accounting",
        caption="The published speed-up and what explains it on this machine: r(as run) = r(depth) × "
        "r(normalisation at depth 1), exactly; shares are of ln r; the data pipeline's share of time in "
        "each pipeline",
        reads=TIMED,
        extra={"hardware_line": result.bench.hardware_label, "published": articles.ARTICLE1_RATIOS_SETUP},
    )


def _attribution(n: dict, model: str) -> str:
    depth, norm, tie = n["depth"], n["norm_depth1"], n["tie"]
    if depth > 1 and norm > 1 + tie:
        return (
            f"In log terms depth explains {pct(n['depth_share'])} of it and the normalisation {pct(n['norm_share'])}."
        )
    if depth > 1 and norm >= 1 - tie:
        return (
            f"So depth explains (nearly) all of it: at equal depth {model} and ViT are about as fast (within "
            f"the {100 * tie:.0f} % the repeats spread)."
        )
    if depth > 1:
        return (
            f"So depth explains all of it and more: at equal depth {model} is slower than ViT, which takes "
            "back part of what depth gave."
        )
    if norm > 1:
        return "Here depth bought nothing, and the whole gain is the normalisation's."
    return "Neither depth nor the normalisation made the BatchNorm model faster on this run."


def accounting_statement(result: SpeedResult) -> Markdown:
    """The chapter's answer in words, computed from this run's numbers."""
    numbers = accounting(result)
    lines = []
    for kind in ("training", "inference"):
        parts = []
        for model in BN_MODELS:
            n = numbers[(model, kind)]
            norm = n["norm_depth1"]
            tie = n["tie"]
            norm_word = "faster than" if norm > 1 + tie else "slower than" if norm < 1 - tie else "about as fast as"
            parts.append(
                f"**{model}** as article 1 ran it: r = {n['published_engine']:.2f} with the book's engine "
                f"({n['published_reference']:.2f} through article 1's pipeline; article 1: {_published(kind, model)}). "
                f"Depth alone (ViT with 6 blocks against 1) gives r = {n['depth']:.2f}; at equal depth 1 {model} is "
                f"{norm_word} ViT (r = {norm:.2f}), at equal depth 6 r = {n['norm_depth6']:.2f}. "
                + _attribution(n, model)
            )
        lines.append(f"*{kind.capitalize()}.* " + " ".join(parts))
    factors = [numbers[(m, k)]["pipeline_factor"] for m in BN_MODELS for k in ("training", "inference")]
    shares = [numbers[(m, "training")]["data_share_reference"][1] for m in BN_MODELS]
    engine_shares = [numbers[(m, "training")]["data_share_engine"][1] for m in BN_MODELS]
    if all(f < 1 for f in factors):
        effect = f"it shrinks every as-run ratio (by a factor {min(factors):.2f}–{max(factors):.2f})"
    else:
        effect = (
            f"on this run the ratios through it differ from the engine's by a factor "
            f"{min(factors):.2f}–{max(factors):.2f}; a factor above 1 cannot come from a cost that is the "
            f"same for every model, so read it as timing noise"
        )
    lines.append(
        f"*The data pipeline.* Article 1's per-sample pipeline spends {pct(min(shares))}–{pct(max(shares))} of a "
        f"depth-1 BatchNorm model's training time producing batches (the book's engine "
        f"{pct(min(engine_shares))}–{pct(max(engine_shares))}). That cost is the same for every model, so it "
        f"explains none of the published gain: it pulls every ratio towards 1; {effect}."
    )
    return Markdown("\n\n".join(lines))


def effects_statement(result: SpeedResult) -> Markdown:
    """The corrected account in one sentence per effect, computed from this run's numbers.

    Article 1's gain = its effective depth, 6 blocks against 1 (the early return of the reference code's
    BatchNorm models), times what the normalisation changes at that depth, pulled towards 1 by the data
    pipeline; at equal depth 6, as article 1 wrote it, only the normalisation (and folding) is left.
    """
    numbers = accounting(result)

    def span(key, kind):
        values = [numbers[(m, kind)][key] for m in BN_MODELS]
        return (
            f"{min(values):.2f}–{max(values):.2f}" if len(set(round(v, 2) for v in values)) > 1 else f"{values[0]:.2f}"
        )

    depth = {kind: numbers[(BN_MODELS[0], kind)]["depth"] for kind in ("training", "inference")}
    folding = [r for r in result.bench.folding.to_dict("records") if r["depth"] == 6]
    fold_text = (
        ", ".join(f"{r['model']} {r['folded_over_unfolded']:.2f}×" for r in folding) if folding else "not measured"
    )
    lines = [
        f"- **Depth (the early return).** Article 1's BatchNorm models computed one block instead of six, and on "
        f"{result.bench.hardware_label} one block instead of six makes the model {depth['training']:.2f}× as fast "
        f"to train and {depth['inference']:.2f}× as fast at inference (ViT d6 against ViT d1).",
        f"- **Normalisation at equal depth, as article 1 wrote it.** At depth 6 the BatchNorm models train "
        f"{span('norm_depth6', 'training')}× and infer {span('norm_depth6', 'inference')}× as fast as ViT "
        f"(T(ViT d6) / T(model d6); 1 = no change).",
        f"- **Normalisation at depth 1.** With one block each, the same ratio is {span('norm_depth1', 'training')}× "
        f"(training) and {span('norm_depth1', 'inference')}× (inference).",
        f"- **The data pipeline.** Article 1's pipeline (DataLoader over ToTensor MNIST, .item() per step, a "
        f"per-sample test loop) multiplies the as-run ratios by {span('pipeline_factor', 'training')} (training) "
        f"and {span('pipeline_factor', 'inference')} (inference) against the book's engine: a cost every model "
        f"pays alike can only pull a ratio towards 1.",
        f"- **Folding BatchNorm into its Linear (inference only).** At depth 6, folded ÷ unfolded throughput: "
        f"{fold_text}; no LayerNorm can fold.",
    ]
    return Markdown("\n".join(lines))


def article_reported() -> pd.DataFrame:
    """What article 1 reports, ratio by ratio."""
    where = ("lr 0.0005 (Table 1)", "lr 0.005 (Table 1)", "lr 0.01 (Table 1)", "optimised (Table 3)")
    rows = []
    for kind, short in (("training", "r_t"), ("inference", "r_v")):
        for model in BN_MODELS:
            rows.append(
                {
                    "ratio": short,
                    "model": model,
                    **dict(zip(where, articles.ARTICLE1_RATIOS[kind][model])),
                    "gain g = 1 − 1/r": f"{100 * (1 - 1 / min(articles.ARTICLE1_RATIOS[kind][model])):.0f}–"
                    f"{100 * (1 - 1 / max(articles.ARTICLE1_RATIOS[kind][model])):.0f} %",
                }
            )
    return pd.DataFrame(rows)


# ---------------------------------------------------------------------------------------------
# BatchNorm forms, utilisation, targets
# ---------------------------------------------------------------------------------------------
def norm_forms(result: SpeedResult) -> pd.DataFrame:
    frame = result.bench.norm_forms.copy()
    frame["shape"] = frame["shape"].map(lambda s: " × ".join(map(str, s)))
    frame = frame.rename(
        columns={
            "microseconds": "time (µs)",
            "relative_to_fastest": "× fastest",
            "max_abs_difference": "max |difference| from flattened",
        }
    )
    return frame[["form", "mode", "shape", "time (µs)", "× fastest", "max |difference| from flattened"]]


def norm_forms_table(result: SpeedResult):
    """``new/batchnorm_forms``: the three ways of writing BatchNorm on tokens, timed (SPEC §5)."""
    return figures.save_table(
        norm_forms(result),
        "new_batchnorm_forms",
        result,
        reproduces="new/batchnorm_forms",
        caption="BatchNorm on (batch, tokens, features): article 1's BatchNorm1d over b d n, article 2's "
        "BatchNorm2d over b d n 1 and the book's flattened (b n) d BatchNorm1d, median time per call",
        reads=TIMED,
        extra={"hardware_line": result.bench.hardware_label},
    )


def norm_forms_statement(result: SpeedResult) -> Markdown:
    """Which form was fastest where, and by how much the flattened form trails where it is not."""
    frame = result.bench.norm_forms.copy()
    flat = "BatchNorm1d over flattened (b n) d (vitbn_nb)"
    wins, ties, behind = 0, 0, []
    for (mode, dim), group in frame.groupby(["mode", "dim"], sort=False):
        fastest = group.loc[group["microseconds"].idxmin()]
        mine = float(group.loc[group["form"] == flat, "microseconds"].iloc[0])
        if fastest["form"] == flat:
            wins += 1
        elif mine <= (1 + TIE) * fastest["microseconds"]:
            ties += 1
        else:
            behind.append(
                f"{mode} at d = {dim}: {fastest['form']} is {100 * (mine / fastest['microseconds'] - 1):.0f} % faster"
            )
    cases = wins + ties + len(behind)
    text = (
        f"The flattened form, which the book's models use, is the fastest in {wins} of the {cases} cases "
        f"measured" + (f" and within {100 * TIE:.0f} % of the fastest in {ties} more" if ties else "")
    )
    text += "." if not behind else "; elsewhere it trails: " + "; ".join(behind) + "."
    return Markdown(
        text + " The transposed forms hand the kernel a permuted, non-contiguous view that it (or the "
        "next layer) has to copy or stride through; the flattened form reshapes a contiguous "
        "tensor without a copy. All three compute the same statistics: the last column is the "
        "largest difference in their outputs."
    )


def utilisation(result: SpeedResult) -> pd.DataFrame:
    """FLOPs per training step, achieved FLOP/s and model FLOP utilisation against the measured matmul peak."""
    peak = result.bench.meta["matmul_peak"]["flops_per_s"]
    rows = []
    for r in result.bench.training.to_dict("records"):
        rows.append(
            {
                "configuration": name(r["model"], r["depth"]) + (" *" if r["as_run"] else ""),
                "pipeline": PIPELINE_LABELS[r["pipeline"]],
                "GFLOP per step": round(r["flops_per_step"] / 1e9, 2),
                "achieved GFLOP/s": round(r["achieved_flops"] / 1e9, 1),
                "MFU": pct(r["mfu"]),
                "MFU of the compute part": pct(r["compute_mfu"]),
                "peak memory (MiB)": round(r["peak_memory_mib"], 1),
            }
        )
    frame = pd.DataFrame(rows)
    frame.attrs["peak"] = f"{peak / 1e9:,.1f} GFLOP/s"
    return frame


def targets(result: SpeedResult) -> pd.DataFrame:
    names = {
        "train_engine_over_reference_min": "training: engine ≥ 3× article 1's pipeline (every configuration)",
        "eval_engine_over_reference_min": "evaluation: engine ≥ 5× article 1's pipeline (every configuration)",
        "train_mfu_vit_d6": "training MFU of ViT d6 ≥ 40 % of the matmul peak",
        "folded_vitbn_over_unfolded_min": "folded ViTBN ≥ 1.2× unfolded ViTBN (same depth)",
    }
    return pd.DataFrame(
        [
            {
                "target": names.get(k, k),
                "reached": f"{t['value']:.2f}" if math.isfinite(t["value"]) else "n/a",
                "target value": t["target"],
                "met": "yes" if t["met"] else "no",
            }
            for k, t in result.bench.targets.items()
        ]
    )
