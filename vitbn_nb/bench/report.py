"""The bench's result as DataFrames, its ratios judged by the book's rule, and its JSON text; :mod:`.printout`
prints the report and writes the files."""

from __future__ import annotations

import dataclasses
import json
import math

import pandas as pd

from ..judging import verdicts
from ..judging.selection import select


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
