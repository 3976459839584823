"""Rule `memory_peak`: the peak of each device's allocated memory and what holds it (`profile_memory=True`).

From `tr.memory.peak()`: the blocks live just after each device's peak event (allocated inside
the window, not yet freed), grouped by allocation site: the outermost op that allocated
(`alloc_top_op`, e.g. `aten::ones`), the innermost one (`alloc_op`, e.g. `aten::empty`), the module
and the innermost user frame of the stack. One finding per site holding at least
`MIN_HOLDER_SHARE` of the peak (at most `MAX_HOLDERS` per device, largest first), when the peak is
at least `MIN_PEAK_BYTES`. `value` is the site's bytes at the peak, `share` its bytes over the peak,
`evidence` its blocks' allocation events (`instants`). Informational: a peak is not a fault, but
it is what to shrink when memory is short.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

from proftab.findings._base import finding, frame, register_rule, user_frame
from proftab.memory._analyses import live_at_peak, peak_summary
from proftab.render.text import fmt_bytes, fmt_share

if TYPE_CHECKING:
    from proftab.trace import Trace

__all__ = ["MAX_HOLDERS", "MIN_HOLDER_SHARE", "MIN_PEAK_BYTES", "SITE", "memory_peak", "site_name"]

#: report a device's peak from this many bytes
MIN_PEAK_BYTES = 1 << 20
#: a site holds at least this share of the peak
MIN_HOLDER_SHARE = 0.10
#: at most this many sites per device
MAX_HOLDERS = 3
#: an allocation site: outermost and innermost allocating op, module, innermost user frame
SITE = ["alloc_top_op", "alloc_op", "module", "_frame"]


def site_name(top_op: str | None, op: str | None, module: str | None, where: str | None) -> str:
    """`aten::ones (aten::empty) in Holder_0 at generate.py(78): forward`: an allocation site for people."""
    name = str(top_op or op or "no op") + (f" ({op})" if op and top_op and op != top_op else "")
    return name + (f" in {module}" if module else "") + (f" at {where}" if where else "")


def memory_peak(timeline: pl.DataFrame, allocations: pl.DataFrame, *, min_peak_bytes: int = MIN_PEAK_BYTES,
                min_holder_share: float = MIN_HOLDER_SHARE, max_holders: int = MAX_HOLDERS) -> pl.DataFrame:
    """Findings: what holds each device's peak (module docstring).

    Parameters
    ----------
    timeline, allocations
        `tr.memory.timeline()`, `tr.memory.allocations()` (with `alloc_op`, `alloc_top_op`,
        `module`, `stack`).
    """
    if timeline.is_empty() or allocations.is_empty() or "alloc_op" not in allocations.columns:
        return frame([])
    summary = peak_summary(timeline, allocations).filter(pl.col("peak_bytes") >= min_peak_bytes)
    if summary.is_empty():
        return frame([])
    # the blocks allocated inside the window and live just after the peak event (`tr.memory.peak(by=...)`'s)
    live = live_at_peak(allocations.filter(pl.col("status") != "pre_window"), summary)
    live = live.with_columns(user_frame(live.schema).alias("_frame"))
    sites = live.group_by(["rank", "device_name", *SITE]).agg(
        pl.col("bytes").sum(), pl.len().alias("blocks"), pl.col("alloc_event_id").sort().alias("evidence"),
        pl.col("peak_bytes").first(), pl.col("peak_ns").first())
    sites = sites.filter(pl.col("bytes") >= min_holder_share * pl.col("peak_bytes")).sort(
        ["rank", "device_name", "bytes", "alloc_top_op", "alloc_op"], descending=[False, False, True, False, False],
        nulls_last=True).with_columns(pl.int_range(pl.len()).over("rank", "device_name").alias("_i")).filter(
        pl.col("_i") < max_holders)
    steps = summary.select("rank", "device_name", *(["step"] if "step" in summary.columns else []))
    sites = sites.join(steps, on=["rank", "device_name"], how="left")
    rows = []
    for r in sites.iter_rows(named=True):
        where = site_name(r["alloc_top_op"], r["alloc_op"], r["module"], r["_frame"])
        share = r["bytes"] / r["peak_bytes"]
        at = f" (step {r['step']})" if r.get("step") is not None else ""
        rows.append(finding(
            "memory_peak", "info", value=r["bytes"], unit="bytes", share=share, rank=r["rank"],
            scope=f"peak device={r['device_name']} op={r['alloc_top_op'] or r['alloc_op']}"
                  + (f" module={r['module']}" if r["module"] else ""),
            evidence=r["evidence"], evidence_table="instants",
            message=f"{fmt_bytes(r['bytes'])} of the {r['device_name']} peak of {fmt_bytes(r['peak_bytes'])}{at} "
                    f"({fmt_share(share)}) is held by {r['blocks']} block(s) from {where}",
            suggestion="shrink what is alive at the peak: free or reuse it earlier (del, in-place ops), "
                       "activation checkpointing, a smaller batch or sequence, a lower-precision dtype"))
    return frame(rows)


@register_rule("memory_peak", "the peak of allocated memory and the allocation sites that hold it")
def _run(trace: Trace) -> pl.DataFrame:
    mem = trace.memory
    if not mem.recorded():
        return frame([])
    return memory_peak(mem.timeline(), mem.allocations())
