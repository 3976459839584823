"""CUDA / HIP graph replays (proftab.device._graphs): graph columns, capture merge, alignment.

Synthetic traces (two captures, replays with a dropped kernel, two streams) check the
alignment exactly; the public vLLM decode pair (../shared) checks the merge on real data.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import proftab as pt
from proftab import device
from proftab.cli import main
from proftab.exceptions import TraceError
from tests.builders import annotation, event, kernel, launch, op, us, write_events
from tests.conftest import SHARED_PUBLIC, needs_shared

VLLM = SHARED_PUBLIC / "tracelens"
EXECUTION = VLLM / "inference__vllm_decode_full__graph_execution.json.gz"
CAPTURE = VLLM / ("inference__vllm_decode_full__capture_traces__graph_capture_rank_0.1773709742341309550"
                  ".pt.trace.json.gz")


# --------------------------------------------------------------------------- alignment


@settings(max_examples=200, deadline=None)
@given(n=st.integers(0, 60), data=st.data())
def test_align_recovers_gaps_on_either_side_exactly_for_distinct_tokens(n: int, data: st.DataObject) -> None:
    truth = np.arange(n, dtype=np.int64) * 3 + 1
    keep_c = np.array(data.draw(st.lists(st.booleans(), min_size=n, max_size=n)), bool) if n else np.zeros(0, bool)
    keep_r = np.array(data.draw(st.lists(st.booleans(), min_size=n, max_size=n)), bool) if n else np.zeros(0, bool)
    c, r = truth[keep_c], truth[keep_r]
    got = device.align(c, r)
    # every replayed token the capture also has is matched to it; the others are -1
    want = np.array([int(np.flatnonzero(c == t)[0]) if (c == t).any() else -1 for t in r], np.int64)
    assert got.tolist() == want.tolist()


@settings(max_examples=200, deadline=None)
@given(c=st.lists(st.integers(0, 3), max_size=80), data=st.data())
def test_align_with_repeated_tokens_matches_a_single_dropped_kernel_exactly(c: list[int], data: st.DataObject) -> None:
    cap = np.array(c, np.int64)
    drop = data.draw(st.integers(0, len(c))) if c else 0
    rep = np.delete(cap, drop) if drop < len(c) else cap
    got = device.align(cap, rep)
    assert (got >= 0).all()  # a single gap: prefix + suffix match everything
    assert (cap[got] == rep).all() and (np.diff(got) > 0).all()
    # and a kernel missing on the capture side is the one left unmatched
    extra = np.insert(cap, drop, 99)
    got = device.align(cap, extra)
    assert got[drop] == -1 and (np.delete(got, drop) == np.arange(len(cap))).all()


# --------------------------------------------------------------------------- synthetic traces


def capture_trace(path: Path, ops: list[tuple[str, list[str]]], t0: int = 1_000_000) -> Path:
    """A capture trace: ops (name, kernels each launches) between begin/end capture, on one thread."""
    ev = [launch(us(t0), us(1_000), 1, name="cudaStreamBeginCapture")]
    t, corr, ext = t0 + 10_000, 10, 100
    ev.append(event("nn.Module: Net_0", us(t - 5_000), us(1_000_000), cat="python_function"))
    for name, kernels in ops:
        dur = 2_000 + 3_000 * len(kernels)
        ev.append(op(name, us(t), us(dur), ext=ext))
        for i, k in enumerate(kernels):
            call = ("cudaMemcpyAsync", {}) if k == "memcpy" else ("cudaLaunchKernel", {"kernel": k})
            ev.append(launch(us(t + 1_000 + 3_000 * i), us(1_000), corr, name=call[0], ext=ext, **call[1]))
            corr += 1
        t, ext = t + dur + 1_000, ext + 1
    ev.append(launch(us(t0 + 2_000_000), us(1_000), 2, name="cudaStreamEndCapture"))
    return write_events(path, ev)


def execution_trace(path: Path, replays: list[list[tuple[str, int]]]) -> Path:
    """Graph launches, each replaying `(kernel, stream)` in that order on the device."""
    ev, t = [], 0
    for i, kernels in enumerate(replays):
        ev.append(annotation(f"execute_{i}", us(t), us(100_000)))
        ev.append(launch(us(t + 1_000), us(50_000), 500 + i, name="cudaGraphLaunch"))
        for j, (k, s) in enumerate(kernels):
            cat, extra = ("gpu_memcpy", {"bytes": 64}) if k == "memcpy" else ("kernel", {})
            name = "Memcpy DtoD (Device -> Device)" if k == "memcpy" else k
            ev.append(kernel(us(t + 60_000 + 1_000 * j), us(700 + j), 500 + i, name=name, stream=s, cat=cat, **extra))
        t += 200_000
    return write_events(path, ev)


CAP_A = [("aten::a", ["ka", "kb"]), ("aten::c", ["kc", "memcpy"]), ("aten::d", ["kd"]), ("aten::e", ["ke"])]
CAP_B = [("aten::a", ["ka", "kb"]), ("aten::x", ["kx", "ky"])]
OP_OF = {"ka": "aten::a", "kb": "aten::a", "kc": "aten::c", "memcpy": "aten::c", "kd": "aten::d", "ke": "aten::e",
         "kx": "aten::x", "ky": "aten::x"}


@pytest.fixture
def synthetic(tmp_path: Path) -> tuple[Path, Path]:
    caps = tmp_path / "capture_traces"
    caps.mkdir()
    capture_trace(caps / "graph_capture_a.json", CAP_A)
    capture_trace(caps / "graph_capture_b.json", CAP_B)
    (caps / "execution_details.json").write_text(json.dumps([{"file": "graph_capture_a.json", "batch_size": 8}]))
    ex = execution_trace(tmp_path / "graph_execution.json", [
        # replay 0 of A on two streams (the second stream's kernels start in between)
        [("ka", 7), ("kc", 8), ("kb", 7), ("memcpy", 8), ("kd", 7), ("ke", 7)],
        # replay 1 of A, kernel kb dropped by the profiler
        [("ka", 7), ("kc", 8), ("memcpy", 8), ("kd", 7), ("ke", 7)],
        # replay 2 of B; ka/kb are in both captures, kx/ky decide
        [("ka", 7), ("kb", 7), ("kx", 7), ("ky", 7)],
    ])
    return ex, caps


def test_without_capture_kernels_belong_to_the_graph_launch(synthetic: tuple[Path, Path]) -> None:
    ex, _ = synthetic
    tr = pt.load(ex)
    a = tr.device.activities()
    assert set(a["link"].cast(pl.String)) == {"graph_launch"} and (a["op_id"] == a["launch_id"]).all()
    nodes = a.sort("start_ns").group_by("graph_launch_id", maintain_order=True).agg("graph_node")["graph_node"]
    assert [list(x) for x in nodes] == [list(range(6)), list(range(5)), list(range(4))]
    g = tr.device.graph_replays()
    assert g["n_kernels"].to_list() == [6, 5, 4] and g["graph_replay"].to_list() == [0, 1, 2]
    assert g["n_matched"].to_list() == [0, 0, 0] and g["capture_source"].null_count() == 3
    ka = tr.key_averages().filter(pl.col("device_type") == "CPU")
    self_dev = dict(zip(ka["name"], ka["self_device_ns"], strict=True))
    assert self_dev["execute_0"] == 0 and self_dev["cudaGraphLaunch"] == a["dur_ns"].sum()


def test_capture_merge_aligns_every_replay_exactly(synthetic: tuple[Path, Path]) -> None:
    ex, caps = synthetic
    plain = pt.load(ex)
    tr = pt.load(ex, graph_capture=caps)  # a directory: execution_details.json is skipped
    a = tr.device.activities().sort("start_ns")
    ev = tr.collect("events")
    names = dict(zip(ev["event_id"], ev["name"], strict=True))
    launch_of = dict(zip(a["event_id"], a["graph_launch_id"], strict=True))
    replay = {lid: i for i, lid in enumerate(sorted(set(launch_of.values())))}
    got = [(replay[launch_of[e]], n if k != "memcpy" else "memcpy", str(lk), names[o])
           for e, n, k, lk, o in zip(a["event_id"], a["name"], a["kind"], a["link"], a["op_id"], strict=True)]
    want = [(r, k if k != "memcpy" else "memcpy", "graph_capture", OP_OF[k]) for r, ks in enumerate([
        ["ka", "kc", "kb", "memcpy", "kd", "ke"], ["ka", "kc", "memcpy", "kd", "ke"], ["ka", "kb", "kx", "ky"]])
        for k in ks]
    assert [(r, n if n in OP_OF else "memcpy", lk, o) for r, n, lk, o in got] == want
    # device rows are untouched, to the ns
    cols = ["event_id", "start_ns", "dur_ns", "end_ns", "correlation"]
    assert a.sort("event_id").select(cols).equals(plain.device.activities().sort("event_id").select(cols))
    # diagnostics: which capture, matched / unmatched
    g = tr.device.graph_replays()
    assert [Path(s).name for s in g["capture_source"]] == ["graph_capture_a.json"] * 2 + ["graph_capture_b.json"]
    assert g["n_matched"].to_list() == [6, 5, 4] and g["n_unmatched"].to_list() == [0, 0, 0]
    assert g["n_captured"].to_list() == [6, 6, 4] and g["n_capture_unmatched"].to_list() == [0, 1, 0]
    assert g["attributed_share"].to_list() == [1.0, 1.0, 1.0]
    # virtual ops: fresh ids after the trace's, one per captured op per replay, nested under the launch
    vo = tr.collect("graph_ops")
    assert vo["event_id"].min() == plain.events["event_id"].max() + 1 and vo["event_id"].is_unique().all()
    assert vo.group_by("graph_launch_id").len().sort("graph_launch_id")["len"].to_list() == [5, 5, 3]
    nested = tr.collect("nested")
    parent = dict(zip(nested["event_id"], nested["parent_id"], strict=True))
    for e, graph_launch in zip(a["op_id"], a["graph_launch_id"], strict=True):
        chain = [e]
        while parent.get(chain[-1]) is not None:
            chain.append(parent[chain[-1]])
        assert graph_launch in chain  # op -> nn.Module frame -> the graph launch -> execute_N
    # Self CUDA now on the captured ops; the launch and the annotation hold none
    ka = tr.key_averages().filter(pl.col("device_type") == "CPU")
    self_dev = dict(zip(ka["name"], ka["self_device_ns"], strict=True))
    total = dict(zip(ka["name"], ka["device_total_ns"], strict=True))
    assert self_dev["cudaGraphLaunch"] == 0 and self_dev["execute_0"] == 0
    assert sum(self_dev.values()) == a["dur_ns"].sum() == total["cudaGraphLaunch"]
    k = dict(zip(a["name"], a["dur_ns"], strict=True))
    assert self_dev["aten::x"] == k["kx"] + k["ky"]
    # the module view sees the captured nn.Module
    mods = tr.modules.modules()
    assert mods.height >= 1


def test_capture_merge_errors_and_cli(synthetic: tuple[Path, Path], tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    ex, caps = synthetic
    with pytest.raises(TraceError, match="not a graph capture trace"):
        pt.load(ex, graph_capture=ex)
    with pytest.raises(TraceError, match="only an execution_details.json"):
        pt.load(ex, graph_capture=caps / "execution_details.json")
    assert main(["summary", str(ex), "--graph-capture", str(caps / "graph_capture_a.json"), "--graph-capture",
                 str(caps / "graph_capture_b.json"), "--plain", "-q"]) == 0
    out = capsys.readouterr().out
    assert "aten::x" in out
    dst = tmp_path / "merged.pq"
    assert main(["convert", str(ex), str(dst), "--graph-capture", str(caps), "-q"]) == 0
    scanned = pt.scan(dst).device.activities()
    assert set(scanned["link"].cast(pl.String)) == {"graph_capture"}
    assert main(["summary", str(dst), "--graph-capture", str(caps), "-q"]) == 2


# --------------------------------------------------------------------------- the public vLLM pair


@needs_shared
def test_vllm_decode_pair_merge() -> None:
    plain = pt.load(EXECUTION)
    tr = pt.load(EXECUTION, graph_capture=CAPTURE)
    a0, a = plain.device.activities(), tr.device.activities()
    cols = ["rank", "event_id", "name", "start_ns", "dur_ns", "end_ns"]
    assert a.sort("event_id").select(cols).equals(a0.sort("event_id").select(cols))  # device time unchanged, to the ns
    total = int(a["dur_ns"].sum())
    assert total == 10_717_708
    # before: one row (the graph launch, formerly its execute_... annotation) holds 96.9 %
    own0 = plain.device.self_time().join(plain.events.select("rank", "event_id", "cat"), on=["rank", "event_id"])
    host0 = own0.filter(pl.col("cat") != "kernel").filter(pl.col("cat") != "gpu_memcpy")
    assert round(host0["self_device_ns"].max() / total, 3) == 0.969
    # after: no host event keeps more than 5 % as self device time
    sd = tr.device.self_time().join(tr.collect("events").select("rank", "event_id", "cat"), on=["rank", "event_id"])
    host = sd.filter(~pl.col("cat").cast(pl.String).is_in(["kernel", "gpu_memcpy", "gpu_memset"]))
    assert host["self_device_ns"].sum() == total and host["self_device_ns"].max() / total < 0.05
    g = tr.device.graph_replays().row(0, named=True)
    assert (g["n_kernels"], g["n_matched"], g["n_capture_unmatched"], g["attributed_share"]) == (421, 421, 0, 1.0)
    # key_averages: the device rows and their total are unchanged; the ops now carry Self CUDA
    ka0, ka = plain.key_averages(), tr.key_averages()
    dev = ["name", "calls", "self_device_ns"]
    assert ka.filter(pl.col("device_type") != "CPU").sort("name").select(dev).equals(
        ka0.filter(pl.col("device_type") != "CPU").sort("name").select(dev))
    ops = ka.filter(pl.col("device_type") == "CPU")
    row = dict(zip(ops["name"], ops["self_device_ns"], strict=True))
    assert row["hipGraphLaunch"] == 0 and row["aten::addmm"] > 0 and row["vllm::moe_forward"] > 0
    # perf models see the replayed addmm with its captured shapes
    perf = tr.perf.ops().filter(pl.col("name") == "aten::addmm")
    assert perf.height == 72 and (perf["flops"] > 0).all()
    mods = tr.modules.modules()
    assert mods.filter(pl.col("path").str.starts_with("GptOss"))["device_total_ns"].max() > 0.9 * total


@needs_shared
def test_vllm_merge_costs_less_than_twice_loading_both_files() -> None:
    from proftab.device import merge_capture

    best_load, best_merge = float("inf"), float("inf")
    for _ in range(2):
        t0 = time.perf_counter()
        ex, cap = pt.load(EXECUTION), pt.load(CAPTURE)
        t1 = time.perf_counter()
        merge_capture(ex, [(str(CAPTURE), cap)])
        t2 = time.perf_counter()
        best_load, best_merge = min(best_load, t1 - t0), min(best_merge, t2 - t1)
    assert best_merge < 2 * best_load


@needs_shared
def test_vllm_merge_agrees_with_tracelens() -> None:
    """Per-op device time of the merged trace = TraceLens's merged report (tests/data/graphs/README.md).

    TraceLens sums float µs (its sums sit on a 1/1024 µs grid); proftab's are the exact ns of the
    decimal text: they differ by at most 10 ns per op, the calls and the op set are the same.
    """
    tl = pl.read_csv(Path(__file__).parent / "data" / "graphs" / "tracelens_vllm_decode_ops_summary.csv")
    tr = pt.load(EXECUTION, graph_capture=CAPTURE)
    ka = tr.key_averages().filter(pl.col("device_type") == "CPU", pl.col("self_device_ns") > 0)
    j = ka.join(tl, on="name", how="full", coalesce=True)
    assert j.filter(pl.col("calls").is_null() | pl.col("Count").is_null()).is_empty()  # the same ops
    assert (j["calls"] == j["Count"]).all()
    direct = (j["total_direct_kernel_time_sum"] * 1000 - j["self_device_ns"]).abs()
    subtree = (j["total_subtree_kernel_time_sum"] * 1000 - j["device_total_ns"]).abs()
    assert direct.max() <= 10 and subtree.max() <= 10
    # the ops holding >= 95 % of the kernel time: the same ops, in the same order
    total = tr.device.activities()["dur_ns"].sum()
    top = ka.sort("self_device_ns", descending=True)
    k = int((top["self_device_ns"].cum_sum() < 0.95 * total).sum()) + 1
    assert k == 8 and top["name"].head(k).to_list() == tl.sort("total_direct_kernel_time_sum", descending=True)[
        "name"].head(k).to_list()
