"""Profiler steps: the host `ProfilerStep#N` windows of each rank, and which step an event is in.

The one definition every analysis uses (key_averages by step, cross-rank tables, plots, diff,
the summary card): a step is a host-side event named `ProfilerStep#N` with an integer `N`
(the `gpu_user_annotation` copy Kineto writes on device streams is not a step window).
"""

from __future__ import annotations

import polars as pl

from proftab import kinds

__all__ = ["STEP_PREFIX", "assign_steps", "step_windows"]

#: the name prefix of a profiler step window (`ProfilerStep#N`)
STEP_PREFIX = "ProfilerStep#"


def step_windows(events: pl.DataFrame) -> pl.DataFrame:
    """One row per host `ProfilerStep#N`: `rank`, `step` (N), `name`, `start_ns`, `end_ns`,
    `dur_ns`, `event_id`; sorted by rank and start."""
    host = kinds.is_host()
    return (
        events.filter(pl.col("name").str.starts_with(STEP_PREFIX) & host)
        .select("rank", pl.col("name").str.strip_prefix(STEP_PREFIX).cast(pl.Int64, strict=False).alias("step"),
                "name", "start_ns", "end_ns", "dur_ns", "event_id")
        .filter(pl.col("step").is_not_null())
        .sort("rank", "start_ns")
    )


def assign_steps(rows: pl.DataFrame, windows: pl.DataFrame) -> pl.DataFrame:
    """`rows` (any frame with `rank`, `start_ns`) plus `step`: the window of the same rank
    that holds the row's start (`start <= t < end`), null outside every step. Row order kept."""
    w = windows.select("rank", "step", pl.col("start_ns").alias("_s0"), pl.col("end_ns").alias("_s1"))
    joined = rows.with_row_index("_pos").sort("rank", "start_ns").join_asof(
        w.sort("rank", "_s0"), left_on="start_ns", right_on="_s0", by="rank", strategy="backward",
        check_sortedness=False)  # both sides sorted by (rank, time) above
    return joined.with_columns(
        step=pl.when(pl.col("start_ns") < pl.col("_s1")).then(pl.col("step")).otherwise(None)
    ).sort("_pos").drop("_s0", "_s1", "_pos")
