r"""Make untrusted trace text safe to print: control characters become visible escapes.

Names, shapes and stacks come from the trace file verbatim. Printed to a terminal, an ESC or
OSC sequence could retitle the window or clear the screen, a ``\\r`` or ``\\n`` would split a
table row, and a bidi override would reorder what follows. Text renderers pass such columns
through `sanitize_expr` (vectorized) or `sanitize_text`; HTML, JSON and CSV writers escape on
their own and keep the exact text.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import polars as pl

__all__ = ["CONTROL_CHARS", "sanitize_expr", "sanitize_text"]

#: C0 controls, DEL, C1 controls and the bidi embedding/override/isolate characters
CONTROL_CHARS: tuple[str, ...] = (
    *(chr(c) for c in range(0x20)), "\x7f", *(chr(c) for c in range(0x80, 0xA0)),
    *(chr(c) for c in range(0x202A, 0x202F)), *(chr(c) for c in range(0x2066, 0x206A)),
)


def _escape(ch: str) -> str:
    c = ord(ch)
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


_ESCAPES = [_escape(ch) for ch in CONTROL_CHARS]
_PATTERN = re.compile("[" + "".join(re.escape(ch) for ch in CONTROL_CHARS) + "]")


def sanitize_text(text: str, *, keep: str = "") -> str:
    r"""`text` with every control character (except those in `keep`) as a visible ``\\xNN`` escape."""
    return _PATTERN.sub(lambda m: m.group() if m.group() in keep else _escape(m.group()), text)


def sanitize_expr(expr: pl.Expr) -> pl.Expr:
    """Vectorized `sanitize_text` over a String expression (nulls stay null)."""
    return expr.str.replace_many(list(CONTROL_CHARS), _ESCAPES)
