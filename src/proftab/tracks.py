"""Tracks (a host thread or a device stream per rank) and the labels every renderer shows for them."""

from __future__ import annotations

import polars as pl

from proftab import kinds, schema

__all__ = ["track_labels"]


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
