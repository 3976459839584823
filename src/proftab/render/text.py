"""Plain-text formats shared by every renderer: human times and shares, fixed-width tables.

torch's own table format (`proftab.torch.text_table`) keeps torch's rules; these are proftab's.
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["distinct_cuts", "fmt_bytes", "fmt_ns", "fmt_share", "middle_cut", "plain_table"]


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


def middle_cut(name: str, width: int, head: int | None = None, ellipsis: str = "…") -> str:
    """`name` shortened to `width` characters by an ellipsis in the middle (`head` chars kept in front).

    >>> middle_cut("void at::native::elementwise_kernel<128, 4, MulFunctor>", 30)
    'void at::native::…MulFunctor>'
    """
    if len(name) <= width:
        return name
    room = max(width - len(ellipsis), 1)
    head = room * 3 // 5 if head is None else max(0, min(head, room))
    tail = room - head
    return name[:head] + ellipsis + (name[-tail:] if tail else "")


def _common_prefix(a: str, b: str) -> int:
    """Length of the common prefix of `a` and `b`: a binary search over slice compares, O(L log L)
    in C rather than a Python loop per character."""
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _window_cut(name: str, width: int, start: int, ellipsis: str) -> str:
    """The front of `name`, an ellipsis, then `name` from `start` on, cut to `width` characters.

    `start` is where `name` differs from the names it collided with.
    """
    head = width * 2 // 5
    start = max(start - 4, head + 1)
    room = width - head - len(ellipsis)
    rest = name[start:]
    if len(rest) > room:
        rest = rest[: max(room - len(ellipsis), 0)] + ellipsis
    return name[:head] + ellipsis + rest


def distinct_cuts(names: Sequence[str], cuts: Sequence[str], ellipsis: str = "…") -> list[str]:
    """`cuts` (the shortened `names`) with every collision resolved: rows whose names differ
    never print the same.

    Where different names shortened to the same text (kernel names share long template
    prefixes), each is printed at the same width as its front, an ellipsis and the part
    where it differs from the others; failing that, cut in the middle; failing that, with a
    ``#k`` tag. Names that did not collide keep their cut (torch's, in its table).
    """
    out = list(cuts)
    by_cut: dict[str, list[int]] = {}
    for i, cut in enumerate(cuts):
        by_cut.setdefault(cut, []).append(i)
    for cut, rows in by_cut.items():
        members = sorted({names[i] for i in rows})
        if len(members) < 2:
            continue
        width = len(cut)
        # the longest common prefix with any other member is with a neighbour in sorted order
        near = [_common_prefix(a, b) for a, b in itertools.pairwise(members)]
        differs = {n: max(near[k - 1] if k else 0, near[k] if k < len(near) else 0) for k, n in enumerate(members)}
        chosen = {n: _window_cut(n, width, differs[n], ellipsis) for n in members}
        if len(set(chosen.values())) < len(members):
            for head in range(width - len(ellipsis) - 1, -1, -1):
                chosen = {n: middle_cut(n, width, head, ellipsis) for n in members}
                if len(set(chosen.values())) == len(members):
                    break
            else:
                chosen = {n: middle_cut(n, max(width - 3, 1), None, ellipsis) + f"#{k}"
                          for k, n in enumerate(members, 1)}
        for i in rows:
            out[i] = chosen[names[i]]
    return out
