"""``python -m vitbn_nb plans stamp | check``: read from git when each plan of :data:`vitbn_nb.judging.plans.PLANS`
was committed, and keep it in ``figures/plan_commits.json`` (committed, so a checkout without history labels its
verdicts alike); ``check`` says whether the committed stamps still agree with git."""

from __future__ import annotations

import subprocess

from .. import atomic
from ..judging import plans
from ..paths import book_figures_dir


class StampError(RuntimeError):
    """A plan git cannot place: not committed, edited since, or a named commit that is not in this history."""


def _git(*args: str) -> str:
    done = subprocess.run(["git", *args], cwd=plans.ROOT, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise StampError(f"git {' '.join(args)}: {done.stderr.strip() or 'failed'}")
    return done.stdout.strip()


def read(plan: plans.Plan) -> dict:
    """``plan``'s commit and its time, from git."""
    if plan.fixed_in is not None:
        commit = _git("rev-parse", "--verify", f"{plan.fixed_in}^{{commit}}")
        try:
            _git("merge-base", "--is-ancestor", commit, "HEAD")
            _git("cat-file", "-e", f"{commit}:{plan.file}")
        except StampError:
            raise StampError(
                f"plan {plan.name}: commit {plan.fixed_in} does not hold {plan.file} in this history"
            ) from None
        return {"commit": commit, "committed": _git("show", "-s", "--format=%cI", commit), "file": plan.file}
    if _git("status", "--porcelain", "--", plan.file):
        raise StampError(f"plan {plan.name}: {plan.file} has changes git has not committed; commit it first")
    line = _git("log", "-1", "--format=%H %cI", "--", plan.file)
    if not line:
        raise StampError(f"plan {plan.name}: {plan.file} was never committed; commit it first")
    commit, when = line.split()
    return {"commit": commit, "committed": when, "file": plan.file, "sha256": plan.digest()}


def stamp() -> dict:
    """Every plan's stamp read from git and written to the committed stamps file; returns them."""
    found = {plan.name: read(plan) for plan in plans.PLANS}
    atomic.write_json(book_figures_dir() / plans.STAMPS, found)
    plans.stamps.cache_clear()
    return found


def check() -> list[str]:
    """Where the committed stamps and git disagree, in words (empty: they agree)."""
    kept, problems = plans.stamps(), []
    for plan in plans.PLANS:
        try:
            now = read(plan)
        except StampError as error:
            problems.append(str(error))
            continue
        if kept.get(plan.name) != now:
            problems.append(f"plan {plan.name}: the stamp in figures/{plans.STAMPS} is not git's {now['committed']}")
    return problems
