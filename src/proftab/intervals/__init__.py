"""Generic interval algorithms over (event_id, start_ns, end_ns, track keys) frames."""

from __future__ import annotations

from proftab.intervals.merge import merge_intervals, union_ns
from proftab.intervals.nest import NestStats, nest, nest_stats

__all__ = ["NestStats", "merge_intervals", "nest", "nest_stats", "union_ns"]
