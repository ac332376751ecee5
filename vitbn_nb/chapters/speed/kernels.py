"""Chapter 08's view of the hardware: the three forms of BatchNorm on tokens, utilisation, and the operations one
step dispatches; every "faster" or "slower" is the book's rule on interleaved rounds."""

from __future__ import annotations

import pandas as pd
from IPython.display import Markdown

from ...bench.norm_forms import FLAT
from ...judging import verdicts
from .accounting import published_ratio
from .study import BN_MODELS, PIPELINE_LABELS, SpeedResult, _save, name, pct


def flattened_against(result: SpeedResult) -> dict:
    """{(mode, dim, form): the book's flattened form against that form, by the rule}; above 1: flattened faster."""
    frame = result.bench.norm_forms
    calls_per_s = lambda row: [1e6 / m for m in row["microseconds_rounds"]]  # in each interleaved round
    judged = {}
    for (mode, dim), group in frame.groupby(["mode", "dim"], sort=False):
        rows = {r["form"]: r for r in group.to_dict("records")}
        for form, row in rows.items():
            if form != FLAT:
                judged[(mode, dim, form)] = verdicts.speed_ratio(
                    f"{mode}, d = {dim}: the flattened form against {form}",
                    calls_per_s(rows[FLAT]),
                    calls_per_s(row),
                    scale=result.bench.hardware_label,
                )
    return judged


def norm_forms(result: SpeedResult) -> pd.DataFrame:
    judged = flattened_against(result)
    frame = result.bench.norm_forms.copy()
    frame["flattened against this form, by the rule"] = [
        verdicts.speed_text(judged[(m, d, f)]) if f != FLAT else "itself"
        for m, d, f in zip(frame["mode"], frame["dim"], frame["form"])
    ]
    frame["shape"] = frame["shape"].map(lambda s: " × ".join(map(str, s)))
    shown = {"form": "form", "mode": "mode", "shape": "shape", "microseconds": "time (µs, median round)"}
    shown |= {"relative_to_fastest": "× fastest", "flattened against this form, by the rule": None}
    shown |= {"max_abs_difference": "max |difference| from flattened"}
    return frame[list(shown)].rename(columns={k: v for k, v in shown.items() if v})


def norm_forms_table(result: SpeedResult):
    """``new/batchnorm_forms``: the three ways of writing BatchNorm on tokens, timed (SPEC §5)."""
    caption = (
        "BatchNorm on (batch, tokens, features): article 1's BatchNorm1d over b d n, article 2's BatchNorm2d over b d "
        "n 1 and the book's flattened (b n) d BatchNorm1d, time per call (the median of interleaved rounds), and the "
        "flattened form against each, judged by the rule round by round"
    )
    return _save(norm_forms(result), "batchnorm_forms", result, caption)


def norm_forms_statement(result: SpeedResult) -> Markdown:
    """The flattened form (the book's) against each other form, case by case, in the rule's words."""
    judged = flattened_against(result)
    cases = {}
    for (mode, dim, form), verdict in judged.items():
        cases.setdefault((mode, dim), []).append(f"against {form}: {verdicts.speed_text(verdict)}")
    faster = sum(v.outcome == verdicts.AGREES for v in judged.values())
    slower = sum(v.outcome == verdicts.DISAGREES for v in judged.values())
    lines = [
        f"The flattened form, which the book's models use, against each other form in the same interleaved rounds "
        f"(by the book's rule, above 1: the flattened form is faster): faster in {faster}, slower in {slower} of "
        f"{len(judged)} comparisons."
    ]
    lines += [f"- {mode} at d = {dim}: " + "; ".join(parts) + "." for (mode, dim), parts in cases.items()]
    return Markdown(
        "\n".join(lines) + "\n\nThe transposed forms hand the kernel a permuted, non-contiguous view that it (or the "
        "next layer) has to copy or stride through; the flattened form reshapes a contiguous "
        "tensor without a copy. All three compute the same statistics: the last column is the "
        "largest difference in their outputs."
    )


def utilisation(result: SpeedResult) -> pd.DataFrame:
    """FLOPs per training step, achieved FLOP/s and model FLOP utilisation against the measured matmul peak."""
    return pd.DataFrame(
        {
            "configuration": name(r["model"], r["depth"]) + (" *" if r["as_run"] else ""),
            "pipeline": PIPELINE_LABELS[r["pipeline"]],
            "GFLOP per step": round(r["flops_per_step"] / 1e9, 2),
            "achieved GFLOP/s": round(r["achieved_flops"] / 1e9, 1),
            "MFU": pct(r["mfu"]),
            "MFU of the compute part": pct(r["compute_mfu"]),
            "peak memory (MiB)": round(r["peak_memory_mib"], 1),
        }
        for r in result.bench.training.to_dict("records")
    )


def op_counts(result: SpeedResult) -> pd.DataFrame:
    """Per model and depth: operations dispatched by one training step and one inference pass, and the FLOPs."""
    return pd.DataFrame(
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
        for r in result.op_counts.to_dict("records")
    )


def op_counts_table(result: SpeedResult):
    """``new/op_counts``: the machine-independent operation counts behind a launch-bound GPU's time."""
    caption = (
        f"Operations (non-view ATen operations, each at least one kernel on a GPU) dispatched by one training step at "
        f"batch {result.settings.batch_size} and one inference pass, per model and depth, counted on the CPU under a "
        "dispatch mode with Adam's multi-tensor update (a GPU's default); independent of the machine's speed, unlike "
        "every timing in this chapter, though another device may dispatch other kernels (attention, BatchNorm)"
    )
    reads = "fresh models, operations counted by vitbn_nb.bench.op_counts as the chapter ran"
    return _save(op_counts(result), "op_counts", result, caption, reads=reads, extra=None)


def op_counts_statement(result: SpeedResult) -> Markdown:
    """What a GPU whose time follows the operation count would show, computed from the counts."""
    counts = result.op_counts.set_index(["model", "depth"])
    ops = lambda model, depth, key: counts.loc[(model, depth), key]
    depth = lambda key: ops("ViT", 6, key) / ops("ViT", 1, key)
    lines = []
    for kind, key, flops in (
        ("training", "train_step_ops", "train_step_flops"),
        ("inference", "inference_ops", "inference_flops"),
    ):
        against = lambda d, key=key, flops=flops: "; ".join(
            f"{m} {ops('ViT', 6, key) / ops(m, d, key):.2f}× (FLOPs {ops('ViT', 6, flops) / ops(m, d, flops):.2f}×)"
            for m in BN_MODELS
        )
        as_run, equal = against(1), against(6)
        lines.append(
            f"- **{kind.capitalize()}.** As article 1 ran it (ViT d6 against each BatchNorm model at d1): {as_run}; "
            f"article 1 reports {'; '.join(f'{m} {published_ratio(kind, m)}' for m in BN_MODELS)}. At equal depth 6: "
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
        + f"\n\nThe timings above come from **{result.bench.hardware_label}**; these counts were taken on the CPU and "
        "do not depend on its speed, but a GPU's dispatcher may pick other kernels for attention or BatchNorm, so "
        "for a GPU they are an estimate, not a count taken there."
    )
