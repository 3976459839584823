"""torch's CUDA memory snapshot (`torch.cuda.memory._dump_snapshot`) read as tables, without executing code.

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

Aligning a snapshot to a trace is an analysis: `proftab.memory.snapshot.align`.
"""

from __future__ import annotations

import io
import pickle
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl

from proftab.exceptions import ProftabError

if TYPE_CHECKING:
    import os

__all__ = ["MAX_DEPTH", "MAX_OBJECTS", "Snapshot", "read_snapshot", "snapshot_tables"]

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
        `user_metadata`, `stack`; after `proftab.memory.snapshot.align`, also `start_ns` (on the trace's clock),
        `rank`, `event_id`, `op_id`, `op`, `top_op`, `module` of the matching [memory] event.
    settings
        The other top-level entries (e.g. `allocator_settings`), as loaded.
    offset_ns
        After `proftab.memory.snapshot.align`: trace clock − snapshot clock, estimated from the matched actions.
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
