"""Device time: GPU kernels, memcpy and memset attributed to the ops that launched them.

Every function takes a `proftab.Trace` and returns a new `polars.DataFrame` (Int64 ns
times); the link between activities and ops is computed once per trace and shared.
`Trace.device` offers the same functions as methods. docs/device.md describes the rules.

>>> import proftab as pt
>>> tr = pt.load("data/h100_bert_small.pt.trace.json.gz")      # doctest: +SKIP
>>> tr.device.activities()      # kernel -> launch -> op, with the link used  # doctest: +SKIP
>>> tr.device.summary()         # attributed / unattributed device time per device  # doctest: +SKIP
>>> tr.device.busy(by="device") # union-based busy and idle time  # doctest: +SKIP
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from proftab.api import register_trace_namespace
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
from proftab.device._link import (
    ACTIVITY_CATEGORIES,
    LINKS,
    MARGINS,
    OP_CATEGORIES,
    activities,
    annotation_margins,
    device_events,
    diagnostics,
    self_time,
    unattributed,
)

if TYPE_CHECKING:
    from collections.abc import Sequence

    import polars as pl

    from proftab.trace import Trace

__all__ = [
    "ACTIVITY_CATEGORIES", "CATEGORIES", "DEFAULT_RULES", "LINKS", "MARGINS", "OP_CATEGORIES", "DeviceNamespace",
    "activities", "annotation_margins", "annotations", "busy", "category_expr", "comm_overlap", "copies",
    "copy_summary", "device_events", "diagnostics", "idle", "idle_breakdown", "kernel_categories", "launch_delay",
    "op_device_time", "self_time", "summary", "unattributed",
]


@register_trace_namespace("device")
class DeviceNamespace:
    """`Trace.device`: the device analyses of one trace, as methods.

    Each method is the module function of the same name applied to the trace
    (`tr.device.busy(by="device")` is `proftab.device.busy(tr, by="device")`).
    """

    def __init__(self, trace: Trace) -> None:
        self._trace = trace

    def __repr__(self) -> str:
        return f"<proftab device analyses of {self._trace!r}>"

    def activities(self) -> pl.DataFrame:
        """Kernels, memcpy, memset, syncs with launch, op and `link` (`activities`)."""
        return activities(self._trace)

    def unattributed(self) -> pl.DataFrame:
        """Activities no op owns, with the reason in `link` (`unattributed`)."""
        return unattributed(self._trace)

    def events(self) -> pl.DataFrame:
        """All device events, annotations with Kineto's margin undone (`device_events`)."""
        return device_events(self._trace)

    def summary(self) -> pl.DataFrame:
        """Attributed / unattributed device time per device (`summary`)."""
        return summary(self._trace)

    def diagnostics(self) -> pl.DataFrame:
        """How linking went per rank: counts per rule, cross checks (`diagnostics`)."""
        return diagnostics(self._trace)

    def self_time(self) -> pl.DataFrame:
        """torch's self device time per event (`self_time`)."""
        return self_time(self._trace)

    def ops(self) -> pl.DataFrame:
        """Self / total device time and busy time per host event (`op_device_time`)."""
        return op_device_time(self._trace)

    def busy(self, *, by: Literal["device", "stream"] = "stream",
             window: Literal["device", "trace"] = "device") -> pl.DataFrame:
        """Busy / idle time per stream or device, union based (`busy`)."""
        return busy(self._trace, by=by, window=window)

    def idle(self, *, by: Literal["device", "stream"] = "device") -> pl.DataFrame:
        """Idle gaps split into host / sync / other (`idle`)."""
        return idle(self._trace, by=by)

    def idle_breakdown(self, *, by: Literal["device", "stream"] = "device") -> pl.DataFrame:
        """Idle time per cause per device or stream (`idle_breakdown`)."""
        return idle_breakdown(self._trace, by=by)

    def comm_overlap(self) -> pl.DataFrame:
        """Communication vs compute overlap per device (`comm_overlap`)."""
        return comm_overlap(self._trace)

    def copies(self) -> pl.DataFrame:
        """Every memcpy / memset with bytes and bandwidth (`copies`)."""
        return copies(self._trace)

    def copy_summary(self) -> pl.DataFrame:
        """Copies per device, kind and direction (`copy_summary`)."""
        return copy_summary(self._trace)

    def kernel_categories(self, *, by: Sequence[str] = ("rank", "device")) -> pl.DataFrame:
        """Device time per kernel category (`kernel_categories`)."""
        return kernel_categories(self._trace, by=by)

    def launch_delay(self, *, by: Sequence[str] = ("rank", "device")) -> pl.DataFrame:
        """Launch delay distribution (`launch_delay`)."""
        return launch_delay(self._trace, by=by)

    def annotations(self) -> pl.DataFrame:
        """gpu_user_annotation spans with the work they cover (`annotations`)."""
        return annotations(self._trace)

    def margins(self) -> pl.DataFrame:
        """Kineto's gpu_user_annotation margin per rank (`annotation_margins`)."""
        return annotation_margins(self._trace)
