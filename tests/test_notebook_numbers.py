"""A chapter's notebook takes every protocol number (a learning rate, a fraction, a size) from its settings or its
article's data: no code cell types one. Read with plain ``ast`` over the cells jupytext reads from ``NN_name.py``."""

import ast
from pathlib import Path

import jupytext
import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parent.parent / "notebooks").glob("[0-9][0-9]_*.py"))


def typed_numbers(source: str) -> list[float]:
    """The numbers a code cell types, save the small whole numbers that index a sequence (``settings.lrs[0]``)."""
    return [
        node.value
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Constant)
        and isinstance(node.value, int | float)
        and not isinstance(node.value, bool)
        and not (isinstance(node.value, int) and -1 <= node.value <= 1)
    ]


@pytest.mark.skipif(not NOTEBOOKS, reason="notebooks/ holds no chapters yet")
@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda path: path.stem)
def test_no_notebook_cell_types_a_protocol_number(notebook):
    cells = [cell.source for cell in jupytext.read(notebook).cells if cell.cell_type == "code"]
    typed = {source.splitlines()[0]: found for source in cells if (found := typed_numbers(source))}
    assert not typed, f"{notebook.name}: take these from the settings or the article's data: {typed}"


def test_the_check_finds_a_typed_learning_rate():
    assert typed_numbers('fixed_lr.four_panel_figure(result, 0.0005, "as run")') == [0.0005]
    assert typed_numbers("figure(result, settings.lrs[0]); summary(result, settings.lrs[-1])") == []
