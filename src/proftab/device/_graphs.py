"""CUDA / HIP graph replays: each replayed kernel attributed to the op that captured it.

A graph replay (`cudaGraphLaunch` / `hipGraphLaunch`) gives every kernel of the graph the one
correlation of the launch, so without more the kernels belong to the launch
(`proftab.device._rules`, link `graph_launch`). A *capture trace*, recorded while the graph was
captured, has the ops, shapes, modules and stacks and, between `*StreamBeginCapture` and
`*StreamEndCapture`, the runtime calls that recorded each kernel (`args.kernel` names it;
memcpy / memset calls are matched by kind). `merge_capture` aligns every replay's kernels with
the captured calls and adds **virtual ops** under the graph launch; docs/device.md ("CUDA
graphs") states the rules, the ids and the limits.

Alignment (`align`) of one replayed sequence `r` (n kernels of one stream, in start order) with
one captured sequence `c` (m calls, in program order), tokens compared as integers:

1. the common prefix and suffix are matched (one vectorized comparison each);
2. in what is left, a token that occurs exactly once on each side anchors a match; the anchor
   nearest the middle of the replayed part splits the region in two and both halves go back
   to 1 (patience-diff style). A region without such a token is left unmatched.

Each region costs O(its length) in numpy; a run of identical sequences (the common case) is
one comparison, O(n). With g gaps the work is O((n + m) · log(n + m) · g) at most, and the
regions per alignment are capped at `MAX_REGIONS`; what is left then stays unmatched (and is
counted in `graph_replays`). Identical replays are aligned once (keyed by their token bytes).
Several streams: each stream is aligned with the captured calls whose kernel names it has and
no stream claimed before (largest stream first); the replayed kernels still unmatched then
take the unclaimed captured calls of the same name in order.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import polars as pl

from proftab import kinds, schema
from proftab.calls import (
    CAPTURE_BEGIN,
    CAPTURE_END,
    GRAPH_LAUNCH,
    HOST_FUNC_LAUNCH,
    KERNEL_LAUNCH,
    MEMCPY,
    MEMSET,
    Calls,
    any_call,
)
from proftab.device._events import event_frame
from proftab.device._link import activities
from proftab.device._rules import is_launch
from proftab.exceptions import TraceError
from proftab.trace import Trace

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["GRAPH_KERNEL_COLUMNS", "GRAPH_LAUNCH_COLUMNS", "GRAPH_OP_COLUMNS", "GRAPH_REPLAY_COLUMNS", "MAX_REGIONS",
           "align", "capture_calls", "graph_replays", "merge_capture"]

#: regions one alignment may split into before the rest is left unmatched
MAX_REGIONS = 4096
_MEMCPY, _MEMSET = "\x00memcpy", "\x00memset"
_TRACK = schema.TRACK_KEYS
#: the merged trace's `graph_ops` table: one row per virtual op
GRAPH_OP_COLUMNS = ["rank", "event_id", "graph_launch_id", "graph_replay", "capture_source", "capture_event_id"]
#: the merged trace's `graph_kernels` table: one row per replayed activity
GRAPH_KERNEL_COLUMNS = ["rank", "event_id", "graph_launch_id", "capture_source", "capture_call_id",
                        "capture_event_id", "virtual_op_id"]
#: the merged trace's `graph_launches` table: one row per graph launch a capture was matched to
GRAPH_LAUNCH_COLUMNS = ["rank", "graph_launch_id", "graph_replay", "capture_source", "capture_window", "n_captured"]
#: `graph_replays` columns
GRAPH_REPLAY_COLUMNS = ["rank", "graph_launch_id", "graph_replay", "launch_start_ns", "n_kernels", "kernel_ns",
                        "capture_source", "n_captured", "n_matched", "n_unmatched", "n_capture_unmatched",
                        "attributed_ns", "attributed_share"]


# --------------------------------------------------------------------------- alignment


def align(captured: np.ndarray, replayed: np.ndarray, *, max_regions: int = MAX_REGIONS) -> np.ndarray:
    """Match a replayed token sequence with a captured one, in order, tolerating gaps on either side.

    Parameters
    ----------
    captured, replayed
        Integer tokens (one per captured call / replayed kernel), in program / start order.
    max_regions
        Regions examined at most; the rest stays unmatched.

    Returns
    -------
    np.ndarray
        For each replayed position the matched captured position, -1 where unmatched; the
        matched positions increase (an order-preserving alignment).
    """
    c = np.asarray(captured, np.int64)
    r = np.asarray(replayed, np.int64)
    out = np.full(len(r), -1, np.int64)
    stack = [(0, len(c), 0, len(r))]
    regions = 0
    while stack and regions < max_regions:
        c0, c1, r0, r1 = stack.pop()
        regions += 1
        n = min(c1 - c0, r1 - r0)
        if n == 0:
            continue
        diff = np.flatnonzero(c[c0:c0 + n] != r[r0:r0 + n])
        p = int(diff[0]) if len(diff) else n
        out[r0:r0 + p] = np.arange(c0, c0 + p)
        c0, r0 = c0 + p, r0 + p
        n = min(c1 - c0, r1 - r0)
        if n == 0:
            continue
        diff = np.flatnonzero(c[c1 - n:c1][::-1] != r[r1 - n:r1][::-1])
        s = int(diff[0]) if len(diff) else n
        out[r1 - s:r1] = np.arange(c1 - s, c1)
        c1, r1 = c1 - s, r1 - s
        if c0 == c1 or r0 == r1:
            continue
        uc, ic, nc = np.unique(c[c0:c1], return_index=True, return_counts=True)
        ur, ir, nr = np.unique(r[r0:r1], return_index=True, return_counts=True)
        _, ia, ib = np.intersect1d(uc[nc == 1], ur[nr == 1], assume_unique=True, return_indices=True)
        if not len(ia):
            continue
        pc = ic[nc == 1][ia] + c0
        pr = ir[nr == 1][ib] + r0
        k = int(np.argmin(np.abs(pr - (r0 + r1) // 2)))
        ac, ar = int(pc[k]), int(pr[k])
        out[ar] = ac
        stack.append((ac + 1, c1, ar + 1, r1))
        stack.append((c0, ac, r0, ar))
    return out


def _align_streams(captured: np.ndarray, streams: list[np.ndarray]) -> tuple[list[np.ndarray], int]:
    """`align` per stream (largest first) on the captured calls it can use; leftovers by name in order.

    Returns the captured position per replayed kernel of each stream (-1: unmatched) and the
    number of matched kernels.
    """
    claimed = np.zeros(len(captured), bool)
    result = [np.full(len(s), -1, np.int64) for s in streams]
    for i in sorted(range(len(streams)), key=lambda j: -len(streams[j])):
        toks = streams[i]
        usable = np.flatnonzero(~claimed & np.isin(captured, toks))
        m = align(captured[usable], toks)
        got = np.where(m >= 0, usable[np.maximum(m, 0)], -1) if len(usable) else m
        claimed[got[got >= 0]] = True
        result[i] = got
    if len(streams) > 1:  # leftovers: the k-th unmatched kernel of a name takes the k-th unclaimed call of it
        lens = np.cumsum([0, *(len(s) for s in streams)])
        allr = np.concatenate(result) if streams else np.empty(0, np.int64)
        allt = np.concatenate(streams) if streams else np.empty(0, np.int64)
        free_r = np.flatnonzero(allr < 0)
        free_c = np.flatnonzero(~claimed)
        if len(free_r) and len(free_c):
            left = pl.DataFrame({"t": allt[free_r], "i": free_r}).with_columns(k=pl.int_range(pl.len()).over("t"))
            right = pl.DataFrame({"t": captured[free_c], "j": free_c}).with_columns(
                k=pl.int_range(pl.len()).over("t"))
            pairs = left.join(right, on=["t", "k"], how="inner")
            allr[pairs["i"].to_numpy()] = pairs["j"].to_numpy()
            result = [allr[lens[i]:lens[i + 1]] for i in range(len(streams))]
    return result, int(sum((x >= 0).sum() for x in result))


# --------------------------------------------------------------------------- capture side


def capture_calls(events: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The capture windows of a capture trace and the runtime calls recorded in each.

    A window is `[end of *StreamBeginCapture, start of *StreamEndCapture]`, the k-th begin with
    the k-th end of the same thread.

    Parameters
    ----------
    events
        The capture trace's events (`proftab.device.EVENT_COLUMNS` and `args`).

    Returns
    -------
    tuple of pl.DataFrame
        `windows`: `rank`, `pid`, `pid_text`, `tid`, `tid_text`, `window` (0, 1, ... by
        start), `window_start_ns`, `window_end_ns`. `calls`: `window`, `call_id` (the call's
        event_id), `start_ns`, `token` (the kernel name of `args.kernel`, or the memcpy /
        memset kind; a launch without `args.kernel` gets its own name, which no kernel has),
        `position` (0-based program order in the window), `op_id` (the capture-time op that
        made the call, `activities` rules), sorted by window, position.
    """
    ev = event_frame(events, [*[c for c in events.columns if c in schema.EVENT_COLUMNS]])
    rt = ev.filter(is_launch(ev))
    keys = list(_TRACK)

    def marks(word: str, calls: Calls, col: str) -> pl.DataFrame:
        return (rt.filter(calls.expr()).sort([*keys, "start_ns"])
                .select(*keys, pl.col(col).alias(f"_{word}"),
                        pl.int_range(pl.len()).over(keys).alias("_k")))

    begin = marks("StreamBeginCapture", CAPTURE_BEGIN, "end_ns")
    end = marks("StreamEndCapture", CAPTURE_END, "start_ns")
    windows = (begin.join(end, on=[*keys, "_k"], how="inner", nulls_equal=True)
               .filter(pl.col("_StreamEndCapture") >= pl.col("_StreamBeginCapture"))
               .sort("_StreamBeginCapture")
               .select(*keys, pl.int_range(pl.len(), dtype=pl.Int64).alias("window"),
                       pl.col("_StreamBeginCapture").alias("window_start_ns"),
                       pl.col("_StreamEndCapture").alias("window_end_ns")))
    name = pl.col("name")
    rec = rt.filter(any_call(KERNEL_LAUNCH, HOST_FUNC_LAUNCH, MEMCPY, MEMSET))
    calls = _in_windows(rec, windows).with_columns(
        token=pl.when(MEMCPY.expr()).then(pl.lit(_MEMCPY))
        .when(MEMSET.expr()).then(pl.lit(_MEMSET))
        .otherwise(pl.coalesce(pl.col("args").str.json_path_match("$.kernel"), pl.lit("\x00launch ") + name)),
    ).sort("window", "start_ns", "event_id").with_columns(
        position=pl.int_range(pl.len(), dtype=pl.Int64).over("window"))
    # the op of each call: the device linking rules, run on one stand-in activity per call
    stand_in = calls.select(
        "rank", (-1 - pl.col("event_id")).alias("event_id"), pl.lit(0, pl.Int64).alias("device"),
        pl.lit(0, pl.Int64).alias("stream"), pl.lit(kinds.KERNEL).cast(pl.Categorical).alias("cat"), "name",
        pl.lit("kernel").alias("kind"), pl.lit(False).alias("is_annotation"), "start_ns",
        pl.col("start_ns").alias("end_ns"), pl.lit(0, pl.Int64).alias("dur_ns"), "correlation",
        pl.lit(None, pl.Int64).alias("external_id"), pl.lit(None, pl.Int64).alias("bytes"))
    owner = activities(ev, stand_in).select((-1 - pl.col("event_id")).alias("event_id"), "op_id")
    calls = calls.join(owner, on="event_id", how="left").select(
        "window", pl.col("event_id").alias("call_id"), "start_ns", "token", "position", "op_id")
    return windows, calls.sort("window", "position")


def _thread() -> pl.Expr:
    """One string key per host thread (`TRACK_KEYS`, nulls spelled out)."""
    return pl.concat_str([pl.col(k).cast(pl.String).fill_null("\x00") for k in _TRACK], separator="|").alias("_thr")


def _in_windows(frame: pl.DataFrame, windows: pl.DataFrame) -> pl.DataFrame:
    """The rows of `frame` that lie inside a capture window of their thread, with its `window`.

    The window is found on a narrow frame (ids, times, thread), then the rows are joined back.
    """
    w = windows.select(_thread(), "window", "window_start_ns", "window_end_ns").sort("window_start_ns")
    threads = w["_thr"].unique()
    narrow = frame.select("rank", "event_id", "start_ns", "end_ns", _thread()).filter(
        pl.col("_thr").is_in(threads.implode()))
    hit = (narrow.sort("start_ns")
           .join_asof(w, left_on="start_ns", right_on="window_start_ns", by="_thr", strategy="backward",
                      check_sortedness=False)
           .filter(pl.col("window").is_not_null() & (pl.col("end_ns") <= pl.col("window_end_ns")))
           .select("rank", "event_id", "window", "window_start_ns", "window_end_ns"))
    return frame.join(hit, on=["rank", "event_id"], how="inner")


def _copied_events(ev: pl.DataFrame, windows: pl.DataFrame, calls: pl.DataFrame) -> pl.DataFrame:
    """The host events a window's virtual ops copy: those inside it that hold at least one recorded call."""
    narrow = ev.select("rank", "event_id", "cat", "start_ns", "end_ns", *_TRACK[1:])
    host = narrow.filter(~kinds.is_device() & ~is_launch(narrow))
    inside = _in_windows(host, windows)
    starts = calls.select("window", pl.col("start_ns").alias("_cs")).sort("_cs")
    first = inside.sort("start_ns").join_asof(starts, left_on="start_ns", right_on="_cs", by="window",
                                              strategy="forward", check_sortedness=False)
    keep = first.filter(pl.col("_cs").is_not_null() & (pl.col("_cs") <= pl.col("end_ns"))).select(
        "event_id", "window")
    return ev.filter(pl.col("event_id").is_in(keep["event_id"].implode())).join(keep, on="event_id")


# --------------------------------------------------------------------------- merge


def _replay_token() -> pl.Expr:
    return (pl.when(pl.col("kind") == "memcpy").then(pl.lit(_MEMCPY))
            .when((pl.col("kind") == "memset") | pl.col("name").str.contains("fillBuffer", literal=True))
            .then(pl.lit(_MEMSET)).otherwise(pl.col("name")))


def merge_capture(trace: Trace, captures: Sequence[tuple[str, Trace]]) -> Trace:
    """The execution trace with every graph replay's kernels attributed to virtual copies of the captured ops.

    Parameters
    ----------
    trace
        The execution (replay) trace, loaded (not scanned).
    captures
        `(source name, capture trace)` pairs (`pt.load(..., graph_capture=...)` builds them).

    Returns
    -------
    Trace
        The same tables, plus in `events` one virtual op per copied capture event per replay
        (fresh `event_id`s and `External id`s above the trace's largest, in (rank, launch
        start, capture start) order; times mapped into the launch call's span), the matched
        kernels' `external_id` set to their virtual op's (link `graph_capture`), and three
        tables: `graph_ops` (`GRAPH_OP_COLUMNS`), `graph_kernels` (`GRAPH_KERNEL_COLUMNS`) and
        `graph_launches` (`GRAPH_LAUNCH_COLUMNS`).
        Device rows keep their times.

    Raises
    ------
    TraceError
        A capture trace has no `*StreamBeginCapture` / `*StreamEndCapture` pair.
    """
    if trace.is_lazy:
        msg = "a graph capture merge needs a loaded trace (pt.load), not a scanned dataset"
        raise TraceError(msg)
    acts = trace.device.activities().filter(pl.col("graph_launch_id").is_not_null())
    # ---- capture side: windows, recorded calls, events to copy
    wins, calls, copies = [], [], []
    for ci, (source, cap) in enumerate(captures):
        cev = cap.collect("events")
        w, c = capture_calls(cev)
        if w.is_empty():
            msg = "no *StreamBeginCapture / *StreamEndCapture pair: not a graph capture trace"
            raise TraceError(msg, path=source)
        key = pl.lit(ci, pl.Int64).alias("capture")
        wins.append(w.with_columns(key, pl.lit(source).alias("capture_source")))
        calls.append(c.with_columns(key))
        copies.append(_copied_events(cev, w, c).with_columns(key))
    windows = pl.concat(wins, how="vertical_relaxed").with_columns(
        gw=pl.int_range(pl.len(), dtype=pl.Int64))  # a global window number
    gcalls = pl.concat(calls, how="vertical_relaxed").join(windows.select("capture", "window", "gw"),
                                                           on=["capture", "window"])
    # ---- tokens as integers, both sides in one code space
    rtok = acts.select(_replay_token().alias("t"))["t"]
    all_tok = pl.concat([gcalls["token"], rtok]).to_numpy().astype(object)
    _, codes = np.unique(all_tok, return_inverse=True)
    ccode, rcode = codes[:gcalls.height].astype(np.int64), codes[gcalls.height:].astype(np.int64)
    gcalls = gcalls.with_columns(code=pl.Series(ccode))
    cap_seq = {int(g): part["code"].to_numpy() for (g,), part in gcalls.sort("gw", "position").group_by(
        "gw", maintain_order=True)}
    exact = {seq.tobytes(): g for g, seq in sorted(cap_seq.items(), reverse=True)}
    # ---- replay side: per launch, per stream, in start order
    r = acts.with_columns(code=pl.Series(rcode)).sort("rank", "graph_launch_id", "stream", "start_ns", "event_id")
    r = r.with_row_index("_row")
    match = np.full(r.height, -1, np.int64)  # index into gcalls (global call row), -1 unmatched
    chosen: dict[tuple[int, int], int] = {}
    gcalls = gcalls.sort("gw", "position").with_row_index("_crow")
    first_row = gcalls.group_by("gw").agg(pl.col("_crow").min()).sort("gw")
    base = dict(zip(first_row["gw"].to_list(), first_row["_crow"].to_list(), strict=True))
    memo: dict[bytes, tuple[int, list[np.ndarray]]] = {}
    rows = r["_row"].to_numpy()
    codes_r = r["code"].to_numpy()
    groups = r.group_by("rank", "graph_launch_id", maintain_order=True).agg(
        pl.col("_row").first().alias("lo"), pl.len().alias("n"))
    breaks = np.flatnonzero(np.diff(r["stream"].fill_null(-1).to_numpy()) != 0) + 1  # stream changes
    for rank, launch, lo, n in groups.select("rank", "graph_launch_id", "lo", "n").iter_rows():
        hi = lo + n
        cut = breaks[np.searchsorted(breaks, lo, "right"):np.searchsorted(breaks, hi, "left")]
        bounds = [lo, *cut.tolist(), hi]
        streams = [codes_r[a:b] for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
        sig = b"|".join(s.tobytes() for s in streams)
        if sig not in memo:
            best: tuple[int, int, int, list[np.ndarray]] | None = None  # (matched, -extra, -gw) max
            whole = np.concatenate(streams)
            if len(streams) == 1 and whole.tobytes() in exact:  # fast path: the sequence of a capture
                g = exact[whole.tobytes()]
                memo[sig] = (g, [np.arange(len(whole), dtype=np.int64)])
            else:
                for g, seq in cap_seq.items():
                    pos, got = _align_streams(seq, streams)
                    score = (got, -abs(len(seq) - got), -g)
                    if best is None or score > best[:3]:
                        best = (*score, pos)
                memo[sig] = (-best[2], best[3]) if best is not None and best[0] > 0 else (-1, [])
        g, pos = memo[sig]
        if g < 0:
            continue
        chosen[(rank, launch)] = g
        m = np.concatenate(pos)
        match[rows[lo:hi]] = np.where(m >= 0, m + base[g], -1)
    return _build(trace, r, match, chosen, windows, gcalls, copies)


def _build(trace: Trace, r: pl.DataFrame, match: np.ndarray, chosen: dict[tuple[int, int], int],
           windows: pl.DataFrame, gcalls: pl.DataFrame, copies: list[pl.DataFrame]) -> Trace:
    events = trace.collect("events")
    launches = pl.DataFrame({"rank": [k[0] for k in chosen], "graph_launch_id": [k[1] for k in chosen],
                             "gw": list(chosen.values())},
                            schema={"rank": pl.Int32, "graph_launch_id": pl.Int64, "gw": pl.Int64})
    lrow = events.select(pl.col("rank").cast(pl.Int32), pl.col("event_id").alias("graph_launch_id"),
                         pl.col("start_ns").alias("_ls"), pl.col("dur_ns").clip(0).alias("_ld"), *_TRACK[1:])
    launches = launches.join(lrow, on=["rank", "graph_launch_id"], how="left").sort("rank", "_ls", "graph_launch_id")
    graph_launch = GRAPH_LAUNCH.expr()
    replay_no = events.filter(graph_launch).sort("rank", "start_ns", "event_id").select(
        pl.col("rank").cast(pl.Int32), pl.col("event_id").alias("graph_launch_id"),
        pl.int_range(pl.len(), dtype=pl.Int64).over("rank").alias("graph_replay"))
    launches = launches.join(replay_no, on=["rank", "graph_launch_id"], how="left")
    # ---- virtual ops: the copied events of the chosen window, once per launch
    cols = events.columns
    copied = pl.concat([c.select([x for x in [*cols, "window", "capture"] if x in c.columns]) for c in copies],
                       how="diagonal_relaxed").join(windows.select("capture", "window", "gw", "window_start_ns",
                                                                   "window_end_ns", "capture_source"),
                                                    on=["capture", "window"])
    v = launches.select("rank", "graph_launch_id", "graph_replay", "gw", "_ls", "_ld", *[pl.col(k).alias(f"_l_{k}")
                                                                                     for k in _TRACK[1:]]).join(
        copied.rename({"rank": "_crank", "event_id": "capture_event_id"}), on="gw", how="inner")
    v = v.sort("rank", "_ls", "graph_launch_id", "start_ns", "capture_event_id")
    next_id = int(events.select(pl.col("event_id").max().fill_null(0)).item()) + 1
    next_ext = int(events.select(pl.col("external_id").max().fill_null(0)).item()) + 1
    wd = (pl.col("window_end_ns") - pl.col("window_start_ns")).cast(pl.Int128)

    def mapped(col: str) -> pl.Expr:
        t = pl.col(col).clip(pl.col("window_start_ns"), pl.col("window_end_ns")) - pl.col("window_start_ns")
        scaled = pl.when(wd > 0).then(t.cast(pl.Int128) * pl.col("_ld").cast(pl.Int128) // wd).otherwise(0)
        return (pl.col("_ls") + scaled.cast(pl.Int64)).alias(col)

    v = v.with_columns(
        pl.int_range(pl.len(), dtype=pl.Int64).alias("_i"),
        mapped("start_ns"), mapped("end_ns"),
    ).with_columns(
        event_id=pl.col("_i") + next_id, external_id=pl.col("_i") + next_ext,
        dur_ns=pl.col("end_ns") - pl.col("start_ns"), correlation=pl.lit(None, pl.Int64),
        **{k: pl.col(f"_l_{k}") for k in _TRACK[1:]},
    )
    graph_ops = v.select("rank", "event_id", "graph_launch_id", "graph_replay", "capture_source",
                         "capture_event_id")
    virtual = v.select([pl.col(c).cast(events.schema[c]) if c in v.columns else
                        pl.lit(None, events.schema[c]).alias(c) for c in cols])
    # ---- kernels -> virtual op of the op that made the matched call
    hit = match >= 0
    call = gcalls.select("_crow", "call_id", "op_id", "gw")
    kern = r.select("rank", "event_id", "graph_launch_id").with_columns(_crow=pl.Series(np.where(hit, match, -1)))
    kern = kern.join(call, on="_crow", how="left").join(
        v.select("rank", "graph_launch_id", pl.col("capture_event_id").alias("op_id"),
                 pl.col("event_id").alias("virtual_op_id"), pl.col("external_id").alias("_vext")),
        on=["rank", "graph_launch_id", "op_id"], how="left").join(
        windows.select("gw", "capture_source"), on="gw", how="left")
    graph_kernels = kern.select("rank", "event_id", "graph_launch_id", "capture_source",
                                pl.col("call_id").alias("capture_call_id"),
                                pl.col("op_id").alias("capture_event_id"), "virtual_op_id")
    newext = kern.filter(pl.col("_vext").is_not_null()).select(pl.col("rank").cast(events.schema["rank"]),
                                                                "event_id", "_vext")
    merged = events.join(newext, on=["rank", "event_id"], how="left", maintain_order="left").with_columns(
        external_id=pl.coalesce("_vext", "external_id")).drop("_vext")
    merged = pl.concat([merged, virtual], how="vertical")
    tables = {t: f for t, f in trace.tables.items() if t != "nested"}  # every table (another feature's too)
    tables["events"] = merged
    tables["graph_ops"] = graph_ops
    tables["graph_kernels"] = graph_kernels
    n_calls = gcalls.group_by("gw").agg(pl.len().cast(pl.Int64).alias("n_captured"))
    tables["graph_launches"] = launches.join(windows.select("gw", "capture_source", "window"), on="gw").join(
        n_calls, on="gw", how="left").select("rank", "graph_launch_id", "graph_replay", "capture_source",
                                             pl.col("window").alias("capture_window"), "n_captured")
    return Trace(tables, trace.files)


def graph_replays(activities: pl.DataFrame, graph_launches: pl.DataFrame | None = None,
                  graph_kernels: pl.DataFrame | None = None) -> pl.DataFrame:
    """Per graph launch: the capture matched, kernels matched / unmatched, device time attributed.

    Parameters
    ----------
    activities
        `proftab.device.activities` of the (merged) trace.
    graph_launches, graph_kernels
        The merged trace's `graph_launches` and `graph_kernels` tables (None: no capture merged).

    Returns
    -------
    pl.DataFrame
        `GRAPH_REPLAY_COLUMNS`: `graph_replay` (0, 1, ... per rank by launch start),
        `n_kernels` / `kernel_ns` (the replay's activities and their device time),
        `capture_source` (null: no capture matched), `n_captured`, `n_matched` (kernels
        aligned with a captured call), `n_unmatched`, `n_capture_unmatched` (captured calls
        no kernel took), `attributed_ns` / `attributed_share` (device time now on a virtual
        op, link `graph_capture`; share in [0, 1]).
    """
    g = activities.filter(pl.col("graph_launch_id").is_not_null())
    if graph_kernels is not None and not graph_kernels.is_empty():
        g = g.join(graph_kernels.select(pl.col("rank").cast(g.schema["rank"]), "event_id", "capture_source",
                                        "capture_call_id"), on=["rank", "event_id"], how="left")
    else:
        g = g.with_columns(capture_source=pl.lit(None, pl.String), capture_call_id=pl.lit(None, pl.Int64))
    out = g.group_by("rank", "graph_launch_id").agg(
        pl.col("launch_start_ns").first(), pl.len().cast(pl.Int64).alias("n_kernels"),
        pl.col("dur_ns").sum().alias("kernel_ns"), pl.col("capture_source").drop_nulls().first(),
        pl.col("capture_call_id").is_not_null().sum().cast(pl.Int64).alias("n_matched"),
        pl.col("dur_ns").filter(pl.col("link") == "graph_capture").sum().alias("attributed_ns"),
    ).sort("rank", "launch_start_ns", "graph_launch_id").with_columns(
        graph_replay=pl.int_range(pl.len(), dtype=pl.Int64).over("rank"))
    if graph_launches is not None:
        out = out.join(graph_launches.select(pl.col("rank").cast(out.schema["rank"]), "graph_launch_id",
                                             "n_captured"), on=["rank", "graph_launch_id"], how="left")
    else:
        out = out.with_columns(n_captured=pl.lit(None, pl.Int64))
    return out.with_columns(
        n_unmatched=pl.col("n_kernels") - pl.col("n_matched"),
        n_capture_unmatched=pl.col("n_captured") - pl.col("n_matched"),
        attributed_share=pl.when(pl.col("kernel_ns") > 0).then(pl.col("attributed_ns") / pl.col("kernel_ns")),
    ).select(GRAPH_REPLAY_COLUMNS)
