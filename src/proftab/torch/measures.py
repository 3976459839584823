"""The measured columns of key_averages: per event, then per key.

The second stage of `proftab.torch.aggregate.key_averages`, after the grouping
(`proftab.torch.grouping`). Per host event of torch's tree: its self and total CPU time, the
device time of what it launched (self, and with its subtree), its `[memory]` bytes (inclusive
and self) and FLOPs (`host_measures`); a device row measures its own duration. Per key the
columns of `proftab.torch.columns` by their roles (`group_aggregations`), then the averages and
shares derived from them (`derived_columns`).
"""

from __future__ import annotations

import functools
import operator
from typing import TYPE_CHECKING

import numpy as np
import polars as pl

from proftab import schema
from proftab.intervals.tree import row_positions, subtree_sum
from proftab.torch import floats
from proftab.torch.columns import COLUMNS, SUMMED_COLUMNS, names, time_columns
from proftab.torch.flops import torch_flops

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["CALL_NS", "derived_columns", "device_measures", "group_aggregations", "host_measures", "memory_bytes"]

#: per event, the duration its key's `min_ns`, `max_ns` and percentiles are taken over
CALL_NS = "_call_ns"


def memory_bytes(host: pl.DataFrame, instants: pl.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Inclusive CPU and device [memory] bytes per host row (torch's bisect rule)."""
    n = len(host)
    cpu = np.zeros(n, np.int64)
    dev = np.zeros(n, np.int64)
    mem = instants.filter((pl.col("name") == "[memory]") & pl.col("bytes").is_not_null())
    if mem.is_empty() or n == 0:
        return cpu, dev
    spans = host.select("rank", "pid", "start_ns", "end_ns").with_row_index("_i")  # filtered, not the whole frame
    for (rank, pid), grp in mem.group_by(["rank", "pid"]):
        rows = spans.filter((pl.col("rank") == rank) & (pl.col("pid") == pid))
        if rows.is_empty():
            continue
        g = grp.sort("start_ns")
        ts = g["start_ns"].to_numpy()
        dtype = g["device_type"].fill_null(0).to_numpy()
        b = g["bytes"].to_numpy()
        lo = np.searchsorted(ts, rows["start_ns"].to_numpy(), "left")
        hi = np.searchsorted(ts, rows["end_ns"].to_numpy(), "right")
        idx = rows["_i"].to_numpy()
        for target, types in ((cpu, schema.CPU_MEMORY_DEVICE_TYPES), (dev, schema.DEVICE_MEMORY_DEVICE_TYPES)):
            cum = np.concatenate([[0], np.cumsum(np.where(np.isin(dtype, types), b, 0))])
            target[idx] += cum[hi] - cum[lo]
    return cpu, dev

def _minus(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """`a - b`; `a` itself when `b` is all zero (no new array)."""
    return a if not b.any() else a - b


def _own_device_ns(tree: pl.DataFrame, device_self: pl.DataFrame | None, dropped: np.ndarray | None) -> np.ndarray:
    """Per row of `tree` the device time of the activities it launched itself (0 for dropped rows)."""
    n = len(tree)
    own_dev = np.zeros(n, np.int64)
    if device_self is not None and n and not device_self.is_empty():
        pos = row_positions(tree["rank"].to_numpy(), tree["event_id"].to_numpy(), device_self["rank"].to_numpy(),
                            device_self["event_id"].to_numpy())
        hit = pos >= 0
        np.add.at(own_dev, pos[hit], device_self["self_device_ns"].to_numpy()[hit])
        if dropped is not None:
            own_dev[dropped] = 0
    return own_dev


def host_measures(tree: pl.DataFrame, instants: pl.DataFrame, device_self: pl.DataFrame | None, *,
                  with_flops: bool) -> dict[str, np.ndarray]:
    """Per row of `tree` (`proftab.torch.grouping.host_tree`) the value of each summed column.

    A folded duplicate's self values are its representative's (its own are 0, its FLOPs are
    dropped with it: torch deletes the event); dropped rows (filtered names) hold no time of their
    own. An all-zero column is returned as one array (no copies).
    """
    n = len(tree)
    kp = tree["kept_parent"].to_numpy()
    rep = tree["rep"].to_numpy()
    kept = tree["_kept"].to_numpy()
    dropped = None if kept.all() else ~kept  # filtered names (and profiler spans): no time of their own here

    own_dev = _own_device_ns(tree, device_self, dropped)
    dev_total = subtree_sum(own_dev, kp, tree["tree_depth"].to_numpy()) if own_dev.any() else own_dev
    cpu_mem, dev_mem = memory_bytes(tree, instants)
    if dropped is not None:
        for values in (cpu_mem, dev_mem):
            if values.any():
                values[dropped] = 0
    has_p = (kp >= 0) & kept

    def child_sum(values: np.ndarray) -> np.ndarray:
        if not values.any():
            return values
        out = np.zeros(n, np.int64)
        np.add.at(out, kp[has_p], values[has_p])
        return out

    # fold merged events into their representative (merged rows are few)
    mi = np.flatnonzero(tree["_merged"].to_numpy())

    def fold(values: np.ndarray) -> np.ndarray:
        if not len(mi) or not values.any():  # all-zero columns stay the same (untouched) array
            return values
        out = values.astype(np.int64, copy=True)
        np.add.at(out, rep[mi], values[mi])
        out[mi] = 0
        return out

    return {
        "self_cpu_ns": fold(tree["tree_self_ns"].to_numpy()),
        "cpu_total_ns": tree["dur_ns"].to_numpy(),
        "self_device_ns": fold(own_dev),
        "device_total_ns": dev_total,
        "cpu_mem_bytes": cpu_mem,
        "self_cpu_mem_bytes": fold(_minus(cpu_mem, child_sum(cpu_mem))),
        "device_mem_bytes": dev_mem,
        "self_device_mem_bytes": fold(_minus(dev_mem, child_sum(dev_mem))),
        "flops": torch_flops(tree).to_numpy() if with_flops else np.zeros(n, np.int64),
    }


def device_measures(dur: str = "dur_ns") -> list[pl.Expr]:
    """The summed columns of a device row: its own duration `dur` as its device time, nothing else."""
    device_time = set(time_columns("device"))
    return [pl.col(dur).alias(c) if c in device_time else pl.lit(0, pl.Int64).alias(c) for c in SUMMED_COLUMNS]


def group_aggregations(rows: pl.DataFrame, keys: list[str], carried: Sequence[str] = (), *,
                       torch_floats: bool = False) -> pl.DataFrame:
    """One row per key of `rows`: the columns of `proftab.torch.columns` that aggregate events.

    `carried` columns are constant within a key (taken as they are); key columns not grouped on
    (`input_shapes`, `stack`, `overload_name`) and flags are the first event's (least `_order`);
    a summed column missing from `rows` (all zero) is 0. Also `_order` (the key's first event) and,
    with `torch_floats`, torch's float sums (`proftab.torch.floats`).
    """
    first = pl.col("_order").arg_min()
    by_role = []
    for c in COLUMNS:
        if c.role == "count":
            by_role.append(pl.len().cast(pl.Int64).alias(c.name))
        elif c.role == "sum":
            by_role.append(pl.col(c.name).sum() if c.name in rows.columns else pl.lit(0, pl.Int64).alias(c.name))
        elif c.role == "flag" and c.name in rows.columns:
            by_role.append(pl.col(c.name).get(first))
        elif c.role == "min":
            by_role.append(pl.col(CALL_NS).min().alias(c.name))
        elif c.role == "max":
            by_role.append(pl.col(CALL_NS).max().alias(c.name))
        elif c.role == "quantile" and c.quantile is not None:
            by_role.append(pl.col(CALL_NS).quantile(c.quantile, interpolation="nearest").cast(pl.Int64).alias(c.name))
    first_event = [pl.col(c).get(first) for c in names("key") if c in rows.columns and c not in keys
                   and c not in carried]
    return rows.group_by(keys).agg(
        *(pl.col(c).first() for c in carried),
        pl.col("_order").min(),
        *by_role,
        *first_event,
        *(floats.summed_in_torch_order() if torch_floats else ()),
    )


def derived_columns(out: pl.DataFrame, wall_ns: int) -> pl.DataFrame:
    """`out` (`group_aggregations` of every key) with its averages and shares, and the flags no event
    sets (a trace's events are never async in torch's sense).

    A host share is over the host rows' total (null when it is 0); a wall share over `wall_ns`
    (null when 0).
    """
    count = names("count")[0]
    derived = []
    for c in COLUMNS:
        if c.role == "mean":
            derived.append((pl.col(c.of[0]) / pl.col(count)).alias(c.name))
        elif c.role == "flag" and c.name not in out.columns:
            derived.append(pl.lit(False).alias(c.name))
        elif c.role == "share":
            part = functools.reduce(operator.add, [pl.col(of) for of in c.of])
            if c.over == "host":
                host = out.filter(pl.col("device_type") == "CPU")
                whole = sum(host[of].sum() for of in c.of)
            else:
                whole = wall_ns
            derived.append((part / whole if whole else pl.lit(None, pl.Float64)).alias(c.name))
    return out.with_columns(derived)
