"""One Kineto / Chrome trace file's tables from the scanner's buffers (`build_tables`).

The JSON text is scanned by the C extension `proftab.io._kineto` (`proftab.io.kineto.scan`),
which writes Arrow column buffers directly and converts `ts`/`dur` from their decimal text to
int64 ns exactly. Here those rows become the tables of `proftab.schema`: complete events (X
rows, and B/E, b/e pairs: `proftab.io.kineto.pairing`), instants, flows, counters, the
process/thread names, the rejected rows and the accounting of every input event.
"""

from __future__ import annotations

import json
import os
import re
import warnings
from typing import TYPE_CHECKING, Any

import polars as pl

from proftab import schema
from proftab.clock import base_time_ns, time_resolution_ns
from proftab.exceptions import ProftabWarning, TraceError
from proftab.io.kineto.columns import (
    ROW_ASYNC,
    ROW_BEGIN_END,
    ROW_COUNTER,
    ROW_FLOW,
    ROW_INSTANT,
    ROW_META,
    ROW_REJECTED,
    ROW_X,
    ensure_columns,
    kind_counts,
    mark_rejected,
    scanned_frame,
)
from proftab.io.kineto.counters import counters_table
from proftab.io.kineto.pairing import ASYNC_KEYS, THREAD_KEYS, pair_begin_end
from proftab.io.kineto.scan import scan_path
from proftab.io.tables import FileTables
from proftab.schema import Flag

if TYPE_CHECKING:
    from proftab.io.kineto.decompress import FileDigest

__all__ = ["JSON_COLUMNS", "build_tables", "canonical_json_columns", "infer_rank", "read_kineto", "tables_from_scan"]


# ----------------------------------------------------------------------------- JSON text columns


#: the JSON-text typed columns (`Input Dims`, `Input type`, `grid`, ...)
JSON_COLUMNS = tuple(c for c, (_, kind) in schema.TYPED_COLUMNS.items() if kind == schema.ArgKind.JSON)


def _canonical_json(text: str) -> str:
    """One JSON value in torch's text form: `[[512], [141, 512], [], []]`.

    ``json.dumps``'s separators, whatever the file's indentation and line breaks; invalid
    JSON is kept as is.
    """
    try:
        return json.dumps(json.loads(text), ensure_ascii=False)
    except ValueError:
        return text


def canonical_json_columns(df: pl.DataFrame) -> pl.DataFrame:
    r"""`df` with its JSON-text columns (`JSON_COLUMNS`) in one canonical text form.

    A pretty-printed trace (`json.dump(..., indent=2)`, 9 of the 52 public traces) holds
    ``"Input Dims": [\n [\n 512\n ], ...`` where torch writes ``[[512], [141, 512]]``; the
    two must group, print and diff alike. Only the distinct values are parsed (a trace has a
    few thousand distinct shapes at most), and a column whose values are already canonical is
    left untouched.
    """
    fixes = []
    for col in JSON_COLUMNS:
        if col not in df.columns:
            continue
        values = df.get_column(col).drop_nulls().unique().to_list()
        pairs = [(v, c) for v in values if (c := _canonical_json(v)) != v]
        if pairs:
            old, new = zip(*pairs, strict=True)
            fixes.append(pl.col(col).replace(list(old), list(new)))
    return df.with_columns(fixes) if fixes else df



# ----------------------------------------------------------------------------- the file's facts


def _meta_from_envelope(raw: bytes, path: str) -> dict[str, Any]:
    if not raw:
        return {}
    try:
        meta = json.loads(raw + b"}")
    except ValueError as exc:
        msg = f"the top-level keys are not valid JSON ({exc})"
        raise TraceError(msg, path=path) from None
    return meta if isinstance(meta, dict) else {}



_RANK_RE = re.compile(r"rank[-_]?(\d+)", re.IGNORECASE)
_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1


def infer_rank(meta: dict[str, Any], path: str, position: int) -> tuple[int, str]:
    """Rank from distributedInfo, else a rank-N pattern in the file name, else position."""
    info = meta.get("distributedInfo")
    if isinstance(info, dict) and isinstance(info.get("rank"), int) and not isinstance(info["rank"], bool):
        return info["rank"], "distributedInfo"
    m = _RANK_RE.search(os.path.basename(path))
    if m:
        return int(m.group(1)), "file name"
    return position, "file position"


def _read_notes(res: dict[str, Any], path: str, *, salvage: bool) -> list[str]:
    """What the read itself says about the file: a fatal error (raised, or kept with `salvage`),
    gzip damage, resynchronized regions, lenient syntax. Raises TraceError for a file that is
    no trace or cannot be salvaged."""
    notes: list[str] = []
    err = res["error"]
    gz = res.get("gzip_error")
    if err is not None:
        message, offset, excerpt = err
        complete_rows = res["rows"]
        if not salvage or not (res["saw_events"] or res["rows"]):
            # nothing to salvage when the traceEvents array was never reached (empty, not JSON)
            hint = (f"{complete_rows} complete events can be recovered with "
                    "pt.load(..., salvage=True) (CLI: --salvage)") if complete_rows and not salvage else None
            if gz:
                message = f"{gz}; {message}"
            raise TraceError(message, path=path, offset=offset, excerpt=excerpt or None,
                             recoverable_events=complete_rows, hint=hint)
        lost = res["bytes"] - offset
        tail = "dropped the rest of the file" if gz else f"dropped the last {lost} of {res['bytes']} bytes"
        notes.append(f"{path}: {gz + '; ' if gz else ''}{message} at byte {offset}; kept {complete_rows} "
                     f"complete events, {tail}")
    elif gz:
        notes.append(f"{path}: {gz}; kept all {res['rows']} events read before the damage")
    if err is None and res["resyncs"]:
        notes.append(f"{path}: skipped {res['resyncs']} damaged region(s); see Trace.rejected")
    if res["lenient"]:
        notes.append(f"{path}: accepted {res['lenient']} JSON syntax error(s) between events (double, "
                     "missing or trailing commas)")
    if not res["saw_events"] and err is None:
        meta_keys = sorted(_meta_from_envelope(res["envelope"], path))
        msg = f"not a Kineto/Chrome trace: no 'traceEvents' array (top-level keys: {meta_keys})"
        raise TraceError(msg, path=path)
    return notes


def _file_meta(res: dict[str, Any], path: str, *, position: int, rank: int | None) -> dict[str, Any]:
    """The file's top-level keys plus what proftab derives: its rank (and where from), base
    time, time resolution, sizes and completeness (`files.meta_json`)."""
    meta = _meta_from_envelope(res["envelope"], path)
    if rank is None:
        rank, rank_source = infer_rank(meta, path, position)
    else:
        rank_source = "given"
    if not _INT32_MIN <= rank <= _INT32_MAX:
        msg = f"rank {rank!r} (from {rank_source}) is outside the int32 range"
        raise TraceError(msg, path=path, hint="pass ranks=[...] to pt.load")
    base = base_time_ns(meta, path)
    return {
        **meta,
        "source_file": path,
        "json_bytes": res["bytes"],
        "rank": rank,
        "rank_source": rank_source,
        "base_time_ns": base,
        "time_resolution_ns": time_resolution_ns(res["max_frac"]),
        "legacy_list_format": res["top_is_list"],
        "complete": res["error"] is None,
    }


# ----------------------------------------------------------------------------- tables


def _events(res: dict[str, Any], rank: int, path: str
            ) -> tuple[pl.DataFrame, pl.DataFrame, dict[int, int], list[pl.DataFrame]]:
    """The complete events of the scanned rows, which this consumes (`res` is cleared).

    The scanner puts X/B/E/b/e rows in `res["events"]` and every other row in `res["other"]`.
    Returns (events, the other rows plus rejected event rows, rows per kind, rejected B/E and
    b/e ends).
    """
    big = mark_rejected(scanned_frame(res["events"]).with_columns(rank=pl.lit(rank, pl.Int32)))
    small = mark_rejected(scanned_frame(res["other"]).with_columns(rank=pl.lit(rank, pl.Int32)))
    res.clear()  # release the scanner's buffers that the frames did not adopt
    kind = pl.col("_kind")
    counts: dict[int, int] = {}
    big_counts = kind_counts(big)
    for frame_counts in (big_counts, kind_counts(small)):
        for k, c in frame_counts.items():
            counts[k] = counts.get(k, 0) + c
    if len(big) != sum(big_counts.get(k, 0) for k in (ROW_X, ROW_BEGIN_END, ROW_ASYNC, ROW_REJECTED)) or any(
            counts.get(k, 0) for k in (ROW_X, ROW_BEGIN_END, ROW_ASYNC) if counts.get(k, 0) != big_counts.get(k, 0)):
        msg = "internal error: the scanner and the table builder classify events differently"
        raise TraceError(msg, path=path)
    last_ts = None  # where an unmatched B/b ends: the file's last timestamp (only B/E/b/e traces need it)
    if counts.get(ROW_BEGIN_END) or counts.get(ROW_ASYNC):
        ends = [f.select(pl.max_horizontal(pl.col("ts").max(), (pl.col("ts") + pl.col("dur"))
                                           .filter(pl.col("reason").is_null()).max())).item()
                for f in (big, small)]
        last_ts = max((v for v in ends if v is not None), default=None)
    # the two frames need not hold the same columns (all-null typed columns are absent): concat by name
    if counts.get(ROW_REJECTED) and big.select((kind == ROW_REJECTED).any()).item():
        small = pl.concat([small, big.filter(kind == ROW_REJECTED)], how="diagonal_relaxed")
        big = big.filter(kind != ROW_REJECTED)

    # the big table holds only X/B/E/b/e rows: most Kineto traces are all X, so no copy here
    x = big if big_counts.get(ROW_X, 0) == len(big) else big.filter(kind == ROW_X)
    x = x.with_columns(
        flags=pl.col("flags") | pl.when(pl.col("dur").is_null()).then(int(Flag.DUR_MISSING)).otherwise(0),
        dur=pl.col("dur").fill_null(0),
    )
    pieces = [x]
    unpaired = []
    for row_kind, begin, end, keys in ((ROW_BEGIN_END, "B", "E", THREAD_KEYS), (ROW_ASYNC, "b", "e", ASYNC_KEYS)):
        if counts.get(row_kind):
            ev, bad = pair_begin_end(big.filter(kind == row_kind), begin, end, keys, last_ts)
            pieces.append(ev)
            unpaired.append(bad)
    del big
    events = pl.concat(pieces, how="vertical_relaxed") if len(pieces) > 1 else x
    del x, pieces
    events = events.with_columns(
        start_ns=pl.col("ts"),
        dur_ns=pl.col("dur"),
        end_ns=pl.col("ts") + pl.col("dur"),
        flags=pl.col("flags") | pl.when(pl.col("dur") < 0).then(int(Flag.NEGATIVE_DUR)).otherwise(0),
    )
    if len(unpaired):
        events = events.sort("event_id")
    return canonical_json_columns(ensure_columns(events, schema.EVENT_COLUMNS)), small, counts, unpaired


def _other_tables(small: pl.DataFrame, unpaired: list[pl.DataFrame], path: str, notes: list[str]
                  ) -> dict[str, pl.DataFrame]:
    """instants, flows, counters, threads and rejected from the rows that are not events
    (`metadata`: the ph M rows, for the accounting); counter values that are no number are noted."""
    kind = pl.col("_kind")
    instants = ensure_columns(small.filter(kind == ROW_INSTANT).rename({"ts": "start_ns", "s": "scope"}),
                              schema.INSTANT_COLUMNS)
    flows = ensure_columns(small.filter(kind == ROW_FLOW).rename({"ts": "start_ns"}), schema.FLOW_COLUMNS)
    counters, bad_counter_values = counters_table(small.filter(kind == ROW_COUNTER))
    if bad_counter_values:
        notes.append(f"{path}: {bad_counter_values} counter values are not numbers (left out of Trace.counters)")
    meta_rows = small.filter(kind == ROW_META)
    rejected = small.filter(kind == ROW_REJECTED)
    if unpaired:
        rejected = pl.concat([rejected, *unpaired], how="diagonal_relaxed")
    rejected = ensure_columns(rejected, schema.REJECTED_COLUMNS).sort("event_id")
    return {"instants": instants, "flows": flows, "counters": counters, "threads": _threads(meta_rows),
            "rejected": rejected, "metadata": meta_rows}


def build_tables(res: dict[str, Any], path: str, *, salvage: bool = False, position: int = 0,
                 rank: int | None = None) -> FileTables:
    """Turn the scanner's buffers into proftab tables (raises TraceError on bad input)."""
    notes = _read_notes(res, path, salvage=salvage)
    meta = _file_meta(res, path, position=position, rank=rank)
    rank = meta["rank"]
    n_rows = res["rows"]
    events, small, counts, unpaired = _events(res, rank, path)
    tables = _other_tables(small, unpaired, path, notes)
    del small
    n_events_in = sum(counts.get(k, 0) for k in (ROW_X, ROW_BEGIN_END, ROW_ASYNC)) - sum(len(b) for b in unpaired)
    accounting = pl.DataFrame(
        {
            "path": [path], "rank": [rank], "trace_events": [n_rows], "events_in": [n_events_in],
            "instants": [len(tables["instants"])], "flows": [len(tables["flows"])],
            "counters": [counts.get(ROW_COUNTER, 0)], "metadata": [len(tables.pop("metadata"))],
            "rejected": [len(tables["rejected"])],
        },
        schema=schema.ACCOUNTING_COLUMNS,
    )
    repaired = events.select((pl.col("flags") & int(Flag.NAME_REPAIRED | Flag.ARGS_REPAIRED) != 0).sum()).item()
    if repaired:
        notes.append(f"{path}: repaired {repaired} event names/args (invalid UTF-8 or unescaped quotes); "
                     "see the flags column")
    if len(tables["rejected"]):
        notes.append(f"{path}: {len(tables['rejected'])} input events rejected; see Trace.rejected")
    for note in notes:
        warnings.warn(note, ProftabWarning, stacklevel=3)
    return FileTables(path=path, rank=rank, meta=meta, events=events, instants=tables["instants"],
                      flows=tables["flows"], counters=tables["counters"], threads=tables["threads"],
                      rejected=tables["rejected"], accounting=accounting, warnings=notes)


_THREAD_FIELDS = {
    "process_name": "name",
    "process_labels": "labels",
    "process_sort_index": "sort_index",
    "thread_name": "name",
    "thread_sort_index": "sort_index",
}


def _threads(rows: pl.DataFrame) -> pl.DataFrame:
    """Wide process/thread naming table from ph "M" rows (the last value of a field wins)."""
    keys = schema.TRACK_KEYS
    rows = rows.filter(pl.col("name").is_in(list(_THREAD_FIELDS)))
    if rows.is_empty():
        return schema.empty(schema.THREAD_COLUMNS)
    rows = rows.select([*keys, "name", "event_id", pl.col("mvalue").alias("value")])
    is_proc = pl.col("name").str.starts_with("process")
    procs = (rows.filter(is_proc).sort("event_id")
             .pivot(on="name", index=keys[:3], values="value", aggregate_function="last"))
    threads = (rows.filter(~is_proc).sort("event_id")
               .pivot(on="name", index=keys, values="value", aggregate_function="last"))
    for col in ("process_name", "process_labels", "process_sort_index"):
        if col not in procs.columns:
            procs = procs.with_columns(pl.lit(None, pl.String).alias(col))
    for col in ("thread_name", "thread_sort_index"):
        if col not in threads.columns:
            threads = threads.with_columns(pl.lit(None, pl.String).alias(col))
    out = threads.join(procs, on=keys[:3], how="full", coalesce=True, nulls_equal=True)
    out = out.with_columns(pl.col("process_sort_index", "thread_sort_index").cast(pl.Int64, strict=False))
    return ensure_columns(out, schema.THREAD_COLUMNS).sort(keys, nulls_last=True)



def read_kineto(path: str | os.PathLike[str], *, salvage: bool = False, position: int = 0,
                rank: int | None = None) -> FileTables:
    """Read one trace file (plain or gzipped JSON) into tables."""
    path = os.fspath(path)
    return tables_from_scan(scan_path(path, salvage=salvage), path, salvage=salvage, position=position, rank=rank)


def tables_from_scan(res: dict[str, Any], path: str, *, salvage: bool = False, position: int = 0,
                     rank: int | None = None) -> FileTables:
    """The tables of one file from its `scan_file` result (which this consumes), with its digest."""
    digest: FileDigest = res.pop("digest")
    tables = build_tables(res, path, salvage=salvage, position=position, rank=rank)
    tables.source_sha256 = digest.hexdigest(path)  # only for a file that loads: the unread rest is read now
    tables.source_bytes = digest.n_bytes if tables.source_sha256 is not None else None
    return tables
