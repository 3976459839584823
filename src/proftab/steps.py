"""What a step is: the host `ProfilerStep#N` windows, torch's `ProfilerStep*` rule, user steps, warm-up.

The one definition every analysis uses (key_averages by step, cross-rank tables, plots, diff,
critical path, findings, the summary card):

* a **profiler step** is a host-side event named `ProfilerStep#N` with an integer `N` (the
  `gpu_user_annotation` copy Kineto writes on device streams is not a step window);
  `step_windows` lists them, `assign_steps` puts rows in them, `step_threads` names the
  thread that drives each;
* torch groups every `ProfilerStep#N` under one name, `ProfilerStep*` (`torch_step_name`,
  `torch_step_name_expr`), so that steps aggregate in `key_averages` and the call trees;
* a **user step** is an occurrence of a host event the user names (`named_windows`: a
  `record_function` region such as `train_step`), numbered per rank in time order;
* the **warm-up** is each rank's first steps (`DEFAULT_WARMUP_STEPS`: allocator, caches,
  autotuning), left out where steps are samples (`after_warmup`).
"""

from __future__ import annotations

import polars as pl

from proftab import kinds

__all__ = ["DEFAULT_WARMUP_STEPS", "STEP_GROUP_NAME", "STEP_PREFIX", "after_warmup", "assign_steps", "named_windows",
           "step_threads", "step_windows", "torch_step_name", "torch_step_name_expr"]

#: the name prefix of a profiler step window (`ProfilerStep#N`)
STEP_PREFIX = "ProfilerStep#"
#: torch's name for every profiler step together (`key_averages`, `tr.table()`, the call trees)
STEP_GROUP_NAME = "ProfilerStep*"
#: the first steps of each rank left out as warm-up where steps are samples (`proftab.diff(stats=True)`)
DEFAULT_WARMUP_STEPS = 2

#: the columns of a step-window frame (`step_windows`, `named_windows`)
WINDOW_COLUMNS = ["rank", "step", "name", "start_ns", "end_ns", "dur_ns", "event_id"]


def torch_step_name(name: str | None) -> str | None:
    """torch's grouping name of one event name: `ProfilerStep#N` -> `ProfilerStep*`, others as they are."""
    return STEP_GROUP_NAME if name is not None and name.startswith(STEP_PREFIX) else name


def torch_step_name_expr(col: str = "name") -> pl.Expr:
    """torch's grouping name of `col` (`torch_step_name`), as an expression (alias it: it is not named)."""
    return pl.when(pl.col(col).str.starts_with(STEP_PREFIX)).then(pl.lit(STEP_GROUP_NAME)).otherwise(pl.col(col))


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


def named_windows(events: pl.DataFrame, name: str, *, prefix: bool = False,
                  user_annotations_only: bool = False) -> pl.DataFrame:
    """User steps: each host event named `name` is a window, `step` its index on its rank in time order.

    Parameters
    ----------
    events
        Any frame with `rank`, `cat`, `name`, `start_ns`, `end_ns`, `dur_ns`, `event_id`.
    name
        The window's name.
    prefix
        Every event whose name starts with `name` is a window (`proftab.diff`'s `window`), not
        only those named `name` exactly (the critical path's named windows).
    user_annotations_only
        Only `record_function` regions (`user_annotation`), not any host op.

    Returns
    -------
    pl.DataFrame
        `WINDOW_COLUMNS`, sorted by rank and start.
    """
    named = pl.col("name").str.starts_with(name) if prefix else pl.col("name") == name
    host = kinds.is_user_annotation() if user_annotations_only else kinds.is_host_op()
    return (events.filter(host & named).sort("rank", "start_ns")
            .select("rank", pl.int_range(pl.len()).over("rank").cast(pl.Int64).alias("step"), "name", "start_ns",
                    "end_ns", "dur_ns", "event_id"))


def after_warmup(windows: pl.DataFrame, warmup: int = DEFAULT_WARMUP_STEPS) -> pl.DataFrame:
    """`windows` without each rank's first `warmup` steps (the lowest step numbers of the rank)."""
    first = windows.group_by("rank").agg(pl.col("step").sort().head(warmup).alias("_skip"))
    return windows.join(first, on="rank", how="left").filter(
        ~pl.col("step").is_in(pl.col("_skip")).fill_null(False)).drop("_skip")


def step_threads(events: pl.DataFrame) -> pl.DataFrame:
    """`step_windows` plus the `pid` / `tid` of the thread that drives each step (its
    `ProfilerStep#N` event's thread). One pass over `events` (the step rows are picked first)."""
    rows = events.filter(pl.col("name").str.starts_with(STEP_PREFIX)).select(
        "rank", "cat", "name", "start_ns", "end_ns", "dur_ns", "event_id", "pid", "tid")
    w = step_windows(rows.drop("pid", "tid"))
    return w.join(rows.select("rank", "event_id", "pid", "tid"), on=["rank", "event_id"], how="left")


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
