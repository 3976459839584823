"""Interval unions per group (generic: start_ns, end_ns, keys): the disjoint intervals and their length.

The one definition of an interval union in proftab; everything that needs busy time uses it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import polars as pl

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["merge_intervals", "union_ns"]


def merge_intervals(df: pl.DataFrame, *, by: Sequence[str]) -> pl.DataFrame:
    """Union of the `[start_ns, end_ns)` intervals per `by`, as disjoint intervals.

    Touching intervals (`start == previous end`) are merged. Returns the `by` columns,
    `start_ns`, `end_ns`, sorted by `by` then `start_ns`. O(n log n): one sort (O(n) when the
    rows are sorted already), then one running max over all groups at once (each group's ends
    lifted above the previous group's) and one reduction per block.
    """
    by = list(by)
    rows = df.select(*by, "start_ns", "end_ns").sort([*by, "start_ns"], nulls_last=True)
    if rows.is_empty() or rows.select(pl.col("start_ns").is_null().any() | pl.col("end_ns").is_null().any()).item():
        return _merge_polars(rows, by)
    start = rows.get_column("start_ns").cast(pl.Int64).to_numpy()
    end = rows.get_column("end_ns").cast(pl.Int64).to_numpy()
    n = len(start)
    first = np.zeros(n, bool)
    first[0] = True
    if by:
        first[1:] = rows.select(pl.any_horizontal(
            [pl.col(c).ne_missing(pl.col(c).shift(1)) for c in by]).fill_null(True)).to_series().to_numpy()[1:]
    base = int(min(start.min(), end.min()))
    span = int(max(start.max(), end.max())) - base + 1
    group = np.cumsum(first) - 1
    if (int(group[-1]) + 1) * span >= _KEY_LIMIT:  # lifted ends would overflow: the per-group window path
        return _merge_polars(rows, by)
    lift = group * span - base
    running = np.maximum.accumulate(end + lift)  # a group's running max end, never the previous group's
    new_block = first.copy()
    new_block[1:] |= (start[1:] + lift[1:]) > running[:-1]
    heads = np.flatnonzero(new_block)
    ends = np.maximum.reduceat(end, heads)
    times = [pl.Series("start_ns", start[heads]).cast(rows.schema["start_ns"]),
             pl.Series("end_ns", ends).cast(rows.schema["end_ns"])]
    return rows[heads].select(by).with_columns(times) if by else pl.DataFrame(times)


#: lifted ends stay below this (int64 headroom)
_KEY_LIMIT = 2**62


def _merge_polars(rows: pl.DataFrame, by: list[str]) -> pl.DataFrame:
    """`merge_intervals` of rows sorted by `by`, `start_ns` with window expressions (null times,
    or groups x span beyond int64)."""
    if not by:
        rows = rows.with_columns(_all=pl.lit(0))
        return _merge_polars(rows, ["_all"]).drop("_all")
    prev_end = pl.col("end_ns").cum_max().shift(1).over(by)
    return (
        rows.with_columns(_blk=(pl.col("start_ns") > prev_end).fill_null(True).cum_sum().over(by))
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
