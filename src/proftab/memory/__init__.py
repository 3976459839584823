"""Memory: the allocation timeline, the peak and what holds it, allocation lifetimes, leaks.

Free functions over the `[memory]` instants (`profile_memory=True`) and the events, exposed as
`tr.memory` (docs/memory.md):

>>> import proftab as pt
>>> tr = pt.load("data/train_cnn.pt.trace.json.gz")
>>> tr.memory.peak()                     # doctest: +SKIP
>>> tr.memory.peak(by="top_op")          # doctest: +SKIP
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import polars as pl

from proftab.api import register_trace_namespace
from proftab.memory._analyses import GROUPINGS, growth, peak, peak_summary
from proftab.memory._core import (
    DEVICE_KEYS,
    EVENT_COLUMNS,
    INSTANT_COLUMNS,
    allocations,
    device_names,
    enclosing_ops,
    memory_events,
    timeline,
)
from proftab.steps import assign_steps, step_windows

if TYPE_CHECKING:
    import os
    from collections.abc import Callable

    from proftab.memory.snapshot import Snapshot
    from proftab.trace import Trace

__all__ = ["DEVICE_KEYS", "GROUPINGS", "MemoryNamespace", "allocations", "device_names", "enclosing_ops", "growth",
           "memory_events", "peak", "peak_summary", "timeline"]

_STEP_COLUMNS = ["rank", "cat", "name", "start_ns", "end_ns", "dur_ns", "event_id"]


@register_trace_namespace("memory")
class MemoryNamespace:
    """`tr.memory`: the memory tables of a trace (computed once per trace and cached)."""

    def __init__(self, trace: Trace) -> None:
        self._trace = trace

    def _cached(self, key: str, compute: Callable[[], pl.DataFrame]) -> pl.DataFrame:
        out: pl.DataFrame = self._trace.cached(f"memory:{key}", compute)
        return out

    def _windows(self) -> pl.DataFrame:
        tr = self._trace
        return self._cached("windows", lambda: step_windows(tr.collect("events", _STEP_COLUMNS)))

    def recorded(self) -> bool:
        """Whether the trace holds `[memory]` events at all (recorded with `profile_memory=True`)."""
        return not self._trace.collect("instants", ["name"]).filter(pl.col("name") == "[memory]").is_empty()

    def events(self) -> pl.DataFrame:
        """The `[memory]` instants in each device's order (`memory_events`)."""
        tr = self._trace
        return self._cached("events", lambda: memory_events(tr.collect("instants", INSTANT_COLUMNS)))

    def timeline(self) -> pl.DataFrame:
        """Allocated and reserved bytes of each device after every event, with `step` (`timeline`)."""
        def compute() -> pl.DataFrame:
            tl = timeline(self.events())
            return assign_steps(tl, self._windows())
        return self._cached("timeline", compute)

    def ops(self, *, stack_depth: int = 5) -> pl.DataFrame:
        """The op, top-level op, module and stack of each memory event (`enclosing_ops`)."""
        tr = self._trace
        return self._cached(f"ops:{stack_depth}", lambda: enclosing_ops(
            self.events(), tr.collect("events", EVENT_COLUMNS), stack_depth=stack_depth))

    def allocations(self, *, stack_depth: int = 5) -> pl.DataFrame:
        """One row per block: alloc/free pairs with lifetimes, ops, module, stack, step (`allocations`)."""
        return self._cached(f"allocations:{stack_depth}", lambda: allocations(
            self.events(), self.ops(stack_depth=stack_depth), self._windows()))

    def peak(self, by: str | None = None) -> pl.DataFrame:
        """Per device the peak (`by=None`), or the blocks live at the peak grouped `by` "op",
        "top_op", "module", "stack", "step" or "allocation" (`peak`).
        """
        return peak(self.timeline(), self.allocations(), by)

    def growth(self, by: str | None = None) -> pl.DataFrame:
        """Per step: bytes allocated and still held at the step's end, optionally by op (`growth`)."""
        return growth(self.allocations(), self._windows(), by)

    def chart(self, *, device: str | None = None, max_points: int = 20_000) -> Any:
        """Allocated and reserved bytes over time, the peak marked, steps shaded (altair; `memory_chart`)."""
        import os

        from proftab.memory._chart import memory_chart

        tr = self._trace
        t0 = tr.collect("events", ["rank", "start_ns"]).group_by("rank").agg(pl.col("start_ns").min().alias("t0"))
        files = ", ".join(os.path.basename(str(f)) for f in tr.files["source_file"][:2])
        return memory_chart(self.timeline(), self.peak(), self._windows(), t0, device=device, max_points=max_points,
                            title=f"memory · {files}")

    def snapshot(self, path: str | os.PathLike[str]) -> Snapshot:
        """Read a `torch.cuda.memory._dump_snapshot` pickle safely and align it to this trace."""
        from proftab.memory.snapshot import align, read_snapshot

        return align(read_snapshot(path), self.events(), self.ops())
