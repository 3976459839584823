"""Nesting, step 4: crossing events (partial overlaps) set aside, and the events they affect re-solved
exactly (`proftab.intervals.nest`).

`set_crossing_aside` re-runs the vectorized pass on the overlap-connected components that do
not certify, setting uncertified events aside until the rest does. `resolve_crossing` then
re-solves the slow set (the crossing events, the nested events open at their starts and the
children of those that overlap a crossing event) by a Python `sweep`: a stack for parents,
and two heaps giving the self time inside the crossing events' spans with and without them.
"""

from __future__ import annotations

import heapq

import numpy as np

from proftab.intervals._nest_levels import candidate_parent, depth_of, uncertified

__all__ = ["resolve_crossing", "set_crossing_aside", "sweep"]


def set_crossing_aside(parent: np.ndarray, bad: np.ndarray, ks: np.ndarray, ke: np.ndarray, s_: np.ndarray,
                       e_: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """Set the crossing events aside until the rest certifies; `parent` is updated in place.

    `bad`: the uncertified events of the first pass (consumed: it becomes the crossing set).
    Only the overlap-connected top-level components holding uncertified events are re-checked
    (a component's events see no event outside it), and after the first re-check only those
    where events were newly set aside. Returns (crossing events, events of the affected
    components, passes run).
    """
    n = len(ks)
    new_comp = np.ones(n, dtype=bool)
    np.greater_equal(ks[1:], np.maximum.accumulate(ke)[:-1], out=new_comp[1:])
    comp = np.cumsum(new_comp) - 1
    del new_comp
    n_comp = int(comp[-1]) + 1
    cross = bad
    check = np.zeros(n_comp, dtype=bool)
    check[comp[bad]] = True
    aff = check = check[comp]
    passes = 0
    while True:
        parent[check] = -1
        lpos = np.flatnonzero(check & ~cross)
        if not len(lpos):
            break
        ldepth = depth_of(ks[lpos], ke[lpos])
        lpar = candidate_parent(ldepth)
        parent[lpos] = np.where(lpar >= 0, lpos[np.maximum(lpar, 0)], -1)
        lbad = uncertified(lpos, parent[lpos], ldepth, s_, e_)
        passes += 1
        if not lbad.any():
            break
        cross[lpos[lbad]] = True
        check = np.zeros(n_comp, dtype=bool)
        check[comp[lpos[lbad]]] = True
        check = check[comp]
    return cross, aff, passes


def _slow_set(parent: np.ndarray, cross: np.ndarray, aff: np.ndarray, ks: np.ndarray, ke: np.ndarray,
              s_: np.ndarray, e_: np.ndarray, tid_: np.ndarray
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The events to re-solve: crossing events, the nested events open at their starts (chains),
    and the children of chain members (or nested roots) overlapping a crossing event.

    Returns (crossing positions, chain members, slow positions, merged window starts and ends
    of the crossing events, as keys).
    """
    n = len(ks)
    xpos = np.flatnonzero(cross)
    wl, wr = ks[xpos], ke[xpos]
    new_w = np.ones(len(xpos), dtype=bool)
    new_w[1:] = wl[1:] > np.maximum.accumulate(wr)[:-1]
    wl = wl[new_w]
    wr = np.maximum.reduceat(wr, np.flatnonzero(new_w))
    last_nested = np.maximum.accumulate(np.where(cross, -1, np.arange(n)))
    c = np.where(xpos > 0, last_nested[np.maximum(xpos - 1, 0)], -1)
    c[(c >= 0) & (tid_[np.maximum(c, 0)] != tid_[xpos])] = -1
    while True:
        up = (c >= 0) & (e_[np.maximum(c, 0)] <= s_[xpos])
        if not up.any():
            break
        c[up] = parent[c[up]]
    chain = np.zeros(n, dtype=bool)
    cur = np.unique(c[c >= 0])
    while len(cur):
        cur = cur[~chain[cur]]
        chain[cur] = True
        cur = np.unique(parent[cur][parent[cur] >= 0])
    kid = aff & ~cross & ~chain & np.where(parent >= 0, chain[np.maximum(parent, 0)], True)
    ki = np.flatnonzero(kid)
    j = np.searchsorted(wl, np.maximum(ke[ki], ks[ki] + 1), side="left") - 1
    ki = ki[(j >= 0) & (wr[np.maximum(j, 0)] > ks[ki])]
    slow = np.zeros(n, dtype=bool)
    slow[xpos] = True
    slow[chain] = True
    slow[ki] = True
    return xpos, chain, np.flatnonzero(slow), wl, wr


def resolve_crossing(parent: np.ndarray, self_t: np.ndarray, cross: np.ndarray, aff: np.ndarray, ks: np.ndarray,
                     ke: np.ndarray, s_: np.ndarray, e_: np.ndarray, tid_: np.ndarray, span: int) -> tuple[int, int]:
    """Exact parents and self times of the slow set (`_slow_set`), written into `parent` and
    `self_t` in place (`self_t` holds the nested answer, 0 for crossing events). Returns
    (crossing events, slow events)."""
    xpos, chain, spos, wl, wr = _slow_set(parent, cross, aff, ks, ke, s_, e_, tid_)
    g_first = np.flatnonzero(np.concatenate(([True], tid_[spos][1:] != tid_[spos][:-1])))
    g_bounds = np.append(g_first, len(spos))
    g_track = ks[spos[g_first]] // span
    w_track = wl // span
    w_lo = np.searchsorted(w_track, g_track, side="left")
    w_hi = np.searchsorted(w_track, g_track, side="right")
    wl_l, wr_l = wl.tolist(), wr.tolist()
    groups = [
        (int(g_bounds[i]), int(g_bounds[i + 1]),
         list(zip(wl_l[w_lo[i] : w_hi[i]], wr_l[w_lo[i] : w_hi[i]], strict=True)))
        for i in range(len(g_first))
    ]
    local, st_all, st_nested = sweep(ks[spos].tolist(), ke[spos].tolist(), cross[spos].tolist(), groups)
    lp = np.asarray(local, dtype=np.int64)
    parent[spos] = np.where(lp >= 0, spos[np.maximum(lp, 0)], -1)
    fix = cross[spos] | chain[spos]
    delta = np.asarray(st_all, dtype=np.int64) - np.asarray(st_nested, dtype=np.int64)
    self_t[spos[fix]] += delta[fix]
    return len(xpos), len(spos)


def sweep(ks: list[int], ke: list[int], is_x: list[bool], groups: list[tuple[int, int, list[tuple[int, int]]]]
           ) -> tuple[list[int], list[int], list[int]]:
    """Exact parents and self times of a small set of events, per track.

    ``ks``/``ke``: (track, time) keys of the events, each track's events contiguous and
    in order; ``is_x``: crossing flags; ``groups``: (lo, hi, windows) per track where
    windows are the merged spans of the crossing events.  Returns local parent indices
    (-1 for none), the self time inside the windows, and the self time inside the windows
    that the same sweep gives without the crossing events.
    """
    n = len(ks)
    parent = [-1] * n
    self_all = [0] * n
    self_nested = [0] * n
    push, pop = heapq.heappush, heapq.heappop
    for lo, hi, wins in groups:
        stack: list[int] = []
        for i in range(lo, hi):
            si = ks[i]
            while stack and ke[stack[-1]] <= si:
                stack.pop()
            if stack:
                parent[i] = stack[-1]
            if ke[i] > si:
                stack.append(i)
        times = sorted({*ks[lo:hi], *ke[lo:hi], *(x for w in wins for x in w)})
        h_all: list[int] = []
        h_nested: list[int] = []
        ptr, wi = lo, 0
        for k in range(len(times) - 1):
            t = times[k]
            while ptr < hi and ks[ptr] <= t:
                if ke[ptr] > ks[ptr]:
                    push(h_all, -ptr)
                    if not is_x[ptr]:
                        push(h_nested, -ptr)
                ptr += 1
            while wi < len(wins) and wins[wi][1] <= t:
                wi += 1
            if wi == len(wins) or wins[wi][0] > t:
                continue  # outside every window: the nested answer stands
            dt = times[k + 1] - t
            while h_all and ke[-h_all[0]] <= t:
                pop(h_all)
            if h_all:
                self_all[-h_all[0]] += dt
            while h_nested and ke[-h_nested[0]] <= t:
                pop(h_nested)
            if h_nested:
                self_nested[-h_nested[0]] += dt
    return parent, self_all, self_nested
