"""What ``python -m vitbn_nb bench`` prints and writes: the report's tables as text, ``build/bench/bench-<date>.json``
and, for the book, ``figures/bench.json`` (never replaced by a smaller profile's result)."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

from .. import atomic
from ..judging import verdicts
from ..models import AS_RUN_DEPTH
from ..paths import book_figures_dir, project_root
from ..profiles import PROFILE_SIZE
from .report import BenchResult, to_json


def _label(row) -> str:
    star = "*" if row.get("as_run") else " "
    return f"{row['model']:<8} d{row['depth']}{star}"


def _section(title: str, header: str, rows) -> list[str]:
    """A table of the report: a blank line, its title, its header, then its rows."""
    return ["", title, header, *rows]


def format_report(result: BenchResult) -> str:
    """The tables ``python -m vitbn_nb bench`` prints."""
    meta, peak = result.meta, result.meta["matmul_peak"]
    records = lambda frame: frame.to_dict("records")
    lines = [
        f"hardware: {meta['hardware_label']} ({meta['device']}, {peak['threads']} threads), "
        f"torch {meta['versions'].get('torch')}, {meta['date']}, profile {meta.get('profile')}",
        f"fp32 matmul peak: {peak['flops_per_s'] / 1e9:.1f} GFLOP/s ({peak['size']}^3, median of {peak['repeats']})",
        f"memory: {meta['memory_measure']}",
        "* = article 1 as run (ViT d6; the BatchNorm models computed one block)",
    ]
    lines += _section(
        "TRAINING (images/s; per step: data + compute, ms)",
        f"{'model':<12}{'pipeline':<11}{'img/s':>9}{'data ms':>9}{'comp ms':>9}{'data %':>8}"
        f"{'GFLOP/step':>11}{'GFLOP/s':>9}{'MFU %':>7}{'mem MiB':>9}",
        (
            f"{_label(r):<12}{r['pipeline']:<11}{r['images_per_s']:>9.0f}{1e3 * r['data_seconds']:>9.1f}"
            f"{1e3 * r['compute_seconds']:>9.1f}{100 * r['data_share']:>8.1f}{r['flops_per_step'] / 1e9:>11.2f}"
            f"{r['achieved_flops'] / 1e9:>9.1f}{100 * r['mfu']:>7.1f}{r['peak_memory_mib']:>9.1f}"
            for r in records(result.training)
        ),
    )
    pipe = lambda r: r["pipeline"] + (" folded" if r["folded"] else "") + (" no norms" if r["norms_removed"] else "")
    lines += _section(
        "INFERENCE (images/s; per test batch: data + forward + bookkeeping, ms)",
        f"{'model':<12}{'pipeline':<17}{'img/s':>9}{'data ms':>10}{'fwd ms':>9}{'book ms':>9}{'data %':>8}"
        f"{'mem MiB':>9}",
        (
            f"{_label(r):<12}{pipe(r):<17}{r['images_per_s']:>9.0f}{1e3 * r['data_seconds']:>10.1f}"
            f"{1e3 * r['forward_seconds']:>9.1f}{1e3 * r['bookkeeping_seconds']:>9.1f}"
            f"{100 * r['data_share']:>8.1f}{r['peak_memory_mib']:>9.1f}"
            for r in records(result.inference)
        ),
    )
    lines += _section(
        "ENGINE / REFERENCE (x; ceiling = reference time / its compute time)",
        f"{'model':<12}{'train':>8}{'ceiling':>9}{'eval':>8}{'ceiling':>9}",
        (
            f"{_label(r):<12}{r['train_engine_over_reference']:>8.2f}{r['train_ceiling_without_data']:>9.2f}"
            f"{r['eval_engine_over_reference']:>8.2f}{r['eval_ceiling_without_data_and_loop']:>9.2f}"
            for r in records(result.ratios)
        ),
    )
    lines += _section(
        "BATCHNORM FOLDING (engine inference, images/s)",
        f"{'model':<12}{'unfolded':>10}{'folded':>10}{'x':>7}{'ViT (LN)':>10}{'ViT no LN':>11}{'max |dlogit|':>14}",
        (
            f"{_label(r):<12}{r['unfolded_images_per_s']:>10.0f}{r['folded_images_per_s']:>10.0f}"
            f"{r['folded_over_unfolded']:>7.2f}{r['vit_images_per_s']:>10.0f}"
            f"{r['vit_without_layernorm_images_per_s']:>11.0f}{r['max_abs_logit_difference']:>14.1e}"
            for r in records(result.folding)
        ),
    )
    lines += _section(
        "BATCHNORM ON TOKENS: three forms (microseconds, median)",
        f"{'form':<48}{'mode':<24}{'shape':<16}{'us':>9}{'x fastest':>10}",
        (
            f"{r['form']:<48}{r['mode']:<24}{'x'.join(map(str, r['shape'])):<16}{r['microseconds']:>9.0f}"
            f"{r['relative_to_fastest']:>10.2f}"
            for r in records(result.norm_forms)
        ),
    )
    lines += ["", "RATIOS BY THE BOOK'S RULE (interleaved rounds; 95 % interval of the per-round ratio)"]
    for r in records(result.ratios):
        for kind, column in (("training", "train"), ("inference", "eval")):
            lines.append(f"  {_label(r)} engine / reference: {kind} {r[f'{column}_engine_over_reference_rule']}")
    lines += [f"  {_label(r)} folded / unfolded: {r['folded_over_unfolded_rule']}" for r in records(result.folding)]
    for r in records(result.folding.drop_duplicates("depth")):
        lines.append(f"  ViT d{r['depth']} without its LayerNorms / ViT: {r['vit_without_layernorm_over_vit_rule']}")
    depths = sorted({r["depth"] for r in records(result.ratios)})
    if len(depths) > 1:  # depth alone, and article 1's comparison as run (the shallowest against ViT's deepest)
        low, high = depths[0], depths[-1]
        for kind in ("training", "inference"):
            vit = verdicts.speed_text(result.against_vit(kind, "ViT", low, high))
            lines.append(f"  ViT d{low} / ViT d{high} (depth alone), {kind}: {vit}")
            for model in sorted({r["model"] for r in records(result.ratios)} - {"ViT"}):
                for depth in depths:
                    judged = verdicts.speed_text(result.against_vit(kind, model, depth))
                    lines.append(f"  {model} d{depth} / ViT d{depth} (equal depth), {kind}: {judged}")
                if model in AS_RUN_DEPTH:  # article 1's models: its comparison as its code ran it
                    judged = verdicts.speed_text(result.against_vit(kind, model, low, high))
                    lines.append(f"  {model} d{low} / ViT d{high} (as article 1 ran it), {kind}: {judged}")
    return "\n".join(lines)


def write(result: BenchResult, out_dir=None, copy_to_figures: bool = True) -> list[Path]:
    """``<out_dir>/bench-<date>.json`` (default ``build/bench``) and, for the book, ``figures/bench.json``."""
    text = to_json(result)
    paths = [_dated(out_dir, "bench", "json")]
    if copy_to_figures and (why := _not_for_the_book(result.meta.get("profile"))) is not None:
        print(f"figures/bench.json left as it is: {why}")
    elif copy_to_figures:
        paths.append(book_figures_dir() / "bench.json")
    for path in paths:
        atomic.write_text(path, text)
    return paths


def _not_for_the_book(profile: str | None) -> str | None:
    """Why a result of ``profile`` must not replace the book's ``figures/bench.json`` (None: it may): the smoke
    profile's numbers mean nothing, and a smaller profile never replaces a larger one's (as with ``make book``)."""
    if profile not in PROFILE_SIZE or PROFILE_SIZE[profile] == 0:
        return f"a {profile} run's timings prove only that the code runs"
    try:
        held = json.loads((book_figures_dir() / "bench.json").read_text()).get("profile")
    except (OSError, ValueError, AttributeError):
        return None
    if PROFILE_SIZE.get(held, -1) > PROFILE_SIZE[profile]:
        return f"it holds a {held} run, larger than this {profile} one"
    return None


def write_text(text: str, out_dir=None, name: str = "calibration") -> Path:
    """``<out_dir>/<name>-<date>.txt`` (default ``build/bench``)."""
    atomic.write_text(path := _dated(out_dir, name, "txt"), text + "\n")
    return path


def _dated(out_dir, name: str, suffix: str) -> Path:
    """``<out_dir>/<name>-<date>.<suffix>`` (``out_dir`` by default ``build/bench``; atomic writes make the folder)."""
    folder = Path(out_dir) if out_dir is not None else project_root() / "build" / "bench"
    return folder / f"{name}-{dt.date.today().isoformat()}.{suffix}"
