"""The module table: host and device time per module path (or type), forward and backward.

Free functions over frames: `module_frames`, `assign` and `backward_links` outputs, the
device activities (`Trace.device.activities()`) and the steps. docs/modules.md has the rules.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import polars as pl

from proftab import kinds
from proftab.exceptions import ProftabError
from proftab.intervals.merge import union_ns
from proftab.intervals.tree import root_first_paths, row_positions, tree_depth
from proftab.steps import assign_steps
from proftab.units import NS_SUFFIX, is_count

__all__ = ["MODULE_COLUMNS", "frame_ancestors", "modules"]

By = Literal["path", "type"]

#: columns of `modules(by="path")`; `by="type"` drops `path`, `parent`, `depth`, `instance`
MODULE_COLUMNS = [
    "rank", "path", "parent", "depth", "instance", "type", "n_calls", "host_total_ns", "host_self_ns",
    "device_total_ns", "device_self_ns", "n_bwd_calls", "bwd_host_total_ns", "bwd_host_self_ns", "bwd_device_total_ns",
    "bwd_device_self_ns", "n_recompute_calls", "recompute_ns", "recompute_device_ns", "n_ops",
]


#: most (frame, ancestor) pairs a module table is built from: module frames nested thousands
#: deep (a hostile trace; real models nest tens) are refused, not charged in minutes and gigabytes
MAX_ANCESTOR_PAIRS = 20_000_000


def _ancestor_rows(frames: pl.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """(frame row, ancestor-or-self row) pairs: O(Σ (depth + 1)), at most `MAX_ANCESTOR_PAIRS`."""
    depths = frames["depth"].to_numpy().astype(np.int64)
    pairs = int(depths.sum()) + frames.height
    if pairs > MAX_ANCESTOR_PAIRS:
        msg = (f"the module frames nest {int(depths.max()) + 1:,} deep: charging every frame's "
               f"ancestors takes {pairs:,} pairs (more than {MAX_ANCESTOR_PAIRS:,})")
        raise ProftabError(msg)
    rank = frames["rank"].to_numpy()
    ids = frames["frame_id"].to_numpy()
    fparent = row_positions(rank, ids, rank, frames["parent_frame"].fill_null(-1).to_numpy())
    depth = tree_depth(fparent)  # not the stored depth: `step=` keeps part of the frames
    rows = np.arange(len(frames))
    offsets, anc = root_first_paths(fparent, rows, depth)  # one pass, not one per level
    return np.repeat(rows, np.diff(offsets)), anc


def frame_ancestors(frames: pl.DataFrame) -> pl.DataFrame:
    """(frame, ancestor-or-self) pairs: `rank`, `frame_id`, `anc_path`, `anc_type`."""
    item, anc = _ancestor_rows(frames)
    return pl.DataFrame({
        "rank": frames["rank"].gather(item), "frame_id": frames["frame_id"].gather(item),
        "anc_path": frames["path"].gather(anc), "anc_type": frames["type"].gather(anc)})


def _charged(rows: pl.DataFrame, anc: pl.DataFrame, key: str, value: str, name: str) -> pl.DataFrame:
    """Σ `value` of `rows` (with `rank`, `frame_id`, a row key `_k`) per module `key`:
    `name`_self over the innermost frame, `name`_total over every distinct ancestor.
    """
    own = rows.join(anc.filter(pl.col("_self")), on=["rank", "frame_id"]).group_by("rank", key).agg(
        pl.col(value).sum().alias(f"{name}_self"))
    total = (rows.join(anc, on=["rank", "frame_id"]).unique(["rank", "_k", key])
             .group_by("rank", key).agg(pl.col(value).sum().alias(f"{name}_total")))
    return own.join(total, on=["rank", key], how="full", coalesce=True)


def modules(frames: pl.DataFrame, assigned: pl.DataFrame, links: pl.DataFrame, activities: pl.DataFrame,
            nested: pl.DataFrame, *, by: By = "path", step: int | None = None) -> pl.DataFrame:
    """Host and device time per module, forward and backward side by side.

    Parameters
    ----------
    frames
        `module_frames(nested)`.
    assigned
        `assign(nested, frames, links)`.
    links
        `backward_links(nested)`.
    activities
        `Trace.device.activities()` (empty for a host-only trace): `rank`, `event_id`,
        `kind`, `dur_ns`, `launch_id`, `op_id`.
    nested
        `Trace.nested` (`rank`, `event_id`, `cat`, `name`, `start_ns`; steps come from it).
    by
        `path` (one row per module path, the tree) or `type` (one row per module class).
    step
        Only the frames, ops and activities of `ProfilerStep#<step>` (by their start).

    Returns
    -------
    pl.DataFrame
        `MODULE_COLUMNS` (`by="type"`: without `path`, `parent`, `depth`, `instance`), sorted
        by `host_total_ns` descending. `host_total_ns` is the union of the forward frames'
        spans; `host_self_ns` Σ their `self_ns`; device columns Σ `dur_ns` of kernels,
        memcpy and memset launched inside (`_self`: with this module innermost); `bwd_*` the
        same for backward ops linked to a forward op inside the module (host: each backward
        op's time minus the backward ops nested in it); `recompute_*` the recomputed frames
        (`n_recompute_calls`, union of their spans, the device time launched in them);
        `n_calls` the forward calls; `n_ops` the host ops whose innermost frame is a forward frame
        of the module; `n_bwd_calls` the autograd nodes (distinct forward thread and sequence
        number) run.
    """
    if by not in ("path", "type"):
        msg = f"by must be 'path' or 'type', not {by!r}"
        raise ProftabError(msg)
    if step is not None:
        frames, assigned, links, activities = _one_step(nested, step, frames, assigned, links, activities)
    # the ancestor pairs carry an integer id of the module's path (or type), never the strings:
    # a path is as long as the frame is deep, so hashing it per pair would be depth x pairs
    name = "path" if by == "path" else "type"
    names = frames.select("rank", name).unique(maintain_order=True).with_columns(
        pl.int_range(pl.len(), dtype=pl.Int64).alias("_key"))
    frames = frames.join(names, on=["rank", name], how="left", maintain_order="left")
    key = "_key"
    item, anc_row = _ancestor_rows(frames)
    anc = pl.DataFrame({"rank": frames["rank"].gather(item), "frame_id": frames["frame_id"].gather(item),
                        key: frames[key].gather(anc_row), "_self": item == anc_row})
    fwd = frames.filter(pl.col("phase") == "forward")
    rec = frames.filter(pl.col("phase") == "recompute")
    host = (fwd.group_by("rank", key).agg(n_calls=pl.len(), host_self_ns=pl.col("self_ns").sum())
            .join(_thread_union(fwd, key, "host_total_ns"), on=["rank", key]))
    recomp = rec.group_by("rank", key).agg(n_recompute_calls=pl.len()).join(
        _thread_union(rec, key, "recompute_ns"), on=["rank", key])
    # the backward ops charged to each frame: host time = each op's exclusive backward time
    bwd_ops = links.select("rank", "event_id", "excl_ns").join(
        assigned.select("rank", "event_id", "frame_id"), on=["rank", "event_id"]).filter(
        pl.col("frame_id").is_not_null()).rename({"event_id": "_k"})
    bwd_host = _charged(bwd_ops, anc, key, "excl_ns", "bwd_host")
    # one call per autograd node run: (forward thread, sequence number) of the charged backward ops
    bwd_calls = (links.filter(pl.col("sequence_number").is_not_null())
                 .select("rank", "event_id", "fwd_thread_id", "sequence_number")
                 .join(assigned.select("rank", "event_id", "frame_id"), on=["rank", "event_id"])
                 .join(anc.filter(pl.col("_self")), on=["rank", "frame_id"])
                 .group_by("rank", key).agg(n_bwd_calls=pl.struct("fwd_thread_id", "sequence_number").n_unique()))
    # device activities: charged through their launch (else their op) row
    acts = _device_rows(activities, assigned)
    dev_f = _charged(acts.filter(pl.col("phase") == "forward"), anc, key, "dur_ns", "device")
    dev_b = _charged(acts.filter(pl.col("phase") == "backward"), anc, key, "dur_ns", "bwd_device")
    dev_r = _charged(acts.filter(pl.col("phase") == "recompute"), anc, key, "dur_ns", "recompute_device").select(
        "rank", key, pl.col("recompute_device_total").alias("recompute_device_ns"))
    host_ops = _with_cat(assigned, nested).filter(kinds.is_op() & (pl.col("phase") == "forward"))
    ops = host_ops.join(anc.filter(pl.col("_self")), on=["rank", "frame_id"]).group_by("rank", key).agg(
        n_ops=pl.len())
    keys = pl.concat([d.select("rank", key) for d in (host, recomp, bwd_host, dev_f)], how="vertical").unique()
    out = keys
    for part in (host, bwd_calls, bwd_host, recomp, dev_r, dev_f, dev_b, ops):
        out = out.join(part, on=["rank", key], how="left")
    out = out.with_columns(
        [pl.col(c).fill_null(0).cast(pl.Int64) for c in MODULE_COLUMNS if c in out.columns and (
            c.endswith(NS_SUFFIX) or is_count(c))]
        + [pl.col(f"{p}_{s}").alias(f"{p}_{s}_ns").fill_null(0).cast(pl.Int64)
           for p in ("device", "bwd_host", "bwd_device") for s in ("self", "total") if f"{p}_{s}" in out.columns])
    out = out.drop([f"{p}_{s}" for p in ("device", "bwd_host", "bwd_device") for s in ("self", "total")])
    out = out.join(names, on=["rank", key], how="left").drop(key)
    key = name
    if by == "path":
        meta = frames.unique(["rank", "path"], keep="first").select("rank", "path", "depth", "instance", "type")
        out = out.join(meta, on=["rank", "path"], how="left").with_columns(
            parent=pl.when(pl.col("depth") > 0).then(pl.col("path").str.replace(r"\.[^.]*$", "")))
        cols = MODULE_COLUMNS
    else:
        cols = [c for c in MODULE_COLUMNS if c not in ("path", "parent", "depth", "instance")]
    return out.select(cols).sort(["host_total_ns", "rank", key], descending=[True, False, False])


def _with_cat(assigned: pl.DataFrame, nested: pl.DataFrame) -> pl.DataFrame:
    """`assigned` with each row's `cat` from `nested`: side by side when the rows are the same
    (`assign` returns one row per nested row, in order: an O(n) check), else by a join."""
    if assigned.height == nested.height and all(
            np.array_equal(assigned[c].to_numpy(), nested[c].to_numpy()) for c in ("event_id", "rank")):
        return assigned.with_columns(nested["cat"])
    return nested.select("rank", "event_id", "cat").join(assigned, on=["rank", "event_id"])


def _launch_row(activities: pl.DataFrame) -> pl.Expr:
    """The host row whose module an activity counts for: its launch, else its op.

    A kernel of a graph replay attributed to a captured op (link `graph_capture`) counts for
    that virtual op, which lies in the captured module frames; its launch is the graph launch.
    """
    row = pl.coalesce("launch_id", "op_id")
    if "link" in activities.columns:
        row = pl.when(pl.col("link").cast(pl.String) == "graph_capture").then(pl.col("op_id")).otherwise(row)
    return row


def _thread_union(frames: pl.DataFrame, key: str, name: str) -> pl.DataFrame:
    """Per (rank, `key`): Σ over threads of the union of the frames' spans on that thread.

    The union keeps a module nested in itself from counting twice; per thread, so that calls
    running at once on two threads (two `gloo:all_reduce` regions) count as the thread time they
    are, and `host_self_ns` (a sum over calls) never exceeds the total.
    """
    per = union_ns(frames, by=["rank", key, "pid", "tid"])
    return per.group_by("rank", key).agg(pl.col("union_ns").sum().cast(pl.Int64).alias(name))


def _device_rows(activities: pl.DataFrame, assigned: pl.DataFrame) -> pl.DataFrame:
    """Device work rows with the frame and phase of their launch row (else their op row)."""
    a = activities.filter(pl.col("kind").cast(pl.String) != "sync").select(
        "rank", pl.col("event_id").alias("_k"), pl.col("dur_ns").clip(0),
        _launch_row(activities).alias("event_id"))
    return a.join(assigned.select("rank", "event_id", "frame_id", "phase"), on=["rank", "event_id"]).filter(
        pl.col("frame_id").is_not_null())


def _one_step(nested: pl.DataFrame, step: int, frames: pl.DataFrame, assigned: pl.DataFrame, links: pl.DataFrame,
              activities: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    from proftab.steps import step_windows

    windows = step_windows(nested.select("rank", "cat", "name", "start_ns", "end_ns", "dur_ns", "event_id"))
    if windows.filter(pl.col("step") == step).is_empty():
        msg = f"no step {step!r}; steps: {sorted(windows['step'].unique().to_list())}"
        raise ProftabError(msg)
    rows = assign_steps(nested.select("rank", "event_id", "start_ns"), windows).filter(pl.col("step") == step)
    keep = rows.select("rank", "event_id")
    frames = frames.join(keep.rename({"event_id": "frame_id"}), on=["rank", "frame_id"], how="semi")
    assigned = assigned.join(keep, on=["rank", "event_id"], how="semi")
    links = links.join(keep, on=["rank", "event_id"], how="semi")
    activities = activities.with_columns(_row=_launch_row(activities)).join(
        keep.rename({"event_id": "_row"}), on=["rank", "_row"], how="semi").drop("_row")
    return frames, assigned, links, activities
