"""torch's memory snapshot aligned to a trace: each allocator action on the trace's clock, joined to its op.

Reading the snapshot pickle safely is io's (`proftab.io.memory_snapshot`); its names are
imported here too, where `tr.memory.snapshot(path)` and earlier code found them.
"""

from __future__ import annotations

from dataclasses import replace

import polars as pl

from proftab.io.memory_snapshot import MAX_DEPTH, MAX_OBJECTS, Snapshot, read_snapshot, snapshot_tables

__all__ = ["MAX_DEPTH", "MAX_OBJECTS", "Snapshot", "align", "read_snapshot", "snapshot_tables"]


#: snapshot actions -> the sign of the matching [memory] event's Bytes
_ACTION_SIGN = {"alloc": 1, "free_requested": -1}


_MAX_PAIRS = 5_000_000


def _offset(keyed: pl.DataFrame, dev: pl.DataFrame) -> int:
    """Trace clock − snapshot clock: the mode of the same-keyed (action, event) gaps."""
    keys = ["device", "addr", "_sign"]
    sizes = keyed.group_by(keys).len().join(dev.group_by(keys).len(), on=keys)
    # the counts are UInt32: their product is taken in Int64 (70,000 x 70,000 would wrap)
    n_pairs = int((sizes["len"].cast(pl.Int64) * sizes["len_right"].cast(pl.Int64)).sum() or 0)
    if n_pairs == 0:
        return 0
    if n_pairs > _MAX_PAIRS:  # thin the actions evenly: the offset needs a sample only
        keyed = keyed.gather_every(n_pairs // _MAX_PAIRS + 1)
    gaps = keyed.select(*keys, "_t").join(dev.select(*keys, "_ts"), on=keys).select(
        (pl.col("_ts") - pl.col("_t")).alias("gap"))
    if gaps.is_empty():
        return 0
    bins = gaps.with_columns((pl.col("gap") // 1000).alias("bin"))
    top = bins.group_by("bin").len().sort(["len", "bin"], descending=[True, False])["bin"][0]
    near = bins.filter((pl.col("bin") - top).abs() <= 1)["gap"]
    return int(near.median() or 0)  # type: ignore[arg-type]


def align(snap: Snapshot, mem: pl.DataFrame, ops: pl.DataFrame | None = None, *,
          tolerance_ns: int = 50_000) -> Snapshot:
    """Put the snapshot's actions on the trace's clock and join each to its [memory] event.

    Both clocks are absolute (the snapshot's `time_us` is epoch µs, the trace's `start_ns` is
    `baseTimeNanoseconds + ts`). An `alloc` matches a device [memory] event with `Bytes > 0`,
    a `free_requested` one with `Bytes < 0`, on the same device and address. The clock offset is
    the most common gap between an action and a same-keyed event (1 µs bins, refined to the
    median gap in the winning bin): the right offset lines up every pair, a wrong one only a few.
    Then each action is matched to the nearest event within `tolerance_ns` after the offset.

    Parameters
    ----------
    snap
        `read_snapshot(...)`.
    mem
        `memory_events(instants)` of the trace.
    ops
        `enclosing_ops(mem, events)`: adds `op_id`, `op`, `top_op`, `module` of the matched event.
    tolerance_ns
        Largest distance, after the offset, between an action and its event.
    """
    dev = mem.filter((pl.col("device_type") != 0) & pl.col("addr").is_not_null()).select(
        "rank", "device", "addr", pl.col("bytes").sign().cast(pl.Int64).alias("_sign"), "start_ns", "event_id", "bytes",
        pl.col("start_ns").alias("_ts")).sort("start_ns")
    tr = snap.trace.with_columns(
        pl.col("action").replace_strict(_ACTION_SIGN, default=None, return_dtype=pl.Int64).alias("_sign"),
        (pl.col("time_us") * 1000).alias("_t"))
    keyed = tr.filter(pl.col("_sign").is_not_null() & pl.col("_t").is_not_null() & pl.col("addr").is_not_null())
    offset = _offset(keyed, dev) if not keyed.is_empty() and not dev.is_empty() else 0
    tr = tr.with_columns((pl.col("_t") + offset).alias("start_ns")).with_row_index("_row")
    matched = (tr.filter(pl.col("_sign").is_not_null() & pl.col("start_ns").is_not_null()
                         & pl.col("addr").is_not_null())
               .sort("start_ns")
               .join_asof(dev.select("device", "addr", "_sign", "_ts", "rank", "event_id"), left_on="start_ns",
                          right_on="_ts",
                          by=["device", "addr", "_sign"], strategy="nearest", tolerance=tolerance_ns,
                          check_sortedness=False)  # both sides sorted by time above
               .select("_row", "rank", "event_id"))
    out = tr.join(matched, on="_row", how="left", maintain_order="left")
    if ops is not None:
        out = out.join(ops.select("rank", "event_id", "op_id", "op", "top_op", "module"), on=["rank", "event_id"],
                       how="left", maintain_order="left")
    out = out.drop("_row", "_sign", "_t")
    return replace(snap, trace=out, offset_ns=offset)
