"""Rule `compute_efficiency`: the GEMMs / attention ops furthest below the roofline.

From `tr.perf.ops()` (needs the device's peak rates: `deviceProperties` or `peaks=`): per op name
and input shapes in the `gemm`, `attention` and `conv` families, the device time lost to the
roofline (`lost_ns`, `proftab.perf`). Groups losing at least `MIN_SHARE` of the device time are
findings, at most `MAX_FINDINGS` per rank, largest first; the message names what the shapes
suggest: a dimension not a multiple of 8 (16-bit) / 16 (8-bit), fp32 without TF32, a tiny batch.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import polars as pl

from proftab.findings._base import finding, frame, register_rule
from proftab.render.text import fmt_ns, fmt_share
from proftab.steps import step_windows

if TYPE_CHECKING:
    from proftab.trace import Trace

__all__ = ["FAMILIES", "MAX_FINDINGS", "MIN_SHARE", "compute_efficiency", "shape_hints"]

#: the families the rule looks at
FAMILIES = ("gemm", "attention", "conv")
#: a group's lost time over the device time
MIN_SHARE = 0.02
#: findings per rank
MAX_FINDINGS = 3


def shape_hints(input_dims: str | None, peak_dtype: str | None) -> list[str]:
    """What the shapes and dtype of an op suggest (`input_dims` as torch's JSON text)."""
    hints: list[str] = []
    try:
        dims = json.loads(input_dims) if input_dims else []
    except ValueError:
        dims = []
    sizes = [d for shape in dims if isinstance(shape, list) for d in shape[-2:] if isinstance(d, int)]
    align = 16 if (peak_dtype or "").startswith("fp8") else 8
    odd = list(dict.fromkeys(d for d in sizes if d > 1 and d % align))  # the offending sizes, once each
    if odd:
        hints.append(f"a matrix dimension is not a multiple of {align} ({', '.join(map(str, odd))})")
    if peak_dtype == "fp32":
        hints.append("runs in fp32 without TF32 (torch.backends.cuda.matmul.allow_tf32 / autocast to bf16)")
    lead = [shape[0] for shape in dims if isinstance(shape, list) and len(shape) >= 2 and isinstance(shape[0], int)]
    if lead and min(lead) < 8:
        hints.append(f"a tiny leading dimension ({min(lead)}): batch more work per call")
    return hints


def compute_efficiency(perf_ops: pl.DataFrame, nested: pl.DataFrame, events: pl.DataFrame, *,
                       min_share: float = MIN_SHARE, max_findings: int = MAX_FINDINGS) -> pl.DataFrame:
    """Findings: op groups losing the most time to the roofline (module docstring).

    `value` is the group's `lost_ns` per step; `share` its lost time over the rank's device time
    in modelled ops; `est_saving_ns` the same per step (reaching the roofline); `evidence` the
    ops (`events`), whose `lost_ns` in `tr.perf.ops()` add up to the total.
    """
    if perf_ops.is_empty() or perf_ops["lost_ns"].is_null().all():
        return frame([])
    shapes = nested.select("rank", "event_id", *(c for c in ("input_dims",) if c in nested.columns))
    if "input_dims" not in shapes.columns:
        shapes = shapes.with_columns(input_dims=pl.lit(None, pl.String))
    ops = perf_ops.filter(pl.col("family").is_in(FAMILIES) & pl.col("lost_ns").is_not_null()).join(
        shapes, on=["rank", "event_id"], how="left")
    windows = step_windows(events)
    n_steps = windows.group_by("rank").len() if not windows.is_empty() else None
    device = perf_ops.group_by("rank").agg(pl.col("device_ns").sum())
    rows = []
    groups = ops.group_by("rank", "name", "input_dims").agg(
        pl.col("lost_ns").sum(), pl.col("device_ns").sum(), pl.col("event_id").sort(), pl.len(),
        pl.col("peak_dtype").first(), pl.col("roofline_share").median().alias("pct"),
        pl.col("bound").mode().first()).sort(["rank", "lost_ns", "name"], descending=[False, True, False])
    for (rank,), g in groups.group_by(["rank"], maintain_order=True):
        total = int(device.filter(pl.col("rank") == rank)["device_ns"].sum() or 0)
        n = int(n_steps.filter(pl.col("rank") == rank)["len"].sum() or 1) if n_steps is not None else 1
        for r in g.head(max_findings).iter_rows(named=True):
            share = r["lost_ns"] / total if total else 0.0
            if share < min_share:
                continue
            hints = shape_hints(r["input_dims"], r["peak_dtype"])
            rows.append(finding(
                "compute_efficiency", "medium" if share >= 0.1 else "low", value=r["lost_ns"] // n,
                unit="ns_per_step", share=share, est_saving_ns=r["lost_ns"] // n, rank=rank,
                scope=f"op={r['name']} shapes={r['input_dims']}", evidence=r["event_id"],
                message=f"{r['len']} calls of {r['name']} {r['input_dims'] or ''} run at "
                        f"{fmt_share(min(r['pct'] or 0.0, 1.0))} of the roofline ({r['bound']} bound), losing "
                        f"{fmt_ns(r['lost_ns'] // n)} per step ({fmt_share(share)} of device time)"
                        + (": " + "; ".join(hints) if hints else ""),
                suggestion="pad or pick shapes that are multiples of 8/16, use bf16/fp16 (or TF32 for fp32), "
                           "batch small calls together; torch.compile can fuse the memory-bound neighbours"))
    return frame(rows)


@register_rule("compute_efficiency", "GEMMs / attention / conv furthest below the roofline, with their shapes")
def _run(trace: Trace) -> pl.DataFrame:
    from proftab import kinds

    if not kinds.has_device_rows(trace.categories) or trace.perf.device_peaks().is_empty():
        return frame([])
    return compute_efficiency(trace.perf.ops(), trace.collect("nested"), trace.collect("events"))
