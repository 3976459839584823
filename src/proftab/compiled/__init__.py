"""torch.compile: generated kernels back to their compiled region, FX nodes, aten ops, modules and source lines.

A generated kernel is an event named as Inductor names its kernels (`triton_poi_fused_add_mul_0`,
`cpp_fused_gelu_view_2`, `graph_0_cpp_fused_...` with `TORCHINDUCTOR_CPP_ENABLE_KERNEL_PROFILE=1`):
a device kernel (Triton), or a host event when the kernel runs on the CPU (Inductor's C++). Its
region is the nearest enclosing `## Call CompiledFxGraph <hash> ##` annotation and `Torch-Compiled
Region: <frame>/<compile>` op (for a device kernel: of the op that launched it).

With Inductor's provenance artifacts (`pt.load(..., compile_provenance=DIR)`, `proftab.io.inductor`)
each kernel gets the FX nodes it computes, their aten ops, nn.Module paths and source lines
(`mapped`); without them, the op list is read from the kernel's name and is a guess (`guess`).

Apportioning (`by_op`, `by_module`, `by_source`, `key_averages`): a kernel event's duration is
split equally over its nodes (with provenance: its post-grad FX nodes; without: its fused ops),
in int64 ns: each node gets `dur // n`, and the first `dur % n` nodes in node-name order get
1 ns more, so the shares of one event sum to its duration exactly. docs/compiled.md.

>>> tr = pt.load("run.pt.trace.json.gz", compile_provenance="debug_dir")   # doctest: +SKIP
>>> tr.compiled.kernels()     # one row per generated-kernel event              # doctest: +SKIP
>>> tr.compiled.by_source()   # kernel time per model source line               # doctest: +SKIP
>>> tr.compiled.regions()     # per compiled graph: calls, time, recompiles     # doctest: +SKIP
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

import numpy as np
import polars as pl

from proftab import kinds
from proftab.api import register_trace_namespace
from proftab.compiled._names import GENERATED_PATTERN, KIND_NAMES, kernel_name_columns, split_fused_ops
from proftab.exceptions import UsageError
from proftab.intervals.tree import nearest_ancestor, row_positions
from proftab.io.inductor import PROVENANCE_TABLE, module_of_stack
from proftab.modules._table import MODULE_COLUMNS
from proftab.torch.columns import SUMMED_COLUMNS

if TYPE_CHECKING:
    from proftab.trace import Trace

__all__ = ["EXTERN_COLUMNS", "KERNEL_COLUMNS", "KIND_NAMES", "PROVENANCE_TABLE", "REGION_COLUMNS", "Compiled",
           "COMPILED_MODULE_EXTRA", "apportion", "extern_kernels", "kernel_events", "kernels", "key_averages",
           "module_times", "regions", "split_fused_ops"]

CALL_PREFIX = "## Call CompiledFxGraph"
REGION_PREFIX = "Torch-Compiled Region"
#: AOTAutograd's autograd.Function: its forward op runs the forward graph, its backward node the backward graph
FORWARD_FN = "CompiledFunction"
BACKWARD_FN = "CompiledFunctionBackward"
_COMPILE_ID_RE = r"compile_id=(\d+/\d+)"

KERNEL_COLUMNS = ["rank", "event_id", "name", "kernel", "backend", "kernel_kind", "on_device", "start_ns",
                  "dur_ns", "launch_id", "compile_id", "graph",
                  "region_id", "graph_call_id", "graph_hash", "kernel_file",
                  "inductor_bytes", "inductor_flops", "stacks", "fused_ops", "mapped", "guess", "n_nodes", "nodes",
                  "aten_ops", "modules", "sources", "read_bytes", "write_bytes", "bytes", "flops"]
#: columns of `module_times` (`tr.modules.modules(compiled=True)`): `proftab.modules.MODULE_COLUMNS` plus these
COMPILED_MODULE_EXTRA = ["name", "unmapped_ns", "n_kernels"]
REGION_COLUMNS = ["rank", "compile_id", "graph", "frame_id",
                   "compile_index", "recompile", "compiled_in_trace", "n_calls",
                  "total_ns", "kernel_ns", "n_kernels", "graph_hashes"]


def _take(values: pl.Series, rows: np.ndarray, name: str) -> pl.Series:
    """`values` at row positions `rows`, null where a row is -1 (vectorized)."""
    if not len(rows):
        return pl.Series(name, [], values.dtype)
    got = values.gather(np.maximum(rows, 0)).alias(name)
    return pl.select(pl.when(pl.Series(rows >= 0)).then(got)).to_series().alias(name)


def _parents(n: pl.DataFrame) -> np.ndarray:
    rank = n["rank"].to_numpy()
    return row_positions(rank, n["event_id"].to_numpy(), rank, n["parent_id"].fill_null(-1).to_numpy())


def _backward_compile_ids(n: pl.DataFrame, parents: np.ndarray, is_region: np.ndarray) -> pl.DataFrame:
    """Each `CompiledFunctionBackward` op (rank, event_id) and the compile id of its forward.

    The backward node runs outside any `Torch-Compiled Region`; it is linked to the forward
    `CompiledFunction` op with the same rank and sequence number that started last before it
    (autograd gives a node the sequence number of the op that created it; as
    `proftab.modules` links eager backward ops), whose enclosing region names the compile id.
    Sort + as-of join: O(n log n).
    """
    empty = pl.DataFrame(schema={"rank": pl.Int32, "event_id": pl.Int64, "_bwd_cid": pl.String})
    if "sequence_number" not in n.columns:
        return empty
    names = n["name"]
    fwd_rows = np.flatnonzero((names == FORWARD_FN).to_numpy())
    bwd_rows = np.flatnonzero((names == BACKWARD_FN).to_numpy())
    if not len(fwd_rows) or not len(bwd_rows):
        return empty
    up = nearest_ancestor(parents, fwd_rows, is_region)
    fwd = n[fwd_rows].select("rank", "sequence_number", "start_ns").with_columns(
        _take(names, up, "_region").str.extract(r"(\d+/\d+)", 1).alias("_bwd_cid")).drop_nulls(
        "sequence_number").sort("start_ns")
    bwd = n[bwd_rows].select("rank", "event_id", "sequence_number", "start_ns").drop_nulls("sequence_number").sort(
        "start_ns")
    return bwd.join_asof(fwd, on="start_ns", by=["rank", "sequence_number"], strategy="backward",
                         check_sortedness=False).select(  # both sorted by start_ns, so within every group too
        "rank", "event_id", "_bwd_cid")


def _backward_compiled_ops(nested: pl.DataFrame) -> pl.Series:
    """(rank, event_id) structs of the `CompiledFunctionBackward` ops linked to a compile id."""
    empty = pl.Series("ops", [], pl.Struct({"rank": pl.Int32, "event_id": pl.Int64}))
    if "sequence_number" not in nested.columns or not (nested["name"] == BACKWARD_FN).any():
        return empty
    links = _backward_compile_ids(nested, _parents(nested), nested["name"].str.starts_with(REGION_PREFIX).to_numpy())
    return links.filter(pl.col("_bwd_cid").is_not_null()).select(pl.struct("rank", "event_id")).to_series()


def _anchor_graphs(n: pl.DataFrame, parents: np.ndarray, start: np.ndarray) -> pl.DataFrame:
    """For rows `start` (-1: none) of `n`: `compile_id` and `graph` ("forward" / "backward" / null).

    A row under a `CompiledFunctionBackward` op is backward, with its forward's compile id
    (`_backward_compile_ids`); else a row under a `Torch-Compiled Region` (or an AOTAutograd
    `CompiledFunction`) is forward, with the region's compile id; else both are null.
    """
    if not len(start):  # (no rows: `parents` may not have been built)
        return pl.DataFrame(schema={"compile_id": pl.String, "graph": pl.String})
    names = n["name"]
    is_region = names.str.starts_with(REGION_PREFIX).to_numpy()
    is_bwd = (names == BACKWARD_FN).to_numpy()
    is_fwd = is_region | (names == FORWARD_FN).to_numpy()

    def ancestor(mask: np.ndarray) -> np.ndarray:
        out = np.full(len(start), -1, np.int64)
        ok = start >= 0
        out[ok] = nearest_ancestor(parents, start[ok], mask)
        return out

    region_row, bwd_row, fwd_row = ancestor(is_region), ancestor(is_bwd), ancestor(is_fwd)
    frame = pl.DataFrame({"_i": np.arange(len(start)), "_region": _take(names, region_row, "_region"),
                          "rank": _take(n["rank"], bwd_row, "rank"), "event_id": _take(n["event_id"], bwd_row, "e")})
    links = _backward_compile_ids(n, parents, is_region) if is_bwd.any() else None
    if links is not None and links.height:
        frame = frame.join(links, on=["rank", "event_id"], how="left", maintain_order="left")
    else:
        frame = frame.with_columns(_bwd_cid=pl.lit(None, pl.String))
    back = pl.Series(bwd_row >= 0)
    return frame.sort("_i").select(
        compile_id=pl.when(back).then("_bwd_cid").otherwise(pl.col("_region").str.extract(r"(\d+/\d+)", 1)),
        graph=pl.when(back).then(pl.lit("backward")).when(pl.Series(fwd_row >= 0)).then(pl.lit("forward")))


def kernel_events(nested: pl.DataFrame, activities: pl.DataFrame | None = None) -> pl.DataFrame:
    """Every generated-kernel event with its region (no provenance).

    Parameters
    ----------
    nested
        `Trace.nested` (at least rank, event_id, parent_id, cat, name, start_ns, dur_ns, args).
    activities
        `Trace.device.activities()` when the trace has device rows (device kernels find their
        launching op there; host `triton_*` ops are then launches, never kernel rows), else None.

    Returns
    -------
    pl.DataFrame
        `rank`, `event_id`, `name`, `kernel`, `backend`, `kernel_kind`, `fused_ops`,
        `on_device`, `start_ns`, `dur_ns`, `launch_id` (the op that launched a device kernel),
        `compile_id` (`"0/0"` of the enclosing `Torch-Compiled Region`; a backward kernel: of the
        region its forward ran in), `graph` (`"backward"`: under AOTAutograd's
        `CompiledFunctionBackward`; `"forward"`: under a region; else null), `region_id` (the
        region's event_id; null for backward kernels), `graph_call_id` (event_id of the
        `## Call CompiledFxGraph ##` annotation),
        `graph_hash`, `kernel_file` (Triton launch args), `inductor_bytes` / `inductor_flops`
        (Inductor's own `kernel_num_gb` x 1e9 / `kernel_flop` launch args, written with
        `TORCHINDUCTOR_BENCHMARK_KERNEL=1` or `TORCHINDUCTOR_PROFILE_BANDWIDTH=1`; else null),
        `stacks` (the kernel event's `stack` arg: the model stacks torch 2.14's
        `inductor_trace_handler` writes with `TORCH_COMPILE_DEBUG_EXTEND=1`; else null).
        Sorted by rank, start_ns, event_id.
    """
    n = nested.select("rank", "event_id", "parent_id", "cat", "name", "start_ns", "dur_ns", "args",
                      *[c for c in ("sequence_number",) if c in nested.columns])
    is_gen = pl.col("name").str.contains(GENERATED_PATTERN)
    device = n.filter(is_gen & kinds.is_device_work())
    host = n.filter(is_gen & ~kinds.is_device(), kinds.is_host())
    if activities is not None:  # a host `triton_*` op is a launch, not the kernel (its device kernel may be
        host = host.filter(~pl.col("name").str.starts_with("triton_"))  # unlinked, e.g. in a CUDA graph replay)
    launch = pl.DataFrame(schema={"rank": pl.Int32, "event_id": pl.Int64, "launch_id": pl.Int64})
    if device.height and activities is not None:
        launch = activities.select("rank", "event_id", pl.col("op_id").alias("launch_id"))
    device = device.join(launch, on=["rank", "event_id"], how="left").with_columns(on_device=pl.lit(True))
    launchers = device.select("rank", pl.col("launch_id").alias("event_id")).drop_nulls()
    host = (host.join(launchers, on=["rank", "event_id"], how="anti")
            .with_columns(launch_id=pl.lit(None, pl.Int64), on_device=pl.lit(False)))
    ev = pl.concat([host.select(device.columns), device]).sort("rank", "start_ns", "event_id")
    anchor_id = pl.coalesce("launch_id", pl.when(~pl.col("on_device")).then("event_id"))
    # O(n) over the trace only when it has generated kernels (tr.perf asks every trace)
    parents = _parents(n) if ev.height else np.empty(0, np.int64)
    start = row_positions(n["rank"].to_numpy(), n["event_id"].to_numpy(), ev["rank"].to_numpy(),
                          ev.select(anchor_id.fill_null(-1)).to_series().to_numpy()) if ev.height else np.empty(
        0, np.int64)
    names = n["name"]
    cats = n["cat"].cast(pl.String)
    is_call = (names.str.starts_with(CALL_PREFIX) & (cats == kinds.USER_ANNOTATION)).to_numpy()
    is_region = names.str.starts_with(REGION_PREFIX).to_numpy()

    def ancestor(mask: np.ndarray) -> np.ndarray:
        out = np.full(len(start), -1, np.int64)
        ok = start >= 0
        # the anchor itself counts (a launcher) only as its own parent's child: strict ancestors
        out[ok] = nearest_ancestor(parents, start[ok], mask)
        return out

    call_row, region_row = ancestor(is_call), ancestor(is_region)
    ids = n["event_id"]
    uniq = ev.select(pl.col("name").unique()).with_columns(kernel_name_columns(pl.col("name")))
    ev = pl.concat([ev.with_columns(
        _take(ids, call_row, "graph_call_id"), _take(names, call_row, "_call"),
        _take(ids, region_row, "region_id")), _anchor_graphs(n, parents, start)], how="horizontal").join(
        uniq, on="name", how="left")
    launchers_of = ev.select("rank", pl.col("launch_id").alias("event_id")).drop_nulls().unique()
    launcher_args = n.join(launchers_of, on=["rank", "event_id"], how="semi").select(  # only their args are parsed
        "rank", pl.col("event_id").alias("launch_id"),
        pl.col("args").str.json_path_match("$.kernel_file").alias("kernel_file"),
        (pl.col("args").str.json_path_match("$.kernel_num_gb").cast(pl.Float64, strict=False) * 1e9).round()
        .cast(pl.Int64).alias("inductor_bytes"),
        pl.col("args").str.json_path_match("$.kernel_flop").cast(pl.Float64, strict=False).round().cast(pl.Int64)
        .alias("inductor_flops"))
    own_args = n.join(ev.select("rank", "event_id"), on=["rank", "event_id"], how="semi").select(
        "rank", "event_id", pl.col("args").str.json_path_match("$.stack")
                        .str.json_decode(pl.List(pl.String)).alias("stacks"))
    if ev.height:
        ev = ev.join(launcher_args, on=["rank", "launch_id"], how="left").join(own_args, on=["rank", "event_id"],
                                                                                how="left")
    else:
        ev = ev.with_columns(kernel_file=pl.lit(None, pl.String), inductor_bytes=pl.lit(None, pl.Int64),
                             inductor_flops=pl.lit(None, pl.Int64), stacks=pl.lit(None, pl.List(pl.String)))
    return ev.with_columns(
        graph_hash=pl.col("_call").str.extract(r"## Call CompiledFxGraph (\S+) ##", 1),
    ).select("rank", "event_id", "name", "kernel", "backend", "kernel_kind", "fused_ops", "on_device", "start_ns",
             "dur_ns", "launch_id", "compile_id", "graph", "region_id", "graph_call_id", "graph_hash", "kernel_file",
             "inductor_bytes", "inductor_flops", "stacks")


EXTERN_COLUMNS = ["rank", "event_id", "name", "compile_id", "graph", "graph_call_id",
                   "kernel", "handle", "start_ns", "dur_ns",
                  "nodes", "pre_grad_ops", "modules", "sources", "read_bytes", "write_bytes", "bytes", "flops"]


def _graph_calls(nested: pl.DataFrame) -> pl.DataFrame:
    """The `## Call CompiledFxGraph ##` annotations with the compile id and graph they run (`_anchor_graphs`)."""
    n = nested
    calls = n.filter(pl.col("name").str.starts_with(CALL_PREFIX) & kinds.is_user_annotation()).select(
        "rank", "event_id")
    if not calls.height:
        return calls.with_columns(compile_id=pl.lit(None, pl.String), graph=pl.lit(None, pl.String))
    parents = _parents(n)
    starts = row_positions(n["rank"].to_numpy(), n["event_id"].to_numpy(), calls["rank"].to_numpy(),
                           calls["event_id"].to_numpy())
    return pl.concat([calls, _anchor_graphs(n, parents, starts)], how="horizontal")


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
    prov = _with_graph(provenance).filter(_extern_op(pl.col("kernel")).is_not_null()).with_columns(
        pl.lit(None, pl.Int64).alias(c) for c in _PERF if c not in provenance.columns)
    if prov["compile_id"].is_null().any():
        if prov["artifact"].n_unique() != 1:
            return empty  # several graphs without compile ids: no way to tell their calls apart
        prov = prov.with_columns(compile_id=pl.lit(None, pl.String))
    calls = _graph_calls(nested).rename({"event_id": "graph_call_id"})
    kids = (nested.filter(kinds.is_host_op() & ~pl.col("name").str.contains(GENERATED_PATTERN))
            .select("rank", "event_id", "name", "start_ns", "dur_ns", pl.col("parent_id").alias("graph_call_id"))
            .join(calls.with_columns(pl.col("graph").fill_null("forward")), on=["rank", "graph_call_id"],
                  how="inner")
            .sort("rank", "graph_call_id", "start_ns", "event_id")
            .with_columns(_k=pl.int_range(pl.len()).over("rank", "graph_call_id")))
    handles = (prov.select("compile_id", "graph", "kernel", "handle").unique()
               .sort("compile_id", "graph", "handle", nulls_last=True)
               .with_columns(_k=pl.int_range(pl.len()).over("compile_id", "graph")))
    matched = kids.join(handles, on=["compile_id", "graph", "_k"], how="inner", nulls_equal=True).filter(
        pl.col("name") == _extern_op(pl.col("kernel")))
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


#: the kernel-level perf model columns of the provenance (`proftab.io.inductor_graph`)
_PERF = ["kernel_read_bytes", "kernel_write_bytes", "kernel_flops"]


def _with_graph(provenance: pl.DataFrame) -> pl.DataFrame:
    """The provenance with `graph` filled: a frame without the column (or a null) is a forward graph's."""
    if "graph" not in provenance.columns:
        return provenance.with_columns(graph=pl.lit("forward"))
    return provenance.with_columns(pl.col("graph").fill_null("forward"))


def _node_rows(events: pl.DataFrame, provenance: pl.DataFrame | None, *, use_stacks: bool = False,
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
                                  "source_code": pl.String, **dict.fromkeys(_PERF, pl.Int64)})
    if provenance is not None and provenance.height:
        prov = _with_graph(provenance)
        if node_level:
            prov = prov.filter(pl.col("node").is_not_null())
        prov = prov.with_columns(
            source=pl.when(pl.col("source_file").is_not_null())
            .then(pl.format("{}:{}", "source_file", "source_line")))
        prov = prov.with_columns(pl.lit(None, pl.Int64).alias(c) for c in _PERF if c not in prov.columns)
        cols = ["node", "aten_op", "pre_grad_op", "module", "source", "source_code", *_PERF]
        by_id = prov.filter(pl.col("compile_id").is_not_null()).select("compile_id", "graph", "kernel", *cols)
        # mapping files without a compile id: per (graph, kernel name), the first artifact that has it
        first = (prov.filter(pl.col("compile_id").is_null()).select("artifact", "graph", "kernel")
                 .unique(maintain_order=True).unique(subset=["graph", "kernel"], keep="first", maintain_order=True))
        no_id = prov.join(first, on=["artifact", "graph", "kernel"], how="semi").select("graph", "kernel", *cols)
        a = base.join(by_id, on=["compile_id", "graph", "kernel"], how="inner")
        b = base.join(a.select("rank", "event_id").unique(), on=["rank", "event_id"], how="anti").join(
            no_id, on=["graph", "kernel"], how="inner")
        mapped = pl.concat([a.select(mapped.columns), b.select(mapped.columns)])
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
                       *[pl.lit(None, pl.Int64).alias(c) for c in _PERF]))
    if use_stacks and "stacks" in events.columns:
        stacked = _stack_rows(events, done)
        guessed = guessed.join(stacked.select("rank", "event_id").unique(), on=["rank", "event_id"], how="anti")
        guessed = pl.concat([guessed, stacked.drop("mapped")])
    rows = pl.concat([mapped.with_columns(mapped=pl.lit(True)), guessed.with_columns(mapped=pl.lit(False))])
    return rows.join(base.select("rank", "event_id", "dur_ns"), on=["rank", "event_id"], how="left").sort(
        "rank", "event_id", "node", nulls_last=True)


def _stack_rows(events: pl.DataFrame, done: pl.DataFrame) -> pl.DataFrame:
    """Rows of kernels without provenance that carry `stacks`: one per stack, its module and `file:line`.

    The module is `proftab.io.inductor.module_of_stack` of the stack (the path of `self.NAME(`
    calls), the source the stack's innermost frame. Columns as `_node_rows` (node and ops null).
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
        *[pl.lit(None, pl.Int64).alias(c) for c in _PERF], mapped=pl.lit(False))


def _with_shares(rows: pl.DataFrame) -> pl.DataFrame:
    """`share_ns` per node row: the event's duration split equally, remainder to the first nodes (exact sums)."""
    n = pl.len().over("rank", "event_id")
    k = pl.int_range(pl.len()).over("rank", "event_id")
    dur = pl.col("dur_ns").clip(lower_bound=0)
    return rows.with_columns(share_ns=(dur // n + (k < dur % n).cast(pl.Int64)).cast(pl.Int64))


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
    rows = _node_rows(events, provenance)
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
        from_stacks = _stack_rows(events, rows.filter(pl.col("mapped")).select("rank", "event_id").unique()).group_by(
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


By = Literal["op", "pre_grad_op", "module", "source", "node"]
_KEYS: dict[str, list[str]] = {"op": ["aten_op"], "pre_grad_op": ["pre_grad_op"], "module": ["module"],
                               "source": ["source", "source_code"],
                               "node": ["node", "aten_op", "module", "source"]}


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
    rows = _with_shares(_node_rows(events, provenance, use_stacks=by in ("module", "source"),
                                   node_level=by not in ("module", "source")))
    total = int(rows["share_ns"].sum()) if rows.height else 0
    return (rows.group_by(keys).agg(
        pl.col("share_ns").sum().cast(pl.Int64).alias("time_ns"),
        pl.col("share_ns").filter(~pl.col("mapped")).sum().cast(pl.Int64).alias("guess_ns"),
        pl.struct("rank", "event_id").n_unique().cast(pl.Int64).alias("n_kernels"),
        pl.len().cast(pl.Int64).alias("n_nodes"))
        .with_columns(share=pl.col("time_ns") / total if total else pl.lit(0.0))
        .sort(["time_ns", *keys], descending=[True, *[False] * len(keys)], nulls_last=True))


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
            _backward_compile_ids(n, _parents(n), n["name"].str.starts_with(REGION_PREFIX).to_numpy()),
            on=["rank", "event_id"], how="left")
        reg = pl.concat([reg, bwd_ops.filter(pl.col("_bwd_cid").is_not_null()).select(  # forward in no region: as
            "rank", "dur_ns", pl.col("_bwd_cid").alias("compile_id"), graph=pl.lit("backward"))])  # it, left out
    compiled_here = (n.filter(pl.col("name").str.contains(_COMPILE_ID_RE))
                     .select("rank", compile_id=pl.col("name").str.extract(_COMPILE_ID_RE, 1)).unique()
                     .with_columns(compiled_in_trace=pl.lit(True)))
    calls = _graph_calls(n).join(n.select("rank", "event_id", "name"), on=["rank", "event_id"], how="left")
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
    rows = _with_shares(_node_rows(events, provenance, node_level=True)).with_columns(
        aten_op=pl.coalesce("pre_grad_op", "aten_op")).join(
        events.select("rank", "event_id", "on_device"), on=["rank", "event_id"], how="left")
    dev_type = ops["device_type"].filter(ops["device_type"] != "CPU").first() if "device_type" in ops.columns \
        else None
    rows = rows.with_columns(aten_op=pl.col("aten_op").fill_null(pl.format("inductor::{}", "node")),
                             _total_only=pl.lit(False)).select(
        "rank", "event_id", "aten_op", "share_ns", "on_device", "_total_only")
    if externs is not None and externs.height:
        ext = (externs.with_columns(pl.col("pre_grad_ops").list.first().alias("aten_op")).filter(
            pl.col("aten_op").is_not_null()).select("rank", "event_id", "dur_ns", "aten_op",
                                                    pl.lit("").alias("node"))
               .pipe(_with_shares).with_columns(on_device=pl.lit(False), _total_only=pl.lit(True)))
        rows = pl.concat([rows, ext.select(rows.columns)])
    per_op = rows.group_by("aten_op").agg(
        pl.col("share_ns").filter(~pl.col("on_device") & ~pl.col("_total_only")).sum().cast(pl.Int64).alias("_host"),
        pl.col("share_ns").filter(pl.col("_total_only")).sum().cast(pl.Int64).alias("_ext"),
        pl.col("share_ns").filter(pl.col("on_device")).sum().cast(pl.Int64).alias("_dev"),
        pl.struct("rank", "event_id").filter(~pl.col("on_device") & ~pl.col("_total_only")).n_unique()
        .cast(pl.Int64).alias("_nh"),
        pl.struct("rank", "event_id").filter(pl.col("_total_only")).n_unique().cast(pl.Int64).alias("_ne"),
        pl.struct("rank", "event_id").filter(pl.col("on_device")).n_unique().cast(pl.Int64).alias("_nd"))
    gen_names = events["name"].unique()
    kept = ops.filter(~pl.col("name").is_in(gen_names.implode()))
    host_rows = per_op.filter((pl.col("_nh") > 0) | (pl.col("_ne") > 0)).select(
        pl.col("aten_op").alias("name"), pl.col("_host").alias("_add"), pl.col("_ext"),
        pl.when(pl.col("_nh") > 0).then("_nh").otherwise("_ne").alias("_n")).with_columns(
        device_type=pl.lit("CPU"), _on_dev=pl.lit(False))
    dev_rows = per_op.filter(pl.col("_nd") > 0).select(
        pl.col("aten_op").alias("name"), pl.col("_dev").alias("_add"), pl.lit(0, pl.Int64).alias("_ext"),
        pl.col("_nd").alias("_n")).with_columns(device_type=pl.lit(dev_type or "CUDA"), _on_dev=pl.lit(True))
    add = pl.concat([host_rows, dev_rows]).sort("name", "device_type")  # new rows in a deterministic order
    if not add.height:
        return kept
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


def _module_shares(events: pl.DataFrame, provenance: pl.DataFrame | None, externs: pl.DataFrame | None) -> pl.DataFrame:
    """Per charge: rank, event_id, graph_call_id, graph, module (null: unknown), on_device, share_ns (exact sums)."""
    rows = _with_shares(_node_rows(events, provenance, use_stacks=True)).join(
        events.select("rank", "event_id", "on_device", "graph_call_id", "graph"), on=["rank", "event_id"],
        how="left").select("rank", "event_id", "graph_call_id", "graph", "module", "on_device", "share_ns")
    if externs is None or not externs.height:
        return rows
    one_null = pl.lit([None], pl.List(pl.String))
    ext = (externs.with_columns(module=pl.when(pl.col("modules").list.len() > 0).then("modules").otherwise(one_null))
           .explode("module").with_columns(node=pl.col("module").fill_null(""))
           .select("rank", "event_id", "graph_call_id", "graph", "module", "dur_ns", "node").pipe(_with_shares)
           .with_columns(on_device=pl.lit(False)))
    return pl.concat([rows, ext.select(rows.columns)])


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
    charges = _module_shares(events, provenance, externs)
    full = (pl.when(pl.col("module").is_null() | (pl.col("module") == "")).then(pl.lit(root))
            .otherwise(pl.format("{}.{}", pl.lit(root), pl.col("module"))))
    charges = charges.with_columns(path=full, _unmapped=pl.col("module").is_null(),
                                   _bwd=pl.col("graph").fill_null("forward") == "backward")
    host, dev, bwd = ~pl.col("on_device"), pl.col("on_device"), pl.col("_bwd")
    # the root's own time: the regions (forward) and the CompiledFunctionBackward ops (backward) outside kernels;
    # a backward op counts when linked to a forward in a region (`_backward_compile_ids`), as regions() counts it
    linked = _backward_compiled_ops(nested)
    runs = nested.filter(pl.col("name").str.starts_with(REGION_PREFIX) | (
        (pl.col("name") == BACKWARD_FN) & pl.struct("rank", "event_id").is_in(linked.implode()))).group_by(
        "rank").agg(pl.col("dur_ns").filter(pl.col("name") != BACKWARD_FN).sum().cast(pl.Int64).alias("_region_ns"),
                    (pl.col("name") != BACKWARD_FN).sum().cast(pl.Int64).alias("_region_calls"),
                    pl.col("dur_ns").filter(pl.col("name") == BACKWARD_FN).sum().cast(pl.Int64).alias("_bwd_fn_ns"),
                    (pl.col("name") == BACKWARD_FN).sum().cast(pl.Int64).alias("_bwd_fn_calls"))
    own = charges.group_by("rank", "path").agg(
        pl.col("share_ns").filter(host & ~bwd).sum().cast(pl.Int64).alias("host_self_ns"),
        pl.col("share_ns").filter(dev & ~bwd).sum().cast(pl.Int64).alias("device_self_ns"),
        pl.col("share_ns").filter(host & bwd).sum().cast(pl.Int64).alias("bwd_host_self_ns"),
        pl.col("share_ns").filter(dev & bwd).sum().cast(pl.Int64).alias("bwd_device_self_ns"),
        pl.col("share_ns").filter(pl.col("_unmapped")).sum().cast(pl.Int64).alias("unmapped_ns"),
        pl.struct("event_id").n_unique().cast(pl.Int64).alias("n_kernels"))
    # every path and its ancestors (prefixes), so a module with no node of its own still has a row
    paths = pl.concat([own.select("rank", "path"), runs.select("rank", pl.lit(root).alias("path"))]).unique()
    parts = paths.with_columns(_parts=pl.col("path").str.split("."))
    anc = (parts.with_columns(_n=pl.int_ranges(1, pl.col("_parts").list.len() + 1)).explode("_n")
           .select("rank", "path", anc=pl.col("_parts").list.head(pl.col("_n")).list.join(".")))
    keys = anc.select("rank", pl.col("anc").alias("path")).unique()
    host_charged = charges.filter(host).group_by("rank").agg(
        pl.col("share_ns").filter(~bwd).sum().cast(pl.Int64).alias("_charged"),
        pl.col("share_ns").filter(bwd).sum().cast(pl.Int64).alias("_bwd_charged"))
    self_cols = ["host_self_ns", "device_self_ns", "bwd_host_self_ns", "bwd_device_self_ns"]
    is_root = pl.col("path") == root
    own = (keys.join(own, on=["rank", "path"], how="left").with_columns(
        pl.col(*self_cols, "unmapped_ns", "n_kernels").fill_null(0))
        .join(runs, on="rank", how="left").join(host_charged, on="rank", how="left")
        .with_columns(
            host_self_ns=pl.when(is_root).then(
                pl.col("host_self_ns") + (pl.col("_region_ns").fill_null(0) - pl.col("_charged").fill_null(0)).clip(0))
            .otherwise("host_self_ns"),
            bwd_host_self_ns=pl.when(is_root).then(
                pl.col("bwd_host_self_ns")
                + (pl.col("_bwd_fn_ns").fill_null(0) - pl.col("_bwd_charged").fill_null(0)).clip(0))
            .otherwise("bwd_host_self_ns")))
    sub = anc.join(own.select("rank", "path", *self_cols), on=["rank", "path"])
    totals = sub.group_by("rank", pl.col("anc").alias("path")).agg(
        pl.col(c).sum().cast(pl.Int64).alias(c.replace("_self_", "_total_")) for c in self_cols)
    calls_of = (anc.join(charges.select("rank", "path", "graph_call_id", "_bwd"), on=["rank", "path"])
                .group_by("rank", pl.col("anc").alias("path")).agg(
                    pl.col("graph_call_id").filter(~bwd).drop_nulls().n_unique().cast(pl.Int64).alias("n_calls"),
                    pl.col("graph_call_id").filter(bwd).drop_nulls().n_unique().cast(pl.Int64).alias("n_bwd_calls")))
    out = (own.join(totals, on=["rank", "path"], how="left").join(calls_of, on=["rank", "path"], how="left")
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
    zero = ["n_recompute_calls", "recompute_ns", "recompute_device_ns", "n_ops"]
    out = out.with_columns(pl.lit(0, pl.Int64).alias(c) for c in zero).with_columns(
        pl.col("host_total_ns", "device_total_ns", "bwd_host_total_ns", "bwd_device_total_ns").fill_null(0))
    return out.select(*MODULE_COLUMNS, *COMPILED_MODULE_EXTRA).sort(
        ["host_total_ns", "device_total_ns", "rank", "path"], descending=[True, True, False, False])


@register_trace_namespace("compiled")
class Compiled:
    """`tr.compiled`: torch.compile's generated kernels mapped to regions, FX nodes, ops, modules, source lines.

    Provenance comes from `pt.load(..., compile_provenance=...)` (the `compile_provenance`
    table) or `with_provenance`; without it every kernel is a guess from its name.
    """

    def __init__(self, trace: Trace) -> None:
        self._trace = trace

    @property
    def provenance(self) -> pl.DataFrame | None:
        """The provenance table (`proftab.io.inductor.PROVENANCE_COLUMNS`), or None."""
        if PROVENANCE_TABLE in self._trace.tables:
            return self._trace.collect(PROVENANCE_TABLE)
        return None

    def events(self) -> pl.DataFrame:
        """Generated-kernel events with their region (`kernel_events`)."""
        def compute() -> pl.DataFrame:
            cats = self._trace.categories
            acts = self._trace.device.activities() if kinds.has_device_rows(cats) else None
            nested = self._trace.collect("nested", ["rank", "event_id", "parent_id", "cat", "name", "start_ns",
                                                    "dur_ns", "args", "sequence_number"])
            return kernel_events(nested, acts)
        out: pl.DataFrame = self._trace.cached("compiled:events", compute)
        return out

    def kernels(self) -> pl.DataFrame:
        """One row per generated-kernel event: region, nodes, ops, modules, sources, time (`kernels`)."""
        return kernels(self.events(), self.provenance)

    def by_op(self, level: Literal["post_grad", "pre_grad"] = "post_grad") -> pl.DataFrame:
        """Kernel time per aten op, split equally over each kernel's nodes (`apportion`).

        `level="pre_grad"`: per torch-level op the model called (`aten::layer_norm`), as eager runs it.
        """
        return apportion(self.events(), self.provenance, "op" if level == "post_grad" else "pre_grad_op")

    def by_module(self) -> pl.DataFrame:
        """Kernel time per nn.Module path (needs provenance; else one null row) (`apportion`)."""
        return apportion(self.events(), self.provenance, "module")

    def by_source(self) -> pl.DataFrame:
        """Kernel time per model source line `file:line` (needs provenance; else one null row) (`apportion`)."""
        return apportion(self.events(), self.provenance, "source")

    def by_node(self) -> pl.DataFrame:
        """Kernel time per FX node (`apportion`)."""
        return apportion(self.events(), self.provenance, "node")

    def regions(self) -> pl.DataFrame:
        """Per compiled graph: calls, time, kernels, recompiles (`regions`)."""
        nested = self._trace.collect("nested", ["rank", "event_id", "parent_id", "cat", "name", "start_ns", "dur_ns",
                                                "sequence_number"])
        return regions(nested, self.events())

    def extern_kernels(self) -> pl.DataFrame:
        """The aten ops the generated code calls (`extern_kernels.addmm`) with their FX nodes (`extern_kernels`)."""
        nested = self._trace.collect("nested", ["rank", "event_id", "parent_id", "cat", "name", "start_ns", "dur_ns",
                                                "sequence_number"])
        return extern_kernels(nested, self.provenance)

    def modules(self, root: str = "model") -> pl.DataFrame:
        """Compiled kernel time per nn.Module path, as `tr.modules.modules()` lays it out (`module_times`)."""
        nested = self._trace.collect("nested", ["rank", "event_id", "parent_id", "cat", "name", "start_ns", "dur_ns",
                                                "sequence_number"])
        return module_times(self.events(), self.provenance, self.extern_kernels(), nested, root=root)

    def key_averages(self) -> pl.DataFrame:
        """`tr.key_averages()` with generated kernels counted as their aten ops (for `pt.diff`)."""
        return key_averages(self._trace.key_averages(), self.events(), self.provenance, self.extern_kernels())
