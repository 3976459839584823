"""The module table as text: the tree in call order, indented, with human times."""

from __future__ import annotations

import polars as pl

from proftab.render.text import fmt_ns, plain_table

__all__ = ["render_modules", "tree_order"]

_TIMES = [("host_total_ns", "Host total"), ("host_self_ns", "Host self"), ("device_total_ns", "Device total"),
          ("device_self_ns", "Device self"), ("bwd_host_total_ns", "Bwd host"),
          ("bwd_device_total_ns", "Bwd device"), ("recompute_ns", "Recompute"),
          ("recompute_device_ns", "Recompute device")]


def tree_order(table: pl.DataFrame, frames: pl.DataFrame) -> pl.DataFrame:
    """`table` (by path) in depth-first order, siblings in the order of their first call."""
    first = frames.group_by("rank", "path").agg(pl.col("start_ns").min().alias("_first"))
    t = table.join(first, on=["rank", "path"], how="left")
    starts = dict(zip(zip(t["rank"].to_list(), t["path"].to_list(), strict=True), t["_first"].to_list(),
                      strict=True))

    def key(rank: int, path: str) -> tuple[int, list[tuple[int, str]]]:
        parts = path.split(".")
        chain = [".".join(parts[: i + 1]) for i in range(len(parts))]
        return rank, [(starts.get((rank, p)) or 0, p) for p in chain]
    order = sorted(range(t.height), key=lambda i: key(t["rank"][i], t["path"][i]))
    return t[order].drop("_first")


def render_modules(table: pl.DataFrame, frames: pl.DataFrame, *, by: str = "path", limit: int | None = None) -> str:
    """Plain-text module table; time columns that are zero on every row are left out.

    `by="path"`: the tree in call order (module names indented by depth); `by="type"`: the
    rows as given (largest host total first). `limit` keeps the first rows.
    """
    rows = tree_order(table, frames) if by == "path" else table
    if limit is not None and limit >= 0:
        rows = rows.head(limit)
    shown = [(c, h) for c, h in _TIMES if c in table.columns and bool((table[c] != 0).any())]
    multi = table["rank"].n_unique() > 1
    headers = (["Rank"] if multi else []) + (["Module", "Type"] if by == "path" else ["Type"]) + [
        "Calls", *[h for _, h in shown], "Bwd calls", "Ops"]
    body = []
    for r in rows.iter_rows(named=True):
        name = ["  " * r["depth"] + r["instance"], r["type"]] if by == "path" else [r["type"]]
        body.append(([str(r["rank"])] if multi else []) + name + [
            f"{r['calls']:,}", *[fmt_ns(r[c]) for c, _ in shown], f"{r['bwd_calls']:,}", f"{r['ops']:,}"])
    lead = (1 if multi else 0) + (2 if by == "path" else 1)
    return plain_table(headers, body, "<" * lead + ">" * (len(headers) - lead))
