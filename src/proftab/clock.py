"""The clock of a trace: each rank's base time, the time resolution, and absolute (UTC) times.

Event times are int64 ns relative to their file's base time (`files.base_time_ns`, Kineto's
top-level `baseTimeNanoseconds`, 0 when the file has none), so `base_time_ns + start_ns` is
the absolute time. A file's resolution is what its decimal `ts`/`dur` text can express:
whole µs (1000 ns) without fractional digits, 1 ns with three.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeVar

import polars as pl

from proftab.api import register_trace_method
from proftab.exceptions import TraceError

if TYPE_CHECKING:
    from collections.abc import Mapping

    from proftab.trace import Trace

F = TypeVar("F", pl.DataFrame, pl.LazyFrame)

__all__ = ["BASE_TIME_KEY", "absolute_base", "base_time_ns", "time_resolution_ns", "with_utc", "with_utc_frame"]

#: the top-level key of a Kineto trace holding the epoch ns its times are relative to
BASE_TIME_KEY = "baseTimeNanoseconds"
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def base_time_ns(meta: Mapping[str, Any], path: str) -> int:
    """The base time of a file from its top-level keys (`BASE_TIME_KEY`); 0 when absent.

    Raises
    ------
    TraceError
        The value is not an int64 nanosecond count (names `path`).
    """
    base = meta.get(BASE_TIME_KEY)
    if base is None:
        return 0
    if not (isinstance(base, int) and not isinstance(base, bool) and _INT64_MIN <= base <= _INT64_MAX):
        msg = f"{BASE_TIME_KEY} {base!r} is not an int64 nanosecond count"
        raise TraceError(msg, path=path)
    return int(base)


def time_resolution_ns(fraction_digits: int) -> int:
    """The resolution of µs times written with at most `fraction_digits` decimals (1000, 100, 10 or 1 ns)."""
    return (1000, 100, 10, 1)[min(3, fraction_digits)]


def _offsets(offsets_ns: Mapping[int, int] | None) -> pl.DataFrame:
    return pl.DataFrame({"rank": list(offsets_ns or {}), "_off": list((offsets_ns or {}).values())},
                        schema={"rank": pl.Int32, "_off": pl.Int64})


def absolute_base(files: pl.DataFrame, offsets_ns: Mapping[int, int] | None = None) -> pl.DataFrame:
    """`rank`, `base_ns`: each rank's base time plus an optional clock offset (`{rank: ns}`)."""
    return (files.select("rank", "base_time_ns").join(_offsets(offsets_ns), on="rank", how="left")
            .select("rank", (pl.col("base_time_ns") + pl.col("_off").fill_null(0)).alias("base_ns")))


def with_utc_frame(events: F, files: pl.DataFrame, *, offsets_ns: Mapping[int, int] | None = None) -> F:
    """`events` plus `start_utc` / `end_utc` as `Datetime("ns", "UTC")`.

    The absolute time is `base_time_ns + start_ns` of the event's rank, plus an optional
    per-rank clock offset (`offsets_ns={rank: ns}`).
    """
    base = absolute_base(files, offsets_ns)
    utc = [(pl.col("base_ns") + pl.col("start_ns")).cast(pl.Datetime("ns", "UTC")).alias("start_utc"),
           (pl.col("base_ns") + pl.col("end_ns")).cast(pl.Datetime("ns", "UTC")).alias("end_utc")]
    if isinstance(events, pl.LazyFrame):
        return events.join(base.lazy(), on="rank", how="left", maintain_order="left").with_columns(utc).drop(
            "base_ns")
    return events.join(base, on="rank", how="left", maintain_order="left").with_columns(utc).drop("base_ns")


@register_trace_method("with_utc")
def with_utc(trace: Trace, events: pl.DataFrame | pl.LazyFrame | None = None, *,
             offsets_ns: Mapping[int, int] | None = None) -> pl.DataFrame | pl.LazyFrame:
    """`events` (default: all of the trace's) with `start_utc` / `end_utc` (`with_utc_frame`).

    A LazyFrame stays lazy.
    """
    if events is None:
        return with_utc_frame(trace.collect("events"), trace.files, offsets_ns=offsets_ns)
    if isinstance(events, pl.LazyFrame):
        return with_utc_frame(events, trace.files, offsets_ns=offsets_ns)
    return with_utc_frame(events, trace.files, offsets_ns=offsets_ns)
