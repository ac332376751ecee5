"""Picking runs out of a run table (one row per run and epoch, :func:`vitbn_nb.store.runs.load_table`): the one
home of "the runs at this lr, depth and model" and "the final accuracy per seed"."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pandas as pd


def select(table: pd.DataFrame, **where) -> pd.DataFrame:
    """The rows whose columns equal ``where``'s values (a float, such as an lr, compared with ``np.isclose``)."""
    if table.empty:
        return table  # its columns may hold no numbers to compare
    keep = np.ones(len(table), dtype=bool)
    for column, value in where.items():
        close = isinstance(value, (float, np.floating))
        keep &= np.isclose(table[column], value) if close else (table[column] == value).to_numpy()
    return table[keep]


def require(table: pd.DataFrame, **where) -> pd.DataFrame:
    """:func:`select`, refusing a selection that holds no run."""
    chosen = select(table, **where)
    if chosen.empty:
        known = table[list(where)].drop_duplicates().to_dict("records")
        raise ValueError(f"the run table has no rows for {where}; it holds {known}")
    return chosen


def timed_busy(table: pd.DataFrame) -> pd.Series:
    """Per epoch (row): whether its times were taken beside other work (:func:`vitbn_nb.system.epoch_contended`)."""
    from ..system import epoch_contended  # torch's import is not needed to pick rows

    flags = [epoch_contended(epoch) for epoch in table.to_dict("records")]
    return pd.Series(flags, index=table.index, dtype=bool)


#: The machine of an epoch whose table does not say (a table built by hand): all such epochs count as one machine.
UNNAMED_MACHINE = "this machine"


def machines(table: pd.DataFrame) -> pd.Series:
    """Per epoch (row): the machine that timed it (:data:`UNNAMED_MACHINE` where the table has no such column)."""
    return table["machine"] if "machine" in table.columns else pd.Series(UNNAMED_MACHINE, index=table.index)


def timed_epochs(table: pd.DataFrame) -> pd.DataFrame:
    """The epochs whose times count (not :func:`timed_busy`), with the ``machine`` that timed each (None: unknown)."""
    timed = table[~timed_busy(table)]
    return timed.assign(machine=machines(timed))


#: The per-epoch times of a run table (wall seconds of an epoch's parts).
TIME_COLUMNS = ("train_seconds", "test_seconds", "data_seconds")


def shown_machine(table: pd.DataFrame) -> str | None:
    """The machine that timed most of ``table``'s :func:`timed_epochs` (first by name on a tie; None: none known)."""
    counts = timed_epochs(table)["machine"].dropna().value_counts()
    return counts.sort_index().sort_values(ascending=False, kind="stable").index[0] if len(counts) else None


def shown_times(table: pd.DataFrame, columns=TIME_COLUMNS, machine: str | None = None) -> pd.DataFrame:
    """``table`` with only the times the book may show: an epoch timed beside other work (:func:`timed_busy`) or on
    another machine than ``machine`` (default :func:`shown_machine`) has NaN in ``columns``, so no mean or curve pools
    two machines' seconds nor a busy epoch's; every other column is kept whole."""
    machine = shown_machine(table) if machine is None else machine
    keep = ~timed_busy(table) & (machines(table) == machine).to_numpy()
    present = [column for column in columns if column in table.columns]
    return table.assign(**{column: table[column].where(keep) for column in present})


def timed_pairs(table: pd.DataFrame, columns: list[str], keys: list[str], side: str = "model", baseline="ViT"):
    """Paired timings: per value of ``keys`` (a seed) and ``side`` (a model), its runs' mean ``columns`` over the
    :func:`timed_epochs` beside the ``baseline``'s (suffix ``_base``) **on one machine**; a pair sharing no machine is
    left out, one timed on two is compared where both sides timed the most epochs (``epochs``: the fewer side's)."""
    timed = timed_epochs(table)
    grouped = timed.groupby([*keys, "machine", side], sort=False)  # an unknown (None) machine forms no group
    means = grouped[columns].mean().assign(epochs=grouped.size()).reset_index()
    base = means[means[side] == baseline].drop(columns=side)
    pairs = means[means[side] != baseline].merge(base, on=[*keys, "machine"], suffixes=("", "_base"))
    pairs["epochs"] = pairs[["epochs", "epochs_base"]].min(axis=1)
    most = pairs.sort_values("epochs", ascending=False, kind="stable").drop_duplicates([*keys, side])
    return most.drop(columns="epochs_base").sort_index()


def final_epochs(table: pd.DataFrame) -> pd.DataFrame:
    """The last recorded epoch of every run (a diverged run's is the epoch it diverged at)."""
    return table.sort_values("epoch").groupby("run_id", sort=False).tail(1)


def final_accuracy(table: pd.DataFrame, **where) -> pd.Series:
    """Final test accuracy per seed of one configuration's runs (those of ``where``, when given)."""
    return final_epochs(select(table, **where)).set_index("seed")["test_acc"].sort_index()


def per_seed(table: pd.DataFrame, statistic: Callable[[pd.DataFrame], float]) -> pd.Series:
    """``statistic`` of each run's curve, indexed by seed (a table of one configuration)."""
    return pd.Series({seed: statistic(run) for seed, run in table.groupby("seed")}, dtype=float).sort_index()


def one_stream(table: pd.DataFrame) -> pd.DataFrame:
    """The runs of ``table`` whose seed's runs all drew one data stream: only those pair (all stay in figures)."""
    if "stream" not in table.columns or table.empty:
        return table
    streams = table.groupby("seed")["stream"].nunique()
    return table[table["seed"].isin(streams[streams == 1].index)]


def paired(first: pd.Series, second: pd.Series) -> pd.Series:
    """``first − second`` per seed, over the seeds both have."""
    return (first - second).dropna()
