"""The dependency graph of one rank's window: CPU threads, GPU streams, launches and syncs.

Nodes are the start and end points of the host ops (every host event but profiler spans) and of
the device work (kernels, memcpy, memset) that lie wholly inside the window. Edges:

* **thread order** - each host thread's points in time order form a chain; the edge between two
  consecutive points is CPU time of the innermost op open there (its self time), so nesting and
  program order are one chain. Idle time on a thread is an `idle` edge.
* **stream order** - each GPU stream is a chain ``start -> end -> next start ...``: the activity
  itself, then the gap before the next one (`stream_gap`, bound by launch overhead: the device's
  latency between an activity and the next one already queued).
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
  ``cudaEventRecord`` -> the first work launched on the waiting stream after the wait call.

Weights reproduce the trace: at a node with several incoming edges the one from the latest
predecessor (the *binding* edge) weighs the observed gap; the others weigh the smaller of that
edge kind's median binding weight and their slack. So the longest path over the observed weights
puts every node at its observed time, and a `what_if` with other weights is a replay.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import polars as pl

from proftab import kinds
from proftab.intervals.dag import UNREACHED, chain_heads
from proftab.intervals.tree import nearest_ancestor, row_positions
from proftab.torch.aggregate import EVALUATE_FUNCTION_PREFIX

__all__ = ["BACKWARD_CALLS", "BOUND_BY", "KINDS", "QUEUE_BLOCK_FACTOR", "SYNC_CALLS", "Graph", "build_graph",
           "sync_frame"]

#: segment kinds (codes are positions)
KINDS = ("cpu_op", "runtime", "sync_wait", "idle", "kernel", "memcpy", "memset", "stream_gap", "launch_delay")
#: what a segment's time is bound by (codes are positions)
BOUND_BY = ("cpu_bound", "gpu_compute_bound", "gpu_communication_bound", "gpu_memcpy_bound", "launch_overhead",
            "sync")
#: host calls that block until device work finishes
SYNC_CALLS = r"(?:cuda|hip)(?:Device|Stream|Event)Synchronize"
#: host calls that make a stream wait on an event recorded on another stream
WAIT_CALLS = r"^(?:cuda|hip)StreamWaitEvent$"
_K = {k: i for i, k in enumerate(KINDS)}
_B = {b: i for i, b in enumerate(BOUND_BY)}
#: host ops that wait while autograd's device threads run the backward (the Python frame of
#: ``torch.autograd.backward`` / ``Tensor.backward``: ``<built-in method run_backward of ...>``)
BACKWARD_CALLS = r"\brun_backward\b"
_EDGE_LAUNCH, _EDGE_SYNC, _EDGE_XSTREAM, _EDGE_THREAD = 0, 1, 2, 3
#: a launch call this many times longer than the median of its name waited for a launch-queue slot
QUEUE_BLOCK_FACTOR = 10


@dataclass(frozen=True)
class Graph:
    """One window's dependency graph (numpy arrays; times in ns relative to `start_ns`).

    Node arrays (`t`, `head`, `w`, `base`, `w_owner`, `w_kind`, `w_bound`) are indexed by node;
    the chain edge into node ``i`` comes from ``i - 1`` unless ``head[i]``. Cross-edge arrays
    (`src`, `dst`, `cw`, `c_owner`, `c_kind`, `c_bound`, `c_class`) are indexed by edge.
    ``*_owner`` are rows of `events` (-1: none), the event a weight's time belongs to.
    """

    rank: int
    step: int | None
    start_ns: int
    end_ns: int
    t: np.ndarray
    head: np.ndarray
    w: np.ndarray
    base: np.ndarray
    w_owner: np.ndarray
    w_kind: np.ndarray
    w_bound: np.ndarray
    src: np.ndarray
    dst: np.ndarray
    cw: np.ndarray
    c_owner: np.ndarray
    c_kind: np.ndarray
    c_bound: np.ndarray
    sink_pref: int
    events: pl.DataFrame
    parent_row: np.ndarray
    stats: dict[str, Any] = field(default_factory=dict)

    @property
    def n_nodes(self) -> int:
        """Number of nodes."""
        return len(self.t)


def _device_bound(kind: pl.Expr, category: pl.Expr) -> pl.Expr:
    return (pl.when(kind.is_in(["memcpy", "memset"])).then(pl.lit(_B["gpu_memcpy_bound"]))
            .when(category == "communication").then(pl.lit(_B["gpu_communication_bound"]))
            .otherwise(pl.lit(_B["gpu_compute_bound"]))).cast(pl.Int8)


def _host_rows(nested: pl.DataFrame, rank: int, w0: int, w1: int) -> pl.DataFrame:
    end = pl.col("end_ns") - pl.col("overrun_ns").fill_null(0)
    rt = kinds.is_runtime()
    sync = rt & pl.col("name").str.contains(f"^{SYNC_CALLS}$")
    return (
        nested.filter((pl.col("rank") == rank) & kinds.is_host_op() & (pl.col("ph").cast(pl.String) == "X")
                      & (pl.col("start_ns") >= w0) & (end <= w1))
        .with_columns(end_eff=pl.max_horizontal(end, pl.col("start_ns")))
        .sort("pid", "tid", "start_ns", pl.col("end_eff"), descending=[False, False, False, True])
        .with_columns(
            kind=pl.when(sync).then(pl.lit("sync_wait")).when(rt).then(pl.lit("runtime"))
            .otherwise(pl.lit("cpu_op")),
            bound=pl.when(sync).then(pl.lit(_B["sync"]))
            .when(rt & pl.col("name").str.contains("(?i)launch|memcpy|memset")).then(pl.lit(_B["launch_overhead"]))
            .otherwise(pl.lit(_B["cpu_bound"])).cast(pl.Int8),
            is_sync=sync, category=pl.lit(None, pl.String))
    )


def _last_before(work: pl.DataFrame, queries: pl.DataFrame, on: str, *, forward: bool = False) -> pl.DataFrame:
    """For each query (`stream`, `at`), the work row on that stream whose `on` time is the last
    strictly before `at` (or, `forward`, the first strictly after): adds `row`.
    """
    w = work.select("stream", pl.col(on).alias("at"), "row").drop_nulls("at").sort("stream", "at")
    q = queries.with_row_index("_q").sort("stream", "at")
    out = q.join_asof(w, on="at", by="stream", strategy="forward" if forward else "backward",
                      allow_exact_matches=False, check_sortedness=False)
    return out.sort("_q").drop("_q").drop_nulls("row")


def with_stream_free(activities: pl.DataFrame) -> pl.DataFrame:
    """`activities` plus `free_ns`: when each device work item's stream became free of earlier
    work (the latest end of the work before it on its stream; null for the first, and for syncs)."""
    work_kind = pl.col("kind").cast(pl.String).is_in(["kernel", "memcpy", "memset"])
    free = (activities.filter(work_kind).sort("rank", "device", "stream", "start_ns", "end_ns")
            .select("rank", "event_id",
                    pl.col("end_ns").cum_max().shift(1).over("rank", "device", "stream").alias("free_ns")))
    return activities.join(free, on=["rank", "event_id"], how="left", maintain_order="left")


def _device_wide(calls: pl.DataFrame, work: pl.DataFrame, track: np.ndarray, *, by_device: bool) -> pl.DataFrame:
    """The (call, stream) pairs a device-wide sync needs an edge for: `hrow`, `stream`, `call_start`.

    A device-wide sync (``cudaDeviceSynchronize``, a Context Sync row) waits for the last work on
    every stream (of its device when `by_device`). Its edge from a stream adds nothing when the
    stream got no new work since the previous such call on the same host thread: that call's
    edge already reaches the same work, and the thread's chain carries it on. So only pairs whose
    stream launched work since the thread's previous call are kept: at most one per work item and
    thread, never calls x streams (8,000 bare syncs x 8,000 streams would be 64 million rows).
    """
    schema: dict[str, pl.DataType] = {"hrow": pl.Int64(), "stream": work.schema["stream"], "call_start": pl.Int64()}
    if calls.is_empty() or work.is_empty():
        return pl.DataFrame(schema=schema)
    by = ["device"] if by_device else []
    calls = calls.with_columns(_track=pl.Series(track[calls["hrow"].to_numpy()], dtype=pl.Int64)).sort("call_start")
    w = work.select(*by, "stream", pl.col("launch_start_ns").alias("call_start")).drop_nulls("call_start").sort(
        "call_start")
    out = []
    for t in calls["_track"].unique().to_list():  # one pass per host thread that syncs (a few)
        ct = calls.filter(pl.col("_track") == t).select("hrow", *by, "call_start")
        first_after = w.join_asof(ct, on="call_start", by=by or None, strategy="forward", allow_exact_matches=False,
                                  check_sortedness=False)
        out.append(first_after.drop_nulls("hrow").select("hrow", "stream").unique())
    pairs = pl.concat(out)
    return pairs.join(calls.select("hrow", "call_start"), on="hrow").select(list(schema))


def _thread_join(host: pl.DataFrame, track: np.ndarray, hs: np.ndarray,
                 he: np.ndarray) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """The fork and join edges of `BACKWARD_CALLS` ops as (caller row, worker row) pairs.

    A worker thread is a host thread holding an ``autograd::engine::evaluate_function:`` op; for each
    caller and each worker thread other than the caller's, the fork pairs the caller with the first op
    starting inside its span on that thread, the join with the last op ending inside it. Two as-of
    joins over the rows sorted by time: O(n log n).
    """
    none = (np.zeros(0, np.int64), np.zeros(0, np.int64))
    names = host["name"]
    is_eval = names.str.starts_with(EVALUATE_FUNCTION_PREFIX).fill_null(False).to_numpy()
    if not is_eval.any():
        return none, none
    callers = np.flatnonzero(names.str.contains(BACKWARD_CALLS).fill_null(False).to_numpy())
    if not len(callers):
        return none, none
    workers = np.unique(track[is_eval])
    rows = np.flatnonzero(np.isin(track, workers))
    w = pl.DataFrame({"wrow": rows, "wtrack": track[rows], "s": hs[rows], "e": he[rows]})
    c = pl.DataFrame({"crow": callers, "ctrack": track[callers], "cs": hs[callers], "ce": he[callers]}).join(
        pl.DataFrame({"wtrack": workers}), how="cross").filter(pl.col("wtrack") != pl.col("ctrack"))
    first = c.sort("cs").join_asof(w.sort("s"), left_on="cs", right_on="s", by="wtrack", strategy="forward",
                                   check_sortedness=False).filter(pl.col("wrow").is_not_null()
                                                                  & (pl.col("e") <= pl.col("ce")))
    last = c.sort("ce").join_asof(w.sort("e"), left_on="ce", right_on="e", by="wtrack", strategy="backward",
                                  check_sortedness=False).filter(pl.col("wrow").is_not_null()
                                                                 & (pl.col("s") >= pl.col("cs")))
    return ((first["crow"].to_numpy().astype(np.int64), first["wrow"].to_numpy().astype(np.int64)),
            (last["crow"].to_numpy().astype(np.int64), last["wrow"].to_numpy().astype(np.int64)))


def build_graph(nested: pl.DataFrame, activities: pl.DataFrame, sync_args: pl.DataFrame, *, rank: int,
                start_ns: int, end_ns: int, step: int | None = None, window_event: int | None = None,
                tail: bool = False) -> Graph:
    """The dependency graph of `rank` over ``[start_ns, end_ns]``.

    Parameters
    ----------
    nested
        ``Trace.nested`` (event_id, rank, pid, tid, cat, name, ph, start_ns, end_ns, overrun_ns,
        parent_id).
    activities
        ``Trace.device.activities()``.
    sync_args
        The ``cuda_sync`` rows' ``rank``, ``event_id``, ``wait_on_stream``, ``record_corr``, and the
        host runtime rows' ``rank``, ``correlation``, ``start_ns`` as ``record_start_ns`` (joined on
        ``record_corr``): see `sync_frame`.
    step, window_event
        Recorded on the graph; the window event's end is the preferred path end.
    tail
        Also take the device work launched inside the window that ends after it (the step's GPU
        tail, as HTA does): the path may then end after the window.
    """
    w0, w1 = int(start_ns), int(end_ns)
    host = _host_rows(nested, rank, w0, w1)
    nh = host.height
    inside = (pl.col("rank") == rank) & (pl.col("start_ns") >= w0) & (pl.col("end_ns") <= w1)
    work_kind = pl.col("kind").cast(pl.String).is_in(["kernel", "memcpy", "memset"])
    if tail:  # the work the window launched, wherever it ends (and unlaunched work inside the window)
        launched = pl.col("launch_start_ns").is_between(w0, w1) & (pl.col("start_ns") >= w0) & (pl.col("rank") == rank)
        # unlaunched work (its launch not in the trace: NCCL kernels of a ROCm trace) and collectives
        # launched earlier, which the window's work may wait on, up to the tail's end
        last = activities.filter(launched & work_kind).select(pl.col("end_ns").max()).item()
        tail_end = max(w1, int(last)) if last is not None else w1
        unlaunched = ((pl.col("rank") == rank) & (pl.col("launch_start_ns").is_null()
                                                  | (pl.col("category") == "communication"))
                      & (pl.col("start_ns") >= w0) & (pl.col("end_ns") <= tail_end))
        inside = launched | unlaunched
    # when each activity's stream became free of earlier work (the latest end of the activities before it)
    if "free_ns" not in activities.columns:  # `with_stream_free` precomputed (graphs() does, once for all windows)
        activities = with_stream_free(activities.filter(pl.col("rank") == rank))
    dev = (activities.filter(inside & work_kind)
           .sort("device", "stream", "start_ns", "end_ns")
           .with_columns(bound=_device_bound(pl.col("kind").cast(pl.String), pl.col("category")),
                         kind=pl.col("kind").cast(pl.String)))
    nd = dev.height
    syncs = activities.filter((pl.col("rank") == rank) & (pl.col("kind").cast(pl.String) == "sync")
                              & (pl.col("start_ns") >= w0) & (pl.col("end_ns") <= w1))
    syncs = syncs.join(sync_args.filter(pl.col("rank") == rank).drop("rank"), on="event_id", how="left")
    ns = syncs.height

    # ---- the events table: host rows, then device rows, then sync rows
    cols = ["event_id", "name", "cat", "kind", "bound", "category"]
    events = pl.concat([
        host.select(pl.col("event_id"), "name", pl.col("cat").cast(pl.String), "kind", "bound", "category"),
        dev.select(pl.col("event_id"), "name", pl.col("cat").cast(pl.String), "kind", "bound", "category"),
        syncs.select(pl.col("event_id"), "name", pl.col("cat").cast(pl.String), pl.lit("sync_wait").alias("kind"),
                     pl.lit(_B["sync"], pl.Int8).alias("bound"), pl.col("category")),
    ]).select(cols)
    h_id = host["event_id"].to_numpy()
    h_rank = np.full(nh, rank, np.int32)
    parent_row = row_positions(h_rank, h_id, h_rank, host["parent_id"].fill_null(-1).to_numpy())
    parent_row = np.concatenate([parent_row, np.full(nd + ns, -1, np.int64)])

    # ---- host chains: points sorted by (track, time, ends before starts, depth)
    hs = host["start_ns"].to_numpy() - w0
    he = host["end_eff"].to_numpy() - w0
    depth = host["depth"].to_numpy().astype(np.int64)
    track = host.select(pl.struct("pid", "tid").rank("dense")).to_series().to_numpy().astype(np.int64)
    zero = he == hs
    rows = np.arange(nh)
    p_row = np.concatenate([rows, rows])
    p_end = np.concatenate([np.zeros(nh, bool), np.ones(nh, bool)])
    p_t = np.concatenate([hs, he])
    p_cls = np.concatenate([np.ones(nh, np.int64), np.where(zero, 1, 0)])
    p_d = np.concatenate([depth, np.where(zero, depth, -depth)])
    p_sub = p_end.astype(np.int64)
    order = np.lexsort((p_sub, p_row, p_d, p_cls, p_t, np.concatenate([track, track])))
    p_row, p_end, p_t = p_row[order], p_end[order], p_t[order]
    p_track = np.concatenate([track, track])[order]
    h_head = chain_heads(p_track)
    h_w = np.where(h_head, 0, p_t - np.roll(p_t, 1))
    # the innermost open op after each point: the op itself after its start, its parent after its end
    after = np.where(p_end, parent_row[p_row], p_row)
    h_owner = np.where(h_head, -1, np.roll(after, 1))
    host_kind = host["kind"].replace_strict(_K, return_dtype=pl.Int8).to_numpy()
    host_bound = host["bound"].to_numpy().astype(np.int8)
    h_wk = np.where(h_owner >= 0, host_kind[np.maximum(h_owner, 0)] if nh else 0, _K["idle"])
    h_wb = np.where(h_owner >= 0, host_bound[np.maximum(h_owner, 0)] if nh else 0, _B["cpu_bound"])
    start_node = np.empty(nh, np.int64)
    end_node = np.empty(nh, np.int64)
    pos = np.arange(2 * nh)
    start_node[p_row[~p_end]] = pos[~p_end]
    end_node[p_row[p_end]] = pos[p_end]

    # ---- device chains: start, end, next start ... per (device, stream)
    ds = dev["start_ns"].to_numpy() - w0
    de = dev["end_ns"].to_numpy() - w0
    d_track = dev.select(pl.struct("device", "stream").rank("dense")).to_series().to_numpy().astype(np.int64)
    d_t = np.empty(2 * nd, np.int64)
    d_t[0::2], d_t[1::2] = ds, de
    d_tr = np.repeat(d_track, 2)
    d_head = chain_heads(d_tr)
    d_w = np.where(d_head, 0, d_t - np.roll(d_t, 1))
    d_owner = np.repeat(np.arange(nd) + nh, 2)
    dev_kind = dev["kind"].replace_strict(_K, return_dtype=pl.Int8).to_numpy()
    dev_bound = dev["bound"].to_numpy().astype(np.int8)
    d_wk = np.empty(2 * nd, np.int8)
    d_wk[1::2] = dev_kind
    d_wk[0::2] = _K["stream_gap"]
    d_wb = np.repeat(dev_bound, 2)
    # gap: launch latency; before a stream's first activity, or when the stream was busy for most of
    # the gap with work outside the graph (launched in an earlier window): the stream's earlier work
    free_rel = dev["free_ns"].fill_null(w0).to_numpy() - w0
    prev_end = np.roll(de, 1)
    busy = (~d_head[0::2]) & ((free_rel - prev_end) > (ds - free_rel))
    d_wb[0::2] = np.where(d_head[0::2] | busy, _B["gpu_compute_bound"], _B["launch_overhead"])
    dev_start = 2 * nh + 2 * np.arange(nd)
    dev_end = dev_start + 1

    t = np.concatenate([p_t, d_t]).astype(np.int64)
    head = np.concatenate([h_head, d_head])
    w = np.concatenate([h_w, d_w]).astype(np.int64)
    w_owner = np.concatenate([h_owner, d_owner]).astype(np.int64)
    w_kind = np.concatenate([h_wk, d_wk]).astype(np.int8)
    w_bound = np.concatenate([h_wb, d_wb]).astype(np.int8)
    w_owner[head] = -1
    w_kind[head] = _K["idle"]

    # ---- cross edges
    e_src: list[np.ndarray] = []
    e_dst: list[np.ndarray] = []
    e_own: list[np.ndarray] = []
    e_cls: list[np.ndarray] = []

    def h_rows_of(ids: np.ndarray) -> np.ndarray:
        return row_positions(h_rank, h_id, np.full(len(ids), rank, np.int32), ids)

    dev_i = dev.with_row_index("row").with_columns(pl.col("row").cast(pl.Int64))
    # launch -> activity
    lrow = h_rows_of(dev["launch_id"].fill_null(-1).to_numpy())
    ok = lrow >= 0
    e_src.append(start_node[lrow[ok]])
    e_dst.append(dev_start[ok])
    e_own.append(np.flatnonzero(ok) + nh)
    e_cls.append(np.full(int(ok.sum()), _EDGE_LAUNCH))
    # the nn.Module each event runs in: the nearest `nn.Module: X` python_function at or above a host op,
    # the launching op's for device work
    is_mod = host["name"].str.starts_with(kinds.MODULE_PREFIX).to_numpy()
    hrows = np.arange(nh)
    anc = np.where(is_mod, hrows, nearest_ancestor(parent_row[:nh], hrows, is_mod)) if nh else hrows
    owner_mod = np.concatenate([anc, np.where(lrow >= 0, anc[np.maximum(lrow, 0)] if nh else -1, -1),
                                np.full(ns, -1)])
    mod_names = host["name"].str.strip_prefix(kinds.MODULE_PREFIX)
    module = (mod_names.gather(pl.Series(np.maximum(owner_mod, 0))) if nh
              else pl.Series([None] * len(owner_mod), dtype=pl.String))
    module = pl.select(pl.when(pl.Series(owner_mod >= 0)).then(module)).to_series().alias("module")
    # synchronous memcpy / memset calls wait on their own copy
    mem = ok & np.isin(dev["kind"].to_numpy(), ["memcpy", "memset"]) & ~dev["launch_name"].fill_null("").str.contains(
        "Launch").to_numpy()
    e_src.append(dev_end[mem])
    e_dst.append(end_node[lrow[mem]])
    e_own.append(lrow[mem])
    e_cls.append(np.full(int(mem.sum()), _EDGE_SYNC))
    # host sync calls -> last work on the awaited streams
    work = dev_i.select("device", "stream", "row", pl.col("launch_start_ns").fill_null(pl.col("start_ns")))
    sync_host = syncs.with_columns(hrow=pl.Series(h_rows_of(syncs["launch_id"].fill_null(-1).to_numpy()),
                                                  dtype=pl.Int64)).filter(pl.col("hrow") >= 0)
    h_names = host["name"].to_numpy()
    sync_host = sync_host.with_columns(
        call_start=pl.Series(hs[sync_host["hrow"].to_numpy()] + w0, dtype=pl.Int64),
        call_name=pl.Series(h_names[sync_host["hrow"].to_numpy()], dtype=pl.String))
    kind_name = pl.col("name")
    q_ctx = _device_wide(sync_host.filter(kind_name == "Context Sync").select("hrow", "device", "call_start"),
                         work, track, by_device=True)
    q_str = sync_host.filter(kind_name == "Stream Sync").select("hrow", "stream", "call_start")
    ev_sync = sync_host.filter((kind_name == "Event Sync") & (pl.col("wait_on_stream") >= 0)
                               & pl.col("call_name").str.contains("EventSynchronize"))
    q_ev = ev_sync.select("hrow", pl.col("wait_on_stream").alias("stream"),
                          pl.col("record_start_ns").fill_null(pl.col("call_start")).alias("call_start"))
    # sync calls without a cuda_sync row: every stream of the rank
    has_row = np.zeros(nh, bool)
    has_row[sync_host["hrow"].to_numpy()] = True
    bare = host.with_row_index("hrow").with_columns(pl.col("hrow").cast(pl.Int64)).filter(
        pl.col("is_sync") & pl.Series(~has_row) & ~pl.col("name").str.contains("Event"))
    q_bare = _device_wide(bare.select("hrow", pl.col("start_ns").alias("call_start")), work, track, by_device=False)
    q = pl.concat([x.select("hrow", "stream", pl.col("call_start").alias("at")) for x in (q_ctx, q_str, q_ev, q_bare)])
    hit = _last_before(work.select("stream", "row", "launch_start_ns"), q, "launch_start_ns")
    hr = hit["hrow"].to_numpy()
    e_src.append(dev_end[hit["row"].to_numpy()])
    e_dst.append(end_node[hr])
    e_own.append(hr)
    e_cls.append(np.full(len(hr), _EDGE_SYNC))
    # a launch call far longer than its median blocks on a full launch queue: it returns when some
    # device work completes (the last one that ends during the call)
    if nh and nd:
        calls = host.with_row_index("hrow").with_columns(pl.col("hrow").cast(pl.Int64)).filter(
            pl.col("name").str.contains("Launch") & (pl.col("kind") == "runtime"))
        calls = calls.filter((pl.col("end_eff") - pl.col("start_ns"))
                             > QUEUE_BLOCK_FACTOR * (pl.col("end_eff") - pl.col("start_ns")).median().over("name"))
        ends = dev_i.select(pl.col("end_ns").alias("at"), "row").sort("at")
        qb = calls.select("hrow", "start_ns", pl.col("end_eff").alias("at")).sort("at").join_asof(
            ends, on="at", strategy="backward", check_sortedness=False).filter(
            pl.col("row").is_not_null() & (pl.col("at") >= pl.col("start_ns")))
        e_src.append(dev_end[qb["row"].to_numpy()])
        e_dst.append(end_node[qb["hrow"].to_numpy()])
        e_own.append(qb["hrow"].to_numpy())
        e_cls.append(np.full(qb.height, _EDGE_SYNC))
    # Stream Wait Event: last work on the recorded stream -> first work launched after the wait call
    swe = sync_host.filter((kind_name == "Stream Wait Event") & (pl.col("wait_on_stream") >= 0)).with_row_index("srow")
    srow_base = nh + nd
    sync_pos = syncs.with_row_index("sp").select("event_id", pl.col("sp").cast(pl.Int64))
    swe = swe.join(sync_pos, on="event_id")
    a = _last_before(work.select("stream", "row", "launch_start_ns"),
                     swe.select("sp", pl.col("wait_on_stream").alias("stream"),
                                pl.col("record_start_ns").fill_null(pl.col("call_start")).alias("at")),
                     "launch_start_ns")
    b = _last_before(work.select("stream", "row", "launch_start_ns"),
                     swe.select("sp", "stream", pl.col("call_start").alias("at")), "launch_start_ns", forward=True)
    ab = a.select("sp", pl.col("row").alias("src")).join(b.select("sp", pl.col("row").alias("dst")), on="sp")
    e_src.append(dev_end[ab["src"].to_numpy()])
    e_dst.append(dev_start[ab["dst"].to_numpy()])
    e_own.append(ab["sp"].to_numpy() + srow_base)
    e_cls.append(np.full(ab.height, _EDGE_XSTREAM))
    # a StreamWaitEvent call without a cuda_sync row (ROCm traces, older Kineto) does not say which
    # stream waits on which: the first work launched after the call waits, and what it waits for is
    # the last work on another stream of its device that ends in its stream's idle gap (an NCCL
    # kernel's end preceding the next compute kernel)
    waits = host.with_row_index("hrow").with_columns(pl.col("hrow").cast(pl.Int64)).filter(
        pl.col("name").str.contains(WAIT_CALLS) & (pl.col("kind") == "runtime") & pl.Series(~has_row))
    if waits.height and nd:
        by_launch = dev_i.select("row", "device", "start_ns", "free_ns", at=pl.col("launch_start_ns")).drop_nulls(
            "at").sort("at")
        waiter = waits.select("hrow", at=pl.col("start_ns")).sort("at").join_asof(
            by_launch, on="at", strategy="forward", allow_exact_matches=False, check_sortedness=False).drop_nulls("row")
        ends = dev_i.select(pl.col("row").alias("src"), "device", "end_ns", at=pl.col("end_ns")).sort("at")
        awaited = waiter.select("hrow", "row", "device", "free_ns", at=pl.col("start_ns")).sort("at").join_asof(
            ends, on="at", by="device", strategy="backward", check_sortedness=False).filter(
            pl.col("src").is_not_null() & (pl.col("end_ns") > pl.col("free_ns").fill_null(w0)))
        awaited = awaited.filter(pl.col("src") != pl.col("row")).unique(["src", "row"], keep="first",
                                                                         maintain_order=True)
        e_src.append(dev_end[awaited["src"].to_numpy()])
        e_dst.append(dev_start[awaited["row"].to_numpy()])
        e_own.append(awaited["hrow"].to_numpy())
        e_cls.append(np.full(awaited.height, _EDGE_XSTREAM))
    # work that a communication kernel on another stream holds back: a kernel that was launched
    # and whose stream was free, but starts only after an NCCL/RCCL kernel ends (the collective's
    # stream-wait-event; ROCm traces and streams waited on before the trace began record no wait)
    comm = dev_i.filter(pl.col("category") == "communication")
    if comm.height and nd:
        ends = comm.select(pl.col("row").alias("src"), "device", pl.col("stream").alias("src_stream"), "end_ns",
                           at=pl.col("end_ns")).sort("at")
        held = dev_i.filter(pl.col("category").fill_null("") != "communication").select(
            "row", "device", "stream", "free_ns", at=pl.col("start_ns")).sort("at").join_asof(
            ends, on="at", by="device", strategy="backward", check_sortedness=False).filter(
            pl.col("src").is_not_null() & (pl.col("src_stream") != pl.col("stream"))
            & (pl.col("end_ns") > pl.col("free_ns").fill_null(w0)))
        e_src.append(dev_end[held["src"].to_numpy()])
        e_dst.append(dev_start[held["row"].to_numpy()])
        e_own.append(held["src"].to_numpy() + nh)
        e_cls.append(np.full(held.height, _EDGE_XSTREAM))

    # thread join: a run_backward call on one thread waits for autograd's device thread(s), which run
    # the backward's ops (and launch its kernels): call start -> first op there inside the call,
    # last op there inside the call -> call end
    fork, join = _thread_join(host, track, hs, he)
    e_src.append(start_node[fork[0]])
    e_dst.append(start_node[fork[1]])
    e_own.append(fork[0])
    e_cls.append(np.full(len(fork[0]), _EDGE_THREAD))
    e_src.append(end_node[join[1]])
    e_dst.append(end_node[join[0]])
    e_own.append(join[0])
    e_cls.append(np.full(len(join[0]), _EDGE_THREAD))

    src = np.concatenate(e_src).astype(np.int64)
    dst = np.concatenate(e_dst).astype(np.int64)
    c_owner = np.concatenate(e_own).astype(np.int64)
    c_class = np.concatenate(e_cls).astype(np.int8)
    slack = t[dst] - t[src]
    keep = slack >= 0
    dropped = int((~keep).sum())
    src, dst, c_owner, c_class, slack = src[keep], dst[keep], c_owner[keep], c_class[keep], slack[keep]
    c_kind = np.where(c_class == _EDGE_LAUNCH, _K["launch_delay"], _K["sync_wait"]).astype(np.int8)
    c_bound = np.where(c_class == _EDGE_LAUNCH, _B["launch_overhead"], _B["sync"]).astype(np.int8)

    # ---- binding edges: at nodes with cross edges, the latest predecessor's edge weighs the gap
    n = len(t)
    idx = np.arange(n)
    chain_time = np.where(head, 0, t[np.maximum(idx - 1, 0)])
    # a stream's first activity in the window waits for the stream's earlier work (source edge)
    stream_free = np.zeros(n, np.int64)
    stream_free[2 * nh:][0::2] = np.clip(dev["free_ns"].fill_null(w0).to_numpy() - w0, 0, ds)
    chain_time = np.where(head, stream_free, chain_time)
    best = np.full(n, UNREACHED, np.int64)
    np.maximum.at(best, dst, t[src])
    cross_binds = best >= chain_time  # ties go to the dependency
    is_best = t[src] == best[dst]
    first = np.zeros(len(src), bool)
    if len(src):
        cand = np.flatnonzero(is_best & cross_binds[dst])
        _, fi = np.unique(dst[cand], return_index=True)
        first[cand[fi]] = True
    cw = np.zeros(len(src), np.int64)
    cw[first] = slack[first]
    classes = (_EDGE_LAUNCH, _EDGE_SYNC, _EDGE_XSTREAM, _EDGE_THREAD)
    typ = np.array([int(np.median(slack[first & (c_class == c)])) if (first & (c_class == c)).any() else 0
                    for c in classes], np.int64)
    cw[~first] = np.minimum(typ[c_class[~first]], slack[~first])
    gap = (~head) & (w_kind == _K["stream_gap"])
    has_cross = best > UNREACHED
    gap_bind = gap & ~(has_cross & cross_binds)
    typ_gap = int(np.median(w[gap_bind])) if gap_bind.any() else 0
    demote = has_cross & cross_binds & ~head
    w = np.where(demote & gap, np.minimum(typ_gap, t - chain_time), np.where(demote, 0, w))
    base = np.full(n, UNREACHED, np.int64)
    base[head] = np.where(has_cross[head] & cross_binds[head], chain_time[head], t[head])

    sink_pref = -1
    if window_event is not None:
        wr = np.flatnonzero(h_id == window_event)
        if len(wr):
            sink_pref = int(end_node[wr[0]])
    stats = {"host_events": nh, "device_events": nd, "sync_rows": ns, "cross_edges": len(src),
             "dropped_edges": dropped}
    return Graph(rank=rank, step=step, start_ns=w0, end_ns=w1, t=t, head=head, w=w, base=base, w_owner=w_owner,
                 w_kind=w_kind, w_bound=w_bound, src=src, dst=dst, cw=cw, c_owner=c_owner, c_kind=c_kind,
                 c_bound=c_bound, sink_pref=sink_pref,
                 events=events.with_columns(module), parent_row=parent_row, stats=stats)


def sync_frame(events: pl.DataFrame) -> pl.DataFrame:
    """The ``cuda_sync`` rows' awaited stream and the start of the event record they wait on:
    ``rank``, ``event_id``, ``wait_on_stream``, ``record_corr``, ``record_start_ns``.
    """
    s = events.filter(pl.col("cat").cast(pl.String).is_in(["cuda_sync", "xpu_sync"])).select(
        "rank", "event_id",
        pl.col("args").str.json_path_match("$.wait_on_stream").cast(pl.Int64, strict=False).alias("wait_on_stream"),
        pl.col("args").str.json_path_match("$.wait_on_cuda_event_record_corr_id").cast(pl.Int64, strict=False)
        .alias("record_corr"))
    rec = events.filter(kinds.is_runtime() & pl.col("correlation").is_not_null()
                        ).group_by("rank", "correlation").agg(pl.col("start_ns").min().alias("record_start_ns"))
    return s.join(rec, left_on=["rank", "record_corr"], right_on=["rank", "correlation"], how="left")
