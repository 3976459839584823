"""The tables `tr.compiled` gives besides the `by_*` sums: kernels, regions and a compiled key_averages.

`kernels` is one row per generated-kernel event with the lists its nodes give; `regions` one row per
compiled graph (compile id and forward / backward); `key_averages` the trace's key_averages with the
generated kernels' time moved onto the aten ops they fuse, so `pt.diff(eager, compiled)` compares
op by op. docs/compiled.md.
"""

from __future__ import annotations

import polars as pl

from proftab.compiled._match import node_rows, stack_rows
from proftab.compiled._regions import (
    BACKWARD_FN,
    COMPILE_ID_RE,
    REGION_PREFIX,
    backward_compile_ids,
    graph_calls,
    parent_rows,
)
from proftab.compiled._weighting import with_shares
from proftab.torch.columns import SUMMED_COLUMNS

__all__ = ["KERNEL_COLUMNS", "REGION_COLUMNS", "kernels", "key_averages", "regions"]

KERNEL_COLUMNS = ["rank", "event_id", "name", "kernel", "backend", "kernel_kind", "on_device", "start_ns",
                  "dur_ns", "launch_id", "compile_id", "graph",
                  "region_id", "graph_call_id", "graph_hash", "kernel_file",
                  "inductor_bytes", "inductor_flops", "stacks", "fused_ops", "mapped", "guess", "n_nodes", "nodes",
                  "aten_ops", "modules", "sources", "read_bytes", "write_bytes", "bytes", "flops"]
REGION_COLUMNS = ["rank", "compile_id", "graph", "frame_id",
                   "compile_index", "recompile", "compiled_in_trace", "n_calls",
                  "total_ns", "kernel_ns", "n_kernels", "graph_hashes"]


def kernels(events: pl.DataFrame, provenance: pl.DataFrame | None = None) -> pl.DataFrame:
    """`kernel_events` rows with their FX nodes, aten ops, modules and source lines.

    Parameters
    ----------
    events
        `kernel_events(...)`.
    provenance
        `proftab.io.inductor.read_provenance(...)`, or None (then every kernel is a guess).

    Returns
    -------
    pl.DataFrame
        `KERNEL_COLUMNS`: the `kernel_events` columns, `mapped` (provenance found the kernel),
        `guess` (not mapped: `aten_ops` is the kernel name's fused op list), `n_nodes`, and the
        lists `nodes`, `aten_ops`, `modules`, `sources` (`file:line`, unique, sorted). A kernel the
        provenance knows only by its stacks (a torch 2.13 backward kernel) is mapped with
        `n_nodes` 0, its modules and sources from the stacks and `aten_ops` from its name.
    """
    rows = node_rows(events, provenance)
    agg = rows.group_by("rank", "event_id").agg(
        pl.col("mapped").first(), pl.col("node").count().cast(pl.Int64).alias("n_nodes"),
        pl.col("node").drop_nulls().alias("nodes"),
        pl.col("aten_op").drop_nulls().unique().sort().alias("aten_ops"),
        pl.col("module").drop_nulls().unique().sort().alias("modules"),
        pl.col("source").drop_nulls().unique().sort().alias("sources"),
        pl.col("kernel_read_bytes").first().alias("read_bytes"),
        pl.col("kernel_write_bytes").first().alias("write_bytes"),
        pl.col("kernel_flops").first().alias("flops"))
    if "stacks" in events.columns:
        from_stacks = stack_rows(events, rows.filter(pl.col("mapped")).select("rank", "event_id").unique()).group_by(
            "rank", "event_id").agg(pl.col("module").drop_nulls().unique().sort().alias("_m"),
                                    pl.col("source").drop_nulls().unique().sort().alias("_s"))
        agg = agg.join(from_stacks, on=["rank", "event_id"], how="left").with_columns(
            modules=pl.when(pl.col("_m").list.len() > 0).then("_m").otherwise("modules"),
            sources=pl.when(pl.col("_s").list.len() > 0).then("_s").otherwise("sources")).drop("_m", "_s")
    out = events.join(agg, on=["rank", "event_id"], how="left").with_columns(
        pl.col("mapped").fill_null(False), pl.col("n_nodes").fill_null(0),
        bytes=pl.col("read_bytes") + pl.col("write_bytes"))
    # mapped by stacks only (a torch 2.13 backward kernel): the ops are the name's fused op list, as by_op counts them
    from_name = pl.col("fused_ops").list.eval(pl.format("aten::{}", pl.element())).list.unique().list.sort()
    out = out.with_columns(aten_ops=pl.when(pl.col("mapped") & (pl.col("n_nodes") == 0)).then(from_name)
                           .otherwise("aten_ops"))
    return out.with_columns(guess=~pl.col("mapped")).select(KERNEL_COLUMNS)


def regions(nested: pl.DataFrame, events: pl.DataFrame) -> pl.DataFrame:
    """Per compiled graph (`Torch-Compiled Region: <frame>/<compile>`): calls, time, recompiles.

    Parameters
    ----------
    nested
        `Trace.nested`.
    events
        `kernel_events(...)` of the same trace.

    Returns
    -------
    pl.DataFrame
        `REGION_COLUMNS`: `compile_id`, `graph` (`"forward"`: the `Torch-Compiled Region` ops;
        `"backward"`: AOTAutograd's `CompiledFunctionBackward` ops, linked to their forward's
        compile id by sequence number), `frame_id` (the dynamo frame: several frames called in
        one step mean graph breaks), `compile_index` (> 0: a recompile of that frame), `recompile`,
        `compiled_in_trace` (the trace holds compile-time annotations for this id, e.g.
        `dynamo_data: compile_id=0/1`), `n_calls`, `total_ns` (sum of the region ops'
        durations), `kernel_ns` / `n_kernels` (generated kernels inside), `graph_hashes`
        (of the `## Call CompiledFxGraph ##` annotations inside; `None` when Inductor's cache
        was off). Sorted by rank, frame_id, compile_index.
    """
    n = nested.select("rank", "event_id", "parent_id", "cat", "name", "dur_ns",
                      *[c for c in ("start_ns", "sequence_number") if c in nested.columns])
    reg = n.filter(pl.col("name").str.starts_with(REGION_PREFIX)).select(
        "rank", "dur_ns", compile_id=pl.col("name").str.extract(r"(\d+/\d+)", 1), graph=pl.lit("forward"))
    if "sequence_number" in n.columns and (n["name"] == BACKWARD_FN).any():
        bwd_ops = n.filter(pl.col("name") == BACKWARD_FN).select("rank", "event_id", "dur_ns").join(
            backward_compile_ids(n, parent_rows(n), n["name"].str.starts_with(REGION_PREFIX).to_numpy()),
            on=["rank", "event_id"], how="left")
        reg = pl.concat([reg, bwd_ops.filter(pl.col("_bwd_cid").is_not_null()).select(  # forward in no region: as
            "rank", "dur_ns", pl.col("_bwd_cid").alias("compile_id"), graph=pl.lit("backward"))])  # it, left out
    compiled_here = (n.filter(pl.col("name").str.contains(COMPILE_ID_RE))
                     .select("rank", compile_id=pl.col("name").str.extract(COMPILE_ID_RE, 1)).unique()
                     .with_columns(compiled_in_trace=pl.lit(True)))
    calls = graph_calls(n).join(n.select("rank", "event_id", "name"), on=["rank", "event_id"], how="left")
    key = ["rank", "compile_id", "graph"]
    hashes = calls.with_columns(pl.col("graph").fill_null("forward")).group_by(key).agg(
        pl.col("name").str.extract(r"## Call CompiledFxGraph (\S+) ##", 1).unique().sort().alias("graph_hashes"))
    ev = events.with_columns(pl.col("graph").fill_null("forward")) if "graph" in events.columns \
        else events.with_columns(graph=pl.lit("forward"))
    kern = ev.group_by(key).agg(pl.col("dur_ns").sum().cast(pl.Int64).alias("kernel_ns"),
                                pl.len().cast(pl.Int64).alias("n_kernels"))
    out = (reg.group_by(key).agg(pl.len().cast(pl.Int64).alias("n_calls"),
                                 pl.col("dur_ns").sum().cast(pl.Int64).alias("total_ns"))
           .join(kern, on=key, how="left", nulls_equal=True)
           .join(hashes, on=key, how="left", nulls_equal=True)
           .join(compiled_here, on=["rank", "compile_id"], how="left")
           .with_columns(frame_id=pl.col("compile_id").str.split("/").list.get(0).cast(pl.Int64),
                         compile_index=pl.col("compile_id").str.split("/").list.get(1).cast(pl.Int64),
                         compiled_in_trace=pl.col("compiled_in_trace").fill_null(False),
                         kernel_ns=pl.col("kernel_ns").fill_null(0), n_kernels=pl.col("n_kernels").fill_null(0),
                         graph_hashes=pl.col("graph_hashes").fill_null(pl.lit([], pl.List(pl.String)))))
    return out.with_columns(recompile=pl.col("compile_index") > 0).select(REGION_COLUMNS).sort(
        "rank", "frame_id", "compile_index", pl.col("graph") == "backward", nulls_last=True)


def key_averages(ops: pl.DataFrame, events: pl.DataFrame, provenance: pl.DataFrame | None = None,
                 externs: pl.DataFrame | None = None) -> pl.DataFrame:
    """A key_averages frame where generated kernels' time counts as the aten ops they fuse.

    Parameters
    ----------
    ops
        The trace's `key_averages()`.
    events
        `kernel_events(...)`.
    provenance
        `read_provenance(...)` or None (then the fused op lists, a guess).
    externs
        `extern_kernels(...)`: each matched extern call's duration is added to the total
        (not the self) time of its pre-grad op's row, as eager nests `aten::addmm` in
        `aten::linear` (split equally when it has several); its own row keeps its self time.

    Returns
    -------
    pl.DataFrame
        `ops` without the generated-kernel rows, plus per apportioned op (the node's pre-grad
        op, `aten::layer_norm`, the name eager runs; else its post-grad aten op): its kernel
        share added to `self_cpu_ns` and `cpu_total_ns` (host kernels) or `self_device_ns` and
        `device_total_ns` (device kernels) of the op's row (a new row, `calls` = the generated
        kernel events contributing, else the extern calls, where the op does not run outside
        them), so
        `pt.diff(eager, compiled)` compares op by op. The self times still sum to the trace's.
    """
    per_op = _op_charges(events, provenance, externs)
    dev_type = ops["device_type"].filter(ops["device_type"] != "CPU").first() if "device_type" in ops.columns \
        else None
    gen_names = events["name"].unique()
    kept = ops.filter(~pl.col("name").is_in(gen_names.implode()))
    add = _charged_rows(per_op, dev_type if isinstance(dev_type, str) else None)
    if not add.height:
        return kept
    return _with_charges(kept, add)


def _op_charges(events: pl.DataFrame, provenance: pl.DataFrame | None, externs: pl.DataFrame | None) -> pl.DataFrame:
    """Per op name (`aten_op`): the kernel shares to add as host self (`_host`), host total only (`_ext`:
    extern calls) and device time (`_dev`), and the events contributing to each (`_nh`, `_ne`, `_nd`)."""
    rows = with_shares(node_rows(events, provenance, node_level=True)).with_columns(
        aten_op=pl.coalesce("pre_grad_op", "aten_op")).join(
        events.select("rank", "event_id", "on_device"), on=["rank", "event_id"], how="left")
    rows = rows.with_columns(aten_op=pl.col("aten_op").fill_null(pl.format("inductor::{}", "node")),
                             _total_only=pl.lit(False)).select(
        "rank", "event_id", "aten_op", "share_ns", "on_device", "_total_only")
    if externs is not None and externs.height:
        ext = (externs.with_columns(pl.col("pre_grad_ops").list.first().alias("aten_op")).filter(
            pl.col("aten_op").is_not_null()).select("rank", "event_id", "dur_ns", "aten_op",
                                                    pl.lit("").alias("node"))
               .pipe(with_shares).with_columns(on_device=pl.lit(False), _total_only=pl.lit(True)))
        rows = pl.concat([rows, ext.select(rows.columns)])
    return rows.group_by("aten_op").agg(
        pl.col("share_ns").filter(~pl.col("on_device") & ~pl.col("_total_only")).sum().cast(pl.Int64).alias("_host"),
        pl.col("share_ns").filter(pl.col("_total_only")).sum().cast(pl.Int64).alias("_ext"),
        pl.col("share_ns").filter(pl.col("on_device")).sum().cast(pl.Int64).alias("_dev"),
        pl.struct("rank", "event_id").filter(~pl.col("on_device") & ~pl.col("_total_only")).n_unique()
        .cast(pl.Int64).alias("_nh"),
        pl.struct("rank", "event_id").filter(pl.col("_total_only")).n_unique().cast(pl.Int64).alias("_ne"),
        pl.struct("rank", "event_id").filter(pl.col("on_device")).n_unique().cast(pl.Int64).alias("_nd"))


def _charged_rows(per_op: pl.DataFrame, dev_type: str | None) -> pl.DataFrame:
    """The (name, device_type) rows the charges go to: `_add` (self and total), `_ext` (total only), `_n`
    (calls of a new row), `_on_dev`; host rows as `CPU`, device rows as the trace's device type."""
    host_rows = per_op.filter((pl.col("_nh") > 0) | (pl.col("_ne") > 0)).select(
        pl.col("aten_op").alias("name"), pl.col("_host").alias("_add"), pl.col("_ext"),
        pl.when(pl.col("_nh") > 0).then("_nh").otherwise("_ne").alias("_n")).with_columns(
        device_type=pl.lit("CPU"), _on_dev=pl.lit(False))
    dev_rows = per_op.filter(pl.col("_nd") > 0).select(
        pl.col("aten_op").alias("name"), pl.col("_dev").alias("_add"), pl.lit(0, pl.Int64).alias("_ext"),
        pl.col("_nd").alias("_n")).with_columns(device_type=pl.lit(dev_type or "CUDA"), _on_dev=pl.lit(True))
    return pl.concat([host_rows, dev_rows]).sort("name", "device_type")  # new rows in a deterministic order


def _with_charges(kept: pl.DataFrame, add: pl.DataFrame) -> pl.DataFrame:
    """`kept` (key_averages rows) with `add` (`_charged_rows`) added: to an existing (name, device_type) row
    that is no user annotation, else as a new row with `calls` = `_n` and zero times."""
    key = ["name", "device_type"]
    kept = kept.with_columns(pl.col("is_user_annotation").fill_null(False)) if "is_user_annotation" in kept.columns \
        else kept
    new = add.join(kept.filter(~pl.col("is_user_annotation")) if "is_user_annotation" in kept.columns else kept,
                   on=key, how="anti").select(*key, pl.col("_n").alias("calls"))
    blank = {"input_shapes": pl.lit(""), "overload_name": pl.lit(""), "stack": pl.lit([], pl.List(pl.String)),
             "is_async": pl.lit(False), "top_level": pl.lit(False),
             **{c: pl.lit(0) for c in SUMMED_COLUMNS}}
    new = new.with_columns(v.alias(c) for c, v in blank.items() if c in kept.columns)
    filled = pl.concat([kept, new], how="diagonal_relaxed")
    if "is_user_annotation" in filled.columns:
        filled = filled.with_columns(pl.col("is_user_annotation").fill_null(False))
        add = add.with_columns(is_user_annotation=pl.lit(False))
        key = [*key, "is_user_annotation"]
    out = filled.join(add.drop("_n"), on=key, how="left").with_columns(
        pl.col("_add").fill_null(0), pl.col("_ext").fill_null(0), pl.col("_on_dev").fill_null(False))
    host_add = pl.when(~pl.col("_on_dev")).then("_add").otherwise(0)
    dev_add = pl.when(pl.col("_on_dev")).then("_add").otherwise(0)
    upd = [(pl.col("self_cpu_ns") + host_add).alias("self_cpu_ns"),
           (pl.col("cpu_total_ns") + host_add + pl.col("_ext")).alias("cpu_total_ns")]
    if "self_device_ns" in out.columns:
        upd += [(pl.col("self_device_ns") + dev_add).alias("self_device_ns"),
                (pl.col("device_total_ns") + dev_add).alias("device_total_ns")]
    return out.with_columns(upd).drop("_add", "_ext", "_on_dev")
