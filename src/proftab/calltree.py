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
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import polars as pl

from proftab import kinds, schema
from proftab.api import register_trace_namespace
from proftab.exceptions import UsageError
from proftab.intervals.tree import depth_levels, row_positions, subtree_sum, tree_depth
from proftab.torch.aggregate import torch_name_expr

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
    name = torch_name_expr() if merge_steps else pl.col("name")
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
    path = np.full(n, -1, np.int64)
    next_id = 0
    for rows in depth_levels(depth):
        head = np.where(parent[rows] >= 0, path[np.maximum(parent[rows], 0)], track[rows])
        combo = head * n_names + name_id[rows]
        uniq, inv = np.unique(combo, return_inverse=True)
        path[rows] = next_id + inv
        next_id += len(uniq)
    parent_path = np.where(parent >= 0, path[np.maximum(parent, 0)], -1)
    return ev.with_columns(
        pl.Series("path_id", path), pl.Series("parent_path_id", parent_path), pl.Series("tree_depth", depth))


#: largest (nodes x levels) frame the `path` lists of one call tree are built from
MAX_PATH_NAMES = 20_000_000


def _preorder(nodes: pl.DataFrame, weight: str, *, with_path: bool = True,
              max_depth: int | None = None) -> pl.DataFrame:
    """Sort nodes depth-first, siblings by `weight` descending then name; add `path` (root first).

    `nodes` has `node_id` (0..n-1, the row order), `parent_node_id` (-1 for roots),
    `depth`, `name` and the `weight` column. With `max_depth`, only the nodes up to that depth
    are kept (and get a path): the paths cost O(kept nodes x their depth), and more than
    `MAX_PATH_NAMES` is a `UsageError` naming `max_depth`.
    """
    n = nodes.height
    parent = nodes["parent_node_id"].to_numpy()
    depth = nodes["depth"].to_numpy()
    size = subtree_sum(np.ones(n, np.int64), parent, depth)
    # offset of each node among its siblings = Σ sizes of the heavier siblings before it
    off = (nodes.select("parent_node_id", pl.col(weight).neg().alias("_w"), "name",
                        pl.Series("_size", size), pl.int_range(n).alias("_i"))
           .sort(["parent_node_id", "_w", "name", "_i"])
           .with_columns((pl.col("_size").cum_sum().over("parent_node_id") - pl.col("_size")).alias("_off"))
           .sort("_i")["_off"].to_numpy())
    pre = np.zeros(n, np.int64)
    for rows in depth_levels(depth):
        p = parent[rows]
        pre[rows] = np.where(p >= 0, pre[np.maximum(p, 0)] + 1, 0) + off[rows]
    out = nodes.with_columns(pl.Series("_pre", pre))
    keep = np.arange(n) if max_depth is None else np.flatnonzero(depth <= max_depth)
    if max_depth is not None:
        out = out[keep]
    if with_path:
        cells = len(keep) * (int(depth[keep].max(initial=0)) + 1)  # the frame the paths are built from
        if cells > MAX_PATH_NAMES:
            msg = (f"the call tree is {int(depth.max()) + 1} levels deep: its paths would hold {cells:,} names "
                   f"(more than {MAX_PATH_NAMES:,}); pass max_depth to keep the shallower levels")
            raise UsageError(msg)
        names = nodes["name"]
        cols = []
        anc = keep.copy()
        while (anc >= 0).any():
            cols.append(names.gather(np.maximum(anc, 0)).set(pl.Series(anc < 0), None))
            anc = np.where(anc >= 0, parent[np.maximum(anc, 0)], -1)
        frame = pl.DataFrame({f"_a{i}": c for i, c in enumerate(reversed(cols))})
        path = frame.select(pl.concat_list(pl.all()).list.drop_nulls().alias("path"))["path"]
        out = out.with_columns(path)
    return out.sort("_pre").drop("_pre")


def call_tree(nested: pl.DataFrame, *, device: bool = False, by_thread: bool = False, merge_steps: bool = True,
              max_depth: int | None = None) -> pl.DataFrame:
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

    Returns
    -------
    polars.DataFrame
        `node_id`, `parent_node_id` (null for roots), `depth`, `name`, `path` (root first),
        `n_calls`, `self_ns`, `total_ns`, `dur_ns`, `self_share` and `total_share` (of the
        Σ self of all nodes); see the module docstring.
    """
    ev = event_paths(nested, device=device, by_thread=by_thread, merge_steps=merge_steps)
    track_cols = schema.TRACK_KEYS if by_thread else []
    nodes = (ev.group_by("path_id").agg(
        pl.col("parent_path_id").first(), pl.col("tree_depth").first().alias("depth"),
        pl.col("_tname").first().alias("name"), *(pl.col(c).first() for c in track_cols),
        pl.len().cast(pl.Int64).alias("n_calls"), pl.col("self_ns").sum(), pl.col("dur_ns").sum())
        .sort("path_id"))
    if nodes.is_empty():
        return pl.DataFrame(schema={**dict.fromkeys(track_cols, pl.Int64), "node_id": pl.Int64,
                                    "parent_node_id": pl.Int64, "depth": pl.Int64, "name": pl.String,
                                    "path": pl.List(pl.String), "n_calls": pl.Int64, "self_ns": pl.Int64,
                                    "total_ns": pl.Int64, "dur_ns": pl.Int64, "self_share": pl.Float64,
                                    "total_share": pl.Float64})
    parent = nodes["parent_path_id"].to_numpy()
    depth = nodes["depth"].to_numpy()
    total = subtree_sum(nodes["self_ns"].to_numpy(), parent, depth)
    grand = int(nodes["self_ns"].sum())
    nodes = nodes.with_columns(pl.Series("total_ns", total)).rename(
        {"path_id": "node_id", "parent_path_id": "parent_node_id"})
    nodes = _preorder(nodes, "total_ns", max_depth=max_depth)
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
        Longest caller chain kept (0 = only the self-time roots).

    Returns
    -------
    polars.DataFrame
        `node_id`, `parent_node_id`, `depth`, `name` (``path[-1]``, the node's own frame),
        `function` (``path[0]``), `path`, `n_calls`, `self_ns`, `self_share`; depth-first,
        heaviest first.
    """
    top = call_tree(nested, device=device, by_thread=by_thread, merge_steps=merge_steps)
    track_cols = schema.TRACK_KEYS if by_thread else []
    empty = pl.DataFrame(schema={**dict.fromkeys(track_cols, pl.Int64), "node_id": pl.Int64,
                                 "parent_node_id": pl.Int64, "depth": pl.Int64, "name": pl.String,
                                 "function": pl.String, "path": pl.List(pl.String), "n_calls": pl.Int64,
                                 "self_ns": pl.Int64, "self_share": pl.Float64})
    leaf = top.filter(pl.col("n_calls") > 0).select(
        *track_cols, pl.col("path").list.reverse().alias("_rev"), "n_calls", "self_ns")
    if leaf.is_empty():
        return empty
    limit = pl.col("_rev").list.len() if max_depth is None else pl.min_horizontal(
        pl.col("_rev").list.len(), pl.lit(max_depth + 1))
    pref = (leaf.with_columns(pl.int_ranges(1, limit + 1).alias("_k")).explode("_k")
            .with_columns(pl.col("_rev").list.head(pl.col("_k")).alias("path"))
            .group_by(*track_cols, "path", maintain_order=True)
            .agg(pl.col("n_calls").sum(), pl.col("self_ns").sum()))
    pref = pref.with_columns(depth=pl.col("path").list.len().cast(pl.Int64) - 1,
                             name=pl.col("path").list.last(), function=pl.col("path").list.first())
    pref = pref.with_row_index("node_id").with_columns(pl.col("node_id").cast(pl.Int64))
    parents = pref.select(*track_cols, pl.col("path").alias("_ppath"), pl.col("node_id").alias("parent_node_id"))
    pref = pref.with_columns(
        pl.when(pl.col("depth") > 0).then(pl.col("path").list.head(pl.col("depth"))).alias("_ppath"))
    pref = pref.join(parents, on=[*track_cols, "_ppath"], how="left", nulls_equal=True).drop("_ppath")
    pref = pref.with_columns(pl.col("parent_node_id").fill_null(-1))
    grand = int(top["self_ns"].sum())
    out = _preorder(pref, "self_ns", with_path=False)
    return out.select(
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
                  max_depth: int | None = None) -> pl.DataFrame:
        """Top-down call tree: per call path `calls`, `self_ns`, `total_ns` (`call_tree`)."""
        return call_tree(self._trace.collect("nested"), device=device, by_thread=by_thread, merge_steps=merge_steps,
                         max_depth=max_depth)

    def bottom_up(self, *, device: bool = False, by_thread: bool = False, merge_steps: bool = True,
                  max_depth: int | None = None) -> pl.DataFrame:
        """Inverted call tree: self time per op, then per caller chain (`bottom_up`)."""
        return bottom_up(self._trace.collect("nested"), device=device, by_thread=by_thread, merge_steps=merge_steps,
                         max_depth=max_depth)
