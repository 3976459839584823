"""Interval unions per group (generic: start_ns, end_ns, keys): the disjoint intervals and their length.

The one definition of an interval union in proftab; everything that needs busy time uses it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["merge_intervals", "union_ns"]


def merge_intervals(df: pl.DataFrame, *, by: Sequence[str]) -> pl.DataFrame:
    """Union of the `[start_ns, end_ns)` intervals per `by`, as disjoint intervals.

    Touching intervals (`start == previous end`) are merged. Returns the `by` columns,
    `start_ns`, `end_ns`, sorted by `by` then `start_ns`. O(n log n): one sort, one running max.
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


def union_ns(events: pl.DataFrame, *, by: Sequence[str]) -> pl.DataFrame:
    """Length of the union of the `[start_ns, end_ns)` intervals of each group.

    Parameters
    ----------
    events
        ``start_ns``, ``end_ns`` (Int64, ``end >= start``, no nulls) and the ``by`` columns.
    by
        Group key columns (nulls are ordinary key values).

    Returns
    -------
    pl.DataFrame
        One row per group: the ``by`` columns and ``union_ns`` (Int64), sorted by ``by``
        (nulls last).

    Raises
    ------
    ValueError
        A null time, or an interval that ends before it starts.
    """
    by = list(by)
    bad = events.select((pl.col("start_ns").is_null() | pl.col("end_ns").is_null()).any().alias("null"),
                        (pl.col("end_ns") < pl.col("start_ns")).any().alias("neg")).row(0)
    if bad[0]:
        msg = "union_ns: null start_ns/end_ns"
        raise ValueError(msg)
    if bad[1]:
        msg = "union_ns: end_ns < start_ns"
        raise ValueError(msg)
    length = (pl.col("end_ns") - pl.col("start_ns")).sum().cast(pl.Int64).alias("union_ns")
    if not by:
        merged = merge_intervals(events.with_columns(_all=pl.lit(0)), by=["_all"])
        return merged.select(length)
    return merge_intervals(events, by=by).group_by(by).agg(length).sort(by, nulls_last=True)
