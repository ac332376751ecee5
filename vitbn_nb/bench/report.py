"""The bench's result as DataFrames, the ratios judged by the book's rule, the printed report and the JSON file."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import math
from pathlib import Path

import pandas as pd

from .. import atomic
from ..judging import verdicts
from ..judging.selection import select
from ..models import AS_RUN_DEPTH
from ..paths import book_figures_dir, project_root
from ..profiles import PROFILE_SIZE


@dataclasses.dataclass
class BenchResult:
    """Every measurement of one bench run: one DataFrame per kind, and where and how it was taken (``meta``)."""

    meta: dict
    training: pd.DataFrame
    inference: pd.DataFrame
    norm_forms: pd.DataFrame

    def __post_init__(self):
        for frame in (self.training, self.inference):
            for flag in ("folded", "norms_removed"):  # a row may lack them (a training row is never folded)
                frame[flag] = frame[flag].fillna(False).astype(bool) if flag in frame else False

    def row(self, kind: str, **where) -> dict:
        """The ``kind`` ("training" | "inference") row matching ``where`` (inference: unfolded, with its norms)."""
        frame = self.training if kind == "training" else self.inference
        if kind != "training":
            where = {"folded": False, "norms_removed": False, **where}
        if (chosen := select(frame, **where)).empty:
            raise ValueError(
                f"the bench holds no {kind} row for {where}; measure with depths 1 and 6 and all three models"
            )
        return chosen.iloc[0].to_dict()

    def speed(self, kind: str, where: dict, baseline: dict) -> verdicts.Verdict:
        """``where``'s throughput against ``baseline``'s (× 1 = as fast), judged by the book's rule from the rounds
        in which the two were timed back to back (:func:`vitbn_nb.judging.verdicts.speed_ratio`)."""
        return verdicts.speed_ratio(
            f"{kind}: {_where(where)} against {_where(baseline)}",
            self.rounds(kind, **where),
            self.rounds(kind, **baseline),
            scale=self.hardware_label,
        )

    def against_vit(self, kind: str, model: str, depth: int, vit_depth=None, pipeline="engine") -> verdicts.Verdict:
        """``model`` at ``depth`` against ViT at ``vit_depth`` (by default the same depth) through ``pipeline``."""
        at = lambda m, d: dict(model=m, depth=d, pipeline=pipeline)
        return self.speed(kind, at(model, depth), at("ViT", depth if vit_depth is None else vit_depth))

    def rounds(self, kind: str, **where) -> list[float]:
        """``where``'s images/s in each interleaved round (every configuration of a kind was timed in the same
        rounds, so round i of one pairs with round i of another)."""
        return [float(v) for v in self.row(kind, **where)["images_per_s_repeats"]]

    def speed_of_ratios(self, kind: str, pairs: tuple, baseline_pairs: tuple) -> verdicts.Verdict:
        """A ratio of two speed ratios, round by round ``(where / against) / (where' / against')`` for ``pairs`` =
        (where, against) and ``baseline_pairs`` = (where', against'): a busy spell cancels in it as in a plain ratio."""

        def per_round(a: dict, b: dict) -> list[float]:
            first, second = self.rounds(kind, **a), self.rounds(kind, **b)
            if len(first) != len(second):
                raise ValueError(
                    f"{kind}: {_where(a)} has {len(first)} rounds and {_where(b)} {len(second)}; "
                    "the rounds must pair up"
                )
            return [x / y for x, y in zip(first, second)]

        return verdicts.speed_ratio(
            f"{kind}: ({_where(pairs[0])} against {_where(pairs[1])}) against "
            f"({_where(baseline_pairs[0])} against {_where(baseline_pairs[1])})",
            per_round(*pairs),
            per_round(*baseline_pairs),
            scale=self.hardware_label,
        )

    @property
    def hardware_label(self) -> str:
        return self.meta["hardware_label"]

    @property
    def ratios(self) -> pd.DataFrame:
        """Per model and depth: engine / reference throughput for training and evaluation, and the ceiling a
        pipeline alone could reach (the reference's total time over its compute time)."""
        rows = []
        rule = lambda kind, key: verdicts.speed_text(
            self.speed(kind, dict(pipeline="engine", **key), dict(pipeline="reference", **key))
        )
        for train_ref in self.training[self.training["pipeline"] == "reference"].to_dict("records"):
            key = dict(model=train_ref["model"], depth=train_ref["depth"])
            train_eng = self.row("training", pipeline="engine", **key)
            eval_ref, eval_eng = (self.row("inference", pipeline=p, **key) for p in ("reference", "engine"))
            rows.append(
                {
                    **key,
                    "as_run": train_ref["as_run"],
                    "train_engine_over_reference": ratio(train_eng["images_per_s"], train_ref["images_per_s"]),
                    "train_engine_over_reference_rule": rule("training", key),
                    "train_ceiling_without_data": ratio(train_ref["step_seconds"], train_ref["compute_seconds"]),
                    "eval_engine_over_reference": ratio(eval_eng["images_per_s"], eval_ref["images_per_s"]),
                    "eval_engine_over_reference_rule": rule("inference", key),
                    "eval_ceiling_without_data_and_loop": ratio(eval_ref["batch_seconds"], eval_ref["forward_seconds"]),
                }
            )
        return pd.DataFrame(rows)

    @property
    def folding(self) -> pd.DataFrame:
        """Per BatchNorm model and depth: folded / unfolded inference throughput, and each against the LayerNorm ViT."""
        rows = []
        rule = lambda where, baseline: verdicts.speed_text(self.speed("inference", where, baseline))
        for folded in self.inference[self.inference["folded"]].to_dict("records"):
            key = dict(model=folded["model"], depth=folded["depth"], pipeline="engine")
            vit_key = dict(pipeline="engine", model="ViT", depth=folded["depth"])
            plain, vit = self.row("inference", **key), self.row("inference", **vit_key)
            free = self.row("inference", norms_removed=True, **vit_key)
            rows.append(
                {
                    "model": key["model"],
                    "depth": key["depth"],
                    "folded_images_per_s": folded["images_per_s"],
                    "unfolded_images_per_s": plain["images_per_s"],
                    "folded_over_unfolded": ratio(folded["images_per_s"], plain["images_per_s"]),
                    "folded_over_unfolded_rule": rule(dict(folded=True, **key), key),
                    "vit_images_per_s": vit["images_per_s"],
                    "unfolded_over_vit": ratio(plain["images_per_s"], vit["images_per_s"]),
                    "unfolded_over_vit_rule": rule(key, vit_key),
                    "folded_over_vit": ratio(folded["images_per_s"], vit["images_per_s"]),
                    "folded_over_vit_rule": rule(dict(folded=True, **key), vit_key),
                    "vit_without_layernorm_images_per_s": free["images_per_s"],
                    "vit_without_layernorm_over_vit_rule": rule(dict(norms_removed=True, **vit_key), vit_key),
                    "vit_layernorm_share": 1 - ratio(vit["images_per_s"], free["images_per_s"]),
                    "max_abs_logit_difference": folded["max_abs_logit_difference"],
                }
            )
        return pd.DataFrame(rows)

    def to_dict(self) -> dict:
        """The JSON layout of ``figures/bench.json``: ``meta``'s keys, then one list of records per kind."""
        kinds = ("training", "inference", "norm_forms", "ratios", "folding")
        return {**self.meta, **{kind: getattr(self, kind).to_dict("records") for kind in kinds}}

    @classmethod
    def from_dict(cls, found: dict) -> BenchResult:
        # derived tables are recomputed, not read (an older file's "targets" and "compile" too: no longer measured)
        kinds = ("training", "inference", "norm_forms", "compile", "ratios", "folding", "targets")
        meta = {k: v for k, v in found.items() if k not in kinds}
        return cls(meta, *(pd.DataFrame(found.get(kind) or []) for kind in kinds[:3]))


def _where(where: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in where.items())


def ratio(a, b) -> float:
    return a / b if a and b and math.isfinite(a) and math.isfinite(b) else float("nan")


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


def _finite(value):
    """NaN and infinities as null, so the file is strict JSON."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    if hasattr(value, "item"):  # numpy scalars from the DataFrames
        return _finite(value.item())
    return value


def to_json(result: BenchResult) -> str:
    """The JSON text of ``figures/bench.json`` (strict: NaN and infinities as null)."""
    return json.dumps(_finite(result.to_dict()), indent=1, allow_nan=False)


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
