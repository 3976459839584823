"""The cross edges of the dependency graph, one function per kind, all windows at once.

* **launch** - launch call start -> activity start (`launch_delay`), by the activity's launch
  (correlation) as `proftab.device.activities` links it.
* **sync** - last work on the awaited stream(s) -> end of the blocking host call: Kineto's
  ``cuda_sync`` rows (Context Sync = every stream of the device, Stream Sync = its stream, Event
  Sync = the stream of the recorded event, found by ``wait_on_cuda_event_record_corr_id``);
  ``cudaDeviceSynchronize`` / ``cudaStreamSynchronize`` without such a row wait on every stream of
  the rank; a synchronous memcpy/memset call waits on its own copy.
* **launch queue** - a launch call lasting more than `QUEUE_BLOCK_FACTOR` times the median of its
  name in the window waited for a free launch-queue slot: last device work that ends during the
  call -> the call's end.
* **thread join** - a ``run_backward`` call waits while autograd's device thread (the thread
  running ``autograd::engine::evaluate_function: X`` ops) runs the backward: its start -> the
  first op on that thread inside the call (fork), the last op there -> the call's end (join).
* **cross-stream** - ``Stream Wait Event``: last work on ``wait_on_stream`` recorded before the
  ``cudaEventRecord`` -> the first work launched on the waiting stream after the wait call; a wait
  call without a ``cuda_sync`` row and a communication kernel holding back another stream's work
  are read from the device timeline.

Each function returns its edges as (source node, destination node, owner row, class) arrays;
`cross_edges` concatenates them in a fixed order (ties between edges into one node go to the first).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import numpy as np
import polars as pl

from proftab import kinds
from proftab.calls import EVENT_SYNC, LAUNCH
from proftab.critical_path._segments import (
    BACKWARD_CALLS,
    EDGE_LAUNCH,
    EDGE_SYNC,
    EDGE_THREAD,
    EDGE_XSTREAM,
    QUEUE_BLOCK_FACTOR,
    WAIT_CALLS,
)

if TYPE_CHECKING:
    from proftab.critical_path._chains import DeviceChains, HostChains
    from proftab.critical_path._windows import WindowRows

__all__ = ["Edges", "cross_edges", "sync_frame"]


class Edges(NamedTuple):
    """Cross edges: source and destination nodes, the event row owning each edge's time, its class."""

    src: np.ndarray
    dst: np.ndarray
    owner: np.ndarray
    cls: np.ndarray


def _edges(src: np.ndarray, dst: np.ndarray, owner: np.ndarray, cls: int) -> Edges:
    return Edges(src, dst, owner, np.full(len(owner), cls))


def sync_frame(events: pl.DataFrame) -> pl.DataFrame:
    """The ``cuda_sync`` rows' awaited stream and the start of the event record they wait on:
    ``rank``, ``event_id``, ``wait_on_stream``, ``record_corr``, ``record_start_ns``.
    """
    s = events.filter(pl.col("cat").cast(pl.String).is_in(sorted(kinds.SYNC_CATEGORIES))).select(
        "rank", "event_id",
        pl.col("args").str.json_path_match("$.wait_on_stream").cast(pl.Int64, strict=False).alias("wait_on_stream"),
        pl.col("args").str.json_path_match("$.wait_on_cuda_event_record_corr_id").cast(pl.Int64, strict=False)
        .alias("record_corr"))
    rec = events.filter(kinds.is_runtime() & pl.col("correlation").is_not_null()
                        ).group_by("rank", "correlation").agg(pl.col("start_ns").min().alias("record_start_ns"))
    return s.join(rec, left_on=["rank", "record_corr"], right_on=["rank", "correlation"], how="left")


def cross_edges(rows: WindowRows, hc: HostChains, dc: DeviceChains, launch_row: np.ndarray) -> Edges:
    """Every cross edge of the windows of `rows` (`launch_row`: each work item's launching host row, -1: none).

    In order: launches, synchronous copies, host syncs, launch-queue blocks, Stream Wait Event rows,
    wait calls without a row, communication holds, thread forks, thread joins.
    """
    dev_i = rows.dev.with_row_index("row").with_columns(pl.col("row").cast(pl.Int64))
    work = dev_i.select("win", "device", "stream", "row", pl.col("launch_start_ns").fill_null(pl.col("start_ns")))
    sync_host = rows.syncs.with_columns(
        hrow=pl.Series(rows.host_row(rows.swin, rows.syncs["launch_id"].fill_null(-1).to_numpy()),
                       dtype=pl.Int64)).filter(pl.col("hrow") >= 0)
    h_names = rows.host["name"].to_numpy()
    h_start = rows.host["start_ns"].to_numpy()
    sync_host = sync_host.with_columns(
        call_start=pl.Series(h_start[sync_host["hrow"].to_numpy()], dtype=pl.Int64),
        call_name=pl.Series(h_names[sync_host["hrow"].to_numpy()], dtype=pl.String))
    # the host sync / wait calls that have a cuda_sync row
    has_row = np.zeros(rows.host.height, bool)
    has_row[sync_host["hrow"].to_numpy()] = True
    fork, join = _thread_join(rows, hc)
    parts = [_launch_edges(rows, hc, dc, launch_row), _copy_sync_edges(rows, hc, dc, launch_row),
             _host_sync_edges(rows, hc, dc, work, sync_host, has_row), _queue_edges(rows, hc, dc, dev_i),
             _stream_wait_edges(rows, dc, work, sync_host), _unrecorded_wait_edges(rows, dc, dev_i, has_row),
             _comm_hold_edges(rows, dc, dev_i),
             _edges(hc.start_node[fork[0]], hc.start_node[fork[1]], fork[0], EDGE_THREAD),
             _edges(hc.end_node[join[1]], hc.end_node[join[0]], join[0], EDGE_THREAD)]
    return Edges(*(np.concatenate([getattr(p, f) for p in parts]) for f in Edges._fields))


def _launch_edges(rows: WindowRows, hc: HostChains, dc: DeviceChains, launch_row: np.ndarray) -> Edges:
    """Launch call start -> activity start (owner: the activity)."""
    ok = launch_row >= 0
    return _edges(hc.start_node[launch_row[ok]], dc.start_node[ok], np.flatnonzero(ok) + rows.host.height,
                  EDGE_LAUNCH)


def _copy_sync_edges(rows: WindowRows, hc: HostChains, dc: DeviceChains, launch_row: np.ndarray) -> Edges:
    """Synchronous memcpy / memset calls wait on their own copy: copy end -> call end."""
    dev = rows.dev
    mem = (launch_row >= 0) & np.isin(dev["kind"].to_numpy(), kinds.COPY_KINDS) & ~dev.select(
        LAUNCH.expr("launch_name")).to_series().to_numpy()
    return _edges(dc.end_node[mem], hc.end_node[launch_row[mem]], launch_row[mem], EDGE_SYNC)


def _last_before(work: pl.DataFrame, queries: pl.DataFrame, on: str, *, forward: bool = False) -> pl.DataFrame:
    """For each query (`win`, `stream`, `at`), the work row of its window on that stream whose `on`
    time is the last strictly before `at` (or, `forward`, the first strictly after): adds `row`.
    """
    w = work.select("win", "stream", pl.col(on).alias("at"), "row").drop_nulls("at").sort("at")
    q = queries.with_row_index("_q").sort("at")
    out = q.join_asof(w, on="at", by=["win", "stream"], strategy="forward" if forward else "backward",
                      allow_exact_matches=False, check_sortedness=False)
    return out.sort("_q").drop("_q").drop_nulls("row")


def _device_wide(calls: pl.DataFrame, work: pl.DataFrame, track: np.ndarray, *, by_device: bool) -> pl.DataFrame:
    """The (call, stream) pairs a device-wide sync needs an edge for: `hrow`, `stream`, `call_start`.

    A device-wide sync (``cudaDeviceSynchronize``, a Context Sync row) waits for the last work on
    every stream (of its device when `by_device`). Its edge from a stream adds nothing when the
    stream got no new work since the previous such call on the same host thread: that call's
    edge already reaches the same work, and the thread's chain carries it on. So only pairs whose
    stream launched work since the thread's previous call are kept: at most one per work item and
    syncing thread of its window, never calls x streams (8,000 bare syncs x 8,000 streams would be
    64 million rows). One as-of join over all windows: O(m log m), m = work items x syncing threads
    of their window.
    """
    schema: dict[str, pl.DataType] = {"hrow": pl.Int64(), "stream": work.schema["stream"], "call_start": pl.Int64()}
    if calls.is_empty() or work.is_empty():
        return pl.DataFrame(schema=schema)
    by = ["device"] if by_device else []
    calls = calls.with_columns(_track=pl.Series(track[calls["hrow"].to_numpy()], dtype=pl.Int64)).sort("call_start")
    w = work.select("win", *by, "stream", pl.col("launch_start_ns").alias("call_start")).drop_nulls("call_start")
    w = w.join(calls.select("win", "_track").unique(), on="win").sort("call_start")  # per syncing thread
    first_after = w.join_asof(calls.select("hrow", "_track", *by, "call_start"), on="call_start",
                              by=["_track", *by], strategy="forward", allow_exact_matches=False,
                              check_sortedness=False)
    pairs = first_after.drop_nulls("hrow").select("hrow", "stream").unique()
    return pairs.join(calls.select("hrow", "call_start"), on="hrow").select(list(schema))


def _host_sync_edges(rows: WindowRows, hc: HostChains, dc: DeviceChains, work: pl.DataFrame,
                     sync_host: pl.DataFrame, has_row: np.ndarray) -> Edges:
    """Host sync calls: last work launched before the call on each awaited stream -> the call's end.

    Context Sync: every stream of the device; Stream Sync: its stream; Event Sync: the recorded
    event's stream, before the record; a sync call without a ``cuda_sync`` row: every stream of the rank.
    """
    kind_name = pl.col("name")
    q_ctx = _device_wide(sync_host.filter(kind_name == "Context Sync").select("hrow", "win", "device", "call_start"),
                         work, hc.track, by_device=True)
    q_str = sync_host.filter(kind_name == "Stream Sync").select("hrow", "stream", "call_start")
    ev_sync = sync_host.filter((kind_name == "Event Sync") & (pl.col("wait_on_stream") >= 0)
                               & EVENT_SYNC.expr("call_name"))
    q_ev = ev_sync.select("hrow", pl.col("wait_on_stream").alias("stream"),
                          pl.col("record_start_ns").fill_null(pl.col("call_start")).alias("call_start"))
    # sync calls without a cuda_sync row: every stream of the rank
    bare = rows.host.with_row_index("hrow").with_columns(pl.col("hrow").cast(pl.Int64)).filter(
        pl.col("is_sync") & pl.Series(~has_row) & ~EVENT_SYNC.expr())
    q_bare = _device_wide(bare.select("hrow", "win", pl.col("start_ns").alias("call_start")), work, hc.track,
                          by_device=False)
    q = pl.concat([x.select("hrow", "stream", pl.col("call_start").alias("at")) for x in (q_ctx, q_str, q_ev, q_bare)])
    q = q.with_columns(win=pl.Series(rows.hwin[q["hrow"].to_numpy()], dtype=pl.Int64))
    hit = _last_before(work.select("win", "stream", "row", "launch_start_ns"), q, "launch_start_ns")
    hr = hit["hrow"].to_numpy()
    return _edges(dc.end_node[hit["row"].to_numpy()], hc.end_node[hr], hr, EDGE_SYNC)


def _queue_edges(rows: WindowRows, hc: HostChains, dc: DeviceChains, dev_i: pl.DataFrame) -> Edges:
    """A launch call far longer than its median (in its window) blocks on a full launch queue: it returns
    when some device work completes (the last one that ends during the call): that work's end -> call end."""
    none = np.zeros(0, np.int64)
    if not (rows.host.height and rows.dev.height):
        return Edges(none, none, none, none)
    calls = rows.host.with_row_index("hrow").with_columns(pl.col("hrow").cast(pl.Int64)).filter(
        LAUNCH.expr() & (pl.col("kind") == "runtime"))
    took = pl.col("end_eff") - pl.col("start_ns")
    calls = calls.filter(took > QUEUE_BLOCK_FACTOR * took.median().over("win", "name"))
    ends = dev_i.select("win", pl.col("end_ns").alias("at"), "row").sort("at")
    qb = calls.select("hrow", "win", "start_ns", pl.col("end_eff").alias("at")).sort("at").join_asof(
        ends, on="at", by="win", strategy="backward", check_sortedness=False).filter(
        pl.col("row").is_not_null() & (pl.col("at") >= pl.col("start_ns")))
    return _edges(dc.end_node[qb["row"].to_numpy()], hc.end_node[qb["hrow"].to_numpy()], qb["hrow"].to_numpy(),
                  EDGE_SYNC)


def _stream_wait_edges(rows: WindowRows, dc: DeviceChains, work: pl.DataFrame, sync_host: pl.DataFrame) -> Edges:
    """Stream Wait Event rows: last work on the recorded stream -> first work launched after the wait call
    on the waiting stream (owner: the sync row)."""
    swe = sync_host.filter((pl.col("name") == "Stream Wait Event") & (pl.col("wait_on_stream") >= 0))
    srow_base = rows.host.height + rows.dev.height
    sync_pos = rows.syncs.with_row_index("sp").select("win", "event_id", pl.col("sp").cast(pl.Int64))
    swe = swe.join(sync_pos, on=["win", "event_id"])
    wk = work.select("win", "stream", "row", "launch_start_ns")
    a = _last_before(wk, swe.select("sp", "win", pl.col("wait_on_stream").alias("stream"),
                                    pl.col("record_start_ns").fill_null(pl.col("call_start")).alias("at")),
                     "launch_start_ns")
    b = _last_before(wk, swe.select("sp", "win", "stream", pl.col("call_start").alias("at")), "launch_start_ns",
                     forward=True)
    ab = a.select("sp", pl.col("row").alias("src")).join(b.select("sp", pl.col("row").alias("dst")), on="sp")
    return _edges(dc.end_node[ab["src"].to_numpy()], dc.start_node[ab["dst"].to_numpy()],
                  ab["sp"].to_numpy() + srow_base, EDGE_XSTREAM)


def _unrecorded_wait_edges(rows: WindowRows, dc: DeviceChains, dev_i: pl.DataFrame, has_row: np.ndarray) -> Edges:
    """A StreamWaitEvent call without a ``cuda_sync`` row (ROCm traces, older Kineto) does not say which
    stream waits on which: the first work launched after the call waits, and what it waits for is the
    last work on another stream of its device that ends in its stream's idle gap (an NCCL kernel's end
    preceding the next compute kernel)."""
    none = np.zeros(0, np.int64)
    waits = rows.host.with_row_index("hrow").with_columns(pl.col("hrow").cast(pl.Int64)).filter(
        pl.col("name").str.contains(WAIT_CALLS) & (pl.col("kind") == "runtime") & pl.Series(~has_row))
    if not (waits.height and rows.dev.height):
        return Edges(none, none, none, none)
    by_launch = dev_i.select("row", "win", "device", "start_ns", "free_ns",
                             at=pl.col("launch_start_ns")).drop_nulls("at").sort("at")
    waiter = waits.select("hrow", "win", at=pl.col("start_ns")).sort("at").join_asof(
        by_launch, on="at", by="win", strategy="forward", allow_exact_matches=False,
        check_sortedness=False).drop_nulls("row")
    ends = dev_i.select(pl.col("row").alias("src"), "win", "device", "end_ns", at=pl.col("end_ns")).sort("at")
    awaited = waiter.select("hrow", "row", "win", "device", "free_ns", at=pl.col("start_ns")).sort("at").join_asof(
        ends, on="at", by=["win", "device"], strategy="backward", check_sortedness=False)
    awaited = awaited.with_columns(_w0=pl.Series(rows.lo[awaited["win"].to_numpy()], dtype=pl.Int64)).filter(
        pl.col("src").is_not_null() & (pl.col("end_ns") > pl.col("free_ns").fill_null(pl.col("_w0"))))
    awaited = awaited.filter(pl.col("src") != pl.col("row")).unique(["src", "row"], keep="first",
                                                                     maintain_order=True)
    return _edges(dc.end_node[awaited["src"].to_numpy()], dc.start_node[awaited["row"].to_numpy()],
                  awaited["hrow"].to_numpy(), EDGE_XSTREAM)


def _comm_hold_edges(rows: WindowRows, dc: DeviceChains, dev_i: pl.DataFrame) -> Edges:
    """Work that a communication kernel on another stream holds back: a kernel that was launched and whose
    stream was free, but starts only after an NCCL/RCCL kernel ends (the collective's stream-wait-event;
    ROCm traces and streams waited on before the trace began record no wait)."""
    none = np.zeros(0, np.int64)
    comm = dev_i.filter(pl.col("category") == "communication")
    if not (comm.height and rows.dev.height):
        return Edges(none, none, none, none)
    ends = comm.select(pl.col("row").alias("src"), "win", "device", pl.col("stream").alias("src_stream"),
                       "end_ns", at=pl.col("end_ns")).sort("at")
    held = dev_i.filter(pl.col("category").fill_null("") != "communication").select(
        "row", "win", "device", "stream", "free_ns", "_w0", at=pl.col("start_ns")).sort("at").join_asof(
        ends, on="at", by=["win", "device"], strategy="backward", check_sortedness=False).filter(
        pl.col("src").is_not_null() & (pl.col("src_stream") != pl.col("stream"))
        & (pl.col("end_ns") > pl.col("free_ns").fill_null(pl.col("_w0"))))
    return _edges(dc.end_node[held["src"].to_numpy()], dc.start_node[held["row"].to_numpy()],
                  held["src"].to_numpy() + rows.host.height, EDGE_XSTREAM)


def _thread_join(rows: WindowRows, hc: HostChains) -> tuple[tuple[np.ndarray, np.ndarray],
                                                            tuple[np.ndarray, np.ndarray]]:
    """The fork and join edges of `BACKWARD_CALLS` ops as (caller row, worker row) pairs.

    A worker thread is a host thread holding an ``autograd::engine::evaluate_function:`` op; for each
    caller and each worker thread of its window other than the caller's, the fork pairs the caller
    with the first op starting inside its span on that thread, the join with the last op ending
    inside it. Two as-of joins over the rows sorted by time: O(n log n).
    """
    host, track, hs, he = rows.host, hc.track, hc.start, hc.end
    none = (np.zeros(0, np.int64), np.zeros(0, np.int64))
    names = host["name"]
    is_eval = names.str.starts_with(kinds.BACKWARD_OP_PREFIX).fill_null(False).to_numpy()
    if not is_eval.any():
        return none, none
    callers = np.flatnonzero(names.str.contains(BACKWARD_CALLS).fill_null(False).to_numpy())
    if not len(callers):
        return none, none
    win = host["win"].to_numpy()
    workers = np.unique(track[is_eval])
    rows_on = np.flatnonzero(np.isin(track, workers))
    w = pl.DataFrame({"wrow": rows_on, "wtrack": track[rows_on], "s": hs[rows_on], "e": he[rows_on]})
    c = pl.DataFrame({"crow": callers, "ctrack": track[callers], "cs": hs[callers], "ce": he[callers],
                      "win": win[callers]}).join(
        pl.DataFrame({"wtrack": workers, "win": win[np.searchsorted(track, workers)]}), on="win").filter(
        pl.col("wtrack") != pl.col("ctrack"))
    first = c.sort("cs").join_asof(w.sort("s"), left_on="cs", right_on="s", by="wtrack", strategy="forward",
                                   check_sortedness=False).filter(pl.col("wrow").is_not_null()
                                                                  & (pl.col("e") <= pl.col("ce")))
    last = c.sort("ce").join_asof(w.sort("e"), left_on="ce", right_on="e", by="wtrack", strategy="backward",
                                  check_sortedness=False).filter(pl.col("wrow").is_not_null()
                                                                 & (pl.col("s") >= pl.col("cs")))
    return ((first["crow"].to_numpy().astype(np.int64), first["wrow"].to_numpy().astype(np.int64)),
            (last["crow"].to_numpy().astype(np.int64), last["wrow"].to_numpy().astype(np.int64)))
