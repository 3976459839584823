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
from proftab.calls import CUDA_HIP, EVENT_SYNC, LAUNCH, MEMCPY, MEMSET, STREAM_WAIT, SYNC, any_call
from proftab.exceptions import ProftabError
from proftab.intervals.dag import UNREACHED, chain_heads
from proftab.intervals.tree import nearest_ancestor, row_positions

__all__ = ["BACKWARD_CALLS", "BOUND_BY", "KINDS", "MAX_ROWS", "QUEUE_BLOCK_FACTOR", "SYNC_CALLS", "Graph",
           "build_graph", "build_graphs", "sync_frame", "with_stream_free"]

#: segment kinds (codes are positions)
KINDS = ("cpu_op", "runtime", "sync_wait", "idle", "kernel", "memcpy", "memset", "stream_gap", "launch_delay")
#: what a segment's time is bound by (codes are positions)
BOUND_BY = ("cpu_bound", "gpu_compute_bound", "gpu_communication_bound", "gpu_memcpy_bound", "launch_overhead",
            "sync")
#: host calls that block until device work finishes (`proftab.calls.SYNC`, CUDA's and HIP's)
SYNC_CALLS = SYNC.pattern(CUDA_HIP)
#: host calls that make a stream wait on an event recorded on another stream (`proftab.calls.STREAM_WAIT`)
WAIT_CALLS = STREAM_WAIT.pattern(CUDA_HIP)
_K = {k: i for i, k in enumerate(KINDS)}
_B = {b: i for i, b in enumerate(BOUND_BY)}
#: host ops that wait while autograd's device threads run the backward (the Python frame of
#: ``torch.autograd.backward`` / ``Tensor.backward``: ``<built-in method run_backward of ...>``)
BACKWARD_CALLS = r"\brun_backward\b"
_EDGE_LAUNCH, _EDGE_SYNC, _EDGE_XSTREAM, _EDGE_THREAD = 0, 1, 2, 3
#: most rows (host or device) the selected windows may hold together, unless the trace has more: a
#: window holds the rows inside it, so only windows that overlap can hold more rows than the trace
#: (their shared rows once each). A bound on memory, not on the number of windows
MAX_ROWS = 10_000_000
#: a launch call this many times longer than the median of its name waited for a launch-queue slot
QUEUE_BLOCK_FACTOR = 10


@dataclass(frozen=True)
class Graph:
    """The dependency graphs of one or more windows, held together (numpy arrays; times in ns
    relative to each window's start).

    Node arrays (`t`, `head`, `w`, `base`, `w_owner`, `w_kind`, `w_bound`) are indexed by node;
    the chain edge into node ``i`` comes from ``i - 1`` unless ``head[i]``. Cross-edge arrays
    (`src`, `dst`, `cw`, `c_owner`, `c_kind`, `c_bound`) are indexed by edge.
    ``*_owner`` are rows of `events` (-1: none), the event a weight's time belongs to. Window ``k``
    (row ``k`` of `wins`: ``rank``, ``step``, ``start_ns``, ``end_ns``, ``event_id``) holds nodes
    ``node_off[k]:node_off[k+1]``, events ``event_off[k]:event_off[k+1]`` and cross edges
    ``edge_off[k]:edge_off[k+1]``; no edge joins two windows. `sink_pref` is each window event's
    end node (-1: none).
    """

    wins: pl.DataFrame
    node_off: np.ndarray
    event_off: np.ndarray
    edge_off: np.ndarray
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
    sink_pref: np.ndarray
    events: pl.DataFrame
    parent_row: np.ndarray
    stats: dict[str, Any] = field(default_factory=dict)

    @property
    def n_nodes(self) -> int:
        """Number of nodes."""
        return len(self.t)

    @property
    def n_windows(self) -> int:
        """Number of windows."""
        return self.wins.height

    def _one(self, col: str) -> Any:
        if self.n_windows != 1:
            msg = f"this graph holds {self.n_windows} windows: read `wins[{col!r}]` or take `window(k)`"
            raise ProftabError(msg)
        return self.wins[col][0]

    @property
    def rank(self) -> int:
        """The rank of a one-window graph."""
        return int(self._one("rank"))

    @property
    def step(self) -> int | None:
        """The step of a one-window graph (None: not a ProfilerStep)."""
        s = self._one("step")
        return None if s is None else int(s)

    @property
    def start_ns(self) -> int:
        """The window start of a one-window graph."""
        return int(self._one("start_ns"))

    @property
    def end_ns(self) -> int:
        """The window end of a one-window graph."""
        return int(self._one("end_ns"))

    def window(self, k: int) -> Graph:
        """Window `k` as a graph of its own (array slices; owners and nodes renumbered)."""
        a, b = int(self.node_off[k]), int(self.node_off[k + 1])
        ea, eb = int(self.event_off[k]), int(self.event_off[k + 1])
        ca, cb = int(self.edge_off[k]), int(self.edge_off[k + 1])

        def own(x: np.ndarray) -> np.ndarray:
            return np.where(x >= 0, x - ea, -1)

        sp = int(self.sink_pref[k])
        return Graph(
            wins=self.wins.slice(k, 1), node_off=np.array([0, b - a]), event_off=np.array([0, eb - ea]),
            edge_off=np.array([0, cb - ca]), t=self.t[a:b], head=self.head[a:b], w=self.w[a:b],
            base=self.base[a:b], w_owner=own(self.w_owner[a:b]), w_kind=self.w_kind[a:b],
            w_bound=self.w_bound[a:b], src=self.src[ca:cb] - a, dst=self.dst[ca:cb] - a, cw=self.cw[ca:cb],
            c_owner=own(self.c_owner[ca:cb]), c_kind=self.c_kind[ca:cb], c_bound=self.c_bound[ca:cb],
            sink_pref=np.array([sp - a if sp >= 0 else -1]), events=self.events.slice(ea, eb - ea),
            parent_row=own(self.parent_row[ea:eb]),
            stats={key: int(v[k]) for key, v in self.stats.get("per_window", {}).items()})

    def split(self) -> list[Graph]:
        """One graph per window (`window`): O(windows) slices."""
        return [self.window(k) for k in range(self.n_windows)]


def _device_bound(kind: pl.Expr, category: pl.Expr) -> pl.Expr:
    return (pl.when(kind.is_in(["memcpy", "memset"])).then(pl.lit(_B["gpu_memcpy_bound"]))
            .when(category == "communication").then(pl.lit(_B["gpu_communication_bound"]))
            .otherwise(pl.lit(_B["gpu_compute_bound"]))).cast(pl.Int8)


def _host_rows(nested: pl.DataFrame) -> pl.DataFrame:
    """The host ops of each window (`nested` rows already taken per window: ``win``, ``_w0``, ``_w1``)."""
    end = pl.col("end_ns") - pl.col("overrun_ns").fill_null(0)
    rt = kinds.is_runtime()
    sync = rt & SYNC.expr(apis=CUDA_HIP)
    return (
        nested.filter(kinds.is_host_op() & (pl.col("ph").cast(pl.String) == "X")
                      & (pl.col("start_ns") >= pl.col("_w0")) & (end <= pl.col("_w1")))
        .with_columns(end_eff=pl.max_horizontal(end, pl.col("start_ns")))
        .sort("win", "pid", "tid", "start_ns", pl.col("end_eff"), "event_id",
              descending=[False, False, False, False, True, False])
        .with_columns(
            kind=pl.when(sync).then(pl.lit("sync_wait")).when(rt).then(pl.lit("runtime"))
            .otherwise(pl.lit("cpu_op")),
            bound=pl.when(sync).then(pl.lit(_B["sync"]))
            .when(rt & any_call(LAUNCH, MEMCPY, MEMSET)).then(pl.lit(_B["launch_overhead"]))
            .otherwise(pl.lit(_B["cpu_bound"])).cast(pl.Int8),
            is_sync=sync, category=pl.lit(None, pl.String))
    )


def _last_before(work: pl.DataFrame, queries: pl.DataFrame, on: str, *, forward: bool = False) -> pl.DataFrame:
    """For each query (`win`, `stream`, `at`), the work row of its window on that stream whose `on`
    time is the last strictly before `at` (or, `forward`, the first strictly after): adds `row`.
    """
    w = work.select("win", "stream", pl.col(on).alias("at"), "row").drop_nulls("at").sort("at")
    q = queries.with_row_index("_q").sort("at")
    out = q.join_asof(w, on="at", by=["win", "stream"], strategy="forward" if forward else "backward",
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


def _thread_join(host: pl.DataFrame, track: np.ndarray, hs: np.ndarray,
                 he: np.ndarray) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """The fork and join edges of `BACKWARD_CALLS` ops as (caller row, worker row) pairs.

    A worker thread is a host thread holding an ``autograd::engine::evaluate_function:`` op; for each
    caller and each worker thread of its window other than the caller's, the fork pairs the caller
    with the first op starting inside its span on that thread, the join with the last op ending
    inside it. Two as-of joins over the rows sorted by time: O(n log n).
    """
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
    rows = np.flatnonzero(np.isin(track, workers))
    w = pl.DataFrame({"wrow": rows, "wtrack": track[rows], "s": hs[rows], "e": he[rows]})
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


class _Sliced:
    """A frame sorted by (rank, `on`), its rows taken per window by binary search."""

    def __init__(self, frame: pl.DataFrame, on: str) -> None:
        self.frame = frame.sort("rank", on, "event_id")  # event_id: ties in one order, whatever the window
        self.rank = self.frame["rank"].to_numpy()
        self.at = self.frame[on].fill_null(np.iinfo(np.int64).min).to_numpy()

    def take(self, rank: np.ndarray, lo: np.ndarray, hi: np.ndarray | None, what: str) -> pl.DataFrame:
        """Rows of each window ``k`` (`rank[k]`, `on` in [lo[k], hi[k]]; hi None: no upper bound),
        concatenated in window order with its index ``win``. O(windows log n + rows); a loop runs
        per rank, never per window. More rows in all than the frame's and `MAX_ROWS` (only windows
        that overlap, which hold their shared rows once each, can reach it) is a `ProftabError`.
        """
        k = len(rank)
        i = np.zeros(k, np.int64)
        j = np.zeros(k, np.int64)
        for r in np.unique(rank):
            m = rank == r
            a, b = int(np.searchsorted(self.rank, r, "left")), int(np.searchsorted(self.rank, r, "right"))
            at = self.at[a:b]
            i[m] = a + np.searchsorted(at, lo[m], "left")
            j[m] = b if hi is None else a + np.searchsorted(at, hi[m], "right")
        n = np.maximum(j - i, 0)
        total = int(n.sum())
        limit = max(MAX_ROWS, self.frame.height)
        if total > limit:
            msg = (f"the {k:,} selected windows hold {total:,} {what} rows together (the trace has "
                   f"{self.frame.height:,}: windows that overlap hold their shared rows once each); the critical "
                   f"path takes at most {limit:,}: select fewer or shorter windows (step= / --step, rank= / --rank, "
                   "a window)")
            raise ProftabError(msg)
        win = np.repeat(np.arange(k, dtype=np.int64), n)
        idx = np.repeat(i - (np.cumsum(n) - n), n) + np.arange(total, dtype=np.int64)
        return self.frame[pl.Series(idx)].with_columns(win=pl.Series(win, dtype=pl.Int64))


def _per_window_median(win: np.ndarray, key: np.ndarray, value: np.ndarray, k: int, n_keys: int) -> np.ndarray:
    """``out[w, c]``: int(median) of `value` per (window, key), 0 where none (a group-by: O(n log n))."""
    out = np.zeros((k, n_keys), np.int64)
    if len(value):
        m = pl.DataFrame({"w": win, "c": key, "v": value}).group_by("w", "c").agg(pl.col("v").median())
        out[m["w"].to_numpy(), m["c"].to_numpy()] = m["v"].to_numpy().astype(np.int64)
    return out


def build_graph(nested: pl.DataFrame, activities: pl.DataFrame, sync_args: pl.DataFrame, *, rank: int,
                start_ns: int, end_ns: int, step: int | None = None, window_event: int | None = None,
                tail: bool = False) -> Graph:
    """The dependency graph of `rank` over ``[start_ns, end_ns]`` (`build_graphs` of one window)."""
    wins = pl.DataFrame({"rank": [rank], "step": [step], "start_ns": [int(start_ns)], "end_ns": [int(end_ns)],
                         "event_id": [window_event]},
                        schema={"rank": pl.Int32, "step": pl.Int64, "start_ns": pl.Int64, "end_ns": pl.Int64,
                                "event_id": pl.Int64})
    return build_graphs(nested, activities, sync_args, wins, tail=tail)


def build_graphs(nested: pl.DataFrame, activities: pl.DataFrame, sync_args: pl.DataFrame, wins: pl.DataFrame, *,
                 tail: bool = False) -> Graph:
    """The dependency graphs of every window of `wins` (``rank``, ``step``, ``start_ns``, ``end_ns``,
    ``event_id``), built together as one `Graph`.

    Parameters
    ----------
    nested
        ``Trace.nested`` (event_id, rank, pid, tid, cat, name, ph, start_ns, end_ns, overrun_ns,
        parent_id, depth).
    activities
        ``Trace.device.activities()`` (with `with_stream_free`'s ``free_ns``, or it is added).
    sync_args
        The ``cuda_sync`` rows' ``rank``, ``event_id``, ``wait_on_stream``, ``record_corr``, and the
        host runtime rows' ``rank``, ``correlation``, ``start_ns`` as ``record_start_ns`` (joined on
        ``record_corr``): see `sync_frame`.
    wins
        The windows (`proftab.critical_path.windows`); a window's ``event_id`` (its ProfilerStep or
        annotation) ends its path when that is the latest node.
    tail
        Also take the device work launched inside each window that ends after it (the step's GPU
        tail, as HTA does): the path may then end after the window.

    Complexity: every window's rows are taken by binary search over the frames sorted once
    (`_Sliced.take`), then one vectorized pass (sorts, as-of joins and group-bys keyed by window)
    builds all graphs: O((n + R) log (n + R)) for n rows in the frames and R rows over all windows
    (R = the rows inside the windows, counted once per window that holds them), with no Python loop
    per window or per event (the loops run per rank).
    """
    k = wins.height
    w_rank = wins["rank"].to_numpy()
    w_lo = wins["start_ns"].to_numpy().astype(np.int64)
    w_hi = wins["end_ns"].to_numpy().astype(np.int64)
    if "free_ns" not in activities.columns:
        activities = with_stream_free(activities)
    bounds = pl.DataFrame({"win": np.arange(k, dtype=np.int64), "_w0": w_lo, "_w1": w_hi})

    def with_bounds(df: pl.DataFrame) -> pl.DataFrame:
        return df.join(bounds, on="win", how="left", maintain_order="left")

    host = _host_rows(with_bounds(_Sliced(nested, "start_ns").take(w_rank, w_lo, w_hi, "host")))
    work_kind = pl.col("kind").cast(pl.String).is_in(["kernel", "memcpy", "memset"])
    by_start = _Sliced(activities, "start_ns")
    in_win = with_bounds(by_start.take(w_rank, w_lo, w_hi, "device"))
    if tail:  # the work each window launched, wherever it ends (and unlaunched work inside the window)
        launched = with_bounds(_Sliced(activities.filter(pl.col("launch_start_ns").is_not_null()), "launch_start_ns")
                               .take(w_rank, w_lo, w_hi, "device")).filter(
            work_kind & (pl.col("start_ns") >= pl.col("_w0")))
        # unlaunched work (its launch not in the trace: NCCL kernels of a ROCm trace) and collectives
        # launched earlier, which the window's work may wait on, up to the tail's end
        tail_end = w_hi.copy()
        np.maximum.at(tail_end, launched["win"].to_numpy(), launched["end_ns"].to_numpy())
        unl = by_start.take(w_rank, w_lo, tail_end, "device")
        unl = with_bounds(unl).with_columns(_te=pl.Series(tail_end[unl["win"].to_numpy()], dtype=pl.Int64)).filter(
            work_kind & (pl.col("launch_start_ns").is_null() | (pl.col("category") == "communication"))
            & (pl.col("end_ns") <= pl.col("_te"))).drop("_te")
        dev_rows = pl.concat([launched, unl]).unique(["win", "event_id"], keep="first", maintain_order=True)
    else:
        dev_rows = in_win.filter(work_kind & (pl.col("end_ns") <= pl.col("_w1")))
    dev = (dev_rows.sort("win", "device", "stream", "start_ns", "end_ns", "event_id")
           .with_columns(bound=_device_bound(pl.col("kind").cast(pl.String), pl.col("category")),
                         kind=pl.col("kind").cast(pl.String)))
    syncs = in_win.filter((pl.col("kind").cast(pl.String) == "sync") & (pl.col("end_ns") <= pl.col("_w1")))
    syncs = syncs.join(sync_args, on=["rank", "event_id"], how="left", maintain_order="left")
    nh, nd, ns = host.height, dev.height, syncs.height
    hwin = host["win"].to_numpy()
    dwin = dev["win"].to_numpy()
    swin = syncs["win"].to_numpy()
    nh_k = np.bincount(hwin, minlength=k)
    nd_k = np.bincount(dwin, minlength=k)
    ns_k = np.bincount(swin, minlength=k)

    # ---- the events table: host rows, then device rows, then sync rows (per window, below)
    cols = ["event_id", "name", "cat", "kind", "bound", "category"]
    events = pl.concat([
        host.select(pl.col("event_id"), "name", pl.col("cat").cast(pl.String), "kind", "bound", "category"),
        dev.select(pl.col("event_id"), "name", pl.col("cat").cast(pl.String), "kind", "bound", "category"),
        syncs.select(pl.col("event_id"), "name", pl.col("cat").cast(pl.String), pl.lit("sync_wait").alias("kind"),
                     pl.lit(_B["sync"], pl.Int8).alias("bound"), pl.col("category")),
    ]).select(cols)
    h_id = host["event_id"].to_numpy()
    parent_row = row_positions(hwin, h_id, hwin, host["parent_id"].fill_null(-1).to_numpy())
    parent_row = np.concatenate([parent_row, np.full(nd + ns, -1, np.int64)])

    # ---- host chains: points sorted by (window and thread, time, ends before starts, depth)
    h_w0 = w_lo[hwin]
    hs = host["start_ns"].to_numpy() - h_w0
    he = host["end_eff"].to_numpy() - h_w0
    depth = host["depth"].to_numpy().astype(np.int64)
    track = host.select(pl.struct("win", "pid", "tid").rank("dense")).to_series().to_numpy().astype(np.int64)
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

    # ---- device chains: start, end, next start ... per (window, device, stream)
    d_w0 = w_lo[dwin]
    ds = dev["start_ns"].to_numpy() - d_w0
    de = dev["end_ns"].to_numpy() - d_w0
    d_track = dev.select(pl.struct("win", "device", "stream").rank("dense")).to_series().to_numpy().astype(np.int64)
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
    free = dev["free_ns"]
    free_rel = np.where(free.is_null().to_numpy(), d_w0, free.fill_null(0).to_numpy()) - d_w0
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

    def h_rows_of(win: np.ndarray, ids: np.ndarray) -> np.ndarray:
        return row_positions(hwin, h_id, win, ids)

    dev_i = dev.with_row_index("row").with_columns(pl.col("row").cast(pl.Int64))
    # launch -> activity
    lrow = h_rows_of(dwin, dev["launch_id"].fill_null(-1).to_numpy())
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
    mem = ok & np.isin(dev["kind"].to_numpy(), kinds.COPY_KINDS) & ~dev.select(
        LAUNCH.expr("launch_name")).to_series().to_numpy()
    e_src.append(dev_end[mem])
    e_dst.append(end_node[lrow[mem]])
    e_own.append(lrow[mem])
    e_cls.append(np.full(int(mem.sum()), _EDGE_SYNC))
    # host sync calls -> last work on the awaited streams
    work = dev_i.select("win", "device", "stream", "row", pl.col("launch_start_ns").fill_null(pl.col("start_ns")))
    sync_host = syncs.with_columns(hrow=pl.Series(h_rows_of(swin, syncs["launch_id"].fill_null(-1).to_numpy()),
                                                  dtype=pl.Int64)).filter(pl.col("hrow") >= 0)
    h_names = host["name"].to_numpy()
    h_start = host["start_ns"].to_numpy()
    sync_host = sync_host.with_columns(
        call_start=pl.Series(h_start[sync_host["hrow"].to_numpy()], dtype=pl.Int64),
        call_name=pl.Series(h_names[sync_host["hrow"].to_numpy()], dtype=pl.String))
    kind_name = pl.col("name")
    q_ctx = _device_wide(sync_host.filter(kind_name == "Context Sync").select("hrow", "win", "device", "call_start"),
                         work, track, by_device=True)
    q_str = sync_host.filter(kind_name == "Stream Sync").select("hrow", "stream", "call_start")
    ev_sync = sync_host.filter((kind_name == "Event Sync") & (pl.col("wait_on_stream") >= 0)
                               & EVENT_SYNC.expr("call_name"))
    q_ev = ev_sync.select("hrow", pl.col("wait_on_stream").alias("stream"),
                          pl.col("record_start_ns").fill_null(pl.col("call_start")).alias("call_start"))
    # sync calls without a cuda_sync row: every stream of the rank
    has_row = np.zeros(nh, bool)
    has_row[sync_host["hrow"].to_numpy()] = True
    bare = host.with_row_index("hrow").with_columns(pl.col("hrow").cast(pl.Int64)).filter(
        pl.col("is_sync") & pl.Series(~has_row) & ~EVENT_SYNC.expr())
    q_bare = _device_wide(bare.select("hrow", "win", pl.col("start_ns").alias("call_start")), work, track,
                          by_device=False)
    q = pl.concat([x.select("hrow", "stream", pl.col("call_start").alias("at")) for x in (q_ctx, q_str, q_ev, q_bare)])
    q = q.with_columns(win=pl.Series(hwin[q["hrow"].to_numpy()], dtype=pl.Int64))
    hit = _last_before(work.select("win", "stream", "row", "launch_start_ns"), q, "launch_start_ns")
    hr = hit["hrow"].to_numpy()
    e_src.append(dev_end[hit["row"].to_numpy()])
    e_dst.append(end_node[hr])
    e_own.append(hr)
    e_cls.append(np.full(len(hr), _EDGE_SYNC))
    # a launch call far longer than its median (in its window) blocks on a full launch queue: it
    # returns when some device work completes (the last one that ends during the call)
    if nh and nd:
        calls = host.with_row_index("hrow").with_columns(pl.col("hrow").cast(pl.Int64)).filter(
            LAUNCH.expr() & (pl.col("kind") == "runtime"))
        took = pl.col("end_eff") - pl.col("start_ns")
        calls = calls.filter(took > QUEUE_BLOCK_FACTOR * took.median().over("win", "name"))
        ends = dev_i.select("win", pl.col("end_ns").alias("at"), "row").sort("at")
        qb = calls.select("hrow", "win", "start_ns", pl.col("end_eff").alias("at")).sort("at").join_asof(
            ends, on="at", by="win", strategy="backward", check_sortedness=False).filter(
            pl.col("row").is_not_null() & (pl.col("at") >= pl.col("start_ns")))
        e_src.append(dev_end[qb["row"].to_numpy()])
        e_dst.append(end_node[qb["hrow"].to_numpy()])
        e_own.append(qb["hrow"].to_numpy())
        e_cls.append(np.full(qb.height, _EDGE_SYNC))
    # Stream Wait Event: last work on the recorded stream -> first work launched after the wait call
    swe = sync_host.filter((kind_name == "Stream Wait Event") & (pl.col("wait_on_stream") >= 0))
    srow_base = nh + nd
    sync_pos = syncs.with_row_index("sp").select("win", "event_id", pl.col("sp").cast(pl.Int64))
    swe = swe.join(sync_pos, on=["win", "event_id"])
    wk = work.select("win", "stream", "row", "launch_start_ns")
    a = _last_before(wk, swe.select("sp", "win", pl.col("wait_on_stream").alias("stream"),
                                    pl.col("record_start_ns").fill_null(pl.col("call_start")).alias("at")),
                     "launch_start_ns")
    b = _last_before(wk, swe.select("sp", "win", "stream", pl.col("call_start").alias("at")), "launch_start_ns",
                     forward=True)
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
        by_launch = dev_i.select("row", "win", "device", "start_ns", "free_ns",
                                 at=pl.col("launch_start_ns")).drop_nulls("at").sort("at")
        waiter = waits.select("hrow", "win", at=pl.col("start_ns")).sort("at").join_asof(
            by_launch, on="at", by="win", strategy="forward", allow_exact_matches=False,
            check_sortedness=False).drop_nulls("row")
        ends = dev_i.select(pl.col("row").alias("src"), "win", "device", "end_ns", at=pl.col("end_ns")).sort("at")
        awaited = waiter.select("hrow", "row", "win", "device", "free_ns", at=pl.col("start_ns")).sort("at").join_asof(
            ends, on="at", by=["win", "device"], strategy="backward", check_sortedness=False)
        awaited = awaited.with_columns(_w0=pl.Series(w_lo[awaited["win"].to_numpy()], dtype=pl.Int64)).filter(
            pl.col("src").is_not_null() & (pl.col("end_ns") > pl.col("free_ns").fill_null(pl.col("_w0"))))
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
        ends = comm.select(pl.col("row").alias("src"), "win", "device", pl.col("stream").alias("src_stream"),
                           "end_ns", at=pl.col("end_ns")).sort("at")
        held = dev_i.filter(pl.col("category").fill_null("") != "communication").select(
            "row", "win", "device", "stream", "free_ns", "_w0", at=pl.col("start_ns")).sort("at").join_asof(
            ends, on="at", by=["win", "device"], strategy="backward", check_sortedness=False).filter(
            pl.col("src").is_not_null() & (pl.col("src_stream") != pl.col("stream"))
            & (pl.col("end_ns") > pl.col("free_ns").fill_null(pl.col("_w0"))))
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
    dropped_dst = dst[~keep]
    src, dst, c_owner, c_class, slack = src[keep], dst[keep], c_owner[keep], c_class[keep], slack[keep]
    c_kind = np.where(c_class == _EDGE_LAUNCH, _K["launch_delay"], _K["sync_wait"]).astype(np.int8)
    c_bound = np.where(c_class == _EDGE_LAUNCH, _B["launch_overhead"], _B["sync"]).astype(np.int8)

    # ---- binding edges: at nodes with cross edges, the latest predecessor's edge weighs the gap
    n = len(t)
    node_win = np.concatenate([hwin[p_row], np.repeat(dwin, 2)]).astype(np.int64)
    idx = np.arange(n)
    chain_time = np.where(head, 0, t[np.maximum(idx - 1, 0)])
    # a stream's first activity in the window waits for the stream's earlier work (source edge)
    stream_free = np.zeros(n, np.int64)
    stream_free[2 * nh:][0::2] = np.clip(free_rel, 0, ds)
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
    e_win = node_win[dst]
    typ = _per_window_median(e_win[first], c_class[first], slack[first], k, 4)
    cw[~first] = np.minimum(typ[e_win[~first], c_class[~first]], slack[~first])
    gap = (~head) & (w_kind == _K["stream_gap"])
    has_cross = best > UNREACHED
    gap_bind = gap & ~(has_cross & cross_binds)
    typ_gap = _per_window_median(node_win[gap_bind], np.zeros(int(gap_bind.sum()), np.int64), w[gap_bind], k, 1)[:, 0]
    demote = has_cross & cross_binds & ~head
    w = np.where(demote & gap, np.minimum(typ_gap[node_win], t - chain_time), np.where(demote, 0, w))
    base = np.full(n, UNREACHED, np.int64)
    base[head] = np.where(has_cross[head] & cross_binds[head], chain_time[head], t[head])

    # ---- per window contiguous: nodes (host points, then device points), events (host, device,
    # sync rows) and cross edges in window order
    node_off = np.zeros(k + 1, np.int64)
    node_off[1:] = np.cumsum(2 * nh_k + 2 * nd_k)
    h_off = np.cumsum(nh_k) - nh_k
    d_off = np.cumsum(nd_k) - nd_k
    s_off = np.cumsum(ns_k) - ns_k
    pw = hwin[p_row]  # host points are sorted by window first
    node_pos = np.concatenate([
        node_off[:-1][pw] + np.arange(2 * nh) - 2 * h_off[pw],
        node_off[:-1][np.repeat(dwin, 2)] + 2 * nh_k[np.repeat(dwin, 2)] + np.arange(2 * nd) - 2 * d_off[
            np.repeat(dwin, 2)]]).astype(np.int64)
    event_off = np.zeros(k + 1, np.int64)
    event_off[1:] = np.cumsum(nh_k + nd_k + ns_k)
    event_pos = np.concatenate([
        event_off[:-1][hwin] + np.arange(nh) - h_off[hwin],
        event_off[:-1][dwin] + nh_k[dwin] + np.arange(nd) - d_off[dwin],
        event_off[:-1][swin] + nh_k[swin] + nd_k[swin] + np.arange(ns) - s_off[swin]]).astype(np.int64)

    def nodes_in_order(a: np.ndarray) -> np.ndarray:
        out = np.empty_like(a)
        out[node_pos] = a
        return out

    def owner(a: np.ndarray) -> np.ndarray:
        return np.where(a >= 0, event_pos[np.maximum(a, 0)] if len(event_pos) else -1, -1)

    inv = np.empty(len(event_pos), np.int64)
    inv[event_pos] = np.arange(len(event_pos))
    events = events.with_columns(module)[pl.Series(inv)]
    parent = np.empty(len(event_pos), np.int64)
    parent[event_pos] = owner(parent_row)
    e_order = np.argsort(e_win, kind="stable")
    edge_off = np.zeros(k + 1, np.int64)
    edge_off[1:] = np.cumsum(np.bincount(e_win, minlength=k))
    sink_pref = np.full(k, -1, np.int64)
    w_event = wins["event_id"].fill_null(-1).to_numpy()
    wr = h_rows_of(np.arange(k, dtype=np.int64), w_event)
    sink_pref[wr >= 0] = node_pos[end_node[wr[wr >= 0]]]
    per_window = {"host_events": nh_k, "device_events": nd_k, "sync_rows": ns_k, "cross_edges": np.diff(edge_off),
                  "dropped_edges": np.bincount(node_win[dropped_dst], minlength=k)}
    stats = {key: int(v.sum()) for key, v in per_window.items()} | {"windows": k, "per_window": per_window}
    return Graph(wins=wins.select("rank", "step", "start_ns", "end_ns", "event_id"), node_off=node_off,
                 event_off=event_off, edge_off=edge_off, t=nodes_in_order(t), head=nodes_in_order(head),
                 w=nodes_in_order(w), base=nodes_in_order(base), w_owner=nodes_in_order(owner(w_owner)),
                 w_kind=nodes_in_order(w_kind), w_bound=nodes_in_order(w_bound), src=node_pos[src[e_order]],
                 dst=node_pos[dst[e_order]], cw=cw[e_order], c_owner=owner(c_owner)[e_order],
                 c_kind=c_kind[e_order], c_bound=c_bound[e_order], sink_pref=sink_pref, events=events,
                 parent_row=parent, stats=stats)


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
