"""Writers for flame-graph tools: speedscope JSON and folded stacks; `tr.export` on a Trace."""

from __future__ import annotations

from typing import TYPE_CHECKING

from proftab.api import register_trace_namespace
from proftab.export.folded import folded_lines, write_folded
from proftab.export.speedscope import speedscope_document, write_speedscope

if TYPE_CHECKING:
    import os

    from proftab.trace import Trace

__all__ = ["ExportNamespace", "folded_lines", "speedscope_document", "write_folded", "write_speedscope"]


@register_trace_namespace("export")
class ExportNamespace:
    """`tr.export`: write the trace for other tools (`tr.to_parquet` writes a proftab dataset)."""

    def __init__(self, trace: Trace) -> None:
        self._trace = trace

    def speedscope(self, path: str | os.PathLike[str], *, device: bool = True, name: str | None = None) -> None:
        """Write a speedscope file: one evented profile per thread and stream (`write_speedscope`)."""
        write_speedscope(self._trace, path, device=device, name=name)

    def folded(self, path: str | os.PathLike[str] | None = None, *, device: bool = False, by_thread: bool = False,
               merge_steps: bool = True) -> str | None:
        """Folded stacks weighted by self ns for flamegraph tools; the text when `path` is None (`write_folded`)."""
        return write_folded(self._trace, path, device=device, by_thread=by_thread, merge_steps=merge_steps)
