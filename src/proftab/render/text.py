"""Plain-text formats shared by every renderer: human times and shares, fixed-width tables.

torch's own table format (`proftab.torch.text_table`) keeps torch's rules; these are proftab's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["fmt_bytes", "fmt_ns", "fmt_share", "plain_table"]


def fmt_ns(ns: float | None, *, signed: bool = False) -> str:
    """Format nanoseconds the way torch's tables do (``us`` below 1 ms, then ``ms``, ``s``).

    >>> fmt_ns(1_234), fmt_ns(12_345_678), fmt_ns(-2_500, signed=True)
    ('1.234us', '12.346ms', '-2.500us')
    """
    if ns is None:
        return ""
    sign = ("+" if ns > 0 else "") if signed else ""
    us = ns / 1000.0
    a = abs(us)
    if a >= 1e6:
        return f"{sign}{us / 1e6:.3f}s"
    if a >= 1e3:
        return f"{sign}{us / 1e3:.3f}ms"
    return f"{sign}{us:.3f}us"


def fmt_share(x: float | None, *, signed: bool = False) -> str:
    """A ratio as a percentage with 2 decimals (``""`` for null/NaN/inf)."""
    if x is None or x != x or x in (float("inf"), float("-inf")):
        return ""
    return f"{x * 100:+.2f}%" if signed else f"{x * 100:.2f}%"


def fmt_bytes(n: float | None, *, signed: bool = False) -> str:
    """Bytes in binary units with 3 decimals (``B`` below 1 KiB).

    >>> fmt_bytes(512), fmt_bytes(10_438_832), fmt_bytes(-2048, signed=True)
    ('512 B', '9.955 MiB', '-2.000 KiB')
    """
    if n is None:
        return ""
    sign = ("+" if n > 0 else "") if signed else ""
    a = abs(n)
    for unit, size in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if a >= size:
            return f"{sign}{n / size:.3f} {unit}"
    return f"{sign}{int(n)} B"


def plain_table(headers: Sequence[str], rows: Sequence[Sequence[str]], aligns: str | None = None) -> str:
    """A fixed-width text table; `aligns` is one ``<`` / ``>`` per column (default: first left)."""
    aligns = aligns or "<" + ">" * (len(headers) - 1)
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(headers)]
    def line(cells: Sequence[str]) -> str:
        return "  ".join(f"{c:{a}{w}}" for c, a, w in zip(cells, aligns, widths, strict=True)).rstrip()
    sep = "  ".join("-" * w for w in widths)
    return "\n".join([line(headers), sep, *(line(r) for r in rows)]) + "\n"
