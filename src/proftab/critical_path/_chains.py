"""The chains of the dependency graph: each host thread's points in time order, each stream's work in order.

* **thread order** - each host thread's start and end points in time order form a chain; the edge
  between two consecutive points is CPU time of the innermost op open there (its self time), so
  nesting and program order are one chain. Idle time on a thread is an `idle` edge.
* **stream order** - each GPU stream is a chain ``start -> end -> next start ...``: the activity
  itself, then the gap before the next one (`stream_gap`, bound by launch overhead: the device's
  latency between an activity and the next one already queued).

Times are relative to each window's start; nodes are numbered host points first (window and
thread, time order), then device points (two per work item, in `dev` order).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import numpy as np
import polars as pl

from proftab.critical_path._segments import BOUND_CODE, KIND_CODE
from proftab.intervals.dag import chain_heads

if TYPE_CHECKING:
    from proftab.critical_path._windows import WindowRows

__all__ = ["DeviceChains", "HostChains", "device_chains", "host_chains", "with_stream_free"]


def with_stream_free(activities: pl.DataFrame) -> pl.DataFrame:
    """`activities` plus `free_ns`: when each device work item's stream became free of earlier
    work (the latest end of the work before it on its stream; null for the first, and for syncs)."""
    work_kind = pl.col("kind").cast(pl.String).is_in(["kernel", "memcpy", "memset"])
    free = (activities.filter(work_kind).sort("rank", "device", "stream", "start_ns", "end_ns")
            .select("rank", "event_id",
                    pl.col("end_ns").cum_max().shift(1).over("rank", "device", "stream").alias("free_ns")))
    return activities.join(free, on=["rank", "event_id"], how="left", maintain_order="left")


class HostChains(NamedTuple):
    """The host points (two per host row) in chain order, and per host row its nodes and times."""

    row: np.ndarray  # host row of each point
    is_end: np.ndarray  # the point is its row's end
    t: np.ndarray  # time of each point
    head: np.ndarray  # the point starts a chain (a thread's first in its window)
    w: np.ndarray  # chain edge weight into each point
    owner: np.ndarray  # host row whose time the chain edge is (-1: idle)
    kind: np.ndarray  # segment kind code of the chain edge
    bound: np.ndarray  # bound-by code of the chain edge
    start_node: np.ndarray  # per host row: the node of its start
    end_node: np.ndarray  # per host row: the node of its end
    track: np.ndarray  # per host row: its (window, pid, tid) number
    start: np.ndarray  # per host row: start, relative to its window
    end: np.ndarray  # per host row: effective end, relative to its window


def host_chains(rows: WindowRows, parent_row: np.ndarray) -> HostChains:
    """The host points sorted by (window and thread, time, ends before starts, depth) and their chain edges.

    `parent_row`: each host row's parent row (-1: none). The chain edge after a point is the time
    of the innermost op open there: the op itself after its start, its parent after its end.
    """
    host, nh = rows.host, rows.host.height
    h_w0 = rows.lo[rows.hwin]
    hs = host["start_ns"].to_numpy() - h_w0
    he = host["end_eff"].to_numpy() - h_w0
    depth = host["depth"].to_numpy().astype(np.int64)
    track = host.select(pl.struct("win", "pid", "tid").rank("dense")).to_series().to_numpy().astype(np.int64)
    zero = he == hs
    all_rows = np.arange(nh)
    p_row = np.concatenate([all_rows, all_rows])
    p_end = np.concatenate([np.zeros(nh, bool), np.ones(nh, bool)])
    p_t = np.concatenate([hs, he])
    p_cls = np.concatenate([np.ones(nh, np.int64), np.where(zero, 1, 0)])
    p_d = np.concatenate([depth, np.where(zero, depth, -depth)])
    p_sub = p_end.astype(np.int64)
    order = np.lexsort((p_sub, p_row, p_d, p_cls, p_t, np.concatenate([track, track])))
    p_row, p_end, p_t = p_row[order], p_end[order], p_t[order]
    p_track = np.concatenate([track, track])[order]
    h_head = chain_heads(p_track)
    h_w = np.where(h_head, 0, p_t - np.roll(p_t, 1))
    # the innermost open op after each point: the op itself after its start, its parent after its end
    after = np.where(p_end, parent_row[p_row], p_row)
    h_owner = np.where(h_head, -1, np.roll(after, 1))
    host_kind = host["kind"].replace_strict(KIND_CODE, return_dtype=pl.Int8).to_numpy()
    host_bound = host["bound"].to_numpy().astype(np.int8)
    h_wk = np.where(h_owner >= 0, host_kind[np.maximum(h_owner, 0)] if nh else 0, KIND_CODE["idle"])
    h_wb = np.where(h_owner >= 0, host_bound[np.maximum(h_owner, 0)] if nh else 0, BOUND_CODE["cpu_bound"])
    start_node = np.empty(nh, np.int64)
    end_node = np.empty(nh, np.int64)
    pos = np.arange(2 * nh)
    start_node[p_row[~p_end]] = pos[~p_end]
    end_node[p_row[p_end]] = pos[p_end]
    return HostChains(row=p_row, is_end=p_end, t=p_t, head=h_head, w=h_w, owner=h_owner, kind=h_wk, bound=h_wb,
                      start_node=start_node, end_node=end_node, track=track, start=hs, end=he)


class DeviceChains(NamedTuple):
    """The device points (start, end of each work item in `dev` order), numbered after the host points."""

    t: np.ndarray  # time of each point
    head: np.ndarray  # the point starts a chain (a stream's first in its window)
    w: np.ndarray  # chain edge weight into each point
    owner: np.ndarray  # event row (host rows first) whose time the chain edge is
    kind: np.ndarray  # segment kind code of the chain edge (`stream_gap` into a start)
    bound: np.ndarray  # bound-by code of the chain edge
    start_node: np.ndarray  # per work item: the node of its start
    end_node: np.ndarray  # per work item: the node of its end
    start: np.ndarray  # per work item: start, relative to its window
    free: np.ndarray  # per work item: when its stream became free, relative to its window


def device_chains(rows: WindowRows) -> DeviceChains:
    """Per (window, device, stream): start, end, next start ...; the gap's bound: launch latency, or compute
    before a stream's first activity and when the stream was busy for most of the gap with earlier work."""
    dev, nh, nd = rows.dev, rows.host.height, rows.dev.height
    d_w0 = rows.lo[rows.dwin]
    ds = dev["start_ns"].to_numpy() - d_w0
    de = dev["end_ns"].to_numpy() - d_w0
    d_track = dev.select(pl.struct("win", "device", "stream").rank("dense")).to_series().to_numpy().astype(np.int64)
    d_t = np.empty(2 * nd, np.int64)
    d_t[0::2], d_t[1::2] = ds, de
    d_tr = np.repeat(d_track, 2)
    d_head = chain_heads(d_tr)
    d_w = np.where(d_head, 0, d_t - np.roll(d_t, 1))
    d_owner = np.repeat(np.arange(nd) + nh, 2)
    dev_kind = dev["kind"].replace_strict(KIND_CODE, return_dtype=pl.Int8).to_numpy()
    dev_bound = dev["bound"].to_numpy().astype(np.int8)
    d_wk = np.empty(2 * nd, np.int8)
    d_wk[1::2] = dev_kind
    d_wk[0::2] = KIND_CODE["stream_gap"]
    d_wb = np.repeat(dev_bound, 2)
    # gap: launch latency; before a stream's first activity, or when the stream was busy for most of
    # the gap with work outside the graph (launched in an earlier window): the stream's earlier work
    free = dev["free_ns"]
    free_rel = np.where(free.is_null().to_numpy(), d_w0, free.fill_null(0).to_numpy()) - d_w0
    prev_end = np.roll(de, 1)
    busy = (~d_head[0::2]) & ((free_rel - prev_end) > (ds - free_rel))
    d_wb[0::2] = np.where(d_head[0::2] | busy, BOUND_CODE["gpu_compute_bound"], BOUND_CODE["launch_overhead"])
    dev_start = 2 * nh + 2 * np.arange(nd)
    return DeviceChains(t=d_t, head=d_head, w=d_w, owner=d_owner, kind=d_wk, bound=d_wb, start_node=dev_start,
                        end_node=dev_start + 1, start=ds, free=free_rel)
