"""How the activities of each rank were linked to ops, and the cross checks (`tr.device.diagnostics()`)."""

from __future__ import annotations

import polars as pl

from proftab import kinds, schema
from proftab.device._events import event_frame
from proftab.device._owner import external_id_reliability
from proftab.device._rules import LINKS, OP_CATEGORIES, is_launch

__all__ = ["diagnostics"]

_TRACK = schema.TRACK_KEYS


def diagnostics(events: pl.DataFrame, flows: pl.DataFrame, activities: pl.DataFrame, device_events: pl.DataFrame,
                margins: pl.DataFrame, files: pl.DataFrame) -> pl.DataFrame:
    """How the activities of each rank were linked, and the cross checks.

    Parameters
    ----------
    events
        All events (`EVENT_COLUMNS`).
    flows
        Flow events: `rank`, `cat`, `id`, `pid`, `tid`, `start_ns` (the `ac2g` ones are used).
    activities, device_events, margins
        The intermediate frames of the same events (`activities`, `device_events`,
        `annotation_margins`).
    files
        One row per rank (`rank`): the ranks reported.

    Returns
    -------
    pl.DataFrame
        Per rank: `n_activities`, `activity_ns`, counts per `link` value (`n_external_id`,
        `n_containment`, `n_annotation`, `n_device_external_id`, `n_no_launch`, `n_no_op`, ...),
        `unattributed_ns`, `unattributed_share`, `external_id_mode` (`op`: External ids name
        ops; `correlation`: they are the launches' own correlation ids and are ignored;
        `absent`), `n_ext_rejected` (External-id matches refused by the thread/time guard),
        `n_shared_correlation` (correlation ids used by several launches), `n_clamped` (negative
        durations set to 0), `n_ac2g_checked` / `n_ac2g_agree` (activities with an `ac2g` flow
        for their correlation, and those whose flow starts at the launch and ends at the
        activity), and the annotation margin (`margin_start_ns`, `margin_dur_ns`,
        `n_margin_evidence`).
    """
    ev = event_frame(events)
    acts = activities
    ranks = files.select(pl.col("rank").cast(pl.Int32))
    per_link = acts.group_by("rank").agg(
        pl.len().alias("activities"), pl.col("dur_ns").sum().alias("activity_ns"),
        *[(pl.col("link") == v).sum().alias(v) for v in LINKS],
        pl.col("dur_ns").filter(pl.col("op_id").is_null()).sum().alias("unattributed_ns"),
    )
    launches = ev.filter(is_launch(ev) & pl.col("correlation").is_not_null()).select(
        "rank", "correlation", pl.col("external_id").alias("launch_external_id"), "start_ns", "event_id",
        *_TRACK[1:])
    rel = external_id_reliability(launches, device_events.filter(~pl.col("is_annotation")))
    shared = launches.group_by("rank", "correlation").len().filter(pl.col("len") > 1).group_by("rank").agg(
        pl.len().alias("shared_correlation"))
    # External-id matches the guard refused
    op_ev = ev.filter(kinds.in_categories(OP_CATEGORIES) & pl.col("external_id").is_not_null()).select(
        "rank", pl.col("external_id").alias("launch_external_id"))
    used = acts.filter(pl.col("launch_id").is_not_null()).select("rank", "launch_id", "link").unique(
        subset=["rank", "launch_id"])
    used = used.join(launches.select("rank", pl.col("event_id").alias("launch_id"), "launch_external_id"),
                     on=["rank", "launch_id"], how="left")
    rel_ranks = rel.filter(pl.col("_bogus") <= 0.5).select("rank")
    rejected = (used.filter(pl.col("link") != "external_id").join(rel_ranks, on="rank", how="semi")
                .join(op_ev.unique(), on=["rank", "launch_external_id"], how="semi")
                .group_by("rank").agg(pl.len().alias("ext_rejected")))
    clamped = device_events.group_by("rank").agg(pl.col("clamped").sum().alias("clamped"))
    checked = _ac2g_check(flows, ev, acts)
    out = (ranks.join(per_link, on="rank", how="left").join(rel, on="rank", how="left")
           .join(shared, on="rank", how="left").join(rejected, on="rank", how="left")
           .join(clamped, on="rank", how="left").join(checked, on="rank", how="left")
           .join(margins.drop("n_annotations"), on="rank", how="left"))
    counts = ["activities", "activity_ns", *LINKS, "unattributed_ns", "shared_correlation", "ext_rejected", "clamped",
              "ac2g_checked", "ac2g_agree"]
    return out.with_columns(
        *[pl.col(c).fill_null(0).cast(pl.Int64) for c in counts],
        external_id_mode=pl.when(pl.col("_with_ext").is_null()).then(pl.lit("absent"))
        .when(pl.col("_bogus") > 0.5).then(pl.lit("correlation")).otherwise(pl.lit("op")),
    ).with_columns(
        unattributed_share=pl.when(pl.col("activity_ns") > 0).then(
            pl.col("unattributed_ns") / pl.col("activity_ns")).otherwise(None),
    ).select("rank", "activities", "activity_ns", *LINKS, "unattributed_ns", "unattributed_share",
             "external_id_mode", "ext_rejected", "shared_correlation", "clamped", "ac2g_checked", "ac2g_agree",
             "margin_start_ns", "margin_dur_ns", "n_margin_evidence").sort("rank").rename(
        {c: f"n_{c}" for c in ("activities", *LINKS, "ext_rejected", "shared_correlation", "clamped", "ac2g_checked",
                               "ac2g_agree")})


def _ac2g_check(flows: pl.DataFrame, events: pl.DataFrame, acts: pl.DataFrame) -> pl.DataFrame:
    """Per rank: activities with an ac2g flow for their correlation, and those it confirms.

    A flow confirms the link when, among the endpoints with the activity's correlation as
    id (any phase: graph launches write the host side as `f`), one sits on the activity
    (device, stream, start) and one on the launch (thread, start).
    """
    fl = flows.filter((pl.col("cat").cast(pl.String) == kinds.AC2G_FLOW) & pl.col("id").is_not_null())
    if fl.is_empty():
        return pl.DataFrame(schema={"rank": pl.Int32, "ac2g_checked": pl.Int64, "ac2g_agree": pl.Int64})
    ends = fl.select("rank", pl.col("id").alias("correlation"), "pid", "tid", pl.col("start_ns").alias("_t")).unique()
    launch = events.select("rank", pl.col("event_id").alias("launch_id"), pl.col("pid").alias("_lp"),
                                 pl.col("tid").alias("_lt"))
    a = acts.filter(pl.col("launch_id").is_not_null()).select(
        "rank", "event_id", "correlation", "start_ns", "device", "stream", "launch_id", "launch_start_ns")
    a = a.join(ends.select("rank", "correlation").unique(), on=["rank", "correlation"], how="semi")
    a = a.join(launch, on=["rank", "launch_id"], how="left")
    on_act = a.join(ends, left_on=["rank", "correlation", "device", "stream", "start_ns"],
                    right_on=["rank", "correlation", "pid", "tid", "_t"], how="semi")
    ok = on_act.join(ends, left_on=["rank", "correlation", "_lp", "_lt", "launch_start_ns"],
                     right_on=["rank", "correlation", "pid", "tid", "_t"], how="semi")
    return a.group_by("rank").agg(pl.len().cast(pl.Int64).alias("ac2g_checked")).join(
        ok.group_by("rank").agg(pl.len().cast(pl.Int64).alias("ac2g_agree")), on="rank", how="left")
