"""The units of proftab's columns: one spelling per unit, in the column's name (docs/schema.md).

A column says its unit by a suffix (`dur_ns`, `peak_bytes`, `busy_share`) or, for counts, a
prefix (`n_ops`). A rate spells its unit before `_per_s`: `tflops_per_s`, `tb_per_s` (10^12
bytes per second), `gb_per_s` (10^9 bytes per second, = bytes per ns). `unit_of` reads a column
name's unit; the text and HTML renderers format a column by it. Exemptions kept for their
users: the `peaks` dict keys (`hbm_tb_s`, `host_link_tb_s`: what users pass, `proftab.perf.peaks`)
and the typed trace column `memory_bandwidth_gbs` (stored in datasets: the name of the trace's
`memory bandwidth (GB/s)` arg).
"""

from __future__ import annotations

__all__ = ["BYTES_SUFFIX", "COUNT_PREFIX", "ID_SUFFIX", "NS_SUFFIX", "PCT_SUFFIX", "PER_S_SUFFIX", "RATE_UNITS",
           "SHARE_SUFFIX", "UNIT_HEADERS", "UTC_SUFFIX", "is_count", "unit_of"]

#: a time on the trace's axis or a duration, Int64 ns
NS_SUFFIX = "_ns"
#: an absolute time, `Datetime("ns", "UTC")`
UTC_SUFFIX = "_utc"
#: a size in bytes, Int64
BYTES_SUFFIX = "_bytes"
#: a fraction in [0, 1] (`share` alone: of the frame's total)
SHARE_SUFFIX = "_share"
#: a percentage in [0, 100]
PCT_SUFFIX = "_pct"
#: an id, Int64
ID_SUFFIX = "_id"
#: a count (`n_ops`), Int64
COUNT_PREFIX = "n_"
#: a rate: the unit before it (`tb_per_s`)
PER_S_SUFFIX = "_per_s"
#: rate columns -> the unit their numbers are in
RATE_UNITS = {"tflops_per_s": "TFLOP/s", "tb_per_s": "TB/s", "gb_per_s": "GB/s"}
#: headers of the columns whose bare numbers are in a unit their name spells (the renderers' header)
UNIT_HEADERS = {**RATE_UNITS, "peak_tflops": "peak TFLOP/s", "peak_tb_per_s": "peak TB/s", "gflops": "GFLOP",
                "flops": "FLOP"}

_SUFFIXES = ((NS_SUFFIX, "ns"), (UTC_SUFFIX, "utc"), (BYTES_SUFFIX, "bytes"), (SHARE_SUFFIX, "share"),
             (PCT_SUFFIX, "pct"), (ID_SUFFIX, "id"), (PER_S_SUFFIX, "per_s"))
#: bare names that are their unit (`ns`: critical_path's name before issue 25; `share`: of the frame's total)
_BARE = {"ns": "ns", "share": "share"}


def unit_of(column: str) -> str | None:
    """The unit a column's name spells: ``"ns"``, ``"utc"``, ``"bytes"``, ``"share"``, ``"pct"``,
    ``"id"``, ``"per_s"`` (a rate), or None (a count is `is_count`)."""
    if column in _BARE:
        return _BARE[column]
    for suffix, unit in _SUFFIXES:
        if column.endswith(suffix):
            return unit
    return None


def is_count(column: str) -> bool:
    """Whether a column's name says it is a count (`n_*`)."""
    return column.startswith(COUNT_PREFIX)
