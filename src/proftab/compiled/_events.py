"""The generated-kernel events of a trace, each with its launch, region, graph call and launch args.

Three stages, each a pass over the frames: the kernel rows (device kernels with their launching op,
host C++ kernels), where each runs (`_placement`: the enclosing graph call and region, the graph and
compile id, the kernel name's columns), and what the launcher's and the kernel's own args say
(`_launch_args`: Triton's `kernel_file`, Inductor's byte and FLOP figures, torch 2.14's stacks).
"""

from __future__ import annotations

import numpy as np
import polars as pl

from proftab import kinds
from proftab.compiled._names import GENERATED_PATTERN, kernel_name_columns
from proftab.compiled._regions import (
    CALL_PREFIX,
    REGION_PREFIX,
    anchor_graphs,
    nearest_above,
    parent_rows,
    take_rows,
)
from proftab.intervals.tree import row_positions

__all__ = ["EVENT_COLUMNS", "kernel_events"]

#: the columns of `kernel_events`, in order
EVENT_COLUMNS = ["rank", "event_id", "name", "kernel", "backend", "kernel_kind", "fused_ops", "on_device", "start_ns",
                 "dur_ns", "launch_id", "compile_id", "graph", "region_id", "graph_call_id", "graph_hash",
                 "kernel_file", "inductor_bytes", "inductor_flops", "stacks"]


def kernel_events(nested: pl.DataFrame, activities: pl.DataFrame | None = None) -> pl.DataFrame:
    """Every generated-kernel event with its region (no provenance).

    Parameters
    ----------
    nested
        `Trace.nested` (at least rank, event_id, parent_id, cat, name, start_ns, dur_ns, args).
    activities
        `Trace.device.activities()` when the trace has device rows (device kernels find their
        launching op there; host `triton_*` ops are then launches, never kernel rows), else None.

    Returns
    -------
    pl.DataFrame
        `rank`, `event_id`, `name`, `kernel`, `backend`, `kernel_kind`, `fused_ops`,
        `on_device`, `start_ns`, `dur_ns`, `launch_id` (the op that launched a device kernel),
        `compile_id` (`"0/0"` of the enclosing `Torch-Compiled Region`; a backward kernel: of the
        region its forward ran in), `graph` (`"backward"`: under AOTAutograd's
        `CompiledFunctionBackward`; `"forward"`: under a region; else null), `region_id` (the
        region's event_id; null for backward kernels), `graph_call_id` (event_id of the
        `## Call CompiledFxGraph ##` annotation),
        `graph_hash`, `kernel_file` (Triton launch args), `inductor_bytes` / `inductor_flops`
        (Inductor's own `kernel_num_gb` x 1e9 / `kernel_flop` launch args, written with
        `TORCHINDUCTOR_BENCHMARK_KERNEL=1` or `TORCHINDUCTOR_PROFILE_BANDWIDTH=1`; else null),
        `stacks` (the kernel event's `stack` arg: the model stacks torch 2.14's
        `inductor_trace_handler` writes with `TORCH_COMPILE_DEBUG_EXTEND=1`; else null).
        Sorted by rank, start_ns, event_id.
    """
    n = nested.select("rank", "event_id", "parent_id", "cat", "name", "start_ns", "dur_ns", "args",
                      *[c for c in ("sequence_number",) if c in nested.columns])
    ev = _placement(n, _kernel_rows(n, activities))
    ev = _launch_args(n, ev)
    return ev.with_columns(
        graph_hash=pl.col("_call").str.extract(r"## Call CompiledFxGraph (\S+) ##", 1),
    ).select(EVENT_COLUMNS)


def _kernel_rows(n: pl.DataFrame, activities: pl.DataFrame | None) -> pl.DataFrame:
    """The generated-kernel rows of `n`: device kernels with their `launch_id`, then host (C++) kernels.

    A host event that launched one of the device kernels is a launcher, not a kernel row.
    Sorted by rank, start_ns, event_id; `on_device` says which is which.
    """
    is_gen = pl.col("name").str.contains(GENERATED_PATTERN)
    device = n.filter(is_gen & kinds.is_device_work())
    host = n.filter(is_gen & ~kinds.is_device(), kinds.is_host())
    if activities is not None:  # a host `triton_*` op is a launch, not the kernel (its device kernel may be
        host = host.filter(~pl.col("name").str.starts_with("triton_"))  # unlinked, e.g. in a CUDA graph replay)
    launch = pl.DataFrame(schema={"rank": pl.Int32, "event_id": pl.Int64, "launch_id": pl.Int64})
    if device.height and activities is not None:
        launch = activities.select("rank", "event_id", pl.col("op_id").alias("launch_id"))
    device = device.join(launch, on=["rank", "event_id"], how="left").with_columns(on_device=pl.lit(True))
    launchers = device.select("rank", pl.col("launch_id").alias("event_id")).drop_nulls()
    host = (host.join(launchers, on=["rank", "event_id"], how="anti")
            .with_columns(launch_id=pl.lit(None, pl.Int64), on_device=pl.lit(False)))
    return pl.concat([host.select(device.columns), device]).sort("rank", "start_ns", "event_id")


def _placement(n: pl.DataFrame, ev: pl.DataFrame) -> pl.DataFrame:
    """`ev` with where each kernel runs and what its name says.

    The anchor is the launching op of a device kernel, the kernel event itself on the host; above
    it the nearest `## Call CompiledFxGraph ##` annotation (`graph_call_id`, its name as `_call`)
    and `Torch-Compiled Region` op (`region_id`), then `compile_id` and `graph`
    (`anchor_graphs`) and the kernel name's columns (`kernel_name_columns`, once per name).
    """
    anchor_id = pl.coalesce("launch_id", pl.when(~pl.col("on_device")).then("event_id"))
    # O(n) over the trace only when it has generated kernels (tr.perf asks every trace)
    parents = parent_rows(n) if ev.height else np.empty(0, np.int64)
    start = row_positions(n["rank"].to_numpy(), n["event_id"].to_numpy(), ev["rank"].to_numpy(),
                          ev.select(anchor_id.fill_null(-1)).to_series().to_numpy()) if ev.height else np.empty(
        0, np.int64)
    names = n["name"]
    cats = n["cat"].cast(pl.String)
    is_call = (names.str.starts_with(CALL_PREFIX) & (cats == kinds.USER_ANNOTATION)).to_numpy()
    is_region = names.str.starts_with(REGION_PREFIX).to_numpy()
    # the anchor itself counts (a launcher) only as its own parent's child: strict ancestors
    call_row, region_row = nearest_above(parents, start, is_call), nearest_above(parents, start, is_region)
    ids = n["event_id"]
    uniq = ev.select(pl.col("name").unique()).with_columns(kernel_name_columns(pl.col("name")))
    return pl.concat([ev.with_columns(
        take_rows(ids, call_row, "graph_call_id"), take_rows(names, call_row, "_call"),
        take_rows(ids, region_row, "region_id")), anchor_graphs(n, parents, start)], how="horizontal").join(
        uniq, on="name", how="left")


def _launch_args(n: pl.DataFrame, ev: pl.DataFrame) -> pl.DataFrame:
    """`ev` with `kernel_file`, `inductor_bytes`, `inductor_flops` (the launcher's args) and `stacks` (its own).

    Only the args of the launchers and kernels are parsed, not the trace's.
    """
    if not ev.height:
        return ev.with_columns(kernel_file=pl.lit(None, pl.String), inductor_bytes=pl.lit(None, pl.Int64),
                               inductor_flops=pl.lit(None, pl.Int64), stacks=pl.lit(None, pl.List(pl.String)))
    launchers_of = ev.select("rank", pl.col("launch_id").alias("event_id")).drop_nulls().unique()
    launcher_args = n.join(launchers_of, on=["rank", "event_id"], how="semi").select(
        "rank", pl.col("event_id").alias("launch_id"),
        pl.col("args").str.json_path_match("$.kernel_file").alias("kernel_file"),
        (pl.col("args").str.json_path_match("$.kernel_num_gb").cast(pl.Float64, strict=False) * 1e9).round()
        .cast(pl.Int64).alias("inductor_bytes"),
        pl.col("args").str.json_path_match("$.kernel_flop").cast(pl.Float64, strict=False).round().cast(pl.Int64)
        .alias("inductor_flops"))
    own_args = n.join(ev.select("rank", "event_id"), on=["rank", "event_id"], how="semi").select(
        "rank", "event_id", pl.col("args").str.json_path_match("$.stack")
                        .str.json_decode(pl.List(pl.String)).alias("stacks"))
    return ev.join(launcher_args, on=["rank", "launch_id"], how="left").join(own_args, on=["rank", "event_id"],
                                                                             how="left")
