"""The `[memory]` instants as tables: ordered events, timeline, allocation pairing, attribution.

Rules (docs/memory.md):

* a device is `(rank, device_type, device)`; its events are ordered by `(start_ns, event_id)`
  (`event_id` is the file position, which is the allocator's order within a thread). In this
  order `Total Allocated[i] - Total Allocated[i-1] == Bytes[i]` on every trace of the corpus;
* an allocation is an event with `Bytes > 0`, a free one with `Bytes < 0`; they pair by
  `(device, addr)`: the free that directly follows an allocation at the same address (in the
  device's order) frees it. An address is re-used after its free, so the next allocation there
  starts a new block;
* a free with no allocation before it at its address frees a block allocated before the
  profile started (`status = "pre_window"`); an allocation with no later free is `"live"` at
  the end of the window; an allocation followed by another allocation at the same address (its
  free was not recorded) is `"lost"`;
* the op of an alloc/free is the innermost host op open at its time on the same thread
  (`start <= t < end`, `proftab.intervals.nest` on the thread's ops plus the instants), or the
  innermost op that ends exactly at that time unless the open op starts there (torch counts an
  op's [memory] events over its closed interval `[start, end]`; frees at an op's last
  microsecond are common in µs traces).
"""

from __future__ import annotations

import numpy as np
import polars as pl

from proftab import kinds, schema
from proftab.intervals import nest
from proftab.intervals.tree import nearest_ancestor
from proftab.steps import assign_steps

__all__ = ["DEVICE_KEYS", "EVENT_COLUMNS", "INSTANT_COLUMNS", "allocations", "device_names", "enclosing_ops",
           "memory_events", "timeline"]

#: the columns that identify one memory device (an allocator)
DEVICE_KEYS = ["rank", "device_type", "device"]
#: the instants columns the memory tables read
INSTANT_COLUMNS = ["event_id", "rank", "pid", "pid_text", "tid", "tid_text", "name", "start_ns", "device_type",
                   "device", "addr", "bytes", "total_allocated", "total_reserved"]
#: the events columns the op attribution reads
EVENT_COLUMNS = ["event_id", "rank", "pid", "pid_text", "tid", "tid_text", "cat", "name", "start_ns", "end_ns"]

#: c10::DeviceType codes -> torch's device name
_DEVICE_TYPE_NAMES = {0: "cpu", 1: "cuda", 2: "mkldnn", 3: "opengl", 4: "opencl", 5: "ideep", 6: "hip", 7: "fpga",
                      8: "maia", 9: "xla", 10: "vulkan", 11: "metal", 12: "xpu", 13: "mps", 14: "meta", 15: "hpu",
                      16: "ve", 17: "lazy", 18: "ipu", 19: "mtia", 20: "privateuseone"}


def device_names() -> pl.Expr:
    """`device_name` from `device_type` and `device`: `cpu`, `cuda:0`, `hip:0`... (`type:N` if unknown)."""
    kind = pl.col("device_type").replace_strict(_DEVICE_TYPE_NAMES, default=None, return_dtype=pl.String)
    kind = pl.coalesce(kind, pl.lit("type") + pl.col("device_type").cast(pl.String))
    return (pl.when(pl.col("device").fill_null(-1) < 0).then(kind)
            .otherwise(kind + pl.lit(":") + pl.col("device").cast(pl.String))).alias("device_name")


_I64 = 2**63


def fit_int64(e: pl.Expr) -> pl.Expr:
    """An Int128 expression back in Int64, null where it does not fit (never a wrapped value)."""
    return pl.when(e.is_between(-_I64, _I64 - 1)).then(e).cast(pl.Int64)


def checked_sum(col: str) -> pl.Expr:
    """Σ of an Int64 byte column, exact in Int128; null where the total passes int64."""
    return fit_int64(pl.col(col).cast(pl.Int128).sum())


def memory_events(instants: pl.DataFrame) -> pl.DataFrame:
    """The `[memory]` instants with a `Bytes` value, in each device's order.

    Returns `INSTANT_COLUMNS` (without `name`) plus `device_name` and `seq` (0-based position in
    the device's `(start_ns, event_id)` order), sorted by `DEVICE_KEYS`, `seq`. A missing
    `device_type` is CPU (0) and a missing `device` is -1, as torch writes them.
    """
    cols = [c for c in INSTANT_COLUMNS if c != "name"]
    mem = instants.filter((pl.col("name") == "[memory]") & pl.col("bytes").is_not_null()).select(cols)
    mem = mem.with_columns(pl.col("device_type").fill_null(0), pl.col("device").fill_null(-1))
    return (mem.sort([*DEVICE_KEYS, "start_ns", "event_id"])
            .with_columns(pl.int_range(pl.len(), dtype=pl.Int64).over(DEVICE_KEYS).alias("seq"), device_names()))


def timeline(mem: pl.DataFrame) -> pl.DataFrame:
    """Allocated and reserved bytes of each device after every `[memory]` event.

    Parameters
    ----------
    mem
        `memory_events(instants)`.

    Returns
    -------
    DataFrame
        One row per event: `DEVICE_KEYS`, `device_name`, `seq`, `start_ns`, `event_id`, `tid`,
        `addr`, `bytes`, `allocated_bytes` and `reserved_bytes` (`Total Allocated` / `Total
        Reserved` as recorded, null where the trace has none), `replayed_bytes` (Σ `Bytes` from
        the start of the window), `pre_window_bytes` (`allocated_bytes - replayed_bytes`: bytes
        allocated before the window and still live; constant when the replay is exact),
        `reserved_delta_bytes` (change of `reserved_bytes` at this event, 0 at the first) and
        `live_bytes` (`allocated_bytes`, else `replayed_bytes`). Before issue 25 these were
        `allocated`, `reserved`, `replayed`, `pre_window`, `reserved_delta`, `live`
        (`schema.with_old_names(df, "memory.timeline")` adds them back, one release).
    """
    out = mem.select(
        *DEVICE_KEYS, "device_name", "seq", "start_ns", "event_id", "tid", "addr", "bytes",
        pl.col("total_allocated").alias("allocated_bytes"), pl.col("total_reserved").alias("reserved_bytes"),
        # exact in Int128: a hostile trace's Bytes can pass int64 in total; that total is null, not wrapped
        fit_int64(pl.col("bytes").cast(pl.Int128).cum_sum().over(DEVICE_KEYS)).alias("replayed_bytes"),
    )
    big = pl.Int128
    return out.with_columns(
        fit_int64(pl.col("allocated_bytes").cast(big) - pl.col("replayed_bytes").cast(big)).alias("pre_window_bytes"),
        fit_int64(pl.col("reserved_bytes").cast(big) - pl.col("reserved_bytes").shift(1).over(DEVICE_KEYS).cast(big))
        .fill_null(0).alias("reserved_delta_bytes"),
        pl.coalesce("allocated_bytes", "replayed_bytes").alias("live_bytes"),
    )


#: a thread as one key whether the file wrote its pid/tid as a number or as text (torch <= 1.9
#: writes ops' `tid` as a string and the [memory] instants' as a number)
_THREAD = ["rank", "_pid", "_tid"]


def _thread_keys() -> list[pl.Expr]:
    return [pl.coalesce(pl.col("pid").cast(pl.String), "pid_text").alias("_pid"),
            pl.coalesce(pl.col("tid").cast(pl.String), "tid_text").alias("_tid")]


def _nest_frame(df: pl.DataFrame, start: str, end: str, first_id: int) -> pl.DataFrame:
    """Rows for `nest`, identified by their position (event ids repeat across ranks)."""
    return df.select((pl.int_range(pl.len(), dtype=pl.Int64) + first_id).alias("event_id"),
                     pl.col(start).alias("start_ns"), pl.col(end).alias("end_ns"), "rank", *_thread_keys())


def enclosing_ops(mem: pl.DataFrame, events: pl.DataFrame, *, stack_depth: int = 5) -> pl.DataFrame:
    """The op of each memory event: the innermost host op open at its time on its thread.

    Parameters
    ----------
    mem
        `memory_events(instants)` (any frame with `event_id`, `start_ns` and `schema.TRACK_KEYS`).
    events
        `Trace.events` (`EVENT_COLUMNS`).
    stack_depth
        Enclosing `python_function` frames kept in `stack`.

    Returns
    -------
    DataFrame
        One row per memory event, in `mem`'s order: `rank`, `event_id`, `op_id`, `op` (innermost op),
        `top_op` (outermost enclosing `cpu_op`: the operator called from Python), `module`
        (innermost enclosing `nn.Module: ...` frame, without the prefix), `stack` (up to
        `stack_depth` enclosing Python frames, innermost first; empty without `with_stack`).
        Null where no op is open.
    """
    tracks = mem.select("rank", *_thread_keys()).unique()
    ops = (events.filter(kinds.is_host_op()).with_columns(_thread_keys())
           .join(tracks, on=_THREAD, how="semi", nulls_equal=True)
           .select("event_id", "cat", "name", "start_ns", pl.max_horizontal("start_ns", "end_ns").alias("end_ns"),
                   *schema.TRACK_KEYS))
    n_ops = ops.height
    both = pl.concat([_nest_frame(ops, "start_ns", "end_ns", 0), _nest_frame(mem, "start_ns", "start_ns", n_ops)])
    tree = nest(both, by=_THREAD).select("parent_id", "depth")
    op_ids = ops["event_id"].to_numpy()
    # parent links are op row positions (instants have zero length: never parents)
    parent_ids = tree["parent_id"].fill_null(-1).to_numpy()
    parent = np.append(parent_ids[:n_ops], -1)  # row n_ops: "no op"
    first = parent_ids[n_ops:]
    first = np.where(first >= 0, first, n_ops)
    # an event at the very end of an op belongs to it (torch's [start, end] rule): the innermost
    # op ending at that time wins unless the open op only starts there
    ending = (ops.select("rank", *_thread_keys(), "end_ns", "start_ns",
                         pl.Series("depth", tree["depth"][:n_ops]), pl.int_range(n_ops, dtype=pl.Int64).alias("_row"))
              .sort(["start_ns", "depth"], descending=True)
              .unique(subset=["rank", "_pid", "_tid", "end_ns"], keep="first"))
    closing = (mem.select("rank", *_thread_keys(), "start_ns")
               .join(ending, left_on=["rank", "_pid", "_tid", "start_ns"], right_on=["rank", "_pid", "_tid", "end_ns"],
                     how="left", maintain_order="left", nulls_equal=True)["_row"].fill_null(-1).to_numpy())
    op_start = np.append(ops["start_ns"].to_numpy(), np.iinfo(np.int64).min)
    first = np.where((closing >= 0) & (op_start[first] < mem["start_ns"].to_numpy()), closing, first)
    cat = ops["cat"].cast(pl.String)
    names = ops["name"]
    is_py = np.append((cat == kinds.PYTHON_FRAME).fill_null(False).to_numpy(), False)
    is_cpu_op = np.append((cat == kinds.CPU_OP).fill_null(False).to_numpy(), False)
    is_module = np.append((is_py[:-1] & names.str.starts_with(kinds.MODULE_PREFIX).fill_null(False).to_numpy()), False)

    def at_or_above(target: np.ndarray) -> np.ndarray:
        return np.where(target[first], first, nearest_ancestor(parent, first, target))

    # outermost enclosing cpu_op: walk to the root, remembering the last cpu_op seen
    top = np.where(is_cpu_op[first], first, -1)
    cur = first.copy()
    live = np.flatnonzero(cur < n_ops)
    while len(live):
        cur[live] = parent[cur[live]]
        live = live[cur[live] >= 0]
        hit = live[is_cpu_op[cur[live]]]
        top[hit] = cur[hit]
    name_of = names.append(pl.Series([None], dtype=pl.String))
    frames = []
    frame = at_or_above(is_py)
    for _ in range(stack_depth):
        frames.append(name_of.gather(pl.Series(np.where(frame >= 0, frame, n_ops))))
        frame = np.where(frame >= 0, nearest_ancestor(parent, np.maximum(frame, 0), is_py), -1)
    stack = (pl.DataFrame({f"f{i}": s for i, s in enumerate(frames)}).select(
        pl.concat_list(pl.all()).list.drop_nulls().alias("stack")).to_series() if frames
        else pl.select(pl.repeat(pl.lit([], pl.List(pl.String)), mem.height).alias("stack")).to_series())
    module = name_of.gather(pl.Series(np.where((m := at_or_above(is_module)) >= 0, m, n_ops)))
    id_of = pl.Series(op_ids, dtype=pl.Int64).append(pl.Series([None], dtype=pl.Int64)).gather(pl.Series(first))
    return pl.DataFrame({
        "rank": mem["rank"],
        "event_id": mem["event_id"],
        "op_id": id_of,
        "op": name_of.gather(pl.Series(first)),
        "top_op": name_of.gather(pl.Series(np.where(top >= 0, top, n_ops))),
        "module": module.str.strip_prefix(kinds.MODULE_PREFIX),
        "stack": stack,
    })


def allocations(mem: pl.DataFrame, ops: pl.DataFrame | None = None, windows: pl.DataFrame | None = None
                ) -> pl.DataFrame:
    """One row per allocated block: alloc/free pairs by `(device, addr)` in each device's order.

    Parameters
    ----------
    mem
        `memory_events(instants)`.
    ops
        `enclosing_ops(mem, events)`: adds the allocating and freeing op, module and stack.
    windows
        `proftab.steps.step_windows(events)`: adds `step` and `free_step`.

    Returns
    -------
    DataFrame
        `DEVICE_KEYS`, `device_name`, `addr`, `bytes`, `alloc_ns`, `free_ns` (null if not freed
        in the window), `lifetime_ns`, `status` (`freed`, `live`, `pre_window`, `lost`),
        `alloc_seq`, `free_seq`, `alloc_event_id`, `free_event_id`, `alloc_tid`, `free_tid`,
        `new_reserved_bytes` (growth of `Total Reserved` recorded at the allocation: a new
        caching-allocator segment; `new_reserved` before issue 25), then with `ops`
        `alloc_op_id`, `alloc_op`, `alloc_top_op`, `module`, `stack`, `free_op_id`, `free_op`,
        and with `windows` `step`, `free_step`.
        Sorted by device and allocation order (pre-window blocks first, by free order).
        Events without `Addr` (torch <= 1.9 traces) cannot be paired and are left out.
    """
    key = [*DEVICE_KEYS, "addr"]
    ev = mem.with_columns(
        (pl.col("total_reserved") - pl.col("total_reserved").shift(1).over(DEVICE_KEYS)).fill_null(0)
        .alias("_reserved_delta"),
    ).filter(pl.col("addr").is_not_null()).sort([*key, "seq"])
    nxt = pl.col("bytes").shift(-1).over(key)
    prev = pl.col("bytes").shift(1).over(key)
    ev = ev.with_columns(
        _next_free=(nxt < 0).fill_null(False),
        _next_alloc=(nxt > 0).fill_null(False),
        _prev_alloc=(prev > 0).fill_null(False),
        **{f"_next_{c}": pl.col(c).shift(-1).over(key) for c in ("seq", "start_ns", "event_id", "tid")},
    )
    base = [*DEVICE_KEYS, "device_name", "addr"]
    allocs = ev.filter(pl.col("bytes") > 0).select(
        *base, "bytes",
        pl.col("start_ns").alias("alloc_ns"),
        pl.when("_next_free").then("_next_start_ns").alias("free_ns"),
        pl.when("_next_free").then(pl.lit("freed")).when("_next_alloc").then(pl.lit("lost"))
        .otherwise(pl.lit("live")).alias("status"),
        pl.col("seq").alias("alloc_seq"),
        pl.when("_next_free").then("_next_seq").alias("free_seq"),
        pl.col("event_id").alias("alloc_event_id"),
        pl.when("_next_free").then("_next_event_id").alias("free_event_id"),
        pl.col("tid").alias("alloc_tid"),
        pl.when("_next_free").then("_next_tid").alias("free_tid"),
        pl.col("_reserved_delta").clip(lower_bound=0).alias("new_reserved_bytes"),
    )
    pre = ev.filter((pl.col("bytes") < 0) & ~pl.col("_prev_alloc")).select(
        *base, (-pl.col("bytes")).alias("bytes"),
        pl.lit(None, pl.Int64).alias("alloc_ns"), pl.col("start_ns").alias("free_ns"),
        pl.lit("pre_window").alias("status"),
        pl.lit(None, pl.Int64).alias("alloc_seq"), pl.col("seq").alias("free_seq"),
        pl.lit(None, pl.Int64).alias("alloc_event_id"), pl.col("event_id").alias("free_event_id"),
        pl.lit(None, pl.Int64).alias("alloc_tid"), pl.col("tid").alias("free_tid"),
        pl.lit(0, pl.Int64).alias("new_reserved_bytes"),
    )
    out = pl.concat([pre, allocs]).with_columns(lifetime_ns=pl.col("free_ns") - pl.col("alloc_ns"))
    out = out.sort([*DEVICE_KEYS, pl.col("alloc_seq").fill_null(-1), "free_seq"])
    if ops is not None:
        o = ops.select("rank", "event_id", "op_id", "op", "top_op", "module", "stack")
        out = out.join(o.rename({"event_id": "alloc_event_id", "op_id": "alloc_op_id", "op": "alloc_op",
                                 "top_op": "alloc_top_op"}),
                       on=["rank", "alloc_event_id"], how="left", maintain_order="left")
        out = out.join(o.select("rank", pl.col("event_id").alias("free_event_id"), pl.col("op_id").alias("free_op_id"),
                                pl.col("op").alias("free_op"), pl.col("stack").alias("_free_stack"),
                                pl.col("module").alias("_free_module")),
                       on=["rank", "free_event_id"], how="left", maintain_order="left")
        # a block allocated before the window is known by its free only
        out = out.with_columns(
            module=pl.when(pl.col("status") == "pre_window").then(None).otherwise("module"),
            stack=pl.when(pl.col("status") == "pre_window").then(pl.lit([], pl.List(pl.String)))
            .otherwise(pl.col("stack").fill_null(pl.lit([], pl.List(pl.String)))),
        ).drop("_free_stack", "_free_module")
    if windows is not None:
        out = _steps(out, windows, "alloc_ns", "step")
        out = _steps(out, windows, "free_ns", "free_step")
    front = [*base, "bytes", "alloc_ns", "free_ns", "lifetime_ns", "status"]
    return out.select(*front, *(c for c in ("step", "free_step", "alloc_op", "alloc_top_op", "module", "stack",
                                             "free_op") if c in out.columns),
                      *(c for c in out.columns if c not in front and c not in (
                          "step", "free_step", "alloc_op", "alloc_top_op", "module", "stack", "free_op")))


def _steps(rows: pl.DataFrame, windows: pl.DataFrame, col: str, name: str) -> pl.DataFrame:
    """`rows` plus `name`: the step holding `col` (null where `col` is null or outside any step)."""
    t = rows.select("rank", pl.col(col).fill_null(np.iinfo(np.int64).min).alias("start_ns"))
    stepped = assign_steps(t, windows)["step"]
    return rows.with_columns(pl.when(pl.col(col).is_not_null()).then(stepped).alias(name))

