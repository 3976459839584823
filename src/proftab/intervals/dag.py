"""Longest paths over a DAG made of chains plus cross edges, vectorized (numpy); no torch knowledge.

The graph is given as *chains*: nodes are numbered so that each chain's nodes are contiguous and
in chain order (node ``i`` follows node ``i - 1`` unless ``head[i]``), the chain edge into node
``i`` weighing ``w[i]``; *cross edges* ``src -> dst`` with weights ``cw`` join chains; ``base[i]``
is the weight of an edge from a common source (time 0), or `UNREACHED` for none.

`earliest` is the longest-path value of every node, ``x[i] = max(x[i-1] + w[i], base[i],
max(x[src] + cw))``: per chain it is a closed form (``x = W + cummax(e - W)``, ``W`` the chain's
cumulative weight, ``e`` the best incoming cross/source value), so one *round* is a handful of
O(n) numpy passes, and rounds repeat until nothing changes (as many rounds as cross edges
alternate along the longest path, plus one; a pure chain graph takes one). `argmax_pred` then
names the incoming edge that gives each node its value, and `walk_back` follows those edges from a
node to the source by pointer doubling (O(n log length), no per-node Python loop).

Complexity: `chain_heads` O(n); `earliest` O(n + e) per round, rounds bounded by e + 2
(`max_rounds`); `argmax_pred` O(n + e log e); `walk_back` O(n log n), cut at a cycle of tied
predecessors; `walk_back_many` O((n + p) log n) for all sinks together (p: the paths' total
length). Tested at 10^5 nodes (tests/test_hostile_analyses.py).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

__all__ = ["UNREACHED", "Preds", "argmax_pred", "chain_heads", "earliest", "walk_back", "walk_back_many"]

#: value of a node that no edge reaches (and of `base` where a node has no source edge)
UNREACHED = np.int64(-(2**62))
_REACHABLE = -(2**61)


class Preds(NamedTuple):
    """The edge that gives each node its longest-path value.

    Attributes
    ----------
    node
        Predecessor node, -1 where the value comes from the source (or nothing reaches the node).
    via
        0 source edge, 1 chain edge, 2 cross edge, -1 unreached.
    edge
        Index of the cross edge where ``via == 2``, else -1.
    """

    node: np.ndarray
    via: np.ndarray
    edge: np.ndarray


def chain_heads(chain: np.ndarray) -> np.ndarray:
    """``head`` mask for nodes sorted by chain id: True where a new chain starts."""
    head = np.ones(len(chain), bool)
    if len(chain) > 1:
        head[1:] = chain[1:] != chain[:-1]
    return head


def _segmented_cummax(y: np.ndarray, head: np.ndarray) -> np.ndarray:
    """Running maximum of `y` restarting at every head (values in the ±2**61 range; `UNREACHED`
    stays `UNREACHED` until a reached value comes). O(n): one offset `maximum.accumulate` when the
    chains' offsets fit in int64, else Polars' `cum_max` per chain (no Python loop per chain).
    """
    if len(y) == 0:
        return y
    reached = y > _REACHABLE
    if not reached.any():
        return y.copy()
    seg = np.cumsum(head) - 1
    lo, hi = int(y[reached].min()) - 1, int(y[reached].max())  # lo: below every reached value
    ys = np.where(reached, y, lo)
    span = hi - lo + 1
    if span * (int(seg[-1]) + 1) < 2**62:  # offset each chain above the previous: one global cummax
        off = seg.astype(np.int64) * span - lo
        m = np.maximum.accumulate(ys + off) - off
    else:
        import polars as pl

        m = pl.DataFrame({"y": ys, "s": seg}).select(pl.col("y").cum_max().over("s"))["y"].to_numpy()
    return np.where(m > lo, m, UNREACHED)


class _Chains:
    """The parts of the chain closed form that depend only on the chain weights (computed once)."""

    def __init__(self, w: np.ndarray, head: np.ndarray) -> None:
        c = np.cumsum(np.where(head, 0, w))
        first = np.maximum.accumulate(np.where(head, np.arange(len(c)), 0)) if len(c) else c
        self.big_w = c - c[first]
        self.head = head

    def solve(self, e: np.ndarray) -> np.ndarray:
        """``x[i] = max(x[i-1] + w[i], e[i])`` along each chain (``x[head] = e[head]``)."""
        y = np.where(e > _REACHABLE, e - self.big_w, UNREACHED)
        m = _segmented_cummax(y, self.head)
        return np.where(m > _REACHABLE, self.big_w + m, UNREACHED)


def earliest(w: np.ndarray, head: np.ndarray, base: np.ndarray, src: np.ndarray, dst: np.ndarray,
             cw: np.ndarray, max_rounds: int | None = None, start: np.ndarray | None = None) -> tuple[np.ndarray, int]:
    """Longest-path value of every node (int64), and the number of rounds it took.

    Parameters
    ----------
    w, head
        Chain edge weight into each node and the chain-start mask (see the module docstring).
    base
        Source edge weight per node, `UNREACHED` for none.
    src, dst, cw
        Cross edges and their weights.
    max_rounds
        Stop after this many rounds (default: number of cross edges + 2, always enough for a DAG).
    start
        First guess of the values (default: unreached). A DAG has one fixed point, reached from any
        guess; a guess that is already the answer (the observed times, for the observed weights)
        takes one round.
    """
    n = len(w)
    limit = len(src) + 2 if max_rounds is None else max_rounds
    x = np.full(n, UNREACHED, np.int64) if start is None else start.astype(np.int64)
    chains = _Chains(w, head)
    rounds = 0
    while rounds < limit:
        rounds += 1
        e = base.astype(np.int64, copy=True)
        ok = x[src] > _REACHABLE
        np.maximum.at(e, dst[ok], x[src[ok]] + cw[ok])
        new = chains.solve(e)
        if np.array_equal(new, x):
            break
        x = new
    return x, rounds


def argmax_pred(x: np.ndarray, w: np.ndarray, head: np.ndarray, base: np.ndarray, src: np.ndarray,
                dst: np.ndarray, cw: np.ndarray) -> Preds:
    """The incoming edge that achieves each node's value `x` (ties: cross, then chain, then source)."""
    n = len(x)
    node = np.full(n, -1, np.int64)
    via = np.full(n, -1, np.int8)
    edge = np.full(n, -1, np.int64)
    reach = x > _REACHABLE
    via[reach & (base == x)] = 0
    idx = np.arange(n)
    chain_ok = reach & ~head
    prev_val = np.where(chain_ok, x[np.maximum(idx - 1, 0)] + w, UNREACHED)
    by_chain = chain_ok & (x[np.maximum(idx - 1, 0)] > _REACHABLE) & (prev_val == x)
    via[by_chain] = 1
    node[by_chain] = idx[by_chain] - 1
    if len(src):
        val = np.where(x[src] > _REACHABLE, x[src] + cw, UNREACHED)
        hit = np.flatnonzero((val == x[dst]) & (val > _REACHABLE))
        if len(hit):
            d, first = np.unique(dst[hit], return_index=True)
            via[d] = 2
            node[d] = src[hit[first]]
            edge[d] = hit[first]
    return Preds(node, via, edge)


def walk_back(pred: np.ndarray, sink: int) -> np.ndarray:
    """Nodes from the root to `sink` following `pred` (-1 = root), by pointer doubling.

    O(n log length). Predecessors that form a cycle (zero-weight edges between equal values
    can tie both ways) never reach a root: the walk is cut where it first returns to a node, so
    it ends after at most n nodes.
    """
    n = len(pred)
    jump = np.where(pred >= 0, pred, np.arange(n))
    seq = np.array([sink], np.int64)  # seq[i] = pred^i(sink); each round doubles it
    while pred[seq[-1]] >= 0:  # a root ends it (jumps stay at roots)
        if len(seq) > n:  # longer than any acyclic walk: cut at the first repeated node
            _, first = np.unique(seq, return_index=True)
            seen = np.zeros(len(seq), bool)
            seen[first] = True
            cut = int(np.argmin(seen))  # first position holding a node already on the walk
            return seq[:cut][::-1]
        seq = np.concatenate([seq, jump[seq]])
        jump = jump[jump]
    stop = int(np.argmax(pred[seq] < 0))
    return seq[: stop + 1][::-1]


def walk_back_many(pred: np.ndarray, sinks: np.ndarray,
                   ranges: tuple[np.ndarray, np.ndarray] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """`walk_back` from every node of `sinks` at once: the walks concatenated (each root to sink)
    and their offsets (``len(sinks) + 1``).

    Vectorized: the distance of every node to its root by pointer jumping (O(n log n)), then the
    walks' nodes by binary lifting, one pass per bit of the longest walk (O((n + p) log n), p the
    walks' total length), with no loop per sink. A sink whose predecessors enter a cycle (which
    `walk_back` cuts) is walked alone, on its node range ``ranges[0][k]:ranges[1][k]`` when given
    (disjoint subgraphs: each such walk then costs only its own subgraph); the graphs of a trace give
    none but hostile ties.
    """
    n = len(pred)
    sinks = np.asarray(sinks, np.int64)
    if len(sinks) == 0:
        return np.zeros(0, np.int64), np.zeros(1, np.int64)
    idx = np.arange(n, dtype=np.int64)
    jump0 = np.where(pred >= 0, pred, idx)
    jump = jump0.copy()
    dist = (pred >= 0).astype(np.int64)
    for _ in range(max(n, 1).bit_length() + 1):
        nxt = jump[jump]
        if np.array_equal(nxt, jump):  # every jump at a root (roots jump to themselves)
            break
        dist += dist[jump]
        jump = nxt
    cyclic = pred[jump[sinks]] >= 0  # no root within 2n steps
    length = np.where(cyclic, 0, dist[sinks] + 1)
    out_len = length.copy()
    loops: dict[int, np.ndarray] = {}
    for c in np.flatnonzero(cyclic).tolist():  # hostile ties only
        lo, hi = (int(ranges[0][c]), int(ranges[1][c])) if ranges is not None else (0, n)
        loops[c] = walk_back(pred[lo:hi] - lo, int(sinks[c]) - lo) + lo
        out_len[c] = len(loops[c])
    off = np.zeros(len(sinks) + 1, np.int64)
    off[1:] = np.cumsum(out_len)
    out = np.empty(int(off[-1]), np.int64)
    total = int(length.sum())
    if total:
        owner = np.repeat(np.arange(len(sinks)), length)
        pos = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(length) - length, length)
        steps = length[owner] - 1 - pos  # root first: the root is length - 1 steps from the sink
        cur = sinks[owner].copy()
        lift = jump0
        bit = 0
        while (steps >> bit).any():
            on = ((steps >> bit) & 1).astype(bool)
            cur[on] = lift[cur[on]]
            lift = lift[lift]
            bit += 1
        out[off[owner] + pos] = cur
    for c, seq in loops.items():
        out[off[c]:off[c + 1]] = seq
    return out, off
