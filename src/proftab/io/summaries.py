"""Small per-rank summaries written next to a rank's tables at convert time.

Each is computed from one rank's trace alone and is *mergeable*: the dataset's table is the
concatenation of the ranks' parts (every row has ``rank``), so cross-rank tables over 1,024
ranks read kilobytes instead of every event (`tr.ranks` uses them when present):

- ``summary_steps``: `proftab.steps.step_windows` (``ProfilerStep#N`` per rank);
- ``summary_calls``: `proftab.ranks.collectives.rank_calls` (collective calls with group, seq,
  sizes, step, the window before each call and its data loading);
- ``summary_comm``: `proftab.ranks.collectives.rank_comm` (per step: communication, exposed);
- ``summary_key_averages``: the rank's `key_averages()` (default options) plus ``rank``;
  counts and totals add up across ranks, averages do not;
- ``summary_device``: `tr.device.busy(by="device")` (busy / idle per device);
- ``summary_anomalies``: anomaly counts per kind.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

if TYPE_CHECKING:
    from collections.abc import Callable

    from proftab.trace import Trace

__all__ = ["SUMMARIES", "merge_key_averages", "rank_summaries"]

SUMMARIES = ("summary_steps", "summary_calls", "summary_comm", "summary_key_averages", "summary_device",
             "summary_anomalies")


def rank_summaries(trace: Trace, rank: int) -> tuple[dict[str, pl.DataFrame], dict[str, str]]:
    """The summaries of a one-rank `trace` (see the module docs), each with a ``rank`` column.

    Best effort: a summary whose computation fails is left out (the dataset then has no such
    table and `tr.ranks` computes from the events); the second value maps it to its error.
    """
    from proftab.ranks import _COMM_COLUMNS as comm_columns
    from proftab.ranks import rank_calls, rank_comm
    from proftab.steps import step_windows

    events = trace.collect("events", comm_columns)
    calls: dict[str, pl.DataFrame] = {}

    def _calls() -> pl.DataFrame:
        if "c" not in calls:
            calls["c"] = rank_calls(events)
        return calls["c"]

    makers: dict[str, Callable[[], pl.DataFrame]] = {
        "summary_steps": lambda: step_windows(events),
        "summary_calls": _calls,
        "summary_comm": lambda: rank_comm(_calls(), events),
        "summary_key_averages": lambda: trace.key_averages().select(pl.lit(rank, pl.Int32).alias("rank"), pl.all()),
        "summary_device": lambda: trace.device.busy(by="device"),
        "summary_anomalies": lambda: trace.anomalies.group_by("rank", "kind").agg(
            pl.len().cast(pl.Int64).alias("count")).sort("kind"),
    }
    out: dict[str, pl.DataFrame] = {}
    errors: dict[str, str] = {}
    for name, make in makers.items():
        try:
            out[name] = make()
        except Exception as e:  # noqa: BLE001 - a summary is an optimization, never a reason to fail a file
            errors[name] = f"{type(e).__name__}: {e}"
    return out, errors


#: key_averages columns that add up across ranks, and those that take the min / max
_SUM = ["calls", "self_cpu_ns", "cpu_total_ns", "self_device_ns", "device_total_ns", "cpu_mem_bytes",
        "self_cpu_mem_bytes", "device_mem_bytes", "self_device_mem_bytes", "flops"]
_KEYS = ["name", "device_type", "is_user_annotation", "overload_name", "input_shapes", "stack", "is_async",
         "top_level"]


def merge_key_averages(per_rank: pl.DataFrame) -> pl.DataFrame:
    """One key_averages table over all ranks from ``summary_key_averages`` (one table per rank).

    Counts, totals, memory and flops add up; ``min_ns`` / ``max_ns`` are the min / max over
    ranks; averages are recomputed (total / calls); ``self_cpu_share`` is recomputed over the
    merged table; ``p50_ns`` / ``p95_ns`` and ``wall_share`` do not merge and are null;
    ``ranks`` counts the ranks that have the row.  Sorted by ``self_cpu_ns`` descending.
    """
    keys = [k for k in _KEYS if k in per_rank.columns]
    out = per_rank.group_by(keys, maintain_order=True).agg(
        *[pl.col(c).sum() for c in _SUM if c in per_rank.columns],
        pl.col("min_ns").min(), pl.col("max_ns").max(), pl.col("rank").n_unique().cast(pl.Int64).alias("ranks"))
    total_self = pl.col("self_cpu_ns").sum()
    out = out.with_columns(
        cpu_avg_ns=pl.when(pl.col("calls") > 0).then(pl.col("cpu_total_ns") / pl.col("calls")),
        device_avg_ns=pl.when(pl.col("calls") > 0).then(pl.col("device_total_ns") / pl.col("calls")),
        p50_ns=pl.lit(None, pl.Int64), p95_ns=pl.lit(None, pl.Int64),
        self_cpu_share=pl.when(total_self > 0).then(pl.col("self_cpu_ns") / total_self),
        wall_share=pl.lit(None, pl.Float64))
    cols = [c for c in per_rank.columns if c != "rank"] + ["ranks"]
    return out.select(cols).sort("self_cpu_ns", descending=True, maintain_order=True)
