"""Rule `synchronisation`: the host blocks on the device inside the step.

Blocking calls are `calls.SYNC` (`cudaDeviceSynchronize`, `cudaStreamSynchronize`,
`cudaEventSynchronize`, the hip ones) and synchronous copies (`calls.BLOCKING_COPY`: `cudaMemcpy` /
`hipMemcpy`, not `*Async`), and `cudaMemcpyAsync` / `hipMemcpyAsync` calls whose copy is `Device -> Pageable`
(CUDA returns from those only once the copy is done: a `.item()`, `.cpu()` or `.tolist()` of a
device tensor). Per rank: their time per step
on the host (`value`), and who issued most of it: the op (the outermost `cpu_op` around the call,
e.g. `aten::to`), the module (the innermost `nn.Module: ...` frame, `with_stack`/`with_modules`)
and the source line (the innermost Python frame that is not a built-in nor torch's own file,
`_base.LIBRARY_FRAME`), when recorded. `est_saving_ns` is the time the critical path spends in
`sync` segments of these calls per step (`tr.critical_path.path()` rows with `bound_by == "sync"`
and the call's `event_id`): what removing the waits would save; null when the path is not
computed. It is at most `value`: a sync while the device is the bottleneck costs nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import polars as pl

from proftab import kinds
from proftab.calls import BLOCKING_COPY, CUDA_HIP, MEMCPY_ASYNC, SYNC, any_pattern
from proftab.findings._base import LIBRARY_FRAME, finding, frame, register_rule
from proftab.intervals.tree import nearest_ancestor, row_positions
from proftab.render.text import fmt_ns, fmt_share
from proftab.steps import assign_steps, step_windows

if TYPE_CHECKING:
    from proftab.trace import Trace

__all__ = ["BLOCKING_CALLS", "MIN_SHARE", "synchronisation"]

#: host calls that wait for the device
BLOCKING_CALLS = any_pattern(SYNC, BLOCKING_COPY, apis=CUDA_HIP)
#: the calls take at least this share of step time
MIN_SHARE = 0.01


def synchronisation(nested: pl.DataFrame, events: pl.DataFrame, path_sync: pl.DataFrame | None = None, *,
                    pageable: pl.DataFrame | None = None, min_share: float = MIN_SHARE) -> pl.DataFrame:
    """Findings: blocking calls per rank (module docstring).

    Parameters
    ----------
    nested
        `Trace.nested`.
    events
        `Trace.events` (for the step windows).
    path_sync
        The critical path's `sync` segments (`rank`, `event_id`, `dur_ns`; optional).
    pageable
        `rank`, `event_id` of the async copy calls whose copy is `Device -> Pageable` (optional).
    """
    windows = step_windows(events)
    tree = nested.select("rank", "event_id", "parent_id", "cat", "name", "start_ns", "dur_ns")
    blocking = pl.col("name").str.contains(BLOCKING_CALLS)
    if pageable is not None and pageable.height:
        keys = pageable.select("rank", "event_id").unique().with_columns(_dtoh=pl.lit(True))
        tree = tree.join(keys, on=["rank", "event_id"], how="left", maintain_order="left")
        blocking = blocking | pl.col("_dtoh").fill_null(False)
    is_call = tree.select(kinds.is_host() & blocking).to_series().to_numpy()
    rows_ = np.flatnonzero(is_call)
    if not len(rows_):
        return frame([])
    rank = tree["rank"].to_numpy()
    parent = row_positions(rank, tree["event_id"].to_numpy(), rank, tree["parent_id"].fill_null(-1).to_numpy())
    is_op = tree.select(kinds.is_op().fill_null(False)).to_series().to_numpy()
    is_py = tree.select(kinds.is_python_frame().fill_null(False)).to_series().to_numpy()
    name = pl.col("name")
    is_module = is_py & tree.select(name.str.starts_with("nn.Module: ").fill_null(False)).to_series().to_numpy()
    is_user = is_py & ~tree.select(name.str.contains(LIBRARY_FRAME).fill_null(True)).to_series().to_numpy()
    # the outermost op above the call: walk to the nearest op, then on while an op is above it
    op = nearest_ancestor(parent, rows_, is_op)
    while True:
        up = np.where(op >= 0, nearest_ancestor(parent, np.maximum(op, 0), is_op), -1)
        if not (up >= 0).any():
            break
        op = np.where(up >= 0, up, op)
    py = nearest_ancestor(parent, rows_, is_user)
    mod = nearest_ancestor(parent, rows_, is_module)
    names = tree["name"]
    calls = tree[rows_].with_columns(
        op=pl.when(pl.Series(op >= 0)).then(names.gather(np.maximum(op, 0))),
        frame=pl.when(pl.Series(py >= 0)).then(names.gather(np.maximum(py, 0))),
        module=pl.when(pl.Series(mod >= 0)).then(names.gather(np.maximum(mod, 0)).str.strip_prefix("nn.Module: ")))
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
        by = c.group_by("op", "module", "frame", "name").agg(pl.col("dur_ns").sum(), pl.len()).sort(
            ["dur_ns", "op", "module", "frame"], descending=[True, False, False, False], nulls_last=True)
        top_op, top_module, top_frame, top_call, top_ns, top_n = by.row(0)
        issuer = ((top_op or top_call) + (f" in {top_module}" if top_module else "")
                  + (f" at {top_frame}" if top_frame else ""))
        ids = c["event_id"].implode()
        saving = None if path_sync is None else int(path_sync.filter(
            (pl.col("rank") == rank_) & pl.col("event_id").is_in(ids))["dur_ns"].sum()) // n
        out.append(finding(
            "synchronisation", "high" if ns / step_ns >= 0.1 else "medium", value=ns // n, unit="ns_per_step",
            share=ns / step_ns, est_saving_ns=saving, rank=rank_,
            scope=f"op={top_op or top_call}" + (f" module={top_module}" if top_module else ""),
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
    path: pl.DataFrame | None
    try:
        path = trace.critical_path.path().filter(pl.col("bound_by") == "sync").select("rank", "event_id", "dur_ns")
    except Exception:  # noqa: BLE001 - the critical path is optional evidence: without it the saving is null
        path = None
    act = trace.device.activities()
    dtoh = (pl.col("kind").cast(pl.String) == "memcpy") & pl.col("name").str.contains("Device -> Pageable")
    pageable = act.filter(dtoh & MEMCPY_ASYNC.expr("launch_name")).select(
        "rank", pl.col("launch_id").alias("event_id")).drop_nulls()
    return synchronisation(trace.collect("nested"), trace.collect("events"), path, pageable=pageable)
