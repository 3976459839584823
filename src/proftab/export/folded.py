"""Folded stacks (Brendan Gregg's `flamegraph.pl` / inferno / speedscope input).

One line per call path with self time: ``root;child;leaf <self_ns>``. The weights are
integer nanoseconds and add up to the total self time of the selected events (the busy
time of each thread, summed). Names are made safe for the format: ``;`` becomes ``:``
and line breaks become spaces.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

from proftab import calltree, schema

if TYPE_CHECKING:
    import os

    from proftab.trace import Trace

__all__ = ["folded_lines", "write_folded"]


def _safe(expr: pl.Expr) -> pl.Expr:
    return expr.str.replace_all(";", ":", literal=True).str.replace_all(r"[\r\n]+", " ")


def folded_lines(tr: Trace, *, device: bool = False, by_thread: bool = False,
                 merge_steps: bool = True) -> pl.DataFrame:
    """The folded-stack lines of `tr` as a frame: `stack` (``a;b;c``) and `self_ns`.

    Parameters
    ----------
    device, by_thread, merge_steps
        As in `Trace.call_tree`. With `by_thread` each stack starts with the thread's
        label (``rank 0 · thread 123 (python3)``).
    """
    from proftab.tracks import track_labels

    ct = calltree.call_tree(tr.collect("nested"), device=device, by_thread=by_thread, merge_steps=merge_steps)
    ct = ct.filter(pl.col("self_ns") > 0)
    stack = pl.col("path").list.eval(_safe(pl.element())).list.join(";")
    if by_thread:
        labels = track_labels(tr.collect("events"), tr.collect("threads")).select(*schema.TRACK_KEYS, "label")
        ct = ct.join(labels, on=schema.TRACK_KEYS, how="left", nulls_equal=True, maintain_order="left")
        stack = _safe(pl.col("label").fill_null("?")) + pl.lit(";") + stack
    return ct.select(stack.alias("stack"), "self_ns")


def write_folded(tr: Trace, path: str | os.PathLike[str] | None = None, *, device: bool = False,
                 by_thread: bool = False, merge_steps: bool = True) -> str | None:
    """Write the folded stacks of `tr` to `path`; return the text when `path` is None."""
    lines = folded_lines(tr, device=device, by_thread=by_thread, merge_steps=merge_steps)
    text = lines.select(pl.concat_str("stack", pl.lit(" "), pl.col("self_ns").cast(pl.String), pl.lit("\n"))
                        .str.join(""))["stack"][0] if lines.height else ""
    if path is None:
        return text
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(text)
    return None
