"""Activity -> launch: each device activity's runtime / driver call (rule 1), and graph replays (1a, 1b).

`proftab.device._rules` states the rules. The launch columns carry the launch's thread as
``_l_<pid/tid...>`` and its end as ``_l_end`` for the next stage (`proftab.device._owner`).
"""

from __future__ import annotations

import polars as pl

from proftab import kinds, schema
from proftab.device._rules import GRAPH_LAUNCH_PATTERN, is_launch

__all__ = ["graph_owners", "launches", "used_launches", "work_rows"]

_TRACK = schema.TRACK_KEYS


def work_rows(device_events: pl.DataFrame) -> pl.DataFrame:
    """The device events that are activities (no annotations) with `graph_node_id`, without the raw columns.

    Kineto >= 2026 writes `graph node id` on replayed kernels (the upper 32 bits: the exec graph's id).
    """
    dev = device_events.filter(~pl.col("is_annotation"))
    node_id = (pl.col("args").str.json_path_match("$['graph node id']").cast(pl.Int64, strict=False)
               if "args" in dev.columns else pl.lit(None, pl.Int64))
    return dev.with_columns(graph_node_id=node_id).drop("is_annotation", "raw_start_ns", "raw_dur_ns", "clamped",
                                                        "args", strict=False)


def launches(ev: pl.DataFrame) -> pl.DataFrame:
    """The launch of each (rank, correlation): the earliest runtime / driver call with it (rule 1).

    Columns: `rank`, `correlation`, `launch_id`, `launch_name`, `launch_start_ns`,
    `launch_external_id`, `_l_end` and the launch's track as ``_l_<key>``.
    """
    return (
        ev.filter(is_launch(ev) & pl.col("correlation").is_not_null())
        .select("rank", "correlation", pl.col("event_id").alias("launch_id"), pl.col("name").alias("launch_name"),
                pl.col("start_ns").alias("launch_start_ns"), pl.col("external_id").alias("launch_external_id"),
                pl.max_horizontal("start_ns", "end_ns").alias("_l_end"),
                *[pl.col(k).alias(f"_l_{k}") for k in _TRACK[1:]])
        .sort("rank", "correlation", "launch_start_ns", "launch_id")
        .unique(subset=["rank", "correlation"], keep="first", maintain_order=True)
    )


def used_launches(acts: pl.DataFrame) -> pl.DataFrame:
    """The launches that launched some activity of `acts`, once each (the ones rules 2 and 3 place)."""
    return acts.filter(pl.col("launch_id").is_not_null()).select(
        "rank", "launch_id", "launch_start_ns", "launch_external_id", *[f"_l_{k}" for k in _TRACK[1:]]
    ).unique(subset=["rank", "launch_id"], keep="first")


def graph_owners(ev: pl.DataFrame, acts: pl.DataFrame) -> pl.DataFrame:
    """Owners of the activities a graph launch replays (rules 1a/1b of `proftab.device._rules`).

    An activity whose launch is a graph launch (`GRAPH_LAUNCH_PATTERN`) is owned by the host
    event its own External id names when that event lies inside the launch, on its thread
    (the virtual ops of a capture merge, `proftab.device.graphs`): link `graph_capture`;
    otherwise by the graph launch itself (link `graph_launch`), never by the op or annotation
    around the launch, which then has the graph's time as total, not self, device time.
    """
    graph = pl.col("launch_name").str.contains(GRAPH_LAUNCH_PATTERN).fill_null(False)
    acts = acts.with_columns(_graph=graph)
    g = acts.filter(pl.col("_graph") & pl.col("external_id").is_not_null()).select(
        "rank", "event_id", "external_id", "launch_start_ns", "_l_end", *[f"_l_{k}" for k in _TRACK[1:]])
    if not g.is_empty():
        hosts = ev.filter(~kinds.is_device() & pl.col("external_id").is_not_null()).select(
            "rank", pl.col("external_id").alias("_x"), pl.col("event_id").alias("_gop"),
            pl.col("start_ns").alias("_os"), pl.col("end_ns").alias("_oe"),
            *[pl.col(k).alias(f"_o_{k}") for k in _TRACK[1:]])
        same = pl.lit(True)
        for k in _TRACK[1:]:
            same = same & pl.col(f"_l_{k}").eq_missing(pl.col(f"_o_{k}"))
        inside = (pl.col("launch_start_ns") <= pl.col("_os")) & (pl.col("_oe") <= pl.col("_l_end"))
        found = (g.join(hosts, left_on=["rank", "external_id"], right_on=["rank", "_x"], how="inner")
                 .filter(same & inside).sort("rank", "event_id", "_gop")
                 .unique(subset=["rank", "event_id"], keep="first").select("rank", "event_id", "_gop"))
    else:
        found = pl.DataFrame(schema={"rank": pl.Int32, "event_id": pl.Int64, "_gop": pl.Int64})
    acts = acts.join(found, on=["rank", "event_id"], how="left", maintain_order="left")
    return acts.with_columns(
        op_id=pl.when(pl.col("_graph")).then(pl.coalesce("_gop", "launch_id")).otherwise(pl.col("op_id")),
        link=pl.when(pl.col("_graph") & pl.col("_gop").is_not_null()).then(pl.lit("graph_capture"))
        .when(pl.col("_graph")).then(pl.lit("graph_launch")).otherwise(pl.col("link")),
    ).drop("_gop")
