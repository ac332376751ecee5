"""Chapter 08's accounting: the published speed-up decomposed into depth, normalisation and data pipeline, the
three forms of BatchNorm on tokens and utilisation; views of :class:`.speed.SpeedResult`. Every "faster", "slower"
or "as fast" is the book's rule applied to interleaved rounds of timings (:func:`vitbn_nb.verdicts.speed_ratio`)."""

from __future__ import annotations

import pandas as pd
from IPython.display import Markdown

from .. import articles, figures, verdicts
from .speed import (
    BN_MODELS,
    PIPELINE_LABELS,
    TIMED,
    SpeedResult,
    equal_depth_speed,
    name,
    pct,
    ratio_text,
    seconds_per_image,
    share,
)


# ---------------------------------------------------------------------------------------------
# the accounting
# ---------------------------------------------------------------------------------------------
def _published(kind: str, model: str) -> str:
    values = articles.ARTICLE1_RATIOS[kind][model]
    low, high = min(values), max(values)
    return f"{low:.1f}–{high:.1f} (g {100 * (1 - 1 / low):.0f}–{100 * (1 - 1 / high):.0f} %)"


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
                # "faster", "slower" or "as fast" at equal depth, by the rule (never read off one median)
                "judged_depth1": equal_depth_speed(result, kind, model, 1),
                "judged_depth6": equal_depth_speed(result, kind, model, 6),
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
        row(
            f"normalisation at depth 1: T(ViT d1) / T({model} d1), by the rule",
            lambda n, k: verdicts.speed_text(n["judged_depth1"]),
        )
        row(
            f"normalisation at depth 6: T(ViT d6) / T({model} d6), by the rule",
            lambda n, k: verdicts.speed_text(n["judged_depth6"]),
        )
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
    depth, judged = n["depth"], n["judged_depth1"].outcome
    if depth > 1 and judged == verdicts.AGREES:
        return (
            f"In log terms depth explains {pct(n['depth_share'])} of it and the normalisation {pct(n['norm_share'])}."
        )
    if depth > 1 and judged in (verdicts.NOISE, verdicts.NOT_JUDGED):
        return (
            f"So depth explains all of it that the timings can resolve: at equal depth 1 {model} and ViT differ "
            "by no more than the rounds' noise."
        )
    if depth > 1:
        return (
            f"So depth explains all of it and more: at equal depth {model} is slower than ViT, which takes "
            "back part of what depth gave."
        )
    if judged == verdicts.AGREES:
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
            parts.append(
                f"**{model}** as article 1 ran it: r = {n['published_engine']:.2f} with the book's engine "
                f"({n['published_reference']:.2f} through article 1's pipeline; article 1: {_published(kind, model)}). "
                f"Depth alone (ViT with 6 blocks against 1) gives r = {n['depth']:.2f}; {model} against ViT at "
                f"equal depth 1: {verdicts.speed_text(n['judged_depth1'])}; at equal depth 6: "
                f"{verdicts.speed_text(n['judged_depth6'])}. " + _attribution(n, model)
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
        "; ".join(f"{r['model']}: {r['folded_over_unfolded_rule']}" for r in folding) if folding else "not measured"
    )

    def judged(key: str, kind: str) -> str:
        return "; ".join(f"{m}: {verdicts.speed_text(numbers[(m, kind)][key])}" for m in BN_MODELS)

    lines = [
        f"- **Depth (the early return).** Article 1's BatchNorm models computed one block instead of six, and on "
        f"{result.bench.hardware_label} one block instead of six makes the model {depth['training']:.2f}× as fast "
        f"to train and {depth['inference']:.2f}× as fast at inference (ViT d6 against ViT d1).",
        f"- **Normalisation at equal depth, as article 1 wrote it.** At depth 6, each BatchNorm model against ViT "
        f"(T(ViT d6) / T(model d6), by the rule), training: {judged('judged_depth6', 'training')}; inference: "
        f"{judged('judged_depth6', 'inference')}.",
        f"- **Normalisation at depth 1.** With one block each, training: {judged('judged_depth1', 'training')}; "
        f"inference: {judged('judged_depth1', 'inference')}.",
        f"- **The data pipeline.** Article 1's pipeline (DataLoader over ToTensor MNIST, .item() per step, a "
        f"per-sample test loop) multiplies the as-run ratios by {span('pipeline_factor', 'training')} (training) "
        f"and {span('pipeline_factor', 'inference')} (inference) against the book's engine: a cost every model "
        f"pays alike can only pull a ratio towards 1.",
        f"- **Folding BatchNorm into its Linear (inference only).** At depth 6, folded against unfolded, by the "
        f"rule: {fold_text}; no LayerNorm can fold.",
    ]
    return Markdown("\n".join(lines))


def article_reported() -> pd.DataFrame:
    """What article 1 reports, ratio by ratio."""
    where = ("lr 0.0005 (text, Fig 3)", "lr 0.005 (text, Fig 4)", "lr 0.01 (text, Fig 5)", "optimised (text, Fig 8)")
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
# BatchNorm forms, utilisation
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
    wins, behind = 0, []
    for (mode, dim), group in frame.groupby(["mode", "dim"], sort=False):
        fastest = group.loc[group["microseconds"].idxmin()]
        mine = float(group.loc[group["form"] == flat, "microseconds"].iloc[0])
        if fastest["form"] == flat:
            wins += 1
        else:
            behind.append(
                f"{mode} at d = {dim}: {fastest['form']} takes {100 * (1 - fastest['microseconds'] / mine):.0f} % "
                "less time"
            )
    cases = wins + len(behind)
    # medians of blocks timed one form after another, not interleaved rounds: shown, not judged by the rule
    text = (
        f"By the median time per call (blocks timed one form after another, so no verdict by the book's rule), the "
        f"flattened form, which the book's models use, is the fastest in {wins} of the {cases} cases measured"
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


# ---------------------------------------------------------------------------------------------
# beyond this machine: operations dispatched per step
# ---------------------------------------------------------------------------------------------
def _ops(result: SpeedResult, model: str, depth: int) -> dict:
    frame = result.op_counts
    return frame[(frame["model"] == model) & (frame["depth"] == depth)].iloc[0].to_dict()


def op_counts(result: SpeedResult) -> pd.DataFrame:
    """Per model and depth: operations dispatched by one training step and one inference pass, and the FLOPs."""
    rows = []
    for r in result.op_counts.to_dict("records"):
        rows.append(
            {
                "model": name(r["model"], r["depth"]),
                "training step: forward and backward": r["train_forward_backward_ops"],
                "training step: Adam (foreach)": r["train_optimizer_ops"],
                "training step: all": r["train_step_ops"],
                "inference pass": r["inference_ops"],
                "inference pass, BatchNorm folded": r["inference_ops_folded"] if r["model"] != "ViT" else "",
                "GFLOP per training step": round(r["train_step_flops"] / 1e9, 2),
                "GFLOP per inference pass": round(r["inference_flops"] / 1e9, 2),
            }
        )
    return pd.DataFrame(rows)


def op_counts_table(result: SpeedResult):
    """``new/op_counts``: the machine-independent operation counts behind a launch-bound GPU's time."""
    return figures.save_table(
        op_counts(result),
        "new_op_counts",
        result,
        reproduces="new/op_counts",
        caption=f"Operations (non-view ATen operations, each at least one kernel on a GPU) dispatched by one "
        f"training step at batch {result.settings.batch_size} and one inference pass, per model and depth, counted "
        "on the CPU under a dispatch mode with Adam's multi-tensor update (a GPU's default); the same on any "
        "device, unlike every timing in this chapter",
        reads="fresh models, operations counted by vitbn_nb.bench.op_counts as the chapter ran",
    )


def op_counts_statement(result: SpeedResult) -> Markdown:
    """What a GPU whose time follows the operation count would show, computed from the counts."""
    ops = lambda model, depth, key: _ops(result, model, depth)[key]
    depth = lambda key: ops("ViT", 6, key) / ops("ViT", 1, key)
    lines = []
    for kind, key, flops in (
        ("training", "train_step_ops", "train_step_flops"),
        ("inference", "inference_ops", "inference_flops"),
    ):
        as_run = "; ".join(
            f"{m} {ops('ViT', 6, key) / ops(m, 1, key):.2f}× (FLOPs {ops('ViT', 6, flops) / ops(m, 1, flops):.2f}×)"
            for m in BN_MODELS
        )
        equal = "; ".join(
            f"{m} {ops('ViT', 6, key) / ops(m, 6, key):.2f}× (FLOPs {ops('ViT', 6, flops) / ops(m, 6, flops):.2f}×)"
            for m in BN_MODELS
        )
        lines.append(
            f"- **{kind.capitalize()}.** As article 1 ran it (ViT d6 against each BatchNorm model at d1): {as_run}; "
            f"article 1 reports {'; '.join(f'{m} {_published(kind, m)}' for m in BN_MODELS)}. At equal depth 6: "
            f"{equal}."
        )
    folded = "; ".join(
        f"{m} {ops('ViT', 6, 'inference_ops') / ops(m, 6, 'inference_ops_folded'):.2f}×" for m in BN_MODELS
    )
    lines.append(
        f"- **Folded BatchNorm at inference, depth 6**, against ViT: {folded}: folding removes operations that a "
        "LayerNorm, computed from each token, must keep."
    )
    return Markdown(
        "If a GPU's time followed the operation count (small models on a fast GPU, where launching a kernel costs "
        "more than running it), T(ViT) / T(model) would be the ratio of the counts:\n\n"
        + "\n".join(lines)
        + f"\n- **Depth alone** (ViT d6 against ViT d1): {depth('train_step_ops'):.2f}× (training), "
        f"{depth('inference_ops'):.2f}× (inference)."
        + f"\n\nThe timings above come from **{result.bench.hardware_label}**; these counts are the same on any "
        "device."
    )
