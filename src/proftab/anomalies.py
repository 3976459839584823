"""`tr.anomalies`: events that break nesting or carry damage, one row per finding."""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

from proftab import schema
from proftab.api import register_trace_namespace

if TYPE_CHECKING:
    from proftab.trace import Trace

__all__ = ["ANOMALY_COLUMNS", "anomalies"]

ANOMALY_COLUMNS = ["kind", "rank", "event_id", "name", "cat", "pid", "tid", "start_ns", "end_ns", "dur_ns",
                   "parent_id", "parent_name", "parent_cat", "overrun_ns"]


def anomalies(nested: pl.DataFrame, files: pl.DataFrame) -> pl.DataFrame:
    """One row per finding, sorted by rank and event.

    `kind`: `overrun` (ends after its parent, beyond the file's time resolution),
    `negative_dur`, `unmatched_begin`, `unfinished` (`"finished": false`), `name_repaired`.
    """
    res = files.select("rank", pl.col("time_resolution_ns").alias("_res"))
    parents = nested.select("rank", pl.col("event_id").alias("parent_id"),
                            pl.col("name").alias("parent_name"), pl.col("cat").alias("parent_cat"))
    over = (
        nested.filter(pl.col("overrun_ns") > 0)
        .join(res, on="rank", how="left")
        .filter((pl.col("_res") <= 1) | (pl.col("overrun_ns") > pl.col("_res")))
        .join(parents, on=["rank", "parent_id"], how="left")
        .with_columns(kind=pl.lit("overrun"))
    )

    def flagged_with(flag: schema.Flag) -> pl.Expr:
        return (pl.col("flags") & int(flag)) != 0

    # the first finding that applies; null for a clean event
    kind = (
        pl.when(flagged_with(schema.Flag.NEGATIVE_DUR)).then(pl.lit("negative_dur"))
        .when(flagged_with(schema.Flag.UNMATCHED_BEGIN)).then(pl.lit("unmatched_begin"))
        .when(pl.col("finished") == False).then(pl.lit("unfinished"))  # noqa: E712 - polars expression
        .when(flagged_with(schema.Flag.NAME_REPAIRED)).then(pl.lit("name_repaired"))
    )
    flagged = nested.filter(kind.is_not_null()).with_columns(
        kind=kind,
        parent_name=pl.lit(None, pl.String),
        parent_cat=pl.lit(None, pl.Categorical),
    )
    return pl.concat([over.select(ANOMALY_COLUMNS), flagged.select(ANOMALY_COLUMNS)],
                     how="vertical_relaxed").sort(["rank", "event_id"])


@register_trace_namespace("anomalies")
def _trace_anomalies(trace: Trace) -> pl.DataFrame:
    """The trace's anomalies: a dataset's stored table, else computed from `nested`."""
    if "anomalies" in trace.tables:
        return trace.collect("anomalies")
    return anomalies(trace.collect("nested"), trace.files)
