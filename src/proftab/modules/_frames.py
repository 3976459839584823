"""Module frames, the op -> module assignment and forward <-> backward links, over frames.

Every function takes `Trace.nested` (events + `parent_id`, `depth`) and returns a new
DataFrame; docs/modules.md states the rules. Row lookups go through
`proftab.intervals.tree` (vectorized parent walks), never a per-event Python loop.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import polars as pl

from proftab import kinds
from proftab.exceptions import ProftabError
from proftab.intervals.tree import depth_levels, nearest_ancestor, row_positions, tree_depth
from proftab.kinds import MODULE_PREFIX
from proftab.steps import STEP_PREFIX

__all__ = ["FRAME_COLUMNS", "MODULE_PREFIX", "SOURCES", "assign", "backward_links", "frame_mask", "module_frames",
           "row_parents"]

#: where module frames come from: the python tracer's `nn.Module` frames, else user annotations
SOURCES = ("nn.Module", "user_annotation")
Source = Literal["auto", "nn.Module", "user_annotation"]
#: the name prefix autograd's engine gives the op that runs one backward node
EVALUATE_PREFIX = kinds.BACKWARD_OP_PREFIX

FRAME_COLUMNS = ["rank", "frame_id", "parent_frame", "depth", "path", "instance", "type", "phase", "pid", "tid",
                 "start_ns", "end_ns", "dur_ns", "self_ns"]

_NEEDED = ["rank", "event_id", "pid", "tid", "cat", "name", "start_ns", "end_ns", "dur_ns", "parent_id", "depth",
           "sequence_number", "fwd_thread_id"]


def _module_expr() -> pl.Expr:
    return kinds.is_python_frame() & pl.col("name").str.starts_with(MODULE_PREFIX)


def _annotation_expr() -> pl.Expr:
    return kinds.is_user_annotation() & ~pl.col("name").str.starts_with(STEP_PREFIX)


def frame_mask(nested: pl.DataFrame, source: Source = "auto") -> tuple[pl.Series, str | None]:
    """Which rows of `nested` are module frames, and the source used (None: no frames at all).

    `auto` takes the `nn.Module` frames when the trace has any, else the user annotations
    (`record_function` ranges other than `ProfilerStep#N`).
    """
    if source not in ("auto", *SOURCES):
        msg = f"source must be one of {['auto', *SOURCES]!r}, not {source!r}"
        raise ProftabError(msg)
    mods = nested.select(_module_expr()).to_series()
    if source == "nn.Module" or (source == "auto" and mods.any()):
        return mods, "nn.Module" if mods.any() else None
    ann = nested.select(_annotation_expr()).to_series()
    return ann, "user_annotation" if ann.any() else None


def row_parents(nested: pl.DataFrame) -> np.ndarray:
    """Row index of each row's parent in `nested` (-1 for a root)."""
    rank = nested["rank"].to_numpy()
    ids = nested["event_id"].to_numpy()
    return row_positions(rank, ids, rank, nested["parent_id"].fill_null(-1).to_numpy())


def _is_backward_node(nested: pl.DataFrame) -> np.ndarray:
    """A host op autograd runs for a backward node: it carries a sequence number and a
    forward thread id > 0 (`Fwd thread id`), or it is the engine's
    `autograd::engine::evaluate_function: ...` op (`AccumulateGrad` has no sequence number).
    """
    linked = pl.col("sequence_number").is_not_null() & (pl.col("fwd_thread_id") > 0).fill_null(False)
    return nested.select(
        kinds.is_host_op() & (linked | pl.col("name").str.starts_with(EVALUATE_PREFIX))
    ).to_series().to_numpy()


def _is_forward_op(nested: pl.DataFrame) -> pl.Expr:
    return (kinds.is_op()
            & pl.col("sequence_number").is_not_null() & (pl.col("fwd_thread_id").fill_null(0) == 0))


def _self_or_nearest(parent: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """For every row: itself when `mask`, else its nearest ancestor with `mask` (-1: none)."""
    rows = np.arange(len(parent))
    near = nearest_ancestor(parent, rows, mask) if len(rows) else rows
    return np.where(mask, rows, near)


def backward_links(nested: pl.DataFrame) -> pl.DataFrame:
    """Each backward node op and the forward op that created its autograd node.

    A backward node op (a host op with a sequence number and `fwd_thread_id` > 0) links to
    the forward op (sequence number, `fwd_thread_id` 0) with the same sequence number on
    the forward thread, the one that started last among those starting before the backward
    op. `fwd_thread_id` is torch's own thread number, not a tid: each number is mapped to
    the tid whose forward sequence numbers match most of its backward nodes.

    Returns
    -------
    pl.DataFrame
        `rank`, `event_id` (backward op), `name`, `tid`, `sequence_number`, `fwd_thread_id`,
        `start_ns`, `end_ns`, `dur_ns`, `excl_ns` (its time minus the backward ops nested in
        it), `outer` (no backward op encloses it), `fwd_tid`, `fwd_id` (forward op event id,
        null: no forward op found), `fwd_name`.
    """
    cols = [c for c in _NEEDED if c in nested.columns]
    n = nested.select(cols)
    parent = row_parents(n)
    is_bwd = _is_backward_node(n)
    rows = np.flatnonzero(is_bwd)
    up = nearest_ancestor(parent, rows, is_bwd) if len(rows) else rows
    dur = n["dur_ns"].to_numpy()
    nested_dur = np.zeros(len(n), np.int64)
    inner = up >= 0
    np.add.at(nested_dur, up[inner], dur[rows[inner]])
    bwd = n[rows].select("rank", "event_id", "name", "tid", "sequence_number", "fwd_thread_id", "start_ns",
                         "end_ns", "dur_ns").with_columns(
        excl_ns=pl.Series(dur[rows] - nested_dur[rows], dtype=pl.Int64), outer=pl.Series(~inner))
    fwd = n.filter(_is_forward_op(n)).select(
        "rank", pl.col("tid").alias("fwd_tid"), "sequence_number", pl.col("event_id").alias("fwd_id"),
        pl.col("name").alias("fwd_name"), pl.col("start_ns").alias("_fs"))
    # torch's thread number -> tid: the tid holding the most of that number's sequence numbers
    votes = (bwd.select("rank", "fwd_thread_id", "sequence_number").unique()
             .join(fwd.select("rank", "fwd_tid", "sequence_number").unique(), on=["rank", "sequence_number"])
             .group_by("rank", "fwd_thread_id", "fwd_tid").len()
             .sort(["rank", "fwd_thread_id", "len", "fwd_tid"], descending=[False, False, True, False])
             .unique(["rank", "fwd_thread_id"], keep="first").drop("len"))
    bwd = bwd.join(votes, on=["rank", "fwd_thread_id"], how="left")
    cand = (bwd.select("rank", "event_id", "fwd_tid", "sequence_number", "start_ns")
            .join(fwd, on=["rank", "fwd_tid", "sequence_number"])
            .filter(pl.col("_fs") <= pl.col("start_ns"))
            .sort(["rank", "event_id", "_fs", "fwd_id"], descending=[False, False, True, True])
            .unique(["rank", "event_id"], keep="first")
            .select("rank", "event_id", "fwd_id", "fwd_name"))
    return bwd.join(cand, on=["rank", "event_id"], how="left", maintain_order="left")


def module_frames(nested: pl.DataFrame, source: Source = "auto") -> pl.DataFrame:
    """One row per module call (a module frame), with its module path.

    The module tree is the nesting of frames: a frame's parent is its nearest enclosing
    frame on the same thread. A frame with no enclosing frame that runs inside a backward
    op (activation checkpointing's recomputation) hangs under the parent of the latest
    earlier forward call of the same instance, so it keeps the module's path; it and the
    frames below it have `phase` `recompute`, every other frame is `forward`.

    Returns
    -------
    pl.DataFrame
        `FRAME_COLUMNS`: `frame_id` (event id), `parent_frame` (event id, null for a root),
        `depth` (0 for a root), `path` (instance names joined by ".", e.g.
        `BertModel_0.BertEncoder_0.BertLayer_1`), `instance` (`Linear_3`), `type`
        (`Linear`), `phase`, `self_ns` (duration minus the child frames' durations, clipped
        to the frame). Sorted by rank, start.
    """
    cols = [c for c in _NEEDED if c in nested.columns]
    n = nested.select(cols)
    mask, used = frame_mask(n, source)
    is_frame = mask.to_numpy()
    if used is None:
        return _empty_frames()
    parent = row_parents(n)
    rows = np.flatnonzero(is_frame)
    up = nearest_ancestor(parent, rows, is_frame)
    # recomputation: a root frame inside a backward op hangs under that op's forward module
    is_bwd = _is_backward_node(n)
    bwd_up = nearest_ancestor(parent, rows, is_bwd) if is_bwd.any() else np.full(len(rows), -1)
    # only nn.Module frames are recomputed (activation checkpointing re-runs modules); a
    # record_function region that runs inside a backward op (DDP's nccl:all_reduce in its hook)
    # is a call of its own
    phase = np.where((up < 0) & (bwd_up >= 0) & (used == "nn.Module"), "recompute", "forward")
    f = n[rows]
    name = f["name"]
    instance = name.str.strip_prefix(MODULE_PREFIX) if used == "nn.Module" else name
    typ = instance.str.replace(r"_\d+$", "") if used == "nn.Module" else instance
    pos = np.full(len(n), -1, np.int64)
    pos[rows] = np.arange(len(rows))
    fparent = np.where(up >= 0, pos[np.maximum(up, 0)], -1)
    if (phase == "recompute").any():
        fparent = _recompute_parents(n, rows, fparent, bwd_up, instance)
    # a frame under a recomputed root is recomputed too
    root_phase = phase
    fdepth = tree_depth(fparent)
    paths = _paths(fparent, fdepth, instance, root_phase == "recompute")
    dur = f["dur_ns"].to_numpy()
    child_dur = _clipped_child_dur(f["start_ns"].to_numpy(), f["end_ns"].to_numpy(), fparent)
    out = f.select("rank", pl.col("event_id").alias("frame_id"), "pid", "tid", "start_ns", "end_ns",
                   "dur_ns").with_columns(
        parent_frame=pl.Series(np.where(fparent >= 0, f["event_id"].to_numpy()[np.maximum(fparent, 0)], -1)),
        depth=pl.Series(fdepth, dtype=pl.Int32),
        path=paths["path"], instance=instance, type=typ,
        phase=pl.when(paths["recompute"]).then(pl.lit("recompute")).otherwise(pl.lit("forward")),
        self_ns=pl.Series(dur - child_dur, dtype=pl.Int64),
    ).with_columns(parent_frame=pl.when(pl.col("parent_frame") >= 0).then(pl.col("parent_frame")))
    return out.select(FRAME_COLUMNS).sort("rank", "start_ns", "frame_id")


def _paths(fparent: np.ndarray, fdepth: np.ndarray, instance: pl.Series, recompute: np.ndarray) -> pl.DataFrame:
    """Each frame's `path` (its ancestors' instance names, root first, joined by ".") and whether
    it or an ancestor is `recompute`: one pass per depth level from the roots down, each frame
    extending its parent's path, so the work is the size of the paths (never frames x depth
    pairs).
    """
    path = np.empty(len(fparent), dtype=object)
    rec = recompute.copy()
    inst = instance.to_numpy()
    for level in depth_levels(fdepth):
        p = fparent[level]
        has = p >= 0
        top, below = level[~has], level[has]
        path[top] = inst[top]
        if len(below):
            pp = p[has]
            path[below] = np.char.add(np.char.add(path[pp].astype(str), "."), inst[below].astype(str)).astype(object)
            rec[below] |= rec[pp]
    return pl.DataFrame({"path": pl.Series(path.tolist(), dtype=pl.String), "recompute": rec})


def _clipped_child_dur(start: np.ndarray, end: np.ndarray, fparent: np.ndarray) -> np.ndarray:
    """Σ over each frame's direct child frames of their duration clipped to the frame."""
    out = np.zeros(len(start), np.int64)
    has = np.flatnonzero(fparent >= 0)
    if len(has):
        p = fparent[has]
        clipped = np.minimum(end[has], end[p]) - np.maximum(start[has], start[p])
        np.add.at(out, p, np.maximum(clipped, 0))
    return out


def _recompute_parents(n: pl.DataFrame, rows: np.ndarray, up: np.ndarray, bwd_up: np.ndarray,
                       instance: pl.Series) -> np.ndarray:
    """`up` (frame positions, -1 for a root) with each recomputed root frame re-parented to
    the parent of the latest forward call of the same module instance that started before it
    (so a recomputation keeps the module's path); a root stays a root without such a call.
    """
    f = pl.DataFrame({"rank": n["rank"].gather(rows), "_inst": instance, "start_ns": n["start_ns"].gather(rows),
                      "_pos": np.arange(len(rows)), "_up": up})
    fwd = f.filter(pl.Series(bwd_up < 0)).select("rank", "_inst", pl.col("start_ns").alias("_fs"),
                                                  pl.col("_up").alias("_new")).sort("_fs")
    roots = f.filter(pl.Series((up < 0) & (bwd_up >= 0))).sort("start_ns")
    hit = roots.join_asof(fwd, left_on="start_ns", right_on="_fs", by=["rank", "_inst"], strategy="backward",
                          allow_exact_matches=False, check_sortedness=False)  # both sorted by start above
    out = up.copy()
    pos = hit["_pos"].to_numpy()
    new = hit["_new"].fill_null(-1).to_numpy()
    out[pos] = new
    return out


def assign(nested: pl.DataFrame, frames: pl.DataFrame, links: pl.DataFrame) -> pl.DataFrame:
    """For every row of `nested`: the module frame its time is charged to, and the phase.

    A row inside a module frame (nearer than any enclosing backward op) is charged to its
    innermost frame, phase `forward` (or `recompute` for a recomputed frame). A row inside a
    backward op (nearer than any frame) is charged to the innermost frame of the forward op
    linked to its innermost backward op, phase `backward` (null frame when that forward op
    lies in no frame or has no link). Other rows: null frame and phase.

    Returns
    -------
    pl.DataFrame
        `rank`, `event_id`, `frame_id` (null: none), `phase`, `bwd_id` (the backward op for
        phase `backward`).
    """
    cols = [c for c in _NEEDED if c in nested.columns]
    n = nested.select(cols)
    parent = row_parents(n)
    rank = n["rank"].to_numpy()
    ids = n["event_id"].to_numpy()
    is_frame = np.zeros(len(n), bool)
    is_frame[row_positions(rank, ids, frames["rank"].to_numpy(), frames["frame_id"].to_numpy())] = True
    is_bwd = np.zeros(len(n), bool)
    bwd_rows = row_positions(rank, ids, links["rank"].to_numpy(), links["event_id"].to_numpy())
    is_bwd[bwd_rows] = True
    depth = n["depth"].to_numpy()
    fr = _self_or_nearest(parent, is_frame)
    bw = _self_or_nearest(parent, is_bwd)
    # rows of the forward op linked to each backward row
    fwd_rows = row_positions(rank, ids, links["rank"].to_numpy(), links["fwd_id"].fill_null(-1).to_numpy())
    linked = np.full(len(n), -1, np.int64)
    linked[bwd_rows] = np.where(fwd_rows >= 0, fr[np.maximum(fwd_rows, 0)], -1)
    fwd_wins = (fr >= 0) & ((bw < 0) | (depth[np.maximum(fr, 0)] > depth[np.maximum(bw, 0)]))
    bwd_wins = (bw >= 0) & ~fwd_wins
    frame_row = np.where(fwd_wins, fr, np.where(bwd_wins, linked[np.maximum(bw, 0)], -1))
    frame_id = np.where(frame_row >= 0, ids[np.maximum(frame_row, 0)], -1)
    out = pl.DataFrame({"rank": n["rank"], "event_id": n["event_id"],
                        "frame_id": pl.Series(frame_id), "_fw": pl.Series(fwd_wins), "_bw": pl.Series(bwd_wins),
                        "bwd_id": pl.Series(np.where(bwd_wins, ids[np.maximum(bw, 0)], -1))})
    out = out.join(frames.select("rank", "frame_id", pl.col("phase").alias("_fph")), on=["rank", "frame_id"],
                   how="left", maintain_order="left")
    return out.select(
        "rank", "event_id",
        frame_id=pl.when(pl.col("frame_id") >= 0).then(pl.col("frame_id")),
        phase=pl.when(pl.col("_fw")).then(pl.col("_fph")).when(pl.col("_bw")).then(pl.lit("backward")),
        bwd_id=pl.when(pl.col("bwd_id") >= 0).then(pl.col("bwd_id")),
    )


def _empty_frames() -> pl.DataFrame:
    return pl.DataFrame(schema={
        "rank": pl.Int32, "frame_id": pl.Int64, "parent_frame": pl.Int64, "depth": pl.Int32, "path": pl.String,
        "instance": pl.String, "type": pl.String, "phase": pl.String, "pid": pl.Int64, "tid": pl.Int64,
        "start_ns": pl.Int64, "end_ns": pl.Int64, "dur_ns": pl.Int64, "self_ns": pl.Int64})
