"""Nesting, steps 1-3: the vectorized pass over events in track-major order (`proftab.intervals.nest`).

Exact depth (`depth_of`), the candidate parent at depth - 1 (`candidate_parent`), the events
whose candidate is not provably their parent (`uncertified`), and the self time of properly
nested events (`self_nested`).
"""

from __future__ import annotations

import numpy as np

__all__ = ["candidate_parent", "depth_of", "self_nested", "uncertified"]


def depth_of(ks: np.ndarray, ke: np.ndarray) -> np.ndarray:
    """Exact depth of the events given in order by their (track, time) keys.

    Zero-length events are never open, so only positive events count:
    ``depth = #(positive events before) - #(positive ends <= start)`` -- a positive
    event ending by this start also starts before it, so it precedes it; keys are
    track-major, so other tracks cancel out.  The ends are counted by one sort of the
    merged start/end keys (ends first on equal keys).
    """
    m = len(ks)
    positive = ke > ks
    n_pos = int(np.count_nonzero(positive))
    merged = np.empty(n_pos + m, dtype=np.int64)  # built in place: no concatenated temporaries
    np.left_shift(ke[positive], 1, out=merged[:n_pos])
    np.left_shift(ks, 1, out=merged[n_pos:])
    merged[n_pos:] |= 1
    merged.sort(kind="stable")  # two near-sorted runs (ends, starts): timsort merges them in about linear time
    np.bitwise_and(merged, 1, out=merged)
    at = np.flatnonzero(merged)  # where the j-th start landed
    del merged
    at -= np.arange(m)  # ends (of positive events) sorted before the j-th start
    out: np.ndarray = np.cumsum(positive, dtype=np.int64)
    out -= positive
    out -= at
    return out


def candidate_parent(depth: np.ndarray) -> np.ndarray:
    """Per event (in track-major order, exact depths), the index of the latest earlier
    event of its track with depth ``d - 1``; -1 for depth 0.

    Depth rises by at most 1 from one event to the next and is 0 at a track's first
    event, so that event is the last *opening* event (``d[j+1] == d[j] + 1``) at level
    ``d`` before ``i``: a forward fill per depth level after one stable radix sort.
    """
    m = len(depth)
    opening = np.zeros(m, dtype=bool)
    np.equal(depth[1:], depth[:-1] + 1, out=opening[1:])
    dmax = int(depth.max())
    key = depth.astype(np.uint16 if dmax < 2**16 else np.uint32)
    order = np.argsort(key, kind="stable")
    del key
    filled = np.where(opening[order], order, 0)
    del opening
    level = np.repeat(np.arange(dmax + 1) * (m + 1), np.bincount(depth, minlength=dmax + 1))
    filled += level
    np.maximum.accumulate(filled, out=filled)
    filled -= level
    del level
    filled -= 1
    out = np.empty(m, dtype=np.int64)
    out[order] = filled
    return out


def uncertified(pos: np.ndarray | None, q: np.ndarray, depth: np.ndarray, start: np.ndarray, end: np.ndarray
                 ) -> np.ndarray:
    """Events whose candidate parent is not provably their parent (see module docs).

    `start` / `end` per sorted position: times, or the track-major sort keys (a candidate parent
    is in its child's track, where keys differ exactly as times do). `pos` are the events'
    positions; None means all positions in order (no gathers).
    """
    e_q = end[np.maximum(q, 0)]
    s_p, e_p = (start, end) if pos is None else (start[pos], end[pos])
    out: np.ndarray = (e_q <= s_p) | (e_p > e_q)
    del e_q
    out |= q < 0
    out &= depth > 0
    return out


def self_nested(parent: np.ndarray, dur: np.ndarray, n: int) -> np.ndarray:
    """``dur - sum(children dur)`` (exact int64; float sums are exact below 2**53)."""
    has = parent >= 0
    if not has.any():
        return dur.copy()
    if int(dur.max()) < 2**53:  # nested children of one parent sum to <= its dur: exact in float64
        roots = ~has
        parent[roots] = n  # roots count into a slot past the end (restored below)
        child = np.bincount(parent, weights=dur, minlength=n + 1)
        parent[roots] = -1
        out = np.empty(n, np.int64)
        np.subtract(dur, child[:n], out=out, casting="unsafe")
        return out
    child = np.zeros(n, dtype=np.int64)
    np.add.at(child, parent[has], dur[has])
    return dur - child
