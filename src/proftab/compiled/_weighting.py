"""The apportioning rule: a kernel event's duration split equally over its nodes, in exact int64 ns.

Each node row gets `dur // n`, and the first `dur % n` rows (in node-name order) 1 ns more, so the
shares of one event sum to its duration exactly (`with_shares`). `apportion` sums the shares per
aten op, module, source line or node: the `tr.compiled.by_*` tables. docs/compiled.md.
"""

from __future__ import annotations

from typing import Literal

import polars as pl

from proftab.compiled._match import node_rows
from proftab.exceptions import UsageError

__all__ = ["By", "apportion", "with_shares"]

By = Literal["op", "pre_grad_op", "module", "source", "node"]
_KEYS: dict[str, list[str]] = {"op": ["aten_op"], "pre_grad_op": ["pre_grad_op"], "module": ["module"],
                               "source": ["source", "source_code"],
                               "node": ["node", "aten_op", "module", "source"]}


def with_shares(rows: pl.DataFrame) -> pl.DataFrame:
    """`share_ns` per node row: the event's duration split equally, remainder to the first nodes (exact sums)."""
    n = pl.len().over("rank", "event_id")
    k = pl.int_range(pl.len()).over("rank", "event_id")
    dur = pl.col("dur_ns").clip(lower_bound=0)
    return rows.with_columns(share_ns=(dur // n + (k < dur % n).cast(pl.Int64)).cast(pl.Int64))


def apportion(events: pl.DataFrame, provenance: pl.DataFrame | None = None, by: By = "op") -> pl.DataFrame:
    """Kernel time per aten op, module, source line or node, each event's time split over its nodes.

    Parameters
    ----------
    events
        `kernel_events(...)`.
    provenance
        `read_provenance(...)` or None.
    by
        `"op"` (`aten_op`, the post-grad op), `"pre_grad_op"` (the torch-level op the model called,
        `aten::layer_norm`, as eager runs it), `"module"`, `"source"` (`source` = `file:line`,
        `source_code`), `"node"`.

    Returns
    -------
    pl.DataFrame
        The key columns, `time_ns` (the apportioned kernel time; all rows sum to the kernels'
        total), `guess_ns` (the part from kernels without provenance), `n_kernels` (kernel
        events contributing), `n_nodes` (node rows), `share` (of all kernel time). Keys are
        null where provenance says nothing (unmapped kernels by module / source). Sorted by
        time_ns descending, then the keys.
    """
    if by not in _KEYS:
        msg = f"by must be one of {sorted(_KEYS)}, got {by!r}"
        raise UsageError(msg)
    keys = _KEYS[by]
    rows = with_shares(node_rows(events, provenance, use_stacks=by in ("module", "source"),
                                 node_level=by not in ("module", "source")))
    total = int(rows["share_ns"].sum()) if rows.height else 0
    return (rows.group_by(keys).agg(
        pl.col("share_ns").sum().cast(pl.Int64).alias("time_ns"),
        pl.col("share_ns").filter(~pl.col("mapped")).sum().cast(pl.Int64).alias("guess_ns"),
        pl.struct("rank", "event_id").n_unique().cast(pl.Int64).alias("n_kernels"),
        pl.len().cast(pl.Int64).alias("n_nodes"))
        .with_columns(share=pl.col("time_ns") / total if total else pl.lit(0.0))
        .sort(["time_ns", *keys], descending=[True, *[False] * len(keys)], nulls_last=True))
