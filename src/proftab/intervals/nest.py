"""Per-track nesting of intervals and exact self time.

Contract
--------
This module is generic: it sees only ``event_id``, ``start_ns``, ``end_ns`` (Int64,
``end_ns >= start_ns``, ``event_id`` unique -- not checked) and the track key columns
``by`` (any dtype, nulls allowed; null is an ordinary key value).  Other columns are
passed through untouched and the rows keep their order.

Definitions (per track, i.e. per distinct value of ``by``):

* **order**: ``start_ns`` asc, then ``end_ns`` desc, then ``event_id`` asc.
* an event is **open** at ``t`` when ``start_ns <= t < end_ns``; zero-length events are
  never open, hence never parents.
* ``parent_id``: the innermost (= latest in the order) event that precedes this event in
  the order and is open at its start; null if none.
* ``depth``: the number of preceding-in-order events open at its start.
* ``self_ns``: the time during which the event is the innermost open event of its track
  (innermost = latest in the order among the events open at that instant).  On properly
  nested events this is ``dur - sum(direct children dur)``; in general every instant of
  the track's union belongs to exactly one event, so ``self_ns >= 0`` and per track
  ``sum(self_ns) == union length`` to the nanosecond.
* ``overrun_ns``: ``max(0, end_ns - parent's end_ns)``; 0 for roots.

Algorithm
---------
Everything runs on int64 numpy arrays in track-major order: one sort of composite
``(track, start)`` keys (packed with the row index when they fit), then the runs of equal
starts are re-sorted by ``(end desc, event_id)``.

1. ``depth`` is exact in all cases: zero-length events are never open, so it is
   ``#(positive events before) - #(positive ends <= start)`` (one merged sort).
2. Candidate parent ``q``: the latest earlier event of the track with depth ``d - 1``.
   Depth rises by at most 1 from one event to the next, so this is a forward fill per
   depth level (one stable radix sort of the depths).
3. Certification: if every event with ``d >= 1`` has ``start < end[q]`` and
   ``end <= end[q]``, the track nests properly (a crossing pair ``a`` before ``b`` with
   ``b`` minimal would contradict it) and ``q`` is the parent;
   ``self = dur - sum(children dur)``.
4. Otherwise the uncertified events are set aside as *crossing* and steps 1-3 are re-run
   on the rest of the affected overlap-connected top-level components until it
   certifies (usually one or two more passes, on ever fewer components).  The crossing
   events can only change the answers of a small set: themselves, the nested events
   open at their starts (their "chains") and the nested children of chain members (or
   nested roots) overlapping a crossing event.  That set is re-solved exactly by a
   Python sweep: a stack for parents, and two heaps giving the self time inside the
   crossing events' spans with and without them, applied as a correction to the nested
   self times.

Tracks whose composite keys would overflow int64 (time spans near 2**62 ns) are solved
one by one, and a single track spanning that much by the plain sweep.

Complexity: O(n log n) for properly nested tracks (the sorts, then O(n) passes; the two big
sorts are timsorts, about O(n) on the nearly (track, start)-ordered rows traces hold); events
that take step 4 cost O(k log k) more in the sweep (k = the re-solved set). Tested at 10^5
rows of a crossing chain (tests/test_hostile_analyses.py).

:func:`nest_stats` returns the counters of the last :func:`nest` call of the current
thread, including the share of events that took the slow path (step 4).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import polars as pl

from proftab.intervals._nest_crossing import resolve_crossing, set_crossing_aside, sweep
from proftab.intervals._nest_levels import candidate_parent, depth_of, self_nested, uncertified
from proftab.intervals._nest_order import track_order
from proftab.intervals._nest_tracks import track_ids

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["NestStats", "nest", "nest_stats"]

#: (perm, parent, depth, self, n_crossing, n_slow, passes, end) of `_nest_arrays`
_Result = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int, int, int, np.ndarray]

_EVENT_ID = "event_id"
_START = "start_ns"
_END = "end_ns"
_KEY_LIMIT = 2**62  # composite (track, time) keys must stay below this

_local = threading.local()


@dataclass(frozen=True)
class NestStats:
    """Counters of the last :func:`nest` call.

    Attributes
    ----------
    n_events, n_tracks : int
        Input size.
    n_crossing : int
        Events set aside as *crossing* (partial overlaps) so that the rest nests.
    n_slow : int
        Events whose parent / self time the exact Python sweep recomputed: the crossing
        events, the nested events open at their starts, and the children of those that
        overlap a crossing event.
    n_passes : int
        Vectorized passes (1 when every track is properly nested, 0 for no events).
    """

    n_events: int
    n_tracks: int
    n_crossing: int
    n_slow: int
    n_passes: int

    @property
    def slow_share(self) -> float:
        """Fraction of events that took the slow path (0.0 for no events)."""
        return self.n_slow / self.n_events if self.n_events else 0.0


def nest_stats() -> NestStats | None:
    """Return the :class:`NestStats` of the last :func:`nest` call in this thread.

    Returns
    -------
    NestStats or None
        None if :func:`nest` has not been called in this thread.
    """
    return getattr(_local, "stats", None)


# --------------------------------------------------------------------------- helpers


def _validate(events: pl.DataFrame, by: Sequence[str]) -> tuple[np.ndarray, ...]:
    missing = [c for c in (_EVENT_ID, _START, _END, *by) if c not in events.columns]
    if missing:
        msg = f"nest: missing columns {missing}"
        raise ValueError(msg)
    cols = events.select(
        pl.col(_EVENT_ID).cast(pl.Int64),
        pl.col(_START).cast(pl.Int64),
        pl.col(_END).cast(pl.Int64),
    )
    nulls = {c: n for c, n in zip(cols.columns, cols.null_count().row(0), strict=False) if n}
    if nulls:
        msg = f"nest: null values in {nulls}"
        raise ValueError(msg)
    eid, s, e = (cols.get_column(c).to_numpy() for c in (_EVENT_ID, _START, _END))
    if (e < s).any():
        bad = int(np.flatnonzero(e < s)[0])
        msg = f"nest: end_ns < start_ns for event_id {int(eid[bad])}"
        raise ValueError(msg)
    if len(s) and ((e - s) < 0).any():
        msg = "nest: a duration end_ns - start_ns overflows int64"
        raise ValueError(msg)
    return eid, s, e


# --------------------------------------------------------------------------- core


def _nest_arrays(tid: np.ndarray, s: np.ndarray, e: np.ndarray, eid: np.ndarray) -> _Result | None:
    """Core on raw arrays.

    Returns None if the composite keys would overflow, else ``(perm, parent, depth,
    self, n_crossing, n_slow, passes, end)`` where the arrays are in sorted positions
    (``perm`` maps them to rows) and ``parent`` holds positions (-1 for roots).
    """
    n = len(s)
    base = int(s.min())
    span = int(e.max()) - base + 1
    if (int(tid.max()) + 1) * span >= _KEY_LIMIT:
        return None
    perm, ks = track_order(tid, s, e, eid, span, base)
    dur_rows = e - s
    dur = dur_rows[perm]
    del dur_rows
    ke = ks + dur

    # vectorized pass: exact depth, candidate parent, certification; the arrays that are
    # not needed yet are gathered after the depth pass, the largest temporary
    depth = depth_of(ks, ke)
    parent = candidate_parent(depth)
    # a candidate parent is in its child's track, where key differences are time differences:
    # the keys certify exactly as the times would, and no time arrays are gathered for it
    bad = uncertified(None, parent, depth, ks, ke)
    if not bad.any():
        del bad, ks, ke
        return perm, parent, depth, self_nested(parent, dur, n), 0, 0, 1, e[perm]
    s_ = s[perm]
    e_ = e[perm]
    cross, aff, passes = set_crossing_aside(parent, bad, ks, ke, s_, e_)
    self_t = self_nested(parent, dur, n)  # exact for the nested events away from crossings
    self_t[cross] = 0
    n_crossing, n_slow = resolve_crossing(parent, self_t, cross, aff, ks, ke, s_, e_, ks // span, span)
    return perm, parent, depth, self_t, n_crossing, n_slow, 1 + passes, e_


def nest(events: pl.DataFrame, *, by: Sequence[str]) -> pl.DataFrame:
    """Add per-track nesting columns (see the module docstring for the exact definitions).

    Parameters
    ----------
    events : pl.DataFrame
        ``event_id`` (unique), ``start_ns``, ``end_ns`` (Int64, ``end >= start``), the
        ``by`` columns and any other columns.
    by : sequence of str
        Track key columns; nulls are ordinary key values.  Empty means one track.

    Returns
    -------
    pl.DataFrame
        ``events`` (same rows, same order) plus ``parent_id`` (Int64, null for roots),
        ``depth`` (Int32), ``self_ns`` (Int64) and ``overrun_ns`` (Int64).  Existing
        columns of those names are replaced.

    Raises
    ------
    ValueError
        Missing columns, nulls in the time/id columns, ``end_ns < start_ns``.

    Notes
    -----
    :func:`nest_stats` then returns this call's :class:`NestStats` (e.g. ``slow_share``,
    the fraction of events that took the exact Python slow path).
    """
    by = list(by)
    eid, s, e = _validate(events, by)
    tid, n_tracks = track_ids(events, by)
    n = len(s)
    if n == 0:
        _local.stats = NestStats(0, 0, 0, 0, 0)
        return events.with_columns(
            pl.lit(None, pl.Int64).alias("parent_id"),
            pl.lit(0, pl.Int32).alias("depth"),
            pl.lit(0, pl.Int64).alias("self_ns"),
            pl.lit(0, pl.Int64).alias("overrun_ns"),
        )
    res = _nest_arrays(tid, s, e, eid)
    if res is None:  # composite keys would overflow: one track at a time
        res = _nest_per_track(tid, n_tracks, s, e, eid)
    perm, parent, depth, self_t, n_crossing, n_slow, passes, e_ = res
    del res, tid
    root = depth == 0  # exactly where parent is -1 (parent_id is nulled there below)
    np.maximum(parent, 0, out=parent)
    overrun = np.take(e_, parent)
    np.subtract(e_, overrun, out=overrun)
    np.maximum(overrun, 0, out=overrun)
    overrun[root] = 0
    del e_
    # parent positions -> parent rows -> parent event ids, in place (valid indices: no buffered copy)
    np.take(perm, parent, out=parent, mode="clip")
    np.take(eid, parent, out=parent, mode="clip")

    def in_rows(sorted_values: np.ndarray, dtype: type | None = None) -> np.ndarray:
        """Values given in sorted positions, put back in row order (one array at a time)."""
        out = np.empty(n, dtype=dtype or sorted_values.dtype)
        out[perm] = sorted_values
        return out

    # one column at a time, each freed once in row order: no frame-wide gather
    depth_col = pl.Series("depth", in_rows(depth, np.int32))  # numpy arrays are adopted, not copied
    del depth
    self_col = pl.Series("self_ns", in_rows(self_t))
    del self_t
    # all zero in a properly nested trace: a literal then, materialized only where it is read
    overrun_col = (pl.Series("overrun_ns", in_rows(overrun)) if overrun.any()
                   else pl.lit(0, pl.Int64).alias("overrun_ns"))
    del overrun
    parent_col = pl.Series("parent_id", in_rows(parent))
    del parent
    _local.stats = NestStats(n, n_tracks, n_crossing, n_slow, passes)
    return events.with_columns(parent_col, depth_col, self_col, overrun_col).with_columns(
        pl.when(pl.col("depth") > 0).then(pl.col("parent_id")).alias("parent_id"))


def _nest_per_track(tid: np.ndarray, n_tracks: int, s: np.ndarray, e: np.ndarray, eid: np.ndarray) -> _Result:
    """Fallback when (track, time) keys do not fit in int64: solve each track alone."""
    n = len(s)
    order = np.argsort(tid, kind="stable")
    bounds = np.searchsorted(tid[order], np.arange(n_tracks + 1))
    perm = np.empty(n, dtype=np.int64)
    parent = np.empty(n, dtype=np.int64)
    depth = np.empty(n, dtype=np.int64)
    self_t = np.empty(n, dtype=np.int64)
    n_cross = n_slow = passes = 0
    for t in range(n_tracks):
        lo, hi = int(bounds[t]), int(bounds[t + 1])
        rows = order[lo:hi]
        res = _nest_arrays(np.zeros(hi - lo, dtype=np.int64), s[rows], e[rows], eid[rows])
        if res is None:  # a single track spanning >= 2**62 ns: plain sweep
            res = _nest_sweep_track(s[rows], e[rows], eid[rows])
        p, par, dep, st, nc, ns, ps, _ = res
        perm[lo:hi] = rows[p]
        parent[lo:hi] = np.where(par >= 0, par + lo, -1)
        depth[lo:hi] = dep
        self_t[lo:hi] = st
        n_cross, n_slow, passes = n_cross + nc, n_slow + ns, max(passes, ps)
    return perm, parent, depth, self_t, n_cross, n_slow, passes, e[perm]


def _nest_sweep_track(s: np.ndarray, e: np.ndarray, eid: np.ndarray) -> _Result:
    """Whole track by the Python sweep (only for absurd time spans)."""
    perm = np.lexsort((eid, np.invert(e), s)).astype(np.int64)
    ss, ee = s[perm].tolist(), e[perm].tolist()
    lo, hi = (min(ss), max(ee)) if ss else (0, 0)
    parent, self_t, _ = sweep(ss, ee, [True] * len(ss), [(0, len(ss), [(lo, hi)])])
    depth: list[int] = []
    active: list[int] = []
    for i, si in enumerate(ss):
        active = [j for j in active if ee[j] > si]
        depth.append(len(active))
        if ee[i] > si:
            active.append(i)
    def as64(x: list[int]) -> np.ndarray:
        return np.asarray(x, dtype=np.int64)
    return perm, as64(parent), as64(depth), as64(self_t), 0, len(ss), 1, as64(ee)
