"""Merging per-rank tables into one over all ranks (the mergeable summaries a conversion stores)."""

from __future__ import annotations

import polars as pl

__all__ = ["merge_key_averages"]

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
