"""Rule `trace_health`: can the trace be trusted, and does it show what the job did?

* `damage`: events that break nesting or carry damage (`tr.anomalies`), and input events that
  were not loaded (`tr.rejected`); `value` the count.
* `helper_thread`: a host thread that is not a step thread holding at least `HELPER_SHARE` of the
  host's self time, most of it (`HELPER_WAIT_SHARE`) in waiting frames (`wait`, `sleep`,
  `select`, `poll`, `acquire`: a monitor thread such as tqdm's, asleep) - its time is not work but
  inflates Self CPU totals.
* `cpu_only`: runtime calls that launch device work (`cudaLaunchKernel`, `hipLaunchKernel`, ...)
  without any device row: a GPU job profiled with `activities=[CPU]`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

from proftab import kinds
from proftab.calls import GRAPH_LAUNCH, KERNEL_LAUNCH, MEMCPY_ASYNC, any_pattern
from proftab.findings._base import finding, frame, register_rule, trace_steps
from proftab.render.text import fmt_ns, fmt_share
from proftab.steps import step_threads

if TYPE_CHECKING:
    from proftab.trace import Trace

__all__ = ["HELPER_SHARE", "HELPER_WAIT_SHARE", "LAUNCH_CALLS", "WAIT_FRAMES", "trace_health"]

#: a helper thread holds at least this share of the host's self time
HELPER_SHARE = 0.25
#: ... and at least this share of its own self time is in waiting frames
HELPER_WAIT_SHARE = 0.5
#: Python frames / calls that wait
WAIT_FRAMES = r"(?i)(\bwait\b|sleep|select|poll|acquire|\bjoin\b|: wait|\): wait)"
#: runtime calls that launch device work: kernels, graphs, async copies (`proftab.calls`)
LAUNCH_CALLS = any_pattern(KERNEL_LAUNCH, GRAPH_LAUNCH, MEMCPY_ASYNC)


def trace_health(nested: pl.DataFrame, events: pl.DataFrame, anomalies: pl.DataFrame, rejected: pl.DataFrame,
                 threads: pl.DataFrame, *, steps: pl.DataFrame | None = None) -> pl.DataFrame:
    """Findings about the trace itself (module docstring); `est_saving_ns` is null (nothing to save).
    `steps`: `step_threads(events)` when already computed."""
    rows = []
    if anomalies.height:
        kinds_ = anomalies.group_by("kind").len().sort("len", "kind", descending=[True, False])
        text = ", ".join(f"{n} {k}" for k, n in kinds_.iter_rows())
        rows.append(finding(
            "trace_health", "low", value=anomalies.height, unit="events", scope="damage",
            evidence=anomalies["event_id"].to_list(),
            message=f"{anomalies.height} events break nesting or carry damage ({text})",
            suggestion="see tr.anomalies; times of the ops around these events are less certain"))
    if rejected.height:
        reasons = rejected.group_by("reason").len().sort("len", "reason", descending=[True, False])
        text = ", ".join(f"{n} {r}" for r, n in reasons.head(3).iter_rows())
        rows.append(finding(
            "trace_health", "medium", value=rejected.height, unit="events", scope="rejected",
            evidence=rejected["event_id"].drop_nulls().to_list(), evidence_table="rejected",
            message=f"{rejected.height} input events were not loaded ({text})",
            suggestion="see tr.rejected for each event's byte offset and reason"))
    rows += _helper_threads(nested, step_threads(events) if steps is None else steps, threads)
    rows += _cpu_only(events)
    return frame(rows)


def _helper_threads(nested: pl.DataFrame, steps: pl.DataFrame, threads: pl.DataFrame) -> list[dict[str, object]]:
    host = nested.filter(kinds.is_host_op() & pl.col("tid").is_not_null())
    if host.is_empty():
        return []
    steps = steps.select("rank", "pid", "tid").unique()
    total = host.group_by("rank").agg(pl.col("self_ns").sum().alias("host_ns"))
    wait = pl.col("name").str.contains(WAIT_FRAMES)
    per = host.join(steps, on=["rank", "pid", "tid"], how="anti").group_by("rank", "pid", "tid").agg(
        pl.col("self_ns").sum().alias("self_ns"), pl.col("self_ns").filter(wait).sum().alias("wait_ns"),
        pl.col("name").sort_by("self_ns", "event_id", descending=[True, False]).first().alias("top"),
        pl.col("event_id")).join(total, on="rank").sort("rank", "tid")
    names = threads.select("rank", "pid", "tid", "thread_name").unique(["rank", "pid", "tid"])
    rows = []
    for r in per.join(names, on=["rank", "pid", "tid"], how="left").iter_rows(named=True):
        share = r["self_ns"] / r["host_ns"] if r["host_ns"] else 0.0
        if share < HELPER_SHARE or r["wait_ns"] < HELPER_WAIT_SHARE * r["self_ns"]:
            continue
        label = r["thread_name"] or f"thread {r['tid']}"
        rows.append(finding(
            "trace_health", "low", value=r["self_ns"], unit="ns", share=share, rank=r["rank"],
            scope=f"helper_thread thread={r['tid']} ({label})", evidence=r["event_id"],
            message=f"{label} holds {fmt_share(share)} of the host's self time ({fmt_ns(r['self_ns'])}), "
                    f"{fmt_share(r['wait_ns'] / r['self_ns'])} of it waiting in frames like {r['top']}: "
                    "a helper thread (e.g. a tqdm monitor) asleep, not work",
            suggestion="leave this thread out when reading Self CPU totals (tr.select_threads), or stop the "
                       "helper (tqdm(..., mininterval), no monitor thread) while profiling"))
    return rows


def _cpu_only(events: pl.DataFrame) -> list[dict[str, object]]:
    if events.select(kinds.is_device().any()).item():
        return []
    launches = events.filter(pl.col("name").str.contains(LAUNCH_CALLS) & kinds.is_host())
    if launches.is_empty():
        return []
    return [finding(
        "trace_health", "high", value=launches.height, unit="launch_calls", scope="cpu_only",
        evidence=launches["event_id"].to_list(),
        message=f"{launches.height} device launch calls ({launches['name'][0]}, ...) but no device activity: "
                "a GPU job profiled without its GPU",
        suggestion="profile with activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA] to see the kernels")]


@register_rule("trace_health", "damage, rejected events, helper threads in Self CPU, a CPU-only profile of a GPU job")
def _run(trace: Trace) -> pl.DataFrame:
    return trace_health(trace.collect("nested"), trace.collect("events"), trace.anomalies, trace.collect("rejected"),
                        trace.collect("threads"), steps=trace_steps(trace))
