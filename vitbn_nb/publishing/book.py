"""The book runner: execute every chapter headless with papermill, publish its figures, then build the HTML book.
Figures are staged per process and published only when every chapter succeeded: ``figures/`` takes only a complete
cpu or paper run, never a smaller profile's than it holds unless ``replace_larger``; others go to ``build/``."""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import shutil
import time
import uuid
from contextlib import contextmanager
from pathlib import Path
from unittest import mock

import nbformat
from jupyter_client.manager import AsyncKernelManager
from traitlets import default

from .. import campaign, paths, profiles
from ..profiles import PROFILE_SIZE
from ..store import bundle, committed
from . import forest, readme
from .book_chapters import (
    KERNEL_NAME,
    BookBuild,
    BookError,
    ChapterRun,
    _check_chapter,
    _check_kernel,
    _format_seconds,
    _log,
    check_parameters,
    declared_parameters,
    discover_chapters,
)
from .book_html import build_html, summary

_LOCK_FILES = (".manifest.lock",)


@contextmanager
def _environment(**variables):
    """Set (value) or remove (None) environment variables for the kernels papermill starts; restored after."""
    with mock.patch.dict(os.environ):
        for name, value in variables.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = str(value)
        yield


def _prepare_staging(staging: Path, figures: Path, selected: list[Path], all_chapters: list[Path]) -> None:
    """Start the (new) staging folder from ``figures`` less the outputs this run writes again (every manifest entry for
    a whole book, else the selected chapters'); files no entry lists (``bench.json``) are carried over."""
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
        if whole_book or str(entry.get("chapter") or "")[:2] in rerun:
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


class _LocalKernelManager(AsyncKernelManager):
    """A chapter's kernel on local sockets beside its connection file: no TCP port, nothing in plain text on a
    network, and so no warning from ipykernel about it on every chapter."""

    @default("transport")
    def _transport_default(self) -> str:
        return "ipc"


def _execute(source: Path, executed: Path, parameters: dict, position: str, title: str) -> float:
    """Run one chapter with papermill under ``parameters`` (its profile, force, train, and the settings given by name
    that it declares); its wall seconds, or a :class:`BookError` naming the failed cell."""
    import papermill as pm
    from papermill.exceptions import PapermillExecutionError

    _log(f"[{position}] {source.stem} — {title}")
    start = time.perf_counter()
    try:
        pm.execute_notebook(
            str(source),
            str(executed),
            parameters=parameters,
            kernel_name=KERNEL_NAME,
            language="python",
            cwd=str(source.parent),
            progress_bar=True,
            log_output=False,
            start_timeout=300,
            kernel_manager_class=_LocalKernelManager,
            request_save_on_cell_execute=True,
        )
    except PapermillExecutionError as error:
        # papermill counts the injected-parameters cell; report the index in the chapter itself
        sources = [cell.source for cell in nbformat.read(source, as_version=4).cells]
        index = sources.index(error.source) if error.source in sources else error.cell_index
        first_line = next((line for line in error.source.splitlines() if line.strip()), "").strip()
        raise BookError(
            f"chapter {source.stem} failed in cell {index} (counting from 0; In [{error.exec_count}]): "
            f"`{first_line}`\n  {error.ename}: {error.evalue}\n  the partly executed notebook is kept at {executed}",
            chapter=source.stem,
            cell_index=index,
            ename=error.ename,
            notebook=executed,
        ) from None
    except Exception as error:  # the kernel died, could not start, the notebook is unreadable ...
        raise BookError(
            f"chapter {source.stem} could not be executed: {type(error).__name__}: {error}\n"
            f"  the partly executed notebook (if any) is at {executed}",
            chapter=source.stem,
            ename=type(error).__name__,
            notebook=executed,
        ) from error
    seconds = time.perf_counter() - start
    _log(f"[{position}] {source.stem} done in {_format_seconds(seconds)}")
    return seconds


#: The settings given by name that say how a book renders, not what its protocol is (as ``chapters.NOT_PROTOCOL``).
NOT_PROTOCOL = ("train",)


def variant_name(given: dict) -> str:
    """The protocol settings ``given`` by name as a folder name (``epochs-3_seeds-1``), '' when there are none."""
    changed = sorted((k, v) for k, v in given.items() if k not in NOT_PROTOCOL)
    words = re.sub(r"[^\w.-]+", "", "_".join(f"{k}-{v}".replace(",", "-") for k, v in changed))
    if len(words) > 60:
        words = f"{changed[0][0]}-and-{len(changed) - 1}-more-{uuid.uuid5(uuid.NAMESPACE_URL, words).hex[:8]}"
    return words


def publish_target(
    profile: str, *, complete: bool, output: Path, figures_dir=None, variant: str = ""
) -> tuple[Path, str]:
    """Where a run's figures go, and why: ``figures/`` for a complete cpu/paper run of the protocol, else a folder
    under build/ (a ``variant``, settings given by hand, has its own and may never write ``figures/``)."""
    if variant:
        target = Path(figures_dir).resolve() if figures_dir is not None else (output / f"figures-{profile}-{variant}")
        if target.resolve() == paths.book_figures_dir().resolve():
            raise BookError(
                f"settings given by hand ({variant}) differ from the {profile} protocol, and figures/ holds the "
                "book's results; give --figures another folder (or none: build/figures-<profile>-<settings>)"
            )
        return target.resolve(), f"settings given by hand ({variant}) never replace figures/"
    if figures_dir is not None:
        return Path(figures_dir).resolve(), "the folder asked for"
    if complete and profile in ("cpu", "paper"):
        return paths.book_figures_dir().resolve(), "a complete run of every chapter"
    reason = "a smoke run" if profile == "smoke" else "a run of some chapters"
    return (output / f"figures-{profile}{'' if complete else '-partial'}").resolve(), (
        f"{reason} never replaces figures/ (the book's results)"
    )


def _outputs(figures: Path) -> dict[str, dict]:
    """The manifest's outputs in ``figures`` (none where it is absent or unreadable)."""
    try:
        return json.loads((figures / "manifest.json").read_text()).get("outputs", {})
    except (OSError, ValueError):
        return {}


def _held_profiles(figures: Path) -> dict[str, set[str]]:
    """The profiles of the outputs ``figures`` holds, per chapter number ("05")."""
    held: dict[str, set[str]] = {}
    for entry in _outputs(figures).values():
        if entry.get("profile"):
            held.setdefault(str(entry.get("chapter") or "")[:2], set()).add(entry["profile"])
    return held


def _smaller_than_held(staging: Path, figures: Path) -> list[str]:
    """The outputs ``staging`` would publish at a smaller profile than ``figures`` holds them: a chapter that mixes
    scales (chapter 03 at a full-protocol lr) passes the check by chapter, so each output is checked again here."""
    held, staged = _outputs(figures), _outputs(staging)
    size = lambda entry: PROFILE_SIZE.get(entry.get("profile"), -1)
    return sorted(
        f"{name} ({held[name]['profile']} held, {entry.get('profile')} rendered)"
        for name, entry in staged.items()
        if name in held and size(held[name]) > size(entry)
    )


def build_book(
    profile: str = "auto",
    *,
    notebooks_dir=None,
    output_dir=None,
    figures_dir=None,
    runs_dir=None,
    chapters=None,
    html: bool = True,
    force: bool = False,
    mlflow: str | None = None,
    replace_larger: bool = False,
    train: bool = True,
    measure: bool = False,
    given: dict | None = None,
    rendering=None,
    before_training=None,
    check_given=None,
) -> BookBuild:
    """Execute the chapters (numbers or names; default all) under ``profile``, publish their figures where
    :func:`publish_target` says, and build the HTML book; ``train=False`` renders from the run store alone;
    ``measure``: chapter 08 measures anew; ``given``: settings by name (``--set``), each passed to the chapters whose
    parameters declare it. A failed chapter raises :class:`BookError` naming its cell and leaves the published figures
    as they were.

    From the chapters' registry (:func:`vitbn_nb.__main__.rendering`, :func:`vitbn_nb.__main__.check_device_first`):
    ``rendering(chapter, profile)`` gives the profile a chapter renders at and the lrs of its ``paper`` runs;
    ``before_training(rendered_at, profile, runs, force)`` runs before any kernel where training is on;
    ``check_given(chapters, given)`` refuses a setting no chapter has, or a value its field refuses."""
    resolved = profiles.resolve(profile)
    force, train, measure = (profiles.flag(n, v) for n, v in (("force", force), ("train", train), ("measure", measure)))
    given = dict(given or {})
    if "train" in given:  # --set train=false says what --no-train says
        train = profiles.flag("train", given.pop("train")) and train
    all_chapters = discover_chapters(notebooks_dir)
    selected = discover_chapters(notebooks_dir, chapters) if chapters is not None else all_chapters
    output = (Path(output_dir) if output_dir is not None else paths.project_root() / "build").resolve()
    complete = set(selected) == set(all_chapters)
    if given and check_given:
        check_given([p.stem for p in selected], given)
    variant = variant_name(given)
    figures, why = publish_target(resolved, complete=complete, output=output, figures_dir=figures_dir, variant=variant)
    runs = Path(runs_dir).resolve() if runs_dir is not None else paths.runs_dir().resolve()
    try:
        runs.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise ValueError(
            f"the run store {runs} cannot be made ({error.strerror or error}); fix: point --runs (or "
            "VITBN_RUNS_DIR) at a folder that exists or can be made, and run the same command again"
        ) from None
    with _environment(VITBN_RUNS_DIR=runs):  # a variant's runs are its own: it renders at the profile asked
        scales = {p: rendering(p.stem, resolved) if rendering and not variant else (resolved, ()) for p in selected}
    rendered_at = {path: at for path, (at, _) in scales.items()}
    paper_lrs = {path: lrs for path, (_, lrs) in scales.items()}
    held = _held_profiles(figures)
    # an output that names no chapter counts against every chapter
    held_by = lambda path: held.get(path.stem[:2], set()) | held.get("", set())
    largest = lambda path: "paper" if paper_lrs[path] else rendered_at[path]
    bigger = lambda path: {p for p in held_by(path) if PROFILE_SIZE.get(p, -1) > PROFILE_SIZE[largest(path)]}
    larger = sorted(f"{path.stem} ({', '.join(sorted(bigger(path)))})" for path in selected if bigger(path))
    if larger and not replace_larger:
        raise BookError(
            f"{figures} holds results of a larger profile for {', '.join(larger)}; a {resolved} run would "
            f"replace them. Pass --replace-larger (replace_larger=True) to do it anyway, or --figures DIR "
            "to write elsewhere."
        )
    bundle.clean_imports(runs)  # the temporary folders of imports a kill interrupted: deleted, never read
    executed_dir = output / "executed" / resolved
    executed_dir.mkdir(parents=True, exist_ok=True)

    titles = {path: _check_chapter(path) for path in selected}
    parameters = {}
    for path in selected:
        # a chapter rendered at a larger profile than asked reads what is held: it never trains that profile's runs
        trains = train and rendered_at[path] == resolved
        declared = declared_parameters(path)  # every chapter declares these three; a flag or setting where declared
        optional = {"measure": measure, **given}
        parameters[path] = {"profile": rendered_at[path], "force": force, "train": trains} | {
            k: v for k, v in optional.items() if k in declared
        }
        check_parameters(path, parameters[path])
    _check_kernel()
    if train and before_training:
        with _environment(VITBN_RUNS_DIR=runs):
            before_training({path.stem: at for path, at in rendered_at.items()}, resolved, runs, force)
    book_run = f"{dt.datetime.now():%Y%m%dT%H%M%S}-{uuid.uuid4().hex[:8]}"
    # Each process stages and executes in folders of its own, so two book runs never collide; what a
    # killed process left behind is removed.
    _remove_abandoned(output.glob("figures-staging-*"), executed_dir.glob(".*-pid*"))
    staging = output / f"figures-staging-{book_run}-pid{os.getpid()}"
    private = executed_dir / f".{book_run}-pid{os.getpid()}"
    private.mkdir(parents=True, exist_ok=True)
    _prepare_staging(staging, figures, selected, all_chapters)

    package_root = str(Path(__file__).resolve().parents[2])
    python_path = os.pathsep.join(p for p in (package_root, os.environ.get("PYTHONPATH")) if p)
    _log(f"vitbn-book: {len(selected)} chapter(s), profile {resolved}, book run {book_run}")
    for path, chapter_profile in rendered_at.items():
        if chapter_profile != resolved:
            _log(
                f"  {path.stem} renders at {chapter_profile} from what is held (every run of its {chapter_profile} "
                "protocol's first seeds; a seed plan's further seeds where the campaign has trained them)"
            )
    for path, lrs in paper_lrs.items():
        if lrs:
            shown = ", ".join(f"{lr:g}" for lr in lrs)
            _log(f"  {path.stem} takes the paper runs at lr {shown}: every paper run at that lr is held")
    _log(f"  run store {runs}{'' if train else ' (render only: no run is trained)'}")
    _log(f"  figures staged in {staging}, published to {figures} ({why})")
    runs_done: list[ChapterRun] = []
    start = time.perf_counter()
    with _environment(
        VITBN_FIGURES_DIR=staging,
        VITBN_RUNS_DIR=runs,
        PYTHONPATH=python_path,
        MPLBACKEND=None,  # None: the kernel's inline backend
        MLFLOW_TRACKING_URI=mlflow or os.environ.get("MLFLOW_TRACKING_URI"),
    ):
        for i, source in enumerate(selected, 1):
            executed = executed_dir / source.name
            seconds = _execute(
                source, private / source.name, parameters[source], f"{i}/{len(selected)}", titles[source]
            )
            os.replace(private / source.name, executed)
            runs_done.append(ChapterRun(source.stem, source, executed, seconds, titles[source]))
        if forest.save(staging, figures) is not None:
            _log(f"  drawn from every chapter's judged claims: {forest.NAME}")
    shutil.rmtree(private, ignore_errors=True)
    timings = {"execute": time.perf_counter() - start}

    publish_start = time.perf_counter()
    if missing := committed.stage(staging, runs, campaign.run_ids()):
        _log(f"  no record of {len(missing)} run(s) the manifest names, so not committed: {', '.join(missing)}")
    if (smaller := _smaller_than_held(staging, figures)) and not replace_larger:
        raise BookError(
            f"{figures} holds results of a larger profile than this run rendered for {', '.join(smaller)}; they "
            f"were left as they were, and this run's figures are in {staging}. Pass --replace-larger "
            "(replace_larger=True) to replace them anyway, or --figures DIR to write elsewhere."
        )
    _stamp_book_run(staging, book_run)
    _publish(staging, figures, book_run)
    shutil.rmtree(staging, ignore_errors=True)
    timings["publish"] = time.perf_counter() - publish_start
    result = BookBuild(resolved, book_run, runs_done, output, figures, runs, seconds=timings)
    result.others = _earlier_chapters(all_chapters, selected, executed_dir)
    _log(summary(result))
    _log(f"figures of this run: {figures} ({why})")
    if figures == paths.book_figures_dir().resolve():
        try:
            changed = readme.update(figures)
            _log(
                f"rewritten from figures/: {', '.join(p.name for p in changed)}"
                if changed
                else "README.md and the book's pages already agree with figures/"
            )
        except ValueError as error:  # a document without its markers is the user's to fix; the figures stand
            _log(f"README.md and the book's pages not updated: {error}")

    if html:
        html_start = time.perf_counter()
        result.index_html = build_html(result)
        timings["html"] = time.perf_counter() - html_start
        _log(f"HTML book built in {_format_seconds(timings['html'])}")
        _log(str(result.index_html))
    return result


def _stamp_book_run(staging: Path, book_run: str) -> None:
    """Name this book run in the staged manifest's entries its kernels wrote anew (``book_run`` None); an output that
    changed nothing kept its published entry, and its book run with it."""
    manifest_file = staging / "manifest.json"
    if not manifest_file.is_file():
        return
    manifest = json.loads(manifest_file.read_text())
    for entry in manifest.get("outputs", {}).values():
        if isinstance(entry, dict) and entry.get("book_run") is None:
            entry["book_run"] = book_run
    manifest_file.write_text(json.dumps(manifest, indent=1, allow_nan=True, default=str) + "\n")


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
    others = [(source, executed_dir / source.name) for source in all_chapters if source not in selected]
    shown = lambda source, executed: executed if executed.is_file() else source
    return [ChapterRun(s.stem, s, shown(s, e), float("nan"), _check_chapter(s)) for s, e in others]
