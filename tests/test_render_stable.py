"""A render that changes no number changes no file: an output equal to the published one keeps its manifest entry,
and its footer is read from the records (the day its runs end), not from the render."""

import json
from types import SimpleNamespace

from vitbn_nb.publishing import figures


def _published(tmp_path, monkeypatch, entry, data=b"a,b\n1,2\n"):
    published, staging = tmp_path / "figures", tmp_path / "staging"
    published.mkdir()
    staging.mkdir()
    (published / "x.csv").write_bytes(data)
    (published / "manifest.json").write_text(json.dumps({"outputs": {"x": entry}}))
    monkeypatch.setattr(figures, "book_figures_dir", lambda: published)
    monkeypatch.setenv("VITBN_FIGURES_DIR", str(staging))
    return staging


def test_an_output_equal_to_the_published_one_keeps_its_entry(tmp_path, monkeypatch):
    old = {"kind": "table", "caption": "c", "run_ids": ["r1"], "book_run": "old", "date": "2026-11-01"}
    staging = _published(tmp_path, monkeypatch, old)
    (staging / "x.csv").write_bytes(b"a,b\n1,2\n")
    new = {**old, "book_run": "new", "date": "2026-11-28", "hardware": "elsewhere"}
    assert figures._unchanged("x", [staging / "x.csv"], new) == old  # only the render's own fields differed
    (staging / "x.csv").write_bytes(b"a,b\n1,3\n")
    assert figures._unchanged("x", [staging / "x.csv"], new) == new  # a number changed: the new entry
    (staging / "x.csv").write_bytes(b"a,b\n1,2\n")
    assert figures._unchanged("x", [staging / "x.csv"], {**new, "caption": "d"}) == {**new, "caption": "d"}


def test_an_output_of_no_run_names_its_machine_and_day():
    assert figures.stamp("cpu").split(" | ")[-1] == figures.today()


def _render_no_run_figure(value: float, made_on: str, monkeypatch):
    """Draw and save a figure of no runs as a chapter does, on the day ``made_on``; its files' bytes and its entry."""
    import matplotlib.pyplot as plt

    monkeypatch.setattr(figures, "today", lambda: made_on)
    result = SimpleNamespace(chapter="02_x", profile="cpu", run_ids=[])
    figures.use_style()
    fig, ax = plt.subplots(figsize=(3, 2))
    ax.plot([0, 1], [0, value])
    figures.save_figure(fig, "x", result, reproduces="new/x", caption="a line")
    staging = figures.figures_dir()
    entry = json.loads((staging / "manifest.json").read_text())["outputs"]["x"]
    return {f: (staging / f).read_bytes() for f in ("x.png", "x.svg")}, entry


def _publish(staging, published):
    for f in staging.iterdir():
        (published / f.name).write_bytes(f.read_bytes())


def test_a_figure_of_no_run_rendered_a_day_later_is_the_same_file(tmp_path, monkeypatch):
    published, staging = tmp_path / "figures", tmp_path / "staging"
    published.mkdir()
    staging.mkdir()
    monkeypatch.setattr(figures, "book_figures_dir", lambda: published)
    monkeypatch.setenv("VITBN_FIGURES_DIR", str(staging))
    first, entry = _render_no_run_figure(1.0, "2026-11-01", monkeypatch)
    assert entry["date"] == "2026-11-01"
    _publish(staging, published)
    again, kept = _render_no_run_figure(1.0, "2026-11-02", monkeypatch)
    assert again == first and kept == entry  # the same drawing: the published bytes, date and entry
    changed, new = _render_no_run_figure(2.0, "2026-11-02", monkeypatch)
    assert changed["x.png"] != first["x.png"] and new["date"] == "2026-11-02"  # a new number: made today
    (published / "manifest.json").unlink()  # nothing published: the footer names the day, so the bytes change
    unpublished, _ = _render_no_run_figure(1.0, "2026-11-02", monkeypatch)
    assert unpublished["x.svg"] != first["x.svg"]
