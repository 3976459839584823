"""Small per-rank summaries a conversion stores next to each rank's tables, read back by `tr.ranks`.

Each is computed from one rank's trace alone and is *mergeable*: the dataset's table is the
concatenation of the ranks' parts (every row has ``rank``), so cross-rank tables over 1,024
ranks read kilobytes instead of every event (`tr.ranks` uses them when present):

- ``summary_steps``: `proftab.steps.step_windows` (``ProfilerStep#N`` per rank);
- ``summary_calls``: `proftab.ranks.collectives.rank_calls` (collective calls with group, seq,
  sizes, step, the window before each call and its data loading);
- ``summary_comm``: `proftab.ranks.collectives.rank_comm` (per step: communication, exposed);
- ``summary_key_averages``: the rank's `key_averages()` (default options) plus ``rank``;
  counts and totals add up across ranks, averages do not;
- ``summary_device``: `tr.device.busy(by="device")` (busy / idle per device);
- ``summary_anomalies``: anomaly counts per kind.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

if TYPE_CHECKING:
    from collections.abc import Callable

    from proftab.trace import Trace

__all__ = ["SUMMARIES", "rank_summaries"]

SUMMARIES = ("summary_steps", "summary_calls", "summary_comm", "summary_key_averages", "summary_device",
             "summary_anomalies")


def rank_summaries(trace: Trace, rank: int) -> tuple[dict[str, pl.DataFrame], dict[str, str]]:
    """The summaries of a one-rank `trace` (see the module docs), each with a ``rank`` column.

    Best effort: a summary whose computation fails is left out (the dataset then has no such
    table and `tr.ranks` computes from the events); the second value maps it to its error.
    """
    from proftab.ranks import _COMM_COLUMNS as comm_columns
    from proftab.ranks.collectives import rank_calls, rank_comm
    from proftab.steps import step_windows

    events = trace.collect("events", comm_columns)
    calls: dict[str, pl.DataFrame] = {}

    def _calls() -> pl.DataFrame:
        if "c" not in calls:
            calls["c"] = rank_calls(events)
        return calls["c"]

    makers: dict[str, Callable[[], pl.DataFrame]] = {
        "summary_steps": lambda: step_windows(events),
        "summary_calls": _calls,
        "summary_comm": lambda: rank_comm(_calls(), events),
        "summary_key_averages": lambda: trace.key_averages().select(pl.lit(rank, pl.Int32).alias("rank"), pl.all()),
        "summary_device": lambda: trace.device.busy(by="device"),
        "summary_anomalies": lambda: trace.anomalies.group_by("rank", "kind").agg(
            pl.len().cast(pl.Int64).alias("count")).sort("kind"),
    }
    out: dict[str, pl.DataFrame] = {}
    errors: dict[str, str] = {}
    for name, make in makers.items():
        try:
            out[name] = make()
        except Exception as e:  # noqa: BLE001 - a summary is an optimization, never a reason to fail a file
            errors[name] = f"{type(e).__name__}: {e}"
    return out, errors
