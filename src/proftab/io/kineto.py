"""Read one Kineto / Chrome trace file into proftab's tables.

The JSON text is scanned by the C extension `proftab.io._kineto`, which writes Arrow column
buffers directly and converts `ts`/`dur` from their decimal text to int64 ns exactly.
Decompression runs on a second thread while the scanner consumes chunks, so a gzipped trace
is never held in memory whole.
"""

from __future__ import annotations

import json
import os
import re
import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import polars as pl

from proftab import schema
from proftab.exceptions import ProftabWarning, TraceError
from proftab.io import _kineto
from proftab.io.decompress import FileDigest, GzipDamage, raw_chunks, threaded
from proftab.io.kineto_counters import counters_table
from proftab.schema import ArgKind, Flag

__all__ = ["FileTables", "read_kineto"]

#: the largest single JSON value (one event, one top-level value) the scanner holds while it is
#: incomplete; a longer one stops the read with a TraceError (resource bound on hostile input)
MAX_TOKEN_BYTES = int(_kineto.DEFAULT_MAX_TOKEN)
_TYPED_SPEC = [(k.encode(), list(schema.TYPED_COLUMNS).index(c), kind) for k, c, kind in schema.TYPED_ARGS]
_TYPED_NAMES = list(schema.TYPED_COLUMNS)
# row kinds, computed from the tiny ph dictionary (no per-row string work)
_K_X, _K_BE, _K_ASYNC, _K_INSTANT, _K_FLOW, _K_COUNTER, _K_META, _K_UNKNOWN, _K_REJECTED = range(9)
_PH_KIND = {"X": _K_X, "B": _K_BE, "E": _K_BE, "b": _K_ASYNC, "e": _K_ASYNC, "i": _K_INSTANT, "I": _K_INSTANT,
            "n": _K_INSTANT, "R": _K_INSTANT, "s": _K_FLOW, "t": _K_FLOW, "f": _K_FLOW, "C": _K_COUNTER,
            "M": _K_META}
_INSTANT_PH = ("i", "I", "n", "R")
_FLOW_PH = ("s", "t", "f")


@dataclass
class FileTables:
    """Everything read from one trace file (before ranks are merged)."""

    path: str
    rank: int
    meta: dict[str, Any]
    events: pl.DataFrame
    instants: pl.DataFrame
    flows: pl.DataFrame
    counters: pl.DataFrame
    threads: pl.DataFrame
    rejected: pl.DataFrame
    accounting: pl.DataFrame
    warnings: list[str] = field(default_factory=list)
    source_sha256: str | None = None
    """sha256 of the file's bytes as read (null for a trace that was not a file)"""
    source_bytes: int | None = None
    """the file's size on disk (the bytes `source_sha256` is of)"""


# ----------------------------------------------------------------------------- reading


def scan_file(path: str, *, salvage: bool = False) -> dict[str, Any]:
    """Run the C scanner over a file; returns its raw column buffers.

    Reading stops at the scanner's first fatal error (a garbage gzip bomb is not decompressed
    to its end). A damaged gzip stream raises TraceError, or with `salvage` keeps what
    decompressed (`res["gzip_error"]` holds the message). `res["digest"]`: the file's
    `FileDigest`, fed as it was read (on the reading thread, beside decompression).
    """
    parser = _kineto.Parser(_TYPED_SPEC, salvage=salvage, max_token=MAX_TOKEN_BYTES)
    digest = FileDigest()
    chunks = threaded(raw_chunks(path, digest, reuse=True))  # each chunk is scanned before the next is taken
    damage = None
    try:
        for chunk in chunks:
            if parser.feed(chunk):
                break  # the scanner has stopped: nothing after this can be kept
    except GzipDamage as exc:
        if not salvage:
            raise TraceError(exc.message, path=path, offset=exc.compressed_offset,
                             hint="pt.load(..., salvage=True) (CLI: --salvage) keeps the events that "
                                  "decompressed") from None
        damage = exc
    finally:
        chunks.close()
    res: dict[str, Any] = parser.finish()
    res["gzip_error"] = None if damage is None else damage.message
    res["digest"] = digest
    return res


def scan_bytes(data: bytes, *, salvage: bool = False) -> dict[str, Any]:
    """Run the C scanner over JSON text in memory."""
    parser = _kineto.Parser(_TYPED_SPEC, salvage=salvage, max_token=MAX_TOKEN_BYTES)
    parser.feed(data)
    res: dict[str, Any] = parser.finish()
    res["gzip_error"] = None
    return res


# ----------------------------------------------------------------------------- columns


def _fixed(spec: tuple[Any, Any, int] | None, n: int, kind: str, name: str) -> pl.Series | None:
    """A fixed-width scanner column as a Series over the scanner's own buffers (no copy)."""
    if spec is None:  # all null: the scanner allocated nothing
        return None
    data, valid, nulls = spec
    return pl.Series(_kineto.fixed_column(kind, data, valid, n, nulls)).alias(name)


def _string(spec: tuple[Any, Any, Any, int] | None, n: int, name: str) -> pl.Series | None:
    """A string scanner column as a String Series (string views over the scanner's text)."""
    if spec is None:  # all null
        return None
    offsets, data, valid, nulls = spec
    return pl.Series(_kineto.string_column(offsets, data, valid, n, nulls)).alias(name)


def _dict(spec: tuple[Any, Any, Any, int] | None, n: int, name: str, *, strings: bool) -> pl.Series | None:
    """A dictionary-coded scanner column: String rows sharing the dictionary's text
    (`strings`), else Categorical."""
    if spec is None:  # all null
        return None
    (codes, valid, nulls), offsets, data, size = spec
    build = _kineto.dict_string_column if strings else _kineto.dictionary_column
    return pl.Series(build(codes, valid, offsets, data, n, nulls, size)).alias(name)


def _row_kinds(spec: tuple[Any, Any, Any, int] | None, n: int) -> np.ndarray:
    """`_K_*` per row from the ph dictionary (no per-row string work)."""
    if spec is None:
        return np.full(n, _K_UNKNOWN, dtype=np.uint8)
    (codes, valid, _), offsets, data, size = spec
    bounds = np.frombuffer(offsets, dtype=np.int64, count=size + 1)
    text = bytes(memoryview(data))
    table = np.array([_PH_KIND.get(text[bounds[i]:bounds[i + 1]].decode("utf-8", "replace"), _K_UNKNOWN)
                      for i in range(size)] + [_K_UNKNOWN], dtype=np.uint8)
    if valid is None and size and (table[:size] == table[0]).all():  # one kind for every row (an all-X trace)
        return np.full(n, table[0], dtype=np.uint8)
    ids = np.frombuffer(codes, dtype=np.int32, count=n)
    if valid is not None:  # null ph: the unknown slot
        is_valid = np.unpackbits(np.frombuffer(valid, dtype=np.uint8), count=n, bitorder="little").view(bool)
        ids = np.where(is_valid, ids, size)
    return table[ids]


def _kind_counts(df: pl.DataFrame) -> dict[int, int]:
    """Rows per `_K_*` kind present in `df` (a count per kind over its `_kind` bytes: no group-by)."""
    kinds = df.get_column("_kind").to_numpy()
    counts = {k: int(np.count_nonzero(kinds == k)) for k in range(_K_REJECTED + 1)}
    return {k: c for k, c in counts.items() if c}


def _to_frame(res: dict[str, Any]) -> pl.DataFrame:
    """All scanned rows as one frame (columns of every table; split later by ph)."""
    n = res["rows"]
    i64, text = pl.Int64(), pl.String()
    cols: dict[str, tuple[pl.Series | None, pl.DataType]] = {
        "event_id": (_fixed(res["event_index"], n, "i64", "event_id"), i64),
        "ph": (_dict(res["ph"], n, "ph", strings=False), pl.Categorical()),
        "_kind": (pl.Series("_kind", _row_kinds(res["ph"], n)), pl.UInt8()),
        "cat": (_dict(res["cat"], n, "cat", strings=False), pl.Categorical()),
        "name": (_dict(res["name"], n, "name", strings=True), text),
        "pid": (_fixed(res["pid"], n, "i64", "pid"), i64),
        "pid_text": (_string(res["pid_text"], n, "pid_text"), text),
        "tid": (_fixed(res["tid"], n, "i64", "tid"), i64),
        "tid_text": (_string(res["tid_text"], n, "tid_text"), text),
        "ts": (_fixed(res["ts"], n, "i64", "ts"), i64),
        "dur": (_fixed(res["dur"], n, "i64", "dur"), i64),
        "id": (_fixed(res["id"], n, "i64", "id"), i64),
        "id_text": (_string(res["id_text"], n, "id_text"), text),
        "bp": (_dict(res["bp"], n, "bp", strings=True), text),
        "s": (_dict(res["s"], n, "s", strings=True), text),
        "reason": (_dict(res["reason"], n, "reason", strings=True), text),
        "excerpt": (_string(res["excerpt"], n, "excerpt"), text),
        "byte_offset": (_fixed(res["offset"], n, "i64", "byte_offset"), i64),
        "flags": (_fixed(res["flags"], n, "u16", "flags"), pl.UInt16()),
        "args": (_string(res["args"], n, "args"), text),
        "extra": (_string(res["extra"], n, "extra"), text),
        "mvalue": (_string(res["mvalue"], n, "mvalue"), text),
    }
    typed = res["typed"]
    for i, name in enumerate(_TYPED_NAMES):
        spec = typed[i] if i < len(typed) else None
        if spec is None:
            continue
        kind = ArgKind(schema.TYPED_COLUMNS[name][1])
        if kind.is_text:
            cols[name] = (_string(spec, n, name), text)
        else:  # bool columns are int64 here; _ensure casts them
            code, dtype = (("u64", pl.UInt64()) if kind is ArgKind.U64 else
                           ("f64", pl.Float64()) if kind is ArgKind.F64 else ("i64", i64))
            cols[name] = (_fixed(spec, n, code, name), dtype)
    series = [col for col, _ in cols.values() if col is not None]
    # an all-null column is a literal, materialized only where an operation needs it
    nulls = [pl.lit(None, dtype).alias(c) for c, (col, dtype) in cols.items() if col is None]
    df = pl.DataFrame(series, height=n).with_columns(nulls)
    return df.with_columns(pl.col("flags").fill_null(0))  # typed bool columns stay int64 here; _ensure casts them


def _mark_rejected(df: pl.DataFrame) -> pl.DataFrame:
    """Give a reason to rows that cannot be placed (no ts, unknown phase); kind REJECTED."""
    kind = pl.col("_kind")
    missing_ts = (kind <= _K_COUNTER) & pl.col("ts").is_null()
    unknown = kind == _K_UNKNOWN
    if df.get_column("reason").null_count() == len(df) and not df.select((missing_ts | unknown).any()).item():
        return df  # the common case: nothing to reject, and no full-height copies of reason and _kind
    no_reason = pl.col("reason").is_null()
    df = df.with_columns(
        reason=pl.when(no_reason & missing_ts).then(pl.lit("missing ts"))
        .when(no_reason & unknown).then(pl.format("unsupported phase '{}'", pl.col("ph").cast(pl.String)))
        .otherwise(pl.col("reason"))
    )
    return df.with_columns(_kind=pl.when(pl.col("reason").is_not_null()).then(pl.lit(_K_REJECTED, pl.UInt8))
                           .otherwise(kind))


def _ensure(df: pl.DataFrame, columns: dict[str, schema.DType]) -> pl.DataFrame:
    """Select `columns` in order, adding absent ones as typed nulls."""
    return df.select([
        (pl.col(c) if c in df.columns else pl.lit(None)).cast(dt).alias(c) for c, dt in columns.items()
    ])


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


# ----------------------------------------------------------------------------- B/E pairing

_TRACK = ["pid", "pid_text", "tid", "tid_text"]


def _pair_begin_end(rows: pl.DataFrame, begin: str, end: str, keys: list[str],
                    last_ts: int | None) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Join begin/end rows into complete events (stack semantics per key, file order).

    `rows` holds only `begin` and `end` rows. Returns (events, rejected ends). An unmatched
    begin runs to `last_ts` and is flagged.
    """
    if rows.is_empty():
        return rows.clear(), rows.clear()
    # one exact, null-safe key column (joins never match nulls)
    be = rows.sort("event_id").with_columns(
        _key=pl.concat_str([pl.col(k).cast(pl.String).fill_null("\x00") for k in keys], separator="\x01"),
        _begin=pl.col("ph").cast(pl.String) == begin,
    )
    keys = ["_key"]
    step = pl.when(pl.col("_begin")).then(1).otherwise(-1)
    be = be.with_columns(_level=step.cum_sum().over(keys, order_by="event_id"))
    if be.select((pl.col("_level") < 0).any()).item():  # some track has more ends than begins
        be = _pair_with_stack(be, keys)
    begins = be.filter(pl.col("_begin"))
    ends = be.filter(~pl.col("_begin")).select(
        [*keys, pl.col("_level") + 1, pl.col("event_id").alias("_end_id"), pl.col("ts").alias("_end_ts"),
         pl.col("args").alias("_end_args")])
    joined = begins.join_asof(ends, left_on="event_id", right_on="_end_id", by=[*keys, "_level"],
                              strategy="forward", check_sortedness=False)
    used = joined.filter(pl.col("_end_id").is_not_null()).select("_end_id")
    unmatched_end = (
        be.filter(~pl.col("_begin"))
        .join(used, left_on="event_id", right_on="_end_id", how="anti")
        .with_columns(reason=pl.lit(f"'{end}' event without a matching '{begin}'"))
    )
    unmatched = pl.col("_end_id").is_null()
    end_ts = pl.when(unmatched).then(pl.lit(last_ts, pl.Int64)).otherwise(pl.col("_end_ts"))
    # end - begin must not wrap: such pairs (begin and end) are rejected, never stored wrapped
    span = end_ts.cast(pl.Int128) - pl.col("ts").cast(pl.Int128)
    joined = joined.with_columns(_ovf=~span.is_between(-(2**63), 2**63 - 1).fill_null(False))
    if joined.select(pl.col("_ovf").any()).item():
        ovf = joined.filter(pl.col("_ovf"))
        ids = pl.concat([ovf["event_id"], ovf["_end_id"].drop_nulls()])
        unmatched_end = pl.concat([
            unmatched_end,
            be.filter(pl.col("event_id").is_in(ids.implode()))
            .with_columns(reason=pl.lit(f"'{begin}'/'{end}' duration out of the int64 ns range")),
        ])
        joined = joined.filter(~pl.col("_ovf"))
    joined = joined.drop("_ovf")
    events = joined.with_columns(
        dur=(end_ts - pl.col("ts")),
        flags=pl.when(unmatched).then(pl.col("flags") | int(Flag.UNMATCHED_BEGIN)).otherwise(pl.col("flags")),
        extra=pl.when(pl.col("_end_args").is_not_null()).then(
            pl.when(pl.col("extra").is_null()).then(pl.lit("{"))
            .otherwise(pl.col("extra").str.strip_suffix("}") + pl.lit(", "))
            + pl.lit('"end_args": ') + pl.col("_end_args") + pl.lit("}")
        ).otherwise(pl.col("extra")),
    ).drop("_level", "_begin", "_end_id", "_end_ts", "_end_args", "_key")
    return events, unmatched_end.drop("_level", "_begin", "_key")


def _pair_with_stack(be: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    """Exact stack levels when some track has more ends than begins (rare; small loop)."""
    levels: list[int] = []
    depth: dict[tuple[Any, ...], int] = {}
    for row in be.select([*keys, "_begin"]).iter_rows():
        key, is_begin = row[:-1], row[-1]
        d = depth.get(key, 0)
        if is_begin:
            d += 1
            levels.append(d)
        elif d > 0:
            levels.append(d - 1)
            d -= 1
        else:
            levels.append(-(10**9))  # an end with nothing open: never matches
        depth[key] = d
    return be.with_columns(_level=pl.Series(levels, dtype=pl.Int64))


# ----------------------------------------------------------------------------- tables


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
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def infer_rank(meta: dict[str, Any], path: str, position: int) -> tuple[int, str]:
    """Rank from distributedInfo, else a rank-N pattern in the file name, else position."""
    info = meta.get("distributedInfo")
    if isinstance(info, dict) and isinstance(info.get("rank"), int) and not isinstance(info["rank"], bool):
        return info["rank"], "distributedInfo"
    m = _RANK_RE.search(os.path.basename(path))
    if m:
        return int(m.group(1)), "file name"
    return position, "file position"


def build_tables(res: dict[str, Any], path: str, *, salvage: bool = False, position: int = 0,
                 rank: int | None = None) -> FileTables:
    """Turn the scanner's buffers into proftab tables (raises TraceError on bad input)."""
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

    meta = _meta_from_envelope(res["envelope"], path)
    n_rows = res["rows"]
    if rank is None:
        rank, rank_source = infer_rank(meta, path, position)
    else:
        rank_source = "given"
    if not _INT32_MIN <= rank <= _INT32_MAX:
        msg = f"rank {rank!r} (from {rank_source}) is outside the int32 range"
        raise TraceError(msg, path=path, hint="pass ranks=[...] to pt.load")
    base = meta.get("baseTimeNanoseconds")
    if base is not None and not (isinstance(base, int) and not isinstance(base, bool)
                                 and _INT64_MIN <= base <= _INT64_MAX):
        msg = f"baseTimeNanoseconds {base!r} is not an int64 nanosecond count"
        raise TraceError(msg, path=path)
    max_frac = res["max_frac"]
    resolution = 10 ** (3 - min(3, max_frac))
    meta = {
        **meta,
        "source_file": path,
        "json_bytes": res["bytes"],
        "rank": rank,
        "rank_source": rank_source,
        "base_time_ns": int(base) if isinstance(base, int) else 0,
        "time_resolution_ns": resolution,
        "legacy_list_format": res["top_is_list"],
        "complete": err is None,
    }

    big = _mark_rejected(_to_frame(res["events"]).with_columns(rank=pl.lit(rank, pl.Int32)))
    small = _mark_rejected(_to_frame(res["other"]).with_columns(rank=pl.lit(rank, pl.Int32)))
    res.clear()  # release the scanner's buffers that the frames did not adopt
    kind = pl.col("_kind")
    counts: dict[int, int] = {}
    big_counts = _kind_counts(big)
    for frame_counts in (big_counts, _kind_counts(small)):
        for k, c in frame_counts.items():
            counts[k] = counts.get(k, 0) + c
    if len(big) != sum(big_counts.get(k, 0) for k in (_K_X, _K_BE, _K_ASYNC, _K_REJECTED)) or any(
            counts.get(k, 0) for k in (_K_X, _K_BE, _K_ASYNC) if counts.get(k, 0) != big_counts.get(k, 0)):
        msg = "internal error: the scanner and the table builder classify events differently"
        raise TraceError(msg, path=path)
    last_ts = None  # where an unmatched B/b ends: the file's last timestamp (only B/E/b/e traces need it)
    if counts.get(_K_BE) or counts.get(_K_ASYNC):
        ends = [f.select(pl.max_horizontal(pl.col("ts").max(), (pl.col("ts") + pl.col("dur"))
                                           .filter(pl.col("reason").is_null()).max())).item()
                for f in (big, small)]
        last_ts = max((v for v in ends if v is not None), default=None)
    # the two frames need not hold the same columns (all-null typed columns are absent): concat by name
    if counts.get(_K_REJECTED) and big.select((kind == _K_REJECTED).any()).item():
        small = pl.concat([small, big.filter(kind == _K_REJECTED)], how="diagonal_relaxed")
        big = big.filter(kind != _K_REJECTED)

    # the big table holds only X/B/E/b/e rows: most Kineto traces are all X, so no copy here
    x = big if big_counts.get(_K_X, 0) == len(big) else big.filter(kind == _K_X)
    x = x.with_columns(
        flags=pl.col("flags") | pl.when(pl.col("dur").is_null()).then(int(Flag.DUR_MISSING)).otherwise(0),
        dur=pl.col("dur").fill_null(0),
    )
    pieces = [x]
    bad_pieces = []
    if counts.get(_K_BE):
        ev, bad = _pair_begin_end(big.filter(kind == _K_BE), "B", "E", _TRACK, last_ts)
        pieces.append(ev)
        bad_pieces.append(bad)
    if counts.get(_K_ASYNC):
        ev, bad = _pair_begin_end(big.filter(kind == _K_ASYNC), "b", "e",
                                  ["pid", "pid_text", "cat", "id", "id_text"], last_ts)
        pieces.append(ev)
        bad_pieces.append(bad)
    del big
    events = pl.concat(pieces, how="vertical_relaxed") if len(pieces) > 1 else x
    del x, pieces
    events = events.with_columns(
        start_ns=pl.col("ts"),
        dur_ns=pl.col("dur"),
        end_ns=pl.col("ts") + pl.col("dur"),
        flags=pl.col("flags") | pl.when(pl.col("dur") < 0).then(int(Flag.NEGATIVE_DUR)).otherwise(0),
    )
    if len(bad_pieces):
        events = events.sort("event_id")
    events = canonical_json_columns(_ensure(events, schema.EVENT_COLUMNS))

    instants = _ensure(small.filter(kind == _K_INSTANT).rename({"ts": "start_ns", "s": "scope"}),
                       schema.INSTANT_COLUMNS)
    flows = _ensure(small.filter(kind == _K_FLOW).rename({"ts": "start_ns"}), schema.FLOW_COLUMNS)
    counters, bad_counter_values = counters_table(small.filter(kind == _K_COUNTER))
    if bad_counter_values:
        notes.append(f"{path}: {bad_counter_values} counter values are not numbers (left out of Trace.counters)")
    meta_rows = small.filter(kind == _K_META)
    threads = _threads(meta_rows)

    rejected = small.filter(kind == _K_REJECTED)
    if bad_pieces:
        rejected = pl.concat([rejected, *bad_pieces], how="diagonal_relaxed")
    rejected = _ensure(rejected, schema.REJECTED_COLUMNS).sort("event_id")

    n_events_in = sum(counts.get(k, 0) for k in (_K_X, _K_BE, _K_ASYNC)) - sum(len(b) for b in bad_pieces)
    accounting = pl.DataFrame(
        {
            "path": [path], "rank": [rank], "trace_events": [n_rows], "events_in": [n_events_in],
            "instants": [len(instants)], "flows": [len(flows)], "counters": [counts.get(_K_COUNTER, 0)],
            "metadata": [len(meta_rows)], "rejected": [len(rejected)],
        },
        schema=schema.ACCOUNTING_COLUMNS,
    )
    repaired = events.select((pl.col("flags") & int(Flag.NAME_REPAIRED | Flag.ARGS_REPAIRED) != 0).sum()).item()
    if repaired:
        notes.append(f"{path}: repaired {repaired} event names/args (invalid UTF-8 or unescaped quotes); "
                     "see the flags column")
    if len(rejected):
        notes.append(f"{path}: {len(rejected)} input events rejected; see Trace.rejected")
    for note in notes:
        warnings.warn(note, ProftabWarning, stacklevel=3)
    return FileTables(path=path, rank=rank, meta=meta, events=events, instants=instants, flows=flows,
                      counters=counters, threads=threads, rejected=rejected, accounting=accounting,
                      warnings=notes)


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
    return _ensure(out, schema.THREAD_COLUMNS).sort(keys, nulls_last=True)


def read_kineto(path: str | os.PathLike[str], *, salvage: bool = False, position: int = 0,
                rank: int | None = None) -> FileTables:
    """Read one trace file (plain or gzipped JSON) into tables."""
    path = os.fspath(path)
    try:
        res = scan_file(path, salvage=salvage)
    except OSError as exc:
        msg = f"cannot read the file ({exc.strerror or exc})"
        raise TraceError(msg, path=path) from None
    digest: FileDigest = res.pop("digest")
    tables = build_tables(res, path, salvage=salvage, position=position, rank=rank)
    tables.source_sha256 = digest.hexdigest(path)  # only for a file that loads: the unread rest is read now
    tables.source_bytes = digest.n_bytes if tables.source_sha256 is not None else None
    return tables
