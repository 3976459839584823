"""A timeline of one window with its critical path highlighted (Altair, like `proftab.plot`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import polars as pl

from proftab import kinds, schema

if TYPE_CHECKING:
    from proftab.critical_path._graph import Graph

__all__ = ["path_chart"]

_PATH_LANE = "▶ critical path"


def path_chart(g: Graph, path: pl.DataFrame, events: pl.DataFrame, labels: pl.DataFrame, *, title: str = "",
               max_depth: int = 2, max_events: int = 20_000) -> Any:
    """Gantt chart of `g`'s window: host ops (down to `max_depth`) and device work in grey per
    track, the path's segments coloured by ``bound_by`` on their own tracks and on a lane of their own.

    Parameters
    ----------
    g
        The window's graph (its events are drawn).
    path
        Its segments (`proftab.critical_path.path_frame`).
    events
        ``Trace.nested`` (track keys, event_id, depth) of the rank.
    labels
        ``proftab.display.track_labels`` (track keys -> ``label``).
    """
    from proftab.plot import _alt, _data

    alt = _alt()
    t0 = g.start_ns
    ids = g.events["event_id"].unique().implode()
    ev = events.filter((pl.col("rank") == g.rank) & pl.col("event_id").is_in(ids))
    keep_depth = (pl.col("depth") - pl.col("depth").min().over(schema.TRACK_KEYS, "cat")) <= max_depth
    ev = ev.filter(keep_depth | kinds.is_device())
    if ev.height > max_events:
        ev = ev.sort("dur_ns", descending=True).head(max_events)
    lab = labels.select(*schema.TRACK_KEYS, "label")
    ev = ev.join(lab, on=schema.TRACK_KEYS, how="left", nulls_equal=True)
    ms = 1e6
    grey = ev.select("name", "label", ((pl.col("start_ns") - t0) / ms).alias("start_ms"),
                     ((pl.col("end_ns") - t0) / ms).alias("end_ms"), pl.lit("off path").alias("bound_by"),
                     (pl.col("dur_ns") / 1e3).alias("us"))
    seg = path.join(ev.select("event_id", "label"), on="event_id", how="left")
    on_tracks = seg.filter(pl.col("label").is_not_null())
    lane = seg.with_columns(label=pl.lit(_PATH_LANE))
    segs = pl.concat([on_tracks, lane], how="vertical_relaxed").select(
        pl.coalesce("name", pl.col("kind").cast(pl.String)).alias("name"), "label",
        ((pl.col("start_ns") - t0) / ms).alias("start_ms"), ((pl.col("end_ns") - t0) / ms).alias("end_ms"),
        pl.col("bound_by").cast(pl.String), (pl.col("dur_ns") / 1e3).alias("us"))
    order = [_PATH_LANE, *lab.filter(pl.col("label").is_in(ev["label"].unique().implode()))["label"].to_list()]
    y = alt.Y("label:N", sort=order, title=None, axis=alt.Axis(labelLimit=260))
    x = alt.X("start_ms:Q", title="ms since the window started",
              scale=alt.Scale(domain=[0, (g.end_ns - g.start_ns) / ms]))
    tip = ["name:N", "bound_by:N", alt.Tooltip("us:Q", format=".3f", title="µs")]
    back = alt.Chart(_data(grey)).mark_bar(color="#d0d0d0", clip=True).encode(y=y, x=x, x2="end_ms:Q", tooltip=tip)
    front = alt.Chart(_data(segs)).mark_bar(clip=True).encode(
        y=y, x=x, x2="end_ms:Q", color=alt.Color("bound_by:N", title="critical path bound by"), tooltip=tip)
    return alt.layer(back, front, title=title or f"critical path · rank {g.rank}").properties(width=900)
