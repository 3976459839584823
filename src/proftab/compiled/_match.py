"""Kernels and extern calls matched to their FX nodes, aten ops, modules and source lines.

A generated kernel gets its post-grad FX nodes from the provenance (by compile id, graph and kernel
name; a mapping file without compile ids: by graph and kernel name, the first artifact naming it);
a kernel the provenance does not know gets the op list of its name, a guess, or with
`use_stacks` the modules and lines of torch 2.14's kernel stacks (`node_rows`, `stack_rows`). An
extern call (`aten::addmm` called by the generated code) is matched to the graph's extern handle of
the same call order (`extern_kernels`). docs/compiled.md.
"""

from __future__ import annotations

import polars as pl

from proftab import kinds
from proftab.compiled._names import GENERATED_PATTERN
from proftab.compiled._regions import graph_calls
from proftab.io.inductor import module_of_stack

__all__ = ["EXTERN_COLUMNS", "PERF_COLUMNS", "extern_kernels", "node_rows", "stack_rows", "with_graph"]

EXTERN_COLUMNS = ["rank", "event_id", "name", "compile_id", "graph", "graph_call_id",
                   "kernel", "handle", "start_ns", "dur_ns",
                  "nodes", "pre_grad_ops", "modules", "sources", "read_bytes", "write_bytes", "bytes", "flops"]
#: the kernel-level perf model columns of the provenance (`proftab.io.inductor_graph`)
PERF_COLUMNS = ["kernel_read_bytes", "kernel_write_bytes", "kernel_flops"]


def with_graph(provenance: pl.DataFrame) -> pl.DataFrame:
    """The provenance with `graph` filled: a frame without the column (or a null) is a forward graph's."""
    if "graph" not in provenance.columns:
        return provenance.with_columns(graph=pl.lit("forward"))
    return provenance.with_columns(pl.col("graph").fill_null("forward"))


def _mapped_rows(base: pl.DataFrame, provenance: pl.DataFrame, *, node_level: bool) -> pl.DataFrame:
    """The (kernel event, node) rows the provenance maps: by compile id where the provenance has one,
    else (mapping files) by graph and kernel name in the first artifact that names the kernel."""
    prov = with_graph(provenance)
    if node_level:
        prov = prov.filter(pl.col("node").is_not_null())
    prov = prov.with_columns(
        source=pl.when(pl.col("source_file").is_not_null())
        .then(pl.format("{}:{}", "source_file", "source_line")))
    prov = prov.with_columns(pl.lit(None, pl.Int64).alias(c) for c in PERF_COLUMNS if c not in prov.columns)
    cols = ["node", "aten_op", "pre_grad_op", "module", "source", "source_code", *PERF_COLUMNS]
    by_id = prov.filter(pl.col("compile_id").is_not_null()).select("compile_id", "graph", "kernel", *cols)
    # mapping files without a compile id: per (graph, kernel name), the first artifact that has it
    first = (prov.filter(pl.col("compile_id").is_null()).select("artifact", "graph", "kernel")
             .unique(maintain_order=True).unique(subset=["graph", "kernel"], keep="first", maintain_order=True))
    no_id = prov.join(first, on=["artifact", "graph", "kernel"], how="semi").select("graph", "kernel", *cols)
    a = base.join(by_id, on=["compile_id", "graph", "kernel"], how="inner")
    b = base.join(a.select("rank", "event_id").unique(), on=["rank", "event_id"], how="anti").join(
        no_id, on=["graph", "kernel"], how="inner")
    return pl.concat([a.select("rank", "event_id", *cols), b.select("rank", "event_id", *cols)])


def node_rows(events: pl.DataFrame, provenance: pl.DataFrame | None, *, use_stacks: bool = False,
              node_level: bool = False) -> pl.DataFrame:
    """One row per (kernel event, node): provenance nodes where they exist, else the fused ops (a guess).

    `use_stacks`: a kernel without provenance that carries `stacks` (torch 2.14's trace handler)
    gets one row per stack instead (its module and source line; node and ops null).
    `node_level` (per-op and per-node views): provenance rows without a node (a backward kernel
    known only by its stacks, `read_provenance`) are left out, so such a kernel gets its fused
    op list from its name, a guess, as a kernel without provenance.

    Columns: rank, event_id, dur_ns, mapped, node, aten_op, pre_grad_op, module, source (`file:line`),
    source_code.
    """
    base = events.select("rank", "event_id", "kernel", "compile_id", "dur_ns", "fused_ops",
                         pl.col("graph").fill_null("forward") if "graph" in events.columns
                         else pl.lit("forward").alias("graph"))
    mapped = pl.DataFrame(schema={"rank": pl.Int32, "event_id": pl.Int64, "node": pl.String,
                                  "aten_op": pl.String, "pre_grad_op": pl.String, "module": pl.String,
                                  "source": pl.String,
                                  "source_code": pl.String, **dict.fromkeys(PERF_COLUMNS, pl.Int64)})
    if provenance is not None and provenance.height:
        mapped = _mapped_rows(base, provenance, node_level=node_level).select(mapped.columns)
    done = mapped.select("rank", "event_id").unique()
    # a kernel without op names (`triton_poi_fused_0`) keeps one null node: its time stays in every table
    one_null = pl.lit([None], pl.List(pl.String))
    guessed = (base.join(done, on=["rank", "event_id"], how="anti")
               .with_columns(fused_ops=pl.when(pl.col("fused_ops").list.len() > 0).then("fused_ops")
                             .otherwise(one_null))
               .explode("fused_ops")
               .select("rank", "event_id", pl.col("fused_ops").alias("node"),
                       pl.format("aten::{}", "fused_ops").alias("aten_op"),
                       pl.format("aten::{}", "fused_ops").alias("pre_grad_op"),
                       pl.lit(None, pl.String).alias("module"), pl.lit(None, pl.String).alias("source"),
                       pl.lit(None, pl.String).alias("source_code"),
                       *[pl.lit(None, pl.Int64).alias(c) for c in PERF_COLUMNS]))
    if use_stacks and "stacks" in events.columns:
        stacked = stack_rows(events, done)
        guessed = guessed.join(stacked.select("rank", "event_id").unique(), on=["rank", "event_id"], how="anti")
        guessed = pl.concat([guessed, stacked.drop("mapped")])
    rows = pl.concat([mapped.with_columns(mapped=pl.lit(True)), guessed.with_columns(mapped=pl.lit(False))])
    return rows.join(base.select("rank", "event_id", "dur_ns"), on=["rank", "event_id"], how="left").sort(
        "rank", "event_id", "node", nulls_last=True)


def stack_rows(events: pl.DataFrame, done: pl.DataFrame) -> pl.DataFrame:
    """Rows of kernels without provenance that carry `stacks`: one per stack, its module and `file:line`.

    The module is `proftab.io.inductor.module_of_stack` of the stack (the path of `self.NAME(`
    calls), the source the stack's innermost frame. Columns as `node_rows` (node and ops null).
    """
    ev = events.join(done, on=["rank", "event_id"], how="anti").filter(pl.col("stacks").list.len() > 0).select(
        "rank", "event_id", pl.col("stacks").alias("stack")).explode("stack")
    uniq = ev["stack"].unique().drop_nulls().to_list()  # one parse per distinct stack text, not per event
    found = [module_of_stack(t) for t in uniq]
    table = pl.DataFrame({"stack": uniq, "module": [f[0] if f else None for f in found],
                          "source": [f"{f[2]}:{f[1]}" if f else None for f in found]},
                         schema={"stack": pl.String, "module": pl.String, "source": pl.String})
    return ev.join(table, on="stack", how="left").select(
        "rank", "event_id", pl.lit(None, pl.String).alias("node"), pl.lit(None, pl.String).alias("aten_op"),
        pl.lit(None, pl.String).alias("pre_grad_op"), "module", "source", pl.lit(None, pl.String).alias("source_code"),
        *[pl.lit(None, pl.Int64).alias(c) for c in PERF_COLUMNS], mapped=pl.lit(False))


def _extern_op(kernel: pl.Expr) -> pl.Expr:
    """The profiler name of an extern / fallback kernel call: `extern_kernels.mm` -> `aten::mm`,
    `torch.ops.aten.convolution_backward.default` -> `aten::convolution_backward`."""
    return pl.when(kernel.str.starts_with("extern_kernels.")).then(
        pl.format("aten::{}", kernel.str.strip_prefix("extern_kernels."))).when(
        kernel.str.starts_with("torch.ops.aten.")).then(
        pl.format("aten::{}", kernel.str.extract(r"^torch\.ops\.aten\.(\w+)", 1)))


def extern_kernels(nested: pl.DataFrame, provenance: pl.DataFrame | None) -> pl.DataFrame:
    """The aten ops the generated code calls directly (`extern_kernels.addmm`), matched to their FX nodes.

    Inductor numbers its kernel calls in call order (the provenance debug handle); the ops
    directly inside one `## Call CompiledFxGraph ##` annotation that are not generated kernels
    are its extern calls in the same order. The k-th such op of a call is matched to the
    graph's k-th `extern_kernels.X` handle when its name is `aten::X` (else it stays unmatched).
    Needs provenance with compile ids (a structured log), or a single graph's mapping file.

    Returns
    -------
    pl.DataFrame
        `EXTERN_COLUMNS`: the event, its graph call, Inductor's `kernel` and `handle`, and the
        lists `nodes`, `pre_grad_ops`, `modules`, `sources` of its FX nodes.
    """
    empty = pl.DataFrame(schema={"rank": pl.Int32, "event_id": pl.Int64, "name": pl.String, "compile_id": pl.String,
                                 "graph": pl.String, "graph_call_id": pl.Int64, "kernel": pl.String, "handle": pl.Int64,
                                 "start_ns": pl.Int64, "dur_ns": pl.Int64, "nodes": pl.List(pl.String),
                                 "pre_grad_ops": pl.List(pl.String), "modules": pl.List(pl.String),
                                 "sources": pl.List(pl.String), "read_bytes": pl.Int64, "write_bytes": pl.Int64,
                                 "bytes": pl.Int64, "flops": pl.Int64})
    if provenance is None or not provenance.height:
        return empty
    prov = with_graph(provenance).filter(_extern_op(pl.col("kernel")).is_not_null()).with_columns(
        pl.lit(None, pl.Int64).alias(c) for c in PERF_COLUMNS if c not in provenance.columns)
    if prov["compile_id"].is_null().any():
        if prov["artifact"].n_unique() != 1:
            return empty  # several graphs without compile ids: no way to tell their calls apart
        prov = prov.with_columns(compile_id=pl.lit(None, pl.String))
    matched = _matched_calls(nested, prov)
    if not matched.height:
        return empty
    src = prov.with_columns(source=pl.when(pl.col("source_file").is_not_null())
                            .then(pl.format("{}:{}", "source_file", "source_line")))
    lists = src.group_by("compile_id", "graph", "kernel", "handle").agg(
        pl.col("node").sort().alias("nodes"), pl.col("pre_grad_op").drop_nulls().unique().sort().alias("pre_grad_ops"),
        pl.col("module").drop_nulls().unique().sort().alias("modules"),
        pl.col("source").drop_nulls().unique().sort().alias("sources"),
        *[pl.col(f"kernel_{c}").first().alias(c) for c in ("read_bytes", "write_bytes", "flops")]).with_columns(
        bytes=pl.col("read_bytes") + pl.col("write_bytes"))
    return matched.join(lists, on=["compile_id", "graph", "kernel", "handle"], how="left", nulls_equal=True).select(
        EXTERN_COLUMNS).sort("rank", "start_ns", "event_id")


def _matched_calls(nested: pl.DataFrame, prov: pl.DataFrame) -> pl.DataFrame:
    """The k-th non-generated op directly inside each graph call, paired with the graph's k-th extern handle
    when its name is the handle's op: the event columns, `compile_id`, `graph`, `graph_call_id`, `kernel`,
    `handle`."""
    calls = graph_calls(nested).rename({"event_id": "graph_call_id"})
    kids = (nested.filter(kinds.is_host_op() & ~pl.col("name").str.contains(GENERATED_PATTERN))
            .select("rank", "event_id", "name", "start_ns", "dur_ns", pl.col("parent_id").alias("graph_call_id"))
            .join(calls.with_columns(pl.col("graph").fill_null("forward")), on=["rank", "graph_call_id"],
                  how="inner")
            .sort("rank", "graph_call_id", "start_ns", "event_id")
            .with_columns(_k=pl.int_range(pl.len()).over("rank", "graph_call_id")))
    handles = (prov.select("compile_id", "graph", "kernel", "handle").unique()
               .sort("compile_id", "graph", "handle", nulls_last=True)
               .with_columns(_k=pl.int_range(pl.len()).over("compile_id", "graph")))
    return kids.join(handles, on=["compile_id", "graph", "_k"], how="inner", nulls_equal=True).filter(
        pl.col("name") == _extern_op(pl.col("kernel")))
