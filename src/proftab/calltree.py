"""Call trees: events aggregated by call path, top-down and bottom-up.

A call path is the chain of names from a root event to an event, following the
`parent_id` links of `Trace.nested` (per thread; per stream for device events).
`ProfilerStep#N` is named `ProfilerStep*` (torch's rule) so that steps aggregate.

Definitions (per path node):

* ``n_calls``: events whose call path is exactly this path;
* ``self_ns``: Σ of their `self_ns` (time during which they were the innermost event);
* ``total_ns``: Σ of `self_ns` over the node's subtree, i.e. the time this path was on the
  stack. It equals Σ `dur_ns` of the events when they nest properly, and is never less than
  the sum of the children's `total_ns`; an event that outlives its parent (an overrun)
  keeps its whole time under its parent's path;
* ``dur_ns``: Σ `dur_ns` of the events (``total_ns`` without the overrun correction).

Per thread, Σ `self_ns` of the roots' subtrees is the busy time (union of the events), so
flame graphs built from these numbers add up exactly.

Complexity (n events, k path nodes, D the depth; `proftab.intervals.tree`): path ids are
hash-consed integers (`path_classes`: one pass per level below 64 levels, else ⌈log2 D⌉ + 1
prefix-doubling rounds), totals a prefix sum over the preorder and the order an Euler tour,
so `call_tree(paths=False)` is O(n log n) at any depth, a 10^5-deep chain included. The
`path` lists are the output: O(S log k) for S = Σ (depth + 1) of the kept nodes, one pass;
above `MAX_PATH_NAMES` names they are a `UsageError` (pass `max_depth` or `paths=False`).
`bottom_up` builds its k' inverted nodes with one pass per caller level kept and its paths in
one pass: O(Σ kept levels · log) plus the paths' size, under `MAX_BOTTOM_UP_NAMES` (inverted
trees are larger: a 4 MB real inference trace's holds 2.1·10^7 names, 1.8 GB at the peak).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

import numpy as np
import polars as pl

from proftab import kinds, schema
from proftab.api import register_trace_namespace
from proftab.exceptions import UsageError
from proftab.intervals.tree import (
    path_classes,
    preorder,
    root_first_paths,
    row_positions,
    subtree_sum,
    tree_depth,
)
from proftab.steps import torch_step_name_expr

if TYPE_CHECKING:
    from proftab.trace import Trace

__all__ = ["CALL_TREE_COLUMNS", "TreeNamespace", "bottom_up", "call_tree", "event_paths"]

CALL_TREE_COLUMNS = ["node_id", "parent_node_id", "depth", "name", "path", "n_calls", "self_ns", "total_ns",
                     "dur_ns", "self_share", "total_share"]


def _select(nested: pl.DataFrame, *, device: bool) -> pl.DataFrame:
    """The events of the tree: host events, plus device events when `device`."""
    keep = ~kinds.is_profiler_span()
    if not device:
        keep = keep & kinds.is_host()
    return nested.filter(keep)


def event_paths(nested: pl.DataFrame, *, device: bool = False, by_thread: bool = False,
                merge_steps: bool = True) -> pl.DataFrame:
    """The selected events with `path_id`, `parent_path_id`, `tree_depth` and the tree `name`.

    Parameters
    ----------
    nested
        `Trace.nested`.
    device
        Include device streams (their trees are separate roots: kernels, annotations).
    by_thread
        Keep threads apart: roots on different tracks are different paths.
    merge_steps
        Name `ProfilerStep#N` as `ProfilerStep*`.

    An event without a name (null) is named ``""``.
    """
    ev = _select(nested, device=device)
    name = torch_step_name_expr() if merge_steps else pl.col("name")
    ev = ev.with_columns(name.fill_null("").alias("_tname"))
    n = ev.height
    if n == 0:
        return ev.with_columns(pl.lit(None, pl.Int64).alias(c) for c in ("path_id", "parent_path_id", "tree_depth"))
    rank = ev["rank"].to_numpy()
    parent = row_positions(rank, ev["event_id"].to_numpy(), rank, ev["parent_id"].fill_null(-1).to_numpy())
    depth = tree_depth(parent)
    name_id = ev.select(pl.col("_tname").rank("dense").cast(pl.Int64) - 1).to_series().to_numpy()
    n_names = int(name_id.max()) + 1
    if by_thread:
        track = ev.select(pl.struct(schema.TRACK_KEYS).rank("dense").cast(pl.Int64) - 1).to_series().to_numpy()
    else:
        track = np.zeros(n, np.int64)
    path = path_classes(parent, track * n_names + name_id, depth)
    parent_path = np.where(parent >= 0, path[np.maximum(parent, 0)], -1)
    return ev.with_columns(
        pl.Series("path_id", path), pl.Series("parent_path_id", parent_path), pl.Series("tree_depth", depth))


#: most names the `path` lists of one call tree may hold in all (about 80 bytes each at the peak)
MAX_PATH_NAMES = 20_000_000
#: most names the `path` lists of one bottom-up tree may hold in all (and caller levels walked)
MAX_BOTTOM_UP_NAMES = 50_000_000


def _list_column(name: str, offsets: np.ndarray, values: pl.Series) -> pl.Series:
    """A List column from flat `values` cut at `offsets` (no per-row work)."""
    import pyarrow as pa

    # string views cross to arrow and back without copying the strings (a plain to_arrow copies them all)
    arr = pa.LargeListArray.from_arrays(pa.array(offsets), values.to_arrow(compat_level=pl.CompatLevel.newest()))
    return cast("pl.Series", pl.from_arrow(arr)).alias(name)


def _too_many_names(cells: int, depth: int, what: str, limit: int) -> UsageError:
    out = "" if what.startswith("bottom") else ", or paths=False to leave `path` out"
    return UsageError(
        f"the {what} is {depth + 1:,} levels deep: its paths would hold at least {cells:,} names (more than "
        f"{limit:,}); pass max_depth to keep the shallower levels{out}")


def _preorder(nodes: pl.DataFrame, weight: str, *, with_path: bool = True,
              max_depth: int | None = None) -> pl.DataFrame:
    """Sort nodes depth-first, siblings by `weight` descending then name; add `path` (root first).

    `nodes` has `node_id` (0..n-1, the row order), `parent_node_id` (-1 for roots),
    `depth`, `name` and the `weight` column. With `max_depth`, only the nodes up to that depth
    are kept (and get a path). The order is an Euler tour (O(n log n) at any depth); the paths
    cost O(S log n) for S = Σ (depth + 1) of the kept nodes, and more than `MAX_PATH_NAMES`
    is a `UsageError`.
    """
    n = nodes.height
    parent = nodes["parent_node_id"].to_numpy()
    depth = nodes["depth"].to_numpy()
    order = nodes.select(pl.arg_sort_by([pl.col(weight), pl.col("name"), pl.int_range(n)],
                                        descending=[True, False, False])).to_series().to_numpy()
    pre, _ = preorder(parent, order, depth)
    out = nodes.with_columns(pl.Series("_pre", pre))
    keep = np.arange(n) if max_depth is None else np.flatnonzero(depth <= max_depth)
    if max_depth is not None:
        out = out[keep]
    if with_path:
        cells = int(depth[keep].sum()) + len(keep)
        if cells > MAX_PATH_NAMES:
            raise _too_many_names(cells, int(depth[keep].max()), "call tree", MAX_PATH_NAMES)
        offsets, anc = root_first_paths(parent, keep, depth, pre)
        out = out.with_columns(_list_column("path", offsets, nodes["name"].gather(anc)))
    return out.sort("_pre").drop("_pre")


def _path_nodes(ev: pl.DataFrame, track_cols: list[str]) -> pl.DataFrame:
    """One row per call path (`event_paths`), in `node_id` order: `node_id`, `parent_node_id`
    (-1 for roots), `depth`, `name`, the track columns, `n_calls`, `self_ns`, `dur_ns`."""
    return (ev.group_by("path_id").agg(
        pl.col("parent_path_id").first(), pl.col("tree_depth").first().alias("depth"),
        pl.col("_tname").first().alias("name"), *(pl.col(c).first() for c in track_cols),
        pl.len().cast(pl.Int64).alias("n_calls"), pl.col("self_ns").sum(), pl.col("dur_ns").sum())
        .sort("path_id").rename({"path_id": "node_id", "parent_path_id": "parent_node_id"}))


def call_tree(nested: pl.DataFrame, *, device: bool = False, by_thread: bool = False, merge_steps: bool = True,
              max_depth: int | None = None, paths: bool = True) -> pl.DataFrame:
    """Top-down call tree: one row per call path, depth-first, heaviest sibling first.

    Parameters
    ----------
    nested
        `Trace.nested`.
    device, by_thread, merge_steps
        See `event_paths`. With `by_thread`, the track keys (`rank`, `pid`, `pid_text`,
        `tid`, `tid_text`) lead the columns.
    max_depth
        Drop nodes deeper than this (0 = roots only); totals are unchanged.
    paths
        Build the `path` lists (null when False). They hold Σ (depth + 1) names: for a tree
        deeper than a few thousand levels pass `max_depth` or ``paths=False``.

    Returns
    -------
    polars.DataFrame
        `node_id`, `parent_node_id` (null for roots), `depth`, `name`, `path` (root first),
        `n_calls`, `self_ns`, `total_ns`, `dur_ns`, `self_share` and `total_share` (of the
        Σ self of all nodes); see the module docstring.
    """
    ev = event_paths(nested, device=device, by_thread=by_thread, merge_steps=merge_steps)
    track_cols = schema.TRACK_KEYS if by_thread else []
    nodes = _path_nodes(ev, track_cols)
    if nodes.is_empty():
        return pl.DataFrame(schema={**dict.fromkeys(track_cols, pl.Int64), "node_id": pl.Int64,
                                    "parent_node_id": pl.Int64, "depth": pl.Int64, "name": pl.String,
                                    "path": pl.List(pl.String), "n_calls": pl.Int64, "self_ns": pl.Int64,
                                    "total_ns": pl.Int64, "dur_ns": pl.Int64, "self_share": pl.Float64,
                                    "total_share": pl.Float64})
    parent = nodes["parent_node_id"].to_numpy()
    total = subtree_sum(nodes["self_ns"].to_numpy(), parent, nodes["depth"].to_numpy())
    grand = int(nodes["self_ns"].sum())
    nodes = _preorder(nodes.with_columns(pl.Series("total_ns", total)), "total_ns", max_depth=max_depth,
                      with_path=paths)
    if not paths:
        nodes = nodes.with_columns(pl.lit(None, pl.List(pl.String)).alias("path"))
    def share(c: str) -> pl.Expr:
        return pl.col(c) / grand if grand else pl.lit(None, pl.Float64)
    return nodes.select(
        *track_cols, "node_id",
        pl.when(pl.col("parent_node_id") >= 0).then(pl.col("parent_node_id")).alias("parent_node_id"),
        "depth", "name", "path", "n_calls", "self_ns", "total_ns", "dur_ns",
        share("self_ns").alias("self_share"), share("total_ns").alias("total_share"))


def bottom_up(nested: pl.DataFrame, *, device: bool = False, by_thread: bool = False, merge_steps: bool = True,
              max_depth: int | None = None) -> pl.DataFrame:
    """Bottom-up (inverted) call tree: where self time is spent, then who called it.

    Roots are the names with self time; the children of a node are its callers. A node's
    ``path`` is callee first (``[op, caller, caller's caller, ...]``); its ``self_ns`` is the
    self time of ``path[0]`` when called through exactly that caller chain, and ``n_calls``
    the number of such events. The roots' `self_ns` add up to the total self time.

    Parameters
    ----------
    nested, device, by_thread, merge_steps
        See `call_tree`.
    max_depth
        Longest caller chain kept (0 = only the self-time roots). The inverted tree of a
        d-deep chain has d²/2 nodes: more than `MAX_BOTTOM_UP_NAMES` (caller levels or path
        names) is a `UsageError` naming `max_depth`.

    Returns
    -------
    polars.DataFrame
        `node_id`, `parent_node_id`, `depth`, `name` (``path[-1]``, the node's own frame),
        `function` (``path[0]``), `path`, `n_calls`, `self_ns`, `self_share`; depth-first,
        heaviest first.
    """
    ev = event_paths(nested, device=device, by_thread=by_thread, merge_steps=merge_steps)
    track_cols = schema.TRACK_KEYS if by_thread else []
    top = _path_nodes(ev, track_cols)
    empty = pl.DataFrame(schema={**dict.fromkeys(track_cols, pl.Int64), "node_id": pl.Int64,
                                 "parent_node_id": pl.Int64, "depth": pl.Int64, "name": pl.String,
                                 "function": pl.String, "path": pl.List(pl.String), "n_calls": pl.Int64,
                                 "self_ns": pl.Int64, "self_share": pl.Float64})
    leaves = np.flatnonzero(top["n_calls"].to_numpy() > 0)
    if len(leaves) == 0:
        return empty
    parent = top["parent_node_id"].to_numpy()
    depth = top["depth"].to_numpy().astype(np.int64)
    name_id = top.select(pl.col("name").rank("dense").cast(pl.Int64) - 1).to_series().to_numpy()
    n_names = int(name_id.max()) + 1
    track = (top.select(pl.struct(track_cols).rank("dense").cast(pl.Int64) - 1).to_series().to_numpy()
             if track_cols else np.zeros(top.height, np.int64))
    levels = depth[leaves] if max_depth is None else np.minimum(depth[leaves], max_depth)
    pairs = int(levels.sum()) + len(leaves)
    if pairs > MAX_BOTTOM_UP_NAMES:
        raise _too_many_names(pairs, int(levels.max()), "bottom-up tree", MAX_BOTTOM_UP_NAMES)
    calls, self_ns = top["n_calls"].to_numpy(), top["self_ns"].to_numpy()
    # level k: each leaf's chain of k callers, hash-consed as (its chain of k - 1, the k-th caller's name)
    idx = np.arange(len(leaves))  # the leaves whose chain reaches this level
    anc = leaves.copy()  # their k-th caller
    label = np.unique(track[leaves] * n_names + name_id[leaves], return_inverse=True)[1].reshape(-1)
    parts: dict[str, list[np.ndarray]] = {k: [] for k in ("parent", "depth", "leaf", "n_calls", "self")}
    first_id, prev, cells = 0, np.zeros(0, np.int64), 0
    for k in range(int(levels.max()) + 1):
        m = int(label.max()) + 1
        cells += m * (k + 1)  # the names of this level's paths: refused before they are held
        if cells > MAX_BOTTOM_UP_NAMES:
            raise _too_many_names(cells, k, "bottom-up tree", MAX_BOTTOM_UP_NAMES)
        _, rep = np.unique(label, return_index=True)
        node_calls = np.zeros(m, np.int64)
        node_self = np.zeros(m, np.int64)
        np.add.at(node_calls, label, calls[leaves[idx]])
        np.add.at(node_self, label, self_ns[leaves[idx]])
        parts["parent"].append(prev[rep] if k else np.full(m, -1, np.int64))
        parts["depth"].append(np.full(m, k, np.int64))
        parts["leaf"].append(leaves[idx[rep]])
        parts["n_calls"].append(node_calls)
        parts["self"].append(node_self)
        ids = first_id + label
        first_id += m
        more = levels[idx] > k
        idx, ids, anc = idx[more], ids[more], parent[anc[more]]
        if not len(idx):
            break
        label = np.unique(ids * n_names + name_id[anc], return_inverse=True)[1].reshape(-1)
        prev = ids
    b_parent, b_depth, b_leaf = (np.concatenate(parts[c]) for c in ("parent", "depth", "leaf"))
    offsets, chain = root_first_paths(parent, b_leaf, depth, levels=b_depth + 1)
    item = np.repeat(np.arange(len(b_leaf)), b_depth + 1)
    flip = offsets[:-1][item] + offsets[1:][item] - 1 - np.arange(len(chain))  # callee first
    names = top["name"]
    bu = pl.DataFrame([*(top[c].gather(b_leaf) for c in track_cols),
                       pl.Series("node_id", np.arange(len(b_leaf), dtype=np.int64))]).with_columns(
        pl.Series("parent_node_id", b_parent),
        pl.Series("depth", b_depth), names.gather(chain[offsets[:-1]]).alias("name"),
        names.gather(b_leaf).alias("function"), _list_column("path", offsets, names.gather(chain[flip])),
        pl.Series("n_calls", np.concatenate(parts["n_calls"])), pl.Series("self_ns", np.concatenate(parts["self"])))
    grand = int(self_ns.sum())
    return _preorder(bu, "self_ns", with_path=False).select(
        *track_cols, "node_id",
        pl.when(pl.col("parent_node_id") >= 0).then(pl.col("parent_node_id")).alias("parent_node_id"),
        "depth", "name", "function", "path", "n_calls", "self_ns",
        (pl.col("self_ns") / grand if grand else pl.lit(None, pl.Float64)).alias("self_share"))


@register_trace_namespace("tree")
class TreeNamespace:
    """`tr.tree`: call trees of a Trace (`call_tree`, `bottom_up` over its `nested` table)."""

    def __init__(self, trace: Trace) -> None:
        self._trace = trace

    def call_tree(self, *, device: bool = False, by_thread: bool = False, merge_steps: bool = True,
                  max_depth: int | None = None, paths: bool = True) -> pl.DataFrame:
        """Top-down call tree: per call path `n_calls`, `self_ns`, `total_ns` (`call_tree`)."""
        return call_tree(self._trace.collect("nested"), device=device, by_thread=by_thread, merge_steps=merge_steps,
                         max_depth=max_depth, paths=paths)

    def bottom_up(self, *, device: bool = False, by_thread: bool = False, merge_steps: bool = True,
                  max_depth: int | None = None) -> pl.DataFrame:
        """Inverted call tree: self time per op, then per caller chain (`bottom_up`)."""
        return bottom_up(self._trace.collect("nested"), device=device, by_thread=by_thread, merge_steps=merge_steps,
                         max_depth=max_depth)
