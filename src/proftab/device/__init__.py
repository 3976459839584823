"""Device time: GPU kernels, memcpy and memset attributed to the ops that launched them.

Free functions over frames (polars DataFrames in, a new DataFrame out, Int64 ns times), so
they run on a trace's tables or on a user's own frames. The base frames are `events` (the
events table), `flows`, `nested` and `files` (one row per rank with `time_resolution_ns`);
the intermediate ones are built in this order::

    margins = annotation_margins(events, files)
    dev = device_events(events, margins)
    acts = activities(events, dev)

and every analysis takes the frames it needs (`busy(acts)`, `op_device_time(acts, nested)`,
`self_time(acts, dev)`, ...). `Trace.device` (`DeviceNamespace`) computes the intermediates
once per trace and offers every analysis as a method. docs/device.md describes the rules.

>>> import proftab as pt
>>> tr = pt.load("data/h100_bert_small.pt.trace.json.gz")      # doctest: +SKIP
>>> tr.device.activities()      # kernel -> launch -> op, with the link used  # doctest: +SKIP
>>> tr.device.summary()         # attributed / unattributed device time per device  # doctest: +SKIP
>>> tr.device.busy(by="device") # union-based busy and idle time  # doctest: +SKIP
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, cast

from proftab import kinds
from proftab.api import register_trace_namespace
from proftab.device import _analyses
from proftab.device._analyses import (
    annotations,
    busy,
    comm_overlap,
    copies,
    copy_summary,
    idle,
    idle_breakdown,
    kernel_categories,
    launch_delay,
    op_device_time,
    summary,
)
from proftab.device._categories import CATEGORIES, DEFAULT_RULES, category_expr
from proftab.device._diagnostics import diagnostics
from proftab.device._events import DEVICE_EVENT_COLUMNS, EVENT_COLUMNS, annotation_margins, device_events
from proftab.device._graphs import align, capture_calls, graph_replays, merge_capture
from proftab.device._link import activities, self_time, unattributed
from proftab.device._rules import ACTIVITY_CATEGORIES, LINKS, MARGINS, OP_CATEGORIES

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    import polars as pl

    from proftab.trace import Trace

__all__ = [
    "ACTIVITY_CATEGORIES", "CATEGORIES", "DEFAULT_RULES", "DEVICE_EVENT_COLUMNS", "EVENT_COLUMNS", "LINKS", "MARGINS",
    "OP_CATEGORIES", "DeviceNamespace", "activities", "annotation_margins", "annotations", "busy", "category_expr",
    "align", "capture_calls", "comm_overlap", "copies", "copy_summary", "device_events", "diagnostics",
    "graph_replays", "idle", "idle_breakdown", "kernel_categories", "launch_delay", "merge_capture",
    "op_device_time", "self_time", "summary", "unattributed",
]

#: the columns of `Trace.nested` and `Trace.flows` the analyses read
NESTED_COLUMNS = ["rank", "event_id", "parent_id", "name", "cat", "start_ns", "end_ns", "dur_ns"]
FLOW_COLUMNS = ["rank", "cat", "id", "pid", "tid", "start_ns"]


@register_trace_namespace("device")
class DeviceNamespace:
    """`Trace.device`: the device analyses of one trace, as methods.

    Each method is the free function of the same name (or the one named in its docstring)
    applied to the trace's frames; `margins`, `events`, `activities` and `diagnostics` are
    computed once per trace (`Trace.cached`). A scanned dataset reads only the columns the analyses need.
    """

    def __init__(self, trace: Trace) -> None:
        self._trace = trace

    def __repr__(self) -> str:
        return f"<proftab device analyses of {self._trace!r}>"

    # ------------------------------------------------------------------ frames

    def _cached(self, name: str, compute: Callable[[], pl.DataFrame]) -> pl.DataFrame:
        out: pl.DataFrame = self._trace.cached(f"device:{name}", compute)
        return out

    def _events(self) -> pl.DataFrame:
        """The events table, the columns the device functions read (`EVENT_COLUMNS`)."""
        return self._cached("event_columns", lambda: self._trace.collect("events", EVENT_COLUMNS))

    def _device_rows(self) -> pl.DataFrame:
        """The events `device_events` reads, with `args`: a scan reads the device rows only."""
        if self._trace.is_lazy:
            return self._trace.lazy("events").select(DEVICE_EVENT_COLUMNS).filter(kinds.is_device()).collect()
        return self._trace.collect("events", DEVICE_EVENT_COLUMNS)  # device_events filters

    def _files(self) -> pl.DataFrame:
        return self._trace.collect("files", ["rank", "time_resolution_ns"])

    # ------------------------------------------------------------------ linking

    def margins(self) -> pl.DataFrame:
        """Kineto's gpu_user_annotation margin per rank (`annotation_margins`)."""
        return self._cached("margins", lambda: annotation_margins(self._events(), self._files()))

    def events(self) -> pl.DataFrame:
        """All device events, annotations with Kineto's margin undone (`device_events`)."""
        return self._cached("device_events", lambda: device_events(self._device_rows(), self.margins()))

    def activities(self) -> pl.DataFrame:
        """Kernels, memcpy, memset, syncs with launch, op and `link` (`activities`)."""
        return self._cached("activities", lambda: activities(self._events(), self.events()))

    def unattributed(self) -> pl.DataFrame:
        """Activities no op owns, with the reason in `link` (`unattributed`)."""
        return unattributed(self.activities())

    def diagnostics(self) -> pl.DataFrame:
        """How linking went per rank: counts per rule, cross checks (`diagnostics`)."""
        return self._cached("diagnostics", lambda: diagnostics(
            self._events(), self._trace.collect("flows", FLOW_COLUMNS), self.activities(), self.events(),
            self.margins(), self._files()))

    def self_time(self) -> pl.DataFrame:
        """Self device time per event, as torch counts it (`self_time`)."""
        return self_time(self.activities(), self.events())

    def graph_replays(self) -> pl.DataFrame:
        """Per CUDA / HIP graph launch: capture matched, kernels matched, device time attributed (`graph_replays`).

        Without a capture merge (`pt.load(..., graph_capture=...)`) the capture columns are null
        and nothing is attributed: the kernels belong to the graph launch.
        """
        tables = self._trace.tables
        merged = "graph_kernels" in tables
        return graph_replays(self.activities(), self._trace.collect("graph_launches") if merged else None,
                             self._trace.collect("graph_kernels") if merged else None)

    # ------------------------------------------------------------------ analyses

    def summary(self) -> pl.DataFrame:
        """Attributed / unattributed device time per device (`summary`)."""
        return summary(self.activities())

    def ops(self) -> pl.DataFrame:
        """Self / total device time and busy time per host event (`op_device_time`)."""
        return op_device_time(self.activities(), self._trace.collect("nested", NESTED_COLUMNS))

    def busy(self, *, by: Literal["device", "stream"] = "stream",
             window: Literal["device", "trace"] = "device") -> pl.DataFrame:
        """Busy / idle time per stream or device, union based (`busy`)."""
        return busy(self.activities(), self._events() if window == "trace" else None, by=by, window=window)

    def idle(self, *, by: Literal["device", "stream"] = "device") -> pl.DataFrame:
        """Idle gaps split into host / sync / other (`idle`)."""
        return idle(self.activities(), self._events(), by=by)

    def idle_breakdown(self, *, by: Literal["device", "stream"] = "device") -> pl.DataFrame:
        """Idle time per cause per device or stream (`idle_breakdown`)."""
        return idle_breakdown(self.activities(), self._events(), by=by)

    def comm_overlap(self) -> pl.DataFrame:
        """Communication vs compute overlap per device (`comm_overlap`)."""
        return comm_overlap(self.activities())

    def copies(self) -> pl.DataFrame:
        """Every memcpy / memset with bytes and bandwidth (`copies`)."""
        return copies(self.activities(), self.events())

    def copy_summary(self) -> pl.DataFrame:
        """Copies per device, kind and direction (`copy_summary`)."""
        return copy_summary(self.activities(), self.events())

    def kernel_categories(self, *, by: Sequence[str] = ("rank", "device")) -> pl.DataFrame:
        """Device time per kernel category (`kernel_categories`)."""
        return kernel_categories(self.activities(), by=by)

    def launch_delay(self, *, by: Sequence[str] = ("rank", "device")) -> pl.DataFrame:
        """Launch delay distribution (`launch_delay`)."""
        return launch_delay(self.activities(), by=by)

    def annotations(self) -> pl.DataFrame:
        """gpu_user_annotation spans with the work they cover (`annotations`)."""
        # mypy takes the name `annotations` for `from __future__ import annotations`
        fn = cast("Callable[[pl.DataFrame, pl.DataFrame], pl.DataFrame]", _analyses.annotations)
        return fn(self._events(), self.events())
