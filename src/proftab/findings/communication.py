"""Rule `communication`: collectives that are not overlapped with compute, and slow ranks.

* `exposed`: per rank, collective kernel time with no compute kernel running beside it
  (`ranks.collective_times`: `exposed_ns`) is at least `MIN_EXPOSED_SHARE` of step time; `value`
  is the exposed time per step, `evidence` the collective kernels.
* `straggler`: with several ranks, the rank slowest most often (`ranks.slowest_ranks`) when its
  steps take at least `MIN_STRAGGLER_EXCESS` longer than the median rank's; `value` the excess per
  step, `evidence` its step events.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

from proftab import kinds
from proftab.findings._base import finding, frame, register_rule
from proftab.ranks import COLLECTIVE_PATTERN, collective_times, slowest_ranks
from proftab.render.text import fmt_ns, fmt_share
from proftab.steps import assign_steps, step_windows

if TYPE_CHECKING:
    from proftab.trace import Trace

__all__ = ["MIN_EXPOSED_SHARE", "MIN_STRAGGLER_EXCESS", "communication"]

#: exposed collective time over step time
MIN_EXPOSED_SHARE = 0.05
#: the slowest rank's excess over the median rank, as a share of the median step
MIN_STRAGGLER_EXCESS = 0.05


def communication(events: pl.DataFrame, files: pl.DataFrame, *, min_exposed_share: float = MIN_EXPOSED_SHARE,
                  min_straggler_excess: float = MIN_STRAGGLER_EXCESS) -> pl.DataFrame:
    """Findings: exposed collectives, straggler ranks (module docstring)."""
    windows = step_windows(events)
    if windows.is_empty():
        return frame([])
    rows = []
    times = collective_times(events).filter(pl.col("step").is_not_null())
    steps = windows.group_by("rank").agg(pl.len().alias("n"), pl.col("dur_ns").sum().alias("step_ns"))
    coll = events.filter(kinds.is_device_work() & pl.col("cat").cast(pl.String).is_in(["kernel", "Kernel"])
                         & pl.col("name").str.contains(COLLECTIVE_PATTERN)).select("rank", "event_id", "start_ns")
    coll = assign_steps(coll, windows).filter(pl.col("step").is_not_null())
    for r in times.group_by("rank").agg(pl.col("exposed_ns").sum(), pl.col("collective_ns").sum()).join(
            steps, on="rank").sort("rank").iter_rows(named=True):
        share = r["exposed_ns"] / r["step_ns"] if r["step_ns"] else 0.0
        if share < min_exposed_share:
            continue
        rows.append(finding(
            "communication", "high" if share >= 0.2 else "medium", value=r["exposed_ns"] // r["n"],
            unit="ns_per_step", share=share, est_saving_ns=r["exposed_ns"] // r["n"], rank=r["rank"],
            scope="exposed", evidence=coll.filter(pl.col("rank") == r["rank"])["event_id"].sort().to_list(),
            message=f"collectives run {fmt_ns(r['exposed_ns'] // r['n'])} per step with no compute beside them "
                    f"({fmt_share(share)} of step time)",
            suggestion="overlap communication with compute: DDP bucket sizes / gradient_as_bucket_view, FSDP "
                       "prefetch (forward_prefetch, backward_prefetch), async collectives"))
    if files.height > 1:
        slow = slowest_ranks(events, files)
        if slow.height:
            rank = int(slow["slowest_rank"].mode().sort()[0])
            mine = slow.filter(pl.col("slowest_rank") == rank)
            excess = int(mine["slowest_excess_ns"].sum())
            median = int(mine["median_dur_ns"].sum())
            if median and excess / median >= min_straggler_excess:
                n = mine.height
                ev = windows.filter((pl.col("rank") == rank) & pl.col("step").is_in(mine["step"].implode()))
                rows.append(finding(
                    "communication", "high" if excess / median >= 0.2 else "medium", value=excess // n,
                    unit="ns_per_step", share=excess / median, est_saving_ns=excess // n, rank=rank,
                    scope="straggler", evidence=ev["event_id"].sort().to_list(),
                    message=f"rank {rank} is the slowest in {n} of {slow.height} steps, {fmt_ns(excess // n)} per "
                            f"step over the median rank ({fmt_share(excess / median)}); the others wait for it in "
                            "their collectives",
                    suggestion="compare this rank's steps with a fast rank's (proftab diff): its data, its "
                               "host, or an op only it runs"))
    return frame(rows)


@register_rule("communication", "collectives not overlapped with compute; straggler ranks")
def _run(trace: Trace) -> pl.DataFrame:
    if not kinds.has_device_rows(trace.categories) and trace.files.height < 2:
        return frame([])
    return communication(trace.collect("events"), trace.files)
