"""Counter (ph "C") events -> the long `counters` table, robust to hostile args."""

from __future__ import annotations

import json

import polars as pl

from proftab import schema

__all__ = ["counters_table"]


def counters_table(rows: pl.DataFrame) -> tuple[pl.DataFrame, int]:
    """One row per (counter event, series); values as Float64.

    Returns the table and the number of values that are not numbers (dropped, reported). The
    args are decoded in one vectorized pass; input that pass refuses (NaN, Infinity, mixed types
    across events, duplicate keys...) is decoded value by value instead, never fatally.
    """
    rows = rows.filter(pl.col("args").is_not_null())
    if rows.is_empty():
        return schema.empty(schema.COUNTER_COLUMNS), 0
    base_cols = [c for c in schema.COUNTER_COLUMNS if c not in ("start_ns", "series", "value")]
    base = rows.select([*base_cols, pl.col("ts").alias("start_ns")])
    try:
        long, bad = _counters_fast(base, rows["args"])
    except (pl.exceptions.PolarsError, ValueError, TypeError):
        long, bad = _counters_fallback(base, rows["args"])
    return long.sort("event_id", maintain_order=True).select(list(schema.COUNTER_COLUMNS)).cast(
        schema.COUNTER_COLUMNS), bad  # type: ignore[arg-type]


def _counters_fast(base: pl.DataFrame, args: pl.Series) -> tuple[pl.DataFrame, int]:
    decoded = base.with_columns(args.str.json_decode(infer_schema_length=None).alias("_v"))
    fields = decoded.schema["_v"]
    if not isinstance(fields, pl.Struct) or not fields.fields:
        msg = "counter args are not objects"
        raise ValueError(msg)
    if any(not (f.dtype.is_numeric() or f.dtype == pl.Null) for f in fields.fields):
        msg = "non-numeric counter values"
        raise ValueError(msg)
    if len({f.name for f in fields.fields}) != len(fields.fields):
        msg = "duplicate series names"
        raise ValueError(msg)
    wide = decoded.with_columns([
        pl.col("_v").struct.field(f.name).cast(pl.Float64).alias(f"_s{i}") for i, f in enumerate(fields.fields)
    ]).drop("_v")
    names = {f"_s{i}": f.name for i, f in enumerate(fields.fields)}
    long = wide.unpivot(index=list(base.columns), variable_name="series", value_name="value")
    long = long.filter(pl.col("value").is_not_null()).with_columns(pl.col("series").replace_strict(names))
    return long, 0


def _number(v: object) -> float | None:
    """A counter value as a float: numbers, and strings holding one (as the vectorized cast reads them)."""
    if isinstance(v, bool) or not isinstance(v, int | float | str):
        return None
    try:
        return float(v)
    except (OverflowError, ValueError):
        return None


def _counters_fallback(base: pl.DataFrame, args: pl.Series) -> tuple[pl.DataFrame, int]:
    """Per-value decoding for counter args that the vectorized pass refuses (damaged input only)."""
    idx: list[int] = []
    series: list[str] = []
    values: list[float] = []
    bad = 0
    for i, text in enumerate(args.to_list()):
        try:
            obj = json.loads(text)
        except ValueError:
            bad += 1
            continue
        if not isinstance(obj, dict):
            bad += 1
            continue
        for k, v in obj.items():
            x = _number(v)
            if x is None:
                bad += v is not None
                continue
            idx.append(i)
            series.append(k)
            values.append(x)
    long = pl.DataFrame({"_i": idx, "series": series, "value": values},
                        schema={"_i": pl.UInt32, "series": pl.String, "value": pl.Float64})
    long = base.with_row_index("_i").join(long, on="_i", how="inner", maintain_order="right").drop("_i")
    return long, bad
