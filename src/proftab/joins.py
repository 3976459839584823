"""Joins of trace tables with other telemetry: sampled series and interval tables.

* :func:`join_samples` -- as-of join of sampled telemetry (GPU power, utilization, ...):
  the latest sample at or before each event start, plus optional aggregates of the
  samples inside each event and time-weighted means.
* :func:`overlaps` -- every overlapping pair of two interval tables (ops x GC pauses,
  kernels x power-capping episodes), with the overlap in ns; the engine is
  :mod:`proftab.intervals.overlap`.

Times are compared as Int64 nanoseconds.  Both functions accept either relative
``*_ns`` columns (the trace's own axis) or absolute ``Datetime`` columns (e.g.
``start_utc`` / ``end_utc`` from :meth:`proftab.Trace.with_utc`); the two sides must use
the same kind.  Intervals are half-open ``[start, end)``.  Null keys never match.
"""

from __future__ import annotations

import datetime as dt
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import polars as pl

from proftab.exceptions import ProftabError, ProftabWarning
from proftab.intervals.overlap import _expand, group_ids, overlap_join

__all__ = ["join_samples", "overlaps"]

Frame = pl.DataFrame | pl.LazyFrame


def _collect(df: Frame) -> pl.DataFrame:
    return df.collect() if isinstance(df, pl.LazyFrame) else df


def _keys(by: str | Sequence[str] | Mapping[str, str] | None) -> tuple[list[str], list[str]]:
    """(left keys, right keys) from `by`: a name, a list of names, or {left: right}."""
    if by is None:
        return [], []
    if isinstance(by, str):
        return [by], [by]
    if isinstance(by, Mapping):
        return list(by), list(by.values())
    return list(by), list(by)


def _as_ns(df: pl.DataFrame, cols: Sequence[str], what: str) -> tuple[pl.DataFrame, str | None]:
    """Replace the time columns `cols` by Int64 ns; returns the time zone when Datetime.

    Raises ProftabError for a missing column, a wrong dtype or mixed kinds.
    """
    missing = [c for c in cols if c not in df.columns]
    if missing:
        hint = (" (Hint: absolute times need `start_utc`/`end_utc`: use tr.with_utc(events))"
                if any(c.endswith("_utc") for c in missing) else "")
        msg = f"{what} has no column(s) {missing}; columns: {df.columns[:12]}{hint}"
        raise ProftabError(msg)
    kinds = {type(df.schema[c]) for c in cols}
    if len(kinds) > 1:
        msg = f"{what} time columns {list(cols)} mix dtypes {[str(df.schema[c]) for c in cols]}"
        raise ProftabError(msg)
    dtype = df.schema[cols[0]]
    if isinstance(dtype, pl.Datetime):
        tz = dtype.time_zone
        conv = [pl.col(c).cast(pl.Datetime("ns", tz)).cast(pl.Int64).alias(c) for c in cols]
        return df.with_columns(conv), tz or "naive"
    if dtype.is_integer():
        return df.with_columns([pl.col(c).cast(pl.Int64) for c in cols]), None
    msg = (f"{what} time column {cols[0]!r} is {dtype}; expected Int64 nanoseconds or Datetime "
           "(never a float)")
    raise ProftabError(msg)


def _check_same_axis(left_tz: str | None, right_tz: str | None, left: str, right: str) -> None:
    if (left_tz is None) != (right_tz is None):
        msg = (f"{left} and {right} mix Int64 ns and Datetime times; use Datetime on both sides "
               "(Hint: tr.with_utc(events) adds start_utc/end_utc)")
        raise ProftabError(msg)
    if left_tz != right_tz:
        msg = (f"{left} times are in time zone {left_tz!r} but {right} times in {right_tz!r} "
               "(Hint: .dt.replace_time_zone('UTC') on naive UTC timestamps)")
        raise ProftabError(msg)


def _fix_negative(df: pl.DataFrame, start: str, end: str, what: str) -> pl.DataFrame:
    """Intervals with end < start become points at start, with a ProftabWarning."""
    bad = df.select((pl.col(end) < pl.col(start)).sum()).item()
    if bad:
        warnings.warn(f"{what}: {bad} interval(s) with {end} < {start} treated as zero-length at {start}",
                      ProftabWarning, stacklevel=3)
        df = df.with_columns(pl.max_horizontal(start, end).alias(end))
    return df


def overlaps(left: Frame, right: Frame, *, by: str | Sequence[str] | Mapping[str, str] | None = None,
             left_on: Sequence[str] = ("start_ns", "end_ns"), right_on: Sequence[str] | None = None,
             suffix: str = "_right", how: Literal["inner", "left"] = "inner") -> Frame:
    """Every overlapping pair of intervals of `left` and `right`, with `overlap_ns`.

    Answers questions such as "which ops ran during a GC pause", "which kernels ran inside
    an NCCL timeout window", "how much of each step fell in a power-capping episode".

    Parameters
    ----------
    left, right
        DataFrames or LazyFrames with interval bounds: Int64 ns (``start_ns``/``end_ns``,
        the default) or ``Datetime`` columns (e.g. ``left_on=("start_utc", "end_utc")``);
        both sides of the same kind (and time zone).
    by
        Keys that must match: a column name, a list of names, or ``{left: right}`` when
        the names differ.  A null key never matches.
    left_on, right_on
        ``(start, end)`` columns; `right_on` defaults to `left_on`.
    suffix
        Appended to right column names that clash with left ones.
    how
        ``"inner"`` (pairs only) or ``"left"`` (also left rows without any overlap).

    Returns
    -------
    polars.DataFrame or polars.LazyFrame
        One row per overlapping pair: the left columns, the right columns (less its `by`
        keys) and ``overlap_ns`` = ``min(ends) - max(starts)`` (Int64; 0 for a point
        inside an interval).  Ordered by left row, then right row.  Lazy when `left` is.

    Notes
    -----
    Intervals are half-open: ``[0, 10)`` and ``[10, 20)`` do not overlap.  A zero-length
    interval ``[t, t)`` pairs with intervals that hold ``t``.  Rows with ``end < start``
    are treated as zero-length (with a :class:`~proftab.ProftabWarning`).

    Examples
    --------
    >>> import polars as pl, proftab as pt
    >>> ops = pl.DataFrame({"name": ["a", "b"], "start_ns": [0, 50], "end_ns": [40, 90]})
    >>> gc = pl.DataFrame({"start_ns": [30], "end_ns": [60]})
    >>> pt.overlaps(ops, gc)["overlap_ns"].to_list()
    [10, 10]
    """
    lazy = isinstance(left, pl.LazyFrame)
    ldf, rdf = _collect(left), _collect(right)
    right_on = tuple(left_on) if right_on is None else tuple(right_on)
    left_on = tuple(left_on)
    for cols, name in ((left_on, "left_on"), (right_on, "right_on")):
        if len(cols) != 2:
            msg = f"overlaps: {name} must be (start, end), got {cols!r}"
            raise ProftabError(msg)
    lk, rk = _keys(by)
    lt, ltz = _as_ns(ldf.select(list(left_on)), left_on, "left")
    rt, rtz = _as_ns(rdf.select(list(right_on)), right_on, "right")
    _check_same_axis(ltz, rtz, "left", "right")
    for frame, cols, what in ((lt, left_on, "left"), (rt, right_on, "right")):
        nulls = frame.null_count().sum_horizontal().item()
        if nulls:
            msg = f"overlaps: {what} has {nulls} null value(s) in {list(cols)}; filter them out first"
            raise ProftabError(msg)
    missing = [c for c in lk if c not in ldf.columns] + [c for c in rk if c not in rdf.columns]
    if missing:
        msg = f"overlaps: key column(s) {missing} not found"
        raise ProftabError(msg)
    lt = _fix_negative(lt, left_on[0], left_on[1], "overlaps left")
    rt = _fix_negative(rt, right_on[0], right_on[1], "overlaps right")
    # the engine sees Int64 bounds under private names; the user's columns pass through
    lb = ldf.with_columns(lt.get_column(left_on[0]).alias("_ov_s"), lt.get_column(left_on[1]).alias("_ov_e"))
    rb = rdf.with_columns(rt.get_column(right_on[0]).alias("_ov_s"), rt.get_column(right_on[1]).alias("_ov_e"))
    out = overlap_join(lb, rb, by=lk, right_by=rk, left_on=("_ov_s", "_ov_e"), right_on=("_ov_s", "_ov_e"),
                       suffix=suffix, how=how)
    out = out.drop("_ov_s", "_ov_e", f"_ov_s{suffix}", f"_ov_e{suffix}", strict=False)
    return out.lazy() if lazy else out


def _tolerance_ns(tolerance: int | dt.timedelta | None) -> int | None:
    if tolerance is None:
        return None
    if isinstance(tolerance, dt.timedelta):
        return (tolerance.days * 86_400 + tolerance.seconds) * 1_000_000_000 + tolerance.microseconds * 1000
    if isinstance(tolerance, int | np.integer) and tolerance >= 0:
        return int(tolerance)
    msg = f"tolerance must be a non-negative int (ns) or a timedelta, not {tolerance!r}"
    raise ProftabError(msg)


def join_samples(events: Frame, samples: Frame, *, time: str = "time",
                 by: str | Sequence[str] | Mapping[str, str] | None = None,
                 event_time: Sequence[str] | None = None, tolerance: int | dt.timedelta | None = None,
                 agg: Sequence[pl.Expr] | None = None, time_weighted: Sequence[str] | None = None,
                 suffix: str = "_sample") -> Frame:
    """Attach sampled telemetry to events: as-of sample, samples inside, time-weighted means.

    Parameters
    ----------
    events
        Events with a start and end: ``start_ns``/``end_ns`` when `samples[time]` is an
        integer (same time axis), ``start_utc``/``end_utc`` when it is a ``Datetime``
        (see :meth:`proftab.Trace.with_utc`); override with `event_time`.
    samples
        One row per sample: the `time` column and any value columns.
    time
        Name of the samples' time column (Int64 ns or Datetime of any unit).
    by
        Keys that must match: a name, a list, or ``{event_col: sample_col}`` (e.g.
        ``{"device": "gpu"}``).  A null key never matches.
    event_time
        ``(start, end)`` columns of `events`.
    tolerance
        Maximum age of the as-of sample (ns or timedelta); older samples give nulls.
    agg
        Polars expressions over the samples with ``start <= time < end`` (e.g.
        ``pl.col("power_w").mean().alias("power_w_mean")``); adds them and
        ``n_samples`` (samples inside).  An event with no sample inside gets nulls.
    time_weighted
        Value columns whose time-weighted mean over ``[start, end)`` is added as
        ``<col>_tw_mean``: each sample's value holds until the next sample of its group
        (a zero-length event gets the as-of value).  Null when no sample is at or before
        the start (within `tolerance`).

    Returns
    -------
    polars.DataFrame or polars.LazyFrame
        `events` (same rows, same order) plus the as-of sample's columns (`time` and the
        value columns; `by` keys of the samples dropped; clashing names get `suffix`),
        then the `agg` columns, ``n_samples`` and the ``*_tw_mean`` columns.  Lazy when
        `events` is.

    Examples
    --------
    >>> import polars as pl, proftab as pt
    >>> ev = pl.DataFrame({"start_ns": [5, 25], "end_ns": [25, 26]})
    >>> s = pl.DataFrame({"time": [0, 10, 20], "power_w": [100.0, 200.0, 300.0]})
    >>> out = pt.join_samples(ev, s, time="time", time_weighted=["power_w"])
    >>> out.select("power_w", "power_w_tw_mean").rows()
    [(100.0, 200.0), (300.0, 300.0)]
    """
    lazy = isinstance(events, pl.LazyFrame)
    ev, sm = _collect(events), _collect(samples)
    on = _sample_axis(ev, sm, time=time, by=by, event_time=event_time, time_weighted=time_weighted,
                      tolerance=tolerance)
    tol = on.tolerance_ns
    # samples in (group, time) order; events look up their ranges with searchsorted
    order = np.lexsort((on.t, on.sg))
    tg, sgs = on.t[order], on.sg[order]
    # per-group search: position in the sorted samples of (group, time)
    lo = _search(sgs, tg, on.eg, on.es, "left")
    hi = _search(sgs, tg, on.eg, on.ee, "left")
    asof = _search(sgs, tg, on.eg, on.es, "right") - 1
    valid = (on.eg >= 0) & (asof >= 0)
    if len(tg):
        valid &= sgs[np.maximum(asof, 0)] == on.eg
        if tol is not None:
            valid &= (on.es - tg[np.maximum(asof, 0)]) <= tol
    day = 86_400 * 10**9  # disjoint by more than a day: relative ns vs epoch ns, most likely
    if len(on.t) and len(on.es) and not valid.any() and (on.t.min() > on.es.max() + day
                                                         or on.t.max() + day < on.es.min()):
        warnings.warn("join_samples: no sample lies at or before any event start; are both on the same "
                      "time axis? (Hint: Datetime samples join with tr.with_utc(events))",
                      ProftabWarning, stacklevel=2)

    value_cols = [c for c in sm.columns if c not in on.sk]
    rename = {c: f"{c}{suffix}" for c in value_cols if c in ev.columns}
    picked = sm.select(value_cols).rename(rename)[order]
    rows = np.where(valid, asof, 0)
    attached = picked[rows] if picked.height else pl.DataFrame(schema=picked.schema).clear(len(rows))
    mask = pl.Series(valid)
    attached = attached.select([pl.when(mask).then(pl.col(c)).otherwise(None).alias(c) for c in attached.columns])
    out = pl.concat([ev, attached], how="horizontal")
    if agg or time_weighted:
        out = out.with_columns(_inside(sm, on, order, lo, hi, rows, valid, agg=agg, time_weighted=time_weighted))
    return out.lazy() if lazy else out


@dataclass(frozen=True)
class _Axis:
    """Events and samples on one Int64 ns axis: event bounds `es`/`ee` (end >= start), sample
    times `t`, the group of each event `eg` / sample `sg` (-1: a null key, never matched), the
    samples' key columns `sk` and the tolerance in ns."""

    es: np.ndarray
    ee: np.ndarray
    t: np.ndarray
    eg: np.ndarray
    sg: np.ndarray
    sk: list[str]
    tolerance_ns: int | None


def _sample_axis(ev: pl.DataFrame, sm: pl.DataFrame, *, time: str,
                 by: str | Sequence[str] | Mapping[str, str] | None, event_time: Sequence[str] | None,
                 time_weighted: Sequence[str] | None, tolerance: int | dt.timedelta | None) -> _Axis:
    """`join_samples`' inputs checked and put on one axis (raises ProftabError naming what is wrong)."""
    if time not in sm.columns:
        msg = f"samples have no time column {time!r}; columns: {sm.columns[:12]}"
        raise ProftabError(msg)
    stype = sm.schema[time]
    if event_time is None:
        event_time = ("start_utc", "end_utc") if isinstance(stype, pl.Datetime) else ("start_ns", "end_ns")
    s0, e0 = event_time
    et, etz = _as_ns(ev, (s0, e0), "events")
    st, stz = _as_ns(sm.select(time), (time,), "samples")
    _check_same_axis(etz, stz, "events", "samples")
    ek, sk = _keys(by)
    missing = [c for c in ek if c not in ev.columns] + [c for c in sk if c not in sm.columns]
    if missing:
        msg = f"join_samples: key column(s) {missing} not found"
        raise ProftabError(msg)
    for col in time_weighted or ():
        if col not in sm.columns:
            msg = f"join_samples: time_weighted column {col!r} not in samples"
            raise ProftabError(msg)
    tol = _tolerance_ns(tolerance)
    for series, what in ((et.get_column(s0), "events start"), (et.get_column(e0), "events end"),
                         (st.get_column(time), "samples time")):
        if series.null_count():
            msg = (f"join_samples: {series.null_count()} null value(s) in {what} ({series.name!r}); "
                   "filter them out first")
            raise ProftabError(msg)
    es = et.get_column(s0).to_numpy()
    ee = et.get_column(e0).to_numpy()
    neg = ee < es
    if neg.any():
        warnings.warn(f"join_samples: {int(neg.sum())} event(s) with end < start treated as zero-length",
                      ProftabWarning, stacklevel=3)
        ee = np.maximum(ee, es)
    eg, sg = group_ids(ev, sm, ek, sk)
    return _Axis(es, ee, st.get_column(time).to_numpy(), eg, sg, sk, tol)


def _inside(sm: pl.DataFrame, on: _Axis, order: np.ndarray, lo: np.ndarray, hi: np.ndarray, asof: np.ndarray,
            valid: np.ndarray, *, agg: Sequence[pl.Expr] | None, time_weighted: Sequence[str] | None
            ) -> list[pl.Series]:
    """The `agg` columns, ``n_samples`` and the ``*_tw_mean`` columns over the samples inside each event
    (`lo`/`hi`: its range of samples in `order`; `asof`: its as-of sample, meaningful where `valid`)."""
    owner, pos = _expand(np.where(on.eg >= 0, lo, 0), np.where(on.eg >= 0, hi, 0))
    n_inside = np.where(on.eg >= 0, np.maximum(hi - lo, 0), 0)
    extra: list[pl.Series] = []
    if agg:
        inside = sm[order][pos].with_columns(pl.Series("_ev", owner))
        got = inside.group_by("_ev").agg(list(agg))
        full = pl.DataFrame({"_ev": np.arange(len(on.es))}).join(got, on="_ev", how="left").sort("_ev")
        extra.extend(full.drop("_ev").get_columns())
    extra.append(pl.Series("n_samples", n_inside, dtype=pl.Int64))
    tg, sgs = on.t[order], on.sg[order]
    for col in time_weighted or ():
        mean = _tw_mean(sm.get_column(col).cast(pl.Float64).to_numpy()[order], tg, sgs, owner, pos,
                        on.es, on.ee, lo, hi, asof, valid)
        extra.append(mean.alias(f"{col}_tw_mean"))
    return extra


def _search(groups: np.ndarray, times: np.ndarray, g: np.ndarray, x: np.ndarray, side: Literal["left", "right"]
            ) -> np.ndarray:
    """searchsorted of (g, x) in samples sorted by (group, time)."""
    if not len(times):
        return np.zeros(len(x), np.int64)
    base = int(min(times.min(), x.min() if len(x) else 0))
    span = int(max(times.max(), x.max() if len(x) else 0)) - base + 1
    ngroups = int(max(groups.max(), g.max() if len(g) else 0)) + 2
    if ngroups * span < 2**62:
        key = (groups + 1) * span + (times - base)
        found: np.ndarray = np.searchsorted(key, (g + 1) * span + (x - base), side).astype(np.int64)
        return found
    out = np.empty(len(x), np.int64)  # keys would overflow: per group (a loop over groups)
    glo = np.searchsorted(groups, g, "left")
    ghi = np.searchsorted(groups, g, "right")
    for gg in np.unique(g):
        sel = g == gg
        a, b = int(glo[sel][0]), int(ghi[sel][0])
        out[sel] = a + np.searchsorted(times[a:b], x[sel], side)
    return out


def _tw_mean(v: np.ndarray, tg: np.ndarray, sgs: np.ndarray, owner: np.ndarray, pos: np.ndarray,
             es: np.ndarray, ee: np.ndarray, lo: np.ndarray, hi: np.ndarray, asof: np.ndarray,
             valid: np.ndarray) -> pl.Series:
    """Time-weighted mean over [start, end) of the step function held from each sample.

    `v`, `tg`, `sgs`: values, times and groups of the samples in (group, time) order;
    (`owner`, `pos`): every (event, sample inside) pair; `lo`/`hi`: each event's range of
    samples inside; `asof`: its as-of sample (meaningful where `valid`).
    """
    n = len(es)
    nxt = np.full(len(tg), np.iinfo(np.int64).max, np.int64)  # the group's last sample holds on
    if len(tg) > 1:
        same = sgs[1:] == sgs[:-1]
        nxt[:-1] = np.where(same, tg[1:], nxt[:-1])
    piece = np.minimum(nxt[pos], ee[owner]) - tg[pos]
    total = np.bincount(owner, weights=v[pos] * piece, minlength=n)
    # the leading piece [start, first sample inside (or end)) is held by the as-of sample
    first_inside = np.where(hi > lo, tg[np.minimum(lo, max(len(tg) - 1, 0))] if len(tg) else ee, ee)
    lead = first_inside - es
    va = v[np.maximum(asof, 0)] if len(v) else np.full(n, np.nan)
    va = np.where(valid, va, np.nan)
    total = total + np.where(lead > 0, va * lead, 0.0)
    dur = ee - es
    mean = np.where(dur > 0, total / np.maximum(dur, 1), va)
    return pl.Series(np.where(valid, mean, np.nan)).fill_nan(None)
