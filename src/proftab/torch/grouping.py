"""torch's grouping of key_averages: the keys of an event and the tree they are folded on.

The first stage of `proftab.torch.aggregate.key_averages`. An event's key is torch's grouping
name (`ProfilerStep#N` -> `ProfilerStep*`; an op's base name without its ATen overload), its
user-annotation flag and, with torch's options, its input shapes (`input_shapes_expr`), overload
(`split_overload_expr`) and stack (`proftab.torch.stacks`). The host events are folded on
torch's tree (`host_tree`: filtered names give their time to their kept ancestor, an only child
with its parent's name is folded into it), and every key's rows are listed in torch's
first-occurrence order (`first_occurrence_order`).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl

from proftab import kinds, schema
from proftab.intervals.tree import containing_ancestor, depth_levels, row_positions, tree_depth
from proftab.steps import torch_step_name, torch_step_name_expr

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["EXCLUDED", "GROUP", "OVERLOAD_NAME_RE", "TREE_COLUMNS", "first_occurrence_order", "host_tree",
           "input_shapes_expr", "input_shapes_list_expr", "split_overload_expr", "torch_name_expr"]

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


#: torch's grouping name: `ProfilerStep#N` -> `ProfilerStep*` (the rule is `proftab.steps`')
torch_name_expr = torch_step_name_expr



#: the columns of `Trace.nested` that `host_tree` reads
TREE_COLUMNS = ("rank", "event_id", "pid", "cat", "name", "start_ns", "end_ns", "dur_ns", "parent_id", "self_ns")


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



#: `host_tree` keeps non-host rows in (as dropped rows) when at most 1 row in this many is one
_FEW_OTHER_ROWS = 100


def _levels(rows: np.ndarray, depth: np.ndarray) -> list[np.ndarray]:
    """`rows` grouped by their `depth`, shallowest first (a radix sort of only those rows)."""
    return [rows[sel] for sel in depth_levels(depth[rows])] if len(rows) else []


def host_tree(nested: pl.DataFrame, *, include_python_functions: bool = True,
              extra_columns: Sequence[str] = ()) -> tuple[pl.DataFrame, list[str | None]]:
    """The host events torch builds its tree from, with torch's parent links.

    Returns rows (columns `TREE_COLUMNS` + `extra_columns`) with `_kept` (a host event torch
    keeps: the other rows are filtered names, and the few non-host rows when there are few),
    `kept_parent` (row position of the nearest kept ancestor that contains the event, -1 for
    roots), `tree_self_ns` (own self + filtered descendants' self), `rep` (row position of the
    event it is folded into by `_remove_dup_nodes`, itself if none), `name_code` (torch's
    grouping name as an index into the returned list of names) and `tree_depth`. Rows that are
    not `_kept` hold no kept event's time and are nobody's `kept_parent`; the caller skips them.
    """
    host, names, dropped_np, code_names = _host_rows(nested, include_python_functions, extra_columns)
    parent, depth = _containing_parents(host)
    self_ns = host["self_ns"].to_numpy()
    # row positions fit int32
    pos_type = np.int32 if len(host) < 2**31 else np.int64
    kept_parent: np.ndarray[Any, np.dtype[np.signedinteger[Any]]] = parent.astype(pos_type)
    del parent
    tree_self = _lift_dropped(kept_parent, dropped_np, depth, self_ns)
    rep, merge = _fold_only_children(kept_parent, ~dropped_np, names, depth, pos_type)
    # the dropped rows stay (no frame-wide filter): `_kept` marks the others
    out = host.with_columns(
        pl.Series("_kept", ~dropped_np),
        pl.Series("kept_parent", kept_parent),
        pl.Series("tree_self_ns", tree_self),
        pl.Series("rep", rep),
        pl.Series("_merged", merge),
        pl.Series("tree_depth", depth),
        pl.Series("name_code", names),
    )
    return out, code_names


def _host_rows(nested: pl.DataFrame, include_python_functions: bool, extra_columns: Sequence[str]
               ) -> tuple[pl.DataFrame, np.ndarray, np.ndarray, list[str | None]]:
    """The rows of `host_tree`, their name codes, which are dropped (filtered names, non-host rows
    and, without `include_python_functions`, Python frames) and the code -> name list."""
    frame = nested.select([*TREE_COLUMNS, "depth", *extra_columns])
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
    return host, names, dropped_np, code_names


def _containing_parents(host: pl.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Per row the row position of its nearest ancestor that contains it (-1 for roots), and its depth."""
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
    return contained, depth


def _lift_dropped(kept_parent: np.ndarray, dropped_np: np.ndarray, depth: np.ndarray, self_ns: np.ndarray
                  ) -> np.ndarray:
    """Point `kept_parent` (in place) past dropped rows to the nearest kept ancestor; return the
    self times with each dropped row's self time given to that ancestor (torch's filtered names)."""
    # nearest kept ancestor, top-down (a parent is always shallower)
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
        return tree_self
    return self_ns


def _fold_only_children(kept_parent: np.ndarray, keep: np.ndarray, names: np.ndarray, depth: np.ndarray,
                        pos_type: type[np.signedinteger[Any]]) -> tuple[np.ndarray, np.ndarray]:
    """torch's `_remove_dup_nodes`: fold an only child with the parent's name into the parent.

    Returns per row the row position it is folded into (itself if none) and whether it is folded.
    """
    n = len(kept_parent)
    has_kp = kept_parent >= 0
    only_child = np.bincount(kept_parent[keep & has_kp], minlength=n) == 1
    kp = np.maximum(kept_parent, 0)
    merge = keep & has_kp & only_child[kp] & (names[kp] == names)
    del only_child
    rep = np.arange(n, dtype=pos_type)
    if merge.any():  # shallowest first: a merged parent already holds its representative
        for m in _levels(np.flatnonzero(merge), depth):
            rep[m] = rep[kept_parent[m]]
    return rep, merge


#: the name code of host rows that are not counted (folded duplicates; nested rows for `top_level_only`)
EXCLUDED = -1

#: the default host keys (name code, user annotation) as one non-negative int32 column
GROUP = "_group"

#: `_order` of the rows that cannot be the first of their group
_NOT_FIRST = 2**31 - 1  # positions among the sorted candidates (about one per group) are below it


def first_occurrence_order(host: pl.DataFrame, host_keys: list[str], dev: pl.DataFrame, dev_keys: list[str]
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
        if keys == [GROUP] and len(rows):  # one small non-negative integer key: the earliest start per group
            group = rows[GROUP].to_numpy()
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

