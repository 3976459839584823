"""Merging per-rank tables into one over all ranks (the mergeable summaries a conversion stores)."""

from __future__ import annotations

import polars as pl

from proftab.torch.columns import COLUMNS, KeyAveragesColumn, names

__all__ = ["merge_key_averages"]

#: the columns that add up across ranks (counts, times, memory, FLOPs)
_SUM = names("count", "sum")
#: the columns a merged row is keyed on: the key columns and the flags (the same on every rank)
_KEYS = names("key", "flag")


def _merged(column: KeyAveragesColumn) -> pl.Expr | None:
    """The merged value of a derived `column` (an average, a share, a percentile); None for the others."""
    name = column.name
    calls = pl.col(names("count")[0])
    if column.role == "mean":
        return pl.when(calls > 0).then(pl.col(column.of[0]) / calls).alias(name)
    if column.role == "quantile":  # percentiles do not merge
        return pl.lit(None, pl.Int64).alias(name)
    if column.role == "share" and column.over == "host":  # over the merged table
        total = pl.col(column.of[0]).sum()
        return pl.when(total > 0).then(pl.col(column.of[0]) / total).alias(name)
    if column.role == "share":  # each rank's own wall time: does not merge
        return pl.lit(None, pl.Float64).alias(name)
    return None


def merge_key_averages(per_rank: pl.DataFrame) -> pl.DataFrame:
    """One key_averages table over all ranks from ``summary_key_averages`` (one table per rank).

    Counts, totals, memory and flops add up; ``min_ns`` / ``max_ns`` are the min / max over
    ranks; averages are recomputed (total / calls); ``self_cpu_share`` is recomputed over the
    merged table; ``p50_ns`` / ``p95_ns`` and ``wall_share`` do not merge and are null;
    ``ranks`` counts the ranks that have the row.  Sorted by ``self_cpu_ns`` descending.
    The columns' roles are those of `proftab.torch.columns`.
    """
    keys = [k for k in _KEYS if k in per_rank.columns]
    out = per_rank.group_by(keys, maintain_order=True).agg(
        *[pl.col(c).sum() for c in _SUM if c in per_rank.columns],
        *[pl.col(c.name).min() for c in COLUMNS if c.role == "min"],
        *[pl.col(c.name).max() for c in COLUMNS if c.role == "max"],
        pl.col("rank").n_unique().cast(pl.Int64).alias("ranks"))
    out = out.with_columns(e for e in (_merged(c) for c in COLUMNS) if e is not None)
    cols = [c for c in per_rank.columns if c != "rank"] + ["ranks"]
    return out.select(cols).sort("self_cpu_ns", descending=True, maintain_order=True)
