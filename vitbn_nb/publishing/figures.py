"""Figure style, saving, and the manifest of every output: a footer on each figure (profile, hardware, date), an entry
in ``figures/manifest.json`` (what it reproduces, provenance, run ids, the function that drew it) and a line under it
naming that function and the run records it read, so that every number is one hop from its source."""

from __future__ import annotations

import datetime as dt
import html
import json
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
from filelock import FileLock
from matplotlib.colors import to_rgb
from matplotlib.ticker import FuncFormatter, LogFormatter, MaxNLocator

from .. import atomic, paths
from ..judging import plans, verdicts
from ..judging.claims import table as claims_table
from ..judging.selection import TIME_COLUMNS, shown_times
from ..models import CARDS
from ..paths import book_figures_dir, figures_dir
from ..store import runs as store_runs
from ..store.run_folder import trained_until
from ..system import hardware, hardware_label, versions
from .results import run_ids_of, spreads_as_numbers

#: Where the repository keeps the published outputs, and a copy of each run's record, ``<run id>/record.json``.
FIGURES = "figures"
RECORDS = f"{FIGURES}/records"
#: More run records than this fold under their line (opened with a click), which alone stays in view.
SHOWN_RECORDS = 6


def use_style() -> None:
    sns.set_theme(context="notebook", style="whitegrid", palette=[card.color for card in CARDS.values()])
    plt.rcParams.update(
        {
            "figure.dpi": 110,
            "savefig.dpi": 150,
            "savefig.bbox": "tight",
            "axes.titleweight": "bold",
            "legend.frameon": False,
            "figure.constrained_layout.use": True,
            "svg.hashsalt": "vitbn-book",  # the SVG's element ids: the same figure, the same file
        }
    )


def color(model: str):
    """The model's colour in every figure (its card's), None for a name that is no model."""
    return card.color if (card := CARDS.get(model)) is not None else None


def darker(color_, amount: float):
    """``color_`` darkened towards black by ``amount`` (0 = unchanged): one model, several settings."""
    return tuple(c * (1 - amount) for c in to_rgb(color_))


def today() -> str:
    return dt.date.today().isoformat()


def stamp(profile: str, run_ids=(), made=None) -> str:
    """Every output's footer: the profile, the machines that trained and timed its runs and the day the last finished,
    read from the runs' records so that it is the same wherever it is rendered. An output of no runs names the machine
    and day that made it: ``made`` (its published entry's ``hardware`` and ``date`` where it is that output again),
    else this machine and today."""
    run_ids = list(run_ids)  # a list, a set or a pandas column
    parts = [f"profile: {profile}"]
    for verb, machines in (("trained", store_runs.trained_on(run_ids)), ("timed", store_runs.timed_on(run_ids))):
        if machines:
            parts.append(f"{verb} on " + ", ".join(f"{n} ({c} run{'s' * (c != 1)})" for n, c in machines.items()))
    if len(parts) == 1:
        return " | ".join([*parts, *(made or (hardware_label(), today()))])
    return " | ".join([*parts, f"runs up to {trained_until(run_ids) or today()}"])


def _manifest_lock():
    """The manifest's lock, held until the ``with`` ends; a read-only figures folder raises one line with its fix."""
    path = figures_dir() / ".manifest.lock"
    try:
        return FileLock(path).acquire()
    except OSError as error:
        raise atomic.WriteError(
            f"{path} could not be written ({error.strerror}); {atomic.write_fix(path, error)}"
        ) from None


def read_manifest() -> dict:
    path = figures_dir() / "manifest.json"
    return json.loads(path.read_text()) if path.exists() else {"outputs": {}}


#: What a render writes of itself into an output's entry, not of the output: an output whose files and other fields
#: are those already published keeps its published entry, so a render that changes no number changes no file.
RENDER_FIELDS = ("hardware", "device", "date", "torch", "drawn_by", "book_run")


def _published_entry(name: str) -> dict | None:
    """The published manifest's entry of ``name``; None where there is none, or where outputs are written in place
    (nothing to compare with)."""
    published = book_figures_dir()
    if published.resolve() == figures_dir().resolve():
        return None
    try:
        old = json.loads((published / "manifest.json").read_text())["outputs"].get(name)
    except (OSError, ValueError, KeyError, AttributeError):
        return None
    return old if isinstance(old, dict) else None


def _made(entry: dict | None):
    """The machine and day an entry of no runs names in its footer (for :func:`stamp`); None where it lacks them."""
    if not entry or entry.get("run_ids") or not entry.get("hardware") or not entry.get("date"):
        return None
    return entry["hardware"], entry["date"]


def _unchanged(name: str, files: list[Path], entry: dict) -> dict:
    """``entry``, or the published one of ``name`` where the output is the same (its files byte for byte, its entry
    but for :data:`RENDER_FIELDS`)."""
    old, published = _published_entry(name), book_figures_dir()
    if old is None or any(old.get(k) != entry.get(k) for k in {*entry, *old} - {*RENDER_FIELDS}):
        return entry
    same = all((published / f.name).is_file() and (published / f.name).read_bytes() == f.read_bytes() for f in files)
    return old if same else entry


def _entry(
    files, kind, result, run_ids, *, reproduces: str, caption: str, reads="", extra=None, profile=None, made=None
) -> dict:
    """An output's manifest entry (``profile``: its runs' own, where not the result's; ``made``: the machine and day of
    an output of no runs, where not this machine and today)."""
    hardware_, date = made or (hardware_label(), today())
    return {
        "kind": kind,
        "files": [f.name for f in files],
        "chapter": result.chapter,
        "reproduces": reproduces,
        "caption": caption,
        "profile": profile or result.profile,
        "hardware": hardware_,
        "device": hardware()["device"],
        "trained_on": store_runs.trained_on(list(run_ids)),
        "date": date,
        # the day the data ends, kept here so that a page written from the manifest alone (the README) names it
        **({"runs_up_to": until} if (until := trained_until(run_ids)) else {}),
        "torch": versions().get("torch"),
        "run_ids": sorted(set(run_ids)),
        "drawn_by": drawer(),
        **({"reads": reads} if reads else {}),
        "book_run": None,  # named by the book runner at publishing (:func:`vitbn_nb.publishing.book._stamp_book_run`)
        **(extra or {}),
    }


def _record(name: str, files: list[Path], entry: dict) -> dict:
    """List an output in the manifest: ``entry``, or its published one where the output is the same; that entry."""
    entry = _unchanged(name, files, entry)
    with _manifest_lock():
        manifest = read_manifest()
        manifest["outputs"] = dict(sorted({**manifest["outputs"], name: entry}.items()))
        atomic.write_json(figures_dir() / "manifest.json", manifest)
    return entry


def drawer() -> str:
    """``module.function`` that drew the output being saved: the first public caller outside the savers (a helper
    names the function a chapter calls; a notebook cell, ``__main__``)."""
    frame = sys._getframe(1)
    while frame.f_globals.get("__name__") == __name__:
        frame = frame.f_back
    caller = frame
    while frame is not None and frame.f_code.co_name.startswith(("_", "<")) and frame.f_code.co_name != "<module>":
        frame = frame.f_back
    frame = frame or caller
    module, name = frame.f_globals.get("__name__", "?"), frame.f_code.co_qualname
    return module if name == "<module>" else f"{module}.{name}"


def record_path(run_id: str) -> str:
    return f"{RECORDS}/{run_id}/record.json"


def records_address() -> str:
    """The repository's files on GitHub when ``[tool.vitbn-book]`` names it; else empty (lines give paths)."""
    try:
        repository = paths.published_repository()["repository"]
    except FileNotFoundError:  # an installed package (Colab) has no pyproject.toml to read
        return ""
    return f"{repository}/blob/main" if repository else ""


@dataclass(frozen=True)
class SourceLine:
    """The line under a saved output: the function that drew it and the run records (or else what) it read."""

    drawn_by: str
    run_ids: tuple[str, ...]
    reads: str = ""
    address: str = ""
    #: The CSV of the rows a figure was drawn from (beside it in ``figures/``), or ''.
    data: str = ""

    @classmethod
    def of(cls, entry: dict) -> SourceLine:
        return cls(
            entry["drawn_by"], tuple(entry["run_ids"]), entry.get("reads", ""), records_address(), entry.get("data", "")
        )

    def _data(self, link, code) -> str:
        if not self.data:
            return ""
        path = f"{FIGURES}/{self.data}"
        return f" Its data: {link(f'{self.address}/{path}', self.data) if self.address else code(path)}."

    def _head(self, code) -> str:
        count = len(self.run_ids)
        if not count:
            return f"Drawn by {code(self.drawn_by)} from " + (f"{self.reads} (no runs)" if self.reads else "no runs")
        also = f"{self.reads} and " if self.reads else ""
        return f"Drawn by {code(self.drawn_by)} from {also}{count} run record{'s' * (count != 1)}"

    def _records(self, link, code) -> str:
        if self.address:
            return ", ".join(link(f"{self.address}/{record_path(i)}", i) for i in self.run_ids)
        return ", ".join(code(record_path(i)) for i in self.run_ids)

    def __str__(self) -> str:
        link, code = (lambda url, label: f"[{label}]({url})"), (lambda text: f"`{text}`")
        head, data = self._head(code), self._data(link, code)
        if not self.run_ids:
            return head + "." + data
        return f"{head}: {self._records(link, code)}.{data}"

    __repr__ = __str__

    def _repr_html_(self) -> str:
        style = 'style="font-size: 85%; color: #555; margin: 0.2em 0 1em"'
        code = lambda text: f"<code>{html.escape(text)}</code>"
        head = replace(self, reads=html.escape(self.reads))._head(code)
        link = lambda url, label: f'<a href="{html.escape(url)}">{html.escape(label)}</a>'
        data = self._data(link, code)
        if not self.run_ids:
            return f'<p class="vitbn-source" {style}>{head}.{data}</p>'
        records = self._records(link, code)
        if len(self.run_ids) <= SHOWN_RECORDS:
            return f'<p class="vitbn-source" {style}>{head}: {records}.{data}</p>'
        return f'<details class="vitbn-source" {style}><summary>{head}.{data}</summary>{records}.</details>'


@dataclass(frozen=True)
class Saved:
    """A saved figure or table as a notebook shows it: the output, and its source line under it."""

    output: object
    source: SourceLine

    def _ipython_display_(self) -> None:
        from IPython.display import display

        display(self.output, self.source)


def _footer(fig, text: str):
    """``text`` under everything the figure draws, right-aligned, broken between its `` | `` parts to fit its width;
    the text it placed."""
    fig.canvas.draw()  # the layout settles, then stays: the footer goes below what it placed
    for legend in fig.legends:
        # A figure legend sits on the figure's edge, which saving with bbox "tight" moves down past the footer;
        # pinned to the figure's own coordinates it stays where the layout put it.
        legend.set_bbox_to_anchor((0, 0, 1, 1), transform=fig.transFigure)
    fig.set_layout_engine("none")
    renderer = fig.canvas.get_renderer()
    box = fig.get_tightbbox(renderer)  # inches
    width, height = fig.get_figwidth(), fig.get_figheight()
    footer = fig.text(box.x1 / width, (box.y0 - 0.06) / height, "", ha="right", va="top", fontsize=7, color="0.45")
    lines: list[str] = []
    for part in text.split(" | "):
        footer.set_text(f"{lines[-1]} | {part}" if lines else part)
        if lines and footer.get_window_extent(renderer).width / fig.dpi <= box.width:
            lines[-1] = f"{lines[-1]} | {part}"
        else:
            lines.append(part)
    footer.set_text("\n".join(lines))
    return footer


def save_figure(fig, name: str, result, *, runs=None, profile=None, data=None, made=None, **about) -> Saved:
    """Stamp, save as PNG and SVG (and the rows it was drawn from as ``<name>_data.csv``), list in the manifest, close;
    the PNG with its source line, which links the data, for display. ``runs``:
    the runs used where not all of ``result``'s; ``profile``: theirs where not ``result``'s; ``data``: the rows it was
    drawn from where they are not its runs'; ``made``: the machine and day that measured what it shows (a figure of no
    runs); ``about``: ``reproduces``, ``caption``, ``reads`` (what else it was computed from, in words) and ``extra``
    (more manifest fields)."""
    from IPython.display import Image

    run_ids = result.run_ids if runs is None else run_ids_of(runs)
    profile = profile or result.profile
    files = [figures_dir() / f"{name}.png", figures_dir() / f"{name}.svg"]
    rows = data if data is not None else _figure_rows(result, runs, run_ids)
    if rows is not None:  # the rows it was drawn from, beside it: a reader replots or checks without the book's code
        files.append(figures_dir() / f"{name}{DATA_SUFFIX}")
        atomic.write_text(files[-1], spreads_as_numbers(rows).to_csv(index=False, float_format="%.6g"))
        about["extra"] = {"data": files[-1].name, **(about.get("extra") or {})}
    # A figure of no runs that names no measurement is first drawn with the machine and day its published entry
    # names: where that gives the published files again, it is the output published, and keeps its entry (a later
    # render changes no file); where not, it is drawn anew, naming this machine and today.
    published = None if run_ids or made is not None else _made(_published_entry(name))
    footer = _footer(fig, stamp(profile, run_ids, made or published))
    _save_files(fig, files[:2])
    entry = _entry(files, "figure", result, run_ids, profile=profile, made=made or published, **about)
    if published is not None and _unchanged(name, files, entry) is entry:
        footer.remove()
        _footer(fig, stamp(profile, run_ids))
        _save_files(fig, files[:2])
        entry = _entry(files, "figure", result, run_ids, profile=profile, **about)
    plt.close(fig)
    return Saved(Image(filename=str(files[0])), SourceLine.of(_record(name, files, entry)))


def _save_files(fig, files: list[Path]) -> None:
    """``fig`` as each of ``files`` (PNG, SVG), with no creation date in them: a render that changes no number changes
    no byte (the footer names the date)."""
    for path in files:
        metadata = {"Date": None} if path.suffix == ".svg" else {"Software": None}
        atomic.write_with(path, lambda f, kind=path.suffix[1:], m=metadata: fig.savefig(f, format=kind, metadata=m))


#: Every saved table's HTML: padded cells so that neighbouring columns never run together, and a caption that wraps to
#: the table's width instead of widening (and clipping) it.
TABLE_STYLES = [
    {"selector": "th, td", "props": "padding: 0.25em 0.8em; text-align: right; vertical-align: top;"},
    {"selector": "th", "props": "white-space: nowrap;"},
    {
        "selector": "caption",
        "props": "caption-side: top; text-align: left; white-space: normal; padding-bottom: 0.4em;",
    },
]


def plain_tables() -> None:
    """Show every DataFrame a chapter's cell returns as its saved tables are shown: without an unnamed integer index
    (row numbers, filtered or not; a named index stays), cells padded. Registered with the running IPython's HTML
    formatter; nothing outside IPython."""
    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    if shell is None:
        return

    def html_of(frame: pd.DataFrame) -> str:
        if frame.index.name is not None or not pd.api.types.is_integer_dtype(frame.index):
            return frame._repr_html_()  # an index that says something: pandas' own view
        return frame.style.hide(axis="index").set_table_styles(TABLE_STYLES).to_html()

    shell.display_formatter.formatters["text/html"].for_type(pd.DataFrame, html_of)


#: A figure's data file: ``<figure>_data.csv`` beside its PNG and SVG.
DATA_SUFFIX = "_data.csv"


def _figure_rows(result, runs, run_ids) -> pd.DataFrame | None:
    """The rows a figure was drawn from: ``runs`` when it is a table, else its runs' rows of the result's ``table``
    (one per run and epoch); None where neither holds any (a figure of measurements, not of runs)."""
    if isinstance(runs, pd.DataFrame) and len(runs):
        return runs.reset_index(drop=True)
    table = getattr(result, "table", None)
    if not isinstance(table, pd.DataFrame) or "run_id" not in table.columns or not run_ids:
        return None
    rows = table[table["run_id"].isin(set(run_ids))]
    return rows.reset_index(drop=True) if len(rows) else None


def save_table(
    table: pd.DataFrame,
    name: str,
    result,
    *,
    runs=None,
    profile=None,
    precision: int = 2,
    made=None,
    shown: pd.DataFrame | None = None,
    profiles_read: str | None = None,
    **about,
) -> Saved:
    """Save as CSV, list in the manifest (arguments as :func:`save_figure`); the table (``shown``: what the page shows
    of it, where not all of it) styled with the stamp in its caption, and its source line. ``profiles_read``: the
    scales its runs come from in the stamp's words, where they are more than ``profile``
    (:func:`~vitbn_nb.publishing.results.profiles_read`)."""
    run_ids = result.run_ids if runs is None else run_ids_of(runs)
    profile = profile or result.profile
    path = figures_dir() / f"{name}.csv"
    atomic.write_text(path, spreads_as_numbers(table).to_csv(index=False, float_format="%.6g"))
    entry = _record(name, [path], _entry([path], "table", result, run_ids, profile=profile, made=made, **about))
    styled = (table if shown is None else shown).style.format(precision=precision)
    styled = styled.hide(axis="index").set_table_styles(TABLE_STYLES)
    caption = f"{about['caption']} ({stamp(profiles_read or profile, run_ids, None if run_ids else _made(entry))})"
    return Saved(styled.set_caption(caption), SourceLine.of(entry))


def save_claims(result, found: list, claims: list, *, scale: str = "", runs=None, profiles_read=None) -> Saved:
    """Save a chapter's judged claims (``found``: verdicts of ``claims``) as ``NN_claims``, numbers not text;
    ``scale``: the scale of the runs they were judged over where it is not one profile's (in the caption and the
    manifest); ``runs``: those runs where not all of the result's."""
    kept = claims_table([plans.label(verdict) for verdict in found], claims)
    judged = kept["outcome"].value_counts()
    tally = ", ".join(f"{judged[o]} {o}" for o in verdicts.OUTCOMES if o in judged)
    caption = (
        f"Every claim this chapter tests, judged by the book's one rule ('{verdicts.RULE_TITLE}' on the book's page "
        "'Every claim, judged'): the measured value, its 95 % interval over seeds (over rounds for times measured "
        f"in interleaved rounds), the verdict ({tally})" + (f"; judged over runs at {scale}" if scale else "")
    )
    about = {"extra": {"scale": scale}} if scale else {}
    name = f"{result.chapter[:2]}_claims"
    shown = kept[list(SHOWN_CLAIMS)].rename(columns=SHOWN_CLAIMS)
    return save_table(
        kept,
        name,
        result,
        runs=runs,
        shown=shown,
        profiles_read=profiles_read,
        reproduces="new/claims",
        caption=caption,
        **about,
    )


#: What a chapter's page shows of its judged claims (the CSV keeps every column): the verdict a short word, the claim
#: in the article's words, so that the table fits the text column.
SHOWN_CLAIMS = {
    "source": "source",
    "says": "claim",
    "measure": "measured",
    "shown": "effect [interval] (seeds)",
    "outcome": "verdict",
    "evidence": "evidence",
}


def mean_band(ax, table: pd.DataFrame, *, x: str, y: str, label: str, color=None, linestyle="-", marker=None):
    """Mean over seeds with a shaded min-max band; a diverged run is marked with an x where it stopped."""
    grouped = table.groupby(x)[y]
    mean = grouped.mean()
    (line,) = ax.plot(
        mean.index, mean.values, label=label, color=color, linestyle=linestyle, marker=marker, markersize=3
    )
    if table["seed"].nunique() > 1:
        ax.fill_between(
            mean.index, grouped.min().values, grouped.max().values, color=line.get_color(), alpha=0.2, linewidth=0
        )
    if "diverged" in table:
        stopped = table[table["diverged"].astype(bool)]
        for _, row in stopped.iterrows():
            if not np.isfinite(row[y]) and y in TIME_COLUMNS:
                continue  # its seconds are not shown (timed beside other work, or on another machine): no mark
            value = row[y] if np.isfinite(row[y]) else ax.get_ylim()[1]
            ax.plot(row[x], value, marker="x", color=line.get_color(), markersize=9, markeredgewidth=2)
    return line


def integer_epochs(ax) -> None:
    """Whole-number ticks on the x axis (epochs, depths)."""
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def plain_log_axis(ax) -> None:
    """A log y axis labelled 0.05, 0.1, 2 rather than 5×10⁻² (minor ticks labelled only on short ranges)."""
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))

    class PlainMinor(LogFormatter):  # LogFormatter picks which minor ticks to label; we only reword them
        def __call__(self, value, pos=None):
            return f"{value:g}" if super().__call__(value, pos) else ""

    ax.yaxis.set_minor_formatter(PlainMinor(labelOnlyBase=False, minor_thresholds=(1.5, 0.6)))


#: Article 1's four panels: each metric's title and axis label.
PANELS = {
    "train_seconds": ("training time", "train time per epoch (s)"),
    "test_seconds": ("testing time", "test time per epoch (s)"),
    "train_loss": ("training loss", "training loss"),
    "test_acc": ("test accuracy", "test accuracy (%)"),
}


def four_panel(
    table: pd.DataFrame, *, title: str, label=lambda model, group: model, hue: str = "model", machine: str | None = None
):
    """Article 1's four panels: train time, test time, training loss and test accuracy per epoch; the time panels
    draw only the seconds the book may show (:func:`~vitbn_nb.judging.selection.shown_times`, ``machine`` as there: an
    epoch timed beside other work, or on another machine, has no point there)."""
    fig, axes = plt.subplots(2, 2, figsize=(11, 7.5))
    table = shown_times(table, machine=machine)
    for ax, (metric, (panel, axis)) in zip(axes.flat, PANELS.items()):
        for _, group in table.groupby(hue, sort=False):
            model = group["model"].iloc[0]
            named = label(model, group) + _seeds_timed(group)
            mean_band(ax, group, x="epoch", y=metric, label=named, color=color(model), marker="o")
        ax.set(xlabel="epoch", ylabel=axis, title=panel)
        integer_epochs(ax)
        if metric in ("train_seconds", "test_seconds"):
            ax.set_ylim(bottom=0)  # from zero, so the ratio between the curves reads off the picture
        if metric == "train_loss":
            plain_log_axis(ax)
    one_legend_below(fig, *axes[0, 0].get_legend_handles_labels())
    fig.suptitle(title)
    return fig


def one_legend_below(fig, handles, labels):
    """One legend for every panel, under the figure: its curves side by side, or one under another where side by
    side would be wider than the figure (long labels: a panel's own legend would spill over its neighbour)."""
    legend = fig.legend(handles, labels, loc="outside lower center", ncol=len(handles))
    fig.canvas.draw()
    if len(handles) > 1 and legend.get_window_extent().width > fig.bbox.width:
        legend.remove()
        fig.legend(handles, labels, loc="outside lower center", ncol=1)


def _seeds_timed(group: pd.DataFrame) -> str:
    """' (times: 1 of 4 seeds)' where fewer of a curve's seeds have shown seconds than have accuracies, else '': the
    legend names every panel's curves, time panels included, so a time curve resting on fewer seeds says so at a
    glance."""
    timed = group.loc[group["train_seconds"].notna(), "seed"].nunique()
    seeds = group["seed"].nunique()
    return f" (times: {timed} of {seeds} seeds)" if timed < seeds else ""


#: What tells one curve (or bar) from another in a run table: its seeds are counted apart from another's.
CURVE_KEYS = ("model", "depth", "lr", "batch_size", "pipeline")


def spread_label(table: pd.DataFrame, spread: str = "band") -> str:
    """What a curve or bar shows, true to the runs behind it, and their scale: 'mean over 3 seeds, band = min-max'
    ('3–6 seeds' where curves hold different counts) or 'one seed (no spread)', then 'images x epochs' (the training
    images each run saw per epoch, and its epochs)."""
    keys = [key for key in CURVE_KEYS if key in table and table[key].notna().any()]
    seeds = table.groupby(keys, dropna=False)["seed"].nunique() if keys else pd.Series([table["seed"].nunique()])
    low, high = (int(seeds.min()), int(seeds.max())) if len(table) else (0, 0)
    counted = f"{high}" if low == high else f"{low}–{high}"
    shown = f"mean over {counted} seeds, {spread} = min-max" if high > 1 else "one seed per curve (no spread)"
    if not len(table):
        return shown
    sized = table.assign(train_size=table.get("train_size", None))
    sizes = sized.groupby("run_id", sort=False)[["train_size", "epoch"]].max()
    images = sorted({60_000 if pd.isna(size) else int(size) for size in sizes["train_size"]})
    epochs = sorted({int(e) for e in sizes["epoch"]})
    span = lambda values: f"{values[0]:,}" if len(values) == 1 else f"{values[0]:,}–{values[-1]:,}"
    return f"{shown}; {span(images)} training images × {span(epochs)} epochs"


def interval_label(table: pd.DataFrame) -> str:
    """'mean [95 % interval] over 3 seeds', or 'one seed (no interval)', true to the runs of ``table`` (a seed
    column): how every table's spread reads (:class:`~vitbn_nb.publishing.results.Spread`)."""
    seeds = int(table["seed"].nunique()) if len(table) else 0
    return f"mean [95 % interval] over {seeds} seeds" if seeds > 1 else "one seed (no interval)"
