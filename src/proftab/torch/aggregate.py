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

The stages, in order: the keys and torch's tree (`proftab.torch.grouping`, stacks in
`proftab.torch.stacks`), the measures per event and per key (`proftab.torch.measures`, over
the columns declared in `proftab.torch.columns`), and torch's float µs sums beside the exact
ones (`proftab.torch.floats`).
"""

from __future__ import annotations

import numpy as np
import polars as pl

from proftab import kinds
from proftab.steps import assign_steps, step_windows
from proftab.torch import floats
from proftab.torch.columns import KEY_AVERAGES_COLUMNS, STEP, TORCH_FLOAT_COLUMNS
from proftab.torch.grouping import (
    EXCLUDED,
    GROUP,
    OVERLOAD_NAME_RE,
    TREE_COLUMNS,
    first_occurrence_order,
    host_tree,
    input_shapes_expr,
    input_shapes_list_expr,
    split_overload_expr,
    torch_name_expr,
)
from proftab.torch.measures import CALL_NS, derived_columns, device_measures, group_aggregations, host_measures
from proftab.torch.stacks import EVALUATE_FUNCTION_PREFIX, STACK_COLUMNS, TORCH_FILTERED_STACK_ENTRIES, torch_stacks

__all__ = ["EVALUATE_FUNCTION_PREFIX", "FLOPS_COLUMNS", "KEY_AVERAGES_COLUMNS", "NESTED_COLUMNS", "OVERLOAD_NAME_RE",
           "TORCH_FILTERED_STACK_ENTRIES", "host_tree", "input_shapes_expr", "input_shapes_list_expr", "key_averages",
           "split_overload_expr", "torch_name_expr"]

#: the columns of `Trace.nested` that `key_averages` reads (a Parquet scan reads only these)
NESTED_COLUMNS = (*TREE_COLUMNS, "depth", "input_dims", *STACK_COLUMNS)
#: the further columns read for torch's FLOPs (`with_flops=True`)
FLOPS_COLUMNS = ("input_dims", "input_type", "concrete_inputs")
#: the optional key columns: the value of every row of a table not grouped on one
_NO_KEY_VALUE = {"input_shapes": pl.lit("", pl.String), "overload_name": pl.lit("", pl.String),
                 "stack": pl.lit([], pl.List(pl.String))}
#: the optional key columns: the value of a device row (torch's device events have no shapes, stack, overload)
_DEVICE_KEY_VALUE = {"input_shapes": pl.lit("[]"), "overload_name": pl.lit(""), "stack": pl.lit([], pl.List(pl.String))}


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
        (`proftab.torch.floats`, summed per key in torch's event order), from which
        `render_table` prints torch's text byte for byte, rounding ties included.

    Returns
    -------
    pl.DataFrame
        One row per key, in torch's first-occurrence order, with the columns declared in
        `proftab.torch.columns` (`step` first with `by_step`, torch's floats last with
        `torch_floats`).
    """
    extra = ["input_dims"] if group_by_input_shape else []
    if group_by_stack_n > 0:
        extra += [c for c in STACK_COLUMNS if c not in TREE_COLUMNS]
    if with_flops:
        extra += [c for c in FLOPS_COLUMNS if c not in extra]
    tree, code_names = host_tree(nested, include_python_functions=include_python_functions, extra_columns=extra)
    host_rows = _host_rows(tree, nested, instants, device_self, top_level_only=top_level_only, with_flops=with_flops,
                           python_function_rows=python_function_rows, torch_floats=torch_floats)
    dev_rows = _device_rows(nested, device_self, torch_floats=torch_floats)
    optional = [key for key, on in (("input_shapes", group_by_input_shape), ("stack", group_by_stack_n > 0),
                                    ("overload_name", group_by_overload_name)) if on]
    out = _aggregated(tree, code_names, host_rows, dev_rows, optional, group_by_stack_n=group_by_stack_n,
                      steps=step_windows(nested) if by_step else None, device_type=device_type,
                      torch_floats=torch_floats)
    if wall_ns is None:
        span = nested.group_by("rank").agg((pl.col("end_ns").max() - pl.col("start_ns").min()).alias("w"))
        wall_ns = int(span["w"].sum() or 0)
    front = [STEP.name] if by_step else []
    back = list(TORCH_FLOAT_COLUMNS) if torch_floats else []
    return derived_columns(out, wall_ns).select([*front, *KEY_AVERAGES_COLUMNS, *back])


def _aggregated(tree: pl.DataFrame, code_names: list[str | None], host_rows: pl.DataFrame, dev_rows: pl.DataFrame,
                optional: list[str], *, group_by_stack_n: int, steps: pl.DataFrame | None, device_type: str,
                torch_floats: bool) -> pl.DataFrame:
    """One row per key of the host and the device rows, in torch's first-occurrence order.

    Host rows are keyed on (name code, user annotation), device rows on (name, user
    annotation); then on the `optional` keys (`input_shapes`, `stack`, `overload_name`: a device
    row has none), and first on the step (`steps`: `proftab.steps.step_windows`) when given.
    """
    host_keys = ["_code", "is_user_annotation"]
    dev_keys = ["name", "is_user_annotation"]
    for key in optional:
        host_rows = host_rows.with_columns(_host_key(tree, key, group_by_stack_n))
        dev_rows = dev_rows.with_columns(_DEVICE_KEY_VALUE[key].alias(key))
        host_keys.append(key)
        dev_keys.append(key)
    if steps is not None:
        host_rows = assign_steps(host_rows, steps)
        dev_rows = assign_steps(dev_rows, steps)
        host_keys.insert(0, STEP.name)
        dev_keys.insert(0, STEP.name)
    # the default keys as one small int key, derived once: the first-occurrence candidates and the
    # group-by then work on one integer column, not on a row-encoded pair
    carried: list[str] = []
    if host_keys == ["_code", "is_user_annotation"]:
        code, user = host_rows["_code"].to_numpy(), host_rows["is_user_annotation"].to_numpy()
        host_rows = host_rows.with_columns(pl.Series(GROUP, (code - EXCLUDED) * 2 + user))
        host_keys, carried = [GROUP], host_keys
    # after every key column is there: each group (steps included) needs its own first event
    host_rows, dev_rows = first_occurrence_order(host_rows, host_keys, dev_rows, dev_keys)

    host_out = group_aggregations(host_rows, host_keys, carried, torch_floats=torch_floats).filter(
        pl.col("_code") != EXCLUDED).with_columns(
        name=pl.col("_code").replace_strict(dict(enumerate(code_names)), default=None, return_dtype=pl.String),
        device_type=pl.lit("CPU")).drop("_code", GROUP, strict=False)
    dev_out = group_aggregations(dev_rows, dev_keys, torch_floats=torch_floats).with_columns(
        device_type=pl.lit(device_type))
    out = pl.concat([host_out, dev_out], how="diagonal_relaxed").sort("_order")
    return out.with_columns(value.alias(c) for c, value in _NO_KEY_VALUE.items() if c not in out.columns)


def _host_rows(tree: pl.DataFrame, nested: pl.DataFrame, instants: pl.DataFrame, device_self: pl.DataFrame | None, *,
               top_level_only: bool, with_flops: bool, python_function_rows: bool, torch_floats: bool) -> pl.DataFrame:
    """One row per host event of `tree`: its keys, first-occurrence sort keys and measures.

    The tree's arrays are adopted as they are (no copy, no frame filter): the folded duplicates
    (with `top_level_only` the nested events; without `python_function_rows` the Python frames)
    get the name code `EXCLUDED`, a group of their own that is dropped after the aggregation.
    An all-zero summed column (device time and memory of a CPU trace) is left out: 0 per key.
    """
    top = tree["kept_parent"].to_numpy() < 0
    excluded = tree["_merged"].to_numpy() | ~tree["_kept"].to_numpy() | (~top if top_level_only else False)
    code = tree["name_code"].to_numpy()
    if excluded.any():
        code = np.where(excluded, EXCLUDED, code)
    if not python_function_rows:  # after the tree: their time is in nobody's self time
        code = np.where((tree["cat"] == kinds.PYTHON_FRAME).fill_null(False).to_numpy(), EXCLUDED, code)
    measures = {c: v for c, v in host_measures(tree, instants, device_self, with_flops=with_flops).items() if v.any()}
    columns: dict[str, object] = {
        "rank": tree["rank"].to_numpy(),
        "event_id": tree["event_id"].to_numpy(),
        "start_ns": tree["start_ns"].to_numpy(),
        "end_ns": tree["end_ns"].to_numpy(),
        "_code": code,
        "is_user_annotation": (tree["cat"] == kinds.USER_ANNOTATION).fill_null(False).to_numpy(),
        **measures,
        "top_level": top,
        CALL_NS: tree["dur_ns"].to_numpy(),
    }
    if torch_floats:
        columns |= floats.host_float_columns(tree, nested)
    return pl.DataFrame(columns)


def _host_key(tree: pl.DataFrame, key: str, group_by_stack_n: int) -> pl.Series:
    """The optional key `key` (`input_shapes`, `stack` or `overload_name`) of each row of `tree`."""
    if key == "input_shapes":
        return tree.select(input_shapes_expr().alias("input_shapes")).to_series()
    if key == "stack":
        return torch_stacks(tree, group_by_stack_n)
    return tree.select(split_overload_expr()[1]).to_series()


def _device_rows(nested: pl.DataFrame, device_self: pl.DataFrame | None, *, torch_floats: bool) -> pl.DataFrame:
    """One row per device activity of `nested`: its keys, first-occurrence sort keys and measures.

    A device row's time is its own duration (with `device_self`: the annotation margin undone,
    never < 0); torch keys it on its grouping name and user-annotation flag.
    """
    dev = nested.filter(kinds.is_device())
    if device_self is not None:  # device events' own durations: annotation margin undone, never < 0
        dev = dev.join(device_self.select("rank", "event_id", pl.col("self_device_ns").alias("_dev_ns")),
                       on=["rank", "event_id"], how="left", maintain_order="left").with_columns(
            dur_ns=pl.coalesce("_dev_ns", "dur_ns"))
    dev_rows = dev.select(
        "rank", "event_id", "start_ns", "end_ns",
        torch_name_expr().alias("name"),
        (pl.col("cat") == kinds.DEVICE_ANNOTATION).alias("is_user_annotation"),
        *device_measures(),
        pl.lit(True).alias("top_level"),
        pl.col("dur_ns").alias(CALL_NS),
    )
    return dev_rows.with_columns(floats.device_float_columns()) if torch_floats else dev_rows
