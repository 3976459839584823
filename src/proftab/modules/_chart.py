"""The module tree as an icicle chart: width = a module's total time, colour = its self time."""

from __future__ import annotations

from typing import Any, Literal

import polars as pl

from proftab.exceptions import ProftabError
from proftab.modules._render import tree_order

__all__ = ["METRICS", "icicle", "icicle_rows"]

Metric = Literal["host", "device", "bwd_host", "bwd_device"]
#: chart metric -> the module-table columns (total, self)
METRICS: dict[str, tuple[str, str]] = {
    "host": ("host_total_ns", "host_self_ns"), "device": ("device_total_ns", "device_self_ns"),
    "bwd_host": ("bwd_host_total_ns", "bwd_host_self_ns"), "bwd_device": ("bwd_device_total_ns", "bwd_device_self_ns"),
}
_WIDTH = 900


def icicle_rows(table: pl.DataFrame, frames: pl.DataFrame, metric: Metric = "host") -> pl.DataFrame:
    """The rows of the chart: `table` (by path, one rank) in tree order with `x0`, `x1`.

    `x0`/`x1` are fractions of the roots' total; a child starts where its previous sibling
    ends, inside its parent (children's totals never exceed the parent's).
    """
    from proftab.plot import icicle_layout

    if metric not in METRICS:
        msg = f"metric must be one of {list(METRICS)!r}, not {metric!r}"
        raise ProftabError(msg)
    total, own = METRICS[metric]
    rows = tree_order(table, frames).with_row_index("node_id").with_columns(pl.col("node_id").cast(pl.Int64))
    ids = rows.select(pl.col("path").alias("parent"), pl.col("node_id").alias("parent_node_id"))
    rows = rows.join(ids, on="parent", how="left", maintain_order="left").with_columns(
        total_ns=pl.col(total), self_ns=pl.col(own))
    return icicle_layout(rows)


def icicle(table: pl.DataFrame, frames: pl.DataFrame, *, metric: Metric = "host", max_depth: int = 8,
           title: str = "modules") -> Any:
    """Altair icicle of the module tree (`table` = `modules(by="path")` of one rank)."""
    from proftab.plot import _alt, _data, _fit
    from proftab.render.text import fmt_ns

    alt = _alt()
    if table["rank"].n_unique() > 1:
        msg = "the module chart draws one rank: filter the table first"
        raise ProftabError(msg)
    data = icicle_rows(table, frames, metric).filter(
        (pl.col("depth") <= max_depth) & (pl.col("x1") > pl.col("x0"))).select(
        "path", "instance", "type", "depth", "n_calls", "x0", "x1", (pl.col("self_ns") / 1e6).alias("self_ms"),
        pl.col("total_ns").map_elements(fmt_ns, return_dtype=pl.String).alias("total"),
        pl.col("self_ns").map_elements(fmt_ns, return_dtype=pl.String).alias("self"),
        _fit("instance", ((pl.col("x1") - pl.col("x0")) * _WIDTH / 6.5).floor().cast(pl.Int64) - 1).alias("text"))
    base = alt.Chart(_data(data), title=f"{title} ({metric}: width = total, colour = self)")
    rect = base.mark_rect(stroke="white", strokeWidth=0.5).encode(
        x=alt.X("x0:Q", axis=None, scale=alt.Scale(domain=[0, 1])), x2="x1:Q",
        y=alt.Y("depth:O", title="module depth"),
        color=alt.Color("self_ms:Q", title="self (ms)", scale=alt.Scale(scheme="blues")),
        tooltip=["path:N", "type:N", "n_calls:Q", "self:N", "total:N"])
    text = base.mark_text(align="left", dx=3, fontSize=10).encode(x="x0:Q", y=alt.Y("depth:O"), text="text:N")
    return (rect + text).properties(width=_WIDTH, height=alt.Step(22))
