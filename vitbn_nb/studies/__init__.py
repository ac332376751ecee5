"""One module per chapter: what the chapter trains, and the figures and tables it shows.

Every chapter has the same shape: ``plan(settings)`` lists what it will train without training
anything, ``run(settings, force=False)`` trains it (or reads it back from the run store) and
returns one result object, and every figure, table and verdict is a view of that result.
A chapter notebook calls these helpers one per cell; nothing here imports a notebook.
"""

from __future__ import annotations

from typing import Any


class Plan(list):
    """The run configurations a chapter trains (a list), plus the optimisations that choose further runs.

    ``optimisations`` are ``hpo.Study`` objects; ``then`` says in words what their best trials lead to.
    """

    def __init__(self, configs=(), *, optimisations: list[Any] | None = None, then: str = ""):
        super().__init__(configs)
        self.optimisations = list(optimisations or [])
        self.then = then
