"""The README's result rows, one function per finding: each reads the CSVs a complete book run wrote to
``figures/`` and returns (finding, this run, the articles) rows; nothing here is typed by hand."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd

_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def csv(folder: Path, name: str) -> pd.DataFrame | None:
    path = folder / f"{name}.csv"
    return pd.read_csv(path, dtype=str, keep_default_na=False) if path.is_file() else None


def mean(text: str) -> float:
    """The mean of a 'mean ± sd' cell (or a plain number)."""
    match = _NUMBER.search(str(text))
    return float(match.group()) if match else float("nan")


def span(values, digits: int = 1) -> str:
    values = [v for v in values if np.isfinite(v)]
    if not values:
        return "n/a"
    low, high = min(values), max(values)
    return f"{low:.{digits}f}" if f"{low:.{digits}f}" == f"{high:.{digits}f}" else f"{low:.{digits}f}–{high:.{digits}f}"


def count(verdicts, word: str = "within") -> str:
    verdicts = [v for v in verdicts if v]
    return f"{sum(v.startswith(word) for v in verdicts)}/{len(verdicts)}"


def dnn_rows(folder: Path) -> list[tuple[str, str, str]]:
    table = csv(folder, "01_dnn_final_accuracy")
    if table is None:
        return []
    column = "final test accuracy (%) this run"
    rows = []
    for lr, claim in (
        ("0.1", "BatchNorm lets a sigmoid DNN train at lr 0.1 where the plain one stalls (article 2, Fig 2)"),
        ("0.01", "BatchNorm converges faster at lr 0.01 (article 2, Fig 1)"),
    ):
        at = table[table["lr"].astype(float).round(6) == float(lr)].set_index("model")
        if not {"DNN_d3", "DNNBN_d3"} <= set(at.index):
            continue
        plain, bn = at.loc["DNN_d3", column], at.loc["DNNBN_d3", column]
        gap = mean(bn) - mean(plain)
        sds = [float(part) for cell in (plain, bn) for part in re.findall(r"± (\d+(?:\.\d+)?)", cell)]
        spread = max(sds) if sds else float("nan")
        if np.isfinite(spread):
            verdict = (
                f"yes: {gap:+.1f} points, more than twice the seeds' sd"
                if gap > 2 * spread
                else f"not clearly: {gap:+.1f} points, within twice the seeds' sd"
            )
        else:
            verdict = f"{gap:+.1f} points (one seed, no spread)"
        rows.append(
            (
                claim,
                f"DNN_d3 {plain} %, DNNBN_d3 {bn} % after {at.loc['DNN_d3', 'epochs']} epochs "
                f"({at.loc['DNN_d3', 'seeds']} seeds)",
                verdict,
            )
        )
    return rows


def table1_rows(folder: Path) -> list[tuple[str, str, str]]:
    table = csv(folder, "article1_table1")
    if table is None:
        return []
    rows = []
    reported = "BN models train 2.5–4.3× and test 2.5–2.7× faster than ViT (article 1, Table 1)"
    for which, label in (
        ("as run", "as article 1 ran it: ViT 6 blocks against BN models of 1, the early return"),
        ("as written", "as article 1 wrote it: all three at depth 6"),
    ):
        r_t = [c for c in table.columns if c.startswith(f"r_t {which}") and "verdict" not in c]
        r_v = [c for c in table.columns if c.startswith(f"r_v {which}") and "verdict" not in c]
        if not r_t or not r_v:
            continue
        verdicts = list(table[f"r_t {which}: verdict"]) + list(table[f"r_v {which}: verdict"])
        rows.append(
            (
                reported if which == "as run" else "… at the depth article 1 states (L = 6 for all three)",
                f"r_t {span(map(mean, table[r_t[0]]))}, r_v {span(map(mean, table[r_v[0]]))} ({label})",
                f"{count(verdicts)} ratios within ± 20 % of the article's",
            )
        )
    return rows


def accounting_rows(folder: Path) -> list[tuple[str, str, str]]:
    table = csv(folder, "new_speedup_accounting")
    if table is None:
        return []

    def values(prefix: str, kind: str) -> list[float]:
        return [mean(v) for v in table.loc[table["quantity"].str.startswith(prefix), kind]]

    depth_t, depth_v = values("depth:", "training"), values("depth:", "inference")
    norm_t = values("normalisation at depth 6", "training")
    norm_v = values("normalisation at depth 6", "inference")
    bn_share = max(abs(v - 1) for v in norm_t + norm_v) if norm_t + norm_v else float("nan")
    verdict = (
        "**no: depth explains it** (chapter 8)"
        if bn_share < 0.2
        else "partly: BatchNorm changes the time at equal depth (chapter 8)"
    )
    return [
        (
            "… and that gain is BatchNorm's",
            f"depth alone (ViT 6 blocks against 1): {span(depth_t, 2)}× training, {span(depth_v, 2)}× inference; "
            f"BatchNorm at equal depth 6: {span(norm_t, 2)}× training, {span(norm_v, 2)}× inference",
            verdict,
        )
    ]


def audit_rows(folder: Path) -> list[tuple[str, str, str]]:
    table = csv(folder, "new_reference_checkpoint_audit")
    if table is None:
        return []
    bn = table[table["model"] != "ViT"]
    early = bn[bn["trained"] == "1"]
    if early.empty:
        return []
    names = ", ".join(f"`{n}`" for n in early["checkpoint"])
    return [
        (
            "article 1's BatchNorm models have depth 6 (L = 6)",
            f"{names}: 1 of {early['blocks'].iloc[0]} blocks trained, blocks 2+ at their initial weights with "
            f"0 BatchNorm steps (chapter 3's audit of the reference checkpoints)",
            "no: they computed one block (the reference code's early return)",
        )
    ]


def accuracy_rows(folder: Path) -> list[tuple[str, str, str]]:
    rows = []
    compared = csv(folder, "article1_fig3_vs_article")
    if compared is not None:
        acc = compared[
            (compared["quantity"] == "final accuracy (%)") & compared["configuration"].str.contains("as run")
        ]
        if len(acc):
            rows.append(
                (
                    f"ViT / ViTBNFFN / ViTBN reach {' / '.join(acc['article 1'].str.replace('≈ ', ''))} % at "
                    "lr 0.0005 (article 1, Fig 3)",
                    " / ".join(acc["this run"]) + " % (as run)",
                    f"{count(acc['verdict'].str.replace('Δ', '').str.split('(').str[-1])} within ± 1 point",
                )
            )
    breakdown = csv(folder, "article1_fig5_vs_article")
    if breakdown is not None:
        row = breakdown[breakdown["quantity"].str.startswith("breakdown")]
        if len(row):
            rows.append(
                (
                    "ViT becomes unstable at lr 0.01 near epoch 15 (article 1, Fig 5)",
                    f"breakdown: {row['this run'].iloc[0]}",
                    row["verdict"].iloc[0],
                )
            )
    return rows


def optimised_rows(folder: Path) -> list[tuple[str, str, str]]:
    rows = []
    table2 = csv(folder, "article1_table2")
    compared = csv(folder, "article1_experiment2_vs_article")
    if table2 is not None and compared is not None:
        after = next((c for c in table2.columns if c.startswith("accuracy after")), None)
        acc = compared[compared["quantity"].str.startswith("final accuracy")]
        if after is not None and len(acc):
            trials = table2["best trial"].iloc[0].split(" of ")[-1].split(" ")[0]
            rows.append(
                (
                    "the optimised trio reaches 98.1 / 97.6 / 97.8 % after 30 epochs (article 1, text on Fig 8)",
                    f"{' / '.join(table2[after])} % ({after.replace('accuracy ', '').replace(' (%)', '')}, "
                    f"{trials} Ax trials per model)",
                    f"{count(acc['verdict'].str.replace('Δ', '').str.split('(').str[-1])} within ± 1 point",
                )
            )
    table3 = csv(folder, "article1_table3")
    if table3 is not None:
        verdicts = list(table3["r_t verdict"]) + list(table3["r_v verdict"])
        rows.append(
            (
                "the optimised BN models train 3.5–3.9× and test 2.5–2.6× faster (article 1, Table 3)",
                f"r_t {span(map(mean, table3['r_t']), 2)}, r_v {span(map(mean, table3['r_v']), 2)} "
                "(as run: BN models of one block)",
                f"{count(verdicts)} ratios within ± 20 %",
            )
        )
    return rows


def depth_rows(folder: Path) -> list[tuple[str, str, str]]:
    table = csv(folder, "article2_fig8_vs_article")
    if table is None:
        return []
    deltas = ", ".join(
        f"{float(d):+.1f} at d = {depth}" for depth, d in zip(table["depth"], table["ViTBNFFN − ViT (pt)"].map(mean))
    )
    return [
        (
            "ViTBNFFN beats ViT from depth 6 on at lr 0.003 (article 2, Fig 8)",
            f"ViTBNFFN − ViT final accuracy (points): {deltas} ({table['seeds'].iloc[0]} seed(s))",
            f"agrees at {(table['agrees'] == 'yes').sum()}/{len(table)} depths",
        )
    ]


def transfer_rows(folder: Path) -> list[tuple[str, str, str]]:
    table = csv(folder, "emnist_transfer_table")
    compared = csv(folder, "emnist_transfer_vs_article")
    if table is None or compared is None:
        return []
    speed = table.set_index("model")["speed-up vs ViT (T_ViT / T)"]
    bn = [m for m in ("ViTBNFFN", "ViTBN") if m in speed.index]
    verdicts = compared[compared["model"].isin(bn)]["verdict"]
    cnn = f"; the CNN reference {speed['CNN']}×" if "CNN" in speed.index else ""
    return [
        (
            "the BN models infer significantly faster on EMNIST digits (article 1, on the transfer article)",
            f"at equal depth 6: {', '.join(f'{m} {speed[m]}×' for m in bn)} ViT's speed{cnn} "
            "(offline stand-in for EMNIST, see chapter 6)",
            f"{sum(v.startswith('as claimed') for v in verdicts)}/{len(verdicts)} as claimed",
        )
    ]


def folding_rows(folder: Path) -> list[tuple[str, str, str]]:
    bench = bench_results(folder)
    if bench is None or not bench.get("folding"):
        return []
    ratios = [row["folded_over_unfolded"] for row in bench["folding"]]
    error = max(row["max_abs_logit_difference"] for row in bench["folding"])
    return [
        (
            "folding BatchNorm into the Linear next to it (the book's own question)",
            f"outputs equal to {error:.0e}, speed {span(ratios, 2)}× unfolded (`make bench`, {bench['date'][:10]})",
            "folding works" + (", buys nothing here" if max(ratios) < 1.1 else ""),
        )
    ]


def bench_results(folder: Path) -> dict | None:
    path = folder / "bench.json"
    return json.loads(path.read_text()) if path.is_file() else None
