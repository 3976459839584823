"""torch-compatible `key_averages()`: self/total CPU, device and memory per key.

Input is the nested events table (`Trace.nested`: events plus `parent_id`, `depth`,
`self_ns`). The rules follow torch's `EventList._build_tree` / `key_averages`
(docs/nesting.md lists them with their sources):

* host rows are every host event except profiler spans and the names torch filters
  (`TORCH_FILTERED_NAMES`); a filtered event's time is self time of its nearest kept
  ancestor, and its children hang from that ancestor;
* an only child with its parent's name is folded into the parent (torch's
  `_remove_dup_nodes`): one call, self times added, the parent's total;
* `ProfilerStep#N` is grouped as `ProfilerStep*`;
* device rows are device activities (kernels, memcpy, memset, syncs, gpu annotations),
  one per name, with their own durations;
* `[memory]` bytes count for every kept host event whose [start, end] holds the instant
  (both ends inclusive, any thread of the same process), split by device type.

Self time is proftab's exact sweep (`self_ns`), so it is never negative; on properly
nested events it equals torch's `dur - Σ children dur`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import polars as pl

from proftab import schema

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["KEY_AVERAGES_COLUMNS", "host_tree", "input_shapes_expr", "key_averages"]

KEY_AVERAGES_COLUMNS = [
    "name", "device_type", "is_user_annotation", "overload_name", "input_shapes", "stack", "calls",
    "self_cpu_ns", "cpu_total_ns", "cpu_avg_ns", "self_device_ns", "device_total_ns", "device_avg_ns",
    "cpu_mem_bytes", "self_cpu_mem_bytes", "device_mem_bytes", "self_device_mem_bytes", "flops",
    "is_async", "top_level", "min_ns", "max_ns", "p50_ns", "p95_ns", "self_cpu_share", "wall_share",
]

_TENSORLIST = r"\[\[[^\[\]]*\](?:, \[[^\[\]]*\])*\]"


def input_shapes_expr(col: str = "input_dims") -> pl.Expr:
    """torch's `str(event.input_shapes)` from the `Input Dims` JSON text.

    TensorList inputs become `[]` (torch's `shapes()` drops them); a missing value is `[]`.
    """
    compact = pl.col(col).str.replace_all(" ", "", literal=True).str.replace_all(",", ", ", literal=True)
    inner = compact.str.slice(1, compact.str.len_chars() - 2).str.replace_all(_TENSORLIST, "[]")
    return pl.when(pl.col(col).is_null()).then(pl.lit("[]")).otherwise(pl.lit("[") + inner + pl.lit("]"))


def torch_name_expr() -> pl.Expr:
    """torch's grouping name: `ProfilerStep#N` -> `ProfilerStep*`."""
    return pl.when(pl.col("name").str.starts_with("ProfilerStep#")).then(pl.lit("ProfilerStep*")).otherwise(
        pl.col("name"))


def _index_of(ids: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """Positions of `wanted` ids in `ids` (-1 where absent); ids need not be sorted."""
    order = np.argsort(ids, kind="stable")
    sorted_ids = ids[order]
    pos = np.searchsorted(sorted_ids, wanted)
    pos = np.clip(pos, 0, max(len(ids) - 1, 0))
    found = (len(ids) > 0) & (sorted_ids[pos] == wanted) if len(ids) else np.zeros(len(wanted), bool)
    return np.where(found, order[pos], -1)


def host_tree(nested: pl.DataFrame, *, include_python_functions: bool = True) -> pl.DataFrame:
    """The host events torch builds its tree from, with torch's parent links.

    Returns one row per kept host event with `kept_parent` (row index of the nearest kept
    ancestor, -1 for roots), `tree_self_ns` (own self + filtered descendants' self),
    `rep` (row index of the event it is folded into by `_remove_dup_nodes`, itself if none).
    """
    cat = pl.col("cat").cast(pl.String)
    host = nested.filter(~cat.is_in(list(schema.DEVICE_CATEGORIES | schema.PROFILER_SPAN_CATEGORIES))
                         | cat.is_null())
    dropped = pl.col("name").is_in(list(schema.TORCH_FILTERED_NAMES))
    if not include_python_functions:
        dropped = dropped | (cat == "python_function")
    host = host.with_columns(_dropped=dropped.fill_null(False))
    n = len(host)
    ids = host["event_id"].to_numpy()
    ranks = host["rank"].to_numpy().astype(np.int64)
    key = ranks * (1 << 40) + ids  # event ids are unique per rank
    parent_ids = host["parent_id"].fill_null(-1).to_numpy()
    pkey = np.where(parent_ids >= 0, ranks * (1 << 40) + parent_ids, -1)
    parent = _index_of(key, pkey)
    parent[parent_ids < 0] = -1
    start = host["start_ns"].to_numpy()
    parent = _containing_ancestor(parent, start, np.maximum(start, host["end_ns"].to_numpy()))
    dropped_np = host["_dropped"].to_numpy()
    depth = _tree_depth(parent)  # nest's depth is not monotone along parents of crossing events
    self_ns = host["self_ns"].to_numpy().astype(np.int64)

    # nearest kept ancestor: walk parents top-down (a parent is always shallower)
    order = np.argsort(depth, kind="stable")
    kept_parent = parent.copy()
    for d in np.unique(depth):
        sel = order[depth[order] == d]
        p = kept_parent[sel]
        has = p >= 0
        lift = has & dropped_np[np.maximum(p, 0)]
        # the parent was dropped: use the parent's own kept parent (already final)
        kept_parent[sel[lift]] = kept_parent[p[lift]]
    # filtered events give their self time to their kept ancestor
    tree_self = np.where(dropped_np, 0, self_ns)
    give = dropped_np & (kept_parent >= 0)
    np.add.at(tree_self, kept_parent[give], self_ns[give])

    keep = ~dropped_np
    # _remove_dup_nodes: fold an only child with the parent's name into the parent
    names = host.select(torch_name_expr()).to_series().to_numpy()
    nchildren = np.bincount(kept_parent[keep & (kept_parent >= 0)], minlength=n)
    kp = np.maximum(kept_parent, 0)
    merge = keep & (kept_parent >= 0) & (nchildren[kp] == 1) & (names[kp] == names)
    rep = np.arange(n)
    for d in np.unique(depth):
        sel = order[depth[order] == d]
        m = sel[merge[sel]]
        rep[m] = rep[kept_parent[m]]
    return host.with_columns(
        pl.Series("_row", np.arange(n)),
        pl.Series("kept_parent", kept_parent),
        pl.Series("tree_self_ns", tree_self),
        pl.Series("rep", rep),
        pl.Series("_merged", merge),
        pl.Series("torch_name", names, dtype=pl.String),
    ).filter(~pl.col("_dropped"))


def _containing_ancestor(parent: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """torch's parent: the nearest ancestor `p` with `p.end > e.start` and `p.end >= e.end`.

    `nest` parents an event that ends after its parent (crossing) under the event open at
    its start; torch's `_populate_cpu_children` pops it up to an ancestor that contains it,
    so that a subtree never reaches past its root (spec §2.2). Parent = row index, -1 root.
    """
    cur = parent.copy()
    while True:
        c = np.maximum(cur, 0)
        bad = (cur >= 0) & ~((end[c] > start) & (end[c] >= end))
        if not bad.any():
            return cur
        cur[bad] = parent[cur[bad]]


def _tree_depth(parent: np.ndarray) -> np.ndarray:
    """Number of ancestors of each node (parent = row index, -1 for roots)."""
    depth = np.zeros(len(parent), np.int64)
    cur = parent.copy()
    alive = cur >= 0
    while alive.any():
        depth[alive] += 1
        cur[alive] = parent[cur[alive]]
        alive = cur >= 0
    return depth


def _subtree_sum(values: np.ndarray, parent: np.ndarray, depth: np.ndarray) -> np.ndarray:
    """Σ of `values` over each node's subtree (parent = row index, -1 for roots)."""
    total = values.astype(np.int64).copy()
    order = np.argsort(-depth, kind="stable")
    levels = depth[order]
    bounds = np.flatnonzero(np.diff(levels)) + 1
    for chunk in np.split(order, bounds):
        p = parent[chunk]
        has = p >= 0
        np.add.at(total, p[has], total[chunk[has]])
    return total


def _memory(host: pl.DataFrame, instants: pl.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Inclusive CPU and device [memory] bytes per host row (torch's bisect rule)."""
    n = len(host)
    cpu = np.zeros(n, np.int64)
    dev = np.zeros(n, np.int64)
    mem = instants.filter((pl.col("name") == "[memory]") & pl.col("bytes").is_not_null())
    if mem.is_empty() or n == 0:
        return cpu, dev
    for (rank, pid), grp in mem.group_by(["rank", "pid"]):
        rows = host.with_row_index("_i").filter((pl.col("rank") == rank) & (pl.col("pid") == pid))
        if rows.is_empty():
            continue
        g = grp.sort("ts_ns")
        ts = g["ts_ns"].to_numpy()
        dtype = g["device_type"].fill_null(0).to_numpy()
        b = g["bytes"].to_numpy()
        lo = np.searchsorted(ts, rows["start_ns"].to_numpy(), "left")
        hi = np.searchsorted(ts, rows["end_ns"].to_numpy(), "right")
        idx = rows["_i"].to_numpy()
        for target, types in ((cpu, schema.CPU_MEMORY_DEVICE_TYPES), (dev, schema.DEVICE_MEMORY_DEVICE_TYPES)):
            cum = np.concatenate([[0], np.cumsum(np.where(np.isin(dtype, types), b, 0))])
            target[idx] += cum[hi] - cum[lo]
    return cpu, dev


def _python_stacks(tree: pl.DataFrame, n: int) -> list[list[str]]:
    """Up to `n` enclosing python_function frames per row, innermost first."""
    parent = tree["kept_parent_pos"].to_numpy()
    is_py = (tree["cat"].cast(pl.String) == "python_function").to_numpy()
    names = tree["name"].to_numpy()
    depth = _tree_depth(parent)
    nearest = np.full(len(parent), -1)
    order = np.argsort(depth, kind="stable")
    for d in np.unique(depth):
        sel = order[depth[order] == d]
        p = parent[sel]
        has = p >= 0
        pp = np.maximum(p, 0)
        nearest[sel] = np.where(has, np.where(is_py[pp], pp, nearest[pp]), -1)
    frames = []
    cur = nearest
    for _ in range(n):
        frames.append(cur)
        cur = np.where(cur >= 0, nearest[np.maximum(cur, 0)], -1)
    out: list[list[str]] = []
    for i in range(len(parent)):
        stack = []
        for f in frames:
            if f[i] < 0:
                break
            stack.append(names[f[i]])
        out.append(stack)
    return out


def key_averages(
    nested: pl.DataFrame,
    instants: pl.DataFrame,
    *,
    device_self: pl.DataFrame | None = None,
    device_type: str = "CUDA",
    group_by_input_shape: bool = False,
    group_by_stack_n: int = 0,
    group_by_overload_name: bool = False,
    include_python_functions: bool = True,
    top_level_only: bool = False,
    by_step: bool = False,
    wall_ns: int | None = None,
) -> pl.DataFrame:
    """torch's `key_averages()` as a DataFrame (see the module docstring for the rules).

    Parameters
    ----------
    nested
        `Trace.nested`: events with `parent_id`, `depth`, `self_ns`.
    instants
        `Trace.instants` (for `[memory]` attribution).
    device_self
        Per host event the device time of the activities it launched itself:
        columns `rank`, `event_id`, `self_device_ns` (from device attribution); rows
        for device events give their own duration (`proftab.device.self_device_time`).
    device_type
        Name of the device rows' type (`CUDA`, `XPU`, `MTIA`...).
    group_by_input_shape, group_by_stack_n, group_by_overload_name
        torch's grouping options.
    include_python_functions
        Keep `python_function` rows (torch 2.13 does); when False their time is their
        parent's self time.
    top_level_only
        Only events without a (kept) parent, and device rows.
    by_step
        Add a `step` key column: the `ProfilerStep#N` window (same rank) holding the
        event's start; null outside any step.
    wall_ns
        Denominator of `wall_share` (defaults to the span of all events).
    """
    tree = host_tree(nested, include_python_functions=include_python_functions)
    n = len(tree)
    # re-index parents to positions in the filtered tree
    pos_of_row = np.full(int(tree["_row"].max()) + 1 if n else 0, -1)
    pos_of_row[tree["_row"].to_numpy()] = np.arange(n)
    kp_row = tree["kept_parent"].to_numpy()
    kp = np.where(kp_row >= 0, pos_of_row[np.maximum(kp_row, 0)], -1) if n else kp_row
    rep = pos_of_row[tree["rep"].to_numpy()] if n else kp_row
    tree = tree.with_columns(pl.Series("kept_parent_pos", kp))
    depth = _tree_depth(kp)

    own_dev = np.zeros(n, np.int64)
    if device_self is not None and n and not device_self.is_empty():
        joined = tree.select("rank", "event_id").join(
            device_self.select("rank", "event_id", "self_device_ns"), on=["rank", "event_id"], how="left")
        own_dev = joined["self_device_ns"].fill_null(0).to_numpy().astype(np.int64)
    dev_total = _subtree_sum(own_dev, kp, depth)
    cpu_mem, dev_mem = _memory(tree, instants)
    child_cpu_mem = np.zeros(n, np.int64)
    child_dev_mem = np.zeros(n, np.int64)
    has_p = kp >= 0
    np.add.at(child_cpu_mem, kp[has_p], cpu_mem[has_p])
    np.add.at(child_dev_mem, kp[has_p], dev_mem[has_p])

    # fold merged events into their representative
    self_cpu = np.zeros(n, np.int64)
    np.add.at(self_cpu, rep, tree["tree_self_ns"].to_numpy())
    self_dev = np.zeros(n, np.int64)
    np.add.at(self_dev, rep, own_dev)
    self_cpu_mem = np.zeros(n, np.int64)
    np.add.at(self_cpu_mem, rep, cpu_mem - child_cpu_mem)
    self_dev_mem = np.zeros(n, np.int64)
    np.add.at(self_dev_mem, rep, dev_mem - child_dev_mem)

    host_rows = tree.with_columns(
        pl.Series("self_cpu_ns", self_cpu),
        pl.Series("self_device_ns", self_dev),
        pl.Series("device_total_ns", dev_total),
        pl.Series("cpu_mem_bytes", cpu_mem),
        pl.Series("self_cpu_mem_bytes", self_cpu_mem),
        pl.Series("device_mem_bytes", dev_mem),
        pl.Series("self_device_mem_bytes", self_dev_mem),
        pl.Series("top_level", kp < 0),
    ).filter(~pl.col("_merged"))
    if top_level_only:
        host_rows = host_rows.filter(pl.col("top_level"))

    stacks: pl.Expr = pl.lit([], pl.List(pl.String))
    if group_by_stack_n > 0:
        py = _python_stacks(tree, group_by_stack_n)
        from_call = tree["call_stack"].str.split(";").list.head(group_by_stack_n)
        stack_series = pl.Series("stack", [
            cs if cs is not None else st for cs, st in zip(from_call.to_list(), py, strict=True)
        ], dtype=pl.List(pl.String))
        host_rows = host_rows.join(tree.select("_row").with_columns(stack_series), on="_row", how="left")
        stacks = pl.col("stack").fill_null(pl.lit([], pl.List(pl.String)))

    host_rows = host_rows.select(
        "rank", "event_id", "start_ns", "end_ns",
        pl.col("torch_name").alias("name"),
        pl.lit("CPU").alias("device_type"),
        (pl.col("cat").cast(pl.String) == "user_annotation").fill_null(False).alias("is_user_annotation"),
        (input_shapes_expr() if group_by_input_shape else pl.lit("")).alias("input_shapes"),
        stacks.alias("stack"),
        pl.col("name").alias("_full_name"),
        "self_cpu_ns", pl.col("dur_ns").alias("cpu_total_ns"), "self_device_ns", "device_total_ns",
        "cpu_mem_bytes", "self_cpu_mem_bytes", "device_mem_bytes", "self_device_mem_bytes", "top_level",
        pl.col("dur_ns").alias("_call_ns"),
    )

    cat = pl.col("cat").cast(pl.String)
    dev = nested.filter(cat.is_in(list(schema.DEVICE_CATEGORIES)))
    if device_self is not None:  # device events' own durations: annotation margin undone, never < 0
        dev = dev.join(device_self.select("rank", "event_id", pl.col("self_device_ns").alias("_dev_ns")),
                       on=["rank", "event_id"], how="left", maintain_order="left").with_columns(
            dur_ns=pl.coalesce("_dev_ns", "dur_ns"))
    dev = dev.select(
        "rank", "event_id", "start_ns", "end_ns",
        torch_name_expr().alias("name"),
        pl.lit(device_type).alias("device_type"),
        (cat == "gpu_user_annotation").alias("is_user_annotation"),
        pl.lit("[]" if group_by_input_shape else "").alias("input_shapes"),
        pl.lit([], pl.List(pl.String)).alias("stack"),
        pl.col("name").alias("_full_name"),
        pl.lit(0, pl.Int64).alias("self_cpu_ns"),
        pl.lit(0, pl.Int64).alias("cpu_total_ns"),
        pl.col("dur_ns").alias("self_device_ns"),
        pl.col("dur_ns").alias("device_total_ns"),
        *(pl.lit(0, pl.Int64).alias(c) for c in ("cpu_mem_bytes", "self_cpu_mem_bytes", "device_mem_bytes",
                                                   "self_device_mem_bytes")),
        pl.lit(True).alias("top_level"),
        pl.col("dur_ns").alias("_call_ns"),
    )
    rows = pl.concat([host_rows, dev], how="vertical_relaxed")
    keys = ["name", "device_type", "is_user_annotation"]
    if group_by_overload_name:
        overload = pl.col("_full_name").str.extract(r"^[\w:]+::\w+\.(\w+)$").fill_null("")
        rows = rows.with_columns(
            overload_name=overload,
            name=pl.when(overload != "").then(pl.col("name").str.replace(r"\.\w+$", "")).otherwise(pl.col("name")),
        )
        keys.append("overload_name")
    else:
        rows = rows.with_columns(overload_name=pl.lit(""))
    if group_by_input_shape:
        keys.append("input_shapes")
    if group_by_stack_n > 0:
        keys.append("stack")
    if by_step:
        rows = _assign_steps(rows, nested)
        keys.insert(0, "step")

    if wall_ns is None:
        span = nested.group_by("rank").agg((pl.col("end_ns").max() - pl.col("start_ns").min()).alias("w"))
        wall_ns = int(span["w"].sum() or 0)
    rows = rows.sort(["start_ns", "end_ns", "rank", "event_id"], descending=[False, True, False, False])
    out = (
        rows.with_row_index("_order")
        .group_by(keys, maintain_order=True)
        .agg(
            pl.col("_order").first(),
            pl.len().cast(pl.Int64).alias("calls"),
            pl.col("self_cpu_ns").sum(),
            pl.col("cpu_total_ns").sum(),
            pl.col("self_device_ns").sum(),
            pl.col("device_total_ns").sum(),
            pl.col("cpu_mem_bytes").sum(),
            pl.col("self_cpu_mem_bytes").sum(),
            pl.col("device_mem_bytes").sum(),
            pl.col("self_device_mem_bytes").sum(),
            pl.col("top_level").first(),
            pl.col("_call_ns").min().alias("min_ns"),
            pl.col("_call_ns").max().alias("max_ns"),
            pl.col("_call_ns").quantile(0.5, interpolation="nearest").cast(pl.Int64).alias("p50_ns"),
            pl.col("_call_ns").quantile(0.95, interpolation="nearest").cast(pl.Int64).alias("p95_ns"),
            *([pl.col("input_shapes").first()] if "input_shapes" not in keys else []),
            *([pl.col("overload_name").first()] if "overload_name" not in keys else []),
            *([pl.col("stack").first()] if "stack" not in keys else []),
        )
        .sort("_order")
    )
    total_self = out.filter(pl.col("device_type") == "CPU")["self_cpu_ns"].sum()
    out = out.with_columns(
        cpu_avg_ns=pl.col("cpu_total_ns") / pl.col("calls"),
        device_avg_ns=pl.col("device_total_ns") / pl.col("calls"),
        flops=pl.lit(0, pl.Int64),
        is_async=pl.lit(False),
        self_cpu_share=pl.col("self_cpu_ns") / total_self if total_self else pl.lit(None, pl.Float64),
        wall_share=(pl.col("self_cpu_ns") + pl.col("self_device_ns")) / wall_ns if wall_ns else pl.lit(
            None, pl.Float64),
    )
    front = ["step"] if by_step else []
    return out.select([*front, *KEY_AVERAGES_COLUMNS])


def _assign_steps(rows: pl.DataFrame, nested: pl.DataFrame) -> pl.DataFrame:
    """`step`: N of the `ProfilerStep#N` (same rank, host side) whose window holds the start."""
    steps = (
        nested.filter(pl.col("name").str.starts_with("ProfilerStep#")
                      & (pl.col("cat").cast(pl.String) != "gpu_user_annotation"))
        .select("rank", pl.col("start_ns").alias("_s0"), pl.col("end_ns").alias("_s1"),
                pl.col("name").str.strip_prefix("ProfilerStep#").cast(pl.Int64, strict=False).alias("step"))
        .sort("_s0")
    )
    joined = rows.sort("start_ns").join_asof(steps, left_on="start_ns", right_on="_s0", by="rank",
                                             strategy="backward")
    return joined.with_columns(
        step=pl.when(pl.col("start_ns") < pl.col("_s1")).then(pl.col("step")).otherwise(None)
    ).drop("_s0", "_s1")


def sort_keys() -> Sequence[str]:
    """Column names accepted by `Trace.table(sort_by=...)` besides torch's names."""
    return KEY_AVERAGES_COLUMNS
