"""torch's CUDA memory snapshot (`torch.cuda.memory._dump_snapshot`) as tables, read without executing code.

The pickle holds a dict (`torch.cuda.memory._snapshot`'s documented layout):

* `segments`: one dict per cudaMalloc'd segment (`device`, `address`, `total_size`,
  `allocated_size`, `active_size`, `requested_size`, `stream`, `segment_type`,
  `segment_pool_id`, `blocks`); each block has `address`, `size`, `requested_size`, `state`,
  `frames`;
* `device_traces`: per device, the allocator's actions in order (`action` = `alloc`,
  `free_requested`, `free_completed`, `segment_alloc`, `segment_free`, `segment_map`,
  `segment_unmap`, `oom`, `snapshot`; `addr`, `size`, `stream`, `time_us`, `frames`, ...);
* frames are `{filename, line, name}` dicts, innermost first.

Unpickling can run arbitrary code (a pickle names any importable callable and calls it), so
`read_snapshot` uses an unpickler that resolves no global at all except the builtin containers
`set`, `frozenset` and the scalar `complex`, which older pickle protocols spell as globals. Any
other global (a class, a function, `os.system`...) raises `ProftabError` before anything is
called, and persistent ids and out-of-band buffers are refused too.
"""

from __future__ import annotations

import io
import pickle
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl

from proftab.exceptions import ProftabError

if TYPE_CHECKING:
    import os

__all__ = ["Snapshot", "align", "read_snapshot", "snapshot_tables"]

#: the only globals a snapshot pickle may name: builtin containers and scalars
_ALLOWED = {("builtins", "set"): set, ("builtins", "frozenset"): frozenset, ("builtins", "complex"): complex,
            ("__builtin__", "set"): set, ("__builtin__", "frozenset"): frozenset}

_FRAME = pl.Struct({"filename": pl.String, "line": pl.Int64, "name": pl.String})
_BLOCK = pl.Struct({"address": pl.Int64, "size": pl.Int64, "requested_size": pl.Int64, "state": pl.String,
                    "frames": pl.List(_FRAME)})
_SEGMENT_SCHEMA: dict[str, Any] = {
    "device": pl.Int64, "address": pl.Int64, "total_size": pl.Int64, "allocated_size": pl.Int64,
    "active_size": pl.Int64, "requested_size": pl.Int64, "stream": pl.Int64, "segment_type": pl.String,
    "segment_pool_id": pl.List(pl.Int64), "is_expandable": pl.Boolean, "blocks": pl.List(_BLOCK)}
_TRACE_SCHEMA: dict[str, Any] = {
    "action": pl.String, "addr": pl.Int64, "size": pl.Int64, "stream": pl.Int64, "time_us": pl.Int64,
    "device_free": pl.Int64, "compile_context": pl.String, "user_metadata": pl.String, "frames": pl.List(_FRAME)}


class _RestrictedUnpickler(pickle.Unpickler):
    """Builds only builtin containers and scalars; every other global is refused unresolved."""

    def find_class(self, module: str, name: str) -> Any:
        allowed = _ALLOWED.get((module, name))
        if allowed is None:
            msg = (f"refusing to load {module}.{name} from the memory snapshot: a torch snapshot holds only "
                   "dicts, lists, tuples, strings and numbers, and unpickling anything else could run code")
            raise ProftabError(msg)
        return allowed

    def persistent_load(self, pid: Any) -> Any:
        msg = f"refusing a persistent id ({type(pid).__name__}) in the memory snapshot"
        raise ProftabError(msg)


#: largest number of objects a snapshot may expand to (a shared object counts once per reference)
MAX_OBJECTS = 50_000_000
#: deepest nesting of containers in a snapshot (torch's layout is about 7 deep)
MAX_DEPTH = 64
_CONTAINERS = (dict, list, tuple, set, frozenset)


def _check_shape(obj: Any, source: str) -> None:
    """Refuse a loaded pickle that would expand beyond `MAX_OBJECTS` or nest beyond `MAX_DEPTH`.

    A pickle's memo lets a few KB reference one object 10^9 times, and containers may hold
    themselves; turning it into tables would expand every reference. One iterative pass over
    the distinct containers (a shared one is visited once) gives each its expanded size and
    depth, so the check itself is linear in the pickle.
    """
    size: dict[int, int] = {}
    depth: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[Any, bool]] = [(obj, False)]
    keep: list[Any] = []  # holds every visited container, so no id() is reused during the walk
    while stack:
        node, done = stack.pop()
        key = id(node)
        if done:
            on_path.discard(key)
            kids = node.values() if isinstance(node, dict) else node
            n, d = 1 + (len(node) if isinstance(node, dict) else 0), 0
            for k in kids:
                if isinstance(k, _CONTAINERS):
                    n += size[id(k)]
                    d = max(d, depth[id(k)])
                else:
                    n += 1
            size[key], depth[key] = n, d + 1
            if n > MAX_OBJECTS or d + 1 > MAX_DEPTH:
                what = f"expands to over {MAX_OBJECTS:,} objects" if n > MAX_OBJECTS else \
                    f"nests containers over {MAX_DEPTH} deep"
                msg = (f"{source!r} is not a plausible memory snapshot: it {what} (a torch snapshot is a "
                       "few levels of dicts and lists; shared references count once per use)")
                raise ProftabError(msg)
            continue
        if key in size:
            continue
        if key in on_path:
            msg = f"{source!r} is not a memory snapshot: a container holds itself (a reference cycle)"
            raise ProftabError(msg)
        if len(on_path) >= MAX_DEPTH:
            msg = f"{source!r} is not a plausible memory snapshot: it nests containers over {MAX_DEPTH} deep"
            raise ProftabError(msg)
        on_path.add(key)
        keep.append(node)
        stack.append((node, True))
        kids = node.values() if isinstance(node, dict) else node
        stack.extend((k, False) for k in kids if isinstance(k, _CONTAINERS) and id(k) not in size)


def _unpickle(data: bytes, source: str) -> dict[str, Any]:
    try:
        obj = _RestrictedUnpickler(io.BytesIO(data)).load()
    except ProftabError:
        raise
    except Exception as exc:  # a damaged or foreign pickle: pickle raises many kinds
        msg = f"{source!r} is not a readable memory snapshot pickle: {type(exc).__name__}: {exc}"
        raise ProftabError(msg) from exc
    if not isinstance(obj, dict) or not ("segments" in obj or "device_traces" in obj):
        msg = (f"{source!r} is not a torch memory snapshot: expected a dict with 'segments' and "
               f"'device_traces', got {type(obj).__name__}")
        raise ProftabError(msg)
    _check_shape(obj, source)
    return obj


@dataclass(frozen=True)
class Snapshot:
    """The tables of one memory snapshot.

    Attributes
    ----------
    segments
        One row per segment: `device`, `address`, `total_size`, `allocated_size`,
        `active_size`, `requested_size`, `stream`, `segment_type`, `segment_pool_id`,
        `is_expandable`, `blocks` (count).
    blocks
        One row per block of a segment: `device`, `segment_address`, `address`, `size`,
        `requested_size`, `state`, `stack` (`file:line:name`, innermost first).
    trace
        One row per allocator action: `device`, `seq` (position in the device's trace),
        `action`, `addr`, `size`, `stream`, `time_us`, `device_free`, `compile_context`,
        `user_metadata`, `stack`; after `align`, also `start_ns` (on the trace's clock),
        `rank`, `event_id`, `op_id`, `op`, `top_op`, `module` of the matching [memory] event.
    settings
        The other top-level entries (e.g. `allocator_settings`), as loaded.
    offset_ns
        After `align`: trace clock − snapshot clock, estimated from the matched actions.
    """

    segments: pl.DataFrame
    blocks: pl.DataFrame
    trace: pl.DataFrame
    settings: dict[str, Any] = field(default_factory=dict)
    offset_ns: int | None = None


def _stack(col: str = "frames") -> pl.Expr:
    frame = pl.element().struct
    text = pl.concat_str(frame.field("filename").fill_null("?"), pl.lit(":"),
                         frame.field("line").cast(pl.String).fill_null("?"), pl.lit(":"),
                         frame.field("name").fill_null("?"))
    return pl.col(col).list.eval(text).fill_null(pl.lit([], pl.List(pl.String))).alias("stack")


def _frame_dicts(rows: list[Any], schema: dict[str, Any], what: str) -> pl.DataFrame:
    try:
        out = pl.DataFrame(rows, schema=schema, strict=False)
    except Exception as exc:
        msg = f"the memory snapshot's {what} do not follow torch's layout: {type(exc).__name__}: {exc}"
        raise ProftabError(msg) from exc
    return out


def snapshot_tables(obj: dict[str, Any]) -> Snapshot:
    """A loaded snapshot dict (`torch.cuda.memory._snapshot()`) as a `Snapshot` of tables."""
    segments = obj.get("segments") or []
    traces = obj.get("device_traces") or []
    if not isinstance(segments, list) or not isinstance(traces, list) or not all(isinstance(t, list) for t in traces):
        msg = "the memory snapshot's 'segments' / 'device_traces' are not lists"
        raise ProftabError(msg)
    seg = _frame_dicts(segments, _SEGMENT_SCHEMA, "segments")
    blocks = (seg.select(pl.col("device"), pl.col("address").alias("segment_address"), "blocks")
              .explode("blocks").filter(pl.col("blocks").is_not_null()).unnest("blocks")
              .with_columns(_stack()).drop("frames"))
    segs = seg.with_columns(pl.col("blocks").list.len().cast(pl.Int64).alias("blocks"))
    per_device = [_frame_dicts(entries, _TRACE_SCHEMA, "device_traces")
                  .with_columns(pl.lit(d, pl.Int64).alias("device"),
                                pl.int_range(pl.len(), dtype=pl.Int64).alias("seq"))
                  for d, entries in enumerate(traces)]
    empty = pl.DataFrame(schema=_TRACE_SCHEMA).with_columns(pl.lit(0, pl.Int64).alias("device"),
                                                            pl.lit(0, pl.Int64).alias("seq"))
    trace = pl.concat(per_device) if per_device else empty
    trace = trace.with_columns(_stack()).select("device", "seq", "action", "addr", "size", "stream", "time_us",
                                                "device_free", "compile_context", "user_metadata", "stack")
    settings = {k: v for k, v in obj.items() if k not in ("segments", "device_traces")}
    return Snapshot(segments=segs, blocks=blocks, trace=trace, settings=settings)


def read_snapshot(path: str | os.PathLike[str] | bytes) -> Snapshot:
    """Read a `torch.cuda.memory._dump_snapshot` pickle (a path, or the pickle's bytes) safely.

    Raises
    ------
    ProftabError
        The pickle names any global other than `set`/`frozenset`/`complex` (nothing is
        executed), is damaged, or is not a snapshot dict.
    """
    if isinstance(path, bytes):
        return snapshot_tables(_unpickle(path, "<bytes>"))
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as exc:
        msg = f"cannot read the memory snapshot {str(p)!r}: {exc.strerror or exc}"
        raise ProftabError(msg) from exc
    return snapshot_tables(_unpickle(data, str(p)))


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
