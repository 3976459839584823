"""Writers for flame-graph tools: speedscope JSON and folded stacks."""

from __future__ import annotations

from proftab.export.folded import folded_lines, write_folded
from proftab.export.speedscope import speedscope_document, write_speedscope

__all__ = ["folded_lines", "speedscope_document", "write_folded", "write_speedscope"]
