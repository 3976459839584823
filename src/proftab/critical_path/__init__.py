"""Critical path: what bounds each step, and what if an op were faster.

A dependency graph per rank and window (a ``ProfilerStep#N``, a host annotation, or an explicit
``(start_ns, end_ns)``, `_windows`): CPU threads, GPU streams, launches, synchronisations (see
`proftab.critical_path._chains` and `_edges` for the edges, `_weights` for their weights, `_graph`
for the stages in order); its longest path by a vectorized pass (`proftab.intervals.dag`, `_path`),
as ordered segments whose durations add up to the path length exactly.
Every selected window is built and solved together, in one pass over the rows of all windows
(O((n + R) log (n + R)), R rows over all windows; `MAX_ROWS` bounds R where windows overlap), never a
loop per window.
docs/critical_path.md describes the rules and compares with HTA.

>>> import proftab as pt
>>> tr = pt.load("data/h100_bert_small.pt.trace.json.gz")            # doctest: +SKIP
>>> tr.critical_path.path(step=6)                                    # doctest: +SKIP
>>> tr.critical_path.summary()                # time per bound_by      # doctest: +SKIP
>>> tr.critical_path.what_if(scale={"gemm": 0.5})                    # doctest: +SKIP
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from proftab.api import register_trace_namespace
from proftab.critical_path._chart import path_chart
from proftab.critical_path._graph import (
    BOUND_BY,
    KINDS,
    MAX_ROWS,
    SYNC_CALLS,
    Graph,
    build_graph,
    build_graphs,
    sync_frame,
    with_stream_free,
)
from proftab.critical_path._overlay import overlay_document, write_overlay
from proftab.critical_path._path import (
    SEGMENT_SCHEMA,
    Solution,
    path_frame,
    scaled_weights,
    solve,
    summary_frame,
    what_if_frame,
)
from proftab.critical_path._windows import Step, windows

if TYPE_CHECKING:
    import os
    from collections.abc import Mapping
    from typing import Any

    import polars as pl

    from proftab.trace import Trace

__all__ = ["BOUND_BY", "KINDS", "MAX_ROWS", "SEGMENT_SCHEMA", "SYNC_CALLS", "CriticalPathNamespace", "Graph",
           "Solution", "Step", "build_graph", "build_graphs", "graph", "graphs", "overlay_document", "path_chart",
           "path_frame", "scaled_weights", "solve", "summary_frame", "sync_frame", "what_if_frame", "windows",
           "write_overlay"]

_NESTED = ["event_id", "rank", "pid", "tid", "cat", "name", "ph", "start_ns", "end_ns", "overrun_ns", "parent_id",
           "depth"]


def graph(nested: pl.DataFrame, activities: pl.DataFrame, sync_args: pl.DataFrame, wins: pl.DataFrame, *,
          tail: bool = False) -> Graph:
    """The graphs of every row of `wins` (`windows`) as one `Graph` (`build_graphs`; `tail`: see it).

    The frames are sorted once, each window's rows taken by binary search, and one vectorized pass
    builds every window's graph: O((n + R) log (n + R)) for n rows and R rows over all windows (R <= n
    unless windows overlap; then `MAX_ROWS` bounds it, a bound on memory, not on the number of windows).
    """
    return build_graphs(nested, with_stream_free(activities), sync_args, wins, tail=tail)


def graphs(nested: pl.DataFrame, activities: pl.DataFrame, sync_args: pl.DataFrame,
           wins: pl.DataFrame, *, tail: bool = False) -> list[Graph]:
    """One `Graph` per row of `wins`: `graph`, split (`Graph.split`)."""
    return graph(nested, activities, sync_args, wins, tail=tail).split()


@register_trace_namespace("critical_path")
class CriticalPathNamespace:
    """`Trace.critical_path`: the critical path of each step (graphs built once and cached)."""

    def __init__(self, trace: Trace) -> None:
        self._trace = trace
        self._graphs: dict[tuple[object, object, bool], Graph] = {}

    def __repr__(self) -> str:
        return f"<proftab critical path of {self._trace!r}>"

    def windows(self, step: Step = None, *, rank: int | None = None) -> pl.DataFrame:
        """The windows `step` selects (`windows`)."""
        return windows(self._trace.collect("events", columns=["rank", "cat", "name", "start_ns", "end_ns", "dur_ns",
                                                              "event_id"]), step, rank)

    def graph(self, step: Step = None, *, rank: int | None = None, tail: bool = False) -> Graph:
        """The dependency graphs of the selected windows, as one `Graph` (cached per selection). `tail`:
        also the device work launched in the window that ends after it (`build_graphs`).
        """
        key = (step, rank, tail)
        if key not in self._graphs:
            tr = self._trace
            nested = tr.cached("critical_path:nested", lambda: tr.collect("nested", columns=_NESTED))
            sync = tr.cached("critical_path:sync", lambda: sync_frame(
                tr.collect("events", columns=["rank", "event_id", "cat", "args", "correlation", "start_ns"])))
            self._graphs[key] = graph(nested, tr.device.activities(), sync, self.windows(step, rank=rank), tail=tail)
        return self._graphs[key]

    def graphs(self, step: Step = None, *, rank: int | None = None, tail: bool = False) -> list[Graph]:
        """One graph per selected window (`graph`, split)."""
        return self.graph(step, rank=rank, tail=tail).split()

    def path(self, step: Step = None, *, rank: int | None = None, scale: Mapping[str, float] | None = None,
             merge: bool = True, tail: bool = False) -> pl.DataFrame:
        """The critical path of each selected window as ordered segments (`path_frame`, all windows in
        one pass).
        """
        return path_frame(self.graph(step, rank=rank, tail=tail), scale, merge=merge)

    def summary(self, step: Step = None, *, rank: int | None = None, by: str = "bound_by",
                limit: int | None = None, tail: bool = False) -> pl.DataFrame:
        """Time on the path per ``bound_by`` (or ``kind``, ``name``, ``step``) with the spread over
        steps (`summary_frame`).
        """
        return summary_frame(self.path(step, rank=rank, tail=tail), by=by, limit=limit)

    def what_if(self, step: Step = None, *, scale: Mapping[str, float], rank: int | None = None,
                tail: bool = False) -> pl.DataFrame:
        """Step time with durations scaled, the cached graphs replayed (`what_if_frame`)."""
        return what_if_frame([self.graph(step, rank=rank, tail=tail)], scale)

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
        g = self.graph(step, rank=rank, tail=tail).window(0)
        nested = tr.collect("nested", columns=["rank", "pid", "pid_text", "tid", "tid_text", "event_id", "name",
                                               "cat", "depth", "start_ns", "end_ns", "dur_ns"])
        label = f"step {g.step}" if g.step is not None else "window"
        labels = track_labels(tr.collect("events"), tr.collect("threads"))
        return path_chart(g, path_frame(g, scale), nested, labels, max_depth=max_depth,
                          title=f"critical path · {label} · rank {g.rank}")
