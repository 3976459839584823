"""Critical path: synthetic traces with a known answer, and invariants on real traces."""

from __future__ import annotations

import json
import pathlib
from typing import TYPE_CHECKING

import numpy as np
import polars as pl
import pytest

import proftab as pt
from proftab.critical_path import solve
from proftab.intervals.dag import argmax_pred, chain_heads, earliest, walk_back
from tests.builders import event, kernel, launch, load_events, read_trace, write_events
from tests.conftest import BUNDLED, SHARED_PUBLIC, shared_public_traces

if TYPE_CHECKING:
    from pathlib import Path

US = 1000  # the synthetic traces are written in µs


def _bound(tr: pt.Trace) -> dict[str, int]:
    s = tr.critical_path.summary()
    return {b: int(ns) // US for b, ns in s.select(pl.col("bound_by").cast(pl.String), "dur_ns").iter_rows() if ns}


def _check_chain(p: pl.DataFrame) -> None:
    assert (p["start_ns"].to_numpy()[1:] == p["end_ns"].to_numpy()[:-1]).all()
    assert (p["dur_ns"] == p["end_ns"] - p["start_ns"]).all()


def test_gpu_bound(tmp_path: Path) -> None:
    tr = load_events(tmp_path, [
        event("ProfilerStep#1", 0, 840, cat="user_annotation"),
        event("aten::mm", 10, 20), launch(15, 5, 1), kernel(25, 400, 1),
        event("aten::mm", 30, 20), launch(35, 5, 2), kernel(425, 400, 2),
        event("cudaDeviceSynchronize", 60, 770, cat="cuda_runtime", correlation=3),
    ])
    assert _bound(tr) == {"cpu_bound": 25, "gpu_compute_bound": 800, "launch_overhead": 10, "sync": 5}
    p = tr.critical_path.path(step=1)
    _check_chain(p)
    assert p["kind"].cast(pl.String).to_list() == ["cpu_op", "cpu_op", "launch_delay", "kernel", "kernel", "sync_wait",
                                                   "cpu_op"]
    assert int(p["dur_ns"].sum()) == 840 * US
    # twice-faster GEMMs: the sync waits 400 µs less
    wi = tr.critical_path.what_if(step=1, scale={"gemm": 0.5})
    assert wi["what_if_ns"].to_list() == [440 * US]
    assert tr.critical_path.what_if(scale={"kernel": 0.5})["what_if_ns"].to_list() == [440 * US]


def test_cpu_bound(tmp_path: Path) -> None:
    tr = load_events(tmp_path, [
        event("ProfilerStep#3", 0, 1000, cat="user_annotation"),
        event("aten::add", 10, 890), launch(20, 5, 1), kernel(30, 10, 1),
    ])
    assert _bound(tr) == {"cpu_bound": 995, "launch_overhead": 5}
    top = tr.critical_path.summary(by="name", limit=1)
    assert top["name"].to_list() == ["aten::add"] and top["dur_ns"].to_list() == [885 * US]
    # the kernel is not on the path: making it slower changes nothing, a faster add does
    assert tr.critical_path.what_if(scale={"kernel": 10})["delta_ns"].to_list() == [0]
    assert tr.critical_path.what_if(scale={"aten::add": 0.5})["what_if_ns"].to_list() == [1000 * US - 445 * US]


def test_launch_bound(tmp_path: Path) -> None:
    ev = [event("ProfilerStep#0", 0, 215, cat="user_annotation")]
    for i in range(10):
        ev += [launch(10 + 20 * i, 18, i + 1), kernel(15 + 20 * i, 2, i + 1)]
    tr = load_events(tmp_path, ev)
    assert _bound(tr) == {"cpu_bound": 35, "launch_overhead": 180}
    # faster launches shorten the step by the launch time saved
    assert tr.critical_path.what_if(scale={"cudaLaunchKernel": 0.5})["what_if_ns"].to_list() == [125 * US]


def test_sync_bound(tmp_path: Path) -> None:
    tr = load_events(tmp_path, [
        launch(-5, 2, 1), kernel(-2, 482, 1),  # launched before the step: its wait is sync time
        event("ProfilerStep#2", 0, 500, cat="user_annotation"),
        event("aten::item", 5, 490),
        event("cudaStreamSynchronize", 10, 480, cat="cuda_runtime", correlation=2),
    ])
    assert _bound(tr) == {"cpu_bound": 20, "sync": 480}


def test_overlapping_streams_context_sync_row(tmp_path: Path) -> None:
    tr = load_events(tmp_path, [
        event("ProfilerStep#1", 0, 630, cat="user_annotation"),
        launch(10, 5, 1), kernel(20, 600, 1, stream=7, name="long_kernel"),
        launch(20, 5, 2), kernel(30, 300, 2, stream=8, name="short_kernel"),
        event("cudaDeviceSynchronize", 30, 595, cat="cuda_runtime", correlation=3),
        event("Context Sync", 30, 595, cat="cuda_sync", pid=0, tid=-1, correlation=3, stream=-1, device=0,
              cuda_sync_kind="Context Sync"),
    ])
    p = tr.critical_path.path()
    _check_chain(p)
    names = set(p.filter(pl.col("kind") == "kernel")["name"].to_list())
    assert names == {"long_kernel"}
    assert _bound(tr) == {"cpu_bound": 15, "launch_overhead": 10, "gpu_compute_bound": 600, "sync": 5}
    # the short stream becomes critical once the long kernel is 4x faster
    wi = tr.critical_path.path(scale={"long_kernel": 0.25})
    assert "short_kernel" in wi["name"].to_list()
    assert int(wi["dur_ns"].sum()) == tr.critical_path.what_if(scale={"long_kernel": 0.25})["what_if_ns"][0]


def test_stream_wait_event(tmp_path: Path) -> None:
    tr = load_events(tmp_path, [
        event("ProfilerStep#1", 0, 430, cat="user_annotation"),
        launch(10, 5, 1), kernel(20, 300, 1, stream=7, name="producer"),
        event("cudaEventRecord", 16, 1, cat="cuda_runtime", correlation=10),
        event("cudaStreamWaitEvent", 18, 1, cat="cuda_runtime", correlation=11),
        event("Stream Wait Event", 18, 1, cat="cuda_sync", pid=0, tid=8, correlation=11, stream=8, device=0,
              wait_on_stream=7, wait_on_cuda_event_record_corr_id=10, cuda_sync_kind="Stream Wait Event"),
        launch(20, 5, 2), kernel(322, 100, 2, stream=8, name="consumer"),
        event("cudaDeviceSynchronize", 30, 395, cat="cuda_runtime", correlation=3),
    ])
    p = tr.critical_path.path()
    _check_chain(p)
    assert p.filter(pl.col("kind") == "kernel")["name"].to_list() == ["producer", "consumer"]
    assert _bound(tr) == {"cpu_bound": 15, "launch_overhead": 10, "gpu_compute_bound": 400, "sync": 5}


def test_full_launch_queue(tmp_path: Path) -> None:
    ev = [event("ProfilerStep#1", 0, 300, cat="user_annotation")]
    for i in range(10):  # fast launches of 25 µs kernels, back to back on the stream
        ev += [launch(10 + 6 * i, 5, i + 1), kernel(20 + 25 * i, 25, i + 1)]
    ev += [launch(70, 195, 11), kernel(270, 10, 11)]  # blocked until a queue slot frees (k8 ends at 245)
    tr = load_events(tmp_path, ev)
    assert _bound(tr) == {"cpu_bound": 45, "launch_overhead": 10, "gpu_compute_bound": 225, "sync": 20}
    assert tr.critical_path.what_if(scale={"kernel": 0.6})["what_if_ns"].to_list() == [210 * US]


def test_dag_longest_path_matches_a_loop() -> None:
    rng = np.random.default_rng(7)
    chain = np.sort(rng.integers(0, 6, 60))
    head = chain_heads(chain)
    w = rng.integers(0, 50, 60)
    base = np.where(head, rng.integers(0, 20, 60), -(2**62))
    src = rng.integers(0, 59, 40)
    dst = np.minimum(src + rng.integers(1, 20, 40), 59)  # forward edges: node order is topological
    cw = rng.integers(0, 30, 40)
    x, _ = earliest(w, head, base, src, dst, cw)
    ref = np.full(60, -(2**62))
    for i in range(60):  # the reference: a plain loop in node order
        c = [base[i]] + ([ref[i - 1] + w[i]] if not head[i] else []) + [ref[s] + c_ for s, d, c_ in
                                                                       zip(src, dst, cw, strict=True) if d == i]
        ref[i] = max(c)
    assert (x == ref).all()
    # a DAG has one fixed point: any first guess reaches it
    x2, _ = earliest(w, head, base, src, dst, cw, start=rng.integers(-1000, 5000, 60))
    assert (x2 == ref).all()
    pr = argmax_pred(x, w, head, base, src, dst, cw)
    nodes = walk_back(pr.node, int(np.argmax(x)))
    assert pr.node[nodes[0]] == -1 and (pr.node[nodes[1:]] == nodes[:-1]).all()


def _invariants(tr: pt.Trace) -> None:
    cp = tr.critical_path
    for g in cp.graphs():
        sol = solve(g)
        p = pt.critical_path.path_frame(g)
        _check_chain(p)
        length = int(p["dur_ns"].sum())
        assert length == sol.length <= g.end_ns - g.start_ns
        if p.height:
            assert p["start_ns"][0] == g.start_ns
        assert solve(g, {"*": 3}).length == 3 * length
        p3 = pt.critical_path.path_frame(g, {"*": 3})
        _check_chain(p3)
        assert int(p3["dur_ns"].sum()) == 3 * length


@pytest.mark.parametrize("name", ["h100_bert_small.pt.trace.json.gz", "mi300_bert_small.pt.trace.json.gz"])
def test_invariants_bundled(name: str) -> None:
    _invariants(pt.load(BUNDLED / name))


@pytest.mark.slow
@pytest.mark.parametrize("path", shared_public_traces(), ids=lambda p: p.name[:40])
def test_invariants_public(path: Path) -> None:
    tr = pt.load(path)
    if not tr.device.activities().height:
        pytest.skip("no device activity")
    _invariants(tr)


def test_windows_annotation_and_explicit(tmp_path: Path) -> None:
    tr = load_events(tmp_path, [
        event("forward", 0, 100, cat="user_annotation"), event("aten::mm", 10, 50),
        event("forward", 200, 100, cat="user_annotation"), event("aten::mm", 220, 30),
    ])
    w = tr.critical_path.windows("forward")
    assert w["step"].to_list() == [0, 1] and w["start_ns"].to_list() == [0, 200 * US]
    p = tr.critical_path.path("forward")
    assert p.group_by("step").agg(pl.col("dur_ns").sum()).sort("step")["dur_ns"].to_list() == [100 * US] * 2
    # an explicit window keeps the events wholly inside it; the path ends with the last of them
    p = tr.critical_path.path((200 * US, 400 * US))
    assert int(p["dur_ns"].sum()) == 100 * US and p["start_ns"][0] == 200 * US
    with pytest.raises(pt.ProftabError, match="no host annotation"):
        tr.critical_path.windows("backward")
    with pytest.raises(pt.ProftabError, match="not a kind"):
        tr.critical_path.what_if(scale={"(": 2})


def test_overlay_marks_the_path_and_keeps_ns(tmp_path: Path) -> None:
    tr = pt.load(BUNDLED / "h100_bert_small.pt.trace.json.gz")
    out = tmp_path / "cp.json.gz"
    tr.critical_path.overlay(out)
    doc = read_trace(out)
    ev = doc["traceEvents"]
    path = tr.critical_path.path()
    marked = {e["name"] for e in ev if e.get("args", {}).get("critical_path") and e["pid"] != -7}
    assert marked == set(path.filter(pl.col("event_id").is_not_null())["name"].to_list())
    lane = [e for e in ev if e["ph"] == "X" and e["pid"] == -7]
    assert len(lane) == path.height
    # exact ns survive: the µs text has three decimals
    assert round(sum(e["dur"] for e in lane) * 1000) == int(path["dur_ns"].sum())
    flows = [e for e in ev if e["ph"] in ("s", "f")]
    assert flows and len(flows) % 2 == 0
    # re-loading the overlay with proftab gives back the same events and times (the profiler's own
    # span has no pid: left out)
    again = pt.load(out).events.filter(pl.col("pid") != -7)
    orig = tr.events.filter((pl.col("ph") == "X") & pl.col("pid").is_not_null())
    key = ["pid", "tid", "name", "start_ns", "dur_ns"]
    assert again.select(key).sort(key).equals(orig.select(key).sort(key))


def test_summary_by_module_and_step() -> None:
    tr = pt.load(BUNDLED / "h100_bert_small.pt.trace.json.gz")
    cp = tr.critical_path
    length = int(cp.path()["dur_ns"].sum())
    by_mod = cp.summary(by="module")
    assert int(by_mod["dur_ns"].sum()) == length
    modules = set(tr.events.filter(pl.col("name").str.starts_with("nn.Module: "))["name"].str.slice(11).to_list())
    assert set(by_mod["module"].drop_nulls().to_list()) <= modules and by_mod["module"].null_count() == 1
    st = cp.summary(by="step")
    bound_cols = [f"{b}_ns" for b in pt.critical_path.BOUND_BY]
    assert int(st["length_ns"].sum()) == length == int(st.select(bound_cols).sum_horizontal().sum())


def test_chart(tmp_path: Path) -> None:
    pytest.importorskip("altair")
    tr = pt.load(BUNDLED / "h100_bert_small.pt.trace.json.gz")
    spec = tr.critical_path.chart().to_dict()
    assert len(spec["layer"]) == 2


def test_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from proftab.cli import main

    trace = str(BUNDLED / "h100_bert_small.pt.trace.json.gz")
    assert main(["critical-path", trace, "-q"]) == 0
    out = capsys.readouterr().out
    assert "cpu_bound" in out and "launch_overhead" in out
    csv = tmp_path / "p.csv"
    assert main(["critical-path", trace, "-q", "--step", "6", "--by", "path", "-o", str(csv),
                 "--overlay", str(tmp_path / "o.json")]) == 0
    p = pl.read_csv(csv)
    assert int(p["dur_ns"].sum()) == int(tr_len(trace)) and (tmp_path / "o.json").exists()
    assert main(["critical-path", trace, "-q", "--what-if", "*=2", "--format", "csv"]) == 0
    wi = capsys.readouterr().out
    assert str(2 * tr_len(trace)) in wi
    assert main(["critical-path", trace, "-q", "--what-if", "gemm"]) == 2
    assert main(["critical-path", trace, "-q", "--step", "99"]) == 2


def tr_len(trace: str) -> int:
    w = pt.load(trace).critical_path.windows(6)
    return int(w["end_ns"][0] - w["start_ns"][0])


def test_overlay_two_ranks(tmp_path: Path) -> None:
    paths = []
    for r in (0, 1):
        p = tmp_path / f"rank{r}.pt.trace.json.gz"
        ev = [event("ProfilerStep#1", 0, 100 + 10 * r, cat="user_annotation"), launch(10, 5, 1), kernel(20, 30, 1)]
        paths.append(write_events(p, ev, distributedInfo={"rank": r, "world_size": 2}))
    tr = pt.load(paths)
    assert tr.critical_path.summary(by="step")["length_ns"].to_list() == [100 * US, 110 * US]
    out = tmp_path / "o.json"
    tr.critical_path.overlay(out)
    ev = json.loads(out.read_text())["traceEvents"]
    pids = {e["pid"] for e in ev if e["ph"] == "X" and e["pid"] != -7}
    assert pids == {1, 0, 10**9 + 1, 10**9}  # host pid 1 and device 0 of each rank, kept apart


def test_compute_stream_waits_on_a_collective(tmp_path: Path) -> None:
    """Known by construction: a compute kernel launched at 20 µs whose stream is free from 130 µs
    starts only at 405 µs, 5 µs after an NCCL kernel (8-400 µs) on stream 9 ends (a stream wait
    recorded without a cuda_sync row, as ROCm writes it). The wait is the collective's, not launch
    overhead; in tail mode too, where the NCCL kernel was launched before the window."""
    tr = load_events(tmp_path, [
        launch(-10, 2, 5), kernel(8, 392, 5, stream=9, name="ncclDevKernel_Generic(ncclDevKernelArgsStorage)"),
        event("ProfilerStep#1", 5, 500, cat="user_annotation"),
        launch(10, 5, 1), kernel(30, 100, 1, stream=7, name="void gemm_kernel()"),
        event("hipStreamWaitEvent", 16, 2, cat="cuda_runtime", correlation=10),
        launch(20, 5, 2), kernel(405, 50, 2, stream=7, name="void gemm_kernel()"),
        event("cudaDeviceSynchronize", 30, 430, cat="cuda_runtime", correlation=3),
    ])
    for tail in (False, True):
        p = tr.critical_path.path(tail=tail)
        _check_chain(p)
        b = dict(tr.critical_path.summary(tail=tail).select(pl.col("bound_by").cast(pl.String), "dur_ns").iter_rows())
        assert b["gpu_communication_bound"] == 392 * US, tail
        assert b["launch_overhead"] == 0 if tail else b["launch_overhead"] < 10 * US
        assert p.filter(pl.col("kind") == "stream_gap")["dur_ns"].sum() == 0


@pytest.mark.skipif(not (SHARED_PUBLIC / "tracelens").exists(), reason="../shared is not present")
def test_wait_on_the_communication_stream_real_trace(capsys: pytest.CaptureFixture[str]) -> None:
    """mi300__resnet_act_checkpoint: step 15's largest tail segment was a 13.3 ms gap on the
    compute stream (launch_overhead) while two NCCL kernels ran on stream 4; tail mode read 58 %
    launch_overhead, 0 % communication. Now the gap is the collective's."""
    from proftab.cli import main

    tr = pt.load(SHARED_PUBLIC / "tracelens" / "mi300__resnet_act_checkpoint.json.gz")
    cp = tr.critical_path
    p = cp.path(step=15, tail=True)
    _check_chain(p)
    gaps = p.filter((pl.col("kind") == "stream_gap") & (pl.col("bound_by") == "launch_overhead"))
    # the 13.3 ms gap before this CatArrayBatchedCopy is now the wait on the collective (a 1 ns gap is left)
    assert gaps.filter(pl.col("event_id") == 49841)["dur_ns"].sum() < 1000
    assert gaps["dur_ns"].max() < 5_000_000
    comm = p.filter(pl.col("bound_by") == "gpu_communication_bound")
    assert comm.height >= 2 and comm["dur_ns"].sum() > 13_000_000
    s = dict(cp.summary(tail=True).select(pl.col("bound_by").cast(pl.String), "share").iter_rows())
    assert s["gpu_communication_bound"] > 0.5 and s["launch_overhead"] < 0.05
    assert main(["critical-path", str(SHARED_PUBLIC / "tracelens" / "mi300__resnet_act_checkpoint.json.gz"),
                 "--tail", "--format", "csv"]) == 0
    got = pl.read_csv(capsys.readouterr().out.encode())
    assert dict(zip(got["bound_by"], got["dur_ns"], strict=True)) == dict(
        cp.summary(tail=True).select(pl.col("bound_by").cast(pl.String), "dur_ns").iter_rows())


@pytest.mark.skipif(not (SHARED_PUBLIC / "tb_plugin").exists(), reason="../shared is not present")
def test_2021_runtime_category_calls_are_launches() -> None:
    """tb_plugin 2021 traces write runtime calls as `Runtime` (not `cuda_runtime`): they are launches
    and syncs, so the path is no longer 100 % cpu_bound."""
    tr = pt.load(SHARED_PUBLIC / "tb_plugin" / "samples__resnet50_num_workers_0__worker0.1623143089861.pt.trace.json"
                 ".gz")
    s = dict(tr.critical_path.summary().select(pl.col("bound_by").cast(pl.String), "share").iter_rows())
    assert s["cpu_bound"] < 0.95 and s["launch_overhead"] > 0.05 and s["sync"] > 0
    p = tr.critical_path.path()
    assert "cudaLaunchKernel" in p.filter(pl.col("kind") == "runtime")["name"].to_list()
    tail = dict(tr.critical_path.summary(tail=True).select(pl.col("bound_by").cast(pl.String), "share").iter_rows())
    assert tail["gpu_compute_bound"] > 0.3


TEST_DATA = pathlib.Path(__file__).resolve().parent / "data"
CP_DATA = TEST_DATA / "critical_path"


def test_backward_on_autograd_thread_known_cause() -> None:
    """Known by construction (torch 2.13 CPU, tests/data/critical_path/make_backward_thread_trace.py):
    each step's backward sleeps 50 ms in one node. Moved onto a thread of its own (autograd's device
    thread, as on GPU), the main thread's `run_backward` frame only waits: the path must go through
    the worker thread and name the sleep, exactly as when the backward ran on the main thread."""
    main = pt.load(CP_DATA / "backward_main_thread.pt.trace.json.gz").critical_path
    worker = pt.load(CP_DATA / "backward_worker_thread.pt.trace.json.gz").critical_path
    by_main = dict(main.summary(by="name").select("name", "dur_ns").iter_rows())
    by_worker = dict(worker.summary(by="name").select("name", "dur_ns").iter_rows())
    assert by_worker["<built-in function sleep>"] == by_main["<built-in function sleep>"] >= 100_000_000
    rb = worker.summary(by="name").filter(pl.col("name").str.contains("run_backward"))
    assert rb["dur_ns"].sum() < 1_000_000  # fork and join latency (and its own time outside the wait)
    for tr in (main, worker):
        p = tr.path()
        for _, one in p.group_by("step"):
            _check_chain(one)
        assert p["dur_ns"].sum() == (tr.windows()["end_ns"] - tr.windows()["start_ns"]).sum()
    joins = worker.path().filter((pl.col("via") == "dependency") & pl.col("name").str.contains("run_backward"))
    assert joins.height == 4  # fork and join in each of the two steps


def test_backward_thread_real_trace() -> None:
    """mi300__resnet_act_checkpoint (window mode): the main thread waits ~9.7 ms per step in
    `run_backward` while autograd's thread (tid 639) runs the backward; that wait was 59.9 % of the
    path as `cpu_op` time of `run_backward`. Now the path runs through the worker's ops and launches."""
    tr = pt.load(TEST_DATA / "public" / "mi300__resnet_act_checkpoint.json.gz")
    cp = tr.critical_path
    p = cp.path(step=15)
    _check_chain(p)
    rb = p.filter(pl.col("name").str.contains(r"\brun_backward\b"))
    assert rb["dur_ns"].sum() < 1_000_000  # was 9.66 ms of cpu_op
    tids = dict(tr.collect("events", columns=["event_id", "tid"]).iter_rows())
    on_worker = sum(d for e, d in p.select("event_id", "dur_ns").iter_rows() if e is not None and tids[e] == 639)
    assert on_worker > 8_000_000
    s = dict(cp.summary().select(pl.col("bound_by").cast(pl.String), "share").iter_rows())
    assert s["launch_overhead"] > 0.15 and s["sync"] < 0.05


def _one_op_steps(tmp_path: Path, n: int) -> pt.Trace:
    ev = []
    for i in range(n):
        ev.append(event(f"ProfilerStep#{i}", 10 * i, 9, cat="user_annotation"))
        ev.append(event("aten::add", 10 * i + 1, 5))
    return load_events(tmp_path, ev)


def test_many_one_op_steps_are_linear(tmp_path: Path) -> None:
    """Issue 30 class 3: 5,000 one-op steps took > 30 s (a graph and a path per window, ~24 ms
    each), then were refused above 1,000. 10^4 steps are now built and solved in one pass."""
    import time

    tr = _one_op_steps(tmp_path, 10_000)
    tr.device.activities()  # loading and the tables are not what is measured
    tr.collect("nested")
    t0 = time.perf_counter()
    by_step = tr.critical_path.summary(by="step")
    took = time.perf_counter() - t0
    assert by_step.height == 10_000
    assert (by_step["length_ns"] == 9 * US).all() and (by_step["cpu_bound_ns"] == 9 * US).all()
    p = tr.critical_path.path()
    assert p.height == 3 * 10_000  # the step's own time, the add, the step's own time
    assert p.group_by("step").agg(pl.col("dur_ns").sum())["dur_ns"].eq(9 * US).all()
    assert took < 5, f"{took:.1f} s for 10^4 windows"


def test_rows_over_all_windows_are_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Windows are not counted; the rows they hold together are (memory): windows that do not overlap
    never hold more rows than the trace, overlapping ones are bounded with a clear error."""
    import proftab.critical_path._windows as windows_mod
    from proftab.critical_path import _NESTED, graph, sync_frame

    tr = _one_op_steps(tmp_path, 50)
    monkeypatch.setattr(windows_mod, "MAX_ROWS", 250)
    assert tr.critical_path.summary(by="step").height == 50  # 50 windows, 100 host rows: the trace's own
    whole = tr.critical_path.windows((0, 500 * US))
    nested = tr.collect("nested", columns=_NESTED)
    sync = sync_frame(tr.collect("events", columns=["rank", "event_id", "cat", "args", "correlation", "start_ns"]))
    assert graph(nested, tr.device.activities(), sync, pl.concat([whole] * 2)).n_windows == 2
    with pytest.raises(pt.ProftabError, match=r"the 3 selected windows hold 300 host rows together \(the trace "
                                              r"has 100: windows that overlap.*at most 250"):
        graph(nested, tr.device.activities(), sync, pl.concat([whole] * 3))


@pytest.mark.parametrize(("name", "tail"), [("mi300__resnet_act_checkpoint.json.gz", False),
                                            ("mi300__resnet_act_checkpoint.json.gz", True),
                                            ("trace_filter__sampled_rank-0.json.gz", False),
                                            ("trace_filter__sampled_rank-0.json.gz", True)])
def test_batched_graph_equals_one_graph_per_window(name: str, tail: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """All windows built and solved together give exactly what each window built alone gives: the
    path, the graph's arrays and the what-if replay (paths walked window by window, and all at once)."""
    import proftab.critical_path._path as path_mod
    from proftab.critical_path import _NESTED, build_graph, graph, path_frame, sync_frame, what_if_frame

    tr = pt.load(TEST_DATA / "public" / name)
    cp = tr.critical_path
    wins = cp.windows()
    assert wins.height >= 2
    nested = tr.collect("nested", columns=_NESTED)
    sync = sync_frame(tr.collect("events", columns=["rank", "event_id", "cat", "args", "correlation", "start_ns"]))
    acts = tr.device.activities()
    alone = [build_graph(nested, acts, sync, rank=r, start_ns=s, end_ns=e, step=st, window_event=ev, tail=tail)
             for r, st, s, e, ev in wins.select("rank", "step", "start_ns", "end_ns", "event_id").iter_rows()]
    batch = graph(nested, acts, sync, wins, tail=tail)
    assert batch.n_windows == wins.height
    for g, h in zip(alone, batch.split(), strict=True):
        for a in ("t", "head", "w", "base", "w_owner", "w_kind", "w_bound", "src", "dst", "cw", "c_owner",
                  "c_kind", "c_bound", "sink_pref", "parent_row"):
            assert np.array_equal(getattr(g, a), getattr(h, a)), a
        assert g.events.equals(h.events)
    assert pl.concat([path_frame(g) for g in alone]).equals(path_frame(batch))
    assert pl.concat([path_frame(g) for g in alone]).equals(cp.path(tail=tail))
    scale = {"kernel": 0.5, "cpu_op": 0.7}
    assert pl.concat([what_if_frame([g], scale) for g in alone]).equals(what_if_frame([batch], scale))
    monkeypatch.setattr(path_mod, "_FEW_WINDOWS", 0)  # every path by walk_back_many
    assert pl.concat([path_frame(g) for g in alone]).equals(path_frame(batch))


def test_walk_back_many_matches_walk_back() -> None:
    from proftab.intervals.dag import walk_back_many

    rng = np.random.default_rng(3)
    for trial in range(100):
        n = int(rng.integers(1, 80))
        pred = np.array([rng.integers(-1, i) if i else -1 for i in range(n)], np.int64)
        if trial % 4 == 0 and n > 4:  # tied predecessors that form a cycle (walk_back cuts it)
            pred[2], pred[3] = 3, 2
        sinks = rng.integers(0, n, int(rng.integers(0, 8)))
        nodes, off = walk_back_many(pred, sinks)
        for k, s in enumerate(sinks):
            assert np.array_equal(nodes[off[k]:off[k + 1]], walk_back(pred, int(s)))
    # two disjoint subgraphs, each with a cycle: each cyclic walk stays in its own node range
    pred = np.array([-1, 2, 1, 2, -1, 6, 5, 6], np.int64)
    nodes, off = walk_back_many(pred, np.array([3, 7]), (np.array([0, 4]), np.array([4, 8])))
    assert np.array_equal(nodes[off[0]:off[1]], walk_back(pred, 3))
    assert np.array_equal(nodes[off[1]:off[2]], walk_back(pred, 7))
