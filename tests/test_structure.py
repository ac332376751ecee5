"""How the package is organised: imports point one way (no import circle), and the CPU path never loads the stacked
engine."""

import ast
import json
import os
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


def _executed_imports(tree: ast.Module):
    """Every import statement, at the top or inside a function, except those under ``if TYPE_CHECKING:``."""
    skipped = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", getattr(node.test, "attr", None)) == "TYPE_CHECKING":
            skipped |= {id(n) for child in node.body for n in ast.walk(child)}
    return [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom)) and id(n) not in skipped]


def import_graph() -> dict[str, set[str]]:
    """Module -> the package's modules it imports (a submodule's import of its own package is how Python works, not
    an arrow: ``from . import engine`` points at ``engines.engine``)."""
    modules = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph = {name: set() for name in modules}
    for name, path in modules.items():
        package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        for node in _executed_imports(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                base = package[: len(package) - node.level + 1] if node.level else []
                module = ".".join(base + ([node.module] if node.module else []))
                subs = [f"{module}.{alias.name}" for alias in node.names if f"{module}.{alias.name}" in modules]
                targets = subs + ([module] if len(subs) < len(node.names) else [])
            graph[name] |= {t for t in targets if t in modules and t != name}
    return graph


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


def test_no_import_circle_among_the_packages_modules():
    assert not circles(import_graph())


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
    assert "vitbn_nb.train" in loaded and "vitbn_nb.store.runs" in loaded
    assert not loaded & {"vitbn_nb.engines.stack", "vitbn_nb.engines.check_device"}, loaded
    assert not (tmp_path / "runs" / ".device-checks").exists()
    assert chapters.settings("01_batchnorm_intro", "smoke").engine == "eager"
