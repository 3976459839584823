"""Nesting, the sort: events into track-major order, (track, start asc, end desc, id asc) (`proftab.intervals.nest`).

Composite (track, time) keys are packed with the row index into one int64 when they fit, so
the sort is a plain in-place sort; runs of equal starts are then re-sorted by (end desc, id).
"""

from __future__ import annotations

import numpy as np
import polars as pl

__all__ = ["argsort_keys", "track_order"]


def argsort_keys(k: np.ndarray, bound: int) -> tuple[np.ndarray, np.ndarray]:
    """``(perm, k[perm])`` sorting the non-negative keys ``k < bound``; `k` is consumed
    (overwritten) where the keys can be packed."""
    n = len(k)
    row_bits = max(1, (n - 1).bit_length())
    if bound <= 2 ** (63 - row_bits):
        # key and row index packed in one int64, in place: a plain (SIMD) sort, no argsort
        packed = k
        np.left_shift(packed, row_bits, out=packed)
        packed |= np.arange(n)
        # timsort: traces list most events in (track, start) order already, and it sorts such runs in
        # about linear time where quicksort does not (0.01 s against 0.26 s on 1.8 M events); the keys
        # are distinct, so any sort gives the same array
        packed.sort(kind="stable")
        perm = packed & ((1 << row_bits) - 1)
        np.right_shift(packed, row_bits, out=packed)
        return perm, packed
    perm = pl.Series(k).arg_sort().to_numpy().astype(np.int64)
    return perm, k[perm]


def track_order(tid: np.ndarray, s: np.ndarray, e: np.ndarray, eid: np.ndarray, mult: int, base: int
           ) -> tuple[np.ndarray, np.ndarray]:
    """Permutation into (track, start asc, end desc, id asc) order and sorted start keys."""
    keys = tid * mult
    keys += s
    keys -= base
    perm, ks = argsort_keys(keys, (int(tid.max()) + 1) * mult)
    del keys
    if len(ks) < 2:
        return perm, ks
    eq = ks[1:] == ks[:-1]
    if not eq.any():
        return perm, ks
    # runs of equal (track, start): order by end desc, then event_id
    tie = np.zeros(len(ks), dtype=bool)
    tie[1:] |= eq
    tie[:-1] |= eq
    idx = np.flatnonzero(tie)
    sub = perm[idx]
    run = np.cumsum(np.concatenate(([True], ks[idx][1:] != ks[idx][:-1]))) - 1
    dur = e[sub] - s[sub]
    longest = int(dur.max())
    ib, rb, db = (len(idx) - 1).bit_length(), int(run[-1]).bit_length(), longest.bit_length()
    if ib + rb + db > 63:
        perm[idx] = sub[np.lexsort((eid[sub], -dur, run))]
        return perm, ks
    packed = (run << (db + ib)) | ((longest - dur) << ib) | np.arange(len(idx))
    packed.sort()
    o = packed & ((1 << ib) - 1)
    same = packed >> ib  # (run, duration): identical intervals still need the id order
    eq2 = same[1:] == same[:-1]
    if eq2.any():
        dup = np.zeros(len(idx), dtype=bool)
        dup[1:] |= eq2
        dup[:-1] |= eq2
        j = np.flatnonzero(dup)
        o[j] = o[j][np.lexsort((eid[sub[o[j]]], same[j]))]
    perm[idx] = sub[o]
    return perm, ks
