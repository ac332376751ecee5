"""The book's chapters: finding them, checking that papermill can parametrise them, and the error every step of the
book runner raises."""

from __future__ import annotations

import ast
import sys
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from .. import paths

CHAPTER_PATTERN = "[0-9][0-9]_*.ipynb"
KERNEL_NAME = "python3"
#: The only parameters the runner injects; a chapter's parameters cell must declare them.
PARAMETERS = {"profile": str, "force": bool, "train": bool, "measure": bool}


class BookError(RuntimeError):
    """A chapter failed, or the HTML book could not be built; the message says where and why."""

    def __init__(self, message: str, *, chapter=None, cell_index=None, ename=None, notebook=None):
        super().__init__(message)
        self.chapter, self.cell_index, self.ename, self.notebook = chapter, cell_index, ename, notebook


def discover_chapters(notebooks_dir: Path | str | None = None, chapters=None) -> list[Path]:
    """The chapter notebooks ``NN_name.ipynb`` in order, or only those named (``3``, ``"03"``, ``"03_fixed_lr"``)."""
    folder = Path(notebooks_dir) if notebooks_dir is not None else paths.project_root() / "notebooks"
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
        key = str(wanted).removesuffix(".ipynb")
        key = f"{int(key):02d}" if key.isdigit() else key
        matches = [p for p in found if p.stem == key or p.stem[:2] == key]
        if not matches:
            raise ValueError(
                f"chapters: {wanted!r} is not a chapter of {folder}; available: {', '.join(p.stem for p in found)}"
            )
        chosen.extend(m for m in matches if m not in chosen)
    return sorted(chosen)


def _parameters_cell(notebook):
    return next((c for c in notebook.cells if "parameters" in c.get("metadata", {}).get("tags", [])), None)


def _check_chapter(path: Path) -> str:
    """Refuse a chapter papermill could not parametrise; warn when its jupytext pair differs; its title."""
    notebook = nbformat.read(path, as_version=4)
    if _parameters_cell(notebook) is None:
        raise BookError(
            f"chapter {path.stem}: no cell is tagged 'parameters', so the profile cannot be "
            f'injected (tag the cell holding `profile = "auto"` and `force = False`)',
            chapter=path.stem,
            notebook=path,
        )
    pair = path.with_suffix(".py")
    if pair.is_file():
        try:
            import jupytext

            sources = lambda nb: [(c.cell_type, c.source.strip()) for c in nb.cells]
            if sources(jupytext.read(pair)) != sources(notebook):
                warnings.warn(
                    f"{pair.name} and {path.name} differ: the book runs the .ipynb; "
                    f"run `jupytext --sync {pair}` if the .py is newer",
                    stacklevel=3,
                )
        except Exception as error:  # a check only; never stop the book for it
            warnings.warn(f"could not compare {pair.name} with {path.name}: {error}", stacklevel=3)
    markdown = (cell.source for cell in notebook.cells if cell.cell_type == "markdown")
    return next(
        (line[2:].strip() for text in markdown for line in text.splitlines() if line.startswith("# ")), path.stem
    )


def _check_kernel() -> None:
    """The kernel should be this interpreter (a 'python3' spec elsewhere on the path could win)."""
    try:
        from jupyter_client.kernelspec import KernelSpecManager

        argv0 = KernelSpecManager().get_kernel_spec(KERNEL_NAME).argv[0]
    except Exception as error:
        raise BookError(
            f"no Jupyter kernel named {KERNEL_NAME!r} ({error}); install ipykernel in this environment"
        ) from error
    aliases = {"python", "python3", f"python{sys.version_info[0]}.{sys.version_info[1]}"}
    if argv0 not in aliases and Path(argv0).resolve() != Path(sys.executable).resolve():
        warnings.warn(f"the {KERNEL_NAME!r} kernel runs {argv0}, not this interpreter ({sys.executable})", stacklevel=3)


def declared_parameters(source: Path) -> set[str]:
    """The names a chapter's parameters cell assigns: what papermill may set in it."""
    cell = _parameters_cell(nbformat.read(source, as_version=4))
    declared = set()
    if cell is not None:
        for node in ast.parse(cell.source).body:
            targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
            declared.update(t.id for t in targets if isinstance(t, ast.Name))
    return declared


def check_parameters(source: Path, parameters: dict) -> None:
    """Refuse a parameter the chapter does not declare, or one of the wrong type, naming both."""
    declared = declared_parameters(source)
    if unknown := sorted(set(parameters) - declared):
        raise BookError(
            f"chapter {source.stem} has no parameter {', '.join(map(repr, unknown))}; its parameters "
            f"cell declares {', '.join(sorted(declared)) or 'none'}",
            chapter=source.stem,
        )
    for name, value in parameters.items():
        expected = PARAMETERS.get(name)
        if expected is not None and not isinstance(value, expected):
            raise BookError(
                f"parameter {name}={value!r} of chapter {source.stem} is not allowed; it must be a {expected.__name__}",
                chapter=source.stem,
            )


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


def _log(message: str = "") -> None:
    print(message, flush=True)


def _format_seconds(seconds: float) -> str:
    minutes, rest = divmod(seconds, 60)
    return f"{int(minutes)} min {rest:04.1f} s" if minutes else f"{rest:.1f} s"
