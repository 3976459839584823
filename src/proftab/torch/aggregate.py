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

import re
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl

from proftab import kinds, schema
from proftab.intervals.tree import containing_ancestor, depth_levels, row_positions, subtree_sum, tree_depth
from proftab.steps import assign_steps, step_windows, torch_step_name, torch_step_name_expr
from proftab.torch.flops import torch_flops

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["FLOPS_COLUMNS", "KEY_AVERAGES_COLUMNS", "NESTED_COLUMNS", "OVERLOAD_NAME_RE", "host_tree",
           "input_shapes_expr", "input_shapes_list_expr", "key_averages", "split_overload_expr"]

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


def input_shapes_list_expr(col: str = "input_shapes") -> pl.Expr:
    """The typed form of torch's input-shapes text (`input_shapes_expr`): ``List(List(Int64))``.

    ``[[512], [141, 512], [], []]`` becomes ``[[512], [141, 512], [], []]`` as lists of int64
    dims, for filtering on ranks and sizes (``pl.col("dims").list.len()``) without parsing text.
    """
    return pl.col(col).str.json_decode(pl.List(pl.List(pl.Int64)))


#: the columns `group_by_stack_n` reads: the verbose `Call stack`, and what pairs a backward op with its forward op
_STACK_COLUMNS = ("call_stack", "tid", "sequence_number", "fwd_thread_id")
_TREE_COLUMNS = ("rank", "event_id", "pid", "cat", "name", "start_ns", "end_ns", "dur_ns", "parent_id", "self_ns")
#: the columns of `Trace.nested` that `key_averages` reads (a Parquet scan reads only these)
NESTED_COLUMNS = (*_TREE_COLUMNS, "depth", "input_dims", *_STACK_COLUMNS)
#: the further columns read for torch's FLOPs (`with_flops=True`)
FLOPS_COLUMNS = ("input_dims", "input_type", "concrete_inputs")


#: an op name with its ATen overload (`aten::add.Tensor`: base `aten::add`, overload `Tensor`), as the
#: JSON writes op names recorded with `_ExperimentalConfig(capture_overload_names=True)`
OVERLOAD_NAME_RE = r"^([\w:]+::\w+)\.(\w+)$"


def split_overload_expr(name: str = "name", cat: str = "cat") -> tuple[pl.Expr, pl.Expr]:
    """torch's (name, overload_name) of an op from the JSON's joined name.

    Only ops (`cpu_op`) are split; other events (annotations, Python frames) keep their name
    whatever it looks like, and have overload ``""``.
    """
    is_op = pl.col(cat).is_in(list(kinds.OP_CATEGORIES)).fill_null(False)
    base = pl.col(name).str.extract(OVERLOAD_NAME_RE, 1)
    overload = pl.col(name).str.extract(OVERLOAD_NAME_RE, 2)
    return (pl.when(is_op & base.is_not_null()).then(base).otherwise(pl.col(name)).alias(name),
            pl.when(is_op).then(overload).otherwise(None).fill_null("").alias("overload_name"))


def _name_codes(names: pl.Series, is_op: np.ndarray | None = None
                ) -> tuple[np.ndarray, np.ndarray, list[str | None]]:
    """Integer codes of torch's grouping names (`ProfilerStep#N` -> `ProfilerStep*`).

    Returns (code per row, filtered-name flag per row, code -> name). An op's name (rows where
    `is_op`) is its base name, without the overload (`aten::add.Tensor` -> `aten::add`: torch
    keys by `kineto_event.name()`, the JSON writer appends the overload). Strings are hashed
    once (the Categorical cast); everything else works on the few distinct names.
    """
    cat = names.cast(pl.Categorical)
    phys = cat.to_physical()
    first = phys.arg_unique()  # one row per distinct name (null too): a hash of the integer codes, not the text
    u_ids = phys.gather(first).fill_null(0).to_numpy().astype(np.int64)
    u_str = names.gather(first).to_list()
    table: dict[str | None, int] = {}
    overload_re = re.compile(OVERLOAD_NAME_RE)

    def code(s: str | None) -> int:
        return table.setdefault(torch_step_name(s), len(table))

    code_of = [code(s) for s in u_str]
    bases = [None if s is None else overload_re.match(s) for s in u_str]
    base_of = [code(m.group(1)) if m else c for m, c in zip(bases, code_of, strict=True)]
    size = int(u_ids.max()) + 2 if len(u_ids) else 1
    dtype = np.int32 if len(table) < 2**31 else np.int64
    lut = np.zeros(size, dtype)
    base_lut = np.zeros(size, dtype)
    filt = np.zeros(size, bool)
    null_slot = size - 1
    for i, s, c, b in zip(u_ids, u_str, code_of, base_of, strict=True):
        slot = null_slot if s is None else i
        lut[slot] = c
        base_lut[slot] = b
        filt[slot] = s in schema.TORCH_FILTERED_NAMES
    ids = phys.fill_null(null_slot).to_numpy()
    codes = lut[ids]
    if is_op is not None and any(b != c for b, c in zip(base_of, code_of, strict=True)):
        codes = np.where(is_op, base_lut[ids], codes)
    return codes, filt[ids], list(table)


def host_tree(nested: pl.DataFrame, *, include_python_functions: bool = True,
              extra_columns: Sequence[str] = ()) -> tuple[pl.DataFrame, list[str | None]]:
    """The host events torch builds its tree from, with torch's parent links.

    Returns rows (columns `_TREE_COLUMNS` + `extra_columns`) with `_kept` (a host event torch
    keeps: the other rows are filtered names, and the few non-host rows when there are few),
    `kept_parent` (row position of the nearest kept ancestor that contains the event, -1 for
    roots), `tree_self_ns` (own self + filtered descendants' self), `rep` (row position of the
    event it is folded into by `_remove_dup_nodes`, itself if none), `name_code` (torch's
    grouping name as an index into the returned list of names) and `tree_depth`. Rows that are
    not `_kept` hold no kept event's time and are nobody's `kept_parent`; the caller skips them.
    """
    frame = nested.select([*_TREE_COLUMNS, "depth", *extra_columns])
    is_host = frame.select(kinds.is_host_op().fill_null(False)).to_series().to_numpy()
    n_other = len(is_host) - int(np.count_nonzero(is_host))
    # a frame-wide copy only to leave out many non-host (device) rows; a few (profiler spans)
    # stay in, dropped like filtered names
    few = n_other * _FEW_OTHER_ROWS <= len(is_host)
    host = frame if few else frame.filter(pl.Series(is_host))
    is_op = host.select(pl.col("cat").is_in(list(kinds.OP_CATEGORIES)).fill_null(False)).to_series().to_numpy()
    names, dropped_np, code_names = _name_codes(host["name"], is_op)
    del is_op
    if few and n_other:
        dropped_np |= ~is_host
    del is_host
    if not include_python_functions:
        dropped_np |= (host["cat"] == kinds.PYTHON_FRAME).fill_null(False).to_numpy()
    n = len(host)
    rank = host["rank"].to_numpy()
    parent_ids = host["parent_id"].fill_null(-1).to_numpy()
    parent = row_positions(rank, host["event_id"].to_numpy(), rank, parent_ids)
    start = host["start_ns"].to_numpy()
    end = host["end_ns"].to_numpy()
    if (end < start).any():  # a negative duration counts as zero-length
        end = np.maximum(start, end)
    contained = containing_ancestor(parent, start, end)
    del end
    # without crossing events the nesting depth is the number of ancestors; otherwise the
    # containing parents change it and it is recounted
    depth = host["depth"].to_numpy() if np.array_equal(contained, parent) else tree_depth(contained)
    parent = contained
    self_ns = host["self_ns"].to_numpy()

    # nearest kept ancestor, top-down (a parent is always shallower); row positions fit int32
    pos_type = np.int32 if n < 2**31 else np.int64
    kept_parent: np.ndarray[Any, np.dtype[np.signedinteger[Any]]] = parent.astype(pos_type)
    del parent, contained
    if dropped_np.any():  # only the rows under a dropped parent move, shallowest first
        lift = np.flatnonzero((kept_parent >= 0) & dropped_np[np.maximum(kept_parent, 0)])
        for sel in _levels(lift, depth):
            kept_parent[sel] = kept_parent[kept_parent[sel]]
    # filtered events give their self time to their kept ancestor (a dropped row's own value is
    # never read: it is nobody's kept row); without any to give, the stored self times serve as is
    give = dropped_np & (kept_parent >= 0)
    if give.any():
        tree_self = np.where(dropped_np, 0, self_ns)
        np.add.at(tree_self, kept_parent[give], self_ns[give])
    else:
        tree_self = self_ns

    keep = ~dropped_np
    # _remove_dup_nodes: fold an only child with the parent's name into the parent
    has_kp = kept_parent >= 0
    only_child = np.bincount(kept_parent[keep & has_kp], minlength=n) == 1
    kp = np.maximum(kept_parent, 0)
    merge = keep & has_kp & only_child[kp] & (names[kp] == names)
    del only_child
    rep = np.arange(n, dtype=pos_type)
    if merge.any():  # shallowest first: a merged parent already holds its representative
        for m in _levels(np.flatnonzero(merge), depth):
            rep[m] = rep[kept_parent[m]]
    # the dropped rows stay (no frame-wide filter): `_kept` marks the others
    out = host.with_columns(
        pl.Series("_kept", keep),
        pl.Series("kept_parent", kept_parent),
        pl.Series("tree_self_ns", tree_self),
        pl.Series("rep", rep),
        pl.Series("_merged", merge),
        pl.Series("tree_depth", depth),
        pl.Series("name_code", names),
    )
    return out, code_names


#: the columns `key_averages` sums per key
_SUMMED = ("self_cpu_ns", "cpu_total_ns", "self_device_ns", "device_total_ns", "cpu_mem_bytes", "self_cpu_mem_bytes",
           "device_mem_bytes", "self_device_mem_bytes", "flops")


def _levels(rows: np.ndarray, depth: np.ndarray) -> list[np.ndarray]:
    """`rows` grouped by their `depth`, shallowest first (a radix sort of only those rows)."""
    return [rows[sel] for sel in depth_levels(depth[rows])] if len(rows) else []


#: `host_tree` keeps non-host rows in (as dropped rows) when at most 1 row in this many is one
_FEW_OTHER_ROWS = 100


def _minus(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """`a - b`; `a` itself when `b` is all zero (no new array)."""
    return a if not b.any() else a - b


#: the name code of host rows that are not counted (folded duplicates; nested rows for `top_level_only`)
_EXCLUDED = -1

#: the default host keys (name code, user annotation) as one non-negative int32 column
_GROUP = "_group"

#: `_order` of the rows that cannot be the first of their group
_NOT_FIRST = 2**31 - 1  # positions among the sorted candidates (about one per group) are below it


def _first_occurrence_order(host: pl.DataFrame, host_keys: list[str], dev: pl.DataFrame, dev_keys: list[str]
                            ) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Add `_order`: torch lists its rows in first-occurrence order of all events sorted by
    (start, -end) (rank, event_id break ties); `_order`'s minimum per group is its first event.

    Only the events starting at their group's earliest start can be first, so only those are
    sorted (about one per group); every other row gets `_NOT_FIRST`. Per group the minimum and
    the arg-minimum of `_order` are those of a sort of all events.
    """
    sort_keys = ["start_ns", "end_ns", "rank", "event_id"]

    def candidates(rows: pl.DataFrame, keys: list[str]) -> tuple[pl.DataFrame, np.ndarray]:
        start = rows["start_ns"].to_numpy()
        if keys == [_GROUP] and len(rows):  # one small non-negative integer key: the earliest start per group
            group = rows[_GROUP].to_numpy()
            earliest = np.full(int(group.max()) + 1, np.iinfo(np.int64).max, np.int64)
            np.minimum.at(earliest, group, start)
            positions = np.flatnonzero(earliest[group] == start)
        else:
            mask = rows.select((pl.col("start_ns") == pl.col("start_ns").min().over(keys)).alias("c")).to_series()
            positions = np.flatnonzero(mask.to_numpy())
        return rows.select(sort_keys)[positions], positions

    host_c, host_pos = candidates(host, host_keys)
    dev_c, dev_pos = candidates(dev, dev_keys)
    both = pl.concat([host_c, dev_c])
    order = both.select(pl.arg_sort_by(sort_keys, descending=[False, True, False, False]).alias("i"))["i"].to_numpy()
    rank_of = np.empty(len(order), np.int64)
    rank_of[order] = np.arange(len(order))

    def with_order(rows: pl.DataFrame, positions: np.ndarray, ranks: np.ndarray) -> pl.DataFrame:
        values = np.full(len(rows), _NOT_FIRST, np.int32)
        values[positions] = ranks
        return rows.with_columns(pl.Series("_order", values))

    return (with_order(host, host_pos, rank_of[:len(host_pos)]),
            with_order(dev, dev_pos, rank_of[len(host_pos):]))


def _memory(host: pl.DataFrame, instants: pl.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Inclusive CPU and device [memory] bytes per host row (torch's bisect rule)."""
    n = len(host)
    cpu = np.zeros(n, np.int64)
    dev = np.zeros(n, np.int64)
    mem = instants.filter((pl.col("name") == "[memory]") & pl.col("bytes").is_not_null())
    if mem.is_empty() or n == 0:
        return cpu, dev
    spans = host.select("rank", "pid", "start_ns", "end_ns").with_row_index("_i")  # filtered, not the whole frame
    for (rank, pid), grp in mem.group_by(["rank", "pid"]):
        rows = spans.filter((pl.col("rank") == rank) & (pl.col("pid") == pid))
        if rows.is_empty():
            continue
        g = grp.sort("start_ns")
        ts = g["start_ns"].to_numpy()
        dtype = g["device_type"].fill_null(0).to_numpy()
        b = g["bytes"].to_numpy()
        lo = np.searchsorted(ts, rows["start_ns"].to_numpy(), "left")
        hi = np.searchsorted(ts, rows["end_ns"].to_numpy(), "right")
        idx = rows["_i"].to_numpy()
        for target, types in ((cpu, schema.CPU_MEMORY_DEVICE_TYPES), (dev, schema.DEVICE_MEMORY_DEVICE_TYPES)):
            cum = np.concatenate([[0], np.cumsum(np.where(np.isin(dtype, types), b, 0))])
            target[idx] += cum[hi] - cum[lo]
    return cpu, dev


#: torch's `_filter_stack_entry`: a stack entry holding both parts is dropped before cutting to n
TORCH_FILTERED_STACK_ENTRIES = (
    ("autograd/__init__", "_make_grads"), ("autograd/__init__", "backward"), ("torch/tensor", "backward"),
    ("_internal/common_utils", "prof_callable"), ("_internal/common_utils", "prof_func_call"),
    ("_internal/common_utils", "prof_meth_call"),
)
#: the engine's span around a backward node: `autograd::engine::evaluate_function: MulBackward0` > `MulBackward0`
EVALUATE_FUNCTION_PREFIX = kinds.BACKWARD_OP_PREFIX


def _filtered_entry(e: pl.Expr) -> pl.Expr:
    """True for the stack entries torch leaves out (`TORCH_FILTERED_STACK_ENTRIES`)."""
    out = pl.lit(False)
    for a, b in TORCH_FILTERED_STACK_ENTRIES:
        out = out | (e.str.contains(a, literal=True) & e.str.contains(b, literal=True))
    return out


def _python_stacks(tree: pl.DataFrame, n: int) -> pl.Series:
    """Up to `n` enclosing python_function frames per row, innermost first (List[String]).

    Frames torch leaves out of stacks (`TORCH_FILTERED_STACK_ENTRIES`) are skipped.
    """
    parent = tree["kept_parent"].to_numpy()
    is_py = tree.select((pl.col("cat") == kinds.PYTHON_FRAME).fill_null(False)
                        & ~_filtered_entry(pl.col("name")).fill_null(False)).to_series().to_numpy()
    nearest = np.full(len(parent), -1)
    for sel in depth_levels(tree["tree_depth"].to_numpy()):
        p = parent[sel]
        pp = np.maximum(p, 0)
        nearest[sel] = np.where(p >= 0, np.where(is_py[pp], pp, nearest[pp]), -1)
    names = tree["name"]
    levels = []
    cur = nearest
    for _ in range(n):
        # the frame at this level, null once the chain of frames has ended
        levels.append(names.gather(pl.Series(np.maximum(cur, 0))).set(pl.Series(cur < 0), None))
        cur = np.where(cur >= 0, nearest[np.maximum(cur, 0)], -1)
    frames = pl.DataFrame({f"f{i}": s for i, s in enumerate(levels)})
    return frames.select(pl.concat_list(pl.all()).list.drop_nulls().alias("stack")).to_series()


def _backward_nodes(tree: pl.DataFrame) -> np.ndarray:
    """Per row the row position of its backward node (itself or its nearest such ancestor), -1 if none.

    A backward node (torch's `RecordScope.BACKWARD_FUNCTION`, which the JSON does not store) is
    the op the engine's `autograd::engine::evaluate_function: X` span holds as `X`.
    """
    kp = tree["kept_parent"].to_numpy()
    has_p = kp >= 0
    names = tree["name"]
    parent_name = names.gather(pl.Series(np.maximum(kp, 0))).set(pl.Series(~has_p), None)
    is_node = pl.DataFrame({"p": parent_name, "n": names}).select(
        (pl.col("p").str.starts_with(EVALUATE_FUNCTION_PREFIX)
         & (pl.col("p") == pl.lit(EVALUATE_FUNCTION_PREFIX) + pl.col("n"))).fill_null(False)
    ).to_series().to_numpy() & tree["_kept"].to_numpy()
    node = np.where(is_node, np.arange(len(kp)), -1)
    if not is_node.any():
        return node
    for sel in depth_levels(tree["tree_depth"].to_numpy()):
        p = kp[sel]
        inherit = (node[sel] < 0) & (p >= 0)
        node[sel[inherit]] = node[p[inherit]]
    return node


def _torch_stacks(tree: pl.DataFrame, n: int) -> pl.Series:
    """torch's `stack[:n]` per row (`group_by_stack_n`), from the verbose `Call stack`.

    torch's rules: the `Call stack` text ends in `;` (no empty last frame); entries of
    `TORCH_FILTERED_STACK_ENTRIES` are dropped before the cut; an op inside a backward node gets
    the stack of the first (by start, then longest) op outside any backward node with the node's
    sequence number on the forward thread (`_set_backward_stacktraces`), none when there is no
    such op. The JSON names the forward thread only by torch's small thread number
    (`Fwd thread id`), so the forward op is looked up on the node's own thread (the thread
    running the backward on CPU), else on the one thread of the process with forward ops of
    that sequence number, else the stack is empty. Where sequence numbers are shared (every op
    nested in one forward op has its number; ops outside autograd have none, -1) this picks the
    first such op, as torch does. Rows without a `Call stack` (a trace recorded without
    `verbose=True`) get their enclosing Python frames instead (proftab's rule; torch has no
    stacks there and groups as without `group_by_stack_n`).
    """
    entry = pl.element()
    verbose = tree.select(
        pl.col("call_stack").str.strip_suffix(";").str.split(";")
        .list.eval(entry.filter((entry != "") & ~_filtered_entry(entry))).list.head(n)
    ).to_series()
    stack = pl.DataFrame({"c": verbose, "p": _python_stacks(tree, n)}).select(
        pl.coalesce("c", "p").alias("stack")).to_series()
    node = _backward_nodes(tree)
    inside = node >= 0
    if not inside.any():
        return stack
    keys = ["rank", "pid", "tid", "_seq"]
    rows = tree.select("rank", "pid", "tid", pl.col("sequence_number").fill_null(-1).alias("_seq"),
                       "start_ns", "end_ns", "event_id", "fwd_thread_id").with_columns(stack=stack)
    forward = rows.filter(pl.Series(~inside & tree["_kept"].to_numpy() & ~tree["_merged"].to_numpy())).sort(
        ["start_ns", "end_ns", "event_id"], descending=[False, True, False])
    first = forward.unique(keys, keep="first", maintain_order=True).select(*keys, pl.col("stack").alias("_fwd"))
    # the one forward thread of a process with that sequence number (when the node's own has none)
    only = (first.group_by("rank", "pid", "_seq").agg(pl.len().alias("_n"), pl.col("_fwd").first().alias("_only"))
            .filter(pl.col("_n") == 1).drop("_n"))
    nodes = rows[node[inside]].select(*keys, "fwd_thread_id")
    found = (nodes.with_row_index("_i").join(first, on=keys, how="left")
             .join(only, on=["rank", "pid", "_seq"], how="left").sort("_i"))
    got = found.select(
        pl.when(pl.col("fwd_thread_id").fill_null(0) > 0).then(pl.coalesce("_fwd", "_only"))
        .otherwise(pl.lit([], pl.List(pl.String))).fill_null([]).alias("stack")
    ).to_series()
    # list columns cannot be scattered: gather from the stacks followed by the found ones
    take = np.arange(len(stack))
    take[inside] = len(stack) + np.arange(int(inside.sum()))
    return pl.concat([stack, got]).gather(pl.Series(take))


def _torch_float_times(tree: pl.DataFrame, nested: pl.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """torch's float µs CPU total and self time per row of `tree`, and torch's event order.

    torch converts each event's ns to µs as `(ns - trace_start_ns) / 1000` with the profile's
    start (the JSON's `Trace` span; else the rank's first event), takes `end - start` as the
    total and subtracts its children's totals one by one in its event order (start, then
    longest first). Returns (total, self, order position); rows torch does not keep get 0.
    """
    n = len(tree)
    rank = tree["rank"].to_numpy()
    span = nested.filter(kinds.is_profiler_span().fill_null(False)).group_by("rank").agg(pl.col("start_ns").min())
    first = nested.group_by("rank").agg(pl.col("start_ns").min().alias("_first"))
    t0 = first.join(span, on="rank", how="left").select("rank", pl.coalesce("start_ns", "_first").alias("t0"))
    origin = pl.DataFrame({"rank": rank}).join(t0, on="rank", how="left", maintain_order="left")["t0"].to_numpy()
    start = (tree["start_ns"].to_numpy() - origin) / 1000
    total = (tree["end_ns"].to_numpy() - origin) / 1000 - start
    order = np.empty(n, np.int64)
    order[tree.select(pl.arg_sort_by(["rank", "start_ns", "end_ns", "event_id"],
                                     descending=[False, False, True, False])).to_series().to_numpy()] = np.arange(n)
    kept = tree["_kept"].to_numpy() & ~tree["_merged"].to_numpy()
    kp = tree["kept_parent"].to_numpy()
    rep = tree["rep"].to_numpy()
    child = np.flatnonzero(kept & (kp >= 0))
    child = child[np.argsort(order[child], kind="stable")]
    child_sum = np.zeros(n)
    np.add.at(child_sum, rep[kp[child]], total[child])  # one by one, in torch's order (unbuffered)
    self_us = np.where(kept, total - child_sum, 0.0)
    return np.where(kept, total, 0.0), self_us, order


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
    with_flops: bool = False,
    python_function_rows: bool = True,
    torch_floats: bool = False,
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
        for device events give their own duration (`proftab.device.self_time`).
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
    with_flops
        Fill `flops` with torch's profiler estimate (`proftab.torch.flops`; `nested` then
        needs `FLOPS_COLUMNS`), as torch does for a profile taken `with_flops=True`;
        otherwise `flops` is 0.
    python_function_rows
        List the `python_function` rows (torch <= 2.13). False leaves them out of the result
        only, as torch >= 2.14's `include_python_functions=False` does: their time stays out
        of their parents' self time (unlike `include_python_functions=False` here, which gives
        it to the parent).
    torch_floats
        Add `_torch_self_cpu_us` and `_torch_cpu_total_us` (Float64): torch's own float µs sums
        (`_torch_float_times`, summed per key in torch's event order), from which
        `render_table` prints torch's text byte for byte, rounding ties included.
    """
    extra = ["input_dims"] if group_by_input_shape else []
    if group_by_stack_n > 0:
        extra += [c for c in _STACK_COLUMNS if c not in _TREE_COLUMNS]
    if with_flops:
        extra += [c for c in FLOPS_COLUMNS if c not in extra]
    tree, code_names = host_tree(nested, include_python_functions=include_python_functions, extra_columns=extra)
    n = len(tree)
    kp = tree["kept_parent"].to_numpy()
    rep = tree["rep"].to_numpy()
    depth = tree["tree_depth"].to_numpy()
    kept = tree["_kept"].to_numpy()
    dropped = None if kept.all() else ~kept  # filtered names (and profiler spans): no time of their own here

    own_dev = np.zeros(n, np.int64)
    if device_self is not None and n and not device_self.is_empty():
        pos = row_positions(tree["rank"].to_numpy(), tree["event_id"].to_numpy(), device_self["rank"].to_numpy(),
                         device_self["event_id"].to_numpy())
        hit = pos >= 0
        np.add.at(own_dev, pos[hit], device_self["self_device_ns"].to_numpy()[hit])
        if dropped is not None:
            own_dev[dropped] = 0
    dev_total = subtree_sum(own_dev, kp, depth) if own_dev.any() else own_dev
    cpu_mem, dev_mem = _memory(tree, instants)
    if dropped is not None:
        for values in (cpu_mem, dev_mem):
            if values.any():
                values[dropped] = 0
    has_p = (kp >= 0) & kept
    def child_sum(values: np.ndarray) -> np.ndarray:
        if not values.any():
            return values
        out = np.zeros(n, np.int64)
        np.add.at(out, kp[has_p], values[has_p])
        return out

    child_cpu_mem = child_sum(cpu_mem)
    child_dev_mem = child_sum(dev_mem)

    # fold merged events into their representative (merged rows are few)
    merged = tree["_merged"].to_numpy()
    mi = np.flatnonzero(merged)

    def fold(values: np.ndarray) -> np.ndarray:
        if not len(mi) or not values.any():  # all-zero columns stay the same (untouched) array
            return values
        out = values.astype(np.int64, copy=True)
        np.add.at(out, rep[mi], values[mi])
        out[mi] = 0
        return out

    # one row per host event, the tree's arrays adopted as they are (no copy, no frame filter):
    # the folded duplicates (and with `top_level_only` the nested events) get the name code
    # `_EXCLUDED`, a group of their own that is dropped after the aggregation
    top = kp < 0
    excluded = merged | ~kept | (~top if top_level_only else False)
    code = tree["name_code"].to_numpy()
    if excluded.any():
        code = np.where(excluded, _EXCLUDED, code)
    dur = tree["dur_ns"].to_numpy()
    host_cols: dict[str, object] = {
        "rank": tree["rank"].to_numpy(),
        "event_id": tree["event_id"].to_numpy(),
        "start_ns": tree["start_ns"].to_numpy(),
        "end_ns": tree["end_ns"].to_numpy(),
        "_code": code,
        "is_user_annotation": (tree["cat"] == kinds.USER_ANNOTATION).fill_null(False).to_numpy(),
        "self_cpu_ns": fold(tree["tree_self_ns"].to_numpy()),
        "cpu_total_ns": dur,
        "self_device_ns": fold(own_dev),
        "device_total_ns": dev_total,
        "cpu_mem_bytes": cpu_mem,
        "self_cpu_mem_bytes": fold(_minus(cpu_mem, child_cpu_mem)),
        "device_mem_bytes": dev_mem,
        "self_device_mem_bytes": fold(_minus(dev_mem, child_dev_mem)),
        "top_level": top,
        "_call_ns": dur,
        # a folded duplicate's FLOPs are dropped with it (torch deletes the event)
        "flops": torch_flops(tree).to_numpy() if with_flops else np.zeros(n, np.int64),
    }
    if not python_function_rows:  # after the tree: their time is in nobody's self time
        host_cols["_code"] = code = np.where((tree["cat"] == kinds.PYTHON_FRAME).fill_null(False).to_numpy(),
                                             _EXCLUDED, code)
    if torch_floats:
        host_cols["_torch_cpu_total_us"], host_cols["_torch_self_cpu_us"], host_cols["_torch_order"] = (
            _torch_float_times(tree, nested))
    for c in _SUMMED:  # an all-zero column (device time and memory of a CPU trace) is not summed: 0 per group
        column = host_cols[c]
        if isinstance(column, np.ndarray) and not column.any():
            del host_cols[c]
    host_rows = pl.DataFrame(host_cols)
    host_keys = ["_code", "is_user_annotation"]
    if group_by_input_shape:
        host_rows = host_rows.with_columns(tree.select(input_shapes_expr().alias("input_shapes")).to_series())
        host_keys.append("input_shapes")
    if group_by_stack_n > 0:
        stack = _torch_stacks(tree, group_by_stack_n)
        host_rows = host_rows.with_columns(stack)
        host_keys.append("stack")
    if group_by_overload_name:
        host_rows = host_rows.with_columns(tree.select(split_overload_expr()[1]).to_series())
        host_keys.append("overload_name")

    cat = pl.col("cat")
    dev = nested.filter(kinds.is_device())
    if device_self is not None:  # device events' own durations: annotation margin undone, never < 0
        dev = dev.join(device_self.select("rank", "event_id", pl.col("self_device_ns").alias("_dev_ns")),
                       on=["rank", "event_id"], how="left", maintain_order="left").with_columns(
            dur_ns=pl.coalesce("_dev_ns", "dur_ns"))
    dev_rows = dev.select(
        "rank", "event_id", "start_ns", "end_ns",
        torch_step_name_expr().alias("name"),
        (cat == kinds.DEVICE_ANNOTATION).alias("is_user_annotation"),
        pl.lit(0, pl.Int64).alias("self_cpu_ns"),
        pl.lit(0, pl.Int64).alias("cpu_total_ns"),
        pl.col("dur_ns").alias("self_device_ns"),
        pl.col("dur_ns").alias("device_total_ns"),
        *(pl.lit(0, pl.Int64).alias(c) for c in ("cpu_mem_bytes", "self_cpu_mem_bytes", "device_mem_bytes",
                                                   "self_device_mem_bytes")),
        pl.lit(True).alias("top_level"),
        pl.col("dur_ns").alias("_call_ns"),
        pl.lit(0, pl.Int64).alias("flops"),
    )
    if torch_floats:  # torch's device events have no CPU time
        dev_rows = dev_rows.with_columns(pl.lit(0.0).alias("_torch_cpu_total_us"), pl.lit(0.0).alias(
            "_torch_self_cpu_us"), pl.lit(0, pl.Int64).alias("_torch_order"))
    dev_keys = ["name", "is_user_annotation"]
    if group_by_input_shape:
        dev_rows = dev_rows.with_columns(input_shapes=pl.lit("[]"))
        dev_keys.append("input_shapes")
    if group_by_stack_n > 0:
        dev_rows = dev_rows.with_columns(stack=pl.lit([], pl.List(pl.String)))
        dev_keys.append("stack")
    if group_by_overload_name:
        dev_rows = dev_rows.with_columns(overload_name=pl.lit(""))
        dev_keys.append("overload_name")

    if by_step:
        windows = step_windows(nested)
        host_rows = assign_steps(host_rows, windows)
        dev_rows = assign_steps(dev_rows, windows)
        host_keys.insert(0, "step")
        dev_keys.insert(0, "step")
    # the default keys as one small int key, derived once: the first-occurrence candidates and the
    # group-by then work on one integer column, not on a row-encoded pair
    carried: list[str] = []
    if host_keys == ["_code", "is_user_annotation"]:
        host_rows = host_rows.with_columns(
            pl.Series(_GROUP, (code - _EXCLUDED) * 2 + host_rows["is_user_annotation"].to_numpy()))
        host_keys, carried = [_GROUP], host_keys
    # after every key column is there: each group (steps included) needs its own first event
    host_rows, dev_rows = _first_occurrence_order(host_rows, host_keys, dev_rows, dev_keys)

    def aggregate(rows: pl.DataFrame, keys: list[str], carried: Sequence[str] = ()) -> pl.DataFrame:
        first = pl.col("_order").arg_min()
        optional = [pl.col(c).get(first) for c in ("input_shapes", "stack", "overload_name")
                    if c in rows.columns and c not in keys]
        if torch_floats:  # torch's `+=`, one event at a time in its event order (cum_sum is sequential)
            optional += [pl.col(c).sort_by("_torch_order").cum_sum().last()
                         for c in ("_torch_cpu_total_us", "_torch_self_cpu_us")]
        return rows.group_by(keys).agg(
            *(pl.col(c).first() for c in carried),  # constant within a group
            pl.col("_order").min(),
            pl.len().cast(pl.Int64).alias("calls"),
            *(pl.col(c).sum() if c in rows.columns else pl.lit(0, pl.Int64).alias(c) for c in _SUMMED),
            pl.col("top_level").get(first),
            pl.col("_call_ns").min().alias("min_ns"),
            pl.col("_call_ns").max().alias("max_ns"),
            pl.col("_call_ns").quantile(0.5, interpolation="nearest").cast(pl.Int64).alias("p50_ns"),
            pl.col("_call_ns").quantile(0.95, interpolation="nearest").cast(pl.Int64).alias("p95_ns"),
            *optional,
        )

    host_out = aggregate(host_rows, host_keys, carried).filter(pl.col("_code") != _EXCLUDED).with_columns(
        name=pl.col("_code").replace_strict(dict(enumerate(code_names)), default=None, return_dtype=pl.String),
        device_type=pl.lit("CPU")).drop("_code", _GROUP, strict=False)
    dev_out = aggregate(dev_rows, dev_keys).with_columns(device_type=pl.lit(device_type))
    out = pl.concat([host_out, dev_out], how="diagonal_relaxed").sort("_order")
    for c, dt in (("input_shapes", pl.String), ("overload_name", pl.String)):
        if c not in out.columns:
            out = out.with_columns(pl.lit("", dt).alias(c))
    if "stack" not in out.columns:
        out = out.with_columns(pl.lit([], pl.List(pl.String)).alias("stack"))

    if wall_ns is None:
        span = nested.group_by("rank").agg((pl.col("end_ns").max() - pl.col("start_ns").min()).alias("w"))
        wall_ns = int(span["w"].sum() or 0)
    total_self = out.filter(pl.col("device_type") == "CPU")["self_cpu_ns"].sum()
    out = out.with_columns(
        cpu_avg_ns=pl.col("cpu_total_ns") / pl.col("calls"),
        device_avg_ns=pl.col("device_total_ns") / pl.col("calls"),
        is_async=pl.lit(False),
        self_cpu_share=pl.col("self_cpu_ns") / total_self if total_self else pl.lit(None, pl.Float64),
        wall_share=(pl.col("self_cpu_ns") + pl.col("self_device_ns")) / wall_ns if wall_ns else pl.lit(
            None, pl.Float64),
    )
    front = ["step"] if by_step else []
    back = ["_torch_self_cpu_us", "_torch_cpu_total_us"] if torch_floats else []
    return out.select([*front, *KEY_AVERAGES_COLUMNS, *back])
