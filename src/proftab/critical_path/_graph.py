"""The dependency graph of one rank's window: CPU threads, GPU streams, launches and syncs.

Nodes are the start and end points of the host ops (every host event but profiler spans) and of
the device work (kernels, memcpy, memset) that lie wholly inside the window. Edges: the chains of
each host thread and GPU stream (`_chains`: thread order, stream order) and the cross edges between
them (`_edges`: launch, sync, launch queue, thread join, cross-stream). Weights reproduce the trace
(`_weights`): the longest path over the observed weights puts every node at its observed time, and a
`what_if` with other weights is a replay.

`build_graphs` runs the stages in order over every window at once: the rows of each window
(`_windows.window_rows`), the events table, the chains, the cross edges, the weights, and the
layout that makes each window's nodes, events and edges contiguous (`Graph`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import polars as pl

from proftab import kinds
from proftab.critical_path._chains import DeviceChains, HostChains, device_chains, host_chains, with_stream_free
from proftab.critical_path._edges import cross_edges, sync_frame
from proftab.critical_path._segments import (
    BACKWARD_CALLS,
    BOUND_BY,
    BOUND_CODE,
    KIND_CODE,
    KINDS,
    QUEUE_BLOCK_FACTOR,
    SYNC_CALLS,
)
from proftab.critical_path._weights import Cross, Nodes, binding_weights, forward_edges
from proftab.critical_path._windows import MAX_ROWS, WindowRows, window_rows
from proftab.exceptions import ProftabError
from proftab.intervals.dag import UNREACHED
from proftab.intervals.tree import nearest_ancestor, row_positions

__all__ = ["BACKWARD_CALLS", "BOUND_BY", "KINDS", "MAX_ROWS", "QUEUE_BLOCK_FACTOR", "SYNC_CALLS", "Graph",
           "build_graph", "build_graphs", "sync_frame", "with_stream_free"]


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
    (`_windows.window_rows`), then one vectorized pass (sorts, as-of joins and group-bys keyed by window)
    builds all graphs: O((n + R) log (n + R)) for n rows in the frames and R rows over all windows
    (R = the rows inside the windows, counted once per window that holds them), with no Python loop
    per window or per event (the loops run per rank).
    """
    if "free_ns" not in activities.columns:
        activities = with_stream_free(activities)
    rows = window_rows(nested, activities, sync_args, wins, tail=tail)
    events, parent_row = _events_table(rows)
    hc = host_chains(rows, parent_row)
    dc = device_chains(rows)
    launch_row = rows.host_row(rows.dwin, rows.dev["launch_id"].fill_null(-1).to_numpy())
    events = events.with_columns(_event_modules(rows, parent_row, launch_row))
    nodes = _nodes(rows, hc, dc)
    edges, slack, dropped_dst = forward_edges(cross_edges(rows, hc, dc, launch_row), nodes.t)
    nodes, cross = binding_weights(nodes, dc, edges, slack, dropped_dst, rows.k)
    return _layout(rows, events, parent_row, hc, nodes, cross)


def _events_table(rows: WindowRows) -> tuple[pl.DataFrame, np.ndarray]:
    """The events of the graph (host rows, then device rows, then sync rows: ``event_id``, ``name``,
    ``cat``, ``kind``, ``bound``, ``category``) and each one's parent row (host rows only, else -1)."""
    host, dev, syncs = rows.host, rows.dev, rows.syncs
    events = pl.concat([
        host.select(pl.col("event_id"), "name", pl.col("cat").cast(pl.String), "kind", "bound", "category"),
        dev.select(pl.col("event_id"), "name", pl.col("cat").cast(pl.String), "kind", "bound", "category"),
        syncs.select(pl.col("event_id"), "name", pl.col("cat").cast(pl.String), pl.lit("sync_wait").alias("kind"),
                     pl.lit(BOUND_CODE["sync"], pl.Int8).alias("bound"), pl.col("category")),
    ]).select(["event_id", "name", "cat", "kind", "bound", "category"])
    parent_row = row_positions(rows.hwin, host["event_id"].to_numpy(), rows.hwin,
                               host["parent_id"].fill_null(-1).to_numpy())
    return events, np.concatenate([parent_row, np.full(dev.height + syncs.height, -1, np.int64)])


def _event_modules(rows: WindowRows, parent_row: np.ndarray, launch_row: np.ndarray) -> pl.Series:
    """The nn.Module each event runs in: the nearest `nn.Module: X` python_function at or above a host op,
    the launching op's for device work, null for sync rows (in `_events_table` order)."""
    host, nh = rows.host, rows.host.height
    is_mod = host["name"].str.starts_with(kinds.MODULE_PREFIX).to_numpy()
    hrows = np.arange(nh)
    anc = np.where(is_mod, hrows, nearest_ancestor(parent_row[:nh], hrows, is_mod)) if nh else hrows
    owner_mod = np.concatenate([anc, np.where(launch_row >= 0, anc[np.maximum(launch_row, 0)] if nh else -1, -1),
                                np.full(rows.syncs.height, -1)])
    mod_names = host["name"].str.strip_prefix(kinds.MODULE_PREFIX)
    module = (mod_names.gather(pl.Series(np.maximum(owner_mod, 0))) if nh
              else pl.Series([None] * len(owner_mod), dtype=pl.String))
    return pl.select(pl.when(pl.Series(owner_mod >= 0)).then(module)).to_series().alias("module")


def _nodes(rows: WindowRows, hc: HostChains, dc: DeviceChains) -> Nodes:
    """The host points, then the device points; a chain head's edge is idle and owned by no event."""
    head = np.concatenate([hc.head, dc.head])
    owner = np.concatenate([hc.owner, dc.owner]).astype(np.int64)
    kind = np.concatenate([hc.kind, dc.kind]).astype(np.int8)
    owner[head] = -1
    kind[head] = KIND_CODE["idle"]
    return Nodes(t=np.concatenate([hc.t, dc.t]).astype(np.int64), head=head,
                 w=np.concatenate([hc.w, dc.w]).astype(np.int64), owner=owner, kind=kind,
                 bound=np.concatenate([hc.bound, dc.bound]).astype(np.int8),
                 win=np.concatenate([rows.hwin[hc.row], np.repeat(rows.dwin, 2)]).astype(np.int64),
                 base=np.full(len(head), UNREACHED, np.int64))


def _layout(rows: WindowRows, events: pl.DataFrame, parent_row: np.ndarray, hc: HostChains, nodes: Nodes,
            cross: Cross) -> Graph:
    """The `Graph`, each window contiguous: its nodes (host points, then device points), its events (host,
    device, sync rows) and its cross edges, in window order; owners renumbered to the new event order."""
    k, hwin, dwin, swin = rows.k, rows.hwin, rows.dwin, rows.swin
    nh, nd, ns = rows.host.height, rows.dev.height, rows.syncs.height
    nh_k, nd_k, ns_k = (np.bincount(x, minlength=k) for x in (hwin, dwin, swin))
    node_off = np.zeros(k + 1, np.int64)
    node_off[1:] = np.cumsum(2 * nh_k + 2 * nd_k)
    h_off = np.cumsum(nh_k) - nh_k
    d_off = np.cumsum(nd_k) - nd_k
    s_off = np.cumsum(ns_k) - ns_k
    pw = hwin[hc.row]  # host points are sorted by window first
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
    parent = np.empty(len(event_pos), np.int64)
    parent[event_pos] = owner(parent_row)
    e_win = nodes.win[cross.edges.dst]
    e_order = np.argsort(e_win, kind="stable")
    edge_off = np.zeros(k + 1, np.int64)
    edge_off[1:] = np.cumsum(np.bincount(e_win, minlength=k))
    sink_pref = np.full(k, -1, np.int64)
    wr = rows.host_row(np.arange(k, dtype=np.int64), rows.wins["event_id"].fill_null(-1).to_numpy())
    sink_pref[wr >= 0] = node_pos[hc.end_node[wr[wr >= 0]]]
    per_window = {"host_events": nh_k, "device_events": nd_k, "sync_rows": ns_k, "cross_edges": np.diff(edge_off),
                  "dropped_edges": np.bincount(nodes.win[cross.dropped_dst], minlength=k)}
    stats = {key: int(v.sum()) for key, v in per_window.items()} | {"windows": k, "per_window": per_window}
    ed = cross.edges
    return Graph(wins=rows.wins.select("rank", "step", "start_ns", "end_ns", "event_id"), node_off=node_off,
                 event_off=event_off, edge_off=edge_off, t=nodes_in_order(nodes.t), head=nodes_in_order(nodes.head),
                 w=nodes_in_order(nodes.w), base=nodes_in_order(nodes.base), w_owner=nodes_in_order(owner(nodes.owner)),
                 w_kind=nodes_in_order(nodes.kind), w_bound=nodes_in_order(nodes.bound), src=node_pos[ed.src[e_order]],
                 dst=node_pos[ed.dst[e_order]], cw=cross.w[e_order], c_owner=owner(ed.owner)[e_order],
                 c_kind=cross.kind[e_order], c_bound=cross.bound[e_order], sink_pref=sink_pref,
                 events=events[pl.Series(inv)], parent_row=parent, stats=stats)
