"""Rule `launch_bound`: the GPU waits on the host's launches.

* `launch_queue`: launch calls (`cudaLaunchKernel`, ...) lasting more than
  `critical_path.QUEUE_BLOCK_FACTOR` times the median of their name in the step (the critical
  path's rule): the launch queue was full and the call waited for a slot. `value` is their time
  per step; `est_saving_ns` is null: the GPU, not the host, bounds such a step.
* `short_kernels`: at least `MIN_KERNELS` kernels per step with a median under `SHORT_KERNEL_NS`:
  launch overhead dominates; CUDA graphs / `torch.compile` fuse or replay them. Where the trace
  already launches graphs (`cudaGraphLaunch` / `hipGraphLaunch`) the finding says so instead.
* `host_idle`: device idle time whose cause is the host (`tr.device.idle_breakdown()`: no work
  queued, the host busy) is at least `MIN_HOST_IDLE_SHARE` of the idle time.

Without `ProfilerStep#N` windows the whole trace is one step.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

from proftab import kinds
from proftab.calls import GRAPH_LAUNCH as GRAPH_LAUNCH_CALLS
from proftab.calls import KERNEL_LAUNCH
from proftab.critical_path._graph import QUEUE_BLOCK_FACTOR
from proftab.findings._base import finding, frame, register_rule
from proftab.render.text import fmt_ns, fmt_share
from proftab.steps import assign_steps, step_windows

if TYPE_CHECKING:
    from proftab.trace import Trace

__all__ = ["GRAPH_LAUNCH", "LAUNCH_CALL", "MIN_HOST_IDLE_SHARE", "MIN_KERNELS", "SHORT_KERNEL_NS", "launch_bound"]

#: kernels per step from which short kernels are a finding
MIN_KERNELS = 100
#: the median kernel is shorter than this
SHORT_KERNEL_NS = 10_000
#: host-caused idle over all device idle time
MIN_HOST_IDLE_SHARE = 0.2
#: runtime calls that launch one kernel (`proftab.calls.KERNEL_LAUNCH`)
LAUNCH_CALL = KERNEL_LAUNCH.pattern()
#: runtime calls that launch a captured graph (`proftab.calls.GRAPH_LAUNCH`)
GRAPH_LAUNCH = GRAPH_LAUNCH_CALLS.pattern()


def _stepped(rows: pl.DataFrame, windows: pl.DataFrame) -> pl.DataFrame:
    if windows.is_empty():
        return rows.with_columns(step=pl.lit(0, pl.Int64))
    return assign_steps(rows, windows).filter(pl.col("step").is_not_null())


def launch_bound(events: pl.DataFrame, activities: pl.DataFrame, idle: pl.DataFrame | None = None, *,
                 min_kernels: int = MIN_KERNELS, short_kernel_ns: int = SHORT_KERNEL_NS,
                 min_host_idle_share: float = MIN_HOST_IDLE_SHARE) -> pl.DataFrame:
    """Findings: launch queue, short kernels, host-caused idle (module docstring).

    Parameters
    ----------
    events
        `Trace.events` (`rank`, `cat`, `name`, `start_ns`, `end_ns`, `dur_ns`, `event_id`).
    activities
        `tr.device.activities()`.
    idle
        `tr.device.idle_breakdown()` (optional).
    """
    if not events.select(kinds.is_device().any()).item():
        return frame([])
    windows = step_windows(events)
    steps = (windows.group_by("rank").agg(pl.len().alias("n"), pl.col("dur_ns").sum().alias("step_ns"))
             if not windows.is_empty() else
             events.group_by("rank").agg(pl.lit(1).alias("n"),
                                         (pl.col("end_ns").max() - pl.col("start_ns").min()).alias("step_ns")))
    rows: list[dict[str, object]] = []
    calls = _stepped(events.filter(kinds.is_host() & pl.col("name").str.contains(LAUNCH_CALL))
                     .select("rank", "event_id", "name", "start_ns", "dur_ns"), windows)
    calls = calls.with_columns(median_ns=pl.col("dur_ns").median().over("rank", "step", "name"))
    blocked = calls.filter(pl.col("dur_ns") > QUEUE_BLOCK_FACTOR * pl.col("median_ns"))
    graphs = _stepped(events.filter(kinds.is_host() & pl.col("name").str.contains(GRAPH_LAUNCH))
                      .select("rank", "event_id", "name", "start_ns"), windows)
    kern = _stepped(activities.filter(pl.col("kind") == "kernel").select("rank", "event_id", "start_ns", "dur_ns",
                                                                         "launch_id", "launch_name"), windows)
    for rank, n, step_ns in steps.sort("rank").iter_rows():
        b = blocked.filter(pl.col("rank") == rank)
        if b.height:
            ns = int(b["dur_ns"].sum())
            wait = int((b["dur_ns"] - b["median_ns"]).sum())
            rows.append(finding(
                "launch_bound", "high" if wait / step_ns >= 0.1 else "medium", value=ns // n, unit="ns_per_step",
                share=ns / step_ns, est_saving_ns=None, rank=rank, scope="launch_queue",
                evidence=b["event_id"].sort().to_list(),
                message=f"{b.height // n} launch calls per step waited for a full "
                        f"launch queue: {fmt_ns(ns // n)} per step ({fmt_share(ns / step_ns)} of step time) in "
                        f"calls over {QUEUE_BLOCK_FACTOR}x their median",
                suggestion="the host queues work faster than the GPU runs it: this time is not the bottleneck "
                           "(the GPU is); shorten the kernels, or launch fewer (fusion, CUDA graphs)"))
        k = kern.filter(pl.col("rank") == rank)
        g = graphs.filter(pl.col("rank") == rank)
        if g.height:
            via = k.filter(pl.col("launch_id").is_in(g["event_id"].implode()))
            if via.height:
                rows.append(finding(
                    "launch_bound", "info", value=via.height // g.height, unit="kernels_per_graph_launch",
                    share=None, rank=rank, scope="graph_launch", evidence=g["event_id"].sort().to_list(),
                    message=f"{g.height} graph launches ({g['name'][0]}) ran {via.height} kernels "
                            f"({via.height // g.height} per launch): launch overhead is already amortized",
                    suggestion="keep shapes static so the captured graphs are replayed, not recaptured"))
        if k.height // n >= min_kernels:
            median = int(k["dur_ns"].quantile(0.5, interpolation="lower") or 0)
            short = k.filter(~pl.col("launch_id").is_in(g["event_id"].implode()) | pl.col("launch_id").is_null())
            if median < short_kernel_ns and short.height // n >= min_kernels:
                rows.append(finding(
                    "launch_bound", "medium", value=short.height // n, unit="kernels_per_step",
                    share=int(short["dur_ns"].sum()) / step_ns, rank=rank, scope="short_kernels",
                    evidence=short["event_id"].sort().to_list(),
                    message=f"{short.height // n} kernels per step launched one by one, median {fmt_ns(median)}: "
                            "launch overhead is a large part of each",
                    suggestion="capture the step in CUDA graphs (torch.cuda.graphs, torch.compile(mode="
                               "'reduce-overhead')) or fuse the small kernels (torch.compile)"))
    if idle is not None and idle.height:
        for r in idle.filter(pl.col("idle_ns") > 0).iter_rows(named=True):
            share = r["host_ns"] / r["idle_ns"]
            if share < min_host_idle_share:
                continue
            st = steps.filter(pl.col("rank") == r["rank"])
            n = int(st["n"].sum() or 1)
            total = int(st["step_ns"].sum() or 0)
            rows.append(finding(
                "launch_bound", "medium", value=r["host_ns"] // n, unit="ns_per_step",
                share=r["host_ns"] / total if total else None,
                est_saving_ns=r["host_ns"] // n, rank=r["rank"], scope=f"host_idle device={r['device']}",
                evidence=[], message=f"device {r['device']} idles {fmt_ns(r['host_ns'] // n)} per step waiting "
                                     f"for the host to launch ({fmt_share(share)} of its idle time)",
                suggestion="the host is the bottleneck: move Python work off the step, use CUDA graphs or "
                           "torch.compile, overlap data loading"))
    return frame(rows)


@register_rule("launch_bound", "the GPU waiting on launches: a full launch queue, many short kernels, host idle")
def _run(trace: Trace) -> pl.DataFrame:
    if not kinds.has_device_rows(trace.categories):
        return frame([])
    dev = trace.device
    return launch_bound(trace.collect("events"), dev.activities(), dev.idle_breakdown())
