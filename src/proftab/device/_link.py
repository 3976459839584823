"""Link device activities (kernels, memcpy, memset, syncs) to the host ops that launched them.

Rules (docs/device.md gives the reasons and the sources):

1. activity -> launch: the runtime/driver event (`cudaLaunchKernel`, `hipGraphLaunch`,
   `cuLaunchKernel`, `mtia_runtime` ...) with the same `(rank, correlation)`. One launch can
   own many activities (graph launches). When several launches share a correlation (nested
   runtime calls), the earliest is the launch.
2. launch -> op, by `External id`: the `cpu_op` (`Operator` in 2021 traces) of the same rank
   whose `External id` equals the launch's, accepted only when it is on the launch's thread
   and the launch starts inside it (`op.start <= launch.start <= op.end`). External ids are
   ignored for a rank where most launches carry their own correlation as `External id`
   (Kineto before 2024-02 wrote that; such ids collide with op ids, pytorch#124388).
3. otherwise by containment: the innermost `cpu_op` open at the launch's start on its thread
   (`containment`); failing that the innermost `user_annotation` (`annotation`).
1a. an activity replayed by a graph launch (`GRAPH_LAUNCH_PATTERN`) whose own `External id`
   names a host event inside the launch on its thread (the virtual ops of a capture merge,
   `proftab.device.graphs`) belongs to that event (`graph_capture`);
1b. any other graph-replayed activity belongs to the graph launch itself (`graph_launch`): the
   op or annotation around the launch holds the graph's time as total, never self, device time.
4. an activity without a launch uses its own `External id` (same guard: the op starts no
   later than the activity) -> `device_external_id`.
5. everything else is kept, unattributed: `no_launch` or `no_op`.

Every function here is a free function over frames: `events` is a trace's events table (or
a user's own frame with its columns, docs/device.md), `files` one row per rank with
`time_resolution_ns`, `flows` the flow events. The intermediate frames are
`annotation_margins(events, files)` -> `device_events(events, margins)` ->
`activities(events, device_events)`; `Trace.device` computes them once per trace.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import polars as pl

from proftab import kinds, schema
from proftab.calls import GRAPH_LAUNCH
from proftab.exceptions import ProftabError
from proftab.intervals import nest
from proftab.intervals.tree import nearest_ancestor, row_positions

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

__all__ = [
    "ACTIVITY_CATEGORIES", "ANNOTATION_CATEGORY", "DEVICE_EVENT_COLUMNS", "EVENT_COLUMNS", "GRAPH_LAUNCH_PATTERN",
    "LINKS", "MARGINS", "OP_CATEGORIES", "activities", "annotation_margins", "device_events", "diagnostics",
    "event_frame", "is_launch", "launch_categories", "self_time", "unattributed",
]

ANNOTATION_CATEGORY = kinds.DEVICE_ANNOTATION
#: device categories attributed to launching ops (all device rows of key_averages but annotations)
ACTIVITY_CATEGORIES = kinds.DEVICE_CATEGORIES - {ANNOTATION_CATEGORY}
#: host ops that own launches (torch links kernels to these); user annotations are the fallback
OP_CATEGORIES = kinds.OP_CATEGORIES
REGION_CATEGORIES = frozenset({kinds.USER_ANNOTATION})

#: values of the `link` column: how an activity reached its op, or why it did not
LINKS = ("external_id", "containment", "annotation", "device_external_id", "graph_capture", "graph_launch",
         "no_launch", "no_op")
#: names of the runtime / driver calls that replay a CUDA / HIP graph (`proftab.calls.GRAPH_LAUNCH`)
GRAPH_LAUNCH_PATTERN = GRAPH_LAUNCH.pattern()
LINK_DTYPE = pl.Enum(LINKS)
#: (start shift, duration added) by which Kineto widened gpu_user_annotation spans, per era:
#: >= 2024-06, 2024-04..06, 2024-03..04 (ns traces with the old rule), integer-µs traces
MARGINS = ((1, 2), (1000, 1500), (1, 1), (1000, 1000))

_TRACK = schema.TRACK_KEYS
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


def launch_categories(categories: Iterable[str]) -> set[str]:
    """Those of `categories` that launch device work: the runtime / driver ones (`kinds.runtime_categories`)."""
    return kinds.runtime_categories(categories)


def is_launch(events: pl.DataFrame) -> pl.Expr:
    """A runtime / driver call among the categories present in `events` (`launch_categories`)."""
    present = events.select(pl.col("cat").drop_nulls().unique().cast(pl.String)).to_series().to_list()
    return kinds.in_categories(launch_categories(present))


# --------------------------------------------------------------------------- annotation margin


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


# --------------------------------------------------------------------------- linking


def _ext_reliable(launches: pl.DataFrame, acts: pl.DataFrame) -> pl.DataFrame:
    """Per rank: `_bogus` share of launches and activities whose External id is their own correlation."""
    both = pl.concat([
        launches.select("rank", pl.col("launch_external_id").alias("_x"), "correlation"),
        acts.select("rank", pl.col("external_id").alias("_x"), "correlation"),
    ])
    return both.filter(pl.col("_x").is_not_null()).group_by("rank").agg(
        (pl.col("_x") == pl.col("correlation")).fill_null(False).mean().alias("_bogus"),
        pl.len().alias("_with_ext"),
    )


#: largest (launches x ops) product of one External id joined pair by pair; a bigger key is ambiguous
MAX_PAIRS_PER_KEY = 64


def _ext_candidates(left: pl.DataFrame, ops: pl.DataFrame, *, by_track: bool = True) -> pl.DataFrame:
    """(launch, op) pairs sharing `rank` and External id, bounded.

    A key held by few launches and ops (the normal case: one op, its launches) is joined pair by
    pair. A key shared by many (a hostile or damaged trace: 10,000 ops and launches with one
    External id would make 10^8 pairs) is ambiguous: each launch is paired only with the op of
    that key that started last at or before it (on the launch's thread when `by_track`), so the
    pairs are at most one per launch.
    """
    key_l, key_r = ["rank", "launch_external_id"], ["rank", "_x"]
    sizes = left.group_by(key_l).len().join(ops.group_by(key_r).len(), left_on=key_l, right_on=key_r)
    heavy = sizes.filter(pl.col("len").cast(pl.Int64) * pl.col("len_right").cast(pl.Int64) > MAX_PAIRS_PER_KEY)
    if heavy.is_empty():
        return left.join(ops, left_on=key_l, right_on=key_r, how="inner")
    heavy = heavy.select(key_l)
    light = left.join(heavy, on=key_l, how="anti").join(ops, left_on=key_l, right_on=key_r, how="inner")
    by = key_l + ([f"_l_{k}" for k in _TRACK[1:]] if by_track else [])
    by_r = key_r + ([f"_o_{k}" for k in _TRACK[1:]] if by_track else [])
    hl = left.join(heavy, on=key_l, how="semi").sort("launch_start_ns")
    hr = ops.join(heavy.rename({"launch_external_id": "_x"}), on=key_r, how="semi").sort("_os")
    if by_track:  # null track parts (pid_text/tid_text) match each other, as eq_missing does
        fill = {c: pl.col(c).fill_null(-1 if hl.schema[c].is_integer() else "") for c in by[2:]}
        hl = hl.with_columns(**fill)
        hr = hr.with_columns(**{r: pl.col(r).fill_null(-1 if hr.schema[r].is_integer() else "")
                                for r in by_r[2:]})
    near = hl.join_asof(hr, left_on="launch_start_ns", right_on="_os", by_left=by, by_right=by_r,
                        strategy="backward", check_sortedness=False).filter(pl.col("op_id").is_not_null())
    near = near.with_columns(pl.col(a).alias(b) for a, b in zip(by[2:], by_r[2:], strict=True) if b not in near.columns)
    return pl.concat([light, near.select(light.columns)], how="vertical_relaxed")


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
    from proftab.device._categories import category_expr

    ev = event_frame(events)
    dev = device_events.filter(~pl.col("is_annotation"))
    # Kineto >= 2026 writes `graph node id` on replayed kernels (the upper 32 bits: the exec graph's id)
    node_id = (pl.col("args").str.json_path_match("$['graph node id']").cast(pl.Int64, strict=False)
               if "args" in dev.columns else pl.lit(None, pl.Int64))
    dev = dev.with_columns(graph_node_id=node_id).drop("is_annotation", "raw_start_ns", "raw_dur_ns", "clamped",
                                                       "args", strict=False)
    launches = (
        ev.filter(is_launch(ev) & pl.col("correlation").is_not_null())
        .select("rank", "correlation", pl.col("event_id").alias("launch_id"), pl.col("name").alias("launch_name"),
                pl.col("start_ns").alias("launch_start_ns"), pl.col("external_id").alias("launch_external_id"),
                pl.max_horizontal("start_ns", "end_ns").alias("_l_end"),
                *[pl.col(k).alias(f"_l_{k}") for k in _TRACK[1:]])
        .sort("rank", "correlation", "launch_start_ns", "launch_id")
        .unique(subset=["rank", "correlation"], keep="first", maintain_order=True)
    )
    acts = dev.join(launches, on=["rank", "correlation"], how="left", maintain_order="left")
    used = acts.filter(pl.col("launch_id").is_not_null()).select(
        "rank", "launch_id", "launch_start_ns", "launch_external_id", *[f"_l_{k}" for k in _TRACK[1:]]
    ).unique(subset=["rank", "launch_id"], keep="first")

    reliable = _ext_reliable(launches, dev).filter(pl.col("_bogus") <= 0.5).select("rank")
    op_ev = ev.filter(kinds.in_categories(OP_CATEGORIES))
    ops_by_ext = op_ev.filter(pl.col("external_id").is_not_null()).select(
        "rank", pl.col("external_id").alias("_x"), pl.col("event_id").alias("op_id"),
        pl.col("start_ns").alias("_os"), pl.col("end_ns").alias("_oe"),
        *[pl.col(k).alias(f"_o_{k}") for k in _TRACK[1:]])

    # 2. launch -> op by External id, guarded by "same thread, launch starts inside the op"
    cand = _ext_candidates(used.join(reliable, on="rank", how="semi"), ops_by_ext)
    same = pl.lit(True)
    for k in _TRACK[1:]:
        same = same & pl.col(f"_l_{k}").eq_missing(pl.col(f"_o_{k}"))
    guard = same & (pl.col("_os") <= pl.col("launch_start_ns")) & (pl.col("launch_start_ns") <= pl.col("_oe"))
    by_ext = cand.filter(guard).sort("rank", "launch_id", "op_id").unique(
        subset=["rank", "launch_id"], keep="first").select("rank", "launch_id", "op_id",
                                                           pl.lit("external_id").alias("link"))

    # 3. containment on the launch's thread
    rest = used.join(by_ext, on=["rank", "launch_id"], how="anti")
    by_cont = _containment(ev, rest)
    owners = pl.concat([by_ext, by_cont], how="vertical_relaxed")
    acts = acts.join(owners, on=["rank", "launch_id"], how="left", maintain_order="left")
    acts = _graph_owners(ev, acts)

    # 4. no launch: the activity's own External id
    no_launch = acts.filter(pl.col("launch_id").is_null() & pl.col("external_id").is_not_null()).select(
        "rank", "event_id", "external_id", "start_ns")
    dev_ext = (
        _ext_candidates(no_launch.join(reliable, on="rank", how="semi").rename({"external_id": "launch_external_id",
                                                                                 "start_ns": "launch_start_ns"}),
                        ops_by_ext.select("rank", "_x", "op_id", "_os"), by_track=False)
        .rename({"launch_external_id": "external_id", "launch_start_ns": "start_ns"})
        .filter(pl.col("_os") <= pl.col("start_ns"))
        .sort("rank", "event_id", "op_id").unique(subset=["rank", "event_id"], keep="first")
        .select("rank", "event_id", pl.col("op_id").alias("_dop"))
    )
    acts = acts.join(dev_ext, on=["rank", "event_id"], how="left", maintain_order="left")
    link = (
        pl.when(pl.col("link").is_not_null()).then(pl.col("link"))
        .when(pl.col("_dop").is_not_null()).then(pl.lit("device_external_id"))
        .when(pl.col("launch_id").is_null()).then(pl.lit("no_launch"))
        .otherwise(pl.lit("no_op"))
    )
    acts = acts.with_columns(op_id=pl.coalesce("op_id", "_dop"), link=link.cast(LINK_DTYPE))
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


def _graph_owners(ev: pl.DataFrame, acts: pl.DataFrame) -> pl.DataFrame:
    """Owners of the activities a graph launch replays (rules 1a/1b of the module docstring).

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


def unattributed(activities: pl.DataFrame) -> pl.DataFrame:
    """The activities no op owns (`activities` rows with a null `op_id`; `link` says why)."""
    return activities.filter(pl.col("op_id").is_null())


def _containment(ev: pl.DataFrame, rest: pl.DataFrame) -> pl.DataFrame:
    """Owner of each launch in `rest` by the innermost enclosing op (else user annotation)."""
    empty = pl.DataFrame(schema={"rank": pl.Int32, "launch_id": pl.Int64, "op_id": pl.Int64, "link": pl.String})
    if rest.is_empty():
        return empty
    tracks = rest.select("rank", *[pl.col(f"_l_{k}").alias(k) for k in _TRACK[1:]]).unique()
    hosts = ev.filter(kinds.in_categories(OP_CATEGORIES | REGION_CATEGORIES)).join(
        tracks, on=_TRACK, how="semi", nulls_equal=True)
    frame = pl.concat([
        hosts.select("event_id", "start_ns", pl.max_horizontal("start_ns", "end_ns").alias("end_ns"), *_TRACK,
                     _cat().is_in(list(OP_CATEGORIES)).alias("_op"), pl.lit(False).alias("_launch")),
        rest.select(pl.col("launch_id").alias("event_id"), pl.col("launch_start_ns").alias("start_ns"),
                    pl.col("launch_start_ns").alias("end_ns"), "rank",
                    *[pl.col(f"_l_{k}").alias(k) for k in _TRACK[1:]],
                    pl.lit(False).alias("_op"), pl.lit(True).alias("_launch")),
    ], how="vertical_relaxed")
    # a launch is placed as a zero-length point at its start: its owner is the op open then
    nested = nest(frame, by=_TRACK)
    rank = nested["rank"].to_numpy()
    ids = nested["event_id"].to_numpy()
    pid = nested["parent_id"].fill_null(-1).to_numpy()
    parent = row_positions(rank, ids, rank, pid)
    is_op = nested["_op"].to_numpy()
    is_region = ~is_op & ~nested["_launch"].to_numpy()
    start = np.flatnonzero(nested["_launch"].to_numpy())
    op = nearest_ancestor(parent, start, is_op)
    region = nearest_ancestor(parent, start, is_region)
    owner = np.where(op >= 0, op, region)
    found = owner >= 0
    return pl.DataFrame({
        "rank": rank[start][found],
        "launch_id": ids[start][found],
        "op_id": ids[owner[found]],
        "link": np.where(op[found] >= 0, "containment", "annotation"),
    }, schema={"rank": pl.Int32, "launch_id": pl.Int64, "op_id": pl.Int64, "link": pl.String})


# --------------------------------------------------------------------------- outputs


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
    rel = _ext_reliable(launches, device_events.filter(~pl.col("is_annotation")))
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
