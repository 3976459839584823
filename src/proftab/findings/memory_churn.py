"""Rule `memory_churn`: an allocation site that allocates and frees many blocks in every step.

From `tr.memory.allocations()`: the blocks allocated in a step and freed in the same step, per
device and allocation site (outermost and innermost allocating op, module, innermost user frame;
`memory_peak.SITE`). A site churns when it makes at least `MIN_PAIRS_PER_STEP` such alloc/free
pairs per step and the bytes they allocate per step are at least `MIN_TURNOVER` times the device's
peak (`tr.memory.peak()`): the allocator hands the whole peak out again and again within the
step. `value` is the site's pairs per step, `share` its churned bytes over all bytes allocated in
the device's steps, `evidence` the pairs' allocation events (`instants`). At most `MAX_SITES` per
device, most pairs first.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

from proftab.findings._base import finding, frame, register_rule, user_frame
from proftab.findings.memory_peak import SITE, site_name
from proftab.memory._analyses import peak_summary
from proftab.render.text import fmt_bytes, fmt_share

if TYPE_CHECKING:
    from proftab.trace import Trace

__all__ = ["MAX_SITES", "MIN_PAIRS_PER_STEP", "MIN_TURNOVER", "memory_churn"]

#: alloc/free pairs per step of one site
MIN_PAIRS_PER_STEP = 256
#: the site's allocated bytes per step over the device's peak
MIN_TURNOVER = 2.0
#: at most this many sites per device
MAX_SITES = 3


def memory_churn(timeline: pl.DataFrame, allocations: pl.DataFrame, windows: pl.DataFrame, *,
                 min_pairs_per_step: int = MIN_PAIRS_PER_STEP, min_turnover: float = MIN_TURNOVER,
                 max_sites: int = MAX_SITES) -> pl.DataFrame:
    """Findings: allocation sites that churn (module docstring).

    Parameters
    ----------
    timeline, allocations
        `tr.memory.timeline()`, `tr.memory.allocations()` (with `step`, `free_step`, ops, stack).
    windows
        `proftab.steps.step_windows(events)`.
    """
    if (allocations.is_empty() or windows.is_empty() or "step" not in allocations.columns
            or "alloc_op" not in allocations.columns):
        return frame([])
    peaks = peak_summary(timeline, allocations).select("rank", "device_name", "peak_bytes")
    n_steps = windows.group_by("rank").agg(pl.len().alias("n"))
    stepped = allocations.filter(pl.col("step").is_not_null())
    allocated = stepped.group_by("rank", "device_name").agg(pl.col("bytes").sum().alias("step_bytes"))
    pairs = stepped.filter(pl.col("free_step") == pl.col("step")).with_columns(
        user_frame(allocations.schema).alias("_frame"))
    sites = pairs.group_by(["rank", "device_name", *SITE]).agg(
        pl.len().alias("pairs"), pl.col("bytes").sum(), pl.col("alloc_event_id").sort().alias("evidence"),
        pl.col("bytes").min().alias("min_bytes"), pl.col("bytes").max().alias("max_bytes"))
    sites = sites.join(n_steps, on="rank").join(peaks, on=["rank", "device_name"]).join(
        allocated, on=["rank", "device_name"]).with_columns(
        (pl.col("pairs") // pl.col("n")).alias("per_step"), (pl.col("bytes") // pl.col("n")).alias("bytes_per_step"))
    sites = sites.filter((pl.col("per_step") >= min_pairs_per_step)
                         & (pl.col("bytes_per_step") >= min_turnover * pl.col("peak_bytes"))).sort(
        ["rank", "device_name", "pairs", "bytes", "alloc_top_op"], descending=[False, False, True, True, False],
        nulls_last=True).with_columns(pl.int_range(pl.len()).over("rank", "device_name").alias("_i")).filter(
        pl.col("_i") < max_sites)
    rows = []
    for r in sites.iter_rows(named=True):
        where = site_name(r["alloc_top_op"], r["alloc_op"], r["module"], r["_frame"])
        size = (fmt_bytes(r["min_bytes"]) if r["min_bytes"] == r["max_bytes"]
                else f"{fmt_bytes(r['min_bytes'])}-{fmt_bytes(r['max_bytes'])}")
        turnover = r["bytes_per_step"] / r["peak_bytes"] if r["peak_bytes"] else float("inf")
        share = r["bytes"] / r["step_bytes"] if r["step_bytes"] else None
        rows.append(finding(
            "memory_churn", "low", value=r["per_step"], unit="allocations_per_step", share=share, rank=r["rank"],
            scope=f"churn device={r['device_name']} op={r['alloc_top_op'] or r['alloc_op']}"
                  + (f" module={r['module']}" if r["module"] else ""),
            evidence=r["evidence"], evidence_table="instants",
            message=f"{where} allocates and frees {r['per_step']} blocks of {size} per step on {r['device_name']}: "
                    f"{fmt_bytes(r['bytes_per_step'])} per step, {turnover:.1f}x the peak of "
                    f"{fmt_bytes(r['peak_bytes'])} ({fmt_share(share)} of the bytes allocated in the steps)",
            suggestion="allocate once and reuse the buffer (out= / in-place ops, a preallocated workspace), "
                       "batch the small tensors into one, or move the loop into one op"))
    return frame(rows)


@register_rule("memory_churn", "many blocks allocated and freed within every step")
def _run(trace: Trace) -> pl.DataFrame:
    mem = trace.memory
    if not mem.recorded():
        return frame([])
    return memory_churn(mem.timeline(), mem.allocations(), mem._windows())
