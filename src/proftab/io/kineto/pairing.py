"""Begin/end rows (`ph` B/E on a thread, b/e async spans) joined into complete events.

Rows pair with stack semantics per key in file order: an end closes the latest open begin of
its key. An unmatched begin runs to the file's last timestamp and is flagged; an unmatched end,
or a pair whose duration leaves the int64 ns range, is rejected with its reason.
"""

from __future__ import annotations

from typing import Any

import polars as pl

from proftab.schema import Flag

__all__ = ["ASYNC_KEYS", "THREAD_KEYS", "pair_begin_end"]

#: what a B/E pair shares (one thread), and what a b/e async span shares (process, category, id)
THREAD_KEYS = ["pid", "pid_text", "tid", "tid_text"]
ASYNC_KEYS = ["pid", "pid_text", "cat", "id", "id_text"]


def pair_begin_end(rows: pl.DataFrame, begin: str, end: str, keys: list[str],
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

