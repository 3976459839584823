"""Rule `memory_leak`: memory allocated step after step and never freed (`profile_memory=True`).

From `tr.memory.allocations()`: per device and allocation site (the innermost allocating op and
its module; the message names the most common innermost user frame of the stack), the bytes
allocated in each step and never freed in the trace. A site leaks when it does so in at least
`MIN_STEP_SHARE` of the steps (and at least `MIN_STEPS`): `value` is the median (lower) of its
never-freed bytes over all steps, so a constant leak is reported exactly.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

from proftab.findings._base import finding, frame, register_rule, user_frame
from proftab.render.text import fmt_bytes

if TYPE_CHECKING:
    from proftab.trace import Trace

__all__ = ["MIN_STEPS", "MIN_STEP_SHARE", "memory_leak"]

#: a site must leak in at least this many steps
MIN_STEPS = 3
#: ... and in at least this share of the steps
MIN_STEP_SHARE = 0.5
_SITE = ["rank", "device_name", "alloc_op", "module"]


def memory_leak(allocations: pl.DataFrame, windows: pl.DataFrame, *, min_steps: int = MIN_STEPS,
                min_step_share: float = MIN_STEP_SHARE) -> pl.DataFrame:
    """Findings: allocation sites that leak every step (module docstring).

    Parameters
    ----------
    allocations
        `tr.memory.allocations()` (with `step`, `free_ns`, `alloc_event_id`).
    windows
        `proftab.steps.step_windows(events)`.

    `value` is bytes per step, `share` the site's never-freed bytes over all bytes allocated in
    the steps, `evidence` the `[memory]` allocation events (`instants` table) of the blocks.
    """
    if allocations.is_empty() or windows.is_empty() or "step" not in allocations.columns:
        return frame([])
    # the innermost frame of user code (not a built-in, not torch's own) of each block's stack
    a = allocations.filter(pl.col("step").is_not_null()).with_columns(user_frame(allocations.schema).alias("_stack"))
    steps = windows.group_by("rank").agg(pl.col("step"))
    kept = a.filter(pl.col("free_ns").is_null())
    per_step = kept.group_by([*_SITE, "step"]).agg(pl.col("bytes").sum())
    rows = []
    for site, g in per_step.group_by(_SITE, maintain_order=True):
        rank, device, op, module = site
        all_steps = steps.filter(pl.col("rank") == rank)["step"].explode()
        n = all_steps.len()
        if n == 0 or g.height < max(min_steps, min_step_share * n):
            continue
        full = pl.DataFrame({"step": all_steps}).join(g.select("step", "bytes"), on="step", how="left").fill_null(0)
        per = int(full["bytes"].quantile(0.5, interpolation="lower") or 0)
        if per <= 0:
            continue
        blocks = kept.filter((pl.col("rank") == rank) & (pl.col("device_name") == device)
                             & pl.col("alloc_op").eq_missing(op) & pl.col("module").eq_missing(module)
)
        stk = blocks["_stack"].drop_nulls().mode().sort().first() if blocks["_stack"].drop_nulls().len() else None
        allocated = int(a.filter((pl.col("rank") == rank) & (pl.col("device_name") == device))["bytes"].sum())
        leaked = int(blocks["bytes"].sum())
        where = str(op) + (f" in {module!s}" if module else "") + (f" at {stk!s}" if stk else "")
        rows.append(finding(
            "memory_leak", "high", value=per, unit="bytes_per_step", share=leaked / allocated if allocated else None,
            rank=rank, scope=f"device={device} op={op}" + (f" module={module}" if module else ""),
            evidence=blocks["alloc_event_id"].sort().to_list(), evidence_table="instants",
            message=f"{fmt_bytes(per)} per step allocated by {where} on {device} are never freed "
                    f"({g.height} of {n} steps; {fmt_bytes(leaked)} in all)",
            suggestion="find what keeps these tensors alive across steps (a list that grows, a loss kept "
                       "with its graph: use loss.item() / .detach(), a cache without a bound)"))
    return frame(rows)


@register_rule("memory_leak", "memory allocated every step and never freed")
def _run(trace: Trace) -> pl.DataFrame:
    mem = trace.memory
    if not mem.recorded():
        return frame([])
    return memory_leak(mem.allocations(), mem._windows())
