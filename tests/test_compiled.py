"""torch.compile: generated kernels -> region, FX nodes, aten ops, modules, source lines (`tr.compiled`).

Real traces: tests/data/compiled/torch213 and torch214 (recorded here, generate.py: CPU Inductor, each
C++ kernel a profiler event), with the provenance artifacts of the same run; the torch.compile
CPU trace tests/data/torch213/compile_jit (a recompile inside the profiler); and TraceLens's
torch_compile_triton (GPU, Triton) from ../shared.
"""

from __future__ import annotations

import contextlib
import io
import json
from typing import TYPE_CHECKING

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import proftab as pt
from proftab.compiled import split_fused_ops
from proftab.compiled._weighting import with_shares as _with_shares
from proftab.exceptions import TraceError, UsageError
from proftab.io.inductor import MAPPINGS_FILE, module_of_stack, read_provenance
from tests.builders import annotation, kernel, launch, load_events, op, read_trace, write_events
from tests.conftest import DATA, SHARED_PUBLIC, TORCH213, needs_shared

if TYPE_CHECKING:
    from pathlib import Path

COMPILED = DATA / "compiled"
VERSIONS = ["torch213", "torch214"]
TRITON = SHARED_PUBLIC / "tracelens" / "torch_compile_triton__trace.json.gz"


def _load(version: str, variant: str = "provenance", provenance: object = "dir") -> pt.Trace:
    d = COMPILED / version
    prov = {"dir": d / "provenance", "mapping": d / "provenance" / MAPPINGS_FILE, None: None}[provenance]  # type: ignore[index]
    return pt.load(d / f"{variant}.pt.trace.json.gz", compile_provenance=prov)


def _raw_events(path: Path) -> list[dict[str, object]]:
    return [e for e in read_trace(path)["traceEvents"] if e.get("ph") == "X"]


@pytest.mark.parametrize("version", VERSIONS)
def test_with_provenance_every_kernel_maps_to_the_mapping_files_nodes_and_source_lines(version: str) -> None:
    tr = _load(version)
    k = tr.compiled.kernels()
    raw = [e for e in _raw_events(COMPILED / version / "provenance.pt.trace.json.gz")
           if str(e["name"]).startswith("graph_0_cpp_fused_")]
    assert k.height == len(raw) == 12  # 4 kernels x 3 calls, each a profiler event
    assert k["dur_ns"].sum() == sum(round(float(e["dur"]) * 1000) for e in raw)  # type: ignore[arg-type]
    # the reference: the mapping file itself, kernel "name:handle" -> post-grad nodes
    mapping = json.loads((COMPILED / version / "provenance" / MAPPINGS_FILE).read_text())["cppCodeToPost"]
    by_kernel = {key.rpartition(":")[0]: sorted(v) for key, v in mapping.items() if key.startswith("cpp_")}
    for row in k.iter_rows(named=True):
        assert row["mapped"] and not row["guess"]
        assert sorted(row["nodes"]) == by_kernel[row["kernel"]]
        assert row["compile_id"] == "0/0" and row["region_id"] is not None and row["graph_call_id"] is not None
    # >= 99 % of generated-kernel time on FX nodes with a source line (here: all of it)
    src = tr.compiled.by_source()
    total = int(k["dur_ns"].sum())
    assert int(src["time_ns"].sum()) == total
    assert int(src.filter(pl.col("source").is_not_null())["time_ns"].sum()) >= 0.99 * total
    # the model's lines (their numbers are those of generate.py when it recorded)
    assert set(src["source_code"]) == {"return self.act(self.conv(x)) + x",
                                       "return x + self.fc2(self.act(self.fc1(self.norm(x))))",
                                       "y = self.block(x).flatten(2)            # (8, 4, 64)",
                                       "return self.head(self.mlp(y) * 0.5)"}
    assert src["source"].str.contains(r"/compiled/generate\.py:\d+$").all()


@pytest.mark.parametrize("version", VERSIONS)
def test_modules_and_pre_grad_ops_from_the_log(version: str) -> None:
    tr = _load(version)
    prov = tr.collect("compile_provenance")
    one = {(r["kernel"], r["node"]): r for r in prov.iter_rows(named=True)}
    # parameters name the module (conv reads block.conv.weight; the head LayerNorm reads head.weight)
    assert one[("extern_kernels.convolution", "convolution")]["module"] == "block.conv"
    assert one[("cpp_fused_add_native_layer_norm_relu_view_1", "var_mean")]["module"] == "mlp.norm"
    assert one[("cpp_fused_add_mul_native_layer_norm_relu_view_3", "rsqrt_1")]["module"] == "head"
    assert one[("extern_kernels.addmm", "addmm")]["module"] == "mlp.fc1"
    # the ops the model called (dynamo graph) and the ops Inductor computed (post-grad graph)
    assert one[("cpp_fused_gelu_view_2", "erf")]["pre_grad_op"] == "aten::gelu"
    assert one[("cpp_fused_gelu_view_2", "erf")]["aten_op"] == "aten::erf"
    assert one[("cpp_fused_add_native_layer_norm_relu_view_1", "sub")]["pre_grad_op"] == "aten::layer_norm"
    assert one[("cpp_fused_add_native_layer_norm_relu_view_1", "view")]["pre_grad_op"] == "aten::flatten"
    mods = tr.compiled.by_module()
    assert int(mods["time_ns"].sum()) == int(tr.compiled.kernels()["dur_ns"].sum())
    assert {"block.conv", "mlp.norm", "head"} <= set(mods["module"].drop_nulls())


def test_mapping_file_alone_maps_nodes_and_lines_but_not_modules() -> None:
    full, alone = _load("torch213"), _load("torch213", provenance="mapping")
    a, b = full.compiled.kernels(), alone.compiled.kernels()
    assert a["nodes"].to_list() == b["nodes"].to_list() and a["sources"].to_list() == b["sources"].to_list()
    assert b["modules"].list.len().sum() == 0
    assert alone.collect("compile_provenance")["compile_id"].is_null().all()


@pytest.mark.parametrize("version", VERSIONS)
def test_without_provenance_every_kernel_gets_its_fused_ops_and_region_as_a_guess(version: str) -> None:
    tr = _load(version, "compiled", None)
    k = tr.compiled.kernels()
    assert k.height == 12 and k["guess"].all() and not k["mapped"].any()
    assert (k["compile_id"] == "0/0").all() and k["graph_call_id"].is_not_null().all()
    assert k["fused_ops"].list.len().min() > 0  # type: ignore[operator]
    ops = dict(zip(k["kernel"], k["fused_ops"].to_list(), strict=True))
    assert ops["cpp_fused_add_native_layer_norm_relu_view_1"] == ["add", "native_layer_norm", "relu", "view"]
    assert ops["cpp_fused_gelu_view_2"] == ["gelu", "view"]
    assert (k["backend"] == "cpp").all()
    assert k["kernel_kind"].is_null().all()
    by_op = tr.compiled.by_op()
    assert by_op["time_ns"].sum() == by_op["guess_ns"].sum() == k["dur_ns"].sum()
    assert tr.compiled.by_source()["source"].to_list() == [None]  # nothing to say without provenance


@needs_shared
def test_triton_gpu_trace_maps_from_the_trace_alone() -> None:
    tr = pt.load(TRITON)
    k = tr.compiled.kernels()
    raw = _raw_events(TRITON)
    dev = [e for e in raw if e.get("cat") == "kernel" and str(e["name"]).startswith("triton_")]
    assert sorted(k["name"]) == sorted(str(e["name"]) for e in dev)
    assert k["dur_ns"].to_list() == [round(float(e["dur"]) * 1000) for e in  # type: ignore[arg-type]
                                     sorted(dev, key=lambda e: float(e["ts"]))]  # type: ignore[arg-type]
    assert (k["compile_id"] == "0/0").all()
    assert k["on_device"].all()
    assert (k["graph_hash"] == "fal4xpiah2v6blbfmwwonu52dvevbsmlh743q5tkclrt4gcqpzea").all()
    launch = {str(e["name"]): e["args"]["kernel_file"] for e in raw  # type: ignore[index]
              if e.get("cat") == "cpu_op" and "kernel_file" in e.get("args", {})}  # type: ignore[operator]
    assert dict(zip(k["name"], k["kernel_file"], strict=True)) == launch
    ops = dict(zip(k["kernel"], k["fused_ops"].to_list(), strict=True))
    assert ops["triton_red_fused__unsafe_view_add_mean_mul_pow_rsqrt_1"] == [
        "_unsafe_view", "add", "mean", "mul", "pow", "rsqrt"]
    assert dict(zip(k["kernel"], k["kernel_kind"], strict=True))["triton_poi_fused__unsafe_view_add_3"] == "pointwise"
    reg = tr.compiled.regions().row(0, named=True)
    assert reg["n_calls"] == 1 and reg["n_kernels"] == 4 and reg["kernel_ns"] == k["dur_ns"].sum()


def test_regions_show_the_recompile_inside_the_profiler() -> None:
    path = TORCH213 / "compile_jit" / "trace.json.gz"
    reg = pt.load(path).compiled.regions()
    raw = _raw_events(path)
    for cid in ("0/0", "0/1"):
        row = reg.filter(pl.col("compile_id") == cid).row(0, named=True)
        events = [e for e in raw if e["name"] == f"Torch-Compiled Region: {cid}"]
        assert row["n_calls"] == len(events)
        assert row["total_ns"] == sum(round(float(e["dur"]) * 1000) for e in events)  # type: ignore[arg-type]
        assert row["recompile"] == (cid == "0/1") and row["compiled_in_trace"] == (cid == "0/1")
    assert reg.height == 2


def test_key_averages_counts_kernels_as_ops_and_diffs_against_eager() -> None:
    tr, eager = _load("torch213"), pt.load(COMPILED / "torch213" / "eager.pt.trace.json.gz")
    ka, ck = tr.key_averages(), tr.compiled.key_averages()
    assert ka["self_cpu_ns"].sum() == ck["self_cpu_ns"].sum()  # time moved, none lost or doubled
    assert not ck["name"].str.starts_with("graph_0_cpp_fused").any()
    gelu = ck.filter(pl.col("name") == "aten::gelu").row(0, named=True)
    assert gelu["calls"] == 3 and gelu["self_cpu_ns"] == int(
        tr.compiled.by_op(level="pre_grad").filter(pl.col("pre_grad_op") == "aten::gelu")["time_ns"].item())
    d = pt.diff(eager, ck)
    row = d.filter(pl.col("name") == "aten::gelu").row(0, named=True)
    assert row["status"] == "changed" and row["calls_a"] == row["calls_b"] == 3


def test_apportioned_shares_sum_exactly() -> None:
    tr = _load("torch214")
    total = int(tr.compiled.kernels()["dur_ns"].sum())
    for by in ("by_op", "by_module", "by_source", "by_node"):
        t = getattr(tr.compiled, by)()
        assert t["time_ns"].dtype == pl.Int64 and int(t["time_ns"].sum()) == total
        assert abs(float(t["share"].sum()) - 1.0) < 1e-12


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 10**12), st.integers(1, 9)), min_size=1, max_size=20))
def test_equal_split_matches_a_reference(events: list[tuple[int, int]]) -> None:
    rows = pl.DataFrame([{"rank": 0, "event_id": i, "dur_ns": d, "node": f"n{j}"}
                         for i, (d, n) in enumerate(events) for j in range(n)],
                        schema={"rank": pl.Int32, "event_id": pl.Int64, "dur_ns": pl.Int64, "node": pl.String})
    got = _with_shares(rows)["share_ns"].to_list()
    want = [d // n + (1 if j < d % n else 0) for d, n in events for j in range(n)]
    assert got == want


def test_split_fused_ops() -> None:
    assert split_fused_ops("add_native_layer_norm_relu_view") == ["add", "native_layer_norm", "relu", "view"]
    assert split_fused_ops("_unsafe_view_mul_silu") == ["_unsafe_view", "mul", "silu"]
    assert split_fused_ops("add_mean_mul_pow_rsqrt") == ["add", "mean", "mul", "pow", "rsqrt"]


def test_module_of_stack() -> None:
    stack = ('  File "m.py", line 67, in forward\n    return self.head(self.mlp(y) * 0.5)\n'
             '                     ^^^^^^^^^^^\n'
             '  File "m.py", line 56, in forward\n    return x + self.fc2(self.act(self.fc1(x)))\n'
             '                        ^^^^^^^^^^^^^^^^^^^^^\n')
    assert module_of_stack(stack) == ("mlp.act", 56, "m.py")
    inner = ('  File "m.py", line 45, in forward\n    return self.act(self.conv(x)) + x\n'
             '           ^^^^^^^^^^^^^^^^^^^^^^^^^^\n')
    assert module_of_stack(inner) == ("", 45, "m.py")  # `relu(..) + x`: the frame's own module
    assert module_of_stack("no stack here") is None


def test_bad_provenance_is_a_clear_error(tmp_path: Path) -> None:
    trace = COMPILED / "torch213" / "compiled.pt.trace.json.gz"
    with pytest.raises(TraceError, match="no such provenance artifact"):
        pt.load(trace, compile_provenance=tmp_path / "missing")
    with pytest.raises(TraceError, match="no Inductor provenance found"):
        read_provenance(tmp_path)
    bad = tmp_path / MAPPINGS_FILE
    bad.write_text("{not json")
    with pytest.raises(TraceError, match=f"{MAPPINGS_FILE}: not valid JSON"):
        read_provenance(bad)
    with pytest.raises(UsageError, match="by must be one of"):
        from proftab.compiled import apportion

        apportion(pt.load(trace).compiled.events(), None, "line")  # type: ignore[arg-type]


def _cli(argv: list[str]) -> tuple[int, str, str]:
    from proftab.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(argv)
    return rc, out.getvalue(), err.getvalue()


def test_cli_compiled(tmp_path: Path) -> None:
    d = COMPILED / "torch213"
    rc, out, _ = _cli(["compiled", str(d / "provenance.pt.trace.json.gz"), "--compile-provenance",
                       str(d / "provenance"), "--by", "source", "--plain"])
    assert rc == 0 and "generate.py:56" in out and "(provenance)" in out
    rc, _, _ = _cli(["compiled", str(d / "provenance.pt.trace.json.gz"), "--compile-provenance",
                     str(d / "provenance"), "--by", "module", "-o", str(tmp_path / "m.csv")])
    assert rc == 0
    got = pl.read_csv(tmp_path / "m.csv")
    assert got["time_ns"].sum() == _load("torch213").compiled.by_module()["time_ns"].sum()
    rc, out, _ = _cli(["compiled", str(d / "compiled.pt.trace.json.gz"), "--against",
                       str(d / "eager.pt.trace.json.gz"), "--format", "csv"])
    assert rc == 0 and "aten::gelu" in out
    ds = tmp_path / "ds"
    pt.load(d / "provenance.pt.trace.json.gz").to_parquet(ds)  # a dataset stores no provenance: given again
    rc, out, _ = _cli(["compiled", str(ds), "--compile-provenance", str(d / "provenance"), "--by", "module",
                       "--format", "csv"])
    assert rc == 0 and pl.read_csv(io.StringIO(out))["time_ns"].sum() == got["time_ns"].sum()
    rc, _, err = _cli(["compiled", str(d / "compiled.pt.trace.json.gz"), "--compile-provenance",
                       str(tmp_path / "nope")])
    assert rc == 2 and "no such provenance artifact" in err


def test_regions_show_a_graph_break_and_recompiles_recorded_by_construction() -> None:
    # generate.py `breaks`: torch._dynamo.graph_break() in forward (two frames per call), three calls,
    # then a new batch size with dynamic=False (each frame recompiles inside the profiler)
    path = COMPILED / "torch213" / "breaks.pt.trace.json.gz"
    tr = pt.load(path)
    reg = tr.compiled.regions()
    assert reg.select("compile_id", "frame_id", "recompile", "compiled_in_trace", "n_calls").rows() == [
        ("0/0", 0, False, False, 3), ("0/1", 0, True, True, 1), ("1/0", 1, False, False, 3), ("1/1", 1, True, True, 1)]
    k = tr.compiled.kernels()
    assert k["compile_id"].is_not_null().all()
    assert reg["n_kernels"].sum() == k.height and reg["kernel_ns"].sum() == k["dur_ns"].sum()
    raw = [e for e in _raw_events(path) if "cpp_fused_" in str(e["name"])]
    assert k.height == len(raw)


@pytest.mark.parametrize("version", VERSIONS)
def test_extern_kernels_match_their_handles_in_call_order(version: str) -> None:
    tr = _load(version)
    ext = tr.compiled.extern_kernels()
    # per graph call: convolution (handle 2), addmm (4, fc1), addmm (6, fc2), as output_code.py calls them
    assert ext.height == 9
    assert ext.select("name", "handle", "nodes", "pre_grad_ops", "modules").rows()[:3] == [
        ("aten::convolution", 2, ["convolution"], ["aten::conv2d"], ["block.conv"]),
        ("aten::addmm", 4, ["addmm"], ["aten::linear"], ["mlp.fc1"]),
        ("aten::addmm", 6, ["addmm_1"], ["aten::linear"], ["mlp.fc2"])]
    raw = {int(e["args"]["Ev Idx"]): e for e in _raw_events(COMPILED / version / "provenance.pt.trace.json.gz")  # type: ignore[index]
           if e.get("cat") == "cpu_op" and e["name"] in ("aten::convolution", "aten::addmm")}
    assert len(raw) == 9 and int(ext["dur_ns"].sum()) == sum(round(float(e["dur"]) * 1000)  # type: ignore[arg-type]
                                                              for e in raw.values())
    # the pre-grad op's total holds its extern calls, as eager's aten::linear holds aten::addmm
    ck = tr.compiled.key_averages()
    lin = ck.filter(pl.col("name") == "aten::linear").row(0, named=True)
    gen = tr.compiled.by_op(level="pre_grad").filter(pl.col("pre_grad_op") == "aten::linear")["time_ns"].item()
    addmm = int(ext.filter(pl.col("name") == "aten::addmm")["dur_ns"].sum())
    assert lin["self_cpu_ns"] == gen and lin["cpu_total_ns"] == gen + addmm and lin["calls"] == 6
    assert _load(version, "compiled", None).compiled.extern_kernels().height == 0  # needs provenance


def test_key_averages_compiled_option_is_the_compiled_view() -> None:
    tr = _load("torch214")
    assert tr.key_averages(compiled=True).equals(tr.compiled.key_averages())
    d = pt.diff(pt.load(COMPILED / "torch214" / "eager.pt.trace.json.gz"), tr.key_averages(compiled=True))
    assert d.filter(pl.col("name") == "aten::layer_norm")["status"].item() == "changed"


def test_kernel_without_op_names_keeps_its_time(tmp_path: Path) -> None:
    # synthetic: `triton_poi_fused_0` names no op; a CPU-only trace keeps the host event as the kernel
    ev = [op("Torch-Compiled Region: 0/0", 0, 100), annotation("## Call CompiledFxGraph h ##", 1, 90),
          op("triton_poi_fused_0", 2, 7.001), op("cpp_fused_add_mul_1", 10, 3)]
    tr = load_events(tmp_path, ev)
    k = tr.compiled.kernels()
    assert k["fused_ops"].to_list() == [[], ["add", "mul"]] and k["n_nodes"].to_list() == [0, 2]
    assert (k["graph_hash"] == "h").all() and (k["compile_id"] == "0/0").all()
    by_op = tr.compiled.by_op()
    assert by_op.drop("share").rows() == [(None, 7001, 7001, 1, 1), ("aten::add", 1500, 1500, 1, 1),
                                          ("aten::mul", 1500, 1500, 1, 1)]
    assert by_op["share"].to_list() == pytest.approx([7001 / 10001, 1500 / 10001, 1500 / 10001])


@needs_shared
def test_host_triton_launches_are_not_kernels_on_a_device_trace() -> None:
    # vLLM decode under CUDA-graph capture: 48 host `triton_*` launch ops, their kernels not linked to them
    path = SHARED_PUBLIC / "tracelens" / ("inference__vllm_decode_full__capture_traces__graph_capture_rank_0."
                                          "1773709742341309550.pt.trace.json.gz")
    tr = pt.load(path)
    host = tr.events.filter(pl.col("name").str.starts_with("triton_") & (pl.col("cat") == "cpu_op"))
    assert host.height == 48
    assert tr.compiled.kernels().filter(~pl.col("on_device")).height == 0


@pytest.mark.parametrize("version", VERSIONS)
def test_modules_compiled_compares_module_by_module_with_the_eager_run(version: str) -> None:
    # eager (with_stack: nn.Module frames, the model's names recorded beside it) vs compiled with provenance
    d = COMPILED / version
    names = json.loads((d / "eager_stack.names.json").read_text())
    eager = pt.load(d / "eager_stack.pt.trace.json.gz").modules(names=names)
    tr = _load(version)
    comp = tr.modules(compiled=True)
    assert comp.equals(tr.modules.modules(compiled=True))
    # the same rule as by_module: each kernel's time split over its nodes, the extern calls on their node's module
    by_module = tr.compiled.by_module()
    ext = tr.compiled.extern_kernels().explode("modules").group_by("modules").agg(pl.col("dur_ns").sum())
    ext_of = dict(ext.iter_rows())
    regions = int(tr.compiled.regions()["total_ns"].sum())
    for row in comp.iter_rows(named=True):
        rel = "" if row["path"] == "model" else row["path"].removeprefix("model.")
        own = by_module.filter(pl.col("module") == rel)["time_ns"].sum() + ext_of.get(rel, 0)
        if row["path"] == "model":  # the root also holds the regions' host time outside every charged kernel
            assert row["host_total_ns"] == regions
        else:
            assert row["host_self_ns"] == own
        below = comp.filter(pl.col("path").str.starts_with(row["path"] + ".") | (pl.col("path") == row["path"]))
        assert row["host_total_ns"] == below["host_self_ns"].sum()
    assert comp.filter(pl.col("path") == "model")["n_calls"].item() == 3
    assert set(comp["path"]) == {"model", "model.block", "model.block.conv", "model.mlp", "model.mlp.norm",
                                 "model.mlp.fc1", "model.mlp.fc2", "model.head"}
    assert int(comp["unmapped_ns"].sum()) == 0
    # kernel time (generated + extern) is all on modules below the root, or the root's own nodes
    kernel_ns = int(tr.compiled.kernels()["dur_ns"].sum()) + int(tr.compiled.extern_kernels()["dur_ns"].sum())
    root_nodes = by_module.filter(pl.col("module") == "")["time_ns"].sum()
    assert int(comp.filter(pl.col("depth") == 1)["host_total_ns"].sum()) + root_nodes == kernel_ns
    d = pt.diff(eager, comp)
    both = d.filter(pl.col("status") != "removed")
    assert set(both["name"]) == set(comp["path"])  # every compiled module meets its eager row
    assert set(d.filter(pl.col("status") == "removed")["name"]) == {"model.block.act", "model.mlp.act"}
    conv = d.filter(pl.col("name") == "model.block.conv").row(0, named=True)
    assert conv["total_ns_a"] == eager.filter(pl.col("name") == "model.block.conv")["host_total_ns"].item()
    assert conv["total_ns_b"] == comp.filter(pl.col("path") == "model.block.conv")["host_total_ns"].item()
    with pytest.raises(UsageError, match="not one of each"):
        pt.diff(eager, tr.key_averages())


def test_modules_compiled_without_provenance_is_the_root_only() -> None:
    tr = _load("torch213", "compiled", None)
    comp = tr.modules(compiled=True, root="net")
    assert comp["path"].to_list() == ["net"]
    k = tr.compiled.kernels()
    assert comp["unmapped_ns"].item() == int(k["dur_ns"].sum())
    assert comp["host_total_ns"].item() == int(tr.compiled.regions()["total_ns"].sum())
    code, out, _err = _cli(["modules", str(COMPILED / "torch213" / "provenance.pt.trace.json.gz"), "--compiled",
                            "--compile-provenance", str(COMPILED / "torch213" / "provenance"), "--plain"])
    assert code == 0 and "fc1" in out and "conv" in out


def _inductor_per_kernel(version: str) -> tuple[dict[str, int], list[tuple[int, int | None]]]:
    """Inductor's own bytes per generated kernel and (bytes, FLOPs) per extern call, from `inductor_metrics.json`.

    A scheduler node belongs to the generated kernel whose provenance nodes hold all its FX origins;
    a fused scheduler node counts once (its fused figure); extern nodes pair with the extern handles in order.
    """
    d = COMPILED / version / "provenance"
    nodes = json.loads((d / "inductor_metrics.json").read_text())["scheduler_nodes"]
    mapping = json.loads((d / MAPPINGS_FILE).read_text())["cppCodeToPost"]
    kernels = {k.rpartition(":")[0]: set(v) for k, v in mapping.items() if not k.startswith("extern_kernels.")}
    per_kernel: dict[str, int] = {}
    seen: set[str] = set()
    externs: list[tuple[int, int | None]] = []
    for r in nodes:
        if r["kind"] == "ExternKernelSchedulerNode":
            externs.append((r["bytes"], r["flops"]))
            continue
        owners = [k for k, ns in kernels.items() if set(r["origins"]) <= ns]
        assert len(owners) == 1, r
        if r["node"] not in seen:
            seen.add(r["node"])
            per_kernel[owners[0]] = per_kernel.get(owners[0], 0) + r["fused_bytes"]
    return per_kernel, externs


@pytest.mark.parametrize("version", VERSIONS)
def test_perf_models_against_inductors_own_figures(version: str) -> None:
    tr = _load(version)
    k = tr.compiled.kernels().unique("kernel").sort("kernel")
    model = {r["kernel"]: r for r in k.iter_rows(named=True)}
    inductor, externs = _inductor_per_kernel(version)
    # extern calls (aten addmm / convolution): bytes and FLOPs equal Inductor's exactly
    ext = tr.compiled.extern_kernels().unique("handle").sort("handle")
    assert list(zip(ext["bytes"], ext["flops"], strict=True)) == externs == [
        (16976, 147456), (57856, 524288), (57600, 524288)]
    # one scheduler node in the kernel (GELU, pointwise): the same definition, the same bytes
    gelu = model["cpp_fused_gelu_view_2"]
    assert gelu["bytes"] == inductor["cpp_fused_gelu_view_2"] == 32768
    assert (gelu["read_bytes"], gelu["write_bytes"]) == (128 * 32 * 4, 128 * 32 * 4)  # addmm out in, GELU out
    # the layer-norm kernels by hand from the recorded shapes: conv out + x (f32[8, 4, 8, 8]) and the
    # LayerNorm weight + bias (f32[64]) read, the normalized f32[8, 4, 64] written once
    act, vec = 8 * 4 * 8 * 8 * 4, 64 * 4
    ln1 = model["cpp_fused_add_native_layer_norm_relu_view_1"]
    assert (ln1["read_bytes"], ln1["write_bytes"]) == (2 * act + 2 * vec, act)
    ln2 = model["cpp_fused_add_mul_native_layer_norm_relu_view_3"]  # recomputes conv+relu+x, reads fc2's output
    assert (ln2["read_bytes"], ln2["write_bytes"]) == (3 * act + 2 * vec, act)
    # Inductor runs each as 3 scheduler nodes (stats pass, rstd, normalize pass): it counts the
    # activations once per pass (the normalize pass re-reads them) and the mean/rstd buffers between them
    # (4 x 32 floats); the model counts each buffer once
    assert inductor["cpp_fused_add_native_layer_norm_relu_view_1"] == ln1["bytes"] + 2 * act + 4 * 32 * 4 == 41984
    assert inductor["cpp_fused_add_mul_native_layer_norm_relu_view_3"] == ln2["bytes"] + 3 * act + 4 * 32 * 4 == 58368
    # the conv's input-layout kernel computes no node of its own: no model
    prep = model["cpp_fused_convolution_0"]
    assert prep["bytes"] is None and prep["flops"] is None and inductor["cpp_fused_convolution_0"] == 17536
    # no figure without provenance
    assert _load(version, "compiled", None).compiled.kernels()["bytes"].is_null().all()


_STACK_MLP = ('  File "/m/model.py", line 71, in forward\n    return self.head(self.mlp(y) * 0.5)\n'
              '                     ^^^^^^^^^^^^^^^^^^\n  File "/m/model.py", line 60, in forward\n'
              '    return x + self.fc2(self.act(self.fc1(self.norm(x))))\n'
              '               ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^\n')
_STACK_ROOT = ('  File "/m/model.py", line 71, in forward\n    return self.head(self.mlp(y) * 0.5)\n'
               '           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^\n')


def test_triton_launch_figures_and_torch214_kernel_stacks(tmp_path: Path) -> None:
    # synthetic, to the formats torch writes: the Triton launcher's profiler args (`get_profiler_kwargs`:
    # kernel_num_gb, kernel_flop with TORCHINDUCTOR_BENCHMARK_KERNEL=1) and the `stack` list torch 2.14's
    # `inductor_trace_handler` puts on device kernels (TORCH_COMPILE_DEBUG_EXTEND=1)
    def launcher(name: str, ext: int, ts: int, gb: float, flop: int) -> dict[str, object]:
        return op(name, ts, 10, args={
            "External id": ext, "kernel_backend": "triton", "kernel_name": name, "kernel_file": f"/tmp/{name}.py",
            "kernel_hash": "h", "kernel_num_gb": gb, "kernel_flop": flop,
            "Input Dims": [[32, 128], [32, 128], []], "Input type": ["c10::BFloat16", "c10::BFloat16", "Scalar"]})

    ev = [op("Torch-Compiled Region: 0/0", 0, 100), annotation("## Call CompiledFxGraph h ##", 1, 90),
          launcher("triton_poi_fused_gelu_0", 3, 2, 3.2768e-05, 0), launch(3, 5, corr=13, ext=3),
          launcher("triton_tem_fused_addmm_1", 4, 20, 5.7856e-05, 524288), launch(21, 5, corr=14, ext=4),
          kernel(30, 7.001, corr=13, name="triton_poi_fused_gelu_0", ext=3, stack=[_STACK_MLP]),
          kernel(40, 3, corr=14, name="triton_tem_fused_addmm_1", ext=4, stack=[_STACK_MLP, _STACK_ROOT])]
    p = write_events(tmp_path / "t.json", ev, deviceProperties=[{"id": 0, "name": "NVIDIA H100"}])
    tr = pt.load(p)
    k = tr.compiled.kernels()
    assert k["on_device"].all() and k["inductor_bytes"].to_list() == [32768, 57856]
    assert k["inductor_flops"].to_list() == [0, 524288] and k["stacks"].list.len().to_list() == [1, 2]
    # each innermost highlight is one whole `self.NAME(...)` call: the path ends in NAME (`module_of_stack`)
    assert k["modules"].to_list() == [["mlp.fc2"], ["head", "mlp.fc2"]] and k["guess"].all()
    assert k["sources"].to_list() == [["/m/model.py:60"], ["/m/model.py:60", "/m/model.py:71"]]
    # by module / source: each kernel's time split over its stacks (7001 -> fc2; 3000 -> 1500 + 1500)
    assert tr.compiled.by_module().select("module", "time_ns").rows() == [("mlp.fc2", 8501), ("head", 1500)]
    assert tr.compiled.by_source().select("source", "time_ns").rows() == [("/m/model.py:60", 8501),
                                                                          ("/m/model.py:71", 1500)]
    m = tr.modules(compiled=True)
    assert dict(zip(m["path"], m["device_self_ns"], strict=True)) == {"model": 0, "model.mlp": 0,
                                                                      "model.mlp.fc2": 8501, "model.head": 1500}
    assert m.filter(pl.col("path") == "model")["device_total_ns"].item() == 10001
    # tr.perf: the launchers take Inductor's figures (family `inductor`); the template is bounded by its bf16 peak
    ops = tr.perf.ops(peaks="H100-SXM").sort("event_id")
    assert ops.select("name", "family", "flops", "bytes", "peak_dtype").rows() == [
        ("triton_poi_fused_gelu_0", "inductor", 0, 32768, None),
        ("triton_tem_fused_addmm_1", "inductor", 524288, 57856, "bf16")]
    assert ops["roofline_share"].is_not_null().all() and tr.perf.model_coverage()["modelled_share"].item() == 1.0
    code, out, _err = _cli(["compiled", str(p), "--by", "kernels", "--plain"])  # the text view counts the stacks
    assert code == 0 and "File" not in out and "57856" in out


_GRAPH = '''class <lambda>(torch.nn.Module):
    def forward(self, {SIGNATURE}):
        # File: /m.py:1 in forward, code: y = x @ w
        bmm: "bf16[4, 8, 32][256, 32, 1]cuda:0" = torch.ops.aten.bmm.default(arg0_1, arg1_1);  arg0_1 = None
        view: "bf16[32, 32][32, 1]cuda:0" = torch.ops.aten.reshape.default(bmm, [32, 32])
        var_mean = torch.ops.aten.var_mean.correction(view, [1], correction = 0, keepdim = True)
        getitem: "f32[32, 1][1, 1]cuda:0" = var_mean[0]
        getitem_1: "f32[32, 1][1, 1]cuda:0" = var_mean[1];  var_mean = None
        sub: "bf16[32, 32][32, 1]cuda:0" = torch.ops.aten.sub.Tensor(view, getitem_1)
        relu: "bf16[32, 32][32, 1]cuda:0" = torch.ops.aten.relu.default(sub)
        add: "bf16[32, 32][32, 1]cuda:0" = torch.ops.aten.add.Tensor(relu, getitem)
        mul: "bf16[32, 32][32, 1]cuda:0" = torch.ops.aten.mul.Tensor(relu, 2)
        convolution: "f32[2, 6, 7, 7][294, 49, 7, 1]cpu" = {CONV}
        abs_1: "f32[s0, 8][8, 1]cpu" = torch.ops.aten.abs.default(arg4_1)
        return (add, mul, convolution, abs_1)
'''.format(
    SIGNATURE=", ".join(['arg0_1: "bf16[4, 8, 16][128, 16, 1]cuda:0"', 'arg1_1: "bf16[4, 16, 32][512, 32, 1]cuda:0"',
                         'arg2_1: "f32[2, 3, 5, 5][75, 25, 5, 1]cpu"', 'arg3_1: "f32[3, 6, 3, 3][54, 9, 3, 1]cpu"',
                         'arg4_1: "f32[s0, 8][8, 1]cpu"']),
    CONV="torch.ops.aten.convolution.default(arg2_1, arg3_1, None, [1, 1], [0, 0], [1, 1], True, [0, 0], 1)")


def test_kernel_bytes_and_flops_on_a_synthetic_graph() -> None:
    from proftab.io.inductor_graph import kernel_bytes, node_flops, parse_graph

    g = parse_graph(_GRAPH)
    assert g.inputs["arg4_1"].startswith("f32[s0") and g.outputs == ["add", "mul", "convolution", "abs_1"]
    k_red = {"var_mean", "sub", "relu", "add"}             # reads the bmm output through a view
    k_mul = {"relu", "sub", "mul"}                          # recomputes relu (and sub: so it reads getitem_1)
    computed_by = {n: {"red"} for n in k_red} | {"mul": {"mul"}, "bmm": {"extern"}}
    for n in ("relu", "sub"):
        computed_by[n] = {"red", "mul"}
    bf, f32 = 2, 4
    # red: reads bmm (bf16 32x32), writes add (returned); relu is recomputed by `mul`, getitem_1 is read by it
    assert kernel_bytes(g, k_red, computed_by, "red") == (32 * 32 * bf, 32 * 32 * bf + 32 * f32)
    # mul: reads bmm + getitem_1 (the mean), writes mul
    assert kernel_bytes(g, k_mul, computed_by, "mul") == (32 * 32 * bf + 32 * f32, 32 * 32 * bf)
    assert kernel_bytes(g, {"abs_1"}, {}, "abs") == (None, None)  # a symbolic size: no figure
    assert node_flops(g, "bmm") == 2 * 4 * 8 * 16 * 32
    # transposed convolution: 2 * batch * numel(weight) * the input's spatial size (torch's conv_flop)
    assert node_flops(g, "convolution") == 2 * 2 * (3 * 6 * 3 * 3) * (5 * 5)
    assert node_flops(g, "relu") is None and node_flops(g, "missing") is None


def test_absurd_shapes_give_no_figure_not_an_overflow() -> None:
    from proftab.io.inductor_graph import kernel_bytes, node_flops, parse_graph

    huge = "f32[99999999999, 99999999999][99999999999, 1]cpu"
    g = parse_graph(f'''    def forward(self, arg0_1: "{huge}", arg1_1: "{huge}"):
        mm: "{huge}" = torch.ops.aten.mm.default(arg0_1, arg1_1)
        relu: "{huge}" = torch.ops.aten.relu.default(mm)
        return (relu,)
''')
    assert node_flops(g, "mm") is None
    assert kernel_bytes(g, {"relu"}, {"relu": {"k"}}, "k") == (None, None)


def test_triton_kernel_with_provenance_gets_the_model_on_the_roofline(tmp_path: Path) -> None:
    # synthetic: a device trace of one Triton kernel and a mapping file + post-grad graph for it
    prov = tmp_path / "debug"
    prov.mkdir()
    (prov / MAPPINGS_FILE).write_text(json.dumps({"cppCodeToPost": {"triton_poi_fused_gelu_mul_0:1": ["gelu", "mul"]},
                                                  "postToPre": {}}))
    (prov / "fx_graph_transformed.py").write_text(
        'class <lambda>(torch.nn.Module):\n'
        '    def forward(self, arg0_1: "bf16[32, 128][128, 1]cuda:0"):\n'
        '        # File: /m.py:5 in forward, code: return F.gelu(x) * 2\n'
        '        gelu: "bf16[32, 128][128, 1]cuda:0" = torch.ops.aten.gelu.default(arg0_1)\n'
        '        mul: "bf16[32, 128][128, 1]cuda:0" = torch.ops.aten.mul.Tensor(gelu, 2)\n'
        '        return (mul,)\n')
    name = "triton_poi_fused_gelu_mul_0"
    ev = [op("Torch-Compiled Region: 0/0", 0, 50),
          op(name, 2, 10, ext=3,
             args={"kernel_name": name, "Input type": ["c10::BFloat16", "c10::BFloat16", "Scalar"]}),
          launch(3, 5, corr=13, ext=3), kernel(30, 4, corr=13, name=name, ext=3)]
    p = write_events(tmp_path / "t.json", ev, deviceProperties=[{"id": 0, "name": "NVIDIA H100"}])
    tr = pt.load(p, compile_provenance=prov)
    k = tr.compiled.kernels().row(0, named=True)
    assert k["mapped"] and k["on_device"] and k["sources"] == ["/m.py:5"]
    assert (k["read_bytes"], k["write_bytes"], k["flops"], k["inductor_bytes"]) == (8192, 8192, None, None)
    row = tr.perf.ops(peaks="H100-SXM").row(0, named=True)
    assert (row["family"], row["flops"], row["bytes"], row["bound"]) == ("inductor", 0, 16384, "memory")
    assert row["roofline_share"] == pytest.approx(16384 / (row["peak_tb_per_s"] * 1e3) / 4000)


@needs_shared
def test_xdit_flux_triton_trace_maps_every_kernel_from_the_trace_alone() -> None:
    # public GPU trace (xDiT FLUX.1 inference, torch.compile'd blocks): no provenance, no launch figures, no stacks
    tr = pt.load(SHARED_PUBLIC / "tracelens" / "inference__xdit_flux.1_aiter_sage__profile_trace_rank_0.json.gz")
    k = tr.compiled.kernels()
    assert k.height == 3796 and k["on_device"].all()
    assert k["compile_id"].is_not_null().all() and k["graph_call_id"].is_not_null().all()
    assert (k["fused_ops"].list.len() > 0).all() and k["guess"].all()
    assert k["inductor_bytes"].is_null().all() and k["stacks"].is_null().all() and k["bytes"].is_null().all()
    m = tr.modules(compiled=True)
    assert m["path"].to_list() == ["model"] and m["device_self_ns"].item() == int(k["dur_ns"].sum())
    assert m["unmapped_ns"].item() == int(k["dur_ns"].sum())


def _train(version: str, prov: bool = True) -> pt.Trace:
    d = COMPILED / version
    if prov:
        return pt.load(d / "train_provenance.pt.trace.json.gz", compile_provenance=d / "provenance_train")
    return pt.load(d / "train_compiled.pt.trace.json.gz")


@pytest.mark.parametrize("version", VERSIONS)
def test_backward_graph_is_read_apart_from_the_forward_one(version: str) -> None:
    # the log holds two Inductor graphs under compile id 0/0: AOTAutograd's forward, then its backward
    prov = read_provenance(COMPILED / version / "provenance_train" / "torch_trace.log.gz")
    assert set(prov["graph"]) == {"forward", "backward"}
    bwd = prov.filter(pl.col("graph") == "backward")
    assert set(bwd["compile_id"]) == {"0/0"}
    assert bwd["node"].null_count() == bwd.height  # torch 2.13's backward mapping is empty: stacks only
    assert bwd["module"].null_count() == 0 and bwd["source_line"].null_count() == 0
    assert "torch.ops.aten.convolution_backward.default" in set(bwd["kernel"])
    # the conv's stack is carried by the forward extern convolution alone: its module, not module_of_stack's `block`
    conv = bwd.filter(pl.col("kernel") == "torch.ops.aten.convolution_backward.default")
    assert "block.conv" in set(conv["module"])
    assert set(bwd.filter(pl.col("kernel") == "extern_kernels.mm")["module"]) == {"mlp.fc1", "mlp.fc2"}
    fwd = prov.filter(pl.col("graph") == "forward")
    assert fwd["node"].null_count() == 0 and "extern_kernels.addmm" in set(fwd["kernel"])


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("prov", [True, False])
def test_backward_kernels_are_told_from_forward_ones(version: str, prov: bool) -> None:
    tr = _train(version, prov)
    k = tr.compiled.kernels()
    bwd_fn = tr.collect("nested").filter(pl.col("name") == "CompiledFunctionBackward")
    assert bwd_fn.height == 3
    # every backward kernel is under a CompiledFunctionBackward op, and has its forward's compile id
    assert k.filter(pl.col("graph") == "backward").height == 9
    assert k.filter(pl.col("graph") == "forward").height == 12
    assert set(k["compile_id"]) == {"0/0"} and k["graph"].null_count() == 0
    assert k.filter(pl.col("graph") == "backward")["name"].str.contains("backward").any()
    reg = tr.compiled.regions()
    assert reg.select("compile_id", "graph", "n_calls").rows() == [("0/0", "forward", 3), ("0/0", "backward", 3)]
    back = reg.filter(pl.col("graph") == "backward").row(0, named=True)
    assert back["total_ns"] == int(bwd_fn["dur_ns"].sum())
    assert back["kernel_ns"] == int(k.filter(pl.col("graph") == "backward")["dur_ns"].sum())
    assert int(k.filter(pl.col("mapped"))["dur_ns"].sum()) == (int(k["dur_ns"].sum()) if prov else 0)


@pytest.mark.parametrize("version", VERSIONS)
def test_backward_kernel_time_is_all_on_modules_and_sums_exactly(version: str) -> None:
    tr = _train(version)
    k = tr.compiled.kernels()
    bk = k.filter(pl.col("graph") == "backward")
    assert bk["mapped"].all() and (bk["modules"].list.len() > 0).all()  # 100 % of backward kernel time mapped
    ext = tr.compiled.extern_kernels()
    be = ext.filter(pl.col("graph") == "backward")
    # per backward call: mm, mm, convolution_backward (a fallback kernel), mm, mm, all matched in handle order
    assert be.height == 15 and set(be["name"]) == {"aten::mm", "aten::convolution_backward"}
    assert (be["modules"].list.len() > 0).all()
    comp = tr.modules(compiled=True)
    bwd_fn_ns = int(tr.collect("nested").filter(pl.col("name") == "CompiledFunctionBackward")["dur_ns"].sum())
    root = comp.filter(pl.col("path") == "model").row(0, named=True)
    assert root["bwd_host_total_ns"] == bwd_fn_ns and root["n_bwd_calls"] == 3
    # below the root: exactly the backward kernels' and extern calls' time, a kernel's split equally over its
    # distinct stacks, an extern call's over its distinct modules (computed here from the provenance rows);
    # the root's own stacks' share stays on it
    charged = int(bk["dur_ns"].sum()) + int(be["dur_ns"].sum())
    rows = tr.compiled.provenance.filter(pl.col("graph") == "backward").select("kernel", "handle", "module")
    kern = pl.concat([bk.select("event_id", "dur_ns", "kernel").join(rows, on="kernel"),
                      be.select("event_id", "dur_ns", "kernel", "handle").join(rows, on=["kernel", "handle"])
                      .unique(["event_id", "module"])],  # an extern call: over its distinct modules
                     how="diagonal")
    shares = _with_shares(kern.with_columns(rank=pl.lit(0)).sort("event_id", "module"))
    assert int(shares["share_ns"].sum()) == charged
    own_root = int(shares.filter(pl.col("module") == "")["share_ns"].sum())
    below_root = int(comp.filter(pl.col("depth") == 1)["bwd_host_total_ns"].sum())
    # the same shares up to where the 1 ns remainders fall (proftab gives them in node-row order): <= 1 ns per call
    assert abs(below_root + own_root - charged) <= kern["event_id"].n_unique()
    assert int(comp["bwd_host_self_ns"].sum()) == bwd_fn_ns  # every ns of the backward calls, exactly once
    by_mod = tr.compiled.by_module()
    for row in comp.iter_rows(named=True):
        below = comp.filter(pl.col("path").str.starts_with(row["path"] + ".") | (pl.col("path") == row["path"]))
        assert row["bwd_host_total_ns"] == below["bwd_host_self_ns"].sum()
    # the forward side is unchanged by the backward graph: forward kernels only in the forward columns
    fwd_total = int(tr.compiled.regions().filter(pl.col("graph") == "forward")["total_ns"].item())
    assert root["host_total_ns"] == fwd_total
    assert int(by_mod["time_ns"].sum()) == int(k["dur_ns"].sum())


@pytest.mark.parametrize("version", VERSIONS)
def test_backward_modules_against_the_eager_training_step(version: str) -> None:
    # rule (docs/compiled.md): every compiled module with backward time is an eager module with backward
    # time, run once per step; the eager-only ones are the known misses (ReLU fused into its block's
    # kernel; the conv's backward, whose fallback kernel carries the previous kernel's stacks)
    names = json.loads((COMPILED / version / "train_eager.names.json").read_text())
    eager = pt.load(COMPILED / version / "train_eager.pt.trace.json.gz").modules(names=names)
    comp = _train(version).modules(compiled=True)
    e_bwd = set(eager.filter(pl.col("bwd_host_total_ns") > 0)["name"])
    c_bwd = set(comp.filter(pl.col("bwd_host_total_ns") > 0)["name"])
    assert c_bwd <= e_bwd
    assert e_bwd - c_bwd == {"model.block.act"}
    assert set(comp.filter(pl.col("bwd_host_total_ns") > 0)["n_bwd_calls"]) == {3}
    d = pt.diff(eager, comp)
    assert set(d.filter(pl.col("status") != "removed")["name"]) == set(comp["path"])


def test_backward_without_provenance_is_the_roots() -> None:
    tr = _train("torch213", prov=False)
    comp = tr.modules(compiled=True)
    assert comp["path"].to_list() == ["model"]
    root = comp.row(0, named=True)
    assert root["n_bwd_calls"] == 3
    bwd_fn = tr.collect("nested").filter(pl.col("name") == "CompiledFunctionBackward")
    assert root["bwd_host_total_ns"] == int(bwd_fn["dur_ns"].sum())
    k = tr.compiled.kernels()
    assert root["unmapped_ns"] == int(k["dur_ns"].sum())  # forward and backward kernels, all unknown


def test_backward_with_the_debug_directory_mapping_file_only_is_charged_to_the_root() -> None:
    # TORCH_COMPILE_DEBUG writes a mapping file for the forward graph only: the backward kernels map
    # nowhere (their ops come from their names, a guess) and their time is the root's backward time
    d = COMPILED / "torch213"
    tr = pt.load(d / "train_provenance.pt.trace.json.gz",
                 compile_provenance=d / "provenance_train" / MAPPINGS_FILE)
    k = tr.compiled.kernels()
    assert k.filter(pl.col("graph") == "forward")["mapped"].all()
    bk = k.filter(pl.col("graph") == "backward")
    assert bk.height == 9 and not bk["mapped"].any() and (bk["aten_ops"].list.len() > 0).all()
    comp = tr.modules(compiled=True)
    root = comp.filter(pl.col("path") == "model").row(0, named=True)
    # the mapping file alone names no module (that needs the log's dynamo graph and stacks): all on the root
    ext = tr.compiled.extern_kernels()
    assert root["unmapped_ns"] == int(k["dur_ns"].sum()) + int(ext["dur_ns"].sum())
    assert comp["path"].to_list() == ["model"]
    assert root["bwd_host_total_ns"] == root["bwd_host_self_ns"] == int(
        tr.collect("nested").filter(pl.col("name") == "CompiledFunctionBackward")["dur_ns"].sum())


@needs_shared
def test_old_torch_backward_without_regions_is_left_out() -> None:
    # HTA's trace_diff test trace (torch ~2.0, Triton): CompiledFunction / CompiledFunctionBackward but no
    # `Torch-Compiled Region` and no kernel of today's names; no graph without a region is reported (nor crashes)
    tr = pt.load(SHARED_PUBLIC / "hta" / "trace_diff__test__test.json.gz")
    assert tr.collect("nested").filter(pl.col("name") == "CompiledFunctionBackward").height == 6
    assert tr.compiled.kernels().height == 0
    assert tr.compiled.regions().height == 0
    assert tr.modules(compiled=True).height == 0
