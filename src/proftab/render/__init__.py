"""Renderers of proftab's own text (`text`); torch's table layout is `proftab.torch.text_table`."""

from __future__ import annotations

from proftab.render.text import fmt_ns, fmt_share, plain_table

__all__ = ["fmt_ns", "fmt_share", "plain_table"]
