"""The trace written back as Chrome JSON (Perfetto UI, chrome://tracing) with the critical path on it.

Every complete event of the ranks on the path is written with its original fields and args;
the events on the path get ``"critical_path": true`` and the time they contribute
(``cp_ns``, ``cp_bound_by``) in their args and the category ``critical_path`` prefixed to theirs;
a process "critical path" holds one slice per segment, coloured by what bounds it; flow arrows
(``ph`` s/f, ``cat`` ``critical_path``) join consecutive segments on different tracks. Times are
written as exact decimal µs (``ts`` / ``dur`` with three decimals = the ns). When the path spans
several ranks, each rank's pids are moved to ``rank * 10**9 + pid`` so that they do not collide.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import polars as pl

if TYPE_CHECKING:
    import os

__all__ = ["overlay_document", "write_overlay"]

_PATH_PID = -7  # the critical-path process (negative: no clash with real pids)
_RANK_PID_STRIDE = 10**9
_COLOUR = {"cpu_bound": "thread_state_running", "gpu_compute_bound": "good", "gpu_communication_bound": "yellow",
           "gpu_memcpy_bound": "olive", "launch_overhead": "terrible", "sync": "bad"}


def _us(col: str | pl.Expr) -> pl.Expr:
    """Exact µs text of an int64 ns column (``1234567`` -> ``1234.567``)."""
    c = pl.col(col) if isinstance(col, str) else col
    sign = pl.when(c < 0).then(pl.lit("-")).otherwise(pl.lit(""))
    a = c.abs()
    return pl.concat_str([sign, (a // 1000).cast(pl.String), pl.lit("."),
                          (a % 1000).cast(pl.String).str.zfill(3)])


def _encode(df: pl.DataFrame, fields: list[str], args: str | None) -> pl.Series:
    """One JSON object per row: `fields` (strings / ints, JSON-encoded by Polars), then ``ts`` and
    ``dur`` from the ``_ts`` / ``_dur`` text columns, then the raw JSON text column `args`.
    """
    body = df.select(pl.struct(fields).struct.json_encode().alias("j"))["j"].str.strip_suffix("}")
    tail = pl.concat_str([pl.lit(',"ts":'), pl.col("_ts")])
    if "_dur" in df.columns:
        tail = pl.concat_str([tail, pl.lit(',"dur":'), pl.col("_dur")])
    if args is not None:
        tail = pl.concat_str([tail, pl.lit(',"args":'), pl.col(args)])
    return df.select(pl.concat_str([pl.lit(body), tail, pl.lit("}")]).alias("e"))["e"]


def overlay_document(events: pl.DataFrame, threads: pl.DataFrame, path: pl.DataFrame) -> str:
    """The Chrome JSON text: the ranks of `path`'s events, marked, plus the path track and flows.

    Parameters
    ----------
    events
        ``Trace.events`` (rank, event_id, pid, tid, cat, name, ph, start_ns, dur_ns, args).
    threads
        ``Trace.threads`` (process / thread names, written as metadata events).
    path
        Segments from `proftab.critical_path.path_frame` (several windows may be concatenated).
    """
    ranks = sorted(set(path["rank"].to_list()))
    # several ranks: each rank's pids moved to a range of their own (rank * 10**9 + pid)
    rank_pid = (pl.col("pid") + pl.col("rank").cast(pl.Int64) * _RANK_PID_STRIDE) if len(ranks) > 1 else pl.col("pid")
    ev = events.filter(pl.col("rank").is_in(ranks) & (pl.col("ph").cast(pl.String) == "X")
                       & pl.col("pid").is_not_null() & pl.col("tid").is_not_null()).with_columns(rank_pid)
    on = (path.filter(pl.col("event_id").is_not_null())
          .group_by("rank", "event_id").agg(pl.col("dur_ns").sum().alias("cp_ns"),
                                            pl.col("bound_by").cast(pl.String).mode().first().alias("cp_bound_by")))
    ev = ev.join(on, on=["rank", "event_id"], how="left")
    crit = pl.col("cp_ns").is_not_null()
    extra = pl.concat_str([pl.lit('"critical_path":true,"cp_ns":'), pl.col("cp_ns").cast(pl.String),
                           pl.lit(',"cp_bound_by":"'), pl.col("cp_bound_by"), pl.lit('"')])
    raw = pl.col("args").fill_null("{}")
    merged = (pl.when(~crit).then(raw)
              .when(raw.str.strip_chars() == "{}").then(pl.concat_str([pl.lit("{"), extra, pl.lit("}")]))
              .otherwise(pl.concat_str([pl.lit("{"), extra, pl.lit(","), raw.str.strip_chars().str.slice(1)])))
    cat = pl.col("cat").cast(pl.String).fill_null("")
    ev = ev.with_columns(
        pl.lit("X").alias("ph"), pl.when(crit).then(pl.lit("critical_path,") + cat).otherwise(cat).alias("cat"),
        _us("start_ns").alias("_ts"), _us("dur_ns").alias("_dur"),
        merged.alias("_args"))
    lines = [_encode(ev, ["ph", "cat", "name", "pid", "tid"], "_args")]

    # the path as its own track, one slice per segment
    seg = path.with_columns(
        pl.lit("X").alias("ph"), pl.lit("critical_path").alias("cat"),
        pl.coalesce(pl.col("name"), pl.col("kind").cast(pl.String)).alias("name"),
        pl.lit(_PATH_PID, pl.Int64).alias("pid"), pl.col("rank").cast(pl.Int64).alias("tid"),
        pl.col("bound_by").cast(pl.String).replace_strict(_COLOUR, default="grey").alias("cname"),
        _us("start_ns").alias("_ts"), _us("dur_ns").alias("_dur"),
        pl.struct(pl.col("kind").cast(pl.String), pl.col("bound_by").cast(pl.String), "via", "event_id", "step",
                  "seq", "dur_ns").struct.json_encode().alias("_args"))
    lines.append(_encode(seg, ["ph", "cat", "name", "pid", "tid", "cname"], "_args"))

    # flow arrows between consecutive segments on different tracks
    tracks = ev.select("rank", "event_id", "pid", "tid")
    s = (path.filter(pl.col("event_id").is_not_null()).join(tracks, on=["rank", "event_id"], how="inner")
         .sort("rank", "step", "seq", nulls_last=True))
    nxt = s.select(pl.all().shift(-1).over("rank", "step").name.suffix("_n"))
    pairs = pl.concat([s, nxt], how="horizontal").filter(
        pl.col("seq_n").is_not_null() & ((pl.col("pid") != pl.col("pid_n")) | (pl.col("tid") != pl.col("tid_n"))))
    pairs = pairs.with_row_index("id")
    common = [pl.lit("critical_path").alias("cat"), pl.lit("critical path").alias("name"),
              pl.col("id").cast(pl.Int64)]
    out_s = pairs.select(pl.lit("s").alias("ph"), *common, "pid", "tid",
                         _us(pl.col("end_ns") - 1).alias("_ts"))
    out_f = pairs.select(pl.lit("f").alias("ph"), *common, pl.lit("e").alias("bp"), pl.col("pid_n").alias("pid"),
                         pl.col("tid_n").alias("tid"), _us("start_ns_n").alias("_ts"))
    lines += [_encode(out_s, ["ph", "cat", "name", "id", "pid", "tid"], None),
              _encode(out_f, ["ph", "cat", "name", "id", "bp", "pid", "tid"], None)]

    # names of processes and threads, and of the path track
    th = threads.filter(pl.col("rank").is_in(ranks) & pl.col("pid").is_not_null()).with_columns(rank_pid)
    meta = [json.dumps({"ph": "M", "name": "process_name", "pid": _PATH_PID, "args": {"name": "critical path"}}),
            json.dumps({"ph": "M", "name": "process_sort_index", "pid": _PATH_PID, "args": {"sort_index": -1}})]
    for r in ranks:
        meta.append(json.dumps({"ph": "M", "name": "thread_name", "pid": _PATH_PID, "tid": int(r),
                                "args": {"name": f"rank {r}"}}))
    names = pl.concat([
        th.filter(pl.col("process_name").is_not_null()).unique(["pid"]).select(
            pl.struct(pl.lit("M").alias("ph"), pl.lit("process_name").alias("name"), "pid",
                      pl.struct(pl.col("process_name").alias("name")).alias("args")).struct.json_encode().alias("j")),
        th.filter(pl.col("thread_name").is_not_null() & pl.col("tid").is_not_null()).select(
            pl.struct(pl.lit("M").alias("ph"), pl.lit("thread_name").alias("name"), "pid", "tid",
                      pl.struct(pl.col("thread_name").alias("name")).alias("args")).struct.json_encode().alias("j")),
    ])["j"]
    body = str(pl.concat([pl.Series(meta, dtype=pl.String), names, *lines]).str.join(",\n").item())
    return '{"displayTimeUnit": "ns", "traceEvents": [\n' + body + "\n]}\n"


def write_overlay(events: pl.DataFrame, threads: pl.DataFrame, path: pl.DataFrame,
                  out: str | os.PathLike[str]) -> None:
    """Write `overlay_document` to `out` (gzip-compressed when it ends in ``.gz``)."""
    text = overlay_document(events, threads, path)
    if str(out).endswith(".gz"):
        import gzip

        with gzip.open(out, "wt", encoding="utf-8") as fh:
            fh.write(text)
    else:
        with open(out, "w", encoding="utf-8") as fh:
            fh.write(text)

