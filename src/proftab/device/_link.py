"""Link device activities (kernels, memcpy, memset, syncs) to the host ops that launched them.

`activities` applies the rules of `proftab.device._rules` in order: activity -> launch
(`_launch`: rule 1, graph replays 1a/1b), launch -> op (`_owner`: rules 2, 3; rule 4 for an
activity without a launch), and keeps everything else, unattributed (rule 5).

Every function here is a free function over frames: `events` is a trace's events table (or
a user's own frame with its columns, docs/device.md), `files` one row per rank with
`time_resolution_ns`, `flows` the flow events. The intermediate frames are
`annotation_margins(events, files)` -> `device_events(events, margins)` ->
`activities(events, device_events)`; `Trace.device` computes them once per trace.
"""

from __future__ import annotations

import polars as pl

from proftab.device._events import event_frame
from proftab.device._launch import graph_owners, launches, used_launches, work_rows
from proftab.device._owner import (
    device_external_owners,
    external_id_reliability,
    launch_owners,
    ops_by_external_id,
)
from proftab.device._rules import LINK_DTYPE

__all__ = ["activities", "self_time", "unattributed"]


def activities(events: pl.DataFrame, device_events: pl.DataFrame) -> pl.DataFrame:
    """One row per device activity (kernel, memcpy, memset, sync) with its launch and op.

    Parameters
    ----------
    events
        All events of the trace (the launches and ops are looked up here; the launch
        categories are those present, `launch_categories`): `EVENT_COLUMNS`.
    device_events
        `device_events(events, margins)`.

    Returns
    -------
    pl.DataFrame
        `rank`, `event_id`, `device`, `stream`, `cat`, `name`, `kind`, `category` (kernel
        category, see `category_expr`), `start_ns`, `end_ns`, `dur_ns` (negative clamped to
        0), `correlation`, `external_id`, `bytes`, `launch_id` (event_id of the runtime /
        driver call), `launch_name`, `launch_start_ns`, `launch_delay_ns` (start - launch
        start), `op_id` (event_id of the host op it is attributed to; null: unattributed),
        `op_name`, `op_cat`, `link` (Enum, `LINKS`), `graph_launch_id` (the graph launch that
        replayed it; null: not a graph kernel), `graph_node_id` (the trace's `graph node id`,
        null where Kineto writes none), `graph_node` (0-based position in its replay, by
        start then event_id). Sorted by rank, start.
    """
    ev = event_frame(events)
    dev = work_rows(device_events)
    launch = launches(ev)
    acts = dev.join(launch, on=["rank", "correlation"], how="left", maintain_order="left")
    reliable = external_id_reliability(launch, dev).filter(pl.col("_bogus") <= 0.5).select("rank")
    ops_by_ext = ops_by_external_id(ev)
    owners = launch_owners(ev, used_launches(acts), reliable, ops_by_ext)
    acts = acts.join(owners, on=["rank", "launch_id"], how="left", maintain_order="left")
    acts = graph_owners(ev, acts)
    acts = acts.join(device_external_owners(acts, reliable, ops_by_ext), on=["rank", "event_id"], how="left",
                     maintain_order="left")
    link = (
        pl.when(pl.col("link").is_not_null()).then(pl.col("link"))
        .when(pl.col("_dop").is_not_null()).then(pl.lit("device_external_id"))
        .when(pl.col("launch_id").is_null()).then(pl.lit("no_launch"))
        .otherwise(pl.lit("no_op"))
    )
    acts = acts.with_columns(op_id=pl.coalesce("op_id", "_dop"), link=link.cast(LINK_DTYPE))
    return _activity_columns(ev, acts)


def _activity_columns(ev: pl.DataFrame, acts: pl.DataFrame) -> pl.DataFrame:
    """`acts` with the op's name and category, the kernel category, the graph replay columns, in
    `activities`' column order, sorted by rank, start_ns, event_id."""
    from proftab.device._categories import category_expr

    names = ev.select("rank", pl.col("event_id").alias("op_id"), pl.col("name").alias("op_name"),
                      pl.col("cat").alias("op_cat"))
    acts = acts.join(names, on=["rank", "op_id"], how="left", maintain_order="left")
    cats = acts.select("name", "kind").unique().with_columns(category_expr().alias("category"))
    acts = acts.join(cats, on=["name", "kind"], how="left", maintain_order="left")
    out = acts.select(
        "rank", "event_id", "device", "stream", "cat", "name", "kind", "category", "start_ns", "end_ns", "dur_ns",
        "correlation", "external_id", "bytes", "launch_id", "launch_name", "launch_start_ns",
        (pl.col("start_ns") - pl.col("launch_start_ns")).alias("launch_delay_ns"),
        "op_id", "op_name", "op_cat", "link",
        pl.when(pl.col("_graph")).then(pl.col("launch_id")).alias("graph_launch_id"), "graph_node_id",
    ).sort("rank", "start_ns", "event_id")
    # position in the replay: 0, 1, ... in (start, event_id) order within the graph launch
    return out.with_columns(
        graph_node=pl.when(pl.col("graph_launch_id").is_not_null()).then(
            pl.int_range(pl.len(), dtype=pl.Int64).over("rank", "graph_launch_id")),
    )


def unattributed(activities: pl.DataFrame) -> pl.DataFrame:
    """The activities no op owns (`activities` rows with a null `op_id`; `link` says why)."""
    return activities.filter(pl.col("op_id").is_null())


def self_time(activities: pl.DataFrame, device_events: pl.DataFrame) -> pl.DataFrame:
    """Self device time per event as torch counts it (`self_device_time_total`); `tr.device.self_time()`.

    Parameters
    ----------
    activities
        `activities(events, device_events)`.
    device_events
        `device_events(events, margins)`.

    Returns
    -------
    pl.DataFrame
        `rank`, `event_id`, `self_device_ns`: one row per host op that launched device
        activities (the sum of their durations) and one per device event (its own duration,
        gpu_user_annotation with Kineto's margin undone, negatives clamped to 0).
    """
    host = activities.filter(pl.col("op_id").is_not_null()).group_by("rank", "op_id").agg(
        pl.col("dur_ns").sum().alias("self_device_ns")).rename({"op_id": "event_id"})
    devs = device_events.select("rank", "event_id", pl.col("dur_ns").alias("self_device_ns"))
    return pl.concat([host, devs], how="vertical_relaxed").sort("rank", "event_id")
