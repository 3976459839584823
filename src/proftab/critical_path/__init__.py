"""Critical path: what bounds each step, and what if an op were faster.

A dependency graph per rank and window (a ``ProfilerStep#N``, a host annotation, or an explicit
``(start_ns, end_ns)``): CPU threads, GPU streams, launches, synchronisations (see
`proftab.critical_path._graph` for the edges); its longest path by a vectorized pass
(`proftab.intervals.dag`), as ordered segments whose durations add up to the path length exactly.
docs/critical_path.md describes the rules and compares with HTA.

>>> import proftab as pt
>>> tr = pt.load("data/h100_bert_small.pt.trace.json.gz")            # doctest: +SKIP
>>> tr.critical_path.path(step=6)                                    # doctest: +SKIP
>>> tr.critical_path.summary()                # time per bound_by      # doctest: +SKIP
>>> tr.critical_path.what_if(scale={"gemm": 0.5})                    # doctest: +SKIP
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import polars as pl

from proftab.api import register_trace_namespace
from proftab.critical_path._chart import path_chart
from proftab.critical_path._graph import BOUND_BY, KINDS, SYNC_CALLS, Graph, build_graph, sync_frame, with_stream_free
from proftab.critical_path._overlay import overlay_document, write_overlay
from proftab.critical_path._path import (
    SEGMENT_SCHEMA,
    Solution,
    Step,
    path_frame,
    scaled_weights,
    solve,
    summary_frame,
    what_if_frame,
    windows,
)
from proftab.exceptions import UsageError

if TYPE_CHECKING:
    import os
    from collections.abc import Mapping
    from typing import Any

    from proftab.trace import Trace

__all__ = ["BOUND_BY", "KINDS", "SEGMENT_SCHEMA", "SYNC_CALLS", "CriticalPathNamespace", "Graph", "Solution", "Step",
           "build_graph", "graphs", "overlay_document", "path_chart", "path_frame", "scaled_weights", "solve",
           "summary_frame", "sync_frame", "what_if_frame", "windows", "write_overlay"]

_NESTED = ["event_id", "rank", "pid", "tid", "cat", "name", "ph", "start_ns", "end_ns", "overrun_ns", "parent_id",
           "depth"]


#: most windows one call analyses (each is its own graph, a few dozen frame operations)
MAX_WINDOWS = 1_000


def graphs(nested: pl.DataFrame, activities: pl.DataFrame, sync_args: pl.DataFrame,
           wins: pl.DataFrame, *, tail: bool = False) -> list[Graph]:
    """One `Graph` per row of `wins` (`windows`); `tail`: see `build_graph`.

    Each window reads only its own rows: `nested` and `activities` are sorted by (rank, start)
    once and sliced by binary search, and the streams' free times are computed once, so many
    short steps cost O(n log n) in all rather than a pass over the trace per step.
    """
    if wins.height > MAX_WINDOWS:
        msg = (f"{wins.height:,} windows (steps) selected; the critical path builds one graph per window and takes "
               f"at most {MAX_WINDOWS:,} at once: pick some with step= / --step, rank= / --rank or a window")
        raise UsageError(msg)
    act = with_stream_free(activities)
    nested_by = _Sliced(nested, "start_ns")
    act_by = _Sliced(act, "start_ns")
    launch_by = _Sliced(act.filter(pl.col("launch_start_ns").is_not_null()), "launch_start_ns") if tail else None
    out = []
    for r, st, s, e, ev in wins.select("rank", "step", "start_ns", "end_ns", "event_id").iter_rows():
        a = act_by.window(r, s, None if tail else e)
        if launch_by is not None:  # tail: work launched in the window may start after it
            a = pl.concat([a, launch_by.window(r, s, e)]).unique("event_id", keep="first", maintain_order=True)
        out.append(build_graph(nested_by.window(r, s, e), a, sync_args, rank=r, start_ns=s, end_ns=e, step=st,
                               window_event=ev, tail=tail))
    return out


class _Sliced:
    """A frame sorted by (rank, `on`), sliced per window by binary search."""

    def __init__(self, frame: pl.DataFrame, on: str) -> None:
        self.frame = frame.sort("rank", on)
        self.rank = self.frame["rank"].to_numpy()
        self.at = self.frame[on].fill_null(np.iinfo(np.int64).min).to_numpy()

    def window(self, rank: int, lo: int, hi: int | None) -> pl.DataFrame:
        """Rows of `rank` with `on` in [lo, hi] (hi None: no upper bound)."""
        a, b = int(np.searchsorted(self.rank, rank, "left")), int(np.searchsorted(self.rank, rank, "right"))
        at = self.at[a:b]
        i = a + int(np.searchsorted(at, lo, "left"))
        j = b if hi is None else a + int(np.searchsorted(at, hi, "right"))
        return self.frame.slice(i, max(int(j) - i, 0))


@register_trace_namespace("critical_path")
class CriticalPathNamespace:
    """`Trace.critical_path`: the critical path of each step (graphs built once and cached)."""

    def __init__(self, trace: Trace) -> None:
        self._trace = trace
        self._graphs: dict[tuple[object, object, bool], list[Graph]] = {}

    def __repr__(self) -> str:
        return f"<proftab critical path of {self._trace!r}>"

    def windows(self, step: Step = None, *, rank: int | None = None) -> pl.DataFrame:
        """The windows `step` selects (`windows`)."""
        return windows(self._trace.collect("events", columns=["rank", "cat", "name", "start_ns", "end_ns", "dur_ns",
                                                              "event_id"]), step, rank)

    def graphs(self, step: Step = None, *, rank: int | None = None, tail: bool = False) -> list[Graph]:
        """The dependency graphs of the selected windows (cached per selection). `tail`: also the
        device work launched in the window that ends after it (`build_graph`).
        """
        key = (step, rank, tail)
        if key not in self._graphs:
            tr = self._trace
            nested = tr.cached("critical_path:nested", lambda: tr.collect("nested", columns=_NESTED))
            sync = tr.cached("critical_path:sync", lambda: sync_frame(
                tr.collect("events", columns=["rank", "event_id", "cat", "args", "correlation", "start_ns"])))
            self._graphs[key] = graphs(nested, tr.device.activities(), sync, self.windows(step, rank=rank), tail=tail)
        return self._graphs[key]

    def path(self, step: Step = None, *, rank: int | None = None, scale: Mapping[str, float] | None = None,
             merge: bool = True, tail: bool = False) -> pl.DataFrame:
        """The critical path of each selected window as ordered segments (`path_frame`)."""
        frames = [path_frame(g, scale, merge=merge) for g in self.graphs(step, rank=rank, tail=tail)]
        return pl.concat(frames) if frames else pl.DataFrame(schema=SEGMENT_SCHEMA)

    def summary(self, step: Step = None, *, rank: int | None = None, by: str = "bound_by",
                limit: int | None = None, tail: bool = False) -> pl.DataFrame:
        """Time on the path per ``bound_by`` (or ``kind``, ``name``, ``step``) with the spread over
        steps (`summary_frame`).
        """
        return summary_frame(self.path(step, rank=rank, tail=tail), by=by, limit=limit)

    def what_if(self, step: Step = None, *, scale: Mapping[str, float], rank: int | None = None,
                tail: bool = False) -> pl.DataFrame:
        """Step time with durations scaled, the cached graphs replayed (`what_if_frame`)."""
        return what_if_frame(self.graphs(step, rank=rank, tail=tail), scale)

    def overlay(self, out: str | os.PathLike[str], step: Step = None, *, rank: int | None = None,
                scale: Mapping[str, float] | None = None, tail: bool = False) -> None:
        """Write the trace as Chrome JSON with the path marked and flow arrows along it (`write_overlay`)."""
        tr = self._trace
        write_overlay(tr.collect("events", columns=["rank", "event_id", "pid", "tid", "cat", "name", "ph", "start_ns",
                                                     "dur_ns", "args"]),
                      tr.collect("threads"), self.path(step, rank=rank, scale=scale, tail=tail), out)

    def chart(self, step: Step = None, *, rank: int | None = None, scale: Mapping[str, float] | None = None,
              max_depth: int = 2, tail: bool = False) -> Any:
        """Timeline of the first selected window with its path highlighted (`path_chart`)."""
        from proftab.tracks import track_labels

        tr = self._trace
        g = self.graphs(step, rank=rank, tail=tail)[0]
        nested = tr.collect("nested", columns=["rank", "pid", "pid_text", "tid", "tid_text", "event_id", "name",
                                               "cat", "depth", "start_ns", "end_ns", "dur_ns"])
        label = f"step {g.step}" if g.step is not None else "window"
        labels = track_labels(tr.collect("events"), tr.collect("threads"))
        return path_chart(g, path_frame(g, scale), nested, labels, max_depth=max_depth,
                          title=f"critical path · {label} · rank {g.rank}")
