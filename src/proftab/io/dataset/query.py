"""Lazy, pushed-down selections over a Trace's tables (a scanned dataset stays out of core).

`select_events` builds a `polars.LazyFrame` whose filters on ``rank``, ``cat`` and the time
window, and whose column list, Polars pushes into the Parquet scan: row groups and whole rank
files whose statistics cannot match are skipped, and only the named columns are decoded.
``steps`` become per-rank time windows read from the dataset's small ``summary_steps`` table
(or the step events).  Aggregates over the result run in Polars' streaming engine with
``collect(engine="streaming")``, in bounded memory (docs/scale.md has measurements).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

from proftab.api import register_trace_method
from proftab.steps import STEP_PREFIX, step_windows

if TYPE_CHECKING:
    from collections.abc import Sequence

    from proftab.trace import Trace

__all__ = ["select_events", "step_bounds"]


def step_bounds(trace: Trace, steps: Sequence[int], ranks: Sequence[int] | None = None) -> pl.DataFrame:
    """``rank``, ``step``, ``start_ns``, ``end_ns`` of the given ``ProfilerStep#N`` windows."""
    if "summary_steps" in trace.tables:
        w = trace.lazy("summary_steps")
    else:
        w = step_windows(trace.lazy("events").filter(pl.col("name").str.starts_with(STEP_PREFIX))
                         .select("rank", "cat", "name", "start_ns", "end_ns", "dur_ns", "event_id").collect()).lazy()
    w = w.filter(pl.col("step").is_in(list(steps)))
    if ranks is not None:
        w = w.filter(pl.col("rank").is_in(list(ranks)))
    return w.select("rank", "step", "start_ns", "end_ns").collect()


@register_trace_method("select_events")
def select_events(trace: Trace, *, table: str = "events", ranks: Sequence[int] | None = None,
                  steps: Sequence[int] | None = None, cats: Sequence[str] | None = None,
                  window: tuple[int, int] | None = None, columns: Sequence[str] | None = None) -> pl.LazyFrame:
    """The rows of `table` (``events`` or ``nested``) that match every given filter, lazily.

    Parameters
    ----------
    ranks
        Keep these ranks.
    steps
        Keep events starting inside these ``ProfilerStep#N`` windows (each rank's own window).
    cats
        Keep these categories (``cpu_op``, ``kernel``, ...).
    window
        ``(start_ns, end_ns)`` on the ranks' own time axis: events overlapping it.
    columns
        Read only these columns (plus none other: filter columns are read for the filter).

    Returns
    -------
    polars.LazyFrame
        Nothing is read until it is collected.
    """
    lf = trace.lazy(table)
    preds: list[pl.Expr] = []
    if ranks is not None:
        preds.append(pl.col("rank").is_in(list(ranks)))
    if cats is not None:
        preds.append(pl.col("cat").is_in(list(cats)))  # on the Categorical itself: pushed to the scan
    if window is not None:
        preds.append((pl.col("start_ns") < window[1]) & (pl.col("end_ns") > window[0]))
    if steps is not None:
        bounds = step_bounds(trace, steps, ranks)
        if bounds.height == 0:
            preds.append(pl.lit(False))
        else:
            # one range per (rank, step), OR-ed: each is a plain comparison Polars can push down
            # (the overall start bounds go first so that row-group statistics prune)
            lo, hi = int(bounds["start_ns"].min()), int(bounds["end_ns"].max())  # type: ignore[arg-type]
            preds.append((pl.col("start_ns") >= lo) & (pl.col("start_ns") < hi))
            preds.append(pl.any_horizontal([
                (pl.col("rank") == r) & (pl.col("start_ns") >= s) & (pl.col("start_ns") < e)
                for r, _, s, e in bounds.iter_rows()]))
    for p in preds:
        lf = lf.filter(p)
    if columns is not None:
        lf = lf.select(list(columns))
    return lf
