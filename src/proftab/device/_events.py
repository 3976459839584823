"""The device events of a trace, as the linking and the analyses read them.

`event_frame` readies a user's events frame (absent optional columns as typed nulls);
`annotation_margins` reads, per rank, by how much Kineto widened its `gpu_user_annotation` spans;
`device_events` gives every device event with its device, stream, kind and times, the margin undone.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

from proftab import kinds, schema
from proftab.device._rules import ANNOTATION_CATEGORY, MARGINS
from proftab.exceptions import ProftabError

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["DEVICE_EVENT_COLUMNS", "EVENT_COLUMNS", "OPTIONAL_COLUMNS", "annotation_margins",
           "device_events", "event_frame"]

_DEV_TRACK = ["rank", "device", "stream"]

#: columns of `events` the device functions read; those in `OPTIONAL_COLUMNS` may be absent
#: from a user's frame (they are then taken as null)
EVENT_COLUMNS = ["rank", "event_id", "pid", "pid_text", "tid", "tid_text", "cat", "name", "start_ns", "dur_ns",
                 "end_ns", "correlation", "external_id", "device", "stream", "bytes"]
#: columns `device_events` reads (`args` too)
DEVICE_EVENT_COLUMNS = ["rank", "event_id", "pid", "tid", "tid_text", "device", "stream", "cat", "name", "start_ns",
                        "dur_ns", "correlation", "external_id", "bytes", "args"]
OPTIONAL_COLUMNS = ("pid_text", "tid_text", "correlation", "external_id", "device", "stream", "bytes", "args")


def event_frame(events: pl.DataFrame, columns: Sequence[str] | None = None) -> pl.DataFrame:
    """`events` ready for the device functions: absent optional columns added as typed nulls, `rank` Int32.

    Raises
    ------
    ProftabError
        A required column (`rank`, `event_id`, `pid`, `tid`, `cat`, `name`, `start_ns`,
        `dur_ns`, `end_ns`) is missing.
    """
    columns = EVENT_COLUMNS if columns is None else columns
    missing = [c for c in columns if c not in events.columns and c not in OPTIONAL_COLUMNS]
    if missing:
        msg = f"the events frame lacks the columns {missing!r} (it has {events.columns!r})"
        raise ProftabError(msg)
    add = [pl.lit(None, schema.EVENT_COLUMNS[c]).alias(c) for c in columns if c not in events.columns]
    if add:
        events = events.with_columns(add)
    if events.schema["rank"] != pl.Int32:
        events = events.with_columns(pl.col("rank").cast(pl.Int32))
    return events


def _device_col() -> pl.Expr:
    """Device index of a device event: its `pid`, else its `device` arg."""
    return pl.coalesce(pl.col("pid"), pl.col("device")).alias("device")


def _stream_col() -> pl.Expr:
    """Stream of a device event: its `tid`, else its `stream` arg, else the number in a string tid.

    (`"stream 7"` in 2021 traces.)
    """
    return pl.coalesce(pl.col("tid"), pl.col("stream"),
                       pl.col("tid_text").str.extract(r"(\d+)").cast(pl.Int64, strict=False)).alias("stream")


def _cat() -> pl.Expr:
    return pl.col("cat").cast(pl.String)


def annotation_margins(events: pl.DataFrame, files: pl.DataFrame) -> pl.DataFrame:
    """Per rank, the widening Kineto applied to `gpu_user_annotation` spans.

    Kineto writes each annotation as `[first activity start - shift, last activity end +
    (add - shift)]`; `shift`/`add` depend on the Kineto version (`MARGINS`). The era is read
    from the data: for every annotation the gap to the first device activity inside it and
    from the last one; the candidate matching most annotations wins.

    Parameters
    ----------
    events
        Events (at least the device rows): `rank`, `event_id`, `cat`, `pid`, `tid`,
        `start_ns`, `end_ns` (`tid_text`, `device`, `stream` when present).
    files
        One row per rank: `rank`, `time_resolution_ns` (1000 for an integer-µs file).

    Returns
    -------
    pl.DataFrame
        `rank`, `margin_start_ns` (shift), `margin_dur_ns` (add), `n_margin_evidence` (number
        of annotations matching the chosen margin; 0: no evidence, default for the format:
        1 µs / 1 µs for integer-µs files, 1 ns / 2 ns otherwise), `annotations`; one row
        per rank of `files`.
    """
    ev = event_frame(events, ["rank", "event_id", "cat", "pid", "tid", "tid_text", "device", "stream", "start_ns",
                              "end_ns"])
    ranks = files.select(pl.col("rank").cast(pl.Int32), pl.col("time_resolution_ns").alias("_res"))
    tracks = [_device_col(), _stream_col()]
    ann = ev.filter(kinds.in_categories({ANNOTATION_CATEGORY})).with_columns(tracks)
    work = ev.filter(kinds.is_device_work()).with_columns(tracks)
    ann, work = (f.filter(pl.col("device").is_not_null() & pl.col("stream").is_not_null()) for f in (ann, work))
    a = ann.select(*_DEV_TRACK, "event_id", "start_ns", "end_ns")
    first = a.sort("start_ns").join_asof(
        work.select(*_DEV_TRACK, pl.col("start_ns").alias("_ws")).sort("_ws"),
        left_on="start_ns", right_on="_ws", by=_DEV_TRACK, strategy="forward", check_sortedness=False)
    last = a.sort("end_ns").join_asof(
        work.select(*_DEV_TRACK, pl.col("end_ns").alias("_we")).sort("_we"),
        left_on="end_ns", right_on="_we", by=_DEV_TRACK, strategy="backward", check_sortedness=False)
    obs = first.join(last.select("rank", "event_id", "_we"), on=["rank", "event_id"]).filter(
        (pl.col("_ws") < pl.col("end_ns")) & (pl.col("_we") > pl.col("start_ns"))
    ).select("rank", (pl.col("_ws") - pl.col("start_ns")).alias("lead"),
             (pl.col("end_ns") - pl.col("_we")).alias("tail"))
    counts = [
        obs.group_by("rank").agg(((pl.col("lead") == s) & (pl.col("tail") == d - s)).sum().alias(f"_m{i}"))
        for i, (s, d) in enumerate(MARGINS)
    ]
    out = ranks.join(ann.group_by("rank").agg(pl.len().alias("annotations")), on="rank", how="left")
    for c in counts:
        out = out.join(c, on="rank", how="left")
    rows = []
    for r in out.iter_rows(named=True):
        hits = [int(r.get(f"_m{i}") or 0) for i in range(len(MARGINS))]
        default = 3 if r["_res"] >= 1000 else 0
        # prefer the format's default on ties, then the listed order
        best = max(range(len(MARGINS)), key=lambda i: (hits[i], i == default, -i))
        if hits[best] == 0:
            best = default
        rows.append((r["rank"], MARGINS[best][0], MARGINS[best][1], hits[best], int(r["annotations"] or 0)))
    return pl.DataFrame(rows, schema={"rank": pl.Int32, "margin_start_ns": pl.Int64, "margin_dur_ns": pl.Int64,
                                      "n_margin_evidence": pl.Int64, "n_annotations": pl.Int64}, orient="row")


def device_events(events: pl.DataFrame, margins: pl.DataFrame) -> pl.DataFrame:
    """Every device event with the times key_averages and the analyses use.

    Parameters
    ----------
    events
        Events (host rows are ignored): `EVENT_COLUMNS` (the optional ones may be absent),
        and `args` when present (kept for the MTIA `dma_request` copies).
    margins
        `annotation_margins(events, files)`: the margin undone on `gpu_user_annotation`.

    Returns
    -------
    pl.DataFrame
        `rank`, `event_id`, `device` (the track's `pid`, else the `device` arg), `stream`
        (its `tid`, else the `stream` arg, else N of a `"stream N"` tid), `cat`, `name`,
        `kind` (`kernel`, `memcpy`, `memset`, `sync`; null for annotations), `is_annotation`,
        `start_ns`, `end_ns`, `dur_ns`: for `gpu_user_annotation` with the Kineto margin
        undone (`annotation_margins`), a negative `dur` clamped to 0;
        `raw_start_ns`, `raw_dur_ns` (as in the file), `clamped` (the duration was changed
        by the clamp, not by the margin), `correlation`, `external_id`, `bytes`, `args`.
    """
    ev = event_frame(events, DEVICE_EVENT_COLUMNS).filter(kinds.is_device())
    m = margins.select(pl.col("rank").cast(pl.Int32), "margin_start_ns", "margin_dur_ns")
    is_ann = _cat() == ANNOTATION_CATEGORY
    ev = ev.join(m, on="rank", how="left", maintain_order="left")
    shift = pl.when(is_ann).then(pl.col("margin_start_ns")).otherwise(0)
    add = pl.when(is_ann).then(pl.col("margin_dur_ns")).otherwise(0)
    dur = pl.max_horizontal(pl.col("dur_ns") - add, pl.lit(0, pl.Int64))
    return ev.select(
        "rank", "event_id", _device_col(), _stream_col(), "cat", "name",
        pl.when(is_ann).then(None).otherwise(kinds.activity_kind()).alias("kind"),
        is_ann.alias("is_annotation"),
        (pl.col("start_ns") + shift).alias("start_ns"),
        (pl.col("start_ns") + shift + dur).alias("end_ns"),
        dur.alias("dur_ns"),
        pl.col("start_ns").alias("raw_start_ns"), pl.col("dur_ns").alias("raw_dur_ns"),
        (pl.col("dur_ns") - add < 0).alias("clamped"),
        "correlation", "external_id", "bytes", "args",
    )
