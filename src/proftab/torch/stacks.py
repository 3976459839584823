"""torch's stacks for `key_averages(group_by_stack_n=n)`: the stack key of each host event.

torch keys an event on the first `n` entries of its stack, after dropping its own profiling
frames (`TORCH_FILTERED_STACK_ENTRIES`); an op run by the autograd engine gets the stack of the
forward op it is the backward of. From a trace: the verbose `Call stack` text, else (proftab's
rule) the enclosing Python frames.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from proftab import kinds
from proftab.intervals.tree import depth_levels

__all__ = ["EVALUATE_FUNCTION_PREFIX", "STACK_COLUMNS", "TORCH_FILTERED_STACK_ENTRIES", "torch_stacks"]

#: the columns `group_by_stack_n` reads: the verbose `Call stack`, and what pairs a backward op with its forward op
STACK_COLUMNS = ("call_stack", "tid", "sequence_number", "fwd_thread_id")

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


def torch_stacks(tree: pl.DataFrame, n: int) -> pl.Series:
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
