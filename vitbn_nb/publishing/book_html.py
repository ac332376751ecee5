"""The HTML book: Jupyter Book (Sphinx) renders the executed chapters offline, without executing anything again,
into ``build/book/_build/html/``, with a page listing every output of the run."""

from __future__ import annotations

import datetime as dt
import shutil
import string
import subprocess
import sys
from pathlib import Path

import nbformat

from .. import paths
from .book_chapters import BookBuild, BookError, ChapterRun, _format_seconds, _log
from .readme import findings_block, lead_figure, read_manifest, verdicts_block

BOOK_TITLE = "BatchNorm in Vision Transformers — a reproduction"
#: The book's pages beside its chapters: two from ``book/`` (their blocks written by ``readme``), one per build.
PAGES = ("claims.md", "reference.md", "outputs.md")


def profiles_shown(figures_dir: Path, profile: str) -> str:
    """The build's profile, and, where its chapters rendered some outputs at a larger one (the ``paper`` runs a
    ``cpu`` book holds), how many outputs each profile gave: one page never names one scale for all."""
    counts: dict[str, int] = {}
    for entry in read_manifest(figures_dir, missing_ok=True).values():
        if isinstance(shown := entry.get("profile"), str) and shown:
            counts[shown] = counts.get(shown, 0) + 1
    if set(counts) <= {profile}:
        return f"`{profile}`"
    return f"`{profile}`; its outputs: " + ", ".join(f"{n} at `{name}`" for name, n in sorted(counts.items()))


def summary(result: BookBuild) -> str:
    width = max(len(c.name) for c in result.chapters)
    lines = [f"wall time per chapter (profile {result.profile}):"]
    lines += [f"  {c.name:<{width}}  {_format_seconds(c.seconds):>12}" for c in result.chapters]
    lines.append(f"  {'total':<{width}}  {_format_seconds(sum(c.seconds for c in result.chapters)):>12}")
    return "\n".join(lines)


def template_dir() -> Path:
    """The static Jupyter Book configuration (``book/`` at the top of the project)."""
    for root in (paths.project_root(), Path(__file__).resolve().parents[2]):
        if (root / "book" / "_config.yml").is_file():
            return root / "book"
    raise BookError("the book templates (book/_config.yml, book/intro.template.md) were not found")


def _jupyter_book_command() -> list[str]:
    beside = Path(sys.executable).parent / "jupyter-book"
    if beside.is_file():
        return [str(beside)]
    return [sys.executable, "-c", "import sys; from jupyter_book.cli.main import main; sys.exit(main())"]


def _manifest_rows(figures: Path, book_run: str) -> str:
    if not (outputs := read_manifest(figures, missing_ok=True)):
        return "This run saved no figures or tables."
    rows = ["| output | kind | chapter | reproduces |", "| --- | --- | --- | --- |"]
    for name, entry in outputs.items():
        note = "" if entry.get("book_run") == book_run else " (from an earlier run)"
        rows.append(
            f"| `{name}`{note} | {entry.get('kind', '')} | {entry.get('chapter', '')} | {entry.get('reproduces', '')} |"
        )
    return "\n".join(rows)


def _mathjax_dir() -> Path:
    """MathJax as the jupyter-server-mathjax wheel ships it (the book serves it from _static)."""
    try:
        import jupyter_server_mathjax
    except ImportError as error:
        raise BookError(
            "the HTML book serves MathJax locally from the `jupyter-server-mathjax` package: pip install -e '.[book]'"
        ) from error
    return Path(jupyter_server_mathjax.__file__).parent / "static"


def _write_config(template: Path, target: Path) -> None:
    """The Jupyter Book configuration, with the repository and Colab launch settings of [tool.vitbn-book]."""
    import yaml

    where = paths.published_repository()
    if not where["repository"]:  # no public home yet: no launch buttons, the template as it is
        shutil.copy2(template, target)
        return
    config = yaml.safe_load(template.read_text())
    config["repository"] = {"url": where["repository"], "branch": where["ref"] or "main", "path_to_book": "notebooks"}
    config["launch_buttons"]["colab_url"] = "https://colab.research.google.com"
    config["html"]["use_repository_button"] = True
    target.write_text(yaml.safe_dump(config, sort_keys=False, allow_unicode=True))


def copy_chapter(executed: Path, target: Path) -> None:
    """An executed chapter as the book shows it: papermill's injected cell tagged ``remove-cell``; the chapter's own
    parameters cell, which says what a reader may change, stays."""
    notebook = nbformat.read(executed, as_version=4)
    for cell in notebook.cells:
        tags = cell.metadata.get("tags", [])
        if "injected-parameters" in tags and "remove-cell" not in tags:
            cell.metadata["tags"] = [*tags, "remove-cell"]
    nbformat.write(notebook, target)


def build_html(result: BookBuild) -> Path:
    """Render the executed chapters of ``result`` with Jupyter Book; returns the absolute index.html."""
    from ..system import hardware_label, versions

    templates = template_dir()
    source = result.output_dir / "book"
    if source.exists():
        shutil.rmtree(source)
    source.mkdir(parents=True)
    _write_config(templates / "_config.yml", source / "_config.yml")
    shutil.copytree(_mathjax_dir(), source / "_mathjax" / "mathjax")
    shutil.copytree(templates / "_static", source / "_static")  # Jupyter Book loads every stylesheet there
    everything = sorted([*result.chapters, *result.others], key=lambda c: c.name)
    for chapter in everything:
        copy_chapter(chapter.executed, source / f"{chapter.name}.ipynb")
    toc = ["# Generated by vitbn_nb.publishing.book: every chapter, in order.", "format: jb-book", "root: intro"]
    toc += ["chapters:", *(f"- file: {chapter.name}" for chapter in everything)]
    toc += [f"- file: {Path(page).stem}" for page in PAGES]
    (source / "_toc.yml").write_text("\n".join(toc) + "\n")

    def when(c: ChapterRun) -> str:
        if c in result.chapters:
            return f"executed in {_format_seconds(c.seconds)} by this run"
        if c.executed == c.source:
            return "not executed yet under this profile (shown without outputs)"
        return "not executed by this run: shown as its last execution under this profile left it"

    chapter_list = "\n".join(
        f"{i}. [{c.title}]({c.name}.ipynb) — `{c.name}`, {when(c)}" for i, c in enumerate(everything, 1)
    )
    for page in PAGES[:-1]:  # the pages README.md links to, their generated blocks as `readme` last wrote them
        shutil.copy2(templates / Path(page).name, source / Path(page).name)
    (source / PAGES[-1]).write_text(
        "# Outputs of this build\n\nEvery figure and table this build published, with the chapter that wrote it and "
        "what it reproduces (`figures/manifest.json` holds each one's profile, hardware, date and runs).\n\n"
        + _manifest_rows(result.figures_dir, result.book_run)
        + "\n"
    )

    lead = result.figures_dir / f"{lead_figure(result.figures_dir)}.png"
    if lead.is_file():  # the front page shows the lead figure from its own folder
        (source / "figures").mkdir(exist_ok=True)
        shutil.copy2(lead, source / "figures" / lead.name)
    intro = string.Template((templates / "intro.template.md").read_text()).substitute(
        title=BOOK_TITLE,
        findings=findings_block(result.figures_dir, claims_page="claims.md", verdicts_at=""),
        verdicts=verdicts_block(result.figures_dir, claims_page="claims.md"),
        profile=profiles_shown(result.figures_dir, result.profile),
        hardware=hardware_label(),
        date=dt.date.today().isoformat(),
        book_run=result.book_run,
        torch=versions().get("torch", "?"),
        python=versions().get("python", "?"),
        chapters=chapter_list,
        total=_format_seconds(sum(c.seconds for c in result.chapters)),
    )
    (source / "intro.md").write_text(intro)

    log_file = result.output_dir / "book-build.log"
    command = [*_jupyter_book_command(), "build", str(source), "--builder", "html"]
    _log(f"building the HTML book: {' '.join(command)}")
    done = subprocess.run(command, cwd=source, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    log_file.write_text(done.stdout)
    index = source / "_build" / "html" / "index.html"
    if done.returncode != 0 or not index.is_file():
        tail = "\n".join(done.stdout.splitlines()[-40:])
        raise BookError(
            f"the HTML book could not be built (jupyter-book exit code {done.returncode}); "
            f"full log: {log_file}\n--- last lines ---\n{tail}"
        )
    if warnings_count := done.stdout.count("WARNING:"):
        _log(f"  {warnings_count} Sphinx warning(s); see {log_file}")
    return index.resolve()
