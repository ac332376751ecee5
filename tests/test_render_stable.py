"""A render that changes no number changes no file: an output equal to the published one keeps its manifest entry,
and its footer is read from the records (the day its runs end), not from the render."""

import json

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
