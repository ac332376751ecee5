"""Chapter 03: article 1's Experiment 1 at three fixed lrs, as run (ViT d6 against BatchNorm models whose code computed
one block) and as written (all at depth 6), timed through article 1's pipeline; Figures 3-6 and Table 1."""

from __future__ import annotations

from dataclasses import dataclass, replace

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from ...engines import training
from ...judging import audit, power, verdicts
from ...judging.claims import protocol_scale
from ...judging.selection import require, shown_machine, shown_times
from ...publishing import figures, results
from ...store import runs
from ...store.runs import RunConfig
from .. import panels, planned
from . import article, lr_sweep, numbers, retime, subnormals
from . import plan as seed_plan
from .article import EPOCHS
from .judge import experiment1, fig6, larger_lr
from .numbers import MODELS, PAIRS, article_reported, configuration, which_of
from .settings import FixedLrSettings

__all__ = ["article_reported", "configuration"]  # the chapter reads them beside the views

#: Article 1 timed whole epochs through its own data pipeline; these runs do the same.
PIPELINE = "reference"
CONFIGURATION_TEXT = {
    "as run": "article 1 as run: ViT depth 6 vs ViTBNFFN / ViTBN depth 1 (their code ran one block)",
    "as written": "article 1 as written: all three at depth 6",
}


@dataclass(frozen=True)
class FixedLrResult(results.ChapterResult):
    """Chapter 03's runs, one row per run and epoch: the chapter's lrs (``table``), the sweep's depth-6 trio at every
    lr (``sweep``), and article 1's whole protocol at ``settings.full_protocol_lrs`` (None where it names no lr)."""

    settings: FixedLrSettings
    table: pd.DataFrame
    sweep: pd.DataFrame | None = None
    protocol_runs: pd.DataFrame | None = None


#: What article 1's whole protocol fixes: the ``paper`` defaults of these settings.
PROTOCOL = ("seeds", "epochs", "batch_size", "test_batch_size", "train_size", "test_size")


def article_protocol(settings: FixedLrSettings) -> FixedLrSettings:
    """``settings`` with article 1's whole protocol (the ``paper`` defaults of :data:`PROTOCOL`)."""
    paper = FixedLrSettings()
    return replace(settings, **{name: getattr(paper, name) for name in PROTOCOL})


def _protocol_lrs(settings: FixedLrSettings) -> tuple[float, ...]:
    """The full-protocol lrs that are the chapter's own and whose runs differ from the profile's."""
    if settings == article_protocol(settings):
        return ()
    lrs = settings.full_protocol_lrs or ()
    unknown = [lr for lr in lrs if not np.isclose(lr, settings.lrs).any()]
    if unknown:
        raise ValueError(f"full_protocol_lrs={unknown!r} are not among the chapter's lrs {settings.lrs!r}")
    return tuple(lrs)


def plan(settings: FixedLrSettings) -> list[RunConfig]:
    """Both configurations' runs per lr and seed (ViT d6 serves both), the sweep's, then article 1's whole protocol
    at ``full_protocol_lrs`` (built as the ``paper`` plan builds them, so they are its runs)."""
    return _own_plan(settings) + lr_sweep.configs(article_protocol(settings), _protocol_lrs(settings), PAIRS, PIPELINE)


def _own_plan(settings: FixedLrSettings) -> list[RunConfig]:
    return lr_sweep.configs(settings, settings.lrs, PAIRS, PIPELINE) + lr_sweep.plan(settings, PIPELINE)


def run(settings: FixedLrSettings, force: bool = False) -> FixedLrResult:
    """Train (or fetch) every run; the sweep's lrs apart, the whole protocol's apart from the profile's."""
    trained = training.train_all(planned(settings, plan), force=force, train=settings.train)
    own = len(_own_plan(settings))
    # a run retimed on the retime plan's machine reads as its replica (the same numbers, times from one machine)
    table, protocol_runs = (
        retime.retimed(runs.load_table(trained[:own])),
        retime.retimed(runs.load_table(trained[own:])),
    )
    return FixedLrResult(
        settings,
        table[_at_any(table, settings.lrs)].reset_index(drop=True),
        lr_sweep.sweep_rows(table).reset_index(drop=True),
        protocol_runs.reset_index(drop=True) if len(protocol_runs) else None,
    )


def at_lr(result: FixedLrResult, lr: float) -> tuple[pd.DataFrame, str]:
    """The runs at ``lr`` its outputs read, and their profile: the whole protocol's (``paper``) where the settings
    take it at ``lr`` and the result holds them, else the profile's own (never a mix)."""
    if result.protocol_runs is not None and np.isclose(lr, _protocol_lrs(result.settings)).any():
        return require(result.protocol_runs, lr=float(lr)), "paper"
    return require(result.table, lr=float(lr)), result.profile


def _at_any(table: pd.DataFrame, lrs) -> np.ndarray:
    return np.isclose(table["lr"].to_numpy()[:, None], np.asarray(lrs)[None, :]).any(axis=1)


def scale(runs_at_lr: pd.DataFrame, profile: str) -> str:
    """An output's own scale, for its caption and manifest: 'paper: 18,000 of the article's 18,000 steps'."""
    return f"{profile}: {protocol_scale(runs_at_lr, EPOCHS)}"


def evidence(result: FixedLrResult) -> pd.DataFrame:
    """The runs each lr's claims are judged over: the whole protocol's at ``full_protocol_lrs``, else the profile's."""
    lrs = _protocol_lrs(result.settings) if result.protocol_runs is not None else ()
    if not lrs:
        return result.table
    taken = _at_any(result.table, lrs)
    return pd.concat([result.table[~taken], *(at_lr(result, lr)[0] for lr in lrs)], ignore_index=True)


def evidence_scale(result: FixedLrResult) -> str:
    """Per lr, the scale of the runs :func:`evidence` takes."""
    judged = evidence(result)
    held = [lr for lr in result.settings.lrs if np.isclose(judged["lr"], lr).any()]
    return "; ".join(f"lr {lr:g} {scale(*at_lr(result, lr))}" for lr in held)


def overview(settings: FixedLrSettings) -> pd.DataFrame:
    """What the profile trains: one row per model and depth, with the configurations it belongs to."""
    return pd.DataFrame(
        [
            {
                "model": model,
                "depth": depth,
                "configuration": which_of(model, depth),
                "dataset": "MNIST (no augmentation)",
                "timed through": "article 1's pipeline (DataLoader, ToTensor)",
                "learning rates": ", ".join(f"{lr:g}" for lr in settings.lrs),
                "article's whole protocol at": ", ".join(f"lr {lr:g}" for lr in _protocol_lrs(settings)) or "-",
                "epochs": settings.epochs,
                "batch (train / test)": f"{settings.batch_size} / {settings.test_batch_size}",
                "train images": panels.images(settings.train_size, 60000),
                "test images": panels.images(settings.test_size, 10000),
                "seeds": settings.seeds,
                "runs": len(settings.lrs) * settings.seeds
                + len(_protocol_lrs(settings)) * article_protocol(settings).seeds,
            }
            for model, depth in PAIRS
        ]
    )


def _label(model: str, depth) -> str:
    return f"{model} (depth {int(depth)})"


def _names(lr: float, which: str = "as run") -> tuple[str, str]:
    """(file name, reproduces id) of the figure at ``lr``: article 1's figure as run, the book's own as written."""
    fig = numbers.article_at(lr).figure.replace("Fig ", "fig") or None
    name = f"fixed_lr_lr{lr:g}" if fig is None else f"article1_{fig}"
    if which != "as run":
        return f"{name}_as_written", f"new/{name}_as_written"
    return name, f"new/{name}" if fig is None else f"article1/{fig}"


def _footer_text(which: str) -> str:
    return CONFIGURATION_TEXT[which] + "; timed through article 1's pipeline (DataLoader over ToTensor MNIST)"


def four_panel_figure(result: FixedLrResult, lr: float, which: str = "as run"):
    """Train/test time per epoch, training loss and test accuracy at ``lr`` of one configuration: as run, article 1's
    Figure 3, 4 or 5; as written, the comparison the article describes."""
    at, profile = at_lr(result, lr)
    figures.use_style()
    subset = configuration(at, which)
    if subset.empty:
        raise ValueError(f"lr={lr!r} has no runs of the configuration {which!r} in this table")
    name, reproduces = _names(lr, which)
    what = (
        f"Article 1 {reproduces.split('/')[1].replace('fig', 'Fig ')}"
        if which == "as run"
        else "Article 1 as written (a new comparison, not in the article's figures)"
    )
    machine = shown_machine(at)  # the lr's machine, whose seconds its numbers table shows too
    fig = figures.four_panel(
        subset,
        title=f"{what} · MNIST, lr = {lr:g}, Adam, batch 100\n{CONFIGURATION_TEXT[which]}",
        label=lambda model, group: _label(model, group["depth"].iloc[0]),
        machine=machine,
    )
    if subset["diverged"].astype(bool).any():
        # lower left: a falling loss leaves it empty, and the × of a diverged run sits at the top edge
        where = dict(transform=fig.axes[2].transAxes, ha="left", va="bottom", fontsize=9)
        fig.axes[2].text(0.02, 0.03, "× = loss became NaN/inf (run stopped there)", **where)
    scaled = scale(subset, profile)
    caption = (
        f"Experiment 1 at lr {lr:g} ({scaled}), {_footer_text(which)}; {figures.spread_label(subset)}; "
        f"{results.times_left_out(subset, machine)}; × marks a diverged run"
    )
    return figures.save_figure(
        fig, name, result, reproduces=reproduces, caption=caption, runs=subset, profile=profile, extra={"scale": scaled}
    )


def _save_at_lr(result: FixedLrResult, lr: float, view, suffix: str, caption):
    """``view(runs at lr, lr)`` saved as the lr's ``suffix`` table, captioned ``caption(runs at lr)``."""
    name, reproduces = _names(lr)
    subset, profile = at_lr(result, lr)
    scaled = scale(subset, profile)
    about = dict(reproduces=reproduces, caption=f"{caption(subset)} ({scaled})", runs=subset, profile=profile)
    return figures.save_table(view(subset, lr), f"{name}_{suffix}", result, **about, extra={"scale": scaled})


def comparison_table(result: FixedLrResult, lr: float):
    """The article's numbers beside this run's at ``lr``, both configurations, saved; the caption is the verdict."""
    return _save_at_lr(result, lr, numbers.comparison, "vs_article", lambda at: numbers.statement(at, lr))


def numbers_table(result: FixedLrResult, lr: float):
    """This run's numbers at ``lr`` (times per epoch, ratios, accuracy, stability), both configurations, saved."""
    caption = lambda at: (
        f"This run at lr {lr:g}: {figures.interval_label(at)}; ratios r = T(ViT d6) / T(model) within "
        "each configuration (as run: BN models d1; as written: d6), each seed's pair on one machine; timed through "
        f"article 1's pipeline{results.machine_note(at)}"
    )
    return _save_at_lr(result, lr, numbers.this_run, "numbers", caption)


def pace_table(result: FixedLrResult, lr: float):
    """Each run's fastest and slowest epoch at ``lr``, and its final step timed with subnormals kept and flushed."""
    caption = lambda at: (
        f"The pace of each run at lr {lr:g}: its fastest and slowest training epoch (epochs timed beside other work "
        "left out; a run resumed on another machine compared on the one that timed most of it) and its final "
        "model's step with subnormal floats kept (PyTorch's default, which every run here "
        f"trained with) and flushed to zero: {subnormals.TIMED}; {subnormals.measured_on(at)}"
    )
    return _save_at_lr(result, lr, lambda at, lr: subnormals.pace(at), "pace", caption)


def across_lrs(result: FixedLrResult) -> tuple[pd.DataFrame, str]:
    """The runs the outputs across lrs (Table 1, Figure 6) read, and their profile: article 1's whole protocol once
    it is held at every lr of the chapter, else the profile's own runs (never a mix of scales)."""
    lrs = _protocol_lrs(result.settings) if result.protocol_runs is not None else ()
    if lrs and all(np.isclose(lr, lrs).any() for lr in result.settings.lrs):
        return evidence(result), "paper"
    return result.table, result.profile


def time_per_lr_figure(result: FixedLrResult):
    """Article 1's Figure 6: per model, training time per epoch at each lr (model_i = i-th lr), as run."""
    figures.use_style()
    everything, profile = across_lrs(result)
    table = configuration(everything, "as run")
    # an epoch timed beside other work or on another machine has no time here: the curve is the mean of those left
    timed = shown_times(table)
    lrs = sorted(table["lr"].unique())
    styles = {lr: panels.LR_STYLES[i % len(panels.LR_STYLES)] for i, lr in enumerate(lrs)}
    present = [m for m in MODELS if m in set(table["model"])]
    fig, axes = plt.subplots(1, len(present), figsize=(5 * len(present), 4.2), squeeze=False)
    for ax, model in zip(axes.flat, present):
        one = timed[timed["model"] == model]
        panels.lr_curves(
            ax, one, model, styles, y="train_seconds", label=lambda i, lr, model=model: f"{model}_{i}: lr {lr:g}"
        )
        ax.set(title=_label(model, one["depth"].iloc[0]), xlabel="epoch", ylabel="train time per epoch (s)")
        ax.set_ylim(bottom=0)
        figures.integer_epochs(ax)
        ax.legend(fontsize=9)
    fig.suptitle(
        "Article 1 Fig 6 · training time per epoch at each learning rate, per model\n" + CONFIGURATION_TEXT["as run"]
    )
    caption = (
        "Training time per epoch vs epoch for each model at the three learning rates (model_i = i-th lr); "
        f"{_footer_text('as run')}; {figures.spread_label(table)}; {results.times_left_out(table)}"
    )
    about = dict(reproduces="article1/fig6", caption=caption, runs=table, profile=profile)
    return figures.save_figure(fig, "article1_fig6", result, **about)


def time_per_lr_table(result: FixedLrResult):
    """Figure 6's numbers (as run): mean training time per epoch per model and lr, the verdict as caption."""
    everything, profile = across_lrs(result)
    table = configuration(everything, "as run")
    about = dict(reproduces="article1/fig6", caption=numbers.time_per_lr_statement(table), precision=3)
    about |= dict(runs=table, profile=profile)
    return figures.save_table(numbers.lr_variation(table), "article1_fig6_numbers", result, **about)


def ratios_table(result: FixedLrResult):
    """Article 1's Table 1 for both configurations (r_t, r_v, g_t, g_v per BN model and lr) beside the article's."""
    table, profile = across_lrs(result)
    busy = results.contention(table)
    left_out = (
        f" {busy} were timed beside other work: left out of the ratios." if not busy.startswith(("0/", "not")) else ""
    )
    caption = (
        f"{numbers.speedups_statement(table)}{left_out} r = T(ViT d6) / T(model) (mean time per epoch), g = 1 − 1/r; "
        "as run = BN models d1 (what article 1's code computed), as written = d6; timed through article 1's pipeline; "
        "the article's g are derived from its quoted r"
    )
    about = dict(reproduces="article1/table1", caption=caption, runs=table, profile=profile)
    return figures.save_table(numbers.speedups(table), "article1_table1", result, **about)


def audit_table(reference: audit.ReferenceAudit, settings: FixedLrSettings):
    """``new/reference_checkpoint_audit``: per reference checkpoint, which encoder blocks ever trained."""
    caption = (
        "Reference checkpoints audited with vitbn_nb.judging.audit.block_usage: a block whose norms hold their initial "
        "values and whose BatchNorm counted 0 steps never trained"
    )
    return _audit_table(reference, settings, reference.summary(), "reference_checkpoint_audit", caption)


def audit_scores_table(reference: audit.ReferenceAudit, settings: FixedLrSettings):
    """``new/reference_checkpoint_scores``: the reference checkpoints scored on MNIST with the book's classes."""
    caption = (
        "Reference checkpoints loaded into the book's models (qkv_bias where they have one; 'blocks loaded' = the "
        "depth built) and scored on the 10,000 MNIST test images, eval mode, ToTensor scaling"
    )
    return _audit_table(reference, settings, reference.scores, "reference_checkpoint_scores", caption)


def _audit_table(reference: audit.ReferenceAudit, settings: FixedLrSettings, frame, name: str, caption: str):
    """Saved with what the audit read: the reference checkpoints themselves, or the audit recorded from them."""
    if reference.live:
        reads = f"the reference checkpoints of github.com/{audit.REFERENCE_REPOSITORY}, downloaded as the chapter ran"
    else:
        reads = f"the audit recorded from the reference checkpoints (vitbn_nb/judging/{audit.RECORDED.name})"
    about = dict(reproduces=f"new/{name}", caption=f"{caption}; source: {reference.source}", reads=reads)
    return figures.save_table(frame, f"new_{name}", results.ChapterResult(settings), **about)


#: Each settings' seed plan, computed once per process (it reads every record finished before the plan).
_PLANS: dict[str, tuple] = {}


def _seed_plan(settings: FixedLrSettings) -> tuple[pd.DataFrame, list, pd.DataFrame]:
    """(the runs the plan read, article 1's protocol runs, the plan's rows) under ``settings``."""
    if repr(settings) not in _PLANS:
        read = runs.finished_before(seed_plan.written())
        protocol = lr_sweep.configs(article_protocol(settings), tuple(article.EXPERIMENT1), PAIRS, PIPELINE)
        _PLANS[repr(settings)] = read, protocol, seed_plan.seed_plan(settings, protocol, read)
    return _PLANS[repr(settings)]


def seed_plan_table(result: FixedLrResult):
    """The seed plan behind the chapter's settings (:mod:`.plan`): per claim, the seeds planned and why; saved."""
    read, protocol, frame = _seed_plan(result.settings)
    caption = seed_plan.plan_caption(frame, read, protocol)
    runs_read = read[read["pipeline"] == "reference"] if len(read) else None
    return figures.save_table(
        frame, "03_seed_plan", result, reproduces="new/seed_plan", caption=caption, runs=runs_read
    )


def claims_table(result):
    """Experiment 1's claims (both configurations) and article 1's conclusion on larger lrs (over the sweep), judged."""
    judged = evidence(result)
    found = experiment1(judged)
    if result.sweep is not None and not result.sweep.empty:
        found += larger_lr(result.sweep, result.protocol_runs)
    found += fig6(across_lrs(result)[0])
    found = power.with_planned_power(found, _seed_plan(result.settings)[2])
    if result.protocol_runs is None:  # one profile's runs: its stamp says their scale
        return figures.save_claims(result, found, article.findings())
    # the sweep's runs at a rate whose whole-protocol runs are held are not read (larger_lr reads those instead)
    sweep = result.sweep[~_at_any(result.sweep, _protocol_lrs(result.settings))] if result.sweep is not None else None
    read = [*results.run_ids_of(judged), *results.run_ids_of(sweep)]
    held = results.profiles_read(result.profile, result.settings.full_protocol_lrs)
    return figures.save_claims(
        result, found, article.findings(), scale=evidence_scale(result), runs=read, profiles_read=held
    )


def collapse_counts(result: FixedLrResult) -> pd.DataFrame:
    """Per model, depth and lr: the runs that became unstable (``verdicts.collapsed``), with the count's exact 95 %
    interval, and how many of them recovered."""
    rows = []
    for (model, depth, lr), runs_ in evidence(result).groupby(["model", "depth", "lr"]):
        curves = [run for _, run in runs_.groupby("run_id")]
        collapsed = sum(verdicts.collapsed(run) for run in curves)
        fell = sum(verdicts.collapsed(run) and verdicts.fall(run).recovered for run in curves)
        low, high = verdicts.rate_interval(collapsed, len(curves))
        rows.append(
            dict(model=model, depth=int(depth), lr=lr, runs=len(curves), collapsed=collapsed, low=low, high=high)
            | dict(recovered=fell, scale=protocol_scale(runs_, EPOCHS))
        )
    return pd.DataFrame(rows)


def instability_note(result: FixedLrResult):
    """:func:`collapse_counts` in words."""
    counts = collapse_counts(result)
    rule = (
        f"a run becomes unstable when its accuracy falls at least {verdicts.COLLAPSE_PT:g} points below its best so "
        "far at any epoch, whatever its ending, or its loss becomes non-finite"
    )
    parts = [
        f"**{row.model} d{row.depth} at lr {row.lr:g}**: {row.collapsed} of {row.runs} "
        f"[{row.low:.0f}, {row.high:.0f} %]" + (f", {row.recovered} of them recovered" if row.recovered else "")
        for row in counts.itertuples()
        if row.collapsed or row.recovered
    ]
    if not parts:
        return panels.markdown(f"No run became unstable ({rule}).")
    return panels.markdown(
        f"Unstable runs counted ({rule}; each count with its exact 95 % interval; the claims table lists every run's "
        "largest fall): "
        + "; ".join(parts)
        + "; no other configuration has one. Article 1 reports a breakdown of ViT near epoch "
        f"{article.EXPERIMENT1[0.01].vit_unstable_epoch} while ViTBNFFN and ViTBN stay stable: models it describes "
        "at depth 6, whose code computed one block (the audit above). The claims table compares the counts by "
        "Fisher's exact test, only over runs as long as article 1's."
    )
