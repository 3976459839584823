"""Generic tree arithmetic over parent links, vectorized (numpy); no torch knowledge.

A tree is given as `parent`: for each row, the row index of its parent, -1 for a root.
Rows are looked up from ids with `row_positions`; every other function works on row indices.
"""

from __future__ import annotations

import numpy as np

__all__ = ["ancestor_pairs", "containing_ancestor", "depth_levels", "nearest_ancestor", "row_positions",
           "subtree_sum", "tree_depth"]


def row_positions(rank: np.ndarray, ids: np.ndarray, want_rank: np.ndarray, want_id: np.ndarray) -> np.ndarray:
    """Row positions of `(want_rank, want_id)` among the rows `(rank, ids)`; -1 where absent.

    Event ids are file positions, so a dense lookup table is small; it falls back to a
    sort + binary search when ids are too sparse for that.
    """
    n = len(ids)
    if n == 0 or len(want_id) == 0:
        return np.full(len(want_id), -1, np.int64)
    ranks = np.unique(rank[:1]) if (rank == rank[0]).all() else np.unique(rank)
    widx = np.clip(np.searchsorted(ranks, want_rank), 0, len(ranks) - 1)
    ok = (ranks[widx] == want_rank) & (want_id >= 0)
    stride = int(max(ids.max(), want_id.max())) + 1
    if len(ranks) == 1:  # one rank: the ids are the keys (no key arrays)
        key, wkey = ids, np.where(ok, want_id, 0)
    else:
        key = np.searchsorted(ranks, rank).astype(np.int64) * stride + ids
        wkey = widx.astype(np.int64) * stride + np.where(ok, want_id, 0)
    del widx
    if stride * len(ranks) <= 4 * n + 1024:
        small = np.int32 if n < 2**31 else np.int64  # the table holds row positions
        table = np.full(stride * len(ranks), -1, small)
        table[key] = np.arange(n, dtype=small)
        out: np.ndarray = table[wkey].astype(np.int64)
        del table
        out[~ok] = -1
        return out
    out = np.full(len(want_id), -1, np.int64)
    order = np.argsort(key, kind="stable")
    sk = key[order]
    pos = np.clip(np.searchsorted(sk, wkey), 0, n - 1)
    hit = ok & (sk[pos] == wkey)
    out[hit] = order[pos[hit]]
    return out


def depth_levels(depth: np.ndarray) -> list[np.ndarray]:
    """Row indices grouped by depth, shallowest first."""
    d = depth.astype(np.int16) if len(depth) and depth.max() < 2**15 else depth
    order = np.argsort(d, kind="stable")  # radix sort for 16-bit keys
    bounds = np.flatnonzero(np.diff(d[order])) + 1
    return np.split(order, bounds)


def tree_depth(parent: np.ndarray) -> np.ndarray:
    """Number of ancestors of each node (parent = row index, -1 for roots), by pointer
    jumping: O(n log depth)."""
    dist = (parent >= 0).astype(np.int64)
    anc = parent.copy()
    live = np.flatnonzero(anc >= 0)
    while len(live):
        a = anc[live]
        dist[live] = dist[live] + dist[a]
        anc[live] = anc[a]
        live = live[anc[live] >= 0]
    return dist


def containing_ancestor(parent: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """The nearest ancestor `p` of each row that contains it: `p.end > start` and `p.end >= end`.

    Walks up from `parent` past ancestors that end before the row does (a row that crosses
    its parent's end is re-parented to the first ancestor holding its whole interval), so a
    subtree never reaches past its root. Parent = row index, -1 for a root.
    """
    cur = parent.copy()
    # the first step over all rows at once, with one gathered array (most rows fit their parent)
    parent_end = np.maximum(cur, 0)
    np.take(end, parent_end, out=parent_end, mode="clip")  # indices are valid: no buffered copy
    fits = parent_end > start
    fits &= parent_end >= end
    del parent_end
    fits |= cur < 0
    todo = np.flatnonzero(~fits)
    del fits
    if len(todo):
        cur[todo] = parent[cur[todo]]
        todo = todo[cur[todo] >= 0]
    while len(todo):
        c = cur[todo]
        bad = ~((end[c] > start[todo]) & (end[c] >= end[todo]))
        todo = todo[bad]
        cur[todo] = parent[cur[todo]]
        todo = todo[cur[todo] >= 0]
    return cur


def subtree_sum(values: np.ndarray, parent: np.ndarray, depth: np.ndarray) -> np.ndarray:
    """Σ of `values` over each node's subtree (parent = row index, -1 for roots)."""
    total = values.astype(np.int64, copy=True)
    for chunk in reversed(depth_levels(depth)):
        p = parent[chunk]
        has = p >= 0
        np.add.at(total, p[has], total[chunk[has]])
    return total


def nearest_ancestor(parent: np.ndarray, start: np.ndarray, target: np.ndarray) -> np.ndarray:
    """For rows `start`, the nearest strict ancestor (via `parent` rows, -1 = none) with `target`."""
    cur: np.ndarray = parent[start].copy()
    while True:
        bad = (cur >= 0) & ~target[np.maximum(cur, 0)]
        if not bad.any():
            return cur
        cur[bad] = parent[cur[bad]]


def ancestor_pairs(parent: np.ndarray, first: np.ndarray, include_first: bool) -> tuple[np.ndarray, np.ndarray]:
    """(item, ancestor row) pairs: each item's row `first` (if `include_first`) and all its
    ancestors through `parent` (-1 = root)."""
    items = np.arange(len(first))
    cur = first.copy() if include_first else np.where(first >= 0, parent[np.maximum(first, 0)], -1)
    out_i, out_a = [], []
    alive = cur >= 0
    while alive.any():
        items, cur = items[alive], cur[alive]
        out_i.append(items)
        out_a.append(cur)
        cur = parent[cur]
        alive = cur >= 0
    if not out_i:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    return np.concatenate(out_i), np.concatenate(out_a)
