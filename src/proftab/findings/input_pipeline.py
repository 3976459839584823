"""Rule `input_pipeline`: host time in a step outside any op on the thread that drives the step.

The step thread is the thread of the `ProfilerStep#N` event. Its *idle* time in a step is the
step window minus the union of its ops and runtime calls (`cpu_op`, `cuda_runtime`, ...; not
Python frames or `record_function` regions) and of the work of the rank's other host threads
(the step thread waiting for its own thread pool, or for a collective that gloo's worker thread
runs, `gloo:*`, is not an input stall), in gaps of at least
`MIN_GAP_NS`: data loading, `time.sleep`, blocking I/O (the many short gaps between tiny ops
are `python_overhead`). Each idle nanosecond belongs to the innermost Python frame
(`with_stack=True`) that holds it (`frame_idle`). The frames (by name) holding the most idle
time are the findings.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

from proftab import kinds
from proftab.calls import GLOO_PREFIX
from proftab.findings._base import finding, frame, host_work, register_rule, trace_steps
from proftab.intervals import merge_intervals
from proftab.intervals.overlap import overlap_join
from proftab.render.text import fmt_ns, fmt_share
from proftab.steps import step_threads

if TYPE_CHECKING:
    from proftab.trace import Trace

__all__ = ["MAX_FRAMES", "MIN_GAP_NS", "MIN_SHARE", "frame_idle", "input_pipeline", "step_idle"]

#: a frame (or, without Python frames, the whole idle time) is a finding from this share of step time
MIN_SHARE = 0.05
#: only idle gaps at least this long count (shorter ones between ops are `python_overhead`)
MIN_GAP_NS = 1_000_000
#: at most this many frames per rank
MAX_FRAMES = 3
_KEYS = ["rank", "pid", "tid"]


def step_idle(nested: pl.DataFrame, steps: pl.DataFrame, *, min_gap_ns: int = MIN_GAP_NS) -> pl.DataFrame:
    """The idle intervals of each step's thread, at least `min_gap_ns` long: `rank`, `step`,
    `start_ns`, `end_ns`.

    Parameters
    ----------
    nested
        `Trace.nested` (`rank`, `pid`, `tid`, `cat`, `start_ns`, `end_ns`).
    steps
        `steps.step_threads(events)`: the steps with their thread.
    min_gap_ns
        Shorter gaps are left out.
    """
    win = steps.select(*_KEYS, "step", pl.col("start_ns").alias("w0"), pl.col("end_ns").alias("w1"))
    clip = ("rank", "step", pl.max_horizontal("start_ns", "w0").alias("start_ns"),
            pl.min_horizontal("end_ns", "w1").alias("end_ns"))
    # each thread's busy union first (one linear pass after a sort), then clipped to the steps: the
    # union of the clipped rows is the clipped union, and the blocks are far fewer than the rows
    positive = pl.col("end_ns") > pl.col("start_ns")
    rows = nested.lazy().select(*_KEYS, "start_ns", "end_ns", positive.alias("_pos"), host_work().alias("_work"),
                                pl.col("name").str.starts_with(GLOO_PREFIX).alias("_gloo")).filter(
        pl.col("_pos") & (pl.col("_work") | pl.col("_gloo"))).collect()
    work = merge_intervals(rows.filter(pl.col("_work")), by=_KEYS)
    clipped = overlap_join(work, win, by=_KEYS, right_on=("w0", "w1")).select(*clip)
    # other threads' work in the window counts as busy too: the step thread waits for a pool, not for input
    others = merge_intervals(rows.join(win.select(*_KEYS).unique(), on=_KEYS, how="anti"), by=_KEYS)
    helpers = overlap_join(others, win.select("rank", "step", "w0", "w1"), by=["rank"], right_on=("w0", "w1"))
    clipped = pl.concat([clipped, helpers.select(*clip)])
    busy = merge_intervals(clipped, by=["rank", "step"])
    # idle = the window minus the busy union: the gaps between consecutive busy blocks, and the edges
    edges = pl.concat([busy, win.select("rank", "step", pl.col("w0").alias("start_ns"), pl.col("w0").alias("end_ns")),
                       win.select("rank", "step", pl.col("w1").alias("start_ns"), pl.col("w1").alias("end_ns"))])
    gaps = edges.sort("rank", "step", "start_ns", "end_ns").with_columns(
        gap_start=pl.col("end_ns").cum_max().shift(1).over("rank", "step"))
    return gaps.filter(pl.col("start_ns") - pl.col("gap_start") >= max(min_gap_ns, 1)).select(
        "rank", "step", pl.col("gap_start").alias("start_ns"), pl.col("start_ns").alias("end_ns"))


def frame_idle(nested: pl.DataFrame, steps: pl.DataFrame, idle: pl.DataFrame) -> pl.DataFrame:
    """Exclusive idle time of every Python frame on a step thread in a step.

    The idle time is cut at every frame boundary into pieces; a piece belongs to the deepest frame
    covering it. Returns `rank`, `step`, `event_id`, `name`, `caller` (the name of the frame the
    piece's next-deepest frame, null at the top), `idle_ns`, frames with `idle_ns > 0` only.
    """
    frames = nested.filter(kinds.is_python_frame().fill_null(False)).select(
        *_KEYS, "event_id", "name", "depth", "start_ns", "end_ns").join(
        steps.select(*_KEYS).unique(), on=_KEYS, how="semi")
    if frames.is_empty() or idle.is_empty():
        return pl.DataFrame(schema={"rank": pl.Int32, "step": pl.Int64, "event_id": pl.Int64, "name": pl.String,
                                    "caller": pl.String, "idle_ns": pl.Int64})
    # the frames' boundaries inside the idle gaps cut the gaps into pieces
    cut = overlap_join(idle, frames.select("rank", "start_ns", "end_ns"), by=["rank"], suffix="_f")
    points = pl.concat([
        idle.select("rank", "step", pl.col("start_ns").alias("t")),
        idle.select("rank", "step", pl.col("end_ns").alias("t")),
        cut.filter(pl.col("start_ns_f").is_between(pl.col("start_ns"), pl.col("end_ns")))
        .select("rank", "step", pl.col("start_ns_f").alias("t")),
        cut.filter(pl.col("end_ns_f").is_between(pl.col("start_ns"), pl.col("end_ns")))
        .select("rank", "step", pl.col("end_ns_f").alias("t")),
    ]).unique().sort("rank", "step", "t")
    pieces = points.select("rank", "step", pl.col("t").alias("start_ns"),
                           pl.col("t").shift(-1).over("rank", "step").alias("end_ns")).drop_nulls("end_ns")
    inside = overlap_join(pieces, idle.select("rank", pl.col("step").alias("_s"), "start_ns", "end_ns"),
                          by=["rank"], suffix="_g").filter(
        (pl.col("step") == pl.col("_s")) & (pl.col("overlap_ns") == pl.col("end_ns") - pl.col("start_ns"))
        & (pl.col("overlap_ns") > 0)).select("rank", "step", "start_ns", "end_ns")
    inside = inside.with_row_index("_piece")
    cover = overlap_join(inside, frames.select("rank", "event_id", "name", "depth", "start_ns", "end_ns"),
                         by=["rank"], suffix="_f").filter(
        pl.col("overlap_ns") == pl.col("end_ns") - pl.col("start_ns"))
    ranked = cover.sort("_piece", "depth", descending=[False, True]).group_by("_piece", maintain_order=True).agg(
        pl.col("rank").first(), pl.col("step").first(), pl.col("event_id").first(), pl.col("name").first(),
        pl.col("name").get(1, null_on_oob=True).alias("caller"), pl.col("overlap_ns").first().alias("idle_ns"))
    return ranked.group_by("rank", "step", "event_id").agg(
        pl.col("name").first(), pl.col("caller").first(), pl.col("idle_ns").sum()).sort("rank", "step", "event_id")


def input_pipeline(nested: pl.DataFrame, events: pl.DataFrame, *, min_share: float = MIN_SHARE,
                   max_frames: int = MAX_FRAMES, steps: pl.DataFrame | None = None) -> pl.DataFrame:
    """Findings: the Python frames holding the step thread's idle time (module docstring).

    `value` is the frame's exclusive idle ns per step (total // steps), `share` its total over
    the steps' total duration, `evidence` the frame events (`events` table) that hold it.
    Without Python frames, one finding for the whole idle time, `evidence` the step events.
    `steps`: `step_threads(events)` when already computed.
    """
    steps = step_threads(events) if steps is None else steps
    if steps.is_empty():
        return frame([])
    idle = step_idle(nested, steps)
    per = frame_idle(nested, steps, idle)
    rows = []
    for (rank,), st in steps.group_by(["rank"], maintain_order=True):
        total = int(st["dur_ns"].sum())
        n = st.height
        if total <= 0:
            continue
        fr = per.filter(pl.col("rank") == rank)
        if fr.is_empty():
            idle_ns = int(idle.filter(pl.col("rank") == rank).select((pl.col("end_ns") - pl.col("start_ns")).sum())
                          .item() or 0)
            if idle_ns / total >= min_share:
                rows.append(finding(
                    "input_pipeline", _severity(idle_ns / total), value=idle_ns // n, unit="ns_per_step",
                    share=idle_ns / total, est_saving_ns=idle_ns // n, rank=rank, scope=_thread(st),
                    evidence=st["event_id"].to_list(),
                    message=f"the step thread is outside any op, and no other thread works, for "
                            f"{fmt_ns(idle_ns // n)} per step ({fmt_share(idle_ns / total)} of step time)",
                    suggestion="record with with_stack=True to name the Python frame; overlap data loading "
                               "with compute (DataLoader num_workers, pin_memory, prefetch)"))
            continue
        by_name = fr.group_by("name").agg(pl.col("idle_ns").sum(), pl.col("event_id"),
                                          pl.col("caller").drop_nulls().mode().first().alias("caller"))
        by_name = by_name.sort(["idle_ns", "name"], descending=[True, False]).head(max_frames)
        for name, idle_ns, ev, caller in by_name.select("name", "idle_ns", "event_id", "caller").iter_rows():
            share = idle_ns / total
            if share < min_share:
                continue
            where = f"{name}" + (f" (called from {caller})" if caller else "")
            rows.append(finding(
                "input_pipeline", _severity(share), value=idle_ns // n, unit="ns_per_step", share=share,
                est_saving_ns=idle_ns // n, rank=rank, scope=f"{_thread(st)} frame={name}", evidence=ev,
                message=f"{fmt_ns(idle_ns // n)} per step ({fmt_share(share)} of step time) the step thread runs "
                        f"no op, inside {where}",
                suggestion="move this work off the step thread: DataLoader workers (num_workers > 0, "
                           "pin_memory, prefetch_factor) or a background thread; remove sleeps and blocking I/O"))
    return frame(rows)


def _severity(share: float) -> str:
    return "high" if share >= 0.25 else "medium" if share >= 0.10 else "low"


def _thread(steps: pl.DataFrame) -> str:
    tids = steps["tid"].unique().to_list()
    return f"thread={tids[0]}" if len(tids) == 1 else "threads=" + ",".join(str(t) for t in tids)


@register_rule("input_pipeline", "host time in a step outside any op on the step thread (data loading, sleeps)")
def _run(trace: Trace) -> pl.DataFrame:
    return input_pipeline(trace.collect("nested"), trace.collect("events"), steps=trace_steps(trace))
