"""Views of the event tree that leave noise out: `without_python` (ops only).

On real traces recorded with `with_stack=True` the heaviest host "ops" are often Python frames
of helper threads (a tqdm monitor's ``threading.py(359): wait`` holds half of the Self CPU of
the bundled H100 trace) and the top of the call tree is multiprocessing frames. These views
keep the ops and move the dropped frames' time to the op above them.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from proftab import kinds
from proftab.intervals.tree import nearest_ancestor, row_positions, tree_depth

__all__ = ["without_python"]


def without_python(nested: pl.DataFrame) -> pl.DataFrame:
    """`nested` (`Trace.nested` columns) without its ``python_function`` events.

    A kept event's `parent_id` becomes its nearest kept ancestor, its `depth` the number of
    kept ancestors, and its `self_ns` gains the self time of the dropped frames whose nearest
    kept ancestor it is (so totals are unchanged under every kept op). Python time with no op
    above it (an idle thread's wait, the interpreter's own frames) drops out.
    """
    is_py = kinds.is_python_frame()
    py = nested.select(is_py.alias("p"))["p"].to_numpy()
    if not py.any():
        return nested
    rank = nested["rank"].to_numpy()
    ids = nested["event_id"].to_numpy()
    parent = row_positions(rank, ids, rank, nested["parent_id"].fill_null(-1).to_numpy())
    keep = ~py
    rows = np.arange(len(py))
    anc = nearest_ancestor(parent, rows, keep)  # nearest kept strict ancestor of every row
    self_ns = nested["self_ns"].fill_null(0).to_numpy().astype(np.int64)
    gained = np.zeros(len(py), np.int64)
    moved = py & (anc >= 0)
    np.add.at(gained, anc[moved], self_ns[moved])
    new_parent_id = np.where(anc >= 0, ids[np.maximum(anc, 0)], -1)
    kept_parent = np.where(anc >= 0, anc, -1)
    depth = tree_depth(kept_parent)
    out = nested.with_columns(
        pl.Series("parent_id", new_parent_id).replace(-1, None).cast(nested.schema["parent_id"]),
        (pl.col("self_ns") + pl.Series(gained)).alias("self_ns"),
        pl.Series("depth", depth).cast(nested.schema["depth"]),
    )
    return out.filter(pl.Series(keep))
