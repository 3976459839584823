"""Generic tree arithmetic over parent links, vectorized (numpy); no torch knowledge.

A tree is given as `parent`: for each row, the row index of its parent, -1 for a root.
Rows are looked up from ids with `row_positions`; every other function works on row indices.

Complexity (n rows, D the tree's depth; every walk is bounded, so parent links that form a
cycle raise `TreeCycleError` instead of looping):

=====================  ===============================================================
`row_positions`        O(n + m) (dense table) or O((n + m) log n) (sort + binary search)
`depth_levels`         O(n) (16-bit radix sort) or O(n log n)
`tree_depth`           O(n log D), pointer jumping
`containing_ancestor`  O(n · k) for k ≤ 16 crossing steps, else O(n log D) (binary lifting)
`subtree_sum`          O(n) in D passes for D < 64 levels, else O(n log n) (`preorder`)
`preorder`             O(n log n): D passes for D < 64 levels, else an Euler tour + list
                       ranking, ⌈log2 2n⌉ + 1 vectorized rounds
`path_classes`         O(n log n) per round: D rounds for D < 64 levels, else ⌈log2 D⌉ + 1
                       (prefix doubling); never one pass per node
`root_first_paths`     O(S log n) for S = Σ (depth + 1) of the rows (the output), one pass
`nearest_ancestor`     O(m · k) for k ≤ 8 steps, else O(n log D) (pointer jumping)
`ancestor_pairs`       O(output) = O(Σ depth of the items), D passes
=====================  ===============================================================

"Levels" below means `depth_levels`: a pass per depth, each over that level's rows only, so
the work is O(n) but the passes are D; a kernel switches to a log-round method past
`LEVEL_PASSES` levels, so a 10^5-deep chain costs about 20 passes, not 10^5.
"""

from __future__ import annotations

import numpy as np

__all__ = ["LEVEL_PASSES", "TreeCycleError", "ancestor_pairs", "containing_ancestor", "depth_levels",
           "nearest_ancestor", "path_classes", "preorder", "root_first_paths", "row_positions", "subtree_sum",
           "tree_depth"]

#: deepest tree (levels) the level-by-level kernels walk one pass per level; deeper trees take
#: the O(log) -round methods (Euler tour, prefix doubling)
LEVEL_PASSES = 64


class TreeCycleError(ValueError):
    """The parent links form a cycle (a damaged stored tree): no walk up ever reaches a root."""

    def __init__(self, where: str) -> None:
        super().__init__(f"the parent links form a cycle ({where} never reaches a root)")


def _max_rounds(n: int) -> int:
    """Pointer-jumping rounds that reach the root of any acyclic tree of `n` nodes."""
    return max(int(n).bit_length(), 1) + 2


def row_positions(rank: np.ndarray, ids: np.ndarray, want_rank: np.ndarray, want_id: np.ndarray) -> np.ndarray:
    """Row positions of `(want_rank, want_id)` among the rows `(rank, ids)`; -1 where absent.

    Event ids are file positions, so a dense lookup table is small; it falls back to a
    sort + binary search when ids are too sparse for that.
    """
    n = len(ids)
    if n == 0 or len(want_id) == 0:
        return np.full(len(want_id), -1, np.int64)
    ranks = np.unique(rank[:1]) if (rank == rank[0]).all() else np.unique(rank)
    stride = int(max(ids.max(), want_id.max())) + 1
    if len(ranks) == 1:  # one rank: the ids are the keys (no key arrays, no rank search)
        ok = want_id >= 0
        ok &= want_rank == ranks[0]
        key, wkey = ids, np.where(ok, want_id, 0)
    else:
        widx = np.clip(np.searchsorted(ranks, want_rank), 0, len(ranks) - 1)
        ok = (ranks[widx] == want_rank) & (want_id >= 0)
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
    for _ in range(_max_rounds(len(parent)) + 1):
        if not len(live):
            break
        a = anc[live]
        dist[live] = dist[live] + dist[a]
        anc[live] = anc[a]
        live = live[anc[live] >= 0]
    else:
        msg = "tree_depth"
        raise TreeCycleError(msg)
    return dist


def containing_ancestor(parent: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """The nearest ancestor `p` of each row that contains it: `p.end > start` and `p.end >= end`.

    Walks up from `parent` past ancestors that end before the row does (a row that crosses
    its parent's end is re-parented to the first ancestor holding its whole interval), so a
    subtree never reaches past its root. Parent = row index, -1 for a root. Rows still
    unresolved after 16 steps (a chain of crossing intervals) are finished by binary lifting
    over the maxima of the ancestors' ends: O(n log depth), never one step per pass.
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
    steps = 0
    while len(todo) and steps < _CROSSING_STEPS:
        steps += 1
        c = cur[todo]
        bad = ~((end[c] > start[todo]) & (end[c] >= end[todo]))
        todo = todo[bad]
        cur[todo] = parent[cur[todo]]
        todo = todo[cur[todo] >= 0]
    if len(todo):
        cur[todo] = _first_ancestor_reaching(parent, end, cur[todo], np.maximum(end[todo], start[todo] + 1))
    return cur


#: naive steps of `containing_ancestor` before it switches to binary lifting
_CROSSING_STEPS = 16


def _first_ancestor_reaching(parent: np.ndarray, end: np.ndarray, node: np.ndarray, need: np.ndarray) -> np.ndarray:
    """For each `node[i]`: the nearest of itself and its ancestors with `end >= need[i]` (-1: none).

    Binary lifting: ``up[k]`` is the 2^k-th ancestor, ``top[k]`` the largest end among the
    first 2^k ancestors; one descent over the levels per query. O(n log depth) time and memory.
    """
    low = np.iinfo(np.int64).min
    levels = max(int(tree_depth(parent).max(initial=0)).bit_length(), 1)
    up = [parent]
    top = [np.where(parent >= 0, end[np.maximum(parent, 0)], low)]
    for _ in range(1, levels):
        u, t = up[-1], top[-1]
        has = u >= 0
        uu = np.where(has, u[np.maximum(u, 0)], -1)
        up.append(uu)
        top.append(np.where(has, np.maximum(t, t[np.maximum(u, 0)]), t))
    out = np.full(len(node), -1, np.int64)
    hit = end[node] >= need
    out[hit] = node[hit]
    q = np.flatnonzero(~hit)
    cur = node[q]
    for k in range(levels - 1, -1, -1):  # skip 2^k ancestors at once while all end too early
        skip = top[k][cur] < need[q]
        nxt = up[k][cur]
        gone = skip & (nxt < 0)  # fewer than 2^k ancestors left, none reaching: no answer
        keep = ~gone
        cur = np.where(skip & ~gone, nxt, cur)[keep]
        q = q[keep]
    reach = top[0][cur] >= need[q]
    out[q[reach]] = parent[cur[reach]]
    return out


def subtree_sum(values: np.ndarray, parent: np.ndarray, depth: np.ndarray | None = None) -> np.ndarray:
    """Σ of `values` over each node's subtree (parent = row index, -1 for roots).

    With `depth` of a tree under `LEVEL_PASSES` levels: one `np.add.at` per level, deepest
    first (O(n)). Otherwise a prefix sum over the `preorder` (O(n log n), no pass per level);
    int64 sums are exact whenever the subtree sums themselves fit (the prefix sums wrap
    modulo 2^64 and their differences do not).
    """
    if depth is not None and (len(depth) == 0 or int(depth.max()) < LEVEL_PASSES):
        total = values.astype(np.int64, copy=True)
        for chunk in reversed(depth_levels(depth)):
            p = parent[chunk]
            has = p >= 0
            np.add.at(total, p[has], total[chunk[has]])
        return total
    pre, size = preorder(parent, depth=depth)
    by_pre = np.empty(len(parent), np.int64)
    by_pre[pre] = values
    prefix = np.zeros(len(parent) + 1, np.int64)
    with np.errstate(over="ignore"):
        np.cumsum(by_pre, out=prefix[1:])
        out: np.ndarray = prefix[pre + size] - prefix[pre]
    return out


def preorder(parent: np.ndarray, sibling_order: np.ndarray | None = None,
             depth: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Depth-first preorder position (0..n-1) and subtree size of each node.

    Roots, and the children of a node, are visited in the order they appear in
    `sibling_order` (a permutation of the rows; default: row order). Siblings are grouped by
    one stable sort by parent (O(n log n)). A tree under `LEVEL_PASSES` levels (`depth`,
    computed when not given) is placed level by level (a node's position = its parent's + 1 +
    the sizes of the siblings before it); a deeper one by its Euler tour (enter / exit of
    every node) ranked by pointer jumping, ⌈log2 2n⌉ + 1 vectorized rounds whatever the depth.
    Links that form a cycle never reach a root: `TreeCycleError`.
    """
    n = len(parent)
    if n == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    rows = np.arange(n, dtype=np.int64)
    order = rows if sibling_order is None else np.asarray(sibling_order, np.int64)
    seq = order[np.argsort(parent[order], kind="stable")]  # by parent, siblings in their order
    ps = parent[seq]
    same = ps[1:] == ps[:-1]
    if depth is None:
        depth = tree_depth(parent)
    if int(depth.max()) < LEVEL_PASSES:
        size = subtree_sum(np.ones(n, np.int64), parent, depth)
        sizes = size[seq]
        before = np.cumsum(sizes) - sizes  # Σ sizes before, over all groups
        group = np.cumsum(np.concatenate(([True], ~same))) - 1
        offset = np.empty(n, np.int64)
        offset[seq] = before - before[np.flatnonzero(np.concatenate(([True], ~same)))][group]
        pre = np.zeros(n, np.int64)
        for level in depth_levels(depth):
            p = parent[level]
            pre[level] = np.where(p >= 0, pre[np.maximum(p, 0)] + 1, 0) + offset[level]
        return pre, size
    next_sib = np.full(n, -1, np.int64)
    next_sib[seq[:-1][same]] = seq[1:][same]
    first = np.concatenate(([True], ~same))
    first_child = np.full(n, -1, np.int64)
    fp = ps[first]
    first_child[fp[fp >= 0]] = seq[first][fp >= 0]
    # tokens: enter v = v, exit v = n + v, the end = 2n (points to itself)
    end = 2 * n
    succ = np.empty(2 * n + 1, np.int64)
    succ[:n] = np.where(first_child >= 0, first_child, n + rows)
    succ[n:end] = np.where(next_sib >= 0, next_sib, np.where(parent >= 0, n + parent, end))
    succ[end] = end
    # every token has one predecessor but the first root's enter (the head): nodes on a cycle
    # are never entered from a root and their tokens never reach the end
    weight = np.zeros(2 * n + 1, np.int64)
    weight[:n] = 1  # suffix sums count the enters from a token to the end
    live = np.flatnonzero(succ[:end] != end)
    for _ in range(_max_rounds(2 * n) + 1):
        if not len(live):
            break
        nxt = succ[live]
        weight[live] += weight[nxt]
        succ[live] = succ[nxt]
        live = live[succ[live] != end]
    else:
        msg = "preorder"
        raise TreeCycleError(msg)
    pre = n - weight[:n]
    size = weight[:n] - weight[n:end]
    return pre, size


def path_classes(parent: np.ndarray, token: np.ndarray, depth: np.ndarray | None = None) -> np.ndarray:
    """Hash-consed root paths: an id per node, equal for two nodes iff the sequences of `token`
    from their roots down to them are equal.

    Ids are 0..k-1, numbered by depth first, so a node's id is larger than its parent's. For
    a tree under `LEVEL_PASSES` levels (`depth`), one pass per level over that level's rows
    (a node's id = the rank of (its parent's id, its token)); deeper trees by prefix doubling
    (the class of a node's first 2^(r+1) tokens upwards = the rank of (its class over 2^r, the
    class over 2^r of its 2^r-th ancestor)), ⌈log2 D⌉ + 1 rounds of O(n log n) each.
    """
    n = len(parent)
    if n == 0:
        return np.zeros(0, np.int64)
    if depth is None:
        depth = tree_depth(parent)
    tok = np.unique(token, return_inverse=True)[1].astype(np.int64).reshape(-1)
    n_tok = int(tok.max()) + 1
    path = np.full(n, -1, np.int64)
    if int(depth.max()) < LEVEL_PASSES:
        next_id = 0
        for rows in depth_levels(depth):
            p = parent[rows]
            head = np.where(p >= 0, path[np.maximum(p, 0)] + 1, 0)
            uniq, inv = np.unique(head * n_tok + tok[rows], return_inverse=True)
            path[rows] = next_id + inv.reshape(-1)
            next_id += len(uniq)
        return path
    label = tok
    up = parent.copy()
    for _ in range(_max_rounds(n) + 1):
        live = up >= 0
        if not live.any():
            break
        above = np.where(live, label[np.maximum(up, 0)] + 1, 0)
        label = np.unique(label * (n + 1) + above, return_inverse=True)[1].astype(np.int64).reshape(-1)
        up = np.where(live, up[np.maximum(up, 0)], -1)
    else:
        msg = "path_classes"
        raise TreeCycleError(msg)
    # renumber depth first (a parent's class is shallower than its children's)
    key = np.unique(depth * (int(label.max()) + 1) + label, return_inverse=True)[1]
    return key.astype(np.int64).reshape(-1)


def root_first_paths(parent: np.ndarray, rows: np.ndarray, depth: np.ndarray, pre: np.ndarray | None = None,
                     levels: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Each of `rows` with its ancestors, root first: (`offsets`, `nodes`), row i's path being
    ``nodes[offsets[i]:offsets[i + 1]]``; with `levels`, only the last ``levels[i]`` of them
    (the row and its ``levels[i] - 1`` nearest ancestors).

    One vectorized pass, O(S log n) for S = the output's length: in preorder (`pre`,
    computed when not given), the ancestor at depth j of a node is the last node at depth j
    at or before it, found by one binary search per (row, j).
    """
    n = len(parent)
    rows = np.asarray(rows, np.int64)
    lens = depth[rows].astype(np.int64) + 1 if levels is None else np.asarray(levels, np.int64)
    offsets = np.zeros(len(rows) + 1, np.int64)
    np.cumsum(lens, out=offsets[1:])
    if len(rows) == 0:
        return offsets, np.zeros(0, np.int64)
    if pre is None:
        pre = preorder(parent, depth=depth)[0]
    stride = np.int64(n)
    key = depth.astype(np.int64) * stride + pre
    by_key = np.argsort(key, kind="stable")
    sorted_key = key[by_key]
    item = np.repeat(np.arange(len(rows), dtype=np.int64), lens)
    level = np.arange(int(offsets[-1]), dtype=np.int64) - np.repeat(offsets[:-1], lens)  # 0.. within a path
    level += (depth[rows].astype(np.int64) + 1 - lens)[item]  # the depth of that path entry
    level *= stride
    level += pre[rows][item]
    del item
    pos = np.searchsorted(sorted_key, level, side="right") - 1
    return offsets, by_key[pos]


def nearest_ancestor(parent: np.ndarray, start: np.ndarray, target: np.ndarray) -> np.ndarray:
    """For rows `start`, the nearest strict ancestor (via `parent` rows, -1 = none) with `target`.

    Up to 8 steps are walked for the `start` rows alone (most answers are near); the rest by
    pointer jumping over the whole tree, O(n log depth).
    """
    cur: np.ndarray = parent[start].copy()
    for _ in range(_NEAR_STEPS):
        bad = (cur >= 0) & ~target[np.maximum(cur, 0)]
        if not bad.any():
            return cur
        cur[bad] = parent[cur[bad]]
    # ptr[j]: j itself when it is a target, else a node further up on the way to j's nearest target
    ptr = np.where(target, np.arange(len(parent)), parent)
    live = np.flatnonzero((ptr >= 0) & ~target[np.maximum(ptr, 0)])
    for _ in range(_max_rounds(len(parent)) + 1):
        if not len(live):
            break
        ptr[live] = ptr[ptr[live]]
        p = ptr[live]
        live = live[(p >= 0) & ~target[np.maximum(p, 0)]]
    else:
        msg = "nearest_ancestor"
        raise TreeCycleError(msg)
    return np.where(cur >= 0, ptr[np.maximum(cur, 0)], -1)


#: steps `nearest_ancestor` walks before it switches to pointer jumping
_NEAR_STEPS = 8


def ancestor_pairs(parent: np.ndarray, first: np.ndarray, include_first: bool) -> tuple[np.ndarray, np.ndarray]:
    """(item, ancestor row) pairs: each item's row `first` (if `include_first`) and all its
    ancestors through `parent` (-1 = root)."""
    items = np.arange(len(first))
    cur = first.copy() if include_first else np.where(first >= 0, parent[np.maximum(first, 0)], -1)
    out_i, out_a = [], []
    alive = cur >= 0
    for _ in range(len(parent) + 1):
        if not alive.any():
            break
        items, cur = items[alive], cur[alive]
        out_i.append(items)
        out_a.append(cur)
        cur = parent[cur]
        alive = cur >= 0
    else:
        msg = "ancestor_pairs"
        raise TreeCycleError(msg)
    if not out_i:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    return np.concatenate(out_i), np.concatenate(out_a)
