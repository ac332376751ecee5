"""README.md's results are written from figures/, and a test fails when the two disagree."""

import shutil
from pathlib import Path

import pandas as pd
import pytest

from vitbn_nb import readme

ROOT = Path(__file__).resolve().parent.parent
FIGURES = ROOT / "figures"


def test_readme_agrees_with_the_committed_figures():
    text = (ROOT / "README.md").read_text()
    assert readme.render(text, FIGURES) == text, (
        "README.md's results differ from figures/: run `python -m vitbn_nb readme` and commit both"
    )


def test_every_result_line_is_computed_from_an_output(tmp_path):
    results = readme.results_block(FIGURES)
    # the provenance line names the profile the manifest records, and the table has its claims
    assert "figures/manifest.json" in results and "| claim | this run | reproduced? |" in results
    assert "as article 1 ran it" in results and "as article 1 wrote it" in results


def test_a_changed_output_changes_the_readme(tmp_path):
    copy = tmp_path / "figures"
    shutil.copytree(FIGURES, copy)
    text = readme.render((ROOT / "README.md").read_text(), copy)
    table = pd.read_csv(copy / "article1_table1.csv", dtype=str, keep_default_na=False)
    column = next(c for c in table.columns if c.startswith("r_t as run"))
    table[column] = "7.77"
    table.to_csv(copy / "article1_table1.csv", index=False)
    changed = readme.render(text, copy)
    assert changed != text and "r_t 7.8" in changed


def test_an_empty_figures_folder_says_so(tmp_path):
    assert "no manifest yet" in readme.results_block(tmp_path)
    assert "has not written" in readme.performance_block(tmp_path)


def test_a_readme_without_markers_is_refused_by_name(tmp_path):
    with pytest.raises(ValueError, match="lacks the results markers"):
        readme.render("# a README\n", FIGURES)


def test_update_writes_only_when_something_changed(tmp_path):
    target = tmp_path / "README.md"
    target.write_text((ROOT / "README.md").read_text())
    assert readme.update(target, FIGURES) is False
    target.write_text("x\n" + "\n".join(f"{start}\nstale\n{end}" for start, end in map(readme._markers, readme.BLOCKS)))
    assert readme.update(target, FIGURES) is True and "stale" not in target.read_text()
