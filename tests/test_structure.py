"""How the package is organised: imports point down (the core never imports a chapter; a chapter imports no other
chapter; no import circle), and the CPU path never loads the stacked engine. Read with plain ``ast``, imports inside
functions counted."""

import ast
import importlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

from vitbn_nb import chapters
from vitbn_nb import train as training

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "vitbn_nb"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _executed_imports(tree: ast.Module, *, type_checking: bool = False):
    """Every import statement, at the top or inside a function, except those under ``if TYPE_CHECKING:`` (unless
    ``type_checking``)."""
    skipped = set()
    for node in ast.walk(tree) if not type_checking else ():
        if isinstance(node, ast.If) and getattr(node.test, "id", getattr(node.test, "attr", None)) == "TYPE_CHECKING":
            skipped |= {id(n) for child in node.body for n in ast.walk(child)}
    return [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom)) and id(n) not in skipped]


def import_graph(*, type_checking: bool = False) -> dict[str, set[str]]:
    """Module -> the package's modules it imports (a submodule's import of its own package is how Python works, not
    an arrow: ``from . import engine`` points at ``engines.engine``); with ``type_checking``, imports under ``if
    TYPE_CHECKING:`` too."""
    modules = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    return {name: _imported(name, path, modules, type_checking=type_checking) for name, path in modules.items()}


def circles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index, low, stack, on_stack, found, counter = {}, {}, [], set(), [], [0]

    def visit(node):
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for target in graph[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(component)

    sys.setrecursionlimit(10_000)
    for node in graph:
        if node not in index:
            visit(node)
    return found


#: The core: what chapters build on, which never imports a chapter (``__main__``, ``train`` and ``campaign`` are the
#: application layer that drives the chapters; ``vitbn_nb.chapters`` itself is the chapters' registry).
CORE = ("models", "data", "engines", "store", "judging", "publishing", "bench")


def _imported(name: str, path: Path, modules: dict[str, Path], *, type_checking: bool) -> set[str]:
    """The package's modules ``name`` (at ``path``) imports, at the top or inside a function."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found = set()
    for node in _executed_imports(ast.parse(path.read_text()), type_checking=type_checking):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        else:
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join(base + ([node.module] if node.module else []))
            subs = [f"{module}.{alias.name}" for alias in node.names if f"{module}.{alias.name}" in modules]
            targets = subs + ([module] if len(subs) < len(node.names) else [])
        found |= {t for t in targets if t in modules and t != name}
    return found


def _chapter_of(module: str) -> str | None:
    """The chapter package a module belongs to (``vitbn_nb.chapters.fixed_lr``), None outside one (the registry
    ``vitbn_nb.chapters`` and its shared ``panels`` belong to none)."""
    parts = module.split(".")
    if parts[:2] != ["vitbn_nb", "chapters"] or len(parts) < 3:
        return None
    return ".".join(parts[:3]) if (PACKAGE / "chapters" / parts[2]).is_dir() else None


def arrows_into_chapters(graph: dict[str, set[str]]) -> list[str]:
    """``module -> chapter module`` for every import from a core subpackage into ``vitbn_nb.chapters``."""
    core = tuple(f"vitbn_nb.{name}" for name in CORE)
    return sorted(
        f"{module} imports {target}"
        for module, targets in graph.items()
        if module.startswith(core) and (module + ".").split(".")[1] in CORE
        for target in targets
        if (target == "vitbn_nb.chapters" or target.startswith("vitbn_nb.chapters."))
    )


def arrows_between_chapters(graph: dict[str, set[str]]) -> list[str]:
    """``module -> module`` for every import from one chapter package into another."""
    return sorted(
        f"{module} (chapter {_chapter_of(module)}) imports {target} (chapter {_chapter_of(target)})"
        for module, targets in graph.items()
        for target in targets
        if _chapter_of(module) and _chapter_of(target) and _chapter_of(module) != _chapter_of(target)
    )


def test_the_core_imports_no_chapter():
    """No module of models, data, engines, store, judging, publishing or bench imports ``vitbn_nb.chapters`` (nor
    under ``if TYPE_CHECKING:``): a chapter passes in what the core needs."""
    found = arrows_into_chapters(import_graph(type_checking=True))
    assert not found, "the core imports a chapter:\n  " + "\n  ".join(found)


def test_no_chapter_imports_another():
    """What two chapters share lives below them (``hpo``, ``models``, ``judging``); one chapter reaches another's
    settings only through the registry (``chapters.settings``)."""
    found = arrows_between_chapters(import_graph(type_checking=True))
    assert not found, "a chapter imports another:\n  " + "\n  ".join(found)


def test_the_structure_checks_find_what_they_look_for():
    graph = {
        "vitbn_nb.publishing.results": {"vitbn_nb.chapters"},
        "vitbn_nb.store.runs": {"vitbn_nb.chapters.fixed_lr.article"},
        "vitbn_nb.train": {"vitbn_nb.chapters"},  # the application layer may
        "vitbn_nb.chapters.speed.study": {"vitbn_nb.chapters.fixed_lr.article", "vitbn_nb.chapters", "vitbn_nb.hpo"},
        "vitbn_nb.chapters.fixed_lr.study": {"vitbn_nb.chapters.fixed_lr.article", "vitbn_nb.chapters.panels"},
    }
    assert arrows_into_chapters(graph) == [
        "vitbn_nb.publishing.results imports vitbn_nb.chapters",
        "vitbn_nb.store.runs imports vitbn_nb.chapters.fixed_lr.article",
    ]
    assert arrows_between_chapters(graph) == [
        "vitbn_nb.chapters.speed.study (chapter vitbn_nb.chapters.speed) imports vitbn_nb.chapters.fixed_lr.article "
        "(chapter vitbn_nb.chapters.fixed_lr)"
    ]


def test_the_import_reader_counts_relative_imports_in_functions_and_type_checking(tmp_path):
    path = tmp_path / "x.py"
    path.write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..chapters import settings\n"
        "def f():\n    from ..chapters.fixed_lr import article\n"
    )
    modules = {m: Path() for m in ("vitbn_nb.chapters", "vitbn_nb.chapters.fixed_lr.article")}
    found = lambda type_checking: _imported("vitbn_nb.publishing.x", path, modules, type_checking=type_checking)
    assert found(False) == {"vitbn_nb.chapters.fixed_lr.article"}
    assert found(True) == {"vitbn_nb.chapters", "vitbn_nb.chapters.fixed_lr.article"}


def test_no_import_circle_among_the_packages_modules():
    found = circles(import_graph())
    assert not found, "import circles (imports under `if TYPE_CHECKING:` not counted): " + "; ".join(
        " <-> ".join(sorted(circle)) for circle in found
    )


def test_the_circle_finder_finds_a_circle():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [{"a", "b", "c"}]


def test_the_cpu_profile_plans_nothing_that_needs_the_stacked_engine():
    planned = [c for chapter in chapters.names() for c in training.planned_runs(chapter, "cpu")]
    assert planned and not training.needs_device_check(planned)
    paper = [c for c in training.planned_runs("05_depth_study", "paper")]
    assert {c.engine for c in paper} == {"eager"}  # a CPU: the engine follows the device


def test_training_on_a_cpu_neither_imports_nor_runs_the_stacked_engine(tmp_path, mnist_ready):
    """Chapter 01 under smoke, trained through the train command's own function in a fresh interpreter."""
    script = (
        "import json, sys; from vitbn_nb import train; train.train('smoke', ['01'], log=lambda line: None); "
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('vitbn_nb'))))"
    )
    env = {**os.environ, "VITBN_RUNS_DIR": str(tmp_path / "runs"), "VITBN_DATA_DIR": str(mnist_ready)}
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    loaded = set(json.loads(done.stdout.strip().splitlines()[-1]))
    assert "vitbn_nb.train" in loaded and "vitbn_nb.engines.training" in loaded
    assert not loaded & {"vitbn_nb.engines.stack", "vitbn_nb.engines.check_device"}, loaded
    assert not (tmp_path / "runs" / ".device-checks").exists()
    assert chapters.settings("01_batchnorm_intro", "smoke").engine == "eager"


def test_the_store_keeps_runs_and_never_calls_training():
    """Training (``vitbn_nb.engines``) calls the store; the store imports no engine, so a run's settings go one way."""
    graph = import_graph(type_checking=True)
    found = sorted(
        f"{module} imports {target}"
        for module, targets in graph.items()
        if module.startswith("vitbn_nb.store")
        for target in targets
        if target.startswith("vitbn_nb.engines")
    )
    assert not found, "the store imports an engine:\n  " + "\n  ".join(found)


#: The subpackages whose imports sit at the top of a module: an import inside a function says why on its line or the
#: line above (a heavy or optional dependency, or a path a structure rule keeps clear), in a word or two.
TOP_IMPORTS = ("chapters", "judging", "bench")


def local_imports_without_a_reason(paths) -> list[str]:
    """``path:line`` of every import inside a function with no comment on its line or the line above."""
    found = set()
    for path in paths:
        lines = Path(path).read_text().splitlines()
        for function in ast.walk(ast.parse("\n".join(lines))):
            if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for node in ast.walk(function):
                    if isinstance(node, (ast.Import, ast.ImportFrom)):
                        above = lines[node.lineno - 2].strip() if node.lineno > 1 else ""
                        if "#" not in lines[node.lineno - 1] and not above.startswith("#"):
                            found.add(f"{path}:{node.lineno}")
    return sorted(found)


def test_an_import_inside_a_function_says_why():
    paths = [p for name in TOP_IMPORTS for p in sorted((PACKAGE / name).rglob("*.py"))]
    found = local_imports_without_a_reason(paths)
    assert not found, "move these imports to the top of their module, or say why not:\n  " + "\n  ".join(found)


def test_the_local_import_check_finds_an_import_with_no_reason(tmp_path):
    path = tmp_path / "x.py"
    path.write_text(
        "import os\n\ndef f():\n    import json\n\ndef g():\n    import csv  # heavy\n\n"
        "def h():\n    # optional: not installed everywhere\n    import sqlite3\n"
    )
    assert local_imports_without_a_reason([path]) == [f"{path}:4"]


#: A name a docstring or comment gives to a module, a function or a constant of the package.
DOTTED = re.compile(r"\bvitbn_nb(?:\.[A-Za-z_]\w*)+")
ROLE = re.compile(r":(?:mod|func|class|data|meth|attr):`~?(\.[.\w]+)`")


def _resolves(name: str) -> bool:
    """Whether ``vitbn_nb.a.b.c`` is a module of the package or a name one defines."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for part in parts[cut:]:
            if not hasattr(found, part):
                return False
            found = getattr(found, part)
        return True
    return False


def stale_names(text: str, module: str, package: str) -> list[str]:
    """The names in ``text`` (module ``module`` of ``package``) that name nothing the package holds: every
    ``vitbn_nb.…`` name, and every relative reference (``:func:`.judge.larger_lr```, read from the package or the
    module itself)."""
    names = DOTTED.findall(text)
    for relative in ROLE.findall(text):
        level = len(relative) - len(relative.lstrip("."))
        base = ".".join(package.split(".")[: len(package.split(".")) - level + 1])
        candidates = (f"{base}.{relative.lstrip('.')}", f"{module}.{relative.lstrip('.')}")
        names.append(next((c for c in candidates if _resolves(c)), candidates[0]))
    return [name for name in names if not _resolves(name)]


def _stale_in(paths, relative: bool = True) -> list[str]:
    found = []
    for path in paths:
        module = _module_name(path)
        package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
        text = path.read_text() if relative else "\n".join(DOTTED.findall(path.read_text()))
        found += [f"{path.relative_to(ROOT)}: {name}" for name in stale_names(text, module, package)]
    return found


def test_docstrings_name_modules_and_functions_that_exist():
    """Every ``vitbn_nb.…`` name in the package, and every relative reference in the subpackages of
    :data:`TOP_IMPORTS`, names a module or a name of the package (a move or a rename leaves none stale)."""
    found = _stale_in(sorted(PACKAGE.rglob("*.py")), relative=False)
    found += _stale_in([p for name in TOP_IMPORTS for p in sorted((PACKAGE / name).rglob("*.py"))])
    assert not found, "stale names:\n  " + "\n  ".join(sorted(set(found)))


def test_the_stale_name_check_finds_a_name_that_moved():
    module, package = "vitbn_nb.chapters.fixed_lr.study", "vitbn_nb.chapters.fixed_lr"
    assert stale_names("vitbn_nb.chapters.fixed_lr.lr_sweep, :func:`.judge.larger_lr`", module, package) == []
    text = "see vitbn_nb.studies.lr_sweep and :func:`.claims.larger_lr`"
    assert stale_names(text, module, package) == [
        "vitbn_nb.studies.lr_sweep",
        "vitbn_nb.chapters.fixed_lr.claims.larger_lr",
    ]


#: The book's operations: what it does with the science (the command line, the campaign, bundles, the GPU engine and
#: the device check, replays, the render, the README and Colab cell, the digit app, the MLflow mirror).
OPERATIONS = (
    "vitbn_nb.__main__",
    "vitbn_nb.campaign",
    "vitbn_nb.train",
    "vitbn_nb.app",
    "vitbn_nb.store.bundle",
    "vitbn_nb.store.tracking",
    "vitbn_nb.engines.stack",
    "vitbn_nb.engines.stacked_runs",
    "vitbn_nb.engines.check_device",
    "vitbn_nb.engines.replay",
    "vitbn_nb.publishing.book",
    "vitbn_nb.publishing.book_chapters",
    "vitbn_nb.publishing.book_html",
    "vitbn_nb.publishing.readme",
    "vitbn_nb.publishing.forest",
    "vitbn_nb.publishing.colab",
    "vitbn_nb.chapters.speed.command",
    "vitbn_nb.chapters.fixed_lr.subnormal_step",
    "vitbn_nb.chapters.bayes_opt.timing_stage",
)


def _is_operation(module: str) -> bool:
    return any(module == op or module.startswith(f"{op}.") for op in OPERATIONS)


def notebook_closure(graph: dict[str, set[str]], notebooks=None) -> set[str]:
    """Every module of the package the notebooks reach: their own imports, then everything those import (inside
    functions too), with every package ``__init__`` on the way."""
    paths = sorted((ROOT / "notebooks").glob("*.py")) if notebooks is None else notebooks
    todo = []
    for path in paths:
        for node in _executed_imports(ast.parse(Path(path).read_text()), type_checking=True):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            if isinstance(node, ast.ImportFrom):
                names += [f"{node.module}.{a.name}" for a in node.names]
            todo += [name for name in names if name in graph]
    seen: set[str] = set()
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        parts = module.split(".")
        todo += [".".join(parts[:i]) for i in range(1, len(parts)) if ".".join(parts[:i]) in graph]
        todo += graph[module]
    return seen


def test_nothing_a_notebook_imports_imports_the_operations():
    """What a notebook imports is the science (models, data, the engine, runs, judging, chapters and their figures):
    the operations sit above it, reached from it only by name (the stacked engine, the MLflow mirror)."""
    graph = import_graph(type_checking=True)
    closure = notebook_closure(graph)
    assert "vitbn_nb.engines.training" in closure and "vitbn_nb.chapters.depth_study.study" in closure
    found = sorted(module for module in closure if _is_operation(module))
    assert not found, "a notebook's imports reach the operations:\n  " + "\n  ".join(found)
    lines = lambda modules: sum(len(_path(m).read_text().splitlines()) for m in modules)
    print(f"the notebooks import {len(closure)} of {len(graph)} modules, {lines(closure):,} of {lines(graph):,} lines")


def _path(module: str) -> Path:
    path = ROOT.joinpath(*module.split("."))
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


def test_a_notebook_reads_committed_plans_and_never_derives_one():
    """A seed plan is derived once, from the records that existed before its runs, and committed; the chapters read
    the committed file, so the modules that derive and write plans stay out of what a notebook imports."""
    graph = import_graph(type_checking=True)
    writers = {m for m in graph if m.startswith("vitbn_nb.chapters.") and m.endswith("_plan")}
    assert writers == {
        "vitbn_nb.chapters.bayes_opt.protocol_plan",
        "vitbn_nb.chapters.depth_study.confirmation_plan",
        "vitbn_nb.chapters.fixed_lr.retime_plan",
        "vitbn_nb.chapters.bayes_opt.timing_plan",
    }
    assert not notebook_closure(graph) & writers


def test_the_closure_finder_follows_imports_into_the_operations(tmp_path):
    notebook = tmp_path / "nb.py"
    notebook.write_text("from vitbn_nb.chapters.three_things import study\n")
    graph = {
        "vitbn_nb": set(),
        "vitbn_nb.chapters": set(),
        "vitbn_nb.chapters.three_things": set(),
        "vitbn_nb.chapters.three_things.study": {"vitbn_nb.app.server"},
        "vitbn_nb.app": set(),
        "vitbn_nb.app.server": set(),
    }
    closure = notebook_closure(graph, [notebook])
    assert {"vitbn_nb.app", "vitbn_nb.app.server", "vitbn_nb"} <= closure
    assert [m for m in sorted(closure) if _is_operation(m)] == ["vitbn_nb.app", "vitbn_nb.app.server"]


#: The environment variables the package reads: each says where something lives (or that the committed records are
#: left out, or how often the store keeps an unfinished run); none carries a setting or a decision into training.
WHERE_THINGS_LIVE = {
    "VITBN_RUNS_DIR",
    "VITBN_DATA_DIR",
    "VITBN_FIGURES_DIR",
    "VITBN_BOOK_FIGURES_DIR",
    "VITBN_COMMITTED_RECORDS",
    "VITBN_DEVICE",
    "VITBN_CHECKPOINT_SECONDS",
}


def vitbn_variables(paths) -> dict[str, list[str]]:
    """Every ``VITBN_*`` name in the string literals of ``paths``, with the files that hold it."""
    found: dict[str, list[str]] = {}
    for path in paths:
        for node in ast.walk(ast.parse(Path(path).read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                for name in re.findall(r"\bVITBN_[A-Z][A-Z_]*[A-Z]\b", node.value):
                    found.setdefault(name, []).append(Path(path).name)
    return found


def test_environment_variables_say_only_where_things_live():
    found = vitbn_variables(sorted((ROOT / "vitbn_nb").rglob("*.py")))
    assert "VITBN_RUNS_DIR" in found
    others = {name: files for name, files in found.items() if name not in WHERE_THINGS_LIVE}
    assert not others, f"the package reads variables that carry settings or decisions: {others}"


def test_the_variable_check_finds_a_decision_carried_by_the_environment(tmp_path):
    module = tmp_path / "m.py"
    module.write_text('import os\n\ndef f():\n    return os.environ.get("VITBN_TRAIN") == "never"\n')
    assert set(vitbn_variables([module])) == {"VITBN_TRAIN"}
