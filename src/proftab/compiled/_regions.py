"""Where a compiled event runs: its `Torch-Compiled Region`, graph call and graph (forward / backward).

torch.compile leaves three kinds of marks in a trace: the `Torch-Compiled Region: <frame>/<compile>`
op around every call of a compiled frame, the `## Call CompiledFxGraph <hash> ##` annotation around
each run of an Inductor graph, and AOTAutograd's `CompiledFunction` (forward) and
`CompiledFunctionBackward` (backward) autograd ops. This module finds, for any row of `nested`, the
nearest of each above it and links a backward op to its forward's compile id (docs/compiled.md,
"Backward graphs").
"""

from __future__ import annotations

import numpy as np
import polars as pl

from proftab import kinds
from proftab.intervals.tree import nearest_ancestor, row_positions

__all__ = ["BACKWARD_FN", "CALL_PREFIX", "COMPILE_ID_RE", "FORWARD_FN", "REGION_PREFIX", "anchor_graphs",
           "backward_compile_ids", "backward_compiled_ops", "graph_calls", "parent_rows", "nearest_above",
           "take_rows"]

CALL_PREFIX = "## Call CompiledFxGraph"
REGION_PREFIX = "Torch-Compiled Region"
#: AOTAutograd's autograd.Function: its forward op runs the forward graph, its backward node the backward graph
FORWARD_FN = "CompiledFunction"
BACKWARD_FN = "CompiledFunctionBackward"
#: a compile id in an event name (`dynamo_data: compile_id=0/1`): the compile happened inside the trace
COMPILE_ID_RE = r"compile_id=(\d+/\d+)"


def take_rows(values: pl.Series, rows: np.ndarray, name: str) -> pl.Series:
    """`values` at row positions `rows`, null where a row is -1 (vectorized)."""
    if not len(rows):
        return pl.Series(name, [], values.dtype)
    got = values.gather(np.maximum(rows, 0)).alias(name)
    return pl.select(pl.when(pl.Series(rows >= 0)).then(got)).to_series().alias(name)


def parent_rows(n: pl.DataFrame) -> np.ndarray:
    """The row of each row's parent in `n` (rank, event_id, parent_id), -1 for a root."""
    rank = n["rank"].to_numpy()
    return row_positions(rank, n["event_id"].to_numpy(), rank, n["parent_id"].fill_null(-1).to_numpy())


def nearest_above(parents: np.ndarray, start: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """For rows `start` (-1: none), the nearest row above each where `mask` holds (-1: none)."""
    out = np.full(len(start), -1, np.int64)
    ok = start >= 0
    out[ok] = nearest_ancestor(parents, start[ok], mask)
    return out


def backward_compile_ids(n: pl.DataFrame, parents: np.ndarray, is_region: np.ndarray) -> pl.DataFrame:
    """Each `CompiledFunctionBackward` op (rank, event_id) and the compile id of its forward.

    The backward node runs outside any `Torch-Compiled Region`; it is linked to the forward
    `CompiledFunction` op with the same rank and sequence number that started last before it
    (autograd gives a node the sequence number of the op that created it; as
    `proftab.modules` links eager backward ops), whose enclosing region names the compile id.
    Sort + as-of join: O(n log n).
    """
    empty = pl.DataFrame(schema={"rank": pl.Int32, "event_id": pl.Int64, "_bwd_cid": pl.String})
    if "sequence_number" not in n.columns:
        return empty
    names = n["name"]
    fwd_rows = np.flatnonzero((names == FORWARD_FN).to_numpy())
    bwd_rows = np.flatnonzero((names == BACKWARD_FN).to_numpy())
    if not len(fwd_rows) or not len(bwd_rows):
        return empty
    up = nearest_ancestor(parents, fwd_rows, is_region)
    fwd = n[fwd_rows].select("rank", "sequence_number", "start_ns").with_columns(
        take_rows(names, up, "_region").str.extract(r"(\d+/\d+)", 1).alias("_bwd_cid")).drop_nulls(
        "sequence_number").sort("start_ns")
    bwd = n[bwd_rows].select("rank", "event_id", "sequence_number", "start_ns").drop_nulls("sequence_number").sort(
        "start_ns")
    return bwd.join_asof(fwd, on="start_ns", by=["rank", "sequence_number"], strategy="backward",
                         check_sortedness=False).select(  # both sorted by start_ns, so within every group too
        "rank", "event_id", "_bwd_cid")


def backward_compiled_ops(nested: pl.DataFrame) -> pl.Series:
    """(rank, event_id) structs of the `CompiledFunctionBackward` ops linked to a compile id."""
    empty = pl.Series("ops", [], pl.Struct({"rank": pl.Int32, "event_id": pl.Int64}))
    if "sequence_number" not in nested.columns or not (nested["name"] == BACKWARD_FN).any():
        return empty
    links = backward_compile_ids(nested, parent_rows(nested),
                                 nested["name"].str.starts_with(REGION_PREFIX).to_numpy())
    return links.filter(pl.col("_bwd_cid").is_not_null()).select(pl.struct("rank", "event_id")).to_series()


def anchor_graphs(n: pl.DataFrame, parents: np.ndarray, start: np.ndarray) -> pl.DataFrame:
    """For rows `start` (-1: none) of `n`: `compile_id` and `graph` ("forward" / "backward" / null).

    A row under a `CompiledFunctionBackward` op is backward, with its forward's compile id
    (`backward_compile_ids`); else a row under a `Torch-Compiled Region` (or an AOTAutograd
    `CompiledFunction`) is forward, with the region's compile id; else both are null.
    """
    if not len(start):  # (no rows: `parents` may not have been built)
        return pl.DataFrame(schema={"compile_id": pl.String, "graph": pl.String})
    names = n["name"]
    is_region = names.str.starts_with(REGION_PREFIX).to_numpy()
    is_bwd = (names == BACKWARD_FN).to_numpy()
    is_fwd = is_region | (names == FORWARD_FN).to_numpy()
    region_row, bwd_row, fwd_row = (nearest_above(parents, start, m) for m in (is_region, is_bwd, is_fwd))
    frame = pl.DataFrame({"_i": np.arange(len(start)), "_region": take_rows(names, region_row, "_region"),
                          "rank": take_rows(n["rank"], bwd_row, "rank"),
                          "event_id": take_rows(n["event_id"], bwd_row, "e")})
    links = backward_compile_ids(n, parents, is_region) if is_bwd.any() else None
    if links is not None and links.height:
        frame = frame.join(links, on=["rank", "event_id"], how="left", maintain_order="left")
    else:
        frame = frame.with_columns(_bwd_cid=pl.lit(None, pl.String))
    back = pl.Series(bwd_row >= 0)
    return frame.sort("_i").select(
        compile_id=pl.when(back).then("_bwd_cid").otherwise(pl.col("_region").str.extract(r"(\d+/\d+)", 1)),
        graph=pl.when(back).then(pl.lit("backward")).when(pl.Series(fwd_row >= 0)).then(pl.lit("forward")))


def graph_calls(nested: pl.DataFrame) -> pl.DataFrame:
    """The `## Call CompiledFxGraph ##` annotations with the compile id and graph they run (`anchor_graphs`)."""
    n = nested
    calls = n.filter(pl.col("name").str.starts_with(CALL_PREFIX) & kinds.is_user_annotation()).select(
        "rank", "event_id")
    if not calls.height:
        return calls.with_columns(compile_id=pl.lit(None, pl.String), graph=pl.lit(None, pl.String))
    parents = parent_rows(n)
    starts = row_positions(n["rank"].to_numpy(), n["event_id"].to_numpy(), calls["rank"].to_numpy(),
                           calls["event_id"].to_numpy())
    return pl.concat([calls, anchor_graphs(n, parents, starts)], how="horizontal")
