"""The windows of a critical path (steps, annotations, explicit spans) and the rows each window holds.

`windows` names the windows a `step` selects. `window_rows` takes, for every window at once, the
host ops and the device work inside it (with `tail`: also the work the window launched that ends
after it) and the sync rows, by binary search over frames sorted once (`_Sliced`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from proftab import kinds
from proftab.calls import CUDA_HIP, LAUNCH, MEMCPY, MEMSET, SYNC, any_call
from proftab.critical_path._segments import BOUND_CODE
from proftab.exceptions import ProftabError, UsageError
from proftab.intervals.tree import row_positions
from proftab.steps import named_windows, step_windows

__all__ = ["MAX_ROWS", "Step", "WindowRows", "window_rows", "windows"]

#: a step: ProfilerStep number, an annotation name, an explicit (start_ns, end_ns) window, or None (all steps)
Step = int | str | tuple[int, int] | None
#: most rows (host or device) the selected windows may hold together, unless the trace has more: a
#: window holds the rows inside it, so only windows that overlap can hold more rows than the trace
#: (their shared rows once each). A bound on memory, not on the number of windows
MAX_ROWS = 10_000_000
_WORK_KINDS = ["kernel", "memcpy", "memset"]


def windows(events: pl.DataFrame, step: Step = None, rank: int | None = None) -> pl.DataFrame:
    """The windows `step` names, per rank: ``rank``, ``step``, ``start_ns``, ``end_ns``, ``event_id``.

    `step` is a ``ProfilerStep#N`` number, a host annotation name (each occurrence is a window,
    ``step`` = its index), an explicit ``(start_ns, end_ns)``, or None: every ProfilerStep (the
    whole trace per rank when there is none: first event start to last event end, profiler spans
    left out).
    """
    ev = events if rank is None else events.filter(pl.col("rank") == rank)
    cols = ["rank", "step", "start_ns", "end_ns", "event_id"]
    if isinstance(step, tuple):
        if len(step) != 2 or not all(isinstance(t, int | np.integer) and -(2**63) <= int(t) < 2**63 for t in step) \
                or int(step[0]) > int(step[1]):
            msg = f"an explicit window is (start_ns, end_ns), two int64 ns with start <= end, not {step!r:.100}"
            raise UsageError(msg)
        ranks = ev.select(pl.col("rank").unique().sort())
        return ranks.with_columns(step=pl.lit(None, pl.Int64), start_ns=pl.lit(int(step[0]), pl.Int64),
                                  end_ns=pl.lit(int(step[1]), pl.Int64), event_id=pl.lit(None, pl.Int64))
    if isinstance(step, str):
        w = named_windows(ev, step)
        if w.is_empty():
            msg = f"no host annotation named {step!r}"
            raise ProftabError(msg)
        return w.select(cols)
    sw = step_windows(ev)
    if step is not None:
        sw = sw.filter(pl.col("step") == int(step))
        if sw.is_empty():
            msg = f"no ProfilerStep#{step} in the trace (steps: {sorted(set(step_windows(ev)['step'].to_list()))!r})"
            raise ProftabError(msg)
    if sw.is_empty():
        return (ev.filter(~kinds.is_profiler_span()).group_by("rank")
                .agg(pl.col("start_ns").min(), pl.col("end_ns").max()).sort("rank")
                .with_columns(step=pl.lit(None, pl.Int64), event_id=pl.lit(None, pl.Int64)).select(cols))
    return sw.select(cols)


class _Sliced:
    """A frame sorted by (rank, `on`), its rows taken per window by binary search."""

    def __init__(self, frame: pl.DataFrame, on: str) -> None:
        self.frame = frame.sort("rank", on, "event_id")  # event_id: ties in one order, whatever the window
        self.rank = self.frame["rank"].to_numpy()
        self.at = self.frame[on].fill_null(np.iinfo(np.int64).min).to_numpy()

    def take(self, rank: np.ndarray, lo: np.ndarray, hi: np.ndarray | None, what: str) -> pl.DataFrame:
        """Rows of each window ``k`` (`rank[k]`, `on` in [lo[k], hi[k]]; hi None: no upper bound),
        concatenated in window order with its index ``win``. O(windows log n + rows); a loop runs
        per rank, never per window. More rows in all than the frame's and `MAX_ROWS` (only windows
        that overlap, which hold their shared rows once each, can reach it) is a `ProftabError`.
        """
        k = len(rank)
        i = np.zeros(k, np.int64)
        j = np.zeros(k, np.int64)
        for r in np.unique(rank):
            m = rank == r
            a, b = int(np.searchsorted(self.rank, r, "left")), int(np.searchsorted(self.rank, r, "right"))
            at = self.at[a:b]
            i[m] = a + np.searchsorted(at, lo[m], "left")
            j[m] = b if hi is None else a + np.searchsorted(at, hi[m], "right")
        n = np.maximum(j - i, 0)
        total = int(n.sum())
        limit = max(MAX_ROWS, self.frame.height)
        if total > limit:
            msg = (f"the {k:,} selected windows hold {total:,} {what} rows together (the trace has "
                   f"{self.frame.height:,}: windows that overlap hold their shared rows once each); the critical "
                   f"path takes at most {limit:,}: select fewer or shorter windows (step= / --step, rank= / --rank, "
                   "a window)")
            raise ProftabError(msg)
        win = np.repeat(np.arange(k, dtype=np.int64), n)
        idx = np.repeat(i - (np.cumsum(n) - n), n) + np.arange(total, dtype=np.int64)
        return self.frame[pl.Series(idx)].with_columns(win=pl.Series(win, dtype=pl.Int64))


@dataclass(frozen=True)
class WindowRows:
    """The rows of every window, each frame sorted by window first (column ``win``).

    `host`: host ops with ``end_eff``, ``kind``, ``bound``, ``is_sync``, ``category``; `dev`: device
    work with ``bound`` and ``kind`` as strings; `syncs`: the ``cuda_sync`` rows with their
    `sync_frame` args. `lo` holds each window's start; `hwin`, `dwin`, `swin` each row's window.
    """

    wins: pl.DataFrame
    lo: np.ndarray
    host: pl.DataFrame
    dev: pl.DataFrame
    syncs: pl.DataFrame
    hwin: np.ndarray
    dwin: np.ndarray
    swin: np.ndarray

    @property
    def k(self) -> int:
        """Number of windows."""
        return self.wins.height

    def host_row(self, win: np.ndarray, ids: np.ndarray) -> np.ndarray:
        """The `host` row of event `ids[i]` in window `win[i]` (-1: none there)."""
        return row_positions(self.hwin, self.host["event_id"].to_numpy(), win, ids)


def window_rows(nested: pl.DataFrame, activities: pl.DataFrame, sync_args: pl.DataFrame, wins: pl.DataFrame, *,
                tail: bool) -> WindowRows:
    """The host ops, device work and sync rows of every window of `wins` (`build_graphs` gives the columns).

    A host op or device work belongs to a window when it lies wholly inside it; with `tail`, the
    device work launched inside the window belongs to it wherever it ends, and so does the work
    without a launch and the collectives that start inside the window and end before the tail does.
    """
    w_rank = wins["rank"].to_numpy()
    w_lo = wins["start_ns"].to_numpy().astype(np.int64)
    w_hi = wins["end_ns"].to_numpy().astype(np.int64)
    bounds = pl.DataFrame({"win": np.arange(wins.height, dtype=np.int64), "_w0": w_lo, "_w1": w_hi})

    def with_bounds(df: pl.DataFrame) -> pl.DataFrame:
        return df.join(bounds, on="win", how="left", maintain_order="left")

    host = _host_rows(with_bounds(_Sliced(nested, "start_ns").take(w_rank, w_lo, w_hi, "host")))
    work_kind = pl.col("kind").cast(pl.String).is_in(_WORK_KINDS)
    by_start = _Sliced(activities, "start_ns")
    in_win = with_bounds(by_start.take(w_rank, w_lo, w_hi, "device"))
    if tail:  # the work each window launched, wherever it ends (and unlaunched work inside the window)
        launched = with_bounds(_Sliced(activities.filter(pl.col("launch_start_ns").is_not_null()), "launch_start_ns")
                               .take(w_rank, w_lo, w_hi, "device")).filter(
            work_kind & (pl.col("start_ns") >= pl.col("_w0")))
        # unlaunched work (its launch not in the trace: NCCL kernels of a ROCm trace) and collectives
        # launched earlier, which the window's work may wait on, up to the tail's end
        tail_end = w_hi.copy()
        np.maximum.at(tail_end, launched["win"].to_numpy(), launched["end_ns"].to_numpy())
        unl = by_start.take(w_rank, w_lo, tail_end, "device")
        unl = with_bounds(unl).with_columns(_te=pl.Series(tail_end[unl["win"].to_numpy()], dtype=pl.Int64)).filter(
            work_kind & (pl.col("launch_start_ns").is_null() | (pl.col("category") == "communication"))
            & (pl.col("end_ns") <= pl.col("_te"))).drop("_te")
        dev_rows = pl.concat([launched, unl]).unique(["win", "event_id"], keep="first", maintain_order=True)
    else:
        dev_rows = in_win.filter(work_kind & (pl.col("end_ns") <= pl.col("_w1")))
    dev = (dev_rows.sort("win", "device", "stream", "start_ns", "end_ns", "event_id")
           .with_columns(bound=_device_bound(pl.col("kind").cast(pl.String), pl.col("category")),
                         kind=pl.col("kind").cast(pl.String)))
    syncs = in_win.filter((pl.col("kind").cast(pl.String) == "sync") & (pl.col("end_ns") <= pl.col("_w1")))
    syncs = syncs.join(sync_args, on=["rank", "event_id"], how="left", maintain_order="left")
    return WindowRows(wins=wins, lo=w_lo, host=host, dev=dev, syncs=syncs, hwin=host["win"].to_numpy(),
                      dwin=dev["win"].to_numpy(), swin=syncs["win"].to_numpy())


def _device_bound(kind: pl.Expr, category: pl.Expr) -> pl.Expr:
    return (pl.when(kind.is_in(["memcpy", "memset"])).then(pl.lit(BOUND_CODE["gpu_memcpy_bound"]))
            .when(category == "communication").then(pl.lit(BOUND_CODE["gpu_communication_bound"]))
            .otherwise(pl.lit(BOUND_CODE["gpu_compute_bound"]))).cast(pl.Int8)


def _host_rows(nested: pl.DataFrame) -> pl.DataFrame:
    """The host ops of each window (`nested` rows already taken per window: ``win``, ``_w0``, ``_w1``)."""
    end = pl.col("end_ns") - pl.col("overrun_ns").fill_null(0)
    rt = kinds.is_runtime()
    sync = rt & SYNC.expr(apis=CUDA_HIP)
    return (
        nested.filter(kinds.is_host_op() & (pl.col("ph").cast(pl.String) == "X")
                      & (pl.col("start_ns") >= pl.col("_w0")) & (end <= pl.col("_w1")))
        .with_columns(end_eff=pl.max_horizontal(end, pl.col("start_ns")))
        .sort("win", "pid", "tid", "start_ns", pl.col("end_eff"), "event_id",
              descending=[False, False, False, False, True, False])
        .with_columns(
            kind=pl.when(sync).then(pl.lit("sync_wait")).when(rt).then(pl.lit("runtime"))
            .otherwise(pl.lit("cpu_op")),
            bound=pl.when(sync).then(pl.lit(BOUND_CODE["sync"]))
            .when(rt & any_call(LAUNCH, MEMCPY, MEMSET)).then(
                pl.lit(BOUND_CODE["launch_overhead"]))
            .otherwise(pl.lit(BOUND_CODE["cpu_bound"])).cast(pl.Int8),
            is_sync=sync, category=pl.lit(None, pl.String))
    )
