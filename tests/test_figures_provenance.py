"""Every number one hop from its source: under each saved figure and table a line names the function that drew it
and the run records it read, the manifest records the same, and the HTML book leaves papermill's cell out."""

import types

import nbformat
import pandas as pd
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from vitbn_nb import chapters
from vitbn_nb.chapters.depth_study import study as depth
from vitbn_nb.chapters.fixed_lr import study as fixed_lr
from vitbn_nb.judging import audit
from vitbn_nb.publishing import book_html, figures, results
from vitbn_nb.publishing.figures import read_manifest

DEPTH = chapters.settings("05_depth_study", "smoke")


def depth_table() -> pd.DataFrame:
    """Figure 8's runs (lr 0.003, depths 4-7, both models) and one run it does not use (lr 0.005)."""
    rows = [
        dict(run_id=f"{model}-d{d}-lr{lr}-s0", status="finished", model=model, depth=d, lr=lr, seed=0, epoch=epoch)
        for lr, depths in ((0.003, (4, 5, 6, 7)), (0.005, (1,)))
        for d in depths
        for model in ("ViT", "ViTBNFFN")
        for epoch in (1, 2)
    ]
    return pd.DataFrame(rows).assign(test_acc=90.0, train_loss=0.3, diverged=False, batch_size=100)


def test_a_result_names_its_chapter_profile_and_runs():
    result = depth.DepthResult(DEPTH, depth_table())
    assert (result.chapter, result.profile, len(result.run_ids)) == ("05_depth_study", "smoke", 10)
    assert results.ChapterResult(DEPTH).run_ids == []  # outputs drawn before any run
    assert results.run_ids_of(["b", "a", "b"]) == ["b", "a"]


def test_a_figure_names_the_function_a_chapter_calls_and_each_record_it_read(figures_store):
    table = depth_table()
    saved = depth.fig8_figure(depth.DepthResult(DEPTH, table))
    used = sorted(table.loc[table["lr"] == 0.003, "run_id"].unique())
    entry = read_manifest()["outputs"]["article2_fig8"]
    # drawn through the private depth._accuracy_grid: the line names the public function the notebook calls
    assert entry["drawn_by"] == saved.source.drawn_by == "vitbn_nb.chapters.depth_study.study.fig8_figure"
    assert entry["run_ids"] == list(saved.source.run_ids) == used  # only the runs the figure used
    line = str(saved.source)
    assert line.startswith("Drawn by `vitbn_nb.chapters.depth_study.study.fig8_figure` from 8 run records: ")
    for run_id in used:
        assert f"`figures/records/{run_id}/record.json`" in line and f"figures/records/{run_id}/record.json" in (
            saved.source._repr_html_()
        )
    assert "lr0.005" not in line
    assert saved.source._repr_html_().startswith('<details class="vitbn-source"')  # eight records fold
    # the rows it was drawn from lie beside it, linked from its line
    assert entry["data"] == "article2_fig8_data.csv" and "article2_fig8_data.csv" in entry["files"]
    rows = pd.read_csv(figures_store / "article2_fig8_data.csv")
    assert sorted(rows["run_id"].unique()) == used and len(rows) == 2 * len(used)  # one row per run and epoch
    assert line.endswith("Its data: `figures/article2_fig8_data.csv`.")
    assert "figures/article2_fig8_data.csv" in saved.source._repr_html_().split("</summary>")[0]


def test_a_table_gets_the_line_under_its_stamped_caption(figures_store):
    saved = depth.fig8_table(depth.DepthResult(DEPTH, depth_table()))
    assert "profile: smoke" in saved.output.caption
    assert (
        read_manifest()["outputs"]["article2_fig8_vs_article"]["drawn_by"]
        == "vitbn_nb.chapters.depth_study.study.fig8_table"
    )
    assert str(saved.source).startswith(
        "Drawn by `vitbn_nb.chapters.depth_study.study.fig8_table` from 8 run records: "
    )


def test_with_a_public_repository_the_records_are_links_to_it(figures_store, monkeypatch):
    from vitbn_nb import paths

    public = {"repository": "https://github.com/someone/vitbn-book", "ref": "v1.2.3"}
    monkeypatch.setattr(paths, "published_repository", lambda: public)
    result = types.SimpleNamespace(chapter="05_depth_study", profile="smoke", run_ids=["ViT-d6-s0"])
    saved = figures.save_table(pd.DataFrame({"x": [1]}), "one_run", result, reproduces="new/one", caption="c")
    url = "https://github.com/someone/vitbn-book/blob/main/figures/records/ViT-d6-s0/record.json"
    assert f"[ViT-d6-s0]({url})" in str(saved.source)
    assert f'<a href="{url}">ViT-d6-s0</a>' in saved.source._repr_html_()
    assert saved.source._repr_html_().startswith('<p class="vitbn-source"')  # one record: in the line itself
    assert (
        read_manifest()["outputs"]["one_run"]["drawn_by"]
        == f"{__name__}.{test_with_a_public_repository_the_records_are_links_to_it.__name__}"
    )


def test_an_output_of_no_runs_says_what_it_was_computed_from(figures_store):
    reference = audit.reference_audit(live=False)
    saved = fixed_lr.audit_table(reference, chapters.settings("03_fixed_lr", "smoke"))
    entry = read_manifest()["outputs"]["new_reference_checkpoint_audit"]
    assert entry["chapter"] == "03_fixed_lr" and entry["run_ids"] == []
    assert (
        entry["drawn_by"] == "vitbn_nb.chapters.fixed_lr.study.audit_table"
        and "recorded_reference_audit.json" in entry["reads"]
    )
    assert str(saved.source) == (
        "Drawn by `vitbn_nb.chapters.fixed_lr.study.audit_table` from the audit recorded from the reference "
        "checkpoints (vitbn_nb/judging/recorded_reference_audit.json) (no runs)."
    )


def test_a_notebook_shows_the_output_then_its_line(figures_store, monkeypatch):
    import IPython.display

    shown = []
    monkeypatch.setattr(IPython.display, "display", lambda *objects: shown.extend(objects))
    saved = depth.fig8_figure(depth.DepthResult(DEPTH, depth_table()))
    saved._ipython_display_()
    assert shown == [saved.output, saved.source] and isinstance(saved.output, IPython.display.Image)


def test_a_result_of_unknown_settings_is_refused_by_name():
    with pytest.raises(ValueError, match="SimpleNamespace is no chapter's settings"):
        _ = results.ChapterResult(types.SimpleNamespace(profile="smoke")).chapter


def test_the_book_leaves_out_papermills_injected_cell_and_keeps_the_chapters_own(tmp_path):
    own = new_code_cell('profile = "auto"\nforce = False\ntrain = True', metadata={"tags": ["parameters"]})
    injected = new_code_cell('profile = "smoke"\nforce = False', metadata={"tags": ["injected-parameters"]})
    executed = tmp_path / "executed.ipynb"
    nbformat.write(new_notebook(cells=[own, injected, new_code_cell("1 + 1")]), executed)
    book_html.copy_chapter(executed, tmp_path / "page.ipynb")
    cells = nbformat.read(tmp_path / "page.ipynb", as_version=4).cells
    assert [c.metadata.get("tags", []) for c in cells] == [
        ["parameters"],
        ["injected-parameters", "remove-cell"],
        [],
    ]


def test_a_table_a_cell_returns_shows_no_numbered_index_but_keeps_a_named_one():
    from IPython.testing.globalipapp import start_ipython

    shell = start_ipython()
    figures.plain_tables()
    html_of = shell.display_formatter.formatters["text/html"]
    html_of.enabled = True
    numbered = html_of(pd.DataFrame({"x": [1, 2]}))
    named = html_of(pd.DataFrame({"x": [1]}, index=pd.Index(["a run"], name="run")))
    assert "<th" not in numbered.split("<tbody>")[1]  # rows start with their data
    assert "a run" in named.split("<tbody>")[1].split("</th>")[0]  # the index that says something stays


def test_every_published_figure_has_the_data_it_was_drawn_from_beside_it():
    import json

    from vitbn_nb import paths

    folder = paths.book_figures_dir()
    entries = json.loads((folder / "manifest.json").read_text())["outputs"]
    drawn = {name: e for name, e in entries.items() if e.get("kind") == "figure"}
    assert drawn, f"{folder / 'manifest.json'} lists no figure"
    lacking = sorted(name for name, e in drawn.items() if not e.get("data") or not (folder / e["data"]).is_file())
    assert lacking == [], f"figures with no data CSV beside them in {folder}: {lacking}"


def test_a_table_that_reads_the_paper_runs_at_some_rates_says_so_in_its_stamp_and_keeps_its_profile(figures_store):
    assert results.profiles_read("cpu", (0.0005, 0.005)) == "paper at lr 0.0005, 0.005; cpu elsewhere"
    assert results.profiles_read("cpu", None) == "cpu" and results.profiles_read("paper", (0.01,)) == "paper"
    result = types.SimpleNamespace(chapter="03_fixed_lr", profile="cpu", run_ids=[])
    held = results.profiles_read("cpu", (0.01,))
    saved = figures.save_table(
        pd.DataFrame({"x": [1]}), "mixed", result, profiles_read=held, reproduces="new/mixed", caption="c"
    )
    assert "(profile: paper at lr 0.01; cpu elsewhere |" in saved.output.caption
    assert read_manifest()["outputs"]["mixed"]["profile"] == "cpu"  # what the front page counts by


def test_a_time_curve_resting_on_fewer_seeds_than_its_accuracy_says_so_in_the_legend():
    """Fig 8 as written once showed ViTBN d6's epoch times from 1 of its 4 seeds (the others timed on other hosts):
    the legend, which names the time panels' curves too, says how many seeds each time curve rests on where that is
    fewer."""
    rows = [
        dict(run_id=f"{model}-s{seed}", model=model, depth=6, seed=seed, epoch=epoch, machine=machine)
        for model, machines in (("ViT", ("A", "A")), ("ViTBN", ("A", "B")))
        for seed, machine in enumerate(machines)
        for epoch in (1, 2)
    ]
    table = pd.DataFrame(rows).assign(
        status="finished", test_acc=97.0, train_loss=0.1, diverged=False, train_seconds=100.0, test_seconds=7.0
    )
    fig = figures.four_panel(table, title="t")
    (legend,) = fig.legends
    assert [text.get_text() for text in legend.get_texts()] == ["ViT", "ViTBN (times: 1 of 2 seeds)"]
    figures.plt.close(fig)


def test_four_panels_share_one_legend_below_them_that_fits_the_figure():
    """Fig 8 as written once drew its legend on the training-time panel, where its long labels spilled over the
    testing-time panel: the one legend sits under the panels, its curves one under another where side by side would
    not fit the figure's width."""
    models = ("ViT", "ViTBNFFN", "ViTBN")
    rows = [
        dict(run_id=f"{m}-s{s}", model=m, depth=6, seed=s, epoch=e, machine="A")
        for m in models
        for s in (0, 1)
        for e in (1, 2)
    ]
    table = pd.DataFrame(rows).assign(
        status="finished", test_acc=97.0, train_loss=0.1, diverged=False, train_seconds=100.0, test_seconds=7.0
    )
    for words, columns in (("", 3), (", a label long enough to crowd the figure" * 2, 1)):
        fig = figures.four_panel(table, title="t", label=lambda model, group, words=words: model + words)
        assert not any(ax.get_legend() for ax in fig.axes)
        (legend,) = fig.legends
        fig.canvas.draw()
        box = legend.get_window_extent()
        rows = {round(text.get_window_extent().y0) for text in legend.get_texts()}
        assert len(rows) == 3 // columns and box.width <= fig.bbox.width
        assert box.y1 <= min(ax.get_window_extent().y0 for ax in fig.axes)  # under every panel
        figures.plt.close(fig)
