"""Rule `thread_imbalance`: one host thread does far more work per step than its peers.

Per step (the rank's `ProfilerStep#N` window), each host thread other than the step thread is
*busy* for the union of its ops, runtime calls and `record_function` regions inside the window.
Threads busy for at least `MIN_THREAD_SHARE` of the step are the pool. With at least two of
them, the busiest is the straggler when its busy time is at least `MIN_RATIO` times the pool's
median (lower): the step waits for it while the others idle.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

from proftab import kinds
from proftab.findings._base import finding, frame, host_work, register_rule, trace_steps
from proftab.intervals import merge_intervals
from proftab.intervals.overlap import overlap_join
from proftab.render.text import fmt_ns, fmt_share
from proftab.steps import STEP_PREFIX, step_threads

if TYPE_CHECKING:
    from proftab.trace import Trace

__all__ = ["MIN_RATIO", "MIN_THREAD_SHARE", "thread_busy", "thread_imbalance"]

#: the straggler is busy at least this many times the median thread
MIN_RATIO = 1.5
#: a thread takes part from this share of the step
MIN_THREAD_SHARE = 0.01
_THREAD = ["rank", "pid", "tid"]


def _worker_rows() -> pl.Expr:
    annotation = kinds.is_user_annotation() & ~pl.col("name").str.starts_with(STEP_PREFIX)
    return (host_work() | annotation.fill_null(False)) & (pl.col("end_ns") > pl.col("start_ns"))


def thread_busy(nested: pl.DataFrame, steps: pl.DataFrame) -> pl.DataFrame:
    """Busy time per step and host thread other than the step thread: `rank`, `step`, `pid`,
    `tid`, `busy_ns` (union of its work rows clipped to the step)."""
    # each thread's union first, then clipped to the steps (the union of clipped rows is the clipped union)
    work = merge_intervals(nested.lazy().select(*_THREAD, "start_ns", "end_ns", _worker_rows().alias("_w")).filter(
        pl.col("_w")).collect().join(
        steps.select(*_THREAD).unique(), on=_THREAD, how="anti"), by=_THREAD)
    win = steps.select("rank", "step", pl.col("start_ns").alias("w0"), pl.col("end_ns").alias("w1"))
    pairs = overlap_join(work, win, by=["rank"], right_on=("w0", "w1"))
    clipped = pairs.select(*_THREAD, "step", pl.max_horizontal("start_ns", "w0").alias("start_ns"),
                           pl.min_horizontal("end_ns", "w1").alias("end_ns"))
    merged = merge_intervals(clipped, by=[*_THREAD, "step"])
    return merged.group_by("rank", "step", "pid", "tid").agg(
        (pl.col("end_ns") - pl.col("start_ns")).sum().alias("busy_ns")).sort("rank", "step", "tid")


def thread_imbalance(nested: pl.DataFrame, events: pl.DataFrame, threads: pl.DataFrame, *,
                     min_ratio: float = MIN_RATIO, min_thread_share: float = MIN_THREAD_SHARE,
                     steps: pl.DataFrame | None = None) -> pl.DataFrame:
    """Findings: the straggler thread of each rank (module docstring).

    `value` is the straggler's excess over the median thread, ns per step (Σ over steps //
    steps); `share` that excess over the steps' total; `est_saving_ns` its excess over the mean
    thread per step (what an even split would save); `evidence` the straggler's work rows
    (`events`) overlapping the steps (their union clipped to each step is its busy time).
    `steps`: `step_threads(events)` when already computed.
    """
    steps = step_threads(events) if steps is None else steps
    if steps.is_empty():
        return frame([])
    busy = thread_busy(nested, steps).join(steps.select("rank", "step", pl.col("dur_ns").alias("step_ns")),
                                           on=["rank", "step"])
    pool = busy.filter(pl.col("busy_ns") >= min_thread_share * pl.col("step_ns"))
    per = pool.group_by("rank", "step").agg(
        pl.len().alias("n_threads"), pl.col("busy_ns").max().alias("max_ns"),
        pl.col("busy_ns").quantile(0.5, interpolation="lower").cast(pl.Int64).alias("median_ns"),
        pl.col("busy_ns").mean().alias("mean_ns"),
        pl.col("tid").sort_by("busy_ns", "tid", descending=[True, False]).first().alias("straggler"),
        pl.col("pid").sort_by("busy_ns", "tid", descending=[True, False]).first().alias("straggler_pid"),
        pl.col("step_ns").first()).filter(pl.col("n_threads") >= 2)
    names = threads.select("rank", "pid", "tid", "thread_name").unique(["rank", "pid", "tid"])
    rows = []
    for (rank,), st in per.group_by(["rank"], maintain_order=True):
        # the thread most often the straggler; its excess summed over the steps
        tid = st["straggler"].mode().sort()[0]
        mine = st.filter(pl.col("straggler") == tid)
        excess = int((mine["max_ns"] - mine["median_ns"]).sum())
        ratio = float(mine["max_ns"].sum() / max(int(mine["median_ns"].sum()), 1))
        if ratio < min_ratio:
            continue
        n = steps.filter(pl.col("rank") == rank).height
        total = int(steps.filter(pl.col("rank") == rank)["dur_ns"].sum())
        saving = int((mine["max_ns"] - mine["mean_ns"]).sum()) // n
        pid = mine["straggler_pid"][0]
        name = names.filter((pl.col("rank") == rank) & (pl.col("pid") == pid) & (pl.col("tid") == tid))["thread_name"]
        label = name[0] if name.len() and name[0] else f"thread {tid}"
        mine_rows = nested.filter(_worker_rows() & (pl.col("rank") == rank) & (pl.col("pid") == pid)
                                  & (pl.col("tid") == tid))
        ev = overlap_join(mine_rows.select("rank", "event_id", "start_ns", "end_ns"),
                          steps.filter(pl.col("rank") == rank).select("rank", "step", pl.col("start_ns").alias("w0"),
                                                                     pl.col("end_ns").alias("w1")),
                          by=["rank"], right_on=("w0", "w1"))["event_id"].unique().sort()
        n_threads = st["n_threads"].cast(pl.Int64).max()
        rows.append(finding(
            "thread_imbalance", "high" if ratio >= 3 else "medium", value=excess // n, unit="ns_per_step",
            share=excess / total if total else None, est_saving_ns=saving, rank=rank,
            scope=f"thread={tid} ({label})", evidence=ev.to_list(),
            message=f"{label} is busy {ratio:.1f}x the median of {n_threads!s} worker threads: "
                    f"{fmt_ns(excess // n)} per step more ({fmt_share(excess / total if total else 0)} of step time)",
            suggestion="split the work evenly (smaller tasks, a shared queue instead of fixed chunks) so no "
                       "thread finishes last by far"))
    return frame(rows)


@register_rule("thread_imbalance", "one host thread doing far more work per step than the others")
def _run(trace: Trace) -> pl.DataFrame:
    return thread_imbalance(trace.collect("nested"), trace.collect("events"), trace.collect("threads"),
                            steps=trace_steps(trace))
