"""Device-side analyses over the linked activities: busy/idle, overlap, copies, categories.

Free functions over frames: each takes the frames it needs, `activities` (from
`proftab.device.activities`), `device_events`, a trace's `events` or `nested`, and returns a
new `polars.DataFrame`; times are Int64 ns. "Work" is kernels, memcpy and memset
(`kind != "sync"`); busy time is the length of the union of work intervals, so overlapping
kernels (several streams, or programmatic dependent launch on one stream) never count twice.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

import numpy as np
import polars as pl

from proftab import kinds
from proftab.calls import STREAM_WAIT, SYNC, any_pattern
from proftab.device._events import event_frame
from proftab.device._rules import LINKS, is_launch
from proftab.exceptions import ProftabError
from proftab.intervals import merge_intervals, nest, union_ns
from proftab.intervals.tree import ancestor_pairs, containing_ancestor, row_positions

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = [
    "annotations", "busy", "comm_overlap", "copies", "copy_summary", "idle", "idle_breakdown",
    "kernel_categories", "launch_delay", "op_device_time", "summary",
]

By = Literal["device", "stream"]
#: host runtime calls that block or make a stream wait (used for the `sync` idle cause; `proftab.calls`)
SYNC_CALL_PATTERN = any_pattern(SYNC, STREAM_WAIT)


def _keys(by: str) -> list[str]:
    if by == "device":
        return ["rank", "device"]
    if by == "stream":
        return ["rank", "device", "stream"]
    msg = f"by must be 'device' or 'stream', not {by!r}"
    raise ValueError(msg)


def _work(activities: pl.DataFrame) -> pl.DataFrame:
    return activities.filter(pl.col("kind") != "sync")


def _union(frame: pl.DataFrame, keys: list[str], name: str) -> pl.DataFrame:
    """Union length of `start_ns`/`end_ns` per `keys`, as column `name`."""
    if frame.is_empty():
        return frame.select(keys).head(0).with_columns(pl.lit(0, pl.Int64).alias(name))
    return union_ns(frame.select(*keys, "start_ns", "end_ns"), by=keys).rename({"union_ns": name})


def _windows(events: pl.DataFrame | None, work: pl.DataFrame, window: str) -> pl.DataFrame:
    """Per (rank, device): `window_start_ns`, `window_end_ns`."""
    if window == "device":
        return work.group_by("rank", "device").agg(pl.col("start_ns").min().alias("window_start_ns"),
                                                   pl.col("end_ns").max().alias("window_end_ns"))
    if window == "trace":
        if events is None:
            msg = "busy(window='trace') needs the events frame (the rank's recorded span)"
            raise ProftabError(msg)
        span = event_frame(events, ["rank", "start_ns", "end_ns"]).group_by("rank").agg(
            pl.col("start_ns").min().alias("window_start_ns"),
            pl.max_horizontal("start_ns", "end_ns").max().alias("window_end_ns"))
        return work.select("rank", "device").unique().join(span, on="rank", how="left")
    msg = f"window must be 'device' or 'trace', not {window!r}"
    raise ValueError(msg)


# --------------------------------------------------------------------------- busy / idle


def busy(activities: pl.DataFrame, events: pl.DataFrame | None = None, *, by: By = "stream",
         window: Literal["device", "trace"] = "device") -> pl.DataFrame:
    """Busy and idle time per stream (or device): union of work intervals.

    Parameters
    ----------
    activities
        `activities(events, device_events)`.
    events
        The events (`rank`, `start_ns`, `end_ns`); needed for `window="trace"` only.
    by
        `"stream"`: one row per `(rank, device, stream)`; `"device"`: per `(rank, device)`,
        the union over its streams.
    window
        `"device"`: from the device's first work start to its last work end (all streams);
        `"trace"`: the rank's whole recorded span.

    Returns
    -------
    pl.DataFrame
        keys, `n_activities`, `sum_ns` (Σ durations), `busy_ns` (union), `overlap_ns`
        (`sum - busy`: time covered more than once), `window_start_ns`, `window_end_ns`,
        `window_ns`, `idle_ns` (`window - busy`), `busy_share` (`busy / window`).
    """
    keys = _keys(by)
    work = _work(activities)
    agg = work.group_by(keys).agg(pl.len().cast(pl.Int64).alias("n_activities"), pl.col("dur_ns").sum().alias("sum_ns"))
    out = agg.join(_union(work, keys, "busy_ns"), on=keys, how="left", nulls_equal=True)
    out = out.join(_windows(events, work, window), on=["rank", "device"], how="left", nulls_equal=True)
    return out.with_columns(
        overlap_ns=pl.col("sum_ns") - pl.col("busy_ns"),
        window_ns=pl.col("window_end_ns") - pl.col("window_start_ns"),
    ).with_columns(
        idle_ns=pl.col("window_ns") - pl.col("busy_ns"),
        busy_share=pl.when(pl.col("window_ns") > 0).then(pl.col("busy_ns") / pl.col("window_ns")).otherwise(None),
    ).select(*keys, "n_activities", "sum_ns", "busy_ns", "overlap_ns", "window_start_ns", "window_end_ns", "window_ns",
             "idle_ns", "busy_share").sort(keys, nulls_last=True)


def _sync_intervals(activities: pl.DataFrame, events: pl.DataFrame, devices: pl.DataFrame) -> pl.DataFrame:
    """Disjoint sync intervals per (rank, device) with `_cum` = covered length before each."""
    dev = activities.filter(pl.col("kind") == "sync").select("rank", "device", "start_ns", "end_ns")
    ev = event_frame(events, ["rank", "cat", "name", "start_ns", "end_ns"])
    host = ev.filter(is_launch(ev) & pl.col("name").str.contains(SYNC_CALL_PATTERN)).select(
        "rank", "start_ns", pl.max_horizontal("start_ns", "end_ns").alias("end_ns"))
    host = host.join(devices, on="rank", how="inner").select("rank", "device", "start_ns", "end_ns")
    g = ["rank", "device"]
    merged = merge_intervals(pl.concat([dev, host], how="vertical_relaxed"), by=g).rename(
        {"start_ns": "_s", "end_ns": "_e"})
    merged = merged.with_columns(_cum=(pl.col("_e") - pl.col("_s")).cum_sum().shift(1, fill_value=0).over(g))
    return merged.select(*g, "_s", "_e", "_cum")


def _covered(points: pl.DataFrame, merged: pl.DataFrame, t: str) -> pl.Expr | pl.Series:
    """Covered sync length before time column `t` of `points` (rank, device, _row, t)."""
    j = points.select("rank", "device", "_row", t).sort(t).join_asof(
        merged.sort("_s"), left_on=t, right_on="_s", by=["rank", "device"], strategy="backward", check_sortedness=False)
    j = j.with_columns(_c=(pl.col("_cum") + (pl.min_horizontal(pl.col(t), pl.col("_e")) - pl.col("_s")))
                       .fill_null(0)).sort("_row")
    return j["_c"]


def idle(activities: pl.DataFrame, events: pl.DataFrame, *, by: By = "device") -> pl.DataFrame:
    """Every idle gap between work on a device (or stream), split by cause.

    A gap `[a, b)` ends when the next activity `N` starts. Its parts, which add up to the gap:

    * `host_ns`: from `a` until `N`'s launch started (`launch_start - a`, clipped to the
      gap): the device had run out of work because the host had not issued `N` yet;
    * `sync_ns`: of the rest (`N` already queued), the time covered by synchronisation:
      device-side sync records (`cuda_sync`) or host calls that block or make a stream
      wait (`*Synchronize`, `*StreamWaitEvent`) on the same rank;
    * `other_ns`: the remainder (launch latency, dependencies not in the trace).

    Only gaps between the first and the last work of the track are listed (see `busy`
    for the idle time of a whole window). An `N` without a launch has `host_ns = 0`.

    Parameters
    ----------
    activities
        `activities(events, device_events)` (its `sync` rows are the device-side syncs).
    events
        The events the host sync calls are read from: `rank`, `cat`, `name`, `start_ns`,
        `end_ns`.
    by
        `"device"` or `"stream"`.

    Returns
    -------
    pl.DataFrame
        keys, `start_ns`, `end_ns`, `idle_ns`, `host_ns`, `sync_ns`, `other_ns`,
        `next_event_id`, `next_name`, `next_launch_start_ns`.
    """
    keys = _keys(by)
    work = _work(activities).sort(*keys, "start_ns", pl.col("launch_start_ns").fill_null(np.iinfo(np.int64).max),
                            "event_id")
    work = work.with_columns(_prev=pl.col("end_ns").cum_max().shift(1).over(keys))
    gaps = work.filter(pl.col("start_ns") > pl.col("_prev")).select(
        *keys, pl.col("_prev").alias("start_ns"), pl.col("start_ns").alias("end_ns"),
        pl.col("event_id").alias("next_event_id"), pl.col("name").alias("next_name"),
        pl.col("launch_start_ns").alias("next_launch_start_ns"),
    ).with_columns(idle_ns=pl.col("end_ns") - pl.col("start_ns"))
    gaps = gaps.with_columns(
        host_ns=pl.when(pl.col("next_launch_start_ns").is_null()).then(0).otherwise(
            (pl.col("next_launch_start_ns") - pl.col("start_ns")).clip(0, pl.col("idle_ns"))).cast(pl.Int64),
    ).with_columns(_q=pl.col("start_ns") + pl.col("host_ns")).with_row_index("_row")
    merged = _sync_intervals(activities, events, work.select("rank", "device").unique())
    if merged.is_empty() or gaps.is_empty():
        gaps = gaps.with_columns(sync_ns=pl.lit(0, pl.Int64))
    else:
        gaps = gaps.with_columns(sync_ns=(_covered(gaps, merged, "end_ns") - _covered(gaps, merged, "_q"))
                                 .cast(pl.Int64))
    return gaps.with_columns(other_ns=pl.col("idle_ns") - pl.col("host_ns") - pl.col("sync_ns")).select(
        *keys, "start_ns", "end_ns", "idle_ns", "host_ns", "sync_ns", "other_ns", "next_event_id", "next_name",
        "next_launch_start_ns").sort(*keys, "start_ns", nulls_last=True)


def idle_breakdown(activities: pl.DataFrame, events: pl.DataFrame, *, by: By = "device") -> pl.DataFrame:
    """`idle` summed per device (or stream), with the share of each cause.

    Parameters
    ----------
    activities, events, by
        As for `idle`.

    Returns
    -------
    pl.DataFrame
        keys, `n_gaps`, `idle_ns`, `host_ns`, `sync_ns`, `other_ns`, `host_share`,
        `sync_share`, `other_share` (of `idle_ns`; null when there is no idle time).
    """
    keys = _keys(by)
    g = idle(activities, events, by=by).group_by(keys).agg(
        pl.len().cast(pl.Int64).alias("n_gaps"),
        *[pl.col(c).sum() for c in ("idle_ns", "host_ns", "sync_ns", "other_ns")])
    base = _work(activities).select(keys).unique()
    g = base.join(g, on=keys, how="left", nulls_equal=True).with_columns(
        *[pl.col(c).fill_null(0).cast(pl.Int64) for c in ("n_gaps", "idle_ns", "host_ns", "sync_ns", "other_ns")])
    share = {f"{c}_share": pl.when(pl.col("idle_ns") > 0).then(pl.col(f"{c}_ns") / pl.col("idle_ns")).otherwise(None)
             for c in ("host", "sync", "other")}
    return g.with_columns(**share).sort(keys, nulls_last=True)


# --------------------------------------------------------------------------- overlap, copies, categories


def comm_overlap(activities: pl.DataFrame) -> pl.DataFrame:
    """Communication vs compute overlap per (rank, device).

    Communication is the `communication` kernel category (NCCL/RCCL ...); compute is every
    other kernel (memcpy/memset and syncs excluded). Unions on both sides, so the numbers
    are wall time: `overlap_ns = comm_ns + compute_ns - union(comm ∪ compute)`.

    Returns
    -------
    pl.DataFrame
        `rank`, `device`, `comm_ns`, `compute_ns`, `overlap_ns`, `exposed_comm_ns`
        (`comm - overlap`), `overlap_share` (`overlap / comm`; null without communication).
    """
    k = _work(activities).filter(pl.col("kind") == "kernel").with_columns(_comm=pl.col("category") == "communication")
    keys = ["rank", "device"]
    base = k.select(keys).unique()
    comm = _union(k.filter(pl.col("_comm")), keys, "comm_ns")
    comp = _union(k.filter(~pl.col("_comm")), keys, "compute_ns")
    both = _union(k, keys, "_both")
    out = base
    for f in (comm, comp, both):
        out = out.join(f, on=keys, how="left", nulls_equal=True)
    out = out.with_columns(*[pl.col(c).fill_null(0) for c in ("comm_ns", "compute_ns", "_both")])
    out = out.with_columns(overlap_ns=pl.col("comm_ns") + pl.col("compute_ns") - pl.col("_both"))
    return out.with_columns(
        exposed_comm_ns=pl.col("comm_ns") - pl.col("overlap_ns"),
        overlap_share=pl.when(pl.col("comm_ns") > 0).then(pl.col("overlap_ns") / pl.col("comm_ns")).otherwise(None),
    ).select("rank", "device", "comm_ns", "compute_ns", "overlap_ns", "exposed_comm_ns", "overlap_share").sort(
        keys, nulls_last=True)


_DIRECTIONS = {"HOST_TO_DEVICE": "HtoD", "DEVICE_TO_HOST": "DtoH", "DEVICE_TO_DEVICE": "DtoD"}


def copies(activities: pl.DataFrame, device_events: pl.DataFrame) -> pl.DataFrame:
    """Every memcpy / memset with its bytes and bandwidth.

    Parameters
    ----------
    activities
        `activities(events, device_events)`.
    device_events
        `device_events(events, margins)`: the `args` of MTIA `dma_request` copies.

    Returns
    -------
    pl.DataFrame
        `rank`, `event_id`, `device`, `stream`, `name`, `kind`, `direction` (`HtoD`,
        `DtoH`, `DtoD`, `PtoP`, ... from the name; MTIA `dma_request` from its args; null
        for memset), `bytes` (MTIA: the `size` arg), `start_ns`, `dur_ns`, `gb_per_s`
        (`bytes / dur_ns`, i.e. 1e9 bytes per second; null when either is missing or 0),
        `op_id`, `op_name`.
    """
    acts = activities.filter(pl.col("kind").is_in(kinds.COPY_KINDS))
    # MTIA dma_request: direction and size are in the args (parsed for those rows only)
    dma = acts.filter(pl.col("name") == "dma_request").select("rank", "event_id").join(
        device_events.select("rank", "event_id", "args"), on=["rank", "event_id"], how="left")
    raw_dir = pl.col("args").str.json_path_match("$.direction")
    dma = dma.select("rank", "event_id", raw_dir.replace_strict(_DIRECTIONS, default=raw_dir).alias("_dir"),
                     pl.col("args").str.json_path_match("$.size").cast(pl.Int64, strict=False).alias("_size"))
    acts = acts.join(dma, on=["rank", "event_id"], how="left", maintain_order="left")
    direction = pl.coalesce("_dir", pl.when(pl.col("kind") == "memcpy").then(
        pl.col("name").str.extract(kinds.MEMCPY_DIRECTION_PATTERN)))
    acts = acts.with_columns(direction=direction, bytes=pl.coalesce("bytes", "_size"))
    return acts.select(
        "rank", "event_id", "device", "stream", "name", "kind", "direction", "bytes", "start_ns", "dur_ns",
        pl.when((pl.col("dur_ns") > 0) & pl.col("bytes").is_not_null())
        .then(pl.col("bytes") / pl.col("dur_ns")).otherwise(None).alias("gb_per_s"),
        "op_id", "op_name",
    )


def copy_summary(activities: pl.DataFrame, device_events: pl.DataFrame) -> pl.DataFrame:
    """`copies` per (rank, device, kind, direction).

    Parameters
    ----------
    activities, device_events
        As for `copies`.

    Returns
    -------
    pl.DataFrame
        keys, `n_copies`, `bytes`, `dur_ns`, `gb_per_s` (Σ bytes / Σ dur),
        `max_gb_per_s` (the fastest single copy).
    """
    keys = ["rank", "device", "kind", "direction"]
    return copies(activities, device_events).group_by(keys).agg(
        pl.len().cast(pl.Int64).alias("n_copies"), pl.col("bytes").sum(), pl.col("dur_ns").sum(),
        pl.col("gb_per_s").max().alias("max_gb_per_s"),
    ).with_columns(
        gb_per_s=pl.when(pl.col("dur_ns") > 0).then(pl.col("bytes") / pl.col("dur_ns")).otherwise(None)
    ).select(*keys, "n_copies", "bytes", "dur_ns", "gb_per_s", "max_gb_per_s").sort(keys, nulls_last=True)


def kernel_categories(activities: pl.DataFrame, *, by: Sequence[str] = ("rank", "device")) -> pl.DataFrame:
    """Device time per kernel category (`category_expr`).

    Parameters
    ----------
    activities
        `activities(events, device_events)`.
    by
        Columns of `activities` to group by besides `category`.

    Returns
    -------
    pl.DataFrame
        `by` columns, `category`, `n_activities`, `sum_ns`, `busy_ns` (union within the
        category), `sum_share` (of the group's Σ durations), `busy_share` (of the group's
        busy time: the union of all its work).
    """
    keys = list(by) or ["_all"]
    work = _work(activities).with_columns(_all=pl.lit(0))
    g = work.group_by(*keys, "category").agg(pl.len().cast(pl.Int64).alias("n_activities"),
                                             pl.col("dur_ns").sum().alias("sum_ns"))
    g = g.join(_union(work, [*keys, "category"], "busy_ns"), on=[*keys, "category"], how="left", nulls_equal=True)
    g = g.join(_union(work, keys, "_busy"), on=keys, how="left", nulls_equal=True)
    out = g.with_columns(
        sum_share=pl.col("sum_ns") / pl.col("sum_ns").sum().over(keys),
        busy_share=pl.when(pl.col("_busy") > 0).then(pl.col("busy_ns") / pl.col("_busy")).otherwise(None),
    ).drop("_busy").sort(*keys, "sum_ns", descending=[False] * len(keys) + [True], nulls_last=True)
    return out.drop("_all", strict=False)


def launch_delay(activities: pl.DataFrame, *, by: Sequence[str] = ("rank", "device")) -> pl.DataFrame:
    """Distribution of launch delay (activity start − launch start) per group.

    Parameters
    ----------
    activities
        `activities(events, device_events)`.
    by
        Columns of `activities` to group by (e.g. `("rank", "device", "launch_name")`).

    Returns
    -------
    pl.DataFrame
        `by` columns, `n_activities` (those with a launch), `min_ns`, `p50_ns`, `p90_ns`,
        `p99_ns`, `max_ns` (nearest-rank quantiles, Int64), `mean_ns` (floor of the exact
        mean), `n_negative` (delays below 0: the device clock ran ahead of the host's).
    """
    keys = list(by)
    d = pl.col("launch_delay_ns")
    acts = activities.filter(d.is_not_null())
    aggs = [
        pl.len().cast(pl.Int64).alias("n_activities"), d.min().alias("min_ns"),
        *[d.quantile(q, interpolation="nearest").cast(pl.Int64).alias(f"p{int(q * 100)}_ns") for q in (0.5, 0.9, 0.99)],
        d.max().alias("max_ns"), (d.sum() // pl.len()).cast(pl.Int64).alias("mean_ns"),
        (d < 0).sum().cast(pl.Int64).alias("n_negative"),
    ]
    out = acts.group_by(keys).agg(aggs) if keys else acts.select(aggs)
    return out.sort(keys, nulls_last=True) if keys else out


# --------------------------------------------------------------------------- per op, per annotation


def op_device_time(activities: pl.DataFrame, nested: pl.DataFrame) -> pl.DataFrame:
    """Device time per host event: torch's sums and union-based busy time.

    The host tree is torch's: `Trace.nested` per thread, an event that ends after the event
    open at its start hanging from its nearest ancestor that contains it (as in
    `key_averages`), so a subtree never reaches past its root.

    Parameters
    ----------
    activities
        `activities(events, device_events)`.
    nested
        The nested events (`Trace.nested`): `rank`, `event_id`, `parent_id`, `name`, `cat`,
        `start_ns`, `end_ns`, `dur_ns`.

    Returns
    -------
    pl.DataFrame
        One row per host event that launched device work itself or through descendants:
        `rank`, `event_id`, `name`, `cat`, `start_ns`, `dur_ns`, `n_activities` (own),
        `self_device_ns` (Σ own activities, torch's Self CUDA), `self_busy_ns` (union of
        own activities), `device_total_ns` (own + descendants', torch's CUDA total),
        `busy_total_ns` (union over own + descendants': never more than the wall time the
        device spent on them), `n_total_activities`.
    """
    acts = activities.filter(pl.col("op_id").is_not_null())
    nested = nested.select(pl.col("rank").cast(pl.Int32), "event_id", "parent_id", "name", "cat", "start_ns", "end_ns",
                           "dur_ns")
    rank = nested["rank"].to_numpy()
    ids = nested["event_id"].to_numpy()
    parent = row_positions(rank, ids, rank, nested["parent_id"].fill_null(-1).to_numpy())
    start = nested["start_ns"].to_numpy()
    parent = containing_ancestor(parent, start, np.maximum(start, nested["end_ns"].to_numpy()))
    owner = row_positions(rank, ids, acts["rank"].to_numpy(), acts["op_id"].to_numpy())
    item, anc = ancestor_pairs(parent, owner, include_first=True)
    s = acts["start_ns"].to_numpy()
    e = acts["end_ns"].to_numpy()
    dur = acts["dur_ns"].to_numpy()
    pairs = pl.DataFrame({"_anc": anc, "start_ns": s[item], "end_ns": e[item], "dur_ns": dur[item],
                          "_own": anc == owner[item]})
    tot = pairs.group_by("_anc").agg(pl.col("dur_ns").sum().alias("device_total_ns"),
                                     pl.len().cast(pl.Int64).alias("n_total_activities"))
    own = pairs.filter(pl.col("_own")).group_by("_anc").agg(
        pl.len().cast(pl.Int64).alias("n_activities"), pl.col("dur_ns").sum().alias("self_device_ns"))
    out = (tot.join(_union(pairs, ["_anc"], "busy_total_ns"), on="_anc", how="left")
           .join(own, on="_anc", how="left")
           .join(_union(pairs.filter(pl.col("_own")), ["_anc"], "self_busy_ns"), on="_anc", how="left"))
    out = out.with_columns(
        *[pl.col(c).fill_null(0).cast(pl.Int64) for c in ("n_activities", "self_device_ns", "self_busy_ns")])
    info = nested.with_row_index("_anc").with_columns(pl.col("_anc").cast(pl.Int64))
    return out.join(info.drop("parent_id", "end_ns"), on="_anc", how="left").select(
        "rank", "event_id", "name", "cat", "start_ns", "dur_ns", "n_activities", "self_device_ns", "self_busy_ns",
        "device_total_ns", "busy_total_ns", "n_total_activities",
    ).sort("rank", "start_ns", "event_id")


def annotations(  # type: ignore[no-redef]  # the name of `from __future__ import annotations`
        events: pl.DataFrame, device_events: pl.DataFrame) -> pl.DataFrame:
    """`gpu_user_annotation` spans with the device work they cover on their stream.

    The span is the one Kineto computed (its margin undone, `annotation_margins`); an
    activity belongs to every annotation of its stream that contains it (nested spans
    included).

    Parameters
    ----------
    events
        The events the host `user_annotation`s are read from: `rank`, `event_id`, `cat`,
        `start_ns`, `dur_ns`, `external_id`.
    device_events
        `device_events(events, margins)`.

    Returns
    -------
    pl.DataFrame
        `rank`, `event_id`, `name`, `device`, `stream`, `start_ns`, `end_ns`, `dur_ns`,
        `raw_start_ns`, `raw_dur_ns`, `n_activities`, `activity_ns` (Σ durations),
        `busy_ns` (union), `host_id` / `host_start_ns` / `host_dur_ns` (the
        `user_annotation` with the same `External id` on the rank, when there is one).
    """
    dev = device_events
    ann = dev.filter(pl.col("is_annotation"))
    work = dev.filter(~pl.col("is_annotation") & (pl.col("kind") != "sync"))
    frame = pl.concat([ann, work]).select("rank", "event_id", "device", "stream", "start_ns", "end_ns",
                                          "dur_ns", "is_annotation")
    nested = nest(frame, by=["rank", "device", "stream"])
    rank = nested["rank"].to_numpy()
    ids = nested["event_id"].to_numpy()
    parent = row_positions(rank, ids, rank, nested["parent_id"].fill_null(-1).to_numpy())
    is_ann = nested["is_annotation"].to_numpy()
    acts = np.flatnonzero(~is_ann)
    item, anc = ancestor_pairs(parent, acts, include_first=False)
    keep = is_ann[anc]
    item, anc = item[keep], anc[keep]
    s = nested["start_ns"].to_numpy()[acts]
    e = nested["end_ns"].to_numpy()[acts]
    d = nested["dur_ns"].to_numpy()[acts]
    pairs = pl.DataFrame({"rank": rank[anc], "event_id": ids[anc], "start_ns": s[item], "end_ns": e[item],
                          "dur_ns": d[item]}, schema_overrides={"rank": pl.Int32})
    agg = pairs.group_by("rank", "event_id").agg(pl.len().cast(pl.Int64).alias("n_activities"),
                                                 pl.col("dur_ns").sum().alias("activity_ns"))
    agg = agg.join(_union(pairs, ["rank", "event_id"], "busy_ns"), on=["rank", "event_id"], how="left")
    ev = event_frame(events, ["rank", "event_id", "cat", "start_ns", "dur_ns", "external_id"])
    host = ev.filter(kinds.is_user_annotation() & pl.col("external_id").is_not_null()).select(
        "rank", "external_id", pl.col("event_id").alias("host_id"), pl.col("start_ns").alias("host_start_ns"),
        pl.col("dur_ns").alias("host_dur_ns")).unique(subset=["rank", "external_id"], keep="first")
    out = ann.join(agg, on=["rank", "event_id"], how="left").join(host, on=["rank", "external_id"], how="left")
    return out.with_columns(*[pl.col(c).fill_null(0).cast(pl.Int64) for c in ("n_activities", "activity_ns", "busy_ns")]
                            ).select(
        "rank", "event_id", "name", "device", "stream", "start_ns", "end_ns", "dur_ns", "raw_start_ns", "raw_dur_ns",
        "n_activities", "activity_ns", "busy_ns", "host_id", "host_start_ns", "host_dur_ns",
    ).sort("rank", "start_ns", "event_id")


def summary(activities: pl.DataFrame) -> pl.DataFrame:
    """Attribution per (rank, device): where the device time went.

    Parameters
    ----------
    activities
        `activities(events, device_events)`.

    Returns
    -------
    pl.DataFrame
        `rank`, `device`, `n_activities`, `device_ns` (Σ durations of all activities, syncs
        included: torch's "Self CUDA time total"), `attributed_ns`, `unattributed_ns`,
        `unattributed_share`, one `<link>_ns` column per `link` value, `busy_ns` (union of
        work). Identity: `attributed_ns + unattributed_ns == device_ns`.
    """
    keys = ["rank", "device"]
    g = activities.group_by(keys).agg(
        pl.len().cast(pl.Int64).alias("n_activities"), pl.col("dur_ns").sum().alias("device_ns"),
        pl.col("dur_ns").filter(pl.col("op_id").is_not_null()).sum().alias("attributed_ns"),
        pl.col("dur_ns").filter(pl.col("op_id").is_null()).sum().alias("unattributed_ns"),
        *[pl.col("dur_ns").filter(pl.col("link") == v).sum().alias(f"{v}_ns") for v in LINKS],
    )
    g = g.join(_union(_work(activities), keys, "busy_ns"), on=keys, how="left", nulls_equal=True)
    return g.with_columns(
        busy_ns=pl.col("busy_ns").fill_null(0),
        unattributed_share=pl.when(pl.col("device_ns") > 0).then(pl.col("unattributed_ns") / pl.col("device_ns"))
        .otherwise(None),
    ).select("rank", "device", "n_activities", "device_ns", "attributed_ns", "unattributed_ns", "unattributed_share",
             *[f"{v}_ns" for v in LINKS], "busy_ns").sort(keys, nulls_last=True)

