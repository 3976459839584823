"""Text renderers."""

from __future__ import annotations

from proftab.render.torch_table import render_table

__all__ = ["render_table"]
