"""Chapter 08's accounting: the published speed-up decomposed into depth, normalisation and data pipeline; every
"faster" or "slower" is the book's rule on interleaved rounds."""

from __future__ import annotations

import itertools

import pandas as pd
from IPython.display import Markdown

from ...judging import verdicts
from ...judging.article1 import DEVICES, DEVICES_SHORT, RATIOS
from .study import BN_MODELS, SpeedResult, _save, pct, share

#: How article 1's ratios r = T(ViT) / T(model) of mean time per epoch were taken (the ratios, as its text gives them:
#: :data:`vitbn_nb.judging.article1.RATIOS`).
SETUP = (
    f"article 1's text on Figures 3-5 and 8 (its Tables 1 and 3 hold the gains): {DEVICES}; MNIST without "
    "augmentation, a DataLoader over ToTensor, time per epoch; all three at depth 6 as the article says, the "
    "BatchNorm models computing one block as the reference repository shows"
)


def published_ratio(kind: str, model: str) -> str:
    """Article 1's ratios r for ``model`` and ``kind`` as a range, with the gains g = 1 - 1/r they imply."""
    values = RATIOS[kind][model]
    low, high = min(values), max(values)
    return f"{low:.1f}–{high:.1f} (g {100 * (1 - 1 / low):.0f}–{100 * (1 - 1 / high):.0f} %)"


def accounting(result: SpeedResult) -> dict:
    """The decomposition behind the accounting table, per BatchNorm model and kind: r(as run) = T(ViT d6) / T(model
    d1) = r(depth) x r(normalisation at depth 1), exactly, as the means of the rounds' log ratios add up."""
    bench_ = result.bench
    at = lambda model, depth, pipeline="engine": dict(model=model, depth=depth, pipeline=pipeline)
    out = {}
    for model, kind in itertools.product(BN_MODELS, ("training", "inference")):
        # "faster", "slower" or "as fast", by the rule (never read off one median)
        judged = {
            "as_run": bench_.against_vit(kind, model, 1, 6),
            "as_run_reference": bench_.against_vit(kind, model, 1, 6, "reference"),
            "depth": bench_.against_vit(kind, "ViT", 1, 6),
            "depth1": bench_.against_vit(kind, model, 1),
            "depth6": bench_.against_vit(kind, model, 6),
            # r through article 1's pipeline over r through the engine, round by round
            "pipeline": bench_.speed_of_ratios(
                kind, (at(model, 1, "reference"), at("ViT", 6, "reference")), (at(model, 1), at("ViT", 6))
            ),
        }
        r = {key: verdict.estimate for key, verdict in judged.items()}
        share_of = lambda m, d, p, kind=kind: bench_.row(kind, model=m, depth=d, pipeline=p)["data_share"]
        out[(model, kind)] = {
            "published_engine": r["as_run"],
            "published_reference": r["as_run_reference"],
            "depth": r["depth"],
            "norm_depth1": r["depth1"],
            "norm_depth6": r["depth6"],
            "depth_share": share(r["depth"], r["as_run"]),
            "norm_share": share(r["depth1"], r["as_run"]),
            "pipeline_factor": r["pipeline"],
            "data_share_reference": (share_of("ViT", 6, "reference"), share_of(model, 1, "reference")),
            "data_share_engine": (share_of("ViT", 6, "engine"), share_of(model, 1, "engine")),
            **{f"judged_{key}": verdict for key, verdict in judged.items()},
        }
    return out


def accounting_summary(result: SpeedResult) -> pd.DataFrame:
    numbers = accounting(result)
    here = result.bench.hardware_label
    rows = []
    for model in BN_MODELS:
        speed = lambda key: lambda n, k: verdicts.speed_text(n[key])
        shares = lambda key: lambda n, k: f"{pct(n[key][0])} / {pct(n[key][1])}"
        for quantity, fn in (
            (
                f"published r = T(ViT d6) / T(model d1), article 1 ({DEVICES_SHORT})",
                lambda n, k, model=model: published_ratio(k, model),
            ),
            (f"as run, article 1's pipeline, {here}, by the rule", speed("judged_as_run_reference")),
            (f"as run, book's engine, {here}, by the rule", speed("judged_as_run")),
            ("depth: T(ViT d6) / T(ViT d1), by the rule", speed("judged_depth")),
            (f"normalisation at depth 1: T(ViT d1) / T({model} d1), by the rule", speed("judged_depth1")),
            (f"normalisation at depth 6: T(ViT d6) / T({model} d6), by the rule", speed("judged_depth6")),
            ("share of ln r (engine) explained by depth", lambda n, k: pct(n["depth_share"])),
            ("share of ln r (engine) explained by normalisation", lambda n, k: pct(n["norm_share"])),
            ("data loading, share of time, article 1's pipeline (ViT d6 / model d1)", shares("data_share_reference")),
            ("data loading, share of time, book's engine (ViT d6 / model d1)", shares("data_share_engine")),
            (
                "pipeline: r(article 1's pipeline) / r(engine), by the rule",
                lambda n, k: verdicts.factor_text(n["judged_pipeline"]),
            ),
        ):
            each = {kind: fn(numbers[(model, kind)], kind) for kind in ("training", "inference")}
            rows.append({"model": model, "quantity": quantity, **each})
    return pd.DataFrame(rows)


def accounting_table(result: SpeedResult):
    """``new/speedup_accounting``: the published gain and how much of it depth, pipeline and normalisation explain."""
    caption = (
        "The published speed-up and what explains it on this machine: r(as run) = r(depth) × r(normalisation at "
        "depth 1), exactly; shares are of ln r; the data pipeline's share of time in each pipeline"
    )
    extra = {"hardware_line": result.bench.hardware_label, "published": SETUP}
    return _save(accounting_summary(result), "speedup_accounting", result, caption, extra=extra)


def _attribution(n: dict, model: str) -> str:
    """What the rule's verdicts on depth and on the normalisation at depth 1 say about the as-run ratio."""
    deeper, judged = n["judged_depth"].outcome, n["judged_depth1"].outcome
    unresolved = (verdicts.NOISE, verdicts.NOT_JUDGED, verdicts.NOT_RUN)
    if deeper == verdicts.AGREES and judged == verdicts.AGREES:
        return (
            f"In log terms depth explains {pct(n['depth_share'])} of it and the normalisation {pct(n['norm_share'])}."
        )
    if deeper == verdicts.AGREES and judged in unresolved:
        return (
            f"So depth explains all of it that the timings can resolve: at equal depth 1 {model} and ViT differ "
            "by no more than the rounds' noise."
        )
    if deeper == verdicts.AGREES:
        return (
            f"So depth explains all of it and more: at equal depth {model} is slower than ViT, which takes "
            "back part of what depth gave."
        )
    if judged == verdicts.AGREES:
        return "Here depth bought nothing the rounds can resolve, and the gain they resolve is the normalisation's."
    return "Neither depth nor the normalisation made the BatchNorm model faster by more than the rounds' noise."


def _pipeline_effect(numbers: dict) -> str:
    """What the data pipeline did to the as-run ratios, by the rule's verdicts on r(article 1's) / r(engine)."""
    keys = [(m, k) for m in BN_MODELS for k in ("training", "inference")]
    judged = {key: numbers[key]["judged_pipeline"] for key in keys}
    each = "; ".join(f"{m} {k}: {verdicts.factor_text(judged[(m, k)])}" for m, k in keys)
    if all(v.outcome == verdicts.DISAGREES for v in judged.values()):
        return f"it shrinks every as-run ratio ({each})"
    above = [f"{m} {k}" for (m, k), v in judged.items() if v.outcome == verdicts.AGREES]
    text = f"r through it against r through the engine, by the rule: {each}"
    if above:
        text += (
            f". A factor above 1 ({', '.join(above)}) cannot come from a cost that is the same for every model: "
            "there the two pipelines' rounds were not timed alike"
        )
    return text


def _pct_span(values) -> str:
    low, high = pct(min(values)), pct(max(values))
    return low if low == high else f"{low}–{high}"


def accounting_statement(result: SpeedResult) -> Markdown:
    """The chapter's answer in words, computed from this run's numbers, each ratio in the rule's words."""
    numbers = accounting(result)
    here = result.bench.hardware_label
    lines = []
    for kind in ("training", "inference"):
        parts = []
        for model in BN_MODELS:
            n = numbers[(model, kind)]
            parts.append(
                f"**{model}** as article 1 ran it, T(ViT d6) / T({model} d1) on {here}: "
                f"{verdicts.speed_text(n['judged_as_run'])} with the book's engine "
                f"({verdicts.speed_text(n['judged_as_run_reference'])} through article 1's pipeline; article 1 "
                f"({DEVICES}): {published_ratio(kind, model)}). "
                f"Depth alone (ViT with 6 blocks against 1): "
                f"{verdicts.speed_text(n['judged_depth'])}; {model} against ViT at equal depth 1: "
                f"{verdicts.speed_text(n['judged_depth1'])}; at equal depth 6: "
                f"{verdicts.speed_text(n['judged_depth6'])}. " + _attribution(n, model)
            )
        lines.append(f"*{kind.capitalize()}.* " + " ".join(parts))
    shares = [numbers[(m, "training")]["data_share_reference"][1] for m in BN_MODELS]
    engine_shares = [numbers[(m, "training")]["data_share_engine"][1] for m in BN_MODELS]
    lines.append(
        f"*The data pipeline.* Article 1's per-sample pipeline spends {_pct_span(shares)} of a "
        f"depth-1 BatchNorm model's training time producing batches (the book's engine "
        f"{_pct_span(engine_shares)}). That cost is the same for every model, so it "
        f"explains none of the published gain: it can only pull a ratio towards 1; {_pipeline_effect(numbers)}."
    )
    return Markdown("\n\n".join(lines))


def effects_statement(result: SpeedResult) -> Markdown:
    """The corrected account, one sentence per effect (depth, normalisation, pipeline, folding), judged by the rule."""
    numbers = accounting(result)
    folding = [r for r in result.bench.folding.to_dict("records") if r["depth"] == 6]  # the accounting needs d6
    fold_text = "; ".join(f"{r['model']}: {r['folded_over_unfolded_rule']}" for r in folding)

    def judged(key: str, kind: str, words=verdicts.speed_text) -> str:
        return "; ".join(f"{m}: {words(numbers[(m, kind)][key])}" for m in BN_MODELS)

    depth = {
        kind: verdicts.speed_text(numbers[(BN_MODELS[0], kind)]["judged_depth"]) for kind in ("training", "inference")
    }
    lines = [
        f"- **Depth (the early return).** Article 1's BatchNorm models computed one block instead of six; on "
        f"{result.bench.hardware_label} ViT with one block against ViT with six, training: {depth['training']}; "
        f"inference: {depth['inference']}.",
        f"- **Normalisation at equal depth, as article 1 wrote it.** At depth 6, each BatchNorm model against ViT "
        f"(T(ViT d6) / T(model d6), by the rule), training: {judged('judged_depth6', 'training')}; inference: "
        f"{judged('judged_depth6', 'inference')}.",
        f"- **Normalisation at depth 1.** With one block each, training: {judged('judged_depth1', 'training')}; "
        f"inference: {judged('judged_depth1', 'inference')}.",
        f"- **The data pipeline.** Article 1's pipeline as its reference code runs it (train_mnist.py at 74b1791: "
        "DataLoader over ToTensor MNIST, .item() per step, a per-sample test loop) against the book's engine, the "
        "as-run ratio through it over the ratio through the engine, training: "
        f"{judged('judged_pipeline', 'training', verdicts.factor_text)}; inference: "
        f"{judged('judged_pipeline', 'inference', verdicts.factor_text)}. A cost every model pays alike can only "
        "pull a ratio towards 1.",
        f"- **Folding BatchNorm into its Linear (inference only).** At depth 6, folded against unfolded, by the "
        f"rule: {fold_text}; no LayerNorm can fold.",
    ]
    return Markdown("\n".join(lines))


def article_reported() -> pd.DataFrame:
    """What article 1 reports, ratio by ratio."""
    where = ("lr 0.0005 (text, Fig 3)", "lr 0.005 (text, Fig 4)", "lr 0.01 (text, Fig 5)", "optimised (text, Fig 8)")
    return pd.DataFrame(
        {
            "ratio": short,
            "model": model,
            **dict(zip(where, RATIOS[kind][model])),
            "gain g = 1 − 1/r": f"{100 * (1 - 1 / min(RATIOS[kind][model])):.0f}–"
            f"{100 * (1 - 1 / max(RATIOS[kind][model])):.0f} %",
        }
        for kind, short in (("training", "r_t"), ("inference", "r_v"))
        for model in BN_MODELS
    )
