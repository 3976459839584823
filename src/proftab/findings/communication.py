"""Rule `communication`: collectives that are not overlapped with compute, and straggler ranks.

Both read the collective calls of every rank (`tr.ranks.collective_ranks()`: NCCL/RCCL kernels,
or the `gloo:*` ranges gloo's worker threads record on CPU ranks), matched across ranks by
process group and sequence.

* `exposed`: per rank, communication time with no compute beside it (`ranks.rank_comm`
  `exposed_ns`: compute is device work on GPU ranks, host ops of the threads that run no
  collective on CPU ranks) is at least `MIN_EXPOSED_SHARE` of step time. `value` is the exposed
  time per step; `est_saving_ns` the part that is not waiting for other ranks (`wait_ns`: what
  overlapping could hide; the wait is the straggler's). `evidence`: the rank's collective calls.
* `straggler`: with several ranks, the rank that reaches the collectives last in the most steps
  (`ranks.rank_step_comm` `straggler`), when the others' wait for it (`delay_ns`: per collective it
  reaches last, its start minus the earliest rank's start) is at least `MIN_STRAGGLER_SHARE` of the
  median step. `value` is that wait per step; the message names the host range (op or
  `record_function`) in the window before its late collectives (from the end of its previous
  collective, or its step's start) that is longest on it compared with the other ranks' median:
  what made it late. `evidence`: its calls that arrived last. Without collectives, the rank whose
  steps are slowest most often (`ranks.slowest_ranks`), by at least the same share.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

from proftab import kinds
from proftab.calls import GLOO_PREFIX, is_collective_range
from proftab.findings._base import finding, frame, register_rule
from proftab.intervals.overlap import overlap_join
from proftab.ranks import collective_instances, match_calls, rank_calls, rank_comm, rank_step_comm, slowest_ranks
from proftab.render.text import fmt_ns, fmt_share
from proftab.steps import STEP_PREFIX, step_windows

if TYPE_CHECKING:
    from proftab.trace import Trace

__all__ = ["MIN_EXPOSED_SHARE", "MIN_STRAGGLER_SHARE", "communication", "late_cause"]

#: exposed collective time over step time
MIN_EXPOSED_SHARE = 0.05
#: the straggler's delay of the others (or, without collectives, its excess step time) over the median step
MIN_STRAGGLER_SHARE = 0.05
_CALL = ["rank", "tid", "start_ns", "end_ns", "name"]


def _call_ids(calls: pl.DataFrame, events: pl.DataFrame) -> pl.DataFrame:
    """`calls` plus the `event_id` of each call's event (same rank, thread, bounds and name)."""
    ids = events.select(*_CALL, "event_id").unique(subset=_CALL, keep="first")
    return calls.join(ids, on=_CALL, how="left", maintain_order="left")


def late_cause(calls: pl.DataFrame, events: pl.DataFrame, rank: int) -> tuple[str | None, int, int]:
    """The host range that made `rank` late: `(name, its ns on rank, the other ranks' median ns)`
    summed over the windows before the collectives `rank` reached last (`calls`: `collective_ranks`
    rows with `last_rank`), the name with the largest excess; `(None, 0, 0)` when there is none."""
    win = calls.filter(pl.col("pre_ns").is_not_null() & pl.col("seq").is_not_null()).select(
        "rank", "group", "seq", (pl.col("start_ns") - pl.col("pre_ns")).alias("w0"), pl.col("start_ns").alias("w1"))
    if win.is_empty():
        return None, 0, 0
    name = pl.col("name")
    host = events.filter((kinds.is_host_op() | kinds.is_user_annotation()) & ~kinds.is_python_frame()
                         & ~name.str.starts_with(STEP_PREFIX) & ~is_collective_range()
                         & (pl.col("end_ns") > pl.col("start_ns"))).select("rank", "name", "start_ns", "end_ns")
    pairs = overlap_join(host, win, by=["rank"], right_on=("w0", "w1"))
    per = pairs.group_by("rank", "name").agg(pl.col("overlap_ns").sum())
    ranks = calls["rank"].unique().sort()
    grid = pl.DataFrame({"rank": ranks}).join(per.select("name").unique(), how="cross").join(
        per, on=["rank", "name"], how="left").with_columns(pl.col("overlap_ns").fill_null(0))
    mine = grid.filter(pl.col("rank") == rank).select("name", pl.col("overlap_ns").alias("mine"))
    others = grid.filter(pl.col("rank") != rank).group_by("name").agg(
        pl.col("overlap_ns").quantile(0.5, interpolation="lower").cast(pl.Int64).alias("others"))
    top = mine.join(others, on="name", how="left").with_columns(pl.col("others").fill_null(0)).with_columns(
        excess=pl.col("mine") - pl.col("others")).filter(pl.col("excess") > 0).sort(
        ["excess", "name"], descending=[True, False])
    if top.is_empty():
        return None, 0, 0
    n, m, o, _ = top.row(0)
    return str(n), int(m), int(o)


def communication(events: pl.DataFrame, files: pl.DataFrame, *, min_exposed_share: float = MIN_EXPOSED_SHARE,
                  min_straggler_share: float = MIN_STRAGGLER_SHARE) -> pl.DataFrame:
    """Findings: exposed collectives, straggler ranks (module docstring)."""
    windows = step_windows(events)
    if windows.is_empty():
        return frame([])
    rows = []
    steps = windows.group_by("rank").agg(pl.len().alias("n"), pl.col("dur_ns").sum().alias("step_ns"))
    calls = rank_calls(events)
    per = pl.DataFrame()
    if calls.height:
        cr = match_calls(calls, files)
        inst = collective_instances(cr)
        per = rank_step_comm(cr, inst, rank_comm(calls, events)).filter(pl.col("step").is_not_null())
        ids = _call_ids(calls.filter(pl.col("step").is_not_null()), events)
        for r in per.group_by("rank").agg(pl.col("exposed_ns", "wait_ns").sum()).join(steps, on="rank").sort(
                "rank").iter_rows(named=True):
            share = r["exposed_ns"] / r["step_ns"] if r["step_ns"] else 0.0
            if share < min_exposed_share:
                continue
            n = r["n"]
            waiting = min(r["wait_ns"] or 0, r["exposed_ns"])
            rows.append(finding(
                "communication", "high" if share >= 0.2 else "medium", value=r["exposed_ns"] // n,
                unit="ns_per_step", share=share, est_saving_ns=(r["exposed_ns"] - waiting) // n, rank=r["rank"],
                scope="exposed", evidence=ids.filter(pl.col("rank") == r["rank"])["event_id"].drop_nulls().sort(),
                message=f"collectives run {fmt_ns(r['exposed_ns'] // n)} per step with no compute beside them "
                        f"({fmt_share(share)} of step time), {fmt_ns(waiting // n)} of it waiting for other ranks",
                suggestion="overlap communication with compute: DDP bucket sizes / gradient_as_bucket_view, FSDP "
                           "prefetch (forward_prefetch, backward_prefetch), async collectives (async_op=True); "
                           "a straggler's wait goes only when the straggler is fixed"))
        rows.extend(_straggler(per, cr, inst, events, windows, min_straggler_share))
    if files.height > 1 and (per.is_empty() or not per["straggler"].any()):
        rows.extend(_slowest(events, files, windows, min_straggler_share))
    return frame(rows)


def _straggler(per: pl.DataFrame, cr: pl.DataFrame, inst: pl.DataFrame, events: pl.DataFrame,
               windows: pl.DataFrame, min_share: float) -> list[dict[str, object]]:
    """The rank that reaches the collectives last in the most steps, and what made it late."""
    if per.is_empty() or not per["straggler"].any() or cr["rank"].n_unique() < 2:
        return []
    who = per.group_by("rank").agg(pl.col("straggler").sum().alias("steps"), pl.col("delay_ns").sum()).sort(
        ["steps", "delay_ns", "rank"], descending=[True, True, False])
    rank, n_late, delay = who.row(0)
    n = per.filter(pl.col("rank") == rank).height
    median = int(windows.group_by("rank").agg(pl.col("dur_ns").median()).select(
        pl.col("dur_ns").median()).item() or 0)
    if not n or not median or delay / n < min_share * median:
        return []
    last = inst.filter(pl.col("last_rank") == rank).select("group", "seq", "start_skew_ns")
    calls = cr.filter(pl.col("step").is_not_null()).join(last, on=["group", "seq"], how="semi")
    mine = _call_ids(calls.filter(pl.col("rank") == rank).select(*_CALL), events)
    name, mine_ns, others_ns = late_cause(calls, events, rank)
    why = (f"; before those collectives it spends {fmt_ns(mine_ns // n)} per step in {name} (the other ranks' "
           f"median: {fmt_ns(others_ns // n)})" if name else "")
    return [finding(
        "communication", "high" if delay / n >= 0.2 * median else "medium", value=int(delay) // n,
        unit="ns_per_step", share=min(1.0, delay / (median * n)), est_saving_ns=int(delay) // n, rank=rank,
        scope="straggler" + (f" op={name}" if name else ""), evidence=mine["event_id"].drop_nulls().sort(),
        message=f"rank {rank} reaches the collectives last in {n_late} of {n} steps ({last.height} collectives): "
                f"the first rank waits {fmt_ns(int(delay) // n)} per step for it "
                f"({fmt_share(delay / (median * n))} of the median step){why}",
        suggestion="make this rank's work before the collective as fast as the others': balance its data, move "
                   "the slow host work off the step (or to every rank evenly), check its host and device")]


def _slowest(events: pl.DataFrame, files: pl.DataFrame, windows: pl.DataFrame,
             min_share: float) -> list[dict[str, object]]:
    """Without matched collectives: the rank whose steps are slowest most often."""
    slow = slowest_ranks(events, files)
    if not slow.height:
        return []
    rank = int(slow["slowest_rank"].mode().sort()[0])
    mine = slow.filter(pl.col("slowest_rank") == rank)
    excess = int(mine["slowest_excess_ns"].sum())
    median = int(mine["median_dur_ns"].sum())
    if not median or excess / median < min_share:
        return []
    n = mine.height
    ev = windows.filter((pl.col("rank") == rank) & pl.col("step").is_in(mine["step"].implode()))
    return [finding(
        "communication", "high" if excess / median >= 0.2 else "medium", value=excess // n,
        unit="ns_per_step", share=excess / median, est_saving_ns=excess // n, rank=rank,
        scope="straggler", evidence=ev["event_id"].sort().to_list(),
        message=f"rank {rank} is the slowest in {n} of {slow.height} steps, {fmt_ns(excess // n)} per "
                f"step over the median rank ({fmt_share(excess / median)})",
        suggestion="compare this rank's steps with a fast rank's (proftab diff): its data, its "
                   "host, or an op only it runs")]


@register_rule("communication", "collectives not overlapped with compute; straggler ranks")
def _run(trace: Trace) -> pl.DataFrame:
    events = trace.collect("events")
    if not kinds.has_device_rows(trace.categories) and trace.files.height < 2 \
            and events.filter(pl.col("name").str.starts_with(GLOO_PREFIX)).is_empty():
        return frame([])
    return communication(events, trace.files)
