"""The book runner (papermill), the staging of figures, the HTML book, and the book in a real browser.

Two books are built: a small one from throwaway chapters written here, and the real book
(every chapter of ``notebooks/`` under ``smoke``), once per session, in private folders.
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import json
import os
import re
import shutil
import threading
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from vitbn_nb.__main__ import main
from vitbn_nb.bench import op_counts
from vitbn_nb.publishing import book, book_chapters, book_html, forest
from vitbn_nb.publishing.book import BookError, build_book, discover_chapters

ROOT = Path(__file__).resolve().parent.parent
REAL_CHAPTERS = sorted((ROOT / "notebooks").glob(book_chapters.CHAPTER_PATTERN))
needs_chapters = pytest.mark.skipif(not REAL_CHAPTERS, reason="notebooks/ holds no chapters (NN_name.ipynb) yet")
#: What each chapter of SPEC §6 must regenerate (its manifest `reproduces` ids).
SPEC_OUTPUTS = {
    "01": {"article2/fig1", "article2/fig2", "article2/fig3"},
    "03": {"article1/fig3", "article1/fig4", "article1/fig5", "article1/fig6", "article1/table1"},
    "04": {"article1/table2", "article1/fig7", "article1/fig8", "article1/table3"},
    "05": {"article2/fig8", "article2/fig9", "article2/fig10"},
}
REPRODUCES = re.compile(r"^(article[12]/(fig|table)\d+\w*|new/\S+)$")


# -- throwaway chapters -----------------------------------------------------------------------


def write_chapter(path: Path, title: str, *cells, parameters: bool = True) -> Path:
    head = [new_markdown_cell(f"# {title}\n\nA throwaway chapter of the test-suite.")]
    if parameters:
        head.append(new_code_cell('profile = "auto"\nforce = False\ntrain = True', metadata={"tags": ["parameters"]}))
    nbformat.write(new_notebook(cells=head + list(cells)), path)
    return path


FIGURE_CHAPTER = [
    new_code_cell("assert profile == 'smoke' and force is False, (profile, force)"),
    new_code_cell(
        "import types\nimport matplotlib.pyplot as plt\nimport pandas as pd\nfrom vitbn_nb.publishing import figures\n"
        "result = types.SimpleNamespace(chapter='01_figure', profile=profile, run_ids=[])"
    ),
    new_code_cell(
        "fig, ax = plt.subplots(figsize=(3, 2))\nax.plot([1, 2, 3], [3, 1, 2])\n"
        "figures.save_figure(fig, 'book_test_line', result, reproduces='new/book-test-line', caption='a line')"
    ),
    new_code_cell(
        "figures.save_table(pd.DataFrame({'x': [1, 2]}), 'book_test_table', result, "
        "reproduces='new/book-test-table', caption='a table')"
    ),
]
TEXT_CHAPTER = [
    new_markdown_cell(
        "Inline $r_t = T_\\text{ViT} / T$ and a list item with display maths:\n\n"
        "1. the gain\n\n   $$g = 1 - \\frac{1}{r}$$\n\n   follows."
    ),
    # the words are joined at run time so that the cell's source never contains them
    new_code_cell("import sys\nprint('printed-to-' + 'stdout')\nprint('printed-to-' + 'stderr', file=sys.stderr)"),
]
BROKEN_CELL = new_code_cell("# the chapter breaks here\nraise ValueError('deliberate failure')")


@pytest.fixture(scope="module")
def small_chapters(tmp_path_factory):
    folder = tmp_path_factory.mktemp("chapters")
    write_chapter(folder / "01_figure.ipynb", "A figure and a table", *FIGURE_CHAPTER)
    write_chapter(folder / "02_text.ipynb", "Only text", *TEXT_CHAPTER)
    (folder / "notes.ipynb").write_text("not a chapter")  # no NN_ prefix: never run
    return folder


@pytest.fixture(scope="module")
def small_book(small_chapters, tmp_path_factory):
    base = tmp_path_factory.mktemp("small_book")
    # what an earlier run left: one output of its own, and a file that is no chapter's output
    (base / "figures").mkdir()
    (base / "figures" / "stale_output.png").write_bytes(b"old")
    (base / "figures" / "bench.json").write_text("{}")
    (base / "figures" / "manifest.json").write_text(
        json.dumps(
            {"outputs": {"stale_output": {"kind": "figure", "files": ["stale_output.png"], "chapter": "09_gone"}}}
        )
    )
    before = os.environ.get("VITBN_FIGURES_DIR")
    result = build_book(
        "smoke",
        notebooks_dir=small_chapters,
        output_dir=base / "build",
        figures_dir=base / "figures",
        runs_dir=base / "runs",
    )
    assert os.environ.get("VITBN_FIGURES_DIR") == before  # the kernels' variables were restored
    return result


def snapshot(folder: Path) -> dict:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_small_book_executes_every_chapter(small_book, small_chapters):
    assert [c.name for c in small_book.chapters] == ["01_figure", "02_text"]
    assert small_book.profile == "smoke"
    for chapter in small_book.chapters:
        assert chapter.executed == small_book.output_dir / "executed" / "smoke" / f"{chapter.name}.ipynb"
        executed = nbformat.read(chapter.executed, as_version=4)
        assert executed.metadata.papermill.parameters == {"profile": "smoke", "force": False, "train": True}
        assert not executed.metadata.papermill.get("exception")
    text = nbformat.read(small_book.chapters[1].executed, as_version=4)
    assert "printed-to-stdout" in json.dumps(text.cells[-1].outputs)


def test_small_book_manifest_entries_belong_to_this_run(small_book):
    manifest = json.loads((small_book.figures_dir / "manifest.json").read_text())
    assert set(manifest["outputs"]) == {"book_test_line", "book_test_table"}
    for name, entry in manifest["outputs"].items():
        assert entry["book_run"] == small_book.book_run, name
        assert entry["profile"] == "smoke" and entry["chapter"] == "01_figure"
        for file in entry["files"]:
            assert (small_book.figures_dir / file).stat().st_size > 0, file
    assert sorted(manifest["outputs"]["book_test_line"]["files"]) == ["book_test_line.png", "book_test_line.svg"]
    # the earlier run's output went with its manifest entry; the file no entry listed stayed
    assert not (small_book.figures_dir / "stale_output.png").exists()
    assert (small_book.figures_dir / "bench.json").read_text() == "{}"


def test_small_book_html(small_book):
    index = small_book.index_html
    assert index is not None and index.is_absolute() and index.is_file()
    html_dir = index.parent
    intro = (html_dir / "intro.html").read_text()
    assert "BatchNorm in Vision Transformers" in intro and small_book.book_run in intro
    for chapter in small_book.chapters:
        assert f'href="{chapter.name}.html"' in intro
        assert (html_dir / f"{chapter.name}.html").is_file()
    text_page = (html_dir / "02_text.html").read_text()
    assert "printed-to-stdout" in text_page
    assert "printed-to-stderr" not in text_page  # stderr (progress bars) is kept off the pages
    assert not (html_dir / "notes.html").exists()


def test_failed_run_names_chapter_and_cell_and_keeps_previous_figures(small_book, small_chapters, tmp_path):
    chapters = tmp_path / "chapters"
    chapters.mkdir()
    shutil.copy(small_chapters / "01_figure.ipynb", chapters)
    write_chapter(chapters / "02_broken.ipynb", "Broken", new_code_cell("x = 1"), BROKEN_CELL)
    figures = tmp_path / "figures"
    shutil.copytree(small_book.figures_dir, figures)
    before = snapshot(figures)

    with pytest.raises(BookError) as caught:
        build_book(
            "smoke",
            notebooks_dir=chapters,
            output_dir=tmp_path / "build",
            figures_dir=figures,
            runs_dir=tmp_path / "runs",
        )
    error = caught.value
    assert error.chapter == "02_broken" and error.cell_index == 3 and error.ename == "ValueError"
    assert "02_broken" in str(error) and "cell 3" in str(error) and "# the chapter breaks here" in str(error)
    assert "deliberate failure" in str(error)
    assert error.notebook.is_file()  # the partly executed notebook is kept for inspection
    # chapter 01 did save its figure again, but only into the staging folder
    assert snapshot(figures) == before
    staging = next((tmp_path / "build").glob("figures-staging-*"))  # the failed process's own staging folder
    staged = json.loads((staging / "manifest.json").read_text())
    assert staged["outputs"]["book_test_line"]["book_run"] != small_book.book_run


@pytest.mark.book
def test_cli_reports_a_failed_chapter(tmp_path, capsys):
    chapters = tmp_path / "chapters"
    chapters.mkdir()
    write_chapter(chapters / "01_fine.ipynb", "Fine", new_code_cell("1 + 1"))
    write_chapter(chapters / "02_broken.ipynb", "Broken", BROKEN_CELL)
    code = main(
        [
            "book",
            "--profile",
            "smoke",
            "--notebooks",
            str(chapters),
            "--chapters",
            "2",
            "--no-html",
            "--output",
            str(tmp_path / "build"),
            "--figures",
            str(tmp_path / "figures"),
            "--runs",
            str(tmp_path / "runs"),
        ]
    )
    assert code == 1
    err = capsys.readouterr().err
    assert "chapter 02_broken failed in cell 2" in err and "ValueError: deliberate failure" in err
    assert not (tmp_path / "build" / "executed" / "smoke" / "01_fine.ipynb").exists()  # not selected


def test_bad_input_is_refused_before_any_kernel_starts(tmp_path):
    with pytest.raises(ValueError, match="no chapters"):
        discover_chapters(tmp_path)
    write_chapter(tmp_path / "01_a.ipynb", "A", new_code_cell("1"))
    write_chapter(tmp_path / "02_b.ipynb", "B", new_code_cell("2"))
    assert [p.stem for p in discover_chapters(tmp_path, ["02", 1, "02_b"])] == ["01_a", "02_b"]
    with pytest.raises(ValueError, match="'07' is not a chapter"):
        discover_chapters(tmp_path, ["07"])
    with pytest.raises(ValueError, match="profile='huge'"):
        build_book("huge", notebooks_dir=tmp_path, output_dir=tmp_path / "build")
    write_chapter(tmp_path / "03_c.ipynb", "C", new_code_cell("3"), parameters=False)
    with pytest.raises(BookError, match="chapter 03_c: no cell is tagged 'parameters'"):
        build_book(
            "smoke",
            notebooks_dir=tmp_path,
            output_dir=tmp_path / "build",
            figures_dir=tmp_path / "f",
            runs_dir=tmp_path / "runs",
        )
    assert not (tmp_path / "f" / "manifest.json").exists()


@needs_chapters
def test_every_chapter_notebook_is_in_sync_with_its_py():
    import jupytext

    for notebook in REAL_CHAPTERS:
        pair = notebook.with_suffix(".py")
        cells = [(c.cell_type, c.source.strip()) for c in jupytext.read(notebook).cells]
        assert cells == [(c.cell_type, c.source.strip()) for c in jupytext.read(pair).cells], (
            f"{notebook.name} differs from {pair.name}: run `jupytext --sync {pair}`"
        )


# -- results a user cannot silently replace ------------------------------------------------------


def test_a_smoke_run_never_touches_the_books_figures(small_chapters, tmp_path):
    committed = snapshot(ROOT / "figures")
    result = build_book(
        "smoke", notebooks_dir=small_chapters, output_dir=tmp_path / "build", html=False, runs_dir=tmp_path / "runs"
    )
    assert result.figures_dir == (tmp_path / "build" / "figures-smoke").resolve()
    assert (result.figures_dir / "manifest.json").is_file()
    assert snapshot(ROOT / "figures") == committed  # figures/ is exactly as committed
    # a partial run of a larger profile goes to its own folder too
    target, why = book.publish_target("cpu", complete=False, output=tmp_path / "build")
    assert target == (tmp_path / "build" / "figures-cpu-partial").resolve() and "some chapters" in why
    target, _ = book.publish_target("cpu", complete=True, output=tmp_path / "build")
    assert target.name == "figures"


def test_a_smaller_profile_needs_a_flag_to_replace_a_larger_ones_results(small_chapters, tmp_path):
    figures = tmp_path / "figures"
    figures.mkdir()
    (figures / "manifest.json").write_text(json.dumps({"outputs": {"x": {"profile": "paper", "files": []}}}))
    before = snapshot(figures)
    with pytest.raises(BookError, match="larger profile for .*paper.*--replace-larger"):
        build_book(
            "smoke",
            notebooks_dir=small_chapters,
            output_dir=tmp_path / "build",
            figures_dir=figures,
            runs_dir=tmp_path / "runs",
            html=False,
        )
    assert snapshot(figures) == before
    result = build_book(
        "smoke",
        notebooks_dir=small_chapters,
        output_dir=tmp_path / "build",
        figures_dir=figures,
        runs_dir=tmp_path / "runs",
        html=False,
        replace_larger=True,
    )
    assert {e["profile"] for e in json.loads((figures / "manifest.json").read_text())["outputs"].values()} == {"smoke"}
    assert result.book_run


def test_a_chapter_that_mixes_scales_cannot_replace_a_larger_output_unflagged(small_chapters, tmp_path):
    # a chapter reading paper runs at one lr passes the check by chapter (as chapter 03 at lr 0.01 does); its other
    # outputs, rendered at the smaller profile, must still not replace a paper output of the same name
    figures = tmp_path / "figures"
    figures.mkdir()
    held = {"profile": "paper", "files": [], "chapter": "01_figure"}
    (figures / "manifest.json").write_text(json.dumps({"outputs": {"book_test_line": held}}))
    before = snapshot(figures)
    arguments = dict(notebooks_dir=small_chapters, output_dir=tmp_path / "build", figures_dir=figures, html=False)
    arguments["rendering"] = lambda chapter, profile: (profile, (0.01,))
    with pytest.raises(BookError, match=r"book_test_line \(paper held, smoke rendered\).*--replace-larger"):
        build_book("smoke", runs_dir=tmp_path / "runs", **arguments)
    assert snapshot(figures) == before
    build_book("smoke", runs_dir=tmp_path / "runs", replace_larger=True, **arguments)
    assert json.loads((figures / "manifest.json").read_text())["outputs"]["book_test_line"]["profile"] == "smoke"


def test_parameters_are_checked_by_name_and_type(small_chapters, tmp_path):
    chapter = small_chapters / "01_figure.ipynb"
    with pytest.raises(BookError, match="has no parameter 'epochs'"):
        book.check_parameters(chapter, {"profile": "smoke", "force": False, "epochs": 3})
    with pytest.raises(BookError, match="force='false'.*must be a bool"):
        book.check_parameters(chapter, {"profile": "smoke", "force": "false"})
    book.check_parameters(chapter, {"profile": "smoke", "force": False})
    with pytest.raises(ValueError, match="force='yes' is not allowed"):
        build_book("smoke", notebooks_dir=small_chapters, output_dir=tmp_path / "build", force="yes")


def test_a_partial_run_keeps_the_other_chapters_in_the_html_book(small_book, small_chapters, tmp_path):
    shutil.copytree(small_book.output_dir / "executed", tmp_path / "build" / "executed")
    shutil.copytree(small_book.figures_dir, tmp_path / "figures")
    partial = build_book(
        "smoke",
        notebooks_dir=small_chapters,
        output_dir=tmp_path / "build",
        figures_dir=tmp_path / "figures",
        runs_dir=tmp_path / "runs",
        chapters=["02"],
    )
    assert [c.name for c in partial.chapters] == ["02_text"] and [c.name for c in partial.others] == ["01_figure"]
    source = partial.output_dir / "book"
    assert (source / "01_figure.ipynb").is_file() and (source / "02_text.ipynb").is_file()
    toc = (source / "_toc.yml").read_text()
    assert "01_figure" in toc and "02_text" in toc
    assert "not executed by this run" in (source / "intro.md").read_text()


# -- the real book under smoke, built once per session ----------------------------------------


@pytest.fixture(scope="session")
def full_book(tmp_path_factory, request):
    if not REAL_CHAPTERS:
        pytest.skip("notebooks/ holds no chapters (NN_name.ipynb) yet")
    request.getfixturevalue("mnist_ready")
    base = tmp_path_factory.mktemp("full_book")
    return build_book(
        "smoke",
        notebooks_dir=ROOT / "notebooks",
        output_dir=base / "build",
        figures_dir=base / "figures",
        runs_dir=base / "runs",
    )


def _chapter_of(entry: dict, names: list[str]) -> str | None:
    """The executed chapter a manifest entry names (by its full name or its NN number)."""
    given = str(entry.get("chapter", ""))
    return next((n for n in names if given == n or (given[:2] == n[:2] and given[:2].isdigit())), None)


@needs_chapters
def test_full_book_executes_every_chapter(full_book):
    assert [c.name for c in full_book.chapters] == [p.stem for p in REAL_CHAPTERS]
    for chapter in full_book.chapters:
        executed = nbformat.read(chapter.executed, as_version=4)
        flags = {"measure": False} if chapter.name.startswith("08") else {}  # a flag only the chapter declaring it gets
        assert executed.metadata.papermill.parameters == {"profile": "smoke", "force": False, "train": True, **flags}
        assert not executed.metadata.papermill.get("exception"), chapter.name


@needs_chapters
def test_full_book_outputs_all_come_from_this_run(full_book):
    manifest = json.loads((full_book.figures_dir / "manifest.json").read_text())["outputs"]
    names = [c.name for c in full_book.chapters]
    assert manifest, "the book saved no figure or table"
    listed = {"manifest.json"}
    for name, entry in manifest.items():
        for key in ("chapter", "reproduces", "profile", "hardware", "date", "files"):
            assert entry.get(key), f"{name}: no {key}"
        assert entry["book_run"] == full_book.book_run, name
        assert entry["profile"] == "smoke", name
        assert REPRODUCES.match(entry["reproduces"]), f"{name}: reproduces={entry['reproduces']!r}"
        # the forest is the book's own, drawn from every chapter's claims once any carries an interval
        book_level = name == forest.NAME and entry["chapter"] == "book"
        assert book_level or _chapter_of(entry, names), f"{name}: chapter={entry['chapter']!r} is not one of {names}"
        for file in entry["files"]:
            assert (full_book.figures_dir / file).stat().st_size > 0, f"{name}: {file} is empty"
        listed.update(entry["files"])
    on_disk = {p.name for p in full_book.figures_dir.iterdir() if not p.name.startswith(".")}
    # chapter 08's operation counts: kept beside the outputs so that a render counts them once, not an output
    kept = {"records", op_counts.COUNTS_FILE}
    assert on_disk <= listed | kept, f"files no manifest entry lists: {sorted(on_disk - listed - kept)}"
    # the records behind the outputs are published with them (issue 22): one folder per run id, no weights
    records = full_book.figures_dir / "records"
    run_ids = {run_id for entry in manifest.values() for run_id in entry.get("run_ids", [])}
    assert run_ids, "no output names the runs behind it"
    for run_id in run_ids:
        assert (records / run_id / "record.json").is_file(), f"{run_id}: its record was not published"
    assert not [p for p in records.rglob("*") if p.suffix in (".pt", ".pth")], "weights were published"
    silent = [n for n in names if not any(_chapter_of(e, names) == n for e in manifest.values())]
    assert not silent, f"chapters that saved no figure or table: {silent}"


@needs_chapters
def test_full_book_reproduces_what_the_spec_lists(full_book):
    produced = {
        e["reproduces"] for e in json.loads((full_book.figures_dir / "manifest.json").read_text())["outputs"].values()
    }
    for chapter in full_book.chapters:
        missing = SPEC_OUTPUTS.get(chapter.name[:2], set()) - produced
        assert not missing, f"{chapter.name} does not regenerate {sorted(missing)} (SPEC §6)"


# -- the books in headless Chromium -----------------------------------------------------------


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@contextlib.contextmanager
def serve(folder: Path):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_QuietHandler, directory=str(folder)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


ALL_IMAGES_SETTLED = """
const images = Array.from(document.images);
images.forEach(img => { img.loading = 'eager'; });
return document.readyState !== 'loading' && images.every(img => img.complete);
"""
MATH_TYPESET = """
return window.MathJax !== undefined && MathJax.Hub !== undefined && MathJax.isReady === true
    && MathJax.Hub.queue.pending === 0 && MathJax.Hub.queue.running === 0;
"""
# maths MathJax left as text, and dollar signs that the Markdown parser did not turn into maths
UNTYPESET_MATH = """
const article = document.querySelector('article');
const raw = Array.from(article.querySelectorAll('.math.notranslate'))  // MyST's spans; MathJax adds .math of its own
    .filter(e => !e.querySelector('.MathJax, .MathJax_Display, .MathJax_Preview, script[type^="math/tex"]'))
    .map(e => e.textContent.slice(0, 60));
const dollars = Array.from(article.querySelectorAll('p, li'))
    .filter(e => !e.closest('pre, code, .output') && e.innerText.includes('$$'))
    .map(e => e.innerText.slice(0, 60));
return raw.concat(dollars);
"""
# tables wider than the text column they sit in (a reader would scroll sideways or lose the verdict column)
WIDE_TABLES = """
const column = document.querySelector('article');
const room = column.getBoundingClientRect().width;
return Array.from(column.querySelectorAll('table'))
    .map(t => [t.getBoundingClientRect().width, (t.caption ? t.caption.innerText : t.innerText).slice(0, 60)])
    .filter(([width, _]) => width > room + 1)
    .map(([width, text]) => `${Math.round(width)} px > ${Math.round(room)} px: ${text}`);
"""
# tables that show pandas' numbered index (0, 1, 2, ...) as their first column: a number that means nothing
NUMBERED_INDEX = """
return Array.from(document.querySelector('article').querySelectorAll('table'))
    .filter(t => {
        const heads = Array.from(t.querySelectorAll('tbody tr')).map(r => r.querySelector('th'));
        return heads.length > 1 && heads.every((h, i) => h && h.innerText.trim() === String(i));
    })
    .map(t => (t.caption ? t.caption.innerText : t.innerText).slice(0, 60));
"""
BROKEN_IMAGES = """
return Array.from(document.images).filter(img => !(img.naturalWidth > 0)).map(img => img.getAttribute('src'));
"""


def check_book_in_browser(driver, result) -> dict:
    """Open the landing page and every chapter; each must show its title, fit every table in its text column at
    1400 px, load every image and typeset its maths with the book's own copy of MathJax (no network)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    images, maths = {}, {}
    driver.set_window_size(1400, 1024)  # a laptop's browser: every table must fit the text column at this width
    with serve(result.index_html.parent) as base:
        driver.get(f"{base}/index.html")  # a redirect to the landing page
        WebDriverWait(driver, 30).until(lambda d: d.current_url.endswith("/intro.html"))
        pages = [
            ("claims", "Every claim, judged"),
            ("reference", "Using the book"),
            ("outputs", "Outputs of this build"),
        ]
        for page, title in [("intro", book_html.BOOK_TITLE), *[(c.name, c.title) for c in result.chapters], *pages]:
            driver.get(f"{base}/{page}.html")
            WebDriverWait(driver, 30).until(lambda d: d.execute_script(ALL_IMAGES_SETTLED))
            heading = driver.find_element(By.CSS_SELECTOR, "article h1").text.replace("#", "").strip()
            assert heading == title, f"{page}.html shows {heading!r}, not {title!r}"
            if page == "intro":
                links = {
                    a.get_attribute("href").rsplit("/", 1)[-1].split("#")[0]
                    for a in driver.find_elements(By.CSS_SELECTOR, "article a[href]")
                }
                missing = [
                    n for n in [c.name for c in result.chapters] + [p for p, _ in pages] if f"{n}.html" not in links
                ]
                assert not missing, f"the landing page does not link {missing}"
            wide = driver.execute_script(WIDE_TABLES)
            assert not wide, f"{page}.html has tables wider than its text column at 1400 px: {wide}"
            numbered = driver.execute_script(NUMBERED_INDEX)
            assert not numbered, f"{page}.html has tables that show pandas' numbered index: {numbered}"
            broken = driver.execute_script(BROKEN_IMAGES)
            assert not broken, f"{page}.html has images that did not load: {broken}"
            images[page] = driver.execute_script("return document.images.length")
            maths[page] = driver.execute_script("return document.querySelectorAll('article .math.notranslate').length")
            if maths[page]:
                WebDriverWait(driver, 30).until(lambda d: d.execute_script(MATH_TYPESET))
                untypeset = driver.execute_script(UNTYPESET_MATH)
                assert not untypeset, f"{page}.html shows maths as raw text: {untypeset}"
    return images, maths


def test_small_book_in_browser(browser, small_book):
    images, maths = check_book_in_browser(browser, small_book)
    assert images["01_figure"] >= 1  # the saved figure is shown on its chapter's page
    assert maths["02_text"] == 2  # one inline and one display formula, both typeset


@needs_chapters
def test_full_book_in_browser(browser, full_book):
    images, maths = check_book_in_browser(browser, full_book)
    assert maths["01_batchnorm_intro"] > 0  # the chapters' formulae were found, and typeset
    assert images["intro"] >= 1  # the front page leads with a figure, and it loads
    front = (full_book.index_html.parent / "intro.html").read_text()
    assert "What the book found" in front and "**Article 2**" not in front  # the findings, rendered as markdown
    assert "Article 2" in front and "Headline claims" in front
    manifest = json.loads((full_book.figures_dir / "manifest.json").read_text())["outputs"]
    names = [c.name for c in full_book.chapters]
    for chapter in names:
        figures = [n for n, e in manifest.items() if e["kind"] == "figure" and _chapter_of(e, names) == chapter]
        if figures:
            assert images[chapter] >= 1, f"{chapter} saved {figures} but its page shows no image"


def test_a_chapter_kernel_talks_over_local_sockets_and_warns_of_nothing(tmp_path, capfd):
    """The runner's kernels use IPC sockets, so ipykernel has no unencrypted TCP port to warn about."""
    chapter = write_chapter(tmp_path / "01_one.ipynb", "One cell", new_code_cell("print(6 * 7)"))
    book._execute(chapter, tmp_path / "out.ipynb", {"profile": "smoke", "force": False}, "1/1", "One cell")
    executed = nbformat.read(tmp_path / "out.ipynb", as_version=4)
    assert executed.cells[-1].outputs[0]["text"].strip() == "42"
    said = capfd.readouterr()
    assert "without encryption" not in said.out + said.err


def test_a_bad_parameter_fails_its_cell_with_the_one_sentence_as_its_only_output(tmp_path):
    """papermill -p profile nope: the cell that reads the parameters shows the sentence naming the profile, and no
    traceback through the book's code."""
    import papermill as pm
    from papermill.exceptions import PapermillExecutionError

    chapter = write_chapter(
        tmp_path / "03_bad.ipynb",
        "A bad profile",
        new_code_cell(
            'from vitbn_nb import chapters\nsettings, force = chapters.parameters("03_fixed_lr", profile, force)'
        ),
    )
    with pytest.raises(PapermillExecutionError):
        pm.execute_notebook(
            str(chapter),
            str(tmp_path / "out.ipynb"),
            parameters={"profile": "nope"},
            progress_bar=False,
            kernel_name=book.KERNEL_NAME,
            language="python",
            kernel_manager_class=book._LocalKernelManager,
        )
    cell = nbformat.read(tmp_path / "out.ipynb", as_version=4).cells[-1]
    errors = [output for output in cell.outputs if output.output_type == "error"]
    assert [output.output_type for output in cell.outputs] == ["error"], cell.outputs
    (sentence,) = errors[0].traceback
    assert "'nope'" in sentence and "profile" in sentence and "Traceback" not in sentence


@needs_chapters
def test_chapter_5_opened_as_it_is_shows_the_committed_paper_figures_and_trains_nothing(tmp_path, monkeypatch):
    """What a reader gets who opens chapter 5 and runs it with its default ``profile = "auto"``: the committed
    ``paper`` runs read from ``figures/records/`` into an empty run store, nothing trained."""
    import papermill as pm

    monkeypatch.delenv("VITBN_COMMITTED_RECORDS", raising=False)
    monkeypatch.setenv("VITBN_RUNS_DIR", str(tmp_path / "runs"))
    monkeypatch.setenv("VITBN_FIGURES_DIR", str(tmp_path / "figures"))
    notebook = ROOT / "notebooks" / "05_depth_study.ipynb"
    pm.execute_notebook(str(notebook), str(tmp_path / "out.ipynb"), cwd=str(notebook.parent), progress_bar=False)
    said = "".join(
        o.get("text", "")
        for c in nbformat.read(tmp_path / "out.ipynb", as_version=4).cells
        for o in c.get("outputs", [])
    )
    assert "nothing trains" in said and " 0 trained or resumed" in said
    outputs = json.loads((tmp_path / "figures" / "manifest.json").read_text())["outputs"]
    assert outputs["article2_fig8"]["profile"] == "paper"
    assert not any((tmp_path / "runs").glob("*/record.json"))  # nothing trained into the store


@needs_chapters
def test_a_chapter_setting_given_to_papermill_trains_with_it_and_writes_nothing_under_figures(tmp_path, monkeypatch):
    """``papermill notebooks/05_depth_study.ipynb out.ipynb -p profile smoke -p epochs 1``: the runs are 1-epoch runs
    of their own, the outputs go where the chapter saves when run by hand, and the book's figures/ is untouched."""
    import papermill as pm

    from vitbn_nb.store import runs as store_runs

    published = ROOT / "figures"
    before = {p: p.stat().st_mtime_ns for p in published.rglob("*") if p.is_file()}
    monkeypatch.setenv("VITBN_RUNS_DIR", str(tmp_path / "runs"))
    monkeypatch.setenv("VITBN_FIGURES_DIR", str(tmp_path / "by-hand"))
    notebook = ROOT / "notebooks" / "05_depth_study.ipynb"
    pm.execute_notebook(
        str(notebook),
        str(tmp_path / "out.ipynb"),
        parameters={"profile": "smoke", "epochs": 1},
        cwd=str(notebook.parent),
        progress_bar=False,
        kernel_name="python3",
    )
    trained = [store_runs.Run(folder) for folder in (tmp_path / "runs").glob("*") if (folder / "record.json").is_file()]
    assert trained and {run.config.epochs for run in trained} == {1}  # the smoke profile alone trains 2
    said = "".join(
        o.get("text", "")
        for c in nbformat.read(tmp_path / "out.ipynb", as_version=4).cells
        for o in c.get("outputs", [])
    )
    assert "settings given by hand (epochs-1)" in said
    assert (tmp_path / "by-hand" / "manifest.json").is_file()
    assert {p: p.stat().st_mtime_ns for p in published.rglob("*") if p.is_file()} == before


def test_settings_given_by_hand_publish_to_a_folder_of_their_own(tmp_path):
    from vitbn_nb import paths

    variant = book.variant_name({"epochs": "3", "train": False})
    assert variant == "epochs-3" and book.variant_name({"train": False}) == ""  # train says how, not what
    target, why = book.publish_target("cpu", complete=True, output=tmp_path, variant=variant)
    assert target == (tmp_path / "figures-cpu-epochs-3").resolve() and "never replace figures/" in why
    with pytest.raises(book_chapters.BookError, match="figures/ holds the book's results"):
        book.publish_target(
            "cpu", complete=True, output=tmp_path, figures_dir=paths.book_figures_dir(), variant=variant
        )


def test_a_setting_no_chapter_has_or_a_value_its_field_refuses_is_one_line_before_any_kernel(capsys):
    assert main(["book", "--profile", "smoke", "--chapters", "05", "--no-html", "--set", "epoch=3"]) == 1
    err = capsys.readouterr().err
    assert "--set epoch" in err and "did you mean 'epochs'" in err and "Traceback" not in err
    assert main(["train", "--profile", "smoke", "--chapters", "01", "--set", "epochs=0"]) == 1
    assert "epochs=0 is not allowed" in capsys.readouterr().err
    assert main(["train", "--profile", "smoke", "--set", "epochs"]) == 1
    assert "NAME=VALUE" in capsys.readouterr().err


def test_the_table_check_finds_a_table_wider_than_its_column(browser):
    """The checks of every page see a table that overflows its text column (and pass one that fits) and a table that
    shows pandas' numbered index."""
    import urllib.parse

    cell = "<td>" + "a_long_unbreakable_word_" * 8 + "</td>"
    page = (
        f"<article style='width: 500px'><table><caption>wide</caption><tr>{cell * 3}</tr></table>"
        "<table><caption>narrow</caption><tr><td>1</td></tr></table></article>"
    )
    browser.get("data:text/html," + urllib.parse.quote(page))
    wide = browser.execute_script(WIDE_TABLES)
    assert len(wide) == 1 and wide[0].endswith("wide"), wide
    rows = "".join(f"<tr><th>{i}</th><td>x</td></tr>" for i in range(3))
    page = f"<article><table><caption>indexed</caption><tbody>{rows}</tbody></table></article>"
    browser.get("data:text/html," + urllib.parse.quote(page))
    assert browser.execute_script(NUMBERED_INDEX) == ["indexed"]
