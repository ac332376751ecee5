"""The book runner: execute every chapter headless with papermill, then build the HTML book.

``build_book(profile)`` runs the chapters ``notebooks/NN_name.ipynb`` in order, each with the
parameters ``profile`` and ``force`` injected, and keeps the executed copies in
``build/executed/<profile>/``. Finished training runs come from the run store, so running the
book again with nothing changed only re-draws figures.

Figures are written into a staging folder of this process (``build/figures-staging-<run>/``);
only when every chapter has succeeded are they published. ``figures/`` (the book's committed
results) takes only a complete run of every chapter under ``cpu`` or ``paper``, and never one
of a smaller profile than the results it holds unless ``replace_larger=True``; a ``smoke`` or
partial run publishes to ``build/figures-<profile>/`` (or ``-partial``) and says so. Every
output the kernels save carries this run's id (``VITBN_BOOK_RUN``) in the manifest. Finally
Jupyter Book (Sphinx) renders the executed notebooks of every chapter (those of this run, the
others from their last execution under the same profile), offline and without executing
anything again, into ``build/book/_build/html/``.
"""
from __future__ import annotations

import datetime as dt
import json
import os
import re
import shutil
import string
import subprocess
import sys
import time
import uuid
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from . import paths, profiles

CHAPTER_PATTERN = "[0-9][0-9]_*.ipynb"
KERNEL_NAME = "python3"
BOOK_TITLE = "BatchNorm in Vision Transformers — a reproduction"
_LOCK_FILES = (".manifest.lock",)
#: Larger profiles' results are not replaced by smaller ones without asking.
PROFILE_SIZE = {"smoke": 0, "cpu": 1, "paper": 2}
#: The only parameters the runner injects; a chapter's parameters cell must declare them.
PARAMETERS = {"profile": str, "force": bool}


class BookError(RuntimeError):
    """A chapter failed, or the HTML book could not be built; the message says where and why."""

    def __init__(self, message: str, *, chapter: str | None = None, cell_index: int | None = None,
                 cell_line: str | None = None, ename: str | None = None, evalue: str | None = None,
                 notebook: Path | None = None):
        super().__init__(message)
        self.chapter, self.cell_index, self.cell_line = chapter, cell_index, cell_line
        self.ename, self.evalue, self.notebook = ename, evalue, notebook


@dataclass
class ChapterRun:
    name: str
    source: Path
    executed: Path
    seconds: float
    title: str


@dataclass
class BookBuild:
    """What a call of :func:`build_book` did."""

    profile: str
    book_run: str
    chapters: list[ChapterRun]
    output_dir: Path
    figures_dir: Path
    runs_dir: Path
    index_html: Path | None = None
    seconds: dict = field(default_factory=dict)  # execute / publish / html wall seconds
    others: list = field(default_factory=list)  # chapters not executed by this run, shown as last executed


# -- chapters ---------------------------------------------------------------------------------

def default_notebooks_dir() -> Path:
    return paths.project_root() / "notebooks"


def discover_chapters(notebooks_dir: Path | str | None = None, chapters=None) -> list[Path]:
    """The chapter notebooks ``NN_name.ipynb`` in order, optionally only those named in ``chapters``.

    A chapter may be named by its number (``3``, ``"03"``) or its full name (``"03_fixed_lr"``).
    """
    folder = Path(notebooks_dir) if notebooks_dir is not None else default_notebooks_dir()
    if not folder.is_dir():
        raise ValueError(f"notebooks_dir={str(folder)!r} is not a folder")
    found = sorted(folder.glob(CHAPTER_PATTERN))
    if not found:
        raise ValueError(f"no chapters in {folder}: expected notebooks named like 01_name.ipynb")
    if chapters is None:
        return found
    if isinstance(chapters, (str, int)):
        chapters = [chapters]
    if not chapters:
        raise ValueError("chapters is empty; pass None for every chapter or name at least one")
    chosen = []
    for wanted in chapters:
        key = f"{wanted:02d}" if isinstance(wanted, int) else str(wanted).removesuffix(".ipynb")
        if key.isdigit():
            key = f"{int(key):02d}"
        matches = [p for p in found if p.stem == key or p.stem[:2] == key]
        if not matches:
            raise ValueError(f"chapters: {wanted!r} is not a chapter of {folder}; "
                             f"available: {', '.join(p.stem for p in found)}")
        chosen.extend(m for m in matches if m not in chosen)
    return sorted(chosen)


def _read_notebook(path: Path):
    import nbformat

    return nbformat.read(path, as_version=4)


def _title(notebook, fallback: str) -> str:
    for cell in notebook.cells:
        if cell.cell_type == "markdown":
            for line in cell.source.splitlines():
                if line.startswith("# "):
                    return line[2:].strip()
    return fallback


def _check_chapter(path: Path) -> str:
    """Refuse a chapter papermill could not parametrise; warn when its jupytext pair differs."""
    notebook = _read_notebook(path)
    if not any("parameters" in cell.get("metadata", {}).get("tags", []) for cell in notebook.cells):
        raise BookError(f"chapter {path.stem}: no cell is tagged 'parameters', so the profile cannot be "
                        f"injected (tag the cell holding `profile = \"auto\"` and `force = False`)",
                        chapter=path.stem, notebook=path)
    pair = path.with_suffix(".py")
    if pair.is_file():
        try:
            import jupytext

            def sources(nb):
                return [(c.cell_type, c.source.strip()) for c in nb.cells]

            if sources(jupytext.read(pair)) != sources(notebook):
                warnings.warn(f"{pair.name} and {path.name} differ: the book runs the .ipynb; "
                              f"run `jupytext --sync {pair}` if the .py is newer", stacklevel=3)
        except Exception as error:  # a check only; never stop the book for it
            warnings.warn(f"could not compare {pair.name} with {path.name}: {error}", stacklevel=3)
    return _title(notebook, path.stem)


# -- environment of the kernels ---------------------------------------------------------------

@contextmanager
def _environment(**variables):
    """Set (value) or remove (None) environment variables for the kernels papermill starts."""
    saved = {name: os.environ.get(name) for name in variables}
    try:
        for name, value in variables.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = str(value)
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _check_kernel() -> None:
    """The kernel should be this interpreter (a 'python3' spec elsewhere on the path could win)."""
    try:
        from jupyter_client.kernelspec import KernelSpecManager

        argv0 = KernelSpecManager().get_kernel_spec(KERNEL_NAME).argv[0]
    except Exception as error:
        raise BookError(f"no Jupyter kernel named {KERNEL_NAME!r} ({error}); install ipykernel in this "
                        f"environment") from error
    aliases = {"python", "python3", f"python{sys.version_info[0]}.{sys.version_info[1]}"}
    if argv0 not in aliases and Path(argv0).resolve() != Path(sys.executable).resolve():
        warnings.warn(f"the {KERNEL_NAME!r} kernel runs {argv0}, not this interpreter ({sys.executable})",
                      stacklevel=3)


def new_book_run_id() -> str:
    return f"{dt.datetime.now():%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:8]}"


# -- figures: staging and publishing ----------------------------------------------------------

def _chapter_key(name) -> str:
    return str(name or "")[:2]


def _prepare_staging(staging: Path, figures: Path, selected: list[Path], all_chapters: list[Path]) -> None:
    """Start the staging folder from ``figures`` less the outputs this run will write again.

    A whole-book run drops every output the manifest lists; a run of some chapters drops only
    theirs. Files no manifest entry lists (a README, ``make bench``'s ``bench.json``) are not the
    chapters' to remove: they are carried over, and the kernels can read them while they run.
    """
    if staging.exists():
        shutil.rmtree(staging)
    if not figures.is_dir():
        staging.mkdir(parents=True)
        return
    shutil.copytree(figures, staging, ignore=shutil.ignore_patterns(*_LOCK_FILES, "*.tmp"))
    manifest_file = staging / "manifest.json"
    if not manifest_file.is_file():
        return
    manifest = json.loads(manifest_file.read_text())
    whole_book = set(selected) == set(all_chapters)
    rerun = {p.stem[:2] for p in selected}
    for name, entry in list(manifest.get("outputs", {}).items()):
        if whole_book or _chapter_key(entry.get("chapter")) in rerun:
            for file in entry.get("files", []):
                (staging / file).unlink(missing_ok=True)
            del manifest["outputs"][name]
    if manifest.get("outputs"):
        manifest_file.write_text(json.dumps(manifest, indent=1, allow_nan=True, default=str) + "\n")
    else:
        manifest_file.unlink()


def _publish(staging: Path, target: Path, book_run: str) -> None:
    """Replace ``target`` by a copy of ``staging`` with two renames, so it is never half-written."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fresh = target.parent / f".{target.name}.new-{book_run}"
    old = target.parent / f".{target.name}.old-{book_run}"
    shutil.copytree(staging, fresh, ignore=shutil.ignore_patterns(*_LOCK_FILES, "*.tmp"))
    if target.exists():
        os.replace(target, old)
    os.replace(fresh, target)
    shutil.rmtree(old, ignore_errors=True)


# -- execution --------------------------------------------------------------------------------

def _log(message: str = "") -> None:
    print(message, flush=True)


def _format_seconds(seconds: float) -> str:
    minutes, rest = divmod(seconds, 60)
    return f"{int(minutes)} min {rest:04.1f} s" if minutes else f"{rest:.1f} s"


def _execute(source: Path, executed: Path, *, profile: str, force: bool, position: str, title: str) -> float:
    import papermill as pm
    from papermill.exceptions import PapermillExecutionError

    _log(f"[{position}] {source.stem} — {title}")
    start = time.perf_counter()
    try:
        pm.execute_notebook(str(source), str(executed), parameters={"profile": profile, "force": bool(force)},
                            kernel_name=KERNEL_NAME, language="python", cwd=str(source.parent), progress_bar=True,
                            log_output=False, start_timeout=300, request_save_on_cell_execute=True)
    except PapermillExecutionError as error:
        # papermill counts the injected-parameters cell; report the index in the chapter itself
        sources = [cell.source for cell in _read_notebook(source).cells]
        index = sources.index(error.source) if error.source in sources else error.cell_index
        first_line = next((line for line in error.source.splitlines() if line.strip()), "").strip()
        evalue = str(error.evalue)
        raise BookError(
            f"chapter {source.stem} failed in cell {index} (counting from 0; In [{error.exec_count}]): "
            f"`{first_line}`\n  {error.ename}: {evalue}\n"
            f"  the partly executed notebook is kept at {executed}",
            chapter=source.stem, cell_index=index, cell_line=first_line, ename=error.ename, evalue=evalue,
            notebook=executed) from None
    except Exception as error:  # the kernel died, could not start, the notebook is unreadable ...
        raise BookError(f"chapter {source.stem} could not be executed: {type(error).__name__}: {error}\n"
                        f"  the partly executed notebook (if any) is at {executed}",
                        chapter=source.stem, ename=type(error).__name__, evalue=str(error),
                        notebook=executed) from error
    seconds = time.perf_counter() - start
    _log(f"[{position}] {source.stem} done in {_format_seconds(seconds)}")
    return seconds


def publish_target(profile: str, *, complete: bool, output: Path, figures_dir=None) -> tuple[Path, str]:
    """Where a run's figures go, and why: ``figures/`` for a complete cpu/paper run, else a folder under build/."""
    if figures_dir is not None:
        return Path(figures_dir).resolve(), "the folder asked for"
    if complete and profile in ("cpu", "paper"):
        return paths.book_figures_dir().resolve(), "a complete run of every chapter"
    reason = "a smoke run" if profile == "smoke" else "a run of some chapters"
    return (output / f"figures-{profile}{'' if complete else '-partial'}").resolve(), (
        f"{reason} never replaces figures/ (the book's results)")


def _held_profiles(figures: Path) -> set[str]:
    manifest = figures / "manifest.json"
    if not manifest.is_file():
        return set()
    try:
        return {e.get("profile") for e in json.loads(manifest.read_text()).get("outputs", {}).values()} - {None}
    except json.JSONDecodeError:
        return set()


def check_parameters(source: Path, parameters: dict) -> None:
    """Refuse a parameter the chapter does not declare, or one of the wrong type, naming both."""
    import ast

    cell = next((c for c in _read_notebook(source).cells if "parameters" in c.get("metadata", {}).get("tags", [])), None)
    declared = set()
    if cell is not None:
        for node in ast.parse(cell.source).body:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
                node, (ast.AnnAssign, ast.AugAssign)) else []
            declared.update(t.id for t in targets if isinstance(t, ast.Name))
    unknown = sorted(set(parameters) - set(declared))
    if unknown:
        raise BookError(f"chapter {source.stem} has no parameter {', '.join(map(repr, unknown))}; its parameters "
                        f"cell declares {', '.join(sorted(declared)) or 'none'}", chapter=source.stem)
    for name, value in parameters.items():
        expected = PARAMETERS.get(name)
        if expected is not None and not isinstance(value, expected):
            raise BookError(f"parameter {name}={value!r} of chapter {source.stem} is not allowed; it must be a "
                            f"{expected.__name__}", chapter=source.stem)


def build_book(profile: str = "auto", *, notebooks_dir=None, output_dir=None, figures_dir=None, runs_dir=None,
               chapters=None, html: bool = True, force: bool = False, mlflow: str | None = None,
               replace_larger: bool = False) -> BookBuild:
    """Execute the chapters under ``profile``, publish their figures, and build the HTML book.

    ``profile``: ``smoke`` | ``cpu`` | ``paper`` | ``auto`` (``paper`` where CUDA is present, else
    ``cpu``). ``chapters``: numbers or names of the chapters to run (default: all). ``force``:
    retrain instead of reusing finished runs. ``mlflow``: a tracking URI every run and trial is
    mirrored to (else ``$MLFLOW_TRACKING_URI`` if set, else no mirroring). Folders default to the
    project's ``notebooks/``, ``build/`` and the run store (:func:`vitbn_nb.paths.runs_dir`); the
    figures go where :func:`publish_target` says (``figures/`` only for a complete cpu or paper
    run). ``replace_larger`` lets a smaller profile replace the figures of a larger one. Raises
    :class:`BookError` naming the chapter and cell when a chapter fails; the published figures
    are then left as they were. When only some chapters run, their outputs replace those of the
    same chapters in the target folder and the other chapters' stay.
    """
    resolved = profiles.resolve(profile)
    force = profiles.flag("force", force)
    all_chapters = discover_chapters(notebooks_dir)
    selected = discover_chapters(notebooks_dir, chapters) if chapters is not None else all_chapters
    output = Path(output_dir) if output_dir is not None else paths.project_root() / "build"
    output = output.resolve()
    complete = set(selected) == set(all_chapters)
    figures, why = publish_target(resolved, complete=complete, output=output, figures_dir=figures_dir)
    larger = sorted(p for p in _held_profiles(figures) if PROFILE_SIZE.get(p, -1) > PROFILE_SIZE[resolved])
    if larger and not replace_larger:
        raise BookError(f"{figures} holds results of the larger profile {', '.join(larger)}; a {resolved} run would "
                        f"replace them. Pass --replace-larger (replace_larger=True) to do it anyway, or --figures DIR "
                        "to write elsewhere.")
    runs = Path(runs_dir).resolve() if runs_dir is not None else paths.runs_dir().resolve()
    runs.mkdir(parents=True, exist_ok=True)
    executed_dir = output / "executed" / resolved
    executed_dir.mkdir(parents=True, exist_ok=True)

    titles = {path: _check_chapter(path) for path in selected}
    parameters = {"profile": resolved, "force": force}
    for path in selected:
        check_parameters(path, parameters)
    _check_kernel()
    book_run = new_book_run_id()
    # Each process stages and executes in folders of its own, so two book runs never collide; what a
    # killed process left behind is removed.
    _remove_abandoned(output.glob("figures-staging-*"), executed_dir.glob(".*-pid*"))
    staging = output / f"figures-staging-{book_run}-pid{os.getpid()}"
    private = executed_dir / f".{book_run}-pid{os.getpid()}"
    private.mkdir(parents=True, exist_ok=True)
    _prepare_staging(staging, figures, selected, all_chapters)

    package_root = str(Path(__file__).resolve().parent.parent)
    python_path = os.pathsep.join(p for p in (package_root, os.environ.get("PYTHONPATH")) if p)
    _log(f"vitbn-book: {len(selected)} chapter(s), profile {resolved}, book run {book_run}")
    _log(f"  run store {runs}\n  figures staged in {staging}, published to {figures} ({why})")
    runs_done: list[ChapterRun] = []
    start = time.perf_counter()
    with _environment(VITBN_BOOK_RUN=book_run, VITBN_FIGURES_DIR=staging, VITBN_RUNS_DIR=runs,
                      PYTHONPATH=python_path, MPLBACKEND=None,  # None: the kernel's inline backend
                      MLFLOW_TRACKING_URI=mlflow or os.environ.get("MLFLOW_TRACKING_URI")):
        for i, source in enumerate(selected, 1):
            executed = executed_dir / source.name
            seconds = _execute(source, private / source.name, profile=resolved, force=force,
                               position=f"{i}/{len(selected)}", title=titles[source])
            os.replace(private / source.name, executed)
            runs_done.append(ChapterRun(source.stem, source, executed, seconds, titles[source]))
    shutil.rmtree(private, ignore_errors=True)
    timings = {"execute": time.perf_counter() - start}

    publish_start = time.perf_counter()
    _publish(staging, figures, book_run)
    shutil.rmtree(staging, ignore_errors=True)
    timings["publish"] = time.perf_counter() - publish_start
    result = BookBuild(resolved, book_run, runs_done, output, figures, runs, seconds=timings)
    result.others = _earlier_chapters(all_chapters, selected, executed_dir)
    _log(summary(result))
    _log(f"figures of this run: {figures} ({why})")
    readme_file = paths.project_root() / "README.md"
    if figures == paths.book_figures_dir().resolve() and readme_file.is_file():
        from . import readme

        try:
            changed = readme.update(readme_file, figures)
            _log("README.md results rewritten from figures/" if changed else "README.md results already agree")
        except ValueError as error:  # a README without the markers is the user's to fix; the figures stand
            _log(f"README.md not updated: {error}")

    if html:
        html_start = time.perf_counter()
        result.index_html = build_html(result)
        timings["html"] = time.perf_counter() - html_start
        _log(f"HTML book built in {_format_seconds(timings['html'])}")
        _log(str(result.index_html))
    return result


def _remove_abandoned(*folders) -> None:
    """Remove staging and executed-notebook folders whose process (the pid in their name) is gone."""
    for folder in (f for group in folders for f in group):
        match = re.search(r"-pid(\d+)$", folder.name)
        if match is None or not folder.is_dir():
            continue
        try:
            os.kill(int(match.group(1)), 0)
        except ProcessLookupError:
            shutil.rmtree(folder, ignore_errors=True)
        except PermissionError:  # another user's live process
            continue


def _earlier_chapters(all_chapters: list[Path], selected: list[Path], executed_dir: Path) -> list[ChapterRun]:
    """The chapters this run did not execute, as their last execution under this profile left them (else unexecuted)."""
    others = []
    for source in all_chapters:
        if source in selected:
            continue
        executed = executed_dir / source.name
        others.append(ChapterRun(source.stem, source, executed if executed.is_file() else source, float("nan"),
                                 _check_chapter(source)))
    return others


def summary(result: BookBuild) -> str:
    width = max(len(c.name) for c in result.chapters)
    lines = [f"wall time per chapter (profile {result.profile}):"]
    lines += [f"  {c.name:<{width}}  {_format_seconds(c.seconds):>12}" for c in result.chapters]
    lines.append(f"  {'total':<{width}}  {_format_seconds(sum(c.seconds for c in result.chapters)):>12}")
    return "\n".join(lines)


# -- the HTML book ----------------------------------------------------------------------------

def template_dir() -> Path:
    """The static Jupyter Book configuration (``book/`` at the top of the project)."""
    for root in (paths.project_root(), Path(__file__).resolve().parent.parent):
        if (root / "book" / "_config.yml").is_file():
            return root / "book"
    raise BookError("the book templates (book/_config.yml, book/intro.template.md) were not found")


def _jupyter_book_command() -> list[str]:
    beside = Path(sys.executable).parent / "jupyter-book"
    if beside.is_file():
        return [str(beside)]
    return [sys.executable, "-c", "import sys; from jupyter_book.cli.main import main; sys.exit(main())"]


def _manifest_rows(figures: Path, book_run: str) -> str:
    manifest_file = figures / "manifest.json"
    if not manifest_file.is_file():
        return "This run saved no figures or tables."
    outputs = json.loads(manifest_file.read_text())["outputs"]
    rows = ["| output | kind | chapter | reproduces |", "| --- | --- | --- | --- |"]
    for name, entry in outputs.items():
        note = "" if entry.get("book_run") == book_run else " (from an earlier run)"
        rows.append(f"| `{name}`{note} | {entry.get('kind', '')} | {entry.get('chapter', '')} "
                    f"| {entry.get('reproduces', '')} |")
    return "\n".join(rows)


def _mathjax_dir() -> Path:
    """MathJax as the jupyter-server-mathjax wheel ships it (the book serves it from _static)."""
    try:
        import jupyter_server_mathjax
    except ImportError as error:
        raise BookError("the HTML book serves MathJax locally from the `jupyter-server-mathjax` package: "
                        "pip install -e '.[book]'") from error
    return Path(jupyter_server_mathjax.__file__).parent / "static"


def _write_config(template: Path, target: Path) -> None:
    """The Jupyter Book configuration, with the repository and Colab launch settings of [tool.vitbn-book]."""
    import yaml

    from . import colab

    where = colab.settings()
    if not where["repository"]:  # no public home yet: no launch buttons, the template as it is
        shutil.copy2(template, target)
        return
    config = yaml.safe_load(template.read_text())
    config["repository"] = {"url": where["repository"], "branch": where["ref"] or "main", "path_to_book": "notebooks"}
    config["launch_buttons"]["colab_url"] = "https://colab.research.google.com"
    config["html"]["use_repository_button"] = True
    target.write_text(yaml.safe_dump(config, sort_keys=False, allow_unicode=True))


def build_html(result: BookBuild) -> Path:
    """Render the executed chapters of ``result`` with Jupyter Book; returns the absolute index.html."""
    from .system import hardware_label, versions

    templates = template_dir()
    source = result.output_dir / "book"
    if source.exists():
        shutil.rmtree(source)
    source.mkdir(parents=True)
    _write_config(templates / "_config.yml", source / "_config.yml")
    shutil.copytree(_mathjax_dir(), source / "_mathjax" / "mathjax")
    everything = sorted([*result.chapters, *result.others], key=lambda c: c.name)
    for chapter in everything:
        shutil.copy2(chapter.executed, source / f"{chapter.name}.ipynb")
    toc = ["# Generated by vitbn_nb.book: every chapter, in order.", "format: jb-book", "root: intro", "chapters:"]
    toc += [f"- file: {chapter.name}" for chapter in everything]
    (source / "_toc.yml").write_text("\n".join(toc) + "\n")

    def when(c: ChapterRun) -> str:
        if c in result.chapters:
            return f"executed in {_format_seconds(c.seconds)} by this run"
        if c.executed == c.source:
            return "not executed yet under this profile (shown without outputs)"
        return "not executed by this run: shown as its last execution under this profile left it"

    chapter_list = "\n".join(f"{i}. [{c.title}]({c.name}.ipynb) — `{c.name}`, {when(c)}"
                             for i, c in enumerate(everything, 1))
    intro = string.Template((templates / "intro.template.md").read_text()).substitute(
        title=BOOK_TITLE, profile=result.profile, hardware=hardware_label(), date=dt.date.today().isoformat(),
        book_run=result.book_run, torch=versions().get("torch", "?"), python=versions().get("python", "?"),
        chapters=chapter_list, outputs=_manifest_rows(result.figures_dir, result.book_run),
        total=_format_seconds(sum(c.seconds for c in result.chapters)))
    (source / "intro.md").write_text(intro)

    log_file = result.output_dir / "book-build.log"
    command = [*_jupyter_book_command(), "build", str(source), "--builder", "html"]
    _log(f"building the HTML book: {' '.join(command)}")
    done = subprocess.run(command, cwd=source, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    log_file.write_text(done.stdout)
    index = source / "_build" / "html" / "index.html"
    if done.returncode != 0 or not index.is_file():
        tail = "\n".join(done.stdout.splitlines()[-40:])
        raise BookError(f"the HTML book could not be built (jupyter-book exit code {done.returncode}); "
                        f"full log: {log_file}\n--- last lines ---\n{tail}")
    warnings_count = len(re.findall(r"WARNING:", done.stdout))
    if warnings_count:
        _log(f"  {warnings_count} Sphinx warning(s); see {log_file}")
    return index.resolve()
