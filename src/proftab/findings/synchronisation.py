"""Rule `synchronisation`: the host blocks on the device inside the step.

Blocking calls are `critical_path.SYNC_CALLS` (`cudaDeviceSynchronize`, `cudaStreamSynchronize`,
`cudaEventSynchronize`, the hip ones) and synchronous copies (`cudaMemcpy` / `hipMemcpy`, not
`*Async`: a `.item()`, `.cpu()` or `.tolist()` of a device tensor). Per rank: their time per step
on the host (`value`), the op that issued most of it (the outermost `cpu_op` around the call, e.g.
`aten::item`) and the innermost Python frame, when recorded. `est_saving_ns` is the time the
critical path spends in `sync` segments per step (`tr.critical_path.summary()`): what removing
the waits would save; null when the path is not computed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import polars as pl

from proftab import kinds
from proftab.critical_path._graph import SYNC_CALLS
from proftab.findings._base import finding, frame, register_rule
from proftab.intervals.tree import nearest_ancestor, row_positions
from proftab.render.text import fmt_ns, fmt_share
from proftab.steps import assign_steps, step_windows

if TYPE_CHECKING:
    from proftab.trace import Trace

__all__ = ["BLOCKING_CALLS", "MIN_SHARE", "synchronisation"]

#: host calls that wait for the device
BLOCKING_CALLS = rf"^(?:{SYNC_CALLS}|(?:cuda|hip)Memcpy(?:2D)?)$"
#: the calls take at least this share of step time
MIN_SHARE = 0.01


def synchronisation(nested: pl.DataFrame, events: pl.DataFrame, path_sync_ns: dict[int, int] | None = None, *,
                    min_share: float = MIN_SHARE) -> pl.DataFrame:
    """Findings: blocking calls per rank (module docstring).

    Parameters
    ----------
    nested
        `Trace.nested`.
    events
        `Trace.events` (for the step windows).
    path_sync_ns
        Per rank, ns of `sync` segments on the critical path over all steps (optional).
    """
    windows = step_windows(events)
    tree = nested.select("rank", "event_id", "parent_id", "cat", "name", "start_ns", "dur_ns")
    is_call = tree.select(kinds.is_host() & pl.col("name").str.contains(BLOCKING_CALLS)).to_series().to_numpy()
    rows_ = np.flatnonzero(is_call)
    if not len(rows_):
        return frame([])
    rank = tree["rank"].to_numpy()
    parent = row_positions(rank, tree["event_id"].to_numpy(), rank, tree["parent_id"].fill_null(-1).to_numpy())
    is_op = tree.select(kinds.is_op().fill_null(False)).to_series().to_numpy()
    is_py = tree.select(kinds.is_python_frame().fill_null(False)).to_series().to_numpy()
    # the outermost op above the call: walk to the nearest op, then on while an op is above it
    op = nearest_ancestor(parent, rows_, is_op)
    while True:
        up = np.where(op >= 0, nearest_ancestor(parent, np.maximum(op, 0), is_op), -1)
        if not (up >= 0).any():
            break
        op = np.where(up >= 0, up, op)
    py = nearest_ancestor(parent, rows_, is_py)
    names = tree["name"]
    calls = tree[rows_].with_columns(
        op=pl.when(pl.Series(op >= 0)).then(names.gather(np.maximum(op, 0))),
        frame=pl.when(pl.Series(py >= 0)).then(names.gather(np.maximum(py, 0))))
    if windows.is_empty():
        calls = calls.with_columns(step=pl.lit(0, pl.Int64))
        steps = events.group_by("rank").agg(pl.lit(1).alias("n"),
                                            (pl.col("end_ns").max() - pl.col("start_ns").min()).alias("step_ns"))
    else:
        calls = assign_steps(calls, windows).filter(pl.col("step").is_not_null())
        steps = windows.group_by("rank").agg(pl.len().alias("n"), pl.col("dur_ns").sum().alias("step_ns"))
    out = []
    for rank_, n, step_ns in steps.sort("rank").iter_rows():
        c = calls.filter(pl.col("rank") == rank_)
        ns = int(c["dur_ns"].sum() or 0)
        if not c.height or not step_ns or ns / step_ns < min_share:
            continue
        by = c.group_by("op", "frame", "name").agg(pl.col("dur_ns").sum(), pl.len()).sort(
            ["dur_ns", "op", "frame"], descending=[True, False, False], nulls_last=True)
        top_op, top_frame, top_call, top_ns, top_n = by.row(0)
        issuer = (top_op or top_call) + (f" at {top_frame}" if top_frame else "")
        saving = None if path_sync_ns is None else int(path_sync_ns.get(rank_, 0)) // n
        out.append(finding(
            "synchronisation", "high" if ns / step_ns >= 0.1 else "medium", value=ns // n, unit="ns_per_step",
            share=ns / step_ns, est_saving_ns=saving, rank=rank_, scope=f"op={top_op or top_call}",
            evidence=c["event_id"].sort().to_list(),
            message=f"{c.height // n or c.height} blocking calls per step wait {fmt_ns(ns // n)} for the device "
                    f"({fmt_share(ns / step_ns)} of step time); most ({top_n} {top_call}, {fmt_ns(top_ns)}) "
                    f"issued by {issuer}",
            suggestion="avoid host syncs in the step: keep values on the device (no .item()/.cpu()/print of "
                       "device tensors), use non_blocking copies, synchronize once at the end"))
    return frame(out)


@register_rule("synchronisation", "the host blocking on the device in the step (syncs, .item(), blocking copies)")
def _run(trace: Trace) -> pl.DataFrame:
    if not kinds.has_device_rows(trace.categories):
        return frame([])
    path: dict[int, int] | None
    try:
        summ = trace.critical_path.summary(by="step")
        path = {int(r): int(v) for r, v in summ.group_by("rank").agg(pl.col("sync_ns").sum()).iter_rows()}
    except Exception:  # noqa: BLE001 - the critical path is optional evidence: without it the saving is null
        path = None
    return synchronisation(trace.collect("nested"), trace.collect("events"), path)
