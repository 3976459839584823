"""Compiled time per nn.Module path, laid out as `tr.modules.modules()` lays out an eager run.

Stages: the charges (each kernel's and matched extern call's share per module, `_charges`), the
root's own time (the compiled regions and backward ops outside every charge, `_root_runs`), each
path's self time (`_self_times`), then the totals over each path's subtree and the calls
(`_subtree_times`). docs/compiled.md, "Time per nn.Module".
"""

from __future__ import annotations

import polars as pl

from proftab.compiled._match import node_rows
from proftab.compiled._regions import BACKWARD_FN, REGION_PREFIX, backward_compiled_ops
from proftab.compiled._weighting import with_shares
from proftab.modules._table import MODULE_COLUMNS

__all__ = ["COMPILED_MODULE_EXTRA", "module_times"]

#: columns of `module_times` (`tr.modules.modules(compiled=True)`): `proftab.modules.MODULE_COLUMNS` plus these
COMPILED_MODULE_EXTRA = ["name", "unmapped_ns", "n_kernels"]
_SELF_COLUMNS = ["host_self_ns", "device_self_ns", "bwd_host_self_ns", "bwd_device_self_ns"]
_HOST, _DEVICE, _BWD = ~pl.col("on_device"), pl.col("on_device"), pl.col("_bwd")


def module_times(events: pl.DataFrame, provenance: pl.DataFrame | None, externs: pl.DataFrame | None,
                 nested: pl.DataFrame, *, root: str = "model") -> pl.DataFrame:
    """Compiled time per nn.Module path: each kernel's time on its FX nodes' modules (`by_module`'s rule).

    Parameters
    ----------
    events
        `kernel_events(...)`.
    provenance
        `read_provenance(...)` or None (then every kernel's time is the root's: nothing maps).
    externs
        `extern_kernels(...)`: each matched extern call's duration, split equally over its
        nodes' modules, is host time of those modules.
    nested
        `Trace.nested` (rank, event_id, name, dur_ns): the `Torch-Compiled Region` ops.
    root
        The compiled module's name: provenance paths (`mlp.fc1`, `""` for the root's own code)
        become `root.mlp.fc1` / `root`, as `proftab.modules.instance_names(model, x)` names
        the eager trace's instances (its default root is `"model"` too).

    Returns
    -------
    pl.DataFrame
        `proftab.modules.MODULE_COLUMNS` plus `COMPILED_MODULE_EXTRA`, one row per (rank, path),
        sorted by host_total_ns descending. `host_self_ns` / `device_self_ns`: the kernel
        shares of the module's own nodes (host: C++ kernels and extern calls; device: Triton
        kernels). The root's `host_self_ns` also holds the host time of the compiled regions
        outside every charged kernel (guards, the wrapper, unmatched ops: what eager counts as
        the root's own time), so its `host_total_ns` is the regions' total. `*_total_ns`: Σ self
        over the module and every path below it. `n_calls`: the `## Call CompiledFxGraph ##` calls
        that ran the module's kernels (the root: the region calls). `unmapped_ns`: the part of
        self time from kernels whose module is unknown (charged to the root). `name` = `path`
        (so `pt.diff` matches it to an eager table's `name`). `bwd_*`: the same for kernels of
        AOTAutograd's backward graphs (`graph == "backward"`), the root's `bwd_host_self_ns`
        holding the `CompiledFunctionBackward` ops' time outside every charged kernel, so its
        `bwd_host_total_ns` is their total; `n_bwd_calls`: the backward graph calls that ran the
        module's kernels (the root: the `CompiledFunctionBackward` calls). The backward graph's
        kernels map to modules through their stacks (docs/compiled.md, "Backward graphs").
    """
    charges = _charges(events, provenance, externs, root)
    runs = _root_runs(nested)
    own, anc = _self_times(charges, runs, root)
    out = _subtree_times(own, anc, charges, root)
    zero = ["n_recompute_calls", "recompute_ns", "recompute_device_ns", "n_ops"]
    out = out.with_columns(pl.lit(0, pl.Int64).alias(c) for c in zero).with_columns(
        pl.col("host_total_ns", "device_total_ns", "bwd_host_total_ns", "bwd_device_total_ns").fill_null(0))
    return out.select(*MODULE_COLUMNS, *COMPILED_MODULE_EXTRA).sort(
        ["host_total_ns", "device_total_ns", "rank", "path"], descending=[True, True, False, False])


def _charges(events: pl.DataFrame, provenance: pl.DataFrame | None, externs: pl.DataFrame | None,
             root: str) -> pl.DataFrame:
    """Per charge: rank, event_id, graph_call_id, graph, module (null: unknown), on_device, share_ns
    (exact sums), `path` (under `root`; an unknown module: the root), `_unmapped`, `_bwd` (a backward graph's)."""
    rows = with_shares(node_rows(events, provenance, use_stacks=True)).join(
        events.select("rank", "event_id", "on_device", "graph_call_id", "graph"), on=["rank", "event_id"],
        how="left").select("rank", "event_id", "graph_call_id", "graph", "module", "on_device", "share_ns")
    if externs is not None and externs.height:
        one_null = pl.lit([None], pl.List(pl.String))
        ext = (externs.with_columns(module=pl.when(pl.col("modules").list.len() > 0).then("modules")
                                    .otherwise(one_null))
               .explode("module").with_columns(node=pl.col("module").fill_null(""))
               .select("rank", "event_id", "graph_call_id", "graph", "module", "dur_ns", "node").pipe(with_shares)
               .with_columns(on_device=pl.lit(False)))
        rows = pl.concat([rows, ext.select(rows.columns)])
    full = (pl.when(pl.col("module").is_null() | (pl.col("module") == "")).then(pl.lit(root))
            .otherwise(pl.format("{}.{}", pl.lit(root), pl.col("module"))))
    return rows.with_columns(path=full, _unmapped=pl.col("module").is_null(),
                             _bwd=pl.col("graph").fill_null("forward") == "backward")


def _root_runs(nested: pl.DataFrame) -> pl.DataFrame:
    """Per rank: the regions' time and calls (`_region_ns`, `_region_calls`) and the linked
    `CompiledFunctionBackward` ops' (`_bwd_fn_ns`, `_bwd_fn_calls`).

    A backward op counts when linked to a forward in a region (`backward_compile_ids`), as
    `regions()` counts it.
    """
    linked = backward_compiled_ops(nested)
    return nested.filter(pl.col("name").str.starts_with(REGION_PREFIX) | (
        (pl.col("name") == BACKWARD_FN) & pl.struct("rank", "event_id").is_in(linked.implode()))).group_by(
        "rank").agg(pl.col("dur_ns").filter(pl.col("name") != BACKWARD_FN).sum().cast(pl.Int64).alias("_region_ns"),
                    (pl.col("name") != BACKWARD_FN).sum().cast(pl.Int64).alias("_region_calls"),
                    pl.col("dur_ns").filter(pl.col("name") == BACKWARD_FN).sum().cast(pl.Int64).alias("_bwd_fn_ns"),
                    (pl.col("name") == BACKWARD_FN).sum().cast(pl.Int64).alias("_bwd_fn_calls"))


def _self_times(charges: pl.DataFrame, runs: pl.DataFrame, root: str) -> tuple[pl.DataFrame, pl.DataFrame]:
    """The self times of every path and its ancestors, and the (rank, path, anc) pairs of each path's prefixes.

    A module with no node of its own still gets a row (a prefix of one that has). The root's own
    time is the regions (forward) and the `CompiledFunctionBackward` ops (backward) outside kernels.
    """
    own = charges.group_by("rank", "path").agg(
        pl.col("share_ns").filter(_HOST & ~_BWD).sum().cast(pl.Int64).alias("host_self_ns"),
        pl.col("share_ns").filter(_DEVICE & ~_BWD).sum().cast(pl.Int64).alias("device_self_ns"),
        pl.col("share_ns").filter(_HOST & _BWD).sum().cast(pl.Int64).alias("bwd_host_self_ns"),
        pl.col("share_ns").filter(_DEVICE & _BWD).sum().cast(pl.Int64).alias("bwd_device_self_ns"),
        pl.col("share_ns").filter(pl.col("_unmapped")).sum().cast(pl.Int64).alias("unmapped_ns"),
        pl.struct("event_id").n_unique().cast(pl.Int64).alias("n_kernels"))
    # every path and its ancestors (prefixes), so a module with no node of its own still has a row
    paths = pl.concat([own.select("rank", "path"), runs.select("rank", pl.lit(root).alias("path"))]).unique()
    parts = paths.with_columns(_parts=pl.col("path").str.split("."))
    anc = (parts.with_columns(_n=pl.int_ranges(1, pl.col("_parts").list.len() + 1)).explode("_n")
           .select("rank", "path", anc=pl.col("_parts").list.head(pl.col("_n")).list.join(".")))
    keys = anc.select("rank", pl.col("anc").alias("path")).unique()
    host_charged = charges.filter(_HOST).group_by("rank").agg(
        pl.col("share_ns").filter(~_BWD).sum().cast(pl.Int64).alias("_charged"),
        pl.col("share_ns").filter(_BWD).sum().cast(pl.Int64).alias("_bwd_charged"))
    is_root = pl.col("path") == root
    own = (keys.join(own, on=["rank", "path"], how="left").with_columns(
        pl.col(*_SELF_COLUMNS, "unmapped_ns", "n_kernels").fill_null(0))
        .join(runs, on="rank", how="left").join(host_charged, on="rank", how="left")
        .with_columns(
            host_self_ns=pl.when(is_root).then(
                pl.col("host_self_ns") + (pl.col("_region_ns").fill_null(0) - pl.col("_charged").fill_null(0)).clip(0))
            .otherwise("host_self_ns"),
            bwd_host_self_ns=pl.when(is_root).then(
                pl.col("bwd_host_self_ns")
                + (pl.col("_bwd_fn_ns").fill_null(0) - pl.col("_bwd_charged").fill_null(0)).clip(0))
            .otherwise("bwd_host_self_ns")))
    return own, anc


def _subtree_times(own: pl.DataFrame, anc: pl.DataFrame, charges: pl.DataFrame, root: str) -> pl.DataFrame:
    """`own` with the totals over each path's subtree, the graph calls that ran its kernels (the root: at
    least the region / backward op calls) and the tree columns (depth, instance, parent, name)."""
    is_root = pl.col("path") == root
    sub = anc.join(own.select("rank", "path", *_SELF_COLUMNS), on=["rank", "path"])
    totals = sub.group_by("rank", pl.col("anc").alias("path")).agg(
        pl.col(c).sum().cast(pl.Int64).alias(c.replace("_self_", "_total_")) for c in _SELF_COLUMNS)
    calls_of = (anc.join(charges.select("rank", "path", "graph_call_id", "_bwd"), on=["rank", "path"])
                .group_by("rank", pl.col("anc").alias("path")).agg(
                    pl.col("graph_call_id").filter(~_BWD).drop_nulls().n_unique().cast(pl.Int64).alias("n_calls"),
                    pl.col("graph_call_id").filter(_BWD).drop_nulls().n_unique().cast(pl.Int64).alias("n_bwd_calls")))
    return (own.join(totals, on=["rank", "path"], how="left").join(calls_of, on=["rank", "path"], how="left")
            .with_columns(n_calls=pl.when(is_root).then(
                pl.max_horizontal(pl.col("n_calls").fill_null(0), pl.col("_region_calls").fill_null(0)))
                .otherwise(pl.col("n_calls").fill_null(0)),
                n_bwd_calls=pl.when(is_root).then(
                pl.max_horizontal(pl.col("n_bwd_calls").fill_null(0), pl.col("_bwd_fn_calls").fill_null(0)))
                .otherwise(pl.col("n_bwd_calls").fill_null(0)),
                depth=(pl.col("path").str.count_matches(r"\.")).cast(pl.Int64),
                instance=pl.col("path").str.extract(r"([^.]*)$", 1), type=pl.lit(None, pl.String),
                parent=pl.when(pl.col("path").str.contains(r"\.")).then(pl.col("path").str.replace(r"\.[^.]*$", "")),
                name=pl.col("path")))
