r"""The one table renderer of the command line: a DataFrame in, text (or a rich table) out.

Every subcommand's text output goes through `render_frame`:

* **formats** come from the column vocabulary (docs/schema.md): ``*_ns`` as human times
  (``1.234ms``), ``*_bytes`` in binary units, ``share`` / ``*_share`` (fractions) and ``*_pct``
  as percentages, ``n_*`` counts with thousands separators, other floats rounded to 3 decimals
  (never ``1.113599283047496``); a `Col` overrides any of it;
* **units in headers**: a header names the unit when the cells do not (``TFLOP/s``, ``TB/s``);
  a ``*_ns`` / ``*_bytes`` header drops the suffix, as its cells carry the unit (``1.234ms``,
  ``9.955 MiB``, ``12.50%``);
* **safe**: every cell, header, title and note passes `sanitize_text` (control characters,
  ``\n``, OSC/CSI, bidi overrides and C1 as visible escapes), and rich receives `rich.text.Text`
  objects, never markup (``aten::bad[/nope]`` prints as is, ``[link=...]`` stays text);
* **fits** a terminal: columns with a drop rank are left out, lowest rank first, until the
  table fits `width`, the cut column (a name) is shortened in the middle so that different
  names never print the same, and a note says which columns were left out. Plain text (piped,
  ``--plain``, files) keeps every column and full names.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from proftab.render.sanitize import sanitize_text
from proftab.render.text import distinct_cuts, fmt_bytes, fmt_ns, fmt_share, middle_cut
from proftab.units import BYTES_SUFFIX, NS_SUFFIX, UNIT_HEADERS, is_count, unit_of

if TYPE_CHECKING:
    from collections.abc import Sequence

    import polars as pl

__all__ = ["KINDS", "Col", "fit", "format_cell", "plain_text", "render_frame", "rich_table"]

#: cell formats a `Col` may name
KINDS = ("ns", "ns_signed", "bytes", "bytes_signed", "share", "share_signed", "pct", "count", "int", "float",
         "sci", "text")

#: headers with the unit the bare numbers are in (`proftab.units.UNIT_HEADERS`)
_UNIT_HEADERS = UNIT_HEADERS
_MIN_CUT = 44  # the name width worth dropping columns for


@dataclass(frozen=True)
class Col:
    """How one column of a frame prints.

    Attributes
    ----------
    name
        The frame's column.
    header
        The header (default: derived from the name and its unit, see the module docstring).
    kind
        One of `KINDS` (default: from the name and dtype).
    drop
        Rank in which the column is left out to fit a terminal (lowest first); None: always shown.
    cut
        Shorten this column's text in the middle to fit (a name column).
    max_width
        Widest cell also in plain text (cut in the middle, distinct); None: full text.
    align
        ``"<"`` or ``">"`` (default: numbers right, text left).
    """

    name: str
    header: str | None = None
    kind: str | None = None
    drop: int | None = None
    cut: bool = False
    max_width: int | None = None
    align: str | None = None


def _kind(name: str, dtype: pl.DataType) -> str:
    """The cell format of a column named `name` of type `dtype` (the vocabulary of docs/schema.md)."""
    unit = unit_of(name)
    if unit == "ns":
        return "ns" if dtype.is_numeric() else "text"
    if unit in ("bytes", "share", "pct") and dtype.is_numeric():
        return unit
    if is_count(name) and dtype.is_integer():
        return "count"
    if name in ("flops", "bytes") and dtype.is_integer():
        return "sci"
    if dtype.is_float():
        return "float"
    if dtype.is_integer():
        return "int"
    return "text"


def _header(name: str, kind: str) -> str:
    if name in _UNIT_HEADERS:
        return _UNIT_HEADERS[name]
    if kind in ("ns", "ns_signed") and name != "ns":
        return name.removesuffix(NS_SUFFIX)
    if kind in ("bytes", "bytes_signed") and name.endswith(BYTES_SUFFIX):
        return name.removesuffix(BYTES_SUFFIX)
    return name


def format_cell(value: Any, kind: str) -> str:
    """One cell's text in format `kind` (``""`` for null and NaN; not yet sanitized)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    if isinstance(value, list):
        return "; ".join("" if v is None else str(v) for v in value)
    if kind in ("ns", "ns_signed") and isinstance(value, int | float):
        return fmt_ns(value, signed=kind == "ns_signed")
    if kind in ("bytes", "bytes_signed") and isinstance(value, int | float):
        return fmt_bytes(value, signed=kind == "bytes_signed")
    if kind in ("share", "share_signed") and isinstance(value, int | float):
        return fmt_share(value, signed=kind == "share_signed")
    if kind == "pct" and isinstance(value, int | float):
        return "" if math.isinf(value) else f"{value:.2f}%"
    if kind == "count" and isinstance(value, int):
        return f"{value:,}"
    if kind == "sci" and isinstance(value, int | float):
        return f"{value:.3e}" if abs(value) >= 10**6 else str(value)
    if isinstance(value, float):
        return "inf" if math.isinf(value) else f"{value:.3f}"
    return str(value)


def _columns(df: pl.DataFrame, cols: Sequence[Col] | None) -> list[Col]:
    """`cols` completed: every column of `df` when None, each with its kind and header."""
    given = list(cols) if cols is not None else [Col(c) for c in df.columns]
    out = []
    for c in given:
        kind = c.kind or _kind(c.name, df.schema[c.name])
        out.append(Col(c.name, c.header if c.header is not None else _header(c.name, kind), kind, c.drop, c.cut,
                       c.max_width, c.align))
    return out


def _cells(df: pl.DataFrame, cols: Sequence[Col]) -> dict[str, list[str]]:
    """Sanitized cell text per column (one pass per column), cut to each column's `max_width`."""
    out = {}
    for c in cols:
        text = [sanitize_text(format_cell(v, c.kind or "text")) for v in df[c.name].to_list()]
        if c.max_width is not None:
            text = distinct_cuts(text, [middle_cut(v, c.max_width) for v in text])
        out[c.name] = text
    return out


def _align(df: pl.DataFrame, c: Col) -> str:
    if c.align is not None:
        return c.align
    return ">" if c.kind not in ("text",) and df.schema[c.name].is_numeric() else "<"


def fit(headers: dict[str, str], cells: dict[str, list[str]], cols: Sequence[Col],
        width: int) -> tuple[list[Col], list[str], dict[str, list[str]]]:
    """The columns that fit `width` (dropped by rank), the headers left out, and the cut cells.

    A rich table costs each column its widest cell + 3 (padding and border) and 4 more.
    """
    shown = list(cols)
    cut_col = next((c for c in shown if c.cut), None)

    def need(cs: Sequence[Col]) -> int:
        return sum(max([len(headers[c.name]), *map(len, cells[c.name])]) + 3
                   for c in cs if c is not cut_col) + 4 + (3 if cut_col is not None else 0)

    longest = max([len(headers[cut_col.name]), *map(len, cells[cut_col.name])]) if cut_col else 0
    dropped: list[str] = []
    # the cut column names the rows: it is shortened, never dropped (whatever its drop rank)
    for c in sorted((c for c in shown if c.drop is not None and c is not cut_col), key=lambda c: c.drop or 0):
        room = width - need(shown)
        if room >= (min(_MIN_CUT, longest) if cut_col else 0):
            break
        shown.remove(c)
        dropped.append(headers[c.name])
    out = dict(cells)
    if cut_col is not None:
        name_w = max(min(longest, width - need(shown)), 8)
        full = cells[cut_col.name]
        out[cut_col.name] = distinct_cuts(full, [middle_cut(v, name_w) for v in full])
    return shown, dropped, out


def plain_text(df: pl.DataFrame, cols: Sequence[Col] | None = None, *, title: str | None = None,
               notes: Sequence[str] = ()) -> str:
    """`df` as a fixed-width text table (every column, full cells), the title above, notes below."""
    from proftab.render.text import plain_table

    full = _columns(df, cols)
    cells = _cells(df, full)
    headers = [sanitize_text(c.header or c.name) for c in full]
    rows = [list(r) for r in zip(*(cells[c.name] for c in full), strict=True)] if df.height else []
    aligns = "".join(_align(df, c) for c in full)
    head = sanitize_text(title) + "\n" if title else ""
    tail = "".join(sanitize_text(n) + "\n" for n in notes)
    return head + plain_table(headers, rows, aligns) + tail


def rich_table(df: pl.DataFrame, cols: Sequence[Col] | None = None, *, title: str | None = None,
               notes: Sequence[str] = (), width: int = 200, row_styles: Sequence[str | None] | None = None) -> Any:
    """`df` as a `rich.table.Table` fitted to `width` (see `fit`); every cell a `rich.text.Text`."""
    from rich.table import Table
    from rich.text import Text

    full = _columns(df, cols)
    cells = _cells(df, full)
    headers = {c.name: sanitize_text(c.header or c.name) for c in full}
    shown, dropped, cells = fit(headers, cells, full, width)
    table = Table(title=Text(sanitize_text(title)) if title else None, title_justify="left", caption_justify="left")
    for c in shown:
        table.add_column(Text(headers[c.name]), justify="right" if _align(df, c) == ">" else "left", no_wrap=True)
    for i in range(df.height):
        table.add_row(*(Text(cells[c.name][i]) for c in shown), style=row_styles[i] if row_styles else None)
    lines = [sanitize_text(n) for n in notes]
    if dropped:
        lines.append(f"columns not shown at width {width}: {', '.join(dropped)} (--plain or -o FILE.csv for all)")
    cut_col = next((c for c in shown if c.cut), None)
    if cut_col is not None and cells[cut_col.name] != _cells(df, [cut_col])[cut_col.name]:
        lines.append("long names cut in the middle (…); full names: --plain or -o FILE.csv")
    if lines:
        table.caption = Text("\n".join(lines))
    return table


def render_frame(df: pl.DataFrame, cols: Sequence[Col] | None = None, *, title: str | None = None,
                 notes: Sequence[str] = (), console: Any = None,
                 row_styles: Sequence[str | None] | None = None) -> str | None:
    """Render `df`: printed on `console` (a rich Console: fitted, see `rich_table`) and None, or,
    without a console, returned as plain text (`plain_text`)."""
    if console is None:
        return plain_text(df, cols, title=title, notes=notes)
    console.print(rich_table(df, cols, title=title, notes=notes, width=int(getattr(console, "width", 200)),
                             row_styles=row_styles))
    return None
