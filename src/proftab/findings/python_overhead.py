"""Rule `python_overhead`: thousands of tiny ops per step whose host gaps dominate the step.

On the step thread, the *top-level* ops of a step are its `cpu_op`s with no enclosing `cpu_op`
(what Python called). The rule fires when a step has on average at least `MIN_OPS` of them,
their median duration is under `TINY_NS`, and the time between them (the step minus the union
of the top-level ops) is at least `MIN_GAP_SHARE` of the step: the host spends more time
dispatching from Python than in the ops.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import polars as pl

from proftab import kinds
from proftab.findings._base import finding, frame, register_rule, trace_steps
from proftab.intervals import merge_intervals
from proftab.intervals.overlap import overlap_join
from proftab.intervals.tree import nearest_ancestor, row_positions
from proftab.render.text import fmt_ns, fmt_share
from proftab.steps import step_threads

if TYPE_CHECKING:
    from proftab.trace import Trace

__all__ = ["MIN_GAP_SHARE", "MIN_OPS", "TINY_NS", "python_overhead", "top_level_ops"]

#: ops per step (on average) from which the rule looks at a rank
MIN_OPS = 1000
#: the median top-level op is shorter than this
TINY_NS = 20_000
#: the gaps between top-level ops are at least this share of step time
MIN_GAP_SHARE = 0.30
_KEYS = ["rank", "pid", "tid"]


def top_level_ops(nested: pl.DataFrame, steps: pl.DataFrame) -> pl.DataFrame:
    """The `cpu_op`s of each step's thread without an enclosing `cpu_op`, in the step:
    `rank`, `step`, `event_id`, `name`, `start_ns`, `end_ns`, `dur_ns`."""
    tree = nested.select(*_KEYS, "event_id", "parent_id", "cat", "name", "start_ns", "end_ns", "dur_ns")
    is_op = tree.select(kinds.is_op().fill_null(False)).to_series().to_numpy()
    rank = tree["rank"].to_numpy()
    parent = row_positions(rank, tree["event_id"].to_numpy(), rank, tree["parent_id"].fill_null(-1).to_numpy())
    rows = np.flatnonzero(is_op)
    up = nearest_ancestor(parent, rows, is_op) if len(rows) else rows
    top = tree[rows[up < 0]]
    win = steps.select(*_KEYS, "step", pl.col("start_ns").alias("w0"), pl.col("end_ns").alias("w1"))
    pairs = overlap_join(top, win, by=_KEYS, right_on=("w0", "w1"))
    inside = pairs.filter((pl.col("start_ns") >= pl.col("w0")) & (pl.col("start_ns") < pl.col("w1")))
    return inside.select("rank", "step", "event_id", "name", "start_ns", "end_ns", "dur_ns").sort("rank", "event_id")


def python_overhead(nested: pl.DataFrame, events: pl.DataFrame, *, min_ops: int = MIN_OPS, tiny_ns: int = TINY_NS,
                    min_gap_share: float = MIN_GAP_SHARE, steps: pl.DataFrame | None = None) -> pl.DataFrame:
    """Findings: ranks whose steps are thousands of tiny ops (module docstring).

    `value` is top-level ops per step (total // steps); `share` the time between them over the
    steps' total; `est_saving_ns` that time per step; `evidence` the top-level ops.
    """
    steps = step_threads(events)
    if steps.is_empty():
        return frame([])
    ops = top_level_ops(nested, steps)
    busy = merge_intervals(ops, by=["rank", "step"]).group_by("rank").agg(
        (pl.col("end_ns") - pl.col("start_ns")).sum().alias("busy_ns"))
    per = steps.group_by("rank").agg(pl.col("dur_ns").sum().alias("step_ns"), pl.len().alias("n")).join(
        ops.group_by("rank").agg(pl.len().alias("ops"), pl.col("dur_ns").median().alias("median_ns"),
                                 pl.col("event_id"), pl.col("name").mode().first().alias("top")),
        on="rank").join(busy, on="rank").sort("rank")
    rows = []
    for r in per.iter_rows(named=True):
        n, total = r["n"], r["step_ns"]
        gap = total - r["busy_ns"]
        per_step = r["ops"] // n
        if per_step < min_ops or r["median_ns"] >= tiny_ns or total <= 0 or gap / total < min_gap_share:
            continue
        rows.append(finding(
            "python_overhead", "high" if gap / total >= 0.5 else "medium", value=per_step, unit="ops_per_step",
            share=gap / total, est_saving_ns=gap // n, rank=r["rank"], scope=f"thread={steps['tid'][0]}",
            evidence=r["event_id"],
            message=f"{per_step} top-level ops per step (median {fmt_ns(int(r['median_ns']))}, most often "
                    f"{r['top']}); the host spends {fmt_share(gap / total)} of the step between them",
            suggestion="batch the work into fewer, larger tensor ops (vectorize the Python loop), or "
                       "torch.compile the function; CUDA graphs remove the launch cost on a GPU"))
    return frame(rows)


@register_rule("python_overhead", "thousands of tiny ops per step, the host's gaps between them dominating")
def _run(trace: Trace) -> pl.DataFrame:
    return python_overhead(trace.collect("nested"), trace.collect("events"), steps=trace_steps(trace))
