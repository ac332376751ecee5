"""What a chapter's results share, and summaries of run tables: final accuracies with their spread over seeds, and
article 1's speed ratios."""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..judging import plans, verdicts
from ..judging.selection import final_epochs, machines, shown_machine, timed_busy, timed_pairs
from ..paths import figures_dir
from ..profiles import ChapterSettings

#: The verdicts that decide a claim, and those that leave it open.
DECIDED = (verdicts.AGREES, verdicts.DISAGREES, verdicts.EQUIVALENT, verdicts.NOT_EQUIVALENT)
OPEN = (verdicts.NOISE, verdicts.UNDECIDED)
#: How many decided claims a takeaway names one by one (the claims table has them all).
TAKEAWAY_ROWS = 8


@dataclass(frozen=True)
class ChapterResult:
    """A chapter's result: its settings, and the chapter, profile and run ids (from its ``table``, if any) its outputs
    name as their source."""

    settings: ChapterSettings

    @property
    def chapter(self) -> str:
        """The chapter its settings name (each chapter's settings class holds its name)."""
        if not getattr(self.settings, "chapter", None):
            raise ValueError(
                f"{type(self.settings).__name__} is no chapter's settings; build them with chapters.settings"
            )
        return self.settings.chapter

    @property
    def profile(self) -> str:
        return self.settings.profile

    @property
    def run_ids(self) -> list[str]:
        return run_ids_of(getattr(self, "table", None))

    def takeaway(self):
        """What this chapter's runs decide, computed from the claims table it saved (``NN_claims.csv``), for the
        chapter's closing section."""
        from IPython.display import Markdown  # a notebook display: the CLI never loads IPython

        path = figures_dir() / f"{self.chapter[:2]}_claims.csv"
        if not path.is_file():
            return Markdown("This run saved no judged claims, so there is nothing to take from it yet.")
        claims = pd.read_csv(path, keep_default_na=False)
        return Markdown(takeaway_text(claims, self.profile, getattr(self.settings, "full_protocol_lrs", None)))


def where(claims: pd.DataFrame) -> str:
    """Which figures or passages of their article the claims judge, with how many claims each."""
    counts = claims["source"].str.split(", ", n=1).str[-1].value_counts(sort=False)
    return "; ".join(f"{source} ({n})" for source, n in counts.items())


def outcome_groups(claims: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """The claims by what the rule could say of them: decided, open, waiting for their planned seeds, not testable at
    the scale held (empty groups left out)."""
    groups = (
        ("Decided", DECIDED),
        ("Open (within noise or undecided)", OPEN),
        ("Not decidable with the planned runs", (verdicts.NOT_DECIDABLE,)),
        ("Waiting for their planned seeds", (verdicts.NOT_JUDGED,)),
        ("Not testable at the scale of the runs held", (verdicts.UNTESTABLE,)),
    )
    chosen = [(title, claims[claims["outcome"].isin(outcomes)]) for title, outcomes in groups]
    return [(title, rows) for title, rows in chosen if len(rows)]


def profiles_read(profile: str, paper_lrs) -> str:
    """The scales an output reads where a smaller profile's chapter takes the ``paper`` protocol's runs at some rates:
    "paper at lr 0.0005, 0.005; cpu elsewhere" (the profile alone where there are none)."""
    if not paper_lrs or profile == "paper":
        return profile
    return f"paper at lr {', '.join(f'{lr:g}' for lr in paper_lrs)}; {profile} elsewhere"


def takeaway_text(claims: pd.DataFrame, profile: str, paper_lrs=None) -> str:
    """A chapter's takeaway in Markdown: what its verdicts decide (each decided claim with its effect), what stays
    open and why, counted from its claims table. ``paper_lrs``: the rates at which a smaller profile's chapter reads
    the ``paper`` protocol's runs, said in the headline so that it never names one scale for all."""
    conclusion = article2_conclusion(claims)
    scale = f"profile `{profile}`"
    if paper_lrs and profile != "paper":
        scale = f"the `paper` protocol's runs at lr {', '.join(f'{lr:g}' for lr in paper_lrs)}, `{profile}` elsewhere"
    lines = [conclusion, ""] if conclusion else []
    lines += [f"**What these runs decide** ({scale}, {len(claims)} claims, judged by the book's one rule):", ""]
    for title, rows in outcome_groups(claims):
        evidence = (
            rows["evidence"].value_counts() if title == "Decided" and "evidence" in rows else pd.Series(dtype=object)
        )
        labelled = ", ".join(f"{n} {label}" for label, n in evidence.items() if label)
        lines.append(f"- **{title}**: {len(rows)}{f' ({labelled})' if labelled else ''}, in {where(rows)}.")
        if title == "Decided":
            for row in rows.head(TAKEAWAY_ROWS).itertuples(index=False):
                condition = f" ({row.condition})" if row.condition else ""
                label = f", {row.evidence}" if getattr(row, "evidence", "") else ""
                lines.append(f"  - {row.source}: {row.says}{condition}: {row.shown}, **{row.outcome}**{label}.")
            if len(rows) > TAKEAWAY_ROWS:
                lines.append(f"  - and {len(rows) - TAKEAWAY_ROWS} more in the claims table above.")
        elif title.startswith("Open"):
            lines.append(
                "  Each row above gives the smallest difference its seeds could have detected: not an effect"
                " of zero, an effect too small for these seeds."
            )
    return "\n".join(lines)


#: A replication's verdicts once every planned seed is held: an open one ("within noise") is its answer too.
_JUDGED = (*DECIDED, *OPEN)


def _claim_lr(row) -> str:
    return str(row.claim).rsplit("lr", 1)[-1]


def _claim_depths(row) -> str:
    found = re.search(r"d ∈ \{([^}]*)\}", str(row.measure))
    return found.group(1) if found else "?"


def _shown_and_judged(row) -> str:
    label = f" ({row.evidence})" if str(getattr(row, "evidence", "") or "") else ""
    return f"{row.shown}, {row.outcome}{label}"


#: Article 2's conclusion in the book's words, wherever a page names what its primary contrasts test.
ARTICLE2_CONCLUSION = "beyond a critical depth ViTBNFFN converges faster than ViT"


def article2_conclusion(claims: pd.DataFrame) -> str | None:
    """What article 2's conclusion rests on, one paragraph (Markdown) read from the judged claims, or None where they
    hold no primary contrast of article 2: its primary contrast at each learning rate, and, where that first contrast
    is exploratory, the confirmatory replication on fresh seeds that stands in for it. The headline says the
    conclusion holds only where every rate has a confirmatory verdict and each agrees. The README's findings and
    chapter 05's takeaway both say it from here."""
    primary = claims[(claims["role"] == verdicts.PRIMARY) & claims["claim"].str.startswith("article2/")]
    replicated = primary["claim"].str.contains("/confirm/")
    first, replication = primary[~replicated], primary[replicated]
    if first.empty:
        return None
    again = {_claim_lr(r): r for r in replication.itertuples()}
    resting, said = [], ""  # each rate's confirmatory verdict (None while its replication trains); what they add
    for row in first.itertuples():
        lr, redo = _claim_lr(row), again.get(_claim_lr(row))
        if str(row.evidence) == plans.CONFIRMATORY:
            resting.append(row)
        elif redo is None:
            resting.append(None)
        elif redo.outcome in _JUDGED:
            resting.append(redo)
            said += f" At lr {lr} it rests on its replication on fresh seeds: {_shown_and_judged(redo)}."
        else:
            resting.append(None)
            held = verdicts.seeds_held(redo.note)
            said += f" At lr {lr} it stays exploratory until its replication on fresh seeds "
            said += f"decides ({held[0]} of its {held[1]} planned seeds complete)." if held else "decides."
    holds = all(row is not None and row.outcome == verdicts.AGREES for row in resting)
    claim = ARTICLE2_CONCLUSION
    head = f"**Article 2's conclusion holds**: {claim}" if holds else f"**Article 2's conclusion** ({claim})"
    parts = "; ".join(
        f"lr {_claim_lr(r)}, depth {_claim_depths(r)}: {_shown_and_judged(r)}" for r in first.itertuples()
    )
    return f"{head}, read as the gap in test accuracy averaged over the epochs at equal depth: {parts}.{said}"


def run_ids_of(runs) -> list[str]:
    """The run ids of a run table (its ``run_id`` column) or of a list of ids, each once, in order; none of None."""
    if runs is None:
        return []
    if isinstance(runs, pd.DataFrame):
        runs = runs["run_id"] if "run_id" in runs.columns else []
    return list(dict.fromkeys(runs))


def epochs_text(n: int) -> str:
    return f"{n} epoch{'' if n == 1 else 's'}"


@dataclass(frozen=True)
class Spread:
    """A mean over seeds (or rounds) with the rule's 95 % interval (Student's t), shown as "91.4 [90.1, 92.7]"; a saved
    table stores it as three numbers, in columns ``<name>``, ``<name> low`` and ``<name> high``."""

    mean: float
    low: float
    high: float
    n: int
    digits: int = 1

    def __str__(self) -> str:
        if self.n == 0:
            return "n/a"
        value = f"{self.mean:.{self.digits}f}"
        if self.n == 1 or not np.isfinite(self.low):
            return f"{value} (1 seed)"
        return f"{value} [{self.low:.{self.digits}f}, {self.high:.{self.digits}f}]"

    __repr__ = __str__

    def __format__(self, spec: str) -> str:  # a Styler's format leaves the text as it is
        return str(self)


def spread(values, digits: int = 1, bounds: tuple[float, float] | None = None) -> Spread:
    """The finite ``values``' mean with the rule's 95 % interval (:func:`~vitbn_nb.judging.verdicts.interval`);
    ``bounds``: the interval stops at the ends the quantity can take (Student's t knows nothing of them)."""
    mean, low, high, n = verdicts.interval(pd.Series(values, dtype=float).dropna().to_numpy(), bounds=bounds)
    return Spread(mean, low, high, n, digits)


def accuracy(values, digits: int = 1) -> Spread:
    """:func:`spread` of accuracies (%): the interval within 0 and 100."""
    return spread(values, digits, verdicts.ACCURACY_BOUNDS)


def spreads_as_numbers(table: pd.DataFrame) -> pd.DataFrame:
    """``table`` with every column of :class:`Spread` values written as three numeric columns (mean, low, high): what
    a saved table's CSV holds."""
    columns = {}
    for name, values in table.items():
        # a column of spreads, some cells perhaps a word in place of one ("n/a", "not run"): numbers, words left out
        if any(isinstance(c, Spread) for c in values) and values.map(lambda c: isinstance(c, (Spread, str))).all():
            for key, column in (("mean", name), ("low", f"{name} low"), ("high", f"{name} high")):
                columns[column] = values.map(lambda c, key=key: getattr(c, key) if isinstance(c, Spread) else np.nan)
        else:
            columns[name] = values
    return pd.DataFrame(columns, index=table.index)


def accuracy_summary(table: pd.DataFrame, by=("model",)) -> pd.DataFrame:
    """Final test accuracy per group: mean, standard deviation, seeds, diverged runs."""
    last = final_epochs(table)
    grouped = last.groupby(list(by), sort=False)
    return pd.DataFrame(
        {
            "accuracy (%)": grouped["test_acc"].apply(accuracy),
            "mean": grouped["test_acc"].mean(),
            "sd": grouped["test_acc"].std(ddof=1),
            "seeds": grouped["seed"].nunique(),
            "diverged": grouped["status"].apply(lambda s: int((s == "diverged").sum())),
        }
    ).reset_index()


def speed_ratios(table: pd.DataFrame, *, baseline: str = "ViT", by=()) -> pd.DataFrame:
    """Article 1's ratios r = T(baseline) / T(model) of time per epoch (``r_t`` training, ``r_v`` test) and gains
    g = 1 - 1/r (%) over runs paired by seed and ``by`` on one machine, quiet epochs only
    (:func:`~vitbn_nb.judging.selection.timed_pairs`); a model with no pair left keeps its row ("n/a", 0 seeds)."""
    pairs = timed_pairs(table, ["train_seconds", "test_seconds"], [*by, "seed"], baseline=baseline)
    for r, g, column in (("r_t", "g_t", "train_seconds"), ("r_v", "g_v", "test_seconds")):
        pairs[r] = pairs[f"{column}_base"] / pairs[column]
        pairs[g] = 100 * (1 - 1 / pairs[r])
    rows = []
    shown = table.loc[table["model"] != baseline, [*by, "model"]].drop_duplicates()
    for key in shown.itertuples(index=False, name=None):
        group = pairs[(pairs[[*by, "model"]] == pd.Series(key, index=[*by, "model"])).all(axis=1)]
        row = dict(zip([*by, "model"], key))
        for column, digits in (("r_t", 2), ("r_v", 2), ("g_t", 0), ("g_v", 0)):
            row[column] = spread(group[column], digits)
            row[f"{column}_mean"] = group[column].mean()
        row["seeds"] = len(group)
        rows.append(row)
    columns = [*by, "model", *(f"{c}{suffix}" for c in ("r_t", "r_v", "g_t", "g_v") for suffix in ("", "_mean"))]
    return pd.DataFrame(rows, columns=[*columns, "seeds"])


def gain(ratio: float) -> float:
    """g = 1 - 1/r, in %."""
    return 100 * (1 - 1 / ratio) if ratio and np.isfinite(ratio) else float("nan")


def contention(table: pd.DataFrame) -> str:
    """How many of the table's epochs were timed beside other work, of those whose other processes' CPU seconds or
    load was recorded ('n/N epochs'): the epochs every time shown leaves out."""
    fields = [field for field in ("other_cpu_seconds", "load_1min") if field in table.columns]
    recorded = table[table[fields].notna().any(axis=1)] if fields else table.iloc[:0]
    if recorded.empty:
        return "not recorded"
    return f"{int(timed_busy(recorded).sum())}/{len(recorded)} epochs"


def machine_note(table: pd.DataFrame, machine: str | None = None) -> str:
    """What a view of ``table``'s seconds leaves out for their machine (``machine`` as in
    :func:`~vitbn_nb.judging.selection.shown_times`): the quiet epochs of other machines, if any."""
    machine = shown_machine(table) if machine is None else machine
    quiet = ~timed_busy(table)
    if machine is None:
        return "; no seconds shown (no quiet epoch's machine is known)" if quiet.any() else ""
    other = int((quiet & (machines(table) != machine)).sum())
    if not other:
        return ""
    return (
        f"; seconds from {machine} only ({other}/{len(table)} epochs timed quiet on other machines left out, so a "
        "time may rest on fewer seeds than an accuracy)"
    )


def times_left_out(table: pd.DataFrame, machine: str | None = None) -> str:
    """A caption's account of the seconds a view of ``table`` leaves out: busy epochs (:func:`contention`), and the
    quiet ones of other machines (:func:`machine_note`)."""
    return f"epochs timed beside other work left out ({contention(table)}){machine_note(table, machine)}"
