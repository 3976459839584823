"""Merge intervals into their disjoint union, per group (generic: start_ns, end_ns, keys)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["merge_intervals"]


def merge_intervals(df: pl.DataFrame, *, by: Sequence[str]) -> pl.DataFrame:
    """Union of the `[start_ns, end_ns)` intervals per `by`, as disjoint intervals.

    Touching intervals (`start == previous end`) are merged. Returns the `by` columns,
    `start_ns`, `end_ns`, sorted by `by` then `start_ns`.
    """
    by = list(by)
    prev_end = pl.col("end_ns").cum_max().shift(1).over(by)
    return (
        df.select(*by, "start_ns", "end_ns")
        .sort([*by, "start_ns"], nulls_last=True)
        .with_columns(_blk=(pl.col("start_ns") > prev_end).fill_null(True).cum_sum().over(by))
        .group_by([*by, "_blk"]).agg(pl.col("start_ns").min(), pl.col("end_ns").max())
        .sort([*by, "start_ns"], nulls_last=True)
        .drop("_blk")
    )
