"""The weights of the dependency graph: chosen so that the longest path reproduces the trace.

At a node with several incoming edges the one from the latest predecessor (the *binding* edge)
weighs the observed gap; the others weigh the smaller of that edge kind's median binding weight
(per window) and their slack. So the longest path over the observed weights puts every node at its
observed time, and a `what_if` with other weights is a replay.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import numpy as np
import polars as pl

from proftab.critical_path._edges import Edges
from proftab.critical_path._segments import BOUND_CODE, EDGE_LAUNCH, KIND_CODE, N_EDGE_CLASSES
from proftab.intervals.dag import UNREACHED

if TYPE_CHECKING:
    from proftab.critical_path._chains import DeviceChains

__all__ = ["Cross", "Nodes", "binding_weights", "forward_edges"]


class Nodes(NamedTuple):
    """The node arrays (host points, then device points): time, chain head, chain edge weight, its owner
    row, kind and bound codes, the node's window; `base`: the source weight of a chain head."""

    t: np.ndarray
    head: np.ndarray
    w: np.ndarray
    owner: np.ndarray
    kind: np.ndarray
    bound: np.ndarray
    win: np.ndarray
    base: np.ndarray


class Cross(NamedTuple):
    """The cross edges kept (no edge back in time), their weights, kind and bound codes, and the
    destination nodes of the edges dropped."""

    edges: Edges
    w: np.ndarray
    kind: np.ndarray
    bound: np.ndarray
    dropped_dst: np.ndarray


def forward_edges(edges: Edges, t: np.ndarray) -> tuple[Edges, np.ndarray, np.ndarray]:
    """The edges whose source is no later than their destination (typed), their slack, and the
    destinations of the others (counted as dropped)."""
    src = edges.src.astype(np.int64)
    dst = edges.dst.astype(np.int64)
    owner = edges.owner.astype(np.int64)
    cls = edges.cls.astype(np.int8)
    slack = t[dst] - t[src]
    keep = slack >= 0
    return Edges(src[keep], dst[keep], owner[keep], cls[keep]), slack[keep], dst[~keep]


def _per_window_median(win: np.ndarray, key: np.ndarray, value: np.ndarray, k: int, n_keys: int) -> np.ndarray:
    """``out[w, c]``: int(median) of `value` per (window, key), 0 where none (a group-by: O(n log n))."""
    out = np.zeros((k, n_keys), np.int64)
    if len(value):
        m = pl.DataFrame({"w": win, "c": key, "v": value}).group_by("w", "c").agg(pl.col("v").median())
        out[m["w"].to_numpy(), m["c"].to_numpy()] = m["v"].to_numpy().astype(np.int64)
    return out


def binding_weights(nodes: Nodes, dc: DeviceChains, edges: Edges, slack: np.ndarray, dropped_dst: np.ndarray,
                    k: int) -> tuple[Nodes, Cross]:
    """`nodes` with their chain weights and chain heads' source weights (`base`) demoted where a cross
    edge binds, and the cross edges' weights; `k` windows.

    A stream's first activity in a window waits for the stream's earlier work (its source edge). A
    demoted stream gap weighs the smaller of its window's median binding gap and its slack.
    """
    t, head, w, w_kind, node_win = nodes.t, nodes.head, nodes.w, nodes.kind, nodes.win
    src, dst, c_class = edges.src, edges.dst, edges.cls
    n = len(t)
    n_host_points = n - len(dc.t)
    idx = np.arange(n)
    chain_time = np.where(head, 0, t[np.maximum(idx - 1, 0)])
    # a stream's first activity in the window waits for the stream's earlier work (source edge)
    stream_free = np.zeros(n, np.int64)
    stream_free[n_host_points:][0::2] = np.clip(dc.free, 0, dc.start)
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
    typ = _per_window_median(e_win[first], c_class[first], slack[first], k, N_EDGE_CLASSES)
    cw[~first] = np.minimum(typ[e_win[~first], c_class[~first]], slack[~first])
    gap = (~head) & (w_kind == KIND_CODE["stream_gap"])
    has_cross = best > UNREACHED
    gap_bind = gap & ~(has_cross & cross_binds)
    typ_gap = _per_window_median(node_win[gap_bind], np.zeros(int(gap_bind.sum()), np.int64), w[gap_bind], k, 1)[:, 0]
    demote = has_cross & cross_binds & ~head
    w = np.where(demote & gap, np.minimum(typ_gap[node_win], t - chain_time), np.where(demote, 0, w))
    base = np.full(n, UNREACHED, np.int64)
    base[head] = np.where(has_cross[head] & cross_binds[head], chain_time[head], t[head])
    c_kind = np.where(c_class == EDGE_LAUNCH, KIND_CODE["launch_delay"], KIND_CODE["sync_wait"]).astype(np.int8)
    c_bound = np.where(c_class == EDGE_LAUNCH, BOUND_CODE["launch_overhead"], BOUND_CODE["sync"]).astype(np.int8)
    return nodes._replace(w=w, base=base), Cross(edges, cw, c_kind, c_bound, dropped_dst)
