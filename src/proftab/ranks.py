"""Cross-rank tables of a multi-rank Trace: step times, stragglers, collectives, skew.

Steps are the host ``ProfilerStep#N`` windows of each rank.  Collective kernels are
device kernels whose name matches `COLLECTIVE_PATTERN` (``nccl``/``rccl``, any case),
as in HTA.  Comparisons between ranks use absolute times (``base_time_ns + start_ns`` of
each rank) plus optional per-rank clock offsets ``offsets_ns={rank: ns}``, as
:meth:`proftab.Trace.with_utc` does; ranks recorded on different hosts are only as
comparable as their clocks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

from proftab import schema
from proftab.intervals import merge_intervals
from proftab.joins import overlaps
from proftab.steps import assign_steps, step_windows

if TYPE_CHECKING:
    from proftab.trace import Trace

__all__ = ["COLLECTIVE_PATTERN", "collective_skew", "collective_times", "slowest_ranks", "step_times"]

#: regex (case-insensitive) of collective kernel names
COLLECTIVE_PATTERN = r"(?i)nccl|rccl"
_KERNEL_CATS = ["kernel", "Kernel"]


def _absolute(tr: Trace, df: pl.DataFrame, offsets_ns: dict[int, int] | None) -> pl.DataFrame:
    """`df` plus `abs_start_ns` / `abs_end_ns` (epoch ns, Int64) and `start_utc` / `end_utc`."""
    out = tr.with_utc(df, offsets_ns=offsets_ns)
    return out.with_columns(abs_start_ns=pl.col("start_utc").cast(pl.Int64),
                            abs_end_ns=pl.col("end_utc").cast(pl.Int64))


def step_times(tr: Trace, *, offsets_ns: dict[int, int] | None = None) -> pl.DataFrame:
    """Per-rank step windows: one row per (rank, ``ProfilerStep#N``) on the host.

    Returns
    -------
    polars.DataFrame
        ``rank``, ``step`` (N), ``start_ns``, ``end_ns``, ``dur_ns`` (the rank's own time
        axis), ``start_utc``, ``end_utc`` (absolute, offsets applied); sorted by step, rank.
    """
    ev = step_windows(tr.events).select("rank", "step", "start_ns", "end_ns", "dur_ns")
    return tr.with_utc(ev, offsets_ns=offsets_ns).sort("step", "rank")


def slowest_ranks(tr: Trace, *, offsets_ns: dict[int, int] | None = None) -> pl.DataFrame:
    """Per step: the slowest and fastest rank, the spread and the skew between ranks.

    Returns
    -------
    polars.DataFrame
        ``step``, ``n_ranks``, ``slowest_rank``, ``max_dur_ns``, ``fastest_rank``,
        ``min_dur_ns``, ``median_dur_ns`` (lower median), ``spread_ns`` (max - min),
        ``slowest_excess_ns`` (max - median), ``start_skew_ns`` / ``end_skew_ns`` (latest
        minus earliest absolute start / end across ranks), ``last_to_start_rank``.
    """
    st = step_times(tr, offsets_ns=offsets_ns).with_columns(
        abs_start=pl.col("start_utc").cast(pl.Int64), abs_end=pl.col("end_utc").cast(pl.Int64))
    return (
        st.sort("step", "rank")
        .group_by("step", maintain_order=True)
        .agg(
            pl.len().cast(pl.Int64).alias("n_ranks"),
            pl.col("rank").sort_by("dur_ns", "rank", descending=[True, False]).first().alias("slowest_rank"),
            pl.col("dur_ns").max().alias("max_dur_ns"),
            pl.col("rank").sort_by("dur_ns", "rank").first().alias("fastest_rank"),
            pl.col("dur_ns").min().alias("min_dur_ns"),
            pl.col("dur_ns").quantile(0.5, interpolation="lower").cast(pl.Int64).alias("median_dur_ns"),
            (pl.col("abs_start").max() - pl.col("abs_start").min()).alias("start_skew_ns"),
            (pl.col("abs_end").max() - pl.col("abs_end").min()).alias("end_skew_ns"),
            pl.col("rank").sort_by("abs_start", "rank", descending=[True, False]).first().alias("last_to_start_rank"),
        )
        .with_columns(spread_ns=pl.col("max_dur_ns") - pl.col("min_dur_ns"),
                      slowest_excess_ns=pl.col("max_dur_ns") - pl.col("median_dur_ns"))
        .select("step", "n_ranks", "slowest_rank", "max_dur_ns", "fastest_rank", "min_dur_ns", "median_dur_ns",
                "spread_ns", "slowest_excess_ns", "start_skew_ns", "end_skew_ns", "last_to_start_rank")
    )


def _with_step(tr: Trace, df: pl.DataFrame) -> pl.DataFrame:
    """`step`: N of the host ProfilerStep#N window of the same rank holding the start."""
    return assign_steps(df, step_windows(tr.events))


def collective_times(tr: Trace, *, by_step: bool = True, pattern: str = COLLECTIVE_PATTERN) -> pl.DataFrame:
    """Per rank (and step) time in collective kernels, and how much of it is exposed.

    Parameters
    ----------
    by_step
        One row per (rank, step); the step of a kernel is the rank's host
        ``ProfilerStep#N`` window holding the kernel's start (null outside every step).
    pattern
        Regex of collective kernel names.

    Returns
    -------
    polars.DataFrame
        ``rank``, (``step``), ``collectives`` (kernel count), ``collective_ns`` (sum of
        durations), ``collective_union_ns`` (time with at least one collective running),
        ``compute_union_ns`` (time with a non-collective kernel, memcpy or memset
        running), ``overlapped_ns`` (collective time during which compute ran),
        ``exposed_ns`` (``collective_union_ns - overlapped_ns``); sorted by rank, step.
    """
    cat = pl.col("cat").cast(pl.String)
    dev = tr.events.filter(cat.is_in(list(schema.DEVICE_WORK_CATEGORIES)) & (pl.col("end_ns") >= pl.col("start_ns")))
    dev = dev.select("rank", "start_ns", "end_ns", "dur_ns",
                     (cat.is_in(_KERNEL_CATS) & pl.col("name").str.contains(pattern)).alias("_coll"))
    keys = ["rank"]
    if by_step:
        dev = _with_step(tr, dev)
        keys = ["rank", "step"]
    coll = dev.filter(pl.col("_coll"))
    comp = dev.filter(~pl.col("_coll"))
    counts = coll.group_by(keys).agg(pl.len().cast(pl.Int64).alias("collectives"),
                                     pl.col("dur_ns").sum().alias("collective_ns"))
    ucoll = merge_intervals(coll, by=keys)
    ucomp = merge_intervals(comp, by=keys)
    union_c = ucoll.group_by(keys).agg((pl.col("end_ns") - pl.col("start_ns")).sum().alias("collective_union_ns"))
    union_k = ucomp.group_by(keys).agg((pl.col("end_ns") - pl.col("start_ns")).sum().alias("compute_union_ns"))
    # by rank only: a null step (kernels outside every step) must pair with itself, and
    # overlaps never matches a null key
    both = overlaps(ucoll, ucomp, by="rank")
    assert isinstance(both, pl.DataFrame)
    if by_step:
        both = both.filter(pl.col("step").eq_missing(pl.col("step_right")))
    over = both.group_by(keys).agg(pl.col("overlap_ns").sum().alias("overlapped_ns"))
    out = (counts.join(union_c, on=keys, how="left", nulls_equal=True)
           .join(union_k, on=keys, how="left", nulls_equal=True)
           .join(over, on=keys, how="left", nulls_equal=True)
           .with_columns(pl.col("compute_union_ns", "overlapped_ns").fill_null(0)))
    return out.with_columns(exposed_ns=pl.col("collective_union_ns") - pl.col("overlapped_ns")).select(
        *keys, "collectives", "collective_ns", "collective_union_ns", "compute_union_ns", "overlapped_ns",
        "exposed_ns").sort(keys, nulls_last=True)


def collective_skew(tr: Trace, *, offsets_ns: dict[int, int] | None = None,
                    pattern: str = COLLECTIVE_PATTERN) -> pl.DataFrame:
    """Skew between ranks of each collective: the k-th kernel of a name on every rank.

    A collective's kernels on different ranks are matched by name and occurrence index
    (the k-th ``ncclKernel_AllReduce...`` of each rank, in start order).  The rank that
    starts last is the straggler the others wait for.

    Returns
    -------
    polars.DataFrame
        ``name``, ``instance`` (k, from 0), ``n_ranks``, ``first_start_utc``,
        ``start_skew_ns`` (latest minus earliest absolute start), ``end_skew_ns``,
        ``last_rank`` (latest start), ``min_dur_ns``, ``max_dur_ns``; sorted by
        ``first_start_utc``.
    """
    cat = pl.col("cat").cast(pl.String)
    k = tr.events.filter(cat.is_in(_KERNEL_CATS) & pl.col("name").str.contains(pattern)).select(
        "rank", "name", "start_ns", "end_ns", "dur_ns")
    k = _absolute(tr, k, offsets_ns)
    k = k.with_columns(instance=pl.int_range(pl.len()).over(["rank", "name"], order_by=["abs_start_ns", "abs_end_ns"])
                       .cast(pl.Int64))
    return (
        k.group_by("name", "instance")
        .agg(
            pl.len().cast(pl.Int64).alias("n_ranks"),
            pl.col("start_utc").min().alias("first_start_utc"),
            (pl.col("abs_start_ns").max() - pl.col("abs_start_ns").min()).alias("start_skew_ns"),
            (pl.col("abs_end_ns").max() - pl.col("abs_end_ns").min()).alias("end_skew_ns"),
            pl.col("rank").sort_by("abs_start_ns", "rank", descending=[True, False]).first().alias("last_rank"),
            pl.col("dur_ns").min().alias("min_dur_ns"),
            pl.col("dur_ns").max().alias("max_dur_ns"),
        )
        .sort("first_start_utc", "name", "instance")
    )
