"""Cross-rank tables of a multi-rank Trace: step times, stragglers, collectives, skew.

Steps are the host ``ProfilerStep#N`` windows of each rank.  Collective kernels are
device kernels whose name matches `COLLECTIVE_PATTERN` (``nccl``/``rccl``, any case),
as in HTA; collective instances are matched across ranks by process group and sequence
(`proftab.ranks.collectives`, which also reads gloo's host ranges on CPU ranks).
Comparisons between ranks use absolute times (``base_time_ns + start_ns`` of
each rank, from the `files` table) plus optional per-rank clock offsets
``offsets_ns={rank: ns}``, as `proftab.clock.with_utc_frame` does; ranks recorded on different
hosts are only as comparable as their clocks.

The functions take frames (`events`, `files`); `tr.ranks` applies them to a Trace.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

from proftab import kinds
from proftab.api import register_trace_namespace
from proftab.clock import with_utc_frame
from proftab.intervals import merge_intervals
from proftab.joins import overlaps
from proftab.ranks.collectives import (
    COLLECTIVE_PATTERN,
    collective_instances,
    collective_ranks,
    match_calls,
    rank_calls,
    rank_comm,
    rank_step_comm,
)
from proftab.steps import assign_steps, step_windows

if TYPE_CHECKING:
    from collections.abc import Mapping

    from proftab.trace import Trace

__all__ = ["COLLECTIVE_PATTERN", "RanksNamespace", "collective_instances", "collective_ranks", "collective_skew",
           "collective_times", "match_calls", "rank_calls", "rank_comm", "rank_step_comm", "slowest_ranks",
           "step_times"]

_KERNEL_CATS = sorted(kinds.KERNEL_CATEGORIES)


def _absolute(df: pl.DataFrame, files: pl.DataFrame, offsets_ns: Mapping[int, int] | None) -> pl.DataFrame:
    """`df` plus `abs_start_ns` / `abs_end_ns` (epoch ns, Int64) and `start_utc` / `end_utc`."""
    out = with_utc_frame(df, files, offsets_ns=offsets_ns)
    return out.with_columns(abs_start_ns=pl.col("start_utc").cast(pl.Int64),
                            abs_end_ns=pl.col("end_utc").cast(pl.Int64))


def step_times(events: pl.DataFrame, files: pl.DataFrame, *, offsets_ns: Mapping[int, int] | None = None,
               windows: pl.DataFrame | None = None) -> pl.DataFrame:
    """Per-rank step windows: one row per (rank, ``ProfilerStep#N``) on the host.

    `windows` (`proftab.steps.step_windows` of `events`, e.g. a dataset's stored summary) is
    used instead of `events` when given.

    Returns
    -------
    polars.DataFrame
        ``rank``, ``step`` (N), ``start_ns``, ``end_ns``, ``dur_ns`` (the rank's own time
        axis), ``start_utc``, ``end_utc`` (absolute, offsets applied); sorted by step, rank.
    """
    ev = (step_windows(events) if windows is None else windows).select("rank", "step", "start_ns", "end_ns", "dur_ns")
    return with_utc_frame(ev, files, offsets_ns=offsets_ns).sort("step", "rank")


def slowest_ranks(events: pl.DataFrame, files: pl.DataFrame, *, offsets_ns: Mapping[int, int] | None = None,
                  windows: pl.DataFrame | None = None) -> pl.DataFrame:
    """Per step: the slowest and fastest rank, the spread and the skew between ranks (`windows`
    as for `step_times`).

    Returns
    -------
    polars.DataFrame
        ``step``, ``n_ranks``, ``slowest_rank``, ``max_dur_ns``, ``fastest_rank``,
        ``min_dur_ns``, ``median_dur_ns`` (lower median), ``spread_ns`` (max - min),
        ``slowest_excess_ns`` (max - median), ``start_skew_ns`` / ``end_skew_ns`` (latest
        minus earliest absolute start / end across ranks), ``last_to_start_rank``.
    """
    st = step_times(events, files, offsets_ns=offsets_ns, windows=windows).with_columns(
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


def collective_times(events: pl.DataFrame, *, by_step: bool = True, pattern: str = COLLECTIVE_PATTERN
                     ) -> pl.DataFrame:
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
        ``rank``, (``step``), ``n_collectives`` (kernel count), ``collective_ns`` (sum of
        durations), ``collective_union_ns`` (time with at least one collective running),
        ``compute_union_ns`` (time with a non-collective kernel, memcpy or memset
        running), ``overlapped_ns`` (collective time during which compute ran),
        ``exposed_ns`` (``collective_union_ns - overlapped_ns``); sorted by rank, step.
    """
    cat = pl.col("cat").cast(pl.String)
    dev = events.filter(kinds.is_device_work() & (pl.col("end_ns") >= pl.col("start_ns")))
    dev = dev.select("rank", "start_ns", "end_ns", "dur_ns",
                     (cat.is_in(_KERNEL_CATS) & pl.col("name").str.contains(pattern)).alias("_coll"))
    keys = ["rank"]
    if by_step:
        dev = assign_steps(dev, step_windows(events))
        keys = ["rank", "step"]
    coll = dev.filter(pl.col("_coll"))
    comp = dev.filter(~pl.col("_coll"))
    counts = coll.group_by(keys).agg(pl.len().cast(pl.Int64).alias("n_collectives"),
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
        *keys, "n_collectives", "collective_ns", "collective_union_ns", "compute_union_ns", "overlapped_ns",
        "exposed_ns").sort(keys, nulls_last=True)


def collective_skew(events: pl.DataFrame, files: pl.DataFrame, *, offsets_ns: Mapping[int, int] | None = None,
                    pattern: str = COLLECTIVE_PATTERN) -> pl.DataFrame:
    """Skew between ranks of each collective instance, matched by process group and sequence.

    The short form of `collective_instances` (see `proftab.ranks.collectives` for the matching).
    The rank that starts last is the straggler the others wait for.

    Returns
    -------
    polars.DataFrame
        ``group``, ``seq``, ``collective``, ``n_ranks``, ``first_start_utc``,
        ``start_skew_ns`` (latest minus earliest absolute start), ``end_skew_ns``,
        ``last_rank`` (latest start), ``min_dur_ns``, ``max_dur_ns``; sorted by
        ``first_start_utc``.
    """
    inst = collective_instances(collective_ranks(events, files, offsets_ns=offsets_ns, pattern=pattern))
    return inst.select(
        "group", "seq", "collective", "n_ranks",
        pl.col("first_start_ns").cast(pl.Datetime("ns", "UTC")).alias("first_start_utc"),
        "start_skew_ns", "end_skew_ns", "last_rank",
        pl.col("transfer_ns").alias("min_dur_ns"), "max_dur_ns")


@register_trace_namespace("ranks")
class RanksNamespace:
    """`tr.ranks`: the cross-rank tables of a Trace (the module functions over its frames)."""

    def __init__(self, trace: Trace) -> None:
        self._trace = trace

    def _events(self) -> pl.DataFrame:
        return self._trace.collect("events", _EVENT_COLUMNS)

    def step_times(self, *, offsets_ns: Mapping[int, int] | None = None) -> pl.DataFrame:
        """Per-rank `ProfilerStep#N` windows (`step_times`)."""
        if "summary_steps" in self._trace.tables:
            return step_times(pl.DataFrame(), self._trace.files, offsets_ns=offsets_ns,
                              windows=self._trace.collect("summary_steps"))
        return step_times(self._events(), self._trace.files, offsets_ns=offsets_ns)

    def slowest_ranks(self, *, offsets_ns: Mapping[int, int] | None = None) -> pl.DataFrame:
        """Per step: slowest/fastest rank, spread and skew (`slowest_ranks`)."""
        if "summary_steps" in self._trace.tables:
            return slowest_ranks(pl.DataFrame(), self._trace.files, offsets_ns=offsets_ns,
                                 windows=self._trace.collect("summary_steps"))
        return slowest_ranks(self._events(), self._trace.files, offsets_ns=offsets_ns)

    def collective_times(self, *, by_step: bool = True, pattern: str = COLLECTIVE_PATTERN) -> pl.DataFrame:
        """Per rank (and step) time in collective kernels, exposed and overlapped (`collective_times`)."""
        return collective_times(self._events(), by_step=by_step, pattern=pattern)

    def collective_skew(self, *, offsets_ns: Mapping[int, int] | None = None,
                        pattern: str = COLLECTIVE_PATTERN) -> pl.DataFrame:
        """Start/end skew between ranks of each collective kernel (`collective_skew`)."""
        return collective_skew(self._events(), self._trace.files, offsets_ns=offsets_ns, pattern=pattern)

    def key_averages(self, *, by_rank: bool = False) -> pl.DataFrame:
        """key_averages over all ranks merged from the per-rank summaries (`merge_key_averages`),
        or the per-rank tables themselves with `by_rank`; a dataset without the summary (or a
        loaded trace) gives `tr.key_averages()` (with a null ``rank`` column when `by_rank`)."""
        from proftab.ranks.merge import merge_key_averages

        if "summary_key_averages" in self._trace.tables:
            per_rank = self._trace.collect("summary_key_averages")
            return per_rank if by_rank else merge_key_averages(per_rank)
        ka: pl.DataFrame = self._trace.key_averages()
        return ka.select(pl.lit(None, pl.Int32).alias("rank"), pl.all()) if by_rank else ka

    def _calls(self, pattern: str, threads_per_group: int) -> pl.DataFrame:
        """Every rank's `rank_calls`: the dataset's stored summary when it has one (default options)."""
        if pattern == COLLECTIVE_PATTERN and threads_per_group == 2 and "summary_calls" in self._trace.tables:
            return self._trace.collect("summary_calls")
        return rank_calls(self._trace.collect("events", _COMM_COLUMNS), pattern=pattern,
                          threads_per_group=threads_per_group)

    def collective_ranks(self, *, offsets_ns: Mapping[int, int] | None = None, pattern: str = COLLECTIVE_PATTERN,
                         threads_per_group: int = 2) -> pl.DataFrame:
        """One row per (collective instance, rank), matched by group and sequence (`collective_ranks`)."""
        return match_calls(self._calls(pattern, threads_per_group), self._trace.files, offsets_ns=offsets_ns)

    def collective_instances(self, *, offsets_ns: Mapping[int, int] | None = None,
                             pattern: str = COLLECTIVE_PATTERN, threads_per_group: int = 2) -> pl.DataFrame:
        """One row per collective instance: skew, transfer/wait, algbw/busbw, cause (`collective_instances`)."""
        return collective_instances(self.collective_ranks(offsets_ns=offsets_ns, pattern=pattern,
                                                          threads_per_group=threads_per_group))

    def rank_step_comm(self, *, offsets_ns: Mapping[int, int] | None = None, pattern: str = COLLECTIVE_PATTERN,
                       threads_per_group: int = 2) -> pl.DataFrame:
        """Per rank and step: communication, exposed, waiting, straggler and cause (`rank_step_comm`)."""
        cr = self.collective_ranks(offsets_ns=offsets_ns, pattern=pattern, threads_per_group=threads_per_group)
        if pattern == COLLECTIVE_PATTERN and threads_per_group == 2 and "summary_comm" in self._trace.tables:
            comm = self._trace.collect("summary_comm")
        else:
            comm = rank_comm(self._calls(pattern, threads_per_group), self._trace.collect("events", _COMM_COLUMNS))
        return rank_step_comm(cr, collective_instances(cr), comm)


#: the event columns the cross-rank tables read (a scanned dataset reads only these)
_EVENT_COLUMNS = ["rank", "event_id", "cat", "name", "tid", "start_ns", "end_ns", "dur_ns", "collective_name",
                  "process_group_name", "process_group_ranks", "seq", "dtype", "in_msg_nelems", "out_msg_nelems",
                  "group_size", "input_dims", "input_type"]
_COMM_COLUMNS = _EVENT_COLUMNS
