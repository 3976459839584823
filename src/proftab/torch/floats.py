"""torch's float arithmetic, reproduced where its text shows it.

torch keeps its times as float µs: each event's `(ns - profile start) / 1000`, a total as
`end - start`, a self time as the total minus the children's totals one by one, and each
key's sums by `+=` in its event order. proftab's times are exact int64 ns; these rules give
torch's floats beside them (`key_averages(..., torch_floats=True)`: `TORCH_FLOAT_COLUMNS`), so
that torch's text table prints byte for byte, rounding ties included (`cpu_microseconds`,
`torch_sum`).
"""

from __future__ import annotations

import numpy as np
import polars as pl

from proftab import kinds
from proftab.torch.columns import TORCH_FLOAT_COLUMNS

__all__ = ["ORDER", "SELF_US", "TOTAL_US", "cpu_microseconds", "device_float_columns", "host_float_columns",
           "summed_in_torch_order", "torch_float_times", "torch_sum"]

#: torch's float µs self and total CPU time (`TORCH_FLOAT_COLUMNS`)
SELF_US, TOTAL_US = TORCH_FLOAT_COLUMNS
#: a host row's position in torch's event order (summed in that order)
ORDER = "_torch_order"


def torch_float_times(tree: pl.DataFrame, nested: pl.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """torch's float µs CPU total and self time per row of `tree`, and torch's event order.

    torch converts each event's ns to µs as `(ns - trace_start_ns) / 1000` with the profile's
    start (the JSON's `Trace` span; else the rank's first event), takes `end - start` as the
    total and subtracts its children's totals one by one in its event order (start, then
    longest first). Returns (total, self, order position); rows torch does not keep get 0.
    """
    n = len(tree)
    rank = tree["rank"].to_numpy()
    span = nested.filter(kinds.is_profiler_span().fill_null(False)).group_by("rank").agg(pl.col("start_ns").min())
    first = nested.group_by("rank").agg(pl.col("start_ns").min().alias("_first"))
    t0 = first.join(span, on="rank", how="left").select("rank", pl.coalesce("start_ns", "_first").alias("t0"))
    origin = pl.DataFrame({"rank": rank}).join(t0, on="rank", how="left", maintain_order="left")["t0"].to_numpy()
    start = (tree["start_ns"].to_numpy() - origin) / 1000
    total = (tree["end_ns"].to_numpy() - origin) / 1000 - start
    order = np.empty(n, np.int64)
    order[tree.select(pl.arg_sort_by(["rank", "start_ns", "end_ns", "event_id"],
                                     descending=[False, False, True, False])).to_series().to_numpy()] = np.arange(n)
    kept = tree["_kept"].to_numpy() & ~tree["_merged"].to_numpy()
    kp = tree["kept_parent"].to_numpy()
    rep = tree["rep"].to_numpy()
    child = np.flatnonzero(kept & (kp >= 0))
    child = child[np.argsort(order[child], kind="stable")]
    child_sum = np.zeros(n)
    np.add.at(child_sum, rep[kp[child]], total[child])  # one by one, in torch's order (unbuffered)
    self_us = np.where(kept, total - child_sum, 0.0)
    return np.where(kept, total, 0.0), self_us, order



def host_float_columns(tree: pl.DataFrame, nested: pl.DataFrame) -> dict[str, np.ndarray]:
    """`TOTAL_US`, `SELF_US` and `ORDER` per row of `tree` (`torch_float_times`)."""
    total, self_us, order = torch_float_times(tree, nested)
    return {TOTAL_US: total, SELF_US: self_us, ORDER: order}


def device_float_columns() -> list[pl.Expr]:
    """`TOTAL_US`, `SELF_US` and `ORDER` of device rows: torch's device events have no CPU time."""
    return [pl.lit(0.0).alias(TOTAL_US), pl.lit(0.0).alias(SELF_US), pl.lit(0, pl.Int64).alias(ORDER)]


def summed_in_torch_order() -> list[pl.Expr]:
    """Per key the sums of `TOTAL_US` and `SELF_US`: torch's `+=`, one event at a time in its event
    order (`cum_sum` is sequential)."""
    return [pl.col(c).sort_by(ORDER).cum_sum().last() for c in (TOTAL_US, SELF_US)]


def cpu_microseconds(rows: pl.DataFrame) -> tuple[list[float], list[float], list[float], bool]:
    """Per row the self, total and average CPU µs torch's table prints, and whether they are torch's own.

    With `TORCH_FLOAT_COLUMNS` they are torch's own floats (the average: total / calls); else
    `ns / 1000`, computed one by one in Python as torch does (an engine may divide by 1000 as a
    multiplication by 0.001, which rounds ties differently).
    """
    if SELF_US in rows.columns and TOTAL_US in rows.columns:
        self_us = rows[SELF_US].to_list()
        total_us = rows[TOTAL_US].to_list()
        avg_us = [t / c if c else 0.0 for t, c in zip(total_us, rows["calls"].to_list(), strict=True)]
        return self_us, total_us, avg_us, True
    return ([v / 1000 for v in rows["self_cpu_ns"].to_list()], [v / 1000 for v in rows["cpu_total_ns"].to_list()],
            [v / 1000 for v in rows["cpu_avg_ns"].to_list()], False)


def torch_sum(values: list[float]) -> float:
    """torch's `+=` over `values` in their order (a float sum depends on it)."""
    total = 0.0
    for v in values:
        total += v
    return total
