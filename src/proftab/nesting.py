"""The `nested` table of a trace: `events` nested per track (docs/nesting.md), or a dataset's stored nesting.

`nest_events` computes it from the events (`proftab.intervals.nest` per `schema.TRACK_KEYS`);
`check_stored_nesting` checks one a dataset stored before it is walked.
"""

from __future__ import annotations

import polars as pl

from proftab import schema
from proftab._heap import reuse_heap
from proftab.exceptions import TraceError
from proftab.intervals import nest
from proftab.intervals.tree import TreeCycleError, row_positions, tree_depth

__all__ = ["check_stored_nesting", "nest_events"]


def nest_events(events: pl.DataFrame) -> pl.DataFrame:
    """`events` plus `parent_id`, `depth`, `self_ns`, `overrun_ns`, nested per track.

    An event with a negative duration is nested as zero-length (its `end_ns` is kept as is).
    """
    with reuse_heap():  # its int64 temporaries reuse each other's memory (proftab._heap)
        if events.select((pl.col("end_ns") < pl.col("start_ns")).any()).item():  # negative durations
            clamped = events.with_columns(_end=pl.col("end_ns"), end_ns=pl.max_horizontal("start_ns", "end_ns"))
            return nest(clamped, by=schema.TRACK_KEYS).with_columns(end_ns=pl.col("_end")).drop("_end")
        return nest(events, by=schema.TRACK_KEYS)  # the common case: no clamped copy of end_ns


def check_stored_nesting(nested: pl.LazyFrame, where: str | None) -> None:
    """A stored nesting's `parent_id` links must form a forest: a cycle would make every walk up
    the tree endless. O(n log depth) (`intervals.tree.tree_depth`).

    Raises
    ------
    TraceError
        The links cannot be read, or form a cycle (names `where`, the stored table).
    """
    try:
        links = nested.select("rank", "event_id", "parent_id").collect()
    except (pl.exceptions.PolarsError, OSError) as exc:
        msg = f"cannot read table 'nested' ({type(exc).__name__}: {str(exc)[:300]})"
        raise TraceError(msg, path=where) from None
    rank = links["rank"].to_numpy()
    parent = row_positions(rank, links["event_id"].to_numpy(), rank, links["parent_id"].fill_null(-1).to_numpy())
    try:
        tree_depth(parent)
    except TreeCycleError:
        msg = "the stored nesting is damaged: parent_id links form a cycle (rewrite the dataset with convert)"
        raise TraceError(msg, path=where) from None
