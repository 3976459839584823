"""The scanner's column buffers as one Polars frame: every row of a file, split into tables later.

The C scanner (`proftab.io._kineto`) hands over Arrow buffers; each becomes a Series without a
copy (`fixed_column`, `string_column`, `dict_column`). Each row gets its kind from the tiny `ph`
dictionary (`ROW_*`, `row_kinds`), so the table builder splits rows without per-row string work.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl

from proftab import schema
from proftab.io import _kineto
from proftab.schema import ArgKind

__all__ = ["ROW_ASYNC", "ROW_BEGIN_END", "ROW_COUNTER", "ROW_FLOW", "ROW_INSTANT", "ROW_META", "ROW_REJECTED",
           "ROW_UNKNOWN", "ROW_X", "dict_column", "ensure_columns", "fixed_column", "kind_counts", "mark_rejected",
           "row_kinds", "scanned_frame", "string_column"]

_TYPED_NAMES = list(schema.TYPED_COLUMNS)
#: row kinds (the `_kind` column), computed from the tiny ph dictionary (no per-row string work)
ROW_X, ROW_BEGIN_END, ROW_ASYNC, ROW_INSTANT, ROW_FLOW, ROW_COUNTER, ROW_META, ROW_UNKNOWN, ROW_REJECTED = range(9)
_PH_KIND = {"X": ROW_X, "B": ROW_BEGIN_END, "E": ROW_BEGIN_END, "b": ROW_ASYNC, "e": ROW_ASYNC, "i": ROW_INSTANT,
            "I": ROW_INSTANT, "n": ROW_INSTANT, "R": ROW_INSTANT, "s": ROW_FLOW, "t": ROW_FLOW, "f": ROW_FLOW,
            "C": ROW_COUNTER, "M": ROW_META}


def fixed_column(spec: tuple[Any, Any, int] | None, n: int, kind: str, name: str) -> pl.Series | None:
    """A fixed-width scanner column as a Series over the scanner's own buffers (no copy)."""
    if spec is None:  # all null: the scanner allocated nothing
        return None
    data, valid, nulls = spec
    return pl.Series(_kineto.fixed_column(kind, data, valid, n, nulls)).alias(name)


def string_column(spec: tuple[Any, Any, Any, int] | None, n: int, name: str) -> pl.Series | None:
    """A string scanner column as a String Series (string views over the scanner's text)."""
    if spec is None:  # all null
        return None
    offsets, data, valid, nulls = spec
    return pl.Series(_kineto.string_column(offsets, data, valid, n, nulls)).alias(name)


def dict_column(spec: tuple[Any, Any, Any, int] | None, n: int, name: str, *, strings: bool) -> pl.Series | None:
    """A dictionary-coded scanner column: String rows sharing the dictionary's text
    (`strings`), else Categorical."""
    if spec is None:  # all null
        return None
    (codes, valid, nulls), offsets, data, size = spec
    build = _kineto.dict_string_column if strings else _kineto.dictionary_column
    return pl.Series(build(codes, valid, offsets, data, n, nulls, size)).alias(name)


def row_kinds(spec: tuple[Any, Any, Any, int] | None, n: int) -> np.ndarray:
    """`ROW_*` per row from the ph dictionary (no per-row string work)."""
    if spec is None:
        return np.full(n, ROW_UNKNOWN, dtype=np.uint8)
    (codes, valid, _), offsets, data, size = spec
    bounds = np.frombuffer(offsets, dtype=np.int64, count=size + 1)
    text = bytes(memoryview(data))
    table = np.array([_PH_KIND.get(text[bounds[i]:bounds[i + 1]].decode("utf-8", "replace"), ROW_UNKNOWN)
                      for i in range(size)] + [ROW_UNKNOWN], dtype=np.uint8)
    if valid is None and size and (table[:size] == table[0]).all():  # one kind for every row (an all-X trace)
        return np.full(n, table[0], dtype=np.uint8)
    ids = np.frombuffer(codes, dtype=np.int32, count=n)
    if valid is not None:  # null ph: the unknown slot
        is_valid = np.unpackbits(np.frombuffer(valid, dtype=np.uint8), count=n, bitorder="little").view(bool)
        ids = np.where(is_valid, ids, size)
    return table[ids]


def kind_counts(df: pl.DataFrame) -> dict[int, int]:
    """Rows per `ROW_*` kind present in `df` (a count per kind over its `_kind` bytes: no group-by)."""
    counts = np.bincount(df.get_column("_kind").to_numpy(), minlength=ROW_REJECTED + 1)
    return {k: int(c) for k, c in enumerate(counts) if c}


def scanned_frame(res: dict[str, Any]) -> pl.DataFrame:
    """All scanned rows as one frame (columns of every table; split later by ph)."""
    n = res["rows"]
    i64, text = pl.Int64(), pl.String()
    cols: dict[str, tuple[pl.Series | None, pl.DataType]] = {
        "event_id": (fixed_column(res["event_index"], n, "i64", "event_id"), i64),
        "ph": (dict_column(res["ph"], n, "ph", strings=False), pl.Categorical()),
        "_kind": (pl.Series("_kind", row_kinds(res["ph"], n)), pl.UInt8()),
        "cat": (dict_column(res["cat"], n, "cat", strings=False), pl.Categorical()),
        "name": (dict_column(res["name"], n, "name", strings=True), text),
        "pid": (fixed_column(res["pid"], n, "i64", "pid"), i64),
        "pid_text": (string_column(res["pid_text"], n, "pid_text"), text),
        "tid": (fixed_column(res["tid"], n, "i64", "tid"), i64),
        "tid_text": (string_column(res["tid_text"], n, "tid_text"), text),
        "ts": (fixed_column(res["ts"], n, "i64", "ts"), i64),
        "dur": (fixed_column(res["dur"], n, "i64", "dur"), i64),
        "id": (fixed_column(res["id"], n, "i64", "id"), i64),
        "id_text": (string_column(res["id_text"], n, "id_text"), text),
        "bp": (dict_column(res["bp"], n, "bp", strings=True), text),
        "s": (dict_column(res["s"], n, "s", strings=True), text),
        "reason": (dict_column(res["reason"], n, "reason", strings=True), text),
        "excerpt": (string_column(res["excerpt"], n, "excerpt"), text),
        "byte_offset": (fixed_column(res["offset"], n, "i64", "byte_offset"), i64),
        "flags": (fixed_column(res["flags"], n, "u16", "flags"), pl.UInt16()),
        "args": (string_column(res["args"], n, "args"), text),
        "extra": (string_column(res["extra"], n, "extra"), text),
        "mvalue": (string_column(res["mvalue"], n, "mvalue"), text),
    }
    typed = res["typed"]
    for i, name in enumerate(_TYPED_NAMES):
        spec = typed[i] if i < len(typed) else None
        if spec is None:
            continue
        kind = ArgKind(schema.TYPED_COLUMNS[name][1])
        if kind.is_text:
            cols[name] = (string_column(spec, n, name), text)
        else:  # bool columns are int64 here; ensure_columns casts them
            code, dtype = (("u64", pl.UInt64()) if kind is ArgKind.U64 else
                           ("f64", pl.Float64()) if kind is ArgKind.F64 else ("i64", i64))
            cols[name] = (fixed_column(spec, n, code, name), dtype)
    series = [col for col, _ in cols.values() if col is not None]
    # an all-null column is a literal, materialized only where an operation needs it
    nulls = [pl.lit(None, dtype).alias(c) for c, (col, dtype) in cols.items() if col is None]
    df = pl.DataFrame(series, height=n).with_columns(nulls)
    return df.with_columns(pl.col("flags").fill_null(0))  # typed bool columns stay int64 here (ensure_columns)


def mark_rejected(df: pl.DataFrame) -> pl.DataFrame:
    """Give a reason to rows that cannot be placed (no ts, unknown phase); kind REJECTED."""
    kind = pl.col("_kind")
    missing_ts = (kind <= ROW_COUNTER) & pl.col("ts").is_null()
    unknown = kind == ROW_UNKNOWN
    if df.get_column("reason").null_count() == len(df) and not df.select((missing_ts | unknown).any()).item():
        return df  # the common case: nothing to reject, and no full-height copies of reason and _kind
    no_reason = pl.col("reason").is_null()
    df = df.with_columns(
        reason=pl.when(no_reason & missing_ts).then(pl.lit("missing ts"))
        .when(no_reason & unknown).then(pl.format("unsupported phase '{}'", pl.col("ph").cast(pl.String)))
        .otherwise(pl.col("reason"))
    )
    return df.with_columns(_kind=pl.when(pl.col("reason").is_not_null()).then(pl.lit(ROW_REJECTED, pl.UInt8))
                           .otherwise(kind))


def ensure_columns(df: pl.DataFrame, columns: dict[str, schema.DType]) -> pl.DataFrame:
    """Select `columns` in order, adding absent ones as typed nulls."""
    return df.select([
        (pl.col(c) if c in df.columns else pl.lit(None)).cast(dt).alias(c) for c, dt in columns.items()
    ])


