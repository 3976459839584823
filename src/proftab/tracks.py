"""Tracks (a host thread or a device stream per rank), the labels renderers show, thread views."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

import polars as pl

from proftab import kinds, schema
from proftab.api import register_trace_method
from proftab.exceptions import UsageError
from proftab.steps import STEP_PREFIX

if TYPE_CHECKING:
    from proftab.trace import Trace

__all__ = ["THREAD_VIEWS", "keep_threads", "select_threads", "thread_view_tracks", "track_labels"]

#: the thread views `select_threads` offers (the CLI's ``--threads``)
THREAD_VIEWS = ("all", "ops", "main")


def track_labels(events: pl.DataFrame, threads: pl.DataFrame) -> pl.DataFrame:
    """One row per track of `events`: the track keys, `kind` (host/device), `label`, `events`, `first_ns`.

    The label is the thread name from the trace metadata (``thread 123 (python3)``,
    ``stream 7``), prefixed with the rank when the trace has several.
    """
    keys = schema.TRACK_KEYS
    tracks = events.group_by(keys).agg(
        pl.len().alias("events"), kinds.is_device().any().alias("_dev"),
        pl.col("start_ns").min().alias("first_ns"))
    names = threads.select(*keys, "thread_name", "thread_sort_index")
    tracks = tracks.join(names, on=keys, how="left", nulls_equal=True)
    pid = pl.coalesce(pl.col("pid").cast(pl.String), pl.col("pid_text"), pl.lit("?"))
    tid = pl.coalesce(pl.col("tid").cast(pl.String), pl.col("tid_text"), pl.lit("?"))
    fallback = pl.when(pl.col("_dev")).then(pl.lit("stream ") + tid).otherwise(pl.lit("thread ") + tid)
    base = pl.coalesce(pl.col("thread_name").str.strip_chars(), fallback)
    base = pl.when(pl.col("pid_text").is_not_null()).then(pid + pl.lit(" / ") + tid).otherwise(base)
    if events.select(pl.col("rank").n_unique()).item() > 1:
        base = pl.lit("rank ") + pl.col("rank").cast(pl.String) + pl.lit(" · ") + base
    return tracks.with_columns(
        kind=pl.when(pl.col("_dev")).then(pl.lit("device")).otherwise(pl.lit("host")),
        label=base,
    ).sort(["rank", "_dev", "thread_sort_index", "pid", "tid"], nulls_last=True).select(
        *keys, "kind", "label", "events", "first_ns")


def thread_view_tracks(events: pl.DataFrame, view: Literal["ops", "main"]) -> pl.DataFrame:
    """The host tracks (`schema.TRACK_KEYS`) a thread view keeps, with ``ops`` and ``steps`` counts.

    ``events`` needs the track keys, ``cat`` and ``name``. ``ops`` keeps every host thread that
    runs at least one op (a host row that is neither a Python frame nor a profiler span): a
    helper thread that only sleeps in Python frames (tqdm's monitor, a pin-memory loop) is left
    out, autograd's backward thread is kept. ``main`` keeps, per rank, the one thread that
    calls ``ProfilerStep#N`` most often, else the one with the most ops.
    """
    keys = list(schema.TRACK_KEYS)
    host = events.filter(kinds.is_host())
    per = host.group_by(keys).agg(
        (kinds.is_host_op() & ~kinds.is_python_frame()).sum().alias("ops"),
        pl.col("name").str.starts_with(STEP_PREFIX).fill_null(False).sum().alias("steps"))
    per = per.filter(pl.col("ops") > 0)
    if view == "main":
        per = (per.sort(["rank", "steps", "ops", "pid", "tid"], descending=[False, True, True, False, False],
                        nulls_last=True)
               .group_by("rank", maintain_order=True).head(1))
    return per.sort(keys, nulls_last=True)


@register_trace_method("select_threads")
def select_threads(trace: Trace, view: str = "ops") -> Trace:
    """`trace` with the host events of the threads of `view` only; device rows all kept.

    `view` is ``"all"`` (the trace itself), ``"ops"`` or ``"main"`` (`thread_view_tracks`).
    Nesting is per thread, so the kept threads nest, aggregate and attribute device time
    exactly as in the whole trace; kernels launched from a left-out thread stay as device
    rows, unattributed to any kept op. Lazy tables stay lazy (a join on the track keys).
    """
    if view not in THREAD_VIEWS:
        msg = f"unknown thread view {view!r}; choose one of {', '.join(THREAD_VIEWS)}"
        raise UsageError(msg)
    if view == "all":
        return trace
    kept = thread_view_tracks(trace.collect("events", [*schema.TRACK_KEYS, "cat", "name"]), view)  # type: ignore[arg-type]
    return keep_threads(trace, kept)


def keep_threads(trace: Trace, kept: pl.DataFrame) -> Trace:
    """`trace` with only the host events of the tracks in `kept` (track-key rows); device rows all kept."""
    from proftab.trace import Trace

    keys = list(schema.TRACK_KEYS)
    marks = kept.select(*keys, pl.lit(True).alias("_kept_thread"))
    wanted = kinds.is_device() | pl.col("_kept_thread").fill_null(False)

    def keep(frame: pl.DataFrame | pl.LazyFrame) -> pl.DataFrame | pl.LazyFrame:
        # a left join keeps the rows in their order; device rows stay whatever their keys
        if isinstance(frame, pl.LazyFrame):
            lazy = frame.join(marks.lazy(), on=keys, how="left", nulls_equal=True, maintain_order="left")
            return lazy.filter(wanted).drop("_kept_thread")
        eager = frame.join(marks, on=keys, how="left", nulls_equal=True, maintain_order="left")
        return eager.filter(wanted).drop("_kept_thread")

    tables = trace.tables
    for name in ("events", "nested"):
        if name in tables:
            tables[name] = keep(tables[name])
    # what a dataset stored about the whole trace no longer describes the selection
    for stale in [t for t in tables if t.startswith("summary_") or t in (schema.STORED_KEY_AVERAGES, "anomalies")]:
        del tables[stale]
    return Trace(tables, trace.files, source=getattr(trace, "_source", None))
