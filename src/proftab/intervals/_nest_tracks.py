"""Nesting, step 0: a dense int64 track id per row from the track key columns (`proftab.intervals.nest`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import polars as pl

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["track_ids"]


def track_ids(events: pl.DataFrame, by: Sequence[str]) -> tuple[np.ndarray, int]:
    """Dense int64 track id per row (arbitrary but consistent numbering) and the track count.

    Each key column gets dense codes of its own (a constant or all-null column none at all), the
    codes are combined exactly as mixed-radix digits and the combination made dense: no struct,
    hash table or group-by over all rows, so the memory is a few int64 arrays.
    """
    n = events.height
    if not by or n == 0:
        return np.zeros(n, dtype=np.int64), 1 if n else 0
    tid: np.ndarray | None = None
    radix = 1
    for name in by:
        codes, k = _column_codes(events.get_column(name))
        if codes is None:
            continue
        if radix * k >= 2**62:  # the mixed-radix id would overflow: rank the key rows instead
            return _track_ids_ranked(events, by)
        if tid is None:
            tid = codes if codes.flags.writeable else codes.copy()
        else:
            tid *= k
            tid += codes
        radix *= k
    if tid is None:
        return np.zeros(n, dtype=np.int64), 1
    if radix <= 4 * n + 1024:  # a small key space: the ids present by one count, renumbered in order
        present = np.bincount(tid, minlength=radix) > 0
        if present.all():  # already dense
            return tid, radix
        dense = np.cumsum(present) - 1
        return dense[tid], int(dense[-1]) + 1
    uniq = pl.Series(tid).unique().sort().to_numpy()
    if len(uniq) == radix:  # already dense
        return tid, radix
    return np.searchsorted(uniq, tid).astype(np.int64, copy=False), len(uniq)


def _column_codes(col: pl.Series) -> tuple[np.ndarray | None, int]:
    """(dense int64 code per row, number of codes), or (None, 1) for a column with one value.

    Null is a value of its own.
    """
    n, nulls = len(col), col.null_count()
    if nulls == n:
        return None, 1
    if col.dtype.is_integer() or col.dtype == pl.Boolean:
        if col.min() == col.max():  # one value (code 0) and null (code 1): no unique, no search
            return (None, 1) if not nulls else (col.is_null().to_numpy().astype(np.int64), 2)
        values = col.drop_nulls().unique().sort()
        uniq = values.cast(pl.Int64).to_numpy() if col.dtype != pl.UInt64 else values.to_numpy()
        filled = col if not nulls else col.fill_null(values[0])
        codes = np.searchsorted(uniq, filled.to_numpy()).astype(np.int64, copy=False)
        if nulls:
            codes[col.is_null().to_numpy()] = len(uniq)
        return codes, len(uniq) + (1 if nulls else 0)
    if 2 * nulls > n:  # mostly null (a text pid/tid on a few span rows): rank only the values
        ranked = col.drop_nulls().rank("dense").cast(pl.Int64)  # 1..k, in row order
        codes = np.zeros(n, np.int64)
        codes[col.is_not_null().to_numpy()] = ranked.to_numpy()
        return codes, int(ranked.max() or 0) + 1  # type: ignore[arg-type]
    ranked = col.rank("dense")  # 1..k, nulls stay null
    k = int(ranked.cast(pl.Int64).max() or 0)  # type: ignore[arg-type]
    if k == 1 and not nulls:
        return None, 1
    codes = ranked.fill_null(0).cast(pl.Int64).to_numpy(writable=True)
    return codes, k + 1


def _track_ids_ranked(events: pl.DataFrame, by: Sequence[str]) -> tuple[np.ndarray, int]:
    """Dense track ids by ranking whole key rows (the fallback for huge key spaces)."""
    keys = events.select(by)
    tid = keys.select(pl.struct(by).rank("dense")).to_series().to_numpy()
    return tid.astype(np.int64) - 1, int(tid.max())
