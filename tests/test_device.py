"""Device attribution (proftab.device): kernels/memcpy/memset -> launch -> op, and the analyses.

Real traces: the bundled ones (tests/data/public, data/*bert_small*) always; the whole public
corpus of ../shared when it is present. Synthetic traces are written as JSON and loaded with
`pt.load`, so every test goes through the loader like a user's trace.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

import proftab as pt
from proftab import device, kinds, schema
from proftab.exceptions import ProftabError
from tests.builders import annotation, event, kernel, launch, load_events, op, us

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
PUBLIC = ROOT / "tests" / "data" / "public"
H100 = ROOT / "data" / "h100_bert_small.pt.trace.json.gz"
MI300 = ROOT / "data" / "mi300_bert_small.pt.trace.json.gz"
SHARED_PUBLIC = SHARED / "traces" / "public"
needs_shared = pytest.mark.skipif(not SHARED.exists(), reason="../shared (the public trace corpus) is absent")

BUNDLED_GPU = [
    H100, MI300,
    *(PUBLIC / n for n in (
        "amd_trace__mi250_minitoy_train_ROCm6_2_kineto.json.gz",
        "call_stack__backward_thread.json.gz",
        "critical_path__alexnet__benchmark_result_2869224_1695835535_trace.json.gz",
        "h100__gaunernst_bert-small-uncased__1016001.json.gz",
        "large_integer_trace__rank-70.Mar_25_20_48_12.2861.pt.trace.json.gz",
        "trace_compare__base__base.json.gz",
        "trace_compare__test__test.json.gz",
        "trace_filter__sampled_rank-0.json.gz",
        "with_gpu_user_annotation__step_based_trace_2543932.json.gz",
    )),
]
_LOADED: dict[str, pt.Trace] = {}


def load(path: Path | str | list) -> pt.Trace:
    """pt.load, once per path for the whole module (Traces are immutable)."""
    key = str(path)
    if key not in _LOADED:
        _LOADED[key] = pt.load(path)
    return _LOADED[key]


# --------------------------------------------------------------------------- synthetic traces


def by_id(tr: pt.Trace, name: str) -> int:
    return int(tr.events.filter(pl.col("name") == name)["event_id"][0])


def links(tr: pt.Trace) -> dict[int, tuple[str, int | None]]:
    a = tr.device.activities()
    return {e: (str(lk), o) for e, lk, o in zip(a["event_id"], a["link"], a["op_id"], strict=True)}


# --------------------------------------------------------------------------- linking rules


def test_external_id_link_and_graph_launch(tmp_path: Path) -> None:
    tr = load_events(tmp_path, [
        op("aten::mm", us(10_000), us(10_000), ext=5),
        launch(us(12_000), us(500), corr=100, ext=5),
        op("aten::graph", us(30_000), us(10_000), ext=6),
        launch(us(31_000), us(500), corr=200, name="cudaGraphLaunch", ext=6),
        kernel(us(15_000), us(3_000), 100, name="gemm"),
        *(kernel(us(40_000 + i * 2_000), us(1_500), 200, name=f"g{i}") for i in range(3)),
    ])
    lk = links(tr)
    mm, graph = by_id(tr, "aten::mm"), by_id(tr, "aten::graph")
    glaunch = by_id(tr, "cudaGraphLaunch")
    assert lk[by_id(tr, "gemm")] == ("external_id", mm)
    # a graph's kernels belong to the graph launch, not to the op around it (docs/device.md, CUDA graphs)
    assert {lk[by_id(tr, f"g{i}")] for i in range(3)} == {("graph_launch", glaunch)}
    sd = tr.device.self_time()
    own = dict(zip(sd["event_id"], sd["self_device_ns"], strict=True))
    assert own[mm] == 3_000 and own[glaunch] == 4_500 and graph not in own
    acts = tr.device.activities()
    act = acts.filter(pl.col("name") == "g2")
    assert act["launch_delay_ns"][0] == 44_000 - 31_000
    g = acts.filter(pl.col("graph_launch_id").is_not_null()).sort("start_ns")
    assert g["name"].to_list() == ["g0", "g1", "g2"] and g["graph_node"].to_list() == [0, 1, 2]
    assert set(g["graph_launch_id"]) == {glaunch} and acts.filter(pl.col("name") == "gemm")["graph_node"][0] is None
    # the op around the launch keeps the graph's time as total device time, as the graph launch's
    ka = tr.key_averages().filter(pl.col("device_type") == "CPU")
    row = {n: (s_, t) for n, s_, t in zip(ka["name"], ka["self_device_ns"], ka["device_total_ns"], strict=True)}
    assert row["aten::graph"] == (0, 4_500) and row["cudaGraphLaunch"] == (4_500, 4_500)


def test_external_id_matching_no_op_falls_back_to_containment(tmp_path: Path) -> None:
    # the runtime's External id names no op (as in HTA's trace_diff control trace)
    tr = load_events(tmp_path, [
        op("aten::linear", us(0), us(20_000), ext=1),
        op("aten::addmm", us(2_000), us(10_000), ext=2),
        launch(us(5_000), us(500), corr=77, ext=9_999),
        kernel(us(8_000), us(1_000), 77, name="gemm"),
    ])
    assert links(tr)[by_id(tr, "gemm")] == ("containment", by_id(tr, "aten::addmm"))


def test_bogus_external_ids_are_ignored_and_collisions_guarded(tmp_path: Path) -> None:
    # Kineto < 2024-02: runtimes carry their own correlation as External id; 3 collides with an
    # op on another thread (pytorch#124388) and must not win
    tr = load_events(tmp_path, [
        op("aten::conv", us(0), us(20_000), ext=1),
        op("aten::other", us(0), us(20_000), ext=3, tid=2),
        launch(us(5_000), us(500), corr=3, ext=3),
        launch(us(6_000), us(500), corr=4, ext=4),
        kernel(us(8_000), us(1_000), 3, name="k3"),
        kernel(us(9_000), us(1_000), 4, name="k4"),
    ])
    conv = by_id(tr, "aten::conv")
    lk = links(tr)
    assert lk[by_id(tr, "k3")] == ("containment", conv)
    assert lk[by_id(tr, "k4")] == ("containment", conv)
    assert tr.device.diagnostics()["external_id_mode"][0] == "correlation"


def test_guard_rejects_external_id_on_another_thread(tmp_path: Path) -> None:
    tr = load_events(tmp_path, [
        op("aten::a", us(0), us(20_000), ext=10),
        op("aten::b", us(0), us(20_000), ext=11, tid=2),
        launch(us(5_000), us(500), corr=100, ext=10),
        launch(us(6_000), us(500), corr=101, ext=11),  # names an op of thread 2: refused
        kernel(us(8_000), us(1_000), 100, name="k0"),
        kernel(us(9_000), us(1_000), 101, name="k1"),
    ])
    a = by_id(tr, "aten::a")
    assert links(tr)[by_id(tr, "k0")] == ("external_id", a)
    assert links(tr)[by_id(tr, "k1")] == ("containment", a)
    d = tr.device.diagnostics().row(0, named=True)
    assert (d["external_id_mode"], d["n_ext_rejected"], d["n_external_id"], d["n_containment"]) == ("op", 1, 1, 1)


def test_annotation_no_op_no_launch_and_device_external_id(tmp_path: Path) -> None:
    tr = load_events(tmp_path, [
        annotation("my_region", us(0), us(50_000), ext=1),
        op("aten::mm", us(30_000), us(10_000), ext=2),
        launch(us(5_000), us(500), corr=100),         # only inside the annotation
        launch(us(5_000), us(500), corr=101, tid=3),  # a thread without ops
        kernel(us(10_000), us(1_000), 100, name="k_region"),
        kernel(us(12_000), us(1_000), 101, name="k_orphan"),
        kernel(us(14_000), us(1_000), None, name="k_nocorr"),
        kernel(us(41_000), us(1_000), 555, name="k_devext", ext=2),   # launch outside the trace
    ])
    lk = links(tr)
    assert lk[by_id(tr, "k_region")] == ("annotation", by_id(tr, "my_region"))
    assert lk[by_id(tr, "k_orphan")] == ("no_op", None)
    assert lk[by_id(tr, "k_nocorr")] == ("no_launch", None)
    assert lk[by_id(tr, "k_devext")] == ("device_external_id", by_id(tr, "aten::mm"))
    s = tr.device.summary().row(0, named=True)
    assert s["unattributed_ns"] == 2_000 and s["attributed_ns"] == 2_000 and s["device_ns"] == 4_000
    assert sorted(tr.device.unattributed()["name"]) == ["k_nocorr", "k_orphan"]


def test_shared_correlation_and_negative_duration(tmp_path: Path) -> None:
    tr = load_events(tmp_path, [
        op("aten::a", us(0), us(20_000), ext=1),
        op("aten::b", us(0), us(20_000), ext=2, tid=2),
        launch(us(3_000), us(500), corr=50, tid=2),  # same correlation, later: not the launch
        launch(us(2_000), us(500), corr=50, ext=1),
        kernel(us(8_000), us(1_000), 50, name="k"),
        kernel(us(9_000), us(-5), 50, name="neg"),   # a negative duration is clamped, not dropped
    ])
    a = by_id(tr, "aten::a")
    assert links(tr)[by_id(tr, "k")] == ("external_id", a)
    d = tr.device.diagnostics().row(0, named=True)
    assert (d["n_shared_correlation"], d["n_clamped"], d["n_activities"]) == (1, 1, 2)
    acts = tr.device.activities()
    assert acts.filter(pl.col("name") == "neg")["dur_ns"][0] == 0
    assert tr.device.self_time().filter(pl.col("event_id") == a)["self_device_ns"][0] == 1_000


def test_old_categories_and_lowercase_external_id(tmp_path: Path) -> None:
    # 2021 tb_plugin traces: Operator / Runtime / Kernel / Memcpy, "external id"
    ev = [
        {"ph": "X", "cat": "Operator", "name": "aten::add", "pid": 1, "tid": 1, "ts": 10, "dur": 20,
         "args": {"external id": 7}},
        {"ph": "X", "cat": "Runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": 12, "dur": 2,
         "args": {"external id": 7, "correlation": 70}},
        {"ph": "X", "cat": "Kernel", "name": "add_kernel", "pid": 0, "tid": "stream 7", "ts": 15, "dur": 4,
         "args": {"external id": 7, "correlation": 70}},
        {"ph": "X", "cat": "Memcpy", "name": "Memcpy HtoD (Pageable -> Device)", "pid": 0, "tid": "stream 7", "ts": 40,
         "dur": 2, "args": {"correlation": 71, "bytes": 4000}},
        {"ph": "X", "cat": "Runtime", "name": "cudaMemcpyAsync", "pid": 1, "tid": 1, "ts": 25, "dur": 3,
         "args": {"external id": 7, "correlation": 71}},
    ]
    tr = load_events(tmp_path, ev)
    add = by_id(tr, "aten::add")
    assert set(links(tr).values()) == {("external_id", add)}
    c = tr.device.copies().row(0, named=True)
    assert (c["direction"], c["bytes"], c["dur_ns"], c["gb_per_s"]) == ("HtoD", 4000, 2000, 2.0)
    b = tr.device.busy().row(0, named=True)  # the string tid "stream 7" is stream 7
    assert (b["device"], b["stream"], b["busy_ns"], b["window_ns"]) == (0, 7, 6000, 27000)


def test_device_totals_follow_torch_tree_across_a_crossing_event(tmp_path: Path) -> None:
    # profiler.step() (a Python frame) starts in step 1, ends in step 2, and step 2 starts inside
    # it. Nesting by "open at start" would put step 2 under step 1; torch hangs an event that
    # ends after its parent from the nearest ancestor containing it, so each step keeps its own.
    tr = load_events(tmp_path, [
        annotation("ProfilerStep#1", us(0), us(10_000), ext=100),
        event("profiler.py(1): step", us(9_000), us(3_000), cat="python_function"),
        annotation("ProfilerStep#2", us(11_000), us(19_000), ext=101),
        op("aten::a", us(1_000), us(1_000), ext=1), launch(us(1_100), us(500), corr=1, ext=1),
        op("aten::b", us(15_000), us(1_000), ext=2), launch(us(15_100), us(500), corr=2, ext=2),
        kernel(us(20_000), us(100), 1, name="ka"), kernel(us(21_000), us(200), 2, name="kb"),
    ])
    nested = tr.nested.filter(pl.col("name") == "ProfilerStep#2")
    assert nested["parent_id"][0] == by_id(tr, "profiler.py(1): step")  # the nesting rule ...
    ka = tr.key_averages()
    step = ka.filter((pl.col("name") == "ProfilerStep*") & (pl.col("device_type") == "CPU")).row(0, named=True)
    assert (step["calls"], step["device_total_ns"]) == (2, 300)  # ... but no double count
    ops = tr.device.ops()
    total = dict(zip(ops["name"], ops["device_total_ns"], strict=True))
    assert (total["ProfilerStep#1"], total["ProfilerStep#2"], total.get("profiler.py(1): step", 0)) == (100, 200, 0)


# --------------------------------------------------------------------------- annotation margin


@pytest.mark.parametrize(("shift", "add", "res"), [(1, 2, 1), (1000, 1500, 1), (1, 1, 1), (1000, 1000, 1000)])
def test_annotation_margin_is_read_from_the_data(tmp_path: Path, shift: int, add: int, res: int) -> None:
    k0, k1 = 100_000, 180_000  # two kernels; the annotation covers [k0, k1 + 20_000]
    ann = {"ph": "X", "cat": "gpu_user_annotation", "name": "ProfilerStep#3", "pid": 0, "tid": 7,
           "ts": (k0 - shift) / 1000, "dur": (k1 + 20_000 - k0 + add) / 1000, "args": {"External id": 9}}
    host = annotation("ProfilerStep#3", us(50_000), us(200_000), ext=9)
    events = [host, op("aten::mm", us(60_000), us(10_000), ext=1), launch(us(61_000), us(500), corr=1, ext=1),
              op("aten::mm", us(90_000), us(10_000), ext=2), launch(us(91_000), us(500), corr=2, ext=2),
              kernel(us(k0), us(20_000), 1, name="gemm"), kernel(us(k1), us(20_000), 2, name="gemm"), ann]
    if res == 1000:  # integer-µs trace
        for e in events:
            e["ts"], e["dur"] = int(round(e["ts"])), int(round(e["dur"]))
    tr = load_events(tmp_path, events)
    assert (tr.files["time_resolution_ns"][0] == 1000) == (res == 1000)
    m = tr.device.margins().row(0, named=True)
    assert (m["margin_start_ns"], m["margin_dur_ns"], m["n_margin_evidence"]) == (shift, add, 1)
    a = tr.device.annotations().row(0, named=True)
    assert (a["start_ns"], a["dur_ns"]) == (k0, k1 + 20_000 - k0)
    assert (a["n_activities"], a["activity_ns"], a["busy_ns"]) == (2, 40_000, 40_000)
    assert a["host_id"] == by_id(tr, "ProfilerStep#3")
    # key_averages' device row of the annotation uses the undone duration; it stays out of the total
    ka = tr.key_averages()
    row = ka.filter((pl.col("device_type") != "CPU") & pl.col("is_user_annotation")).row(0, named=True)
    assert row["self_device_ns"] == k1 + 20_000 - k0
    assert "Self CUDA time total: 40.000us" in tr.table()


def test_annotation_without_evidence_uses_the_format_default(tmp_path: Path) -> None:
    ann = {"ph": "X", "cat": "gpu_user_annotation", "name": "x", "pid": 0, "tid": 7, "ts": 1, "dur": 5}
    k = {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 50, "dur": 1}  # integer µs
    tr = load_events(tmp_path, [ann, k])
    m = tr.device.margins().row(0, named=True)
    assert (m["margin_start_ns"], m["margin_dur_ns"], m["n_margin_evidence"]) == (1000, 1000, 0)


# --------------------------------------------------------------------------- property tests


@st.composite
def host_and_launches(draw: st.DrawFn) -> tuple[list[dict], list[tuple[int, int]], int]:
    """Ops (arbitrary overlaps) and launches on 2 threads, kernels for every launch."""
    events: list[dict] = []
    n_ops = draw(st.integers(0, 12))
    ops: list[tuple[int, int, int, int]] = []  # (tid, start, end, ext)
    for i in range(n_ops):
        tid = draw(st.integers(1, 2))
        s = draw(st.integers(0, 60)) * 100
        d = draw(st.integers(0, 40)) * 100
        ext = draw(st.one_of(st.none(), st.integers(1, 20)))
        events.append(op(f"op{i}", us(s), us(d), ext=ext, tid=tid))
        ops.append((tid, s, s + d, -1 if ext is None else ext))
    launches = []
    n_l = draw(st.integers(1, 10))
    for j in range(n_l):
        tid = draw(st.integers(1, 2))
        t = draw(st.integers(0, 80)) * 100 + draw(st.sampled_from([0, 50]))
        ext = draw(st.one_of(st.none(), st.integers(1, 20)))
        events.append(launch(us(t), us(draw(st.integers(0, 3)) * 100), corr=1000 + j, ext=ext, tid=tid))
        launches.append((tid, t))
        for k in range(draw(st.integers(0, 2))):
            events.append(kernel(us(10_000 + j * 1000 + k * 300), us(draw(st.integers(0, 400))), 1000 + j,
                                 name=f"k{j}_{k}"))
    return events, launches, n_ops


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=host_and_launches())
def test_property_attribution_against_reference(tmp_path: Path, case: tuple) -> None:
    events, _, n_ops = case
    tr = load_events(tmp_path, events)
    ev = tr.events
    acts = tr.device.activities()
    host = ev.filter(pl.col("cat").cast(pl.String) == "cpu_op").to_dicts()
    rt = {r["correlation"]: r for r in ev.filter(pl.col("cat").cast(pl.String) == "cuda_runtime").to_dicts()}
    for a in acts.to_dicts():
        la = rt.get(a["correlation"])
        if la is None:
            assert a["link"] == "no_launch"
            continue
        t = la["start_ns"]
        # reference: External id op on the launch's thread with start <= t <= end, else the
        # innermost op open at t (latest by start, then shortest, then event id)
        by_ext = [h for h in host if la["external_id"] is not None and h["external_id"] == la["external_id"]
                  and h["tid"] == la["tid"] and h["start_ns"] <= t <= h["end_ns"]]
        open_ = [h for h in host if h["tid"] == la["tid"] and h["start_ns"] <= t < h["end_ns"]]
        if by_ext and tr.device.diagnostics()["external_id_mode"][0] == "op":
            want = ("external_id", min(h["event_id"] for h in by_ext))
        elif open_:
            inner = max(open_, key=lambda h: (h["start_ns"], -h["end_ns"], h["event_id"]))
            want = ("containment", inner["event_id"])
        else:
            want = ("no_op", None)
        assert (str(a["link"]), a["op_id"]) == want
    # the identity: self device time of ops + unattributed == all device time
    raw = ev.filter(pl.col("cat").cast(pl.String) == "kernel")["dur_ns"].clip(0).sum()
    sd = tr.device.self_time().join(
        ev.filter(pl.col("cat").cast(pl.String) == "cpu_op").select("rank", "event_id"), on=["rank", "event_id"])
    un = acts.filter(pl.col("op_id").is_null())["dur_ns"].sum()
    assert sd["self_device_ns"].sum() + un == raw


@st.composite
def device_timeline(draw: st.DrawFn) -> list[dict]:
    """Kernels on 2 streams of one device (small integer µs), launches, syncs."""
    events = [op("aten::x", us(0), us(1_000_000), ext=1)]
    for j in range(draw(st.integers(1, 12))):
        s = draw(st.integers(0, 60)) * 1000
        d = draw(st.integers(0, 15)) * 1000
        stream = draw(st.sampled_from([7, 8]))
        name = draw(st.sampled_from(["gemm_kernel", "ncclKernel_AllReduce", "elementwise_kernel"]))
        lt = draw(st.integers(0, 70)) * 1000
        events.append(launch(us(lt), us(0), corr=10 + j, ext=1))
        events.append(kernel(us(s), us(d), 10 + j, name=name, stream=stream))
    for _ in range(draw(st.integers(0, 2))):
        s = draw(st.integers(0, 60)) * 1000
        events.append(event("Stream Wait Event", us(s), us(draw(st.integers(0, 10)) * 1000), cat="cuda_sync",
                            pid=0, tid=7))
    return events


def _cover(rows: list[tuple[int, int]], n: int = 200) -> np.ndarray:
    c = np.zeros(n, bool)
    for s, e in rows:
        c[s:e] = True
    return c


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(events=device_timeline())
def test_property_busy_idle_overlap_against_brute_force(tmp_path: Path, events: list[dict]) -> None:
    tr = load_events(tmp_path, events)
    acts = tr.device.activities().with_columns(s=pl.col("start_ns") // 1000, e=pl.col("end_ns") // 1000)
    work = acts.filter(pl.col("kind") != "sync")
    iv = list(zip(work["s"], work["e"], strict=True))
    cov = _cover(iv)
    b = tr.device.busy(by="device").row(0, named=True)
    assert b["busy_ns"] == cov.sum() * 1000
    assert b["sum_ns"] == work["dur_ns"].sum() and b["overlap_ns"] == b["sum_ns"] - b["busy_ns"]
    for r in tr.device.busy(by="stream").to_dicts():
        w = work.filter(pl.col("stream") == r["stream"])
        assert r["busy_ns"] == _cover(list(zip(w["s"], w["e"], strict=True))).sum() * 1000
    # idle gaps: exactly the uncovered runs between the first start and the last end
    lo, hi = min(s for s, _ in iv), max(e for _, e in iv)
    points = sorted({s for s, e in iv if s == e})  # a zero-length activity splits a gap
    gaps, t = [], lo
    while t < hi:
        if not cov[t]:
            u = t
            while u < hi and not cov[u]:
                u += 1
            cuts = [t, *(p for p in points if t < p < u), u]
            gaps += list(zip(cuts[:-1], cuts[1:], strict=True))
            t = u
        else:
            t += 1
    idle = tr.device.idle()
    assert list(zip((idle["start_ns"] // 1000).to_list(), (idle["end_ns"] // 1000).to_list(), strict=True)) == gaps
    assert (idle["host_ns"] + idle["sync_ns"] + idle["other_ns"] == idle["idle_ns"]).all()
    assert idle["idle_ns"].sum() == b["idle_ns"]
    sync_cov = _cover(list(zip(*(acts.filter(pl.col("kind") == "sync")[c].to_list() for c in ("s", "e")),
                               strict=True)))
    for g in idle.to_dicts():
        a, e = g["start_ns"] // 1000, g["end_ns"] // 1000
        nxt = work.filter(pl.col("s") == e).sort(pl.col("launch_start_ns"))
        host = min(max(nxt["launch_start_ns"][0] // 1000 - a, 0), e - a)
        assert g["host_ns"] == host * 1000
        assert g["sync_ns"] == sync_cov[a + host:e].sum() * 1000
    # communication / compute overlap
    comm = work.filter(pl.col("name").str.starts_with("nccl"))
    comp = work.filter(~pl.col("name").str.starts_with("nccl"))
    cc, pc = (_cover(list(zip(f["s"], f["e"], strict=True))) for f in (comm, comp))
    o = tr.device.comm_overlap().row(0, named=True)
    assert (o["comm_ns"], o["compute_ns"], o["overlap_ns"]) == (cc.sum() * 1000, pc.sum() * 1000,
                                                                (cc & pc).sum() * 1000)


# --------------------------------------------------------------------------- real traces (bundled)


def _raw_per_device(tr: pt.Trace) -> pl.DataFrame:
    """Σ durations (negatives as 0) of device activities straight from the events table."""
    return tr.events.filter(pl.col("cat").cast(pl.String).is_in(list(device.ACTIVITY_CATEGORIES))).group_by(
        "rank", pl.col("pid").alias("device")).agg(pl.col("dur_ns").clip(0).sum().alias("raw_ns"))


def check_invariants(tr: pt.Trace) -> None:
    """The identities the issue asks for, on one trace."""
    raw = _raw_per_device(tr)
    s = tr.device.summary()
    j = raw.join(s, on=["rank", "device"], how="full", coalesce=True)
    assert (j["attributed_ns"] + j["unattributed_ns"] == j["raw_ns"]).all(), j
    # torch's self device time of host ops adds up to the attributed time
    cpu = ~pl.col("cat").cast(pl.String).is_in(list(schema.DEVICE_CATEGORIES))
    host_ids = tr.events.filter(cpu).select("rank", "event_id")
    sd = tr.device.self_time()
    assert sd.join(host_ids, on=["rank", "event_id"])["self_device_ns"].sum() == s["attributed_ns"].sum()
    # key_averages: CPU rows carry the attributed time, device rows (no annotations) all of it
    ka = tr.key_averages()
    assert ka.filter(pl.col("device_type") == "CPU")["self_device_ns"].sum() == s["attributed_ns"].sum()
    dev_rows = ka.filter((pl.col("device_type") != "CPU") & ~pl.col("is_user_annotation"))
    assert dev_rows["self_device_ns"].sum() == raw["raw_ns"].sum()
    # no negative time anywhere
    frames = [tr.device.activities(), s, sd, tr.device.busy(), tr.device.idle(), tr.device.idle_breakdown(),
              tr.device.comm_overlap(), tr.device.copies(), tr.device.kernel_categories(), tr.device.launch_delay(),
              tr.device.annotations(), ka]
    for f in frames:
        for c in f.columns:
            if c.endswith("_ns") and f[c].dtype.is_integer():
                assert not (f[c] < 0).any(), (c, f.filter(pl.col(c) < 0))


def check_region_invariant(tr: pt.Trace) -> int:
    """torch's test_region_device_time on the record_function regions (user annotations) of a
    trace: a region's device total in key_averages is the device time of the activities whose op
    started inside a region of that name on the region's thread. Returns the regions checked."""
    cat = pl.col("cat").cast(pl.String)
    key = pl.when(pl.col("name").str.starts_with("ProfilerStep#")).then(pl.lit("ProfilerStep*")).otherwise("name")
    regions = tr.events.filter(cat == "user_annotation").select(
        "rank", "pid", "tid", key.alias("key"), pl.col("start_ns").alias("_s"), pl.col("end_ns").alias("_e"))
    owners = tr.device.activities().filter(pl.col("op_id").is_not_null()).join(
        tr.events.select("rank", pl.col("event_id").alias("op_id"), "pid", "tid", pl.col("start_ns").alias("_os")),
        on=["rank", "op_id"])
    # leave out names whose regions overlap each other (torch sums them twice), and regions with a
    # host event that starts inside and ends after them around a launching op: torch (and
    # key_averages) re-parent such an event above the region, so its ops leave the region
    nested = regions.sort("rank", "pid", "tid", "key", "_s").with_columns(
        _prev=pl.col("_e").shift(1).over("rank", "pid", "tid", "key")).filter(pl.col("_s") < pl.col("_prev"))
    host = tr.events.filter(~cat.is_in(list(schema.DEVICE_CATEGORIES))).sort("start_ns")
    crossed = []
    for r in regions.iter_rows(named=True):
        thread = (pl.col("rank") == r["rank"]) & (pl.col("pid") == r["pid"]) & (pl.col("tid") == r["tid"])
        h = host.filter(thread & (pl.col("start_ns") >= r["_s"]) & (pl.col("start_ns") < r["_e"])
                        & (pl.col("end_ns") > r["_e"]))
        os_ = np.sort(owners.filter(thread)["_os"].to_numpy())
        inner = np.searchsorted(os_, h["end_ns"].to_numpy()) - np.searchsorted(os_, h["start_ns"].to_numpy())
        crossed.append(bool((inner > 0).any()))
    escaped = regions.filter(pl.Series(crossed, dtype=pl.Boolean))
    regions = regions.join(pl.concat([nested.select("key"), escaped.select("key")]).unique(), on="key", how="anti")
    inside = owners.join(regions, on=["rank", "pid", "tid"]).filter(
        (pl.col("_os") >= pl.col("_s")) & (pl.col("_os") < pl.col("_e"))).unique(subset=["rank", "event_id", "key"])
    want = inside.group_by("key").agg(pl.col("dur_ns").sum().alias("want"))
    ka = tr.key_averages().filter((pl.col("device_type") == "CPU") & pl.col("is_user_annotation"))
    got = regions.select("key").unique().join(ka.select(pl.col("name").alias("key"), "device_total_ns"), on="key",
                                              how="left").join(want, on="key", how="left")
    got = got.with_columns(pl.col("want").fill_null(0), pl.col("device_total_ns").fill_null(0))
    assert (got["device_total_ns"] == got["want"]).all(), got.filter(pl.col("device_total_ns") != pl.col("want"))
    steps = inside.filter(pl.col("key") == "ProfilerStep*")
    if steps.height == owners.height > 0:  # every launching op ran inside a step: torch's exact test
        assert got.filter(pl.col("key") == "ProfilerStep*")["device_total_ns"][0] == owners["dur_ns"].sum()
    return got.height


@pytest.mark.parametrize("path", BUNDLED_GPU, ids=lambda p: p.name[:40])
def test_invariants_on_bundled_traces(path: Path) -> None:
    check_invariants(load(path))


@pytest.mark.parametrize("path", [H100, MI300, PUBLIC / "amd_trace__mi250_minitoy_train_ROCm6_2_kineto.json.gz",
                                  PUBLIC / "trace_filter__sampled_rank-0.json.gz",
                                  PUBLIC / "with_gpu_user_annotation__step_based_trace_2543932.json.gz"],
                         ids=lambda p: p.name[:40])
def test_region_device_time_on_bundled_traces(path: Path) -> None:
    assert check_region_invariant(load(path)) > 0


def test_h100_bert_table_shows_cuda_columns_and_total() -> None:
    tr = load(H100)
    raw = tr.events.filter(pl.col("cat").cast(pl.String).is_in(["kernel", "gpu_memcpy", "gpu_memset"]))
    text = tr.table(sort_by="self_cuda_time_total", row_limit=5)
    header = text.splitlines()[1]
    for col in ("Self CUDA", "Self CUDA %", "CUDA total", "CUDA time avg"):
        assert col in header
    total_us = raw["dur_ns"].sum() / 1000
    assert f"Self CUDA time total: {total_us:.3f}us" in text
    d = tr.device.diagnostics().row(0, named=True)
    assert d["n_external_id"] == d["n_activities"] and d["n_ac2g_agree"] == d["n_ac2g_checked"] == d["n_activities"]
    # the kernel of aten::mm-like ops hangs under the op that launched it, nowhere else
    ops = tr.device.ops()
    step = ops.filter(pl.col("name").str.starts_with("ProfilerStep#"))
    assert step["device_total_ns"][0] == raw["dur_ns"].sum()
    assert (ops["busy_total_ns"] <= ops["device_total_ns"]).all()
    assert (ops["self_busy_ns"] <= ops["self_device_ns"]).all()


def test_rocm_trace_uses_torch_device_naming() -> None:
    tr = load(MI300)
    text = tr.table(row_limit=3)
    assert "Self CUDA" in text  # torch names ROCm device time CUDA too
    assert tr.device.diagnostics()["unattributed_ns"][0] == 0


def test_alexnet_correlation_ids_that_collide_with_ops_are_not_used() -> None:
    tr = load(PUBLIC / "critical_path__alexnet__benchmark_result_2869224_1695835535_trace.json.gz")
    d = tr.device.diagnostics().row(0, named=True)
    assert d["external_id_mode"] == "correlation" and d["n_external_id"] == 0
    ev = tr.events
    rt = ev.filter(pl.col("cat").cast(pl.String) == "cuda_runtime")
    ops = ev.filter(pl.col("cat").cast(pl.String) == "cpu_op")
    # the bogus ids do name ops (that is the trap) ...
    assert rt.join(ops.select("external_id"), on="external_id").height > 0
    # ... but every attributed activity's op holds its launch, on the launch's thread
    a = tr.device.activities().filter(pl.col("op_id").is_not_null())
    j = a.join(ev.select(pl.col("event_id").alias("launch_id"), pl.col("tid").alias("lt")), on="launch_id").join(
        ev.select(pl.col("event_id").alias("op_id"), pl.col("tid").alias("ot"), pl.col("start_ns").alias("os"),
                  pl.col("end_ns").alias("oe")), on="op_id")
    assert (j["lt"] == j["ot"]).all()
    assert ((j["os"] <= j["launch_start_ns"]) & (j["launch_start_ns"] < j["oe"])).all()
    # cuda_sync records are device rows and are attributed like kernels
    assert a.filter(pl.col("kind") == "sync").height > 0


def test_two_rank_files_keep_ranks_apart() -> None:
    paths = [PUBLIC / "trace_filter__sampled_rank-0.json.gz", PUBLIC / "trace_filter__sampled_rank-1.json.gz"]
    tr = load(paths)
    s = tr.device.summary()
    assert sorted(s["rank"].unique().to_list()) == [0, 1]
    one = load(paths[1])
    r1 = s.filter(pl.col("rank") == 1).drop("rank")
    assert r1.equals(one.device.summary().drop("rank"))
    check_invariants(tr)


def test_int_us_annotation_margin_on_a_real_trace() -> None:
    tr = load(PUBLIC / "with_gpu_user_annotation__step_based_trace_2543932.json.gz")
    m = tr.device.margins().row(0, named=True)
    assert (m["margin_start_ns"], m["margin_dur_ns"], m["n_margin_evidence"]) == (1000, 1000, m["n_annotations"])
    a = tr.device.annotations()
    assert (a["dur_ns"] == a["raw_dur_ns"] - 1000).all() and (a["start_ns"] == a["raw_start_ns"] + 1000).all()
    assert (a["n_activities"] > 0).all() and (a["busy_ns"] <= a["dur_ns"]).all()


def test_kernel_categories_on_real_names() -> None:
    names = {
        "void cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_32x32_64x1_tn_align8>": "gemm",
        "Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT128x16x128_MI16x16x1_SN_LDSB1": "gemm",
        "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize64x64x64": "gemm",
        "void implicit_convolve_sgemm<float, float, 1024, 6, 7, 3, 3, 5, 1, false, true, true>": "convolution",
        "igemm_fwd_gtcx3_nhwc_bf16_bx0_ex1_bt128x128x32_wt32x32x8": "convolution",
        "void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float, 512, true, 1>": "reduction",
        "void pytorch_flash::flash_fwd_kernel<pytorch_flash::Flash_fwd_kernel_traits<64, 128>>": "attention",
        "attn_fwd": "attention",
        "ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)": "communication",
        "ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)": "communication",
        "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float>>": "reduction",
        "void at::native::vectorized_elementwise_kernel<4, at::native::AddFunctor<float>>": "elementwise",
        "triton_poi_fused__scaled_dot_product_flash_attention_cat_transpose_view_10": "elementwise",
        "triton_red_fused_add_addmm_mul_native_layer_norm_split_unsqueeze_view_16": "reduction",
        "splitKreduce_kernel<float, float, float, float, true, false, false>": "gemm",
        "fc-dtype_Float": "gemm",
        "mystery_kernel": "other",
    }
    df = pl.DataFrame({"name": list(names), "kind": ["kernel"] * len(names)})
    got = df.select(device.category_expr())["category"].to_list()
    assert dict(zip(names, got, strict=True)) == names
    mem = pl.DataFrame({"name": ["Memcpy DtoD (Device -> Device)", "Memset (Device)", "Stream Sync"],
                        "kind": ["memcpy", "memset", "sync"]}).select(device.category_expr())
    assert mem["category"].to_list() == ["memory", "memory", "sync"]


def test_analyses_on_h100_bert_small() -> None:
    tr = load(H100)
    b = tr.device.busy(by="device").row(0, named=True)
    raw = tr.events.filter(pl.col("cat").cast(pl.String).is_in(["kernel", "gpu_memcpy", "gpu_memset"]))
    assert b["n_activities"] == raw.height and b["sum_ns"] == raw["dur_ns"].sum()
    assert b["busy_ns"] + b["idle_ns"] == b["window_ns"] == raw["end_ns"].max() - raw["start_ns"].min()
    tw = tr.device.busy(by="device", window="trace").row(0, named=True)
    assert tw["window_ns"] >= b["window_ns"] and tw["busy_ns"] == b["busy_ns"]
    ib = tr.device.idle_breakdown().row(0, named=True)
    assert ib["idle_ns"] == b["idle_ns"] and ib["host_ns"] + ib["sync_ns"] + ib["other_ns"] == ib["idle_ns"]
    kc = tr.device.kernel_categories()
    assert kc["sum_ns"].sum() == b["sum_ns"] and abs(kc["sum_share"].sum() - 1) < 1e-12
    ld = tr.device.launch_delay().row(0, named=True)
    delays = tr.device.activities()["launch_delay_ns"]
    assert (ld["min_ns"], ld["max_ns"], ld["n_activities"]) == (delays.min(), delays.max(), delays.len())
    assert ld["min_ns"] <= ld["p50_ns"] <= ld["p90_ns"] <= ld["p99_ns"] <= ld["max_ns"]
    cs = tr.device.copy_summary()
    assert cs["bytes"].sum() == raw.filter(pl.col("cat").cast(pl.String) == "gpu_memcpy")["bytes"].sum()
    # the namespace on Trace is the same functions
    assert tr.device.busy(by="device").equals(device.busy(tr.device.activities(), by="device"))
    assert tr.device.activities() is tr.device.activities()  # computed once per trace


def test_parquet_dataset_gives_the_same_attribution(tmp_path: Path) -> None:
    pt.convert(H100, tmp_path / "h100.pq")
    scanned = pt.scan(tmp_path / "h100.pq")
    cols = [c for c in load(H100).device.activities().columns if c not in ("cat", "op_cat")]
    assert scanned.device.activities().select(cols).equals(load(H100).device.activities().select(cols))
    assert scanned.key_averages()["device_total_ns"].equals(load(H100).key_averages()["device_total_ns"])


def test_mtia_dma_requests_are_copies(tmp_path: Path) -> None:
    dma = {"ph": "X", "cat": "mtia_ccp_events", "name": "dma_request", "pid": 9, "tid": 801, "ts": 1.5, "dur": 0.5,
           "args": {"direction": "HOST_TO_DEVICE", "size": 1000}}
    fw = {"ph": "X", "cat": "mtia_ccp_events", "name": "fc-dtype_Float", "pid": 9, "tid": 408, "ts": 3.0, "dur": 1.0,
          "args": {"correlation": 5}}
    rt = {"ph": "X", "cat": "mtia_runtime", "name": "runFunction", "pid": 1, "tid": 1, "ts": 2.0, "dur": 0.1,
          "args": {"correlation": 5}}
    tr = load_events(tmp_path, [op("aten::fc", us(1_900), us(500)), rt, dma, fw])
    c = tr.device.copies().row(0, named=True)
    assert (c["kind"], c["direction"], c["bytes"], c["gb_per_s"]) == ("memcpy", "HtoD", 1000, 2.0)
    lk = links(tr)
    assert lk[by_id(tr, "fc-dtype_Float")] == ("containment", by_id(tr, "aten::fc"))
    assert lk[by_id(tr, "dma_request")] == ("no_launch", None)
    assert kinds.device_type(tr.categories) == "MTIA" and "Self MTIA" in tr.table()


def test_bad_arguments_raise() -> None:
    tr = load(H100)
    with pytest.raises(ValueError, match="by must be"):
        tr.device.busy(by="thread")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="window must be"):
        tr.device.busy(window="step")  # type: ignore[arg-type]
    with pytest.raises(ProftabError, match="needs the events frame"):
        device.busy(tr.device.activities(), window="trace")
    with pytest.raises(ProftabError, match=r"lacks the columns \['start_ns'\]"):
        device.activities(tr.events.drop("start_ns"), tr.device.events())


# --------------------------------------------------------------------------- free functions over frames


def test_free_functions_run_on_a_users_own_frames() -> None:
    # a hand-built events table (no loader, no Trace): an op launching one kernel by External
    # id, a graph launch owning two kernels found by containment, a kernel without a launch;
    # only the required columns and the link ids, `rank` as Int64, `cat` as plain strings
    rows = [  # event_id, pid, tid, cat, name, start, dur, correlation, external id
        (1, 1, 1, "cpu_op", "aten::mm", 10_000, 10_000, None, 5),
        (2, 1, 1, "cuda_runtime", "cudaLaunchKernel", 12_000, 500, 100, 5),
        (3, 1, 1, "cpu_op", "aten::graph", 30_000, 10_000, None, None),
        (4, 1, 1, "cuda_runtime", "cudaGraphLaunch", 31_000, 500, 200, None),
        (5, 0, 7, "kernel", "gemm", 15_000, 3_000, 100, None),
        (6, 0, 7, "kernel", "g0", 40_000, 1_500, 200, None),
        (7, 0, 8, "kernel", "g1", 41_000, 1_500, 200, None),
        (8, 0, 7, "kernel", "orphan", 50_000, 1_000, None, None),
    ]
    cols = ["event_id", "pid", "tid", "cat", "name", "start_ns", "dur_ns", "correlation", "external_id"]
    events = pl.DataFrame(rows, schema=cols, orient="row").with_columns(
        rank=pl.lit(0), end_ns=pl.col("start_ns") + pl.col("dur_ns"))
    files = pl.DataFrame({"rank": [0], "time_resolution_ns": [1]})
    margins = device.annotation_margins(events, files)
    dev = device.device_events(events, margins)
    acts = device.activities(events, dev)
    got = {n: (str(lk), o) for n, lk, o in zip(acts["name"], acts["link"], acts["op_id"], strict=True)}
    assert got == {"gemm": ("external_id", 1), "g0": ("graph_launch", 4), "g1": ("graph_launch", 4),
                   "orphan": ("no_launch", None)}
    own = dict(zip(*device.self_time(acts, dev).select("event_id", "self_device_ns").to_dict().values(), strict=True))
    assert (own[1], own[4]) == (3_000, 3_000) and 3 not in own
    s = device.summary(acts).row(0, named=True)
    assert (s["attributed_ns"], s["unattributed_ns"], s["busy_ns"]) == (6_000, 1_000, 3_000 + 2_500 + 1_000)
    b = device.busy(acts, events, by="device", window="trace").row(0, named=True)
    assert (b["window_start_ns"], b["window_end_ns"]) == (10_000, 51_000)
    assert device.idle(acts, events)["idle_ns"].sum() == b["window_ns"] - b["busy_ns"] - (15_000 - 10_000)
    assert device.unattributed(acts)["name"].to_list() == ["orphan"]
    d = device.diagnostics(events, pl.DataFrame(schema={"rank": pl.Int32, "cat": pl.String, "id": pl.Int64,
                                                        "pid": pl.Int64, "tid": pl.Int64, "start_ns": pl.Int64}),
                           acts, dev, margins, files).row(0, named=True)
    assert (d["n_activities"], d["n_external_id"], d["n_graph_launch"], d["n_no_launch"]) == (4, 1, 2, 1)


def test_free_functions_equal_the_namespace_on_a_real_trace() -> None:
    # tr.device.X() is the free function over the trace's own frames, frame for frame
    tr = load(MI300)
    events, files = tr.collect("events"), tr.files
    margins = device.annotation_margins(events, files)
    dev = device.device_events(events, margins)
    acts = device.activities(events, dev)
    ns = tr.device
    pairs = [
        (ns.margins(), margins), (ns.events(), dev), (ns.activities(), acts),
        (ns.unattributed(), device.unattributed(acts)), (ns.self_time(), device.self_time(acts, dev)),
        (ns.diagnostics(), device.diagnostics(events, tr.collect("flows"), acts, dev, margins, files)),
        (ns.summary(), device.summary(acts)), (ns.ops(), device.op_device_time(acts, tr.collect("nested"))),
        (ns.busy(by="device", window="trace"), device.busy(acts, events, by="device", window="trace")),
        (ns.idle(by="stream"), device.idle(acts, events, by="stream")),
        (ns.idle_breakdown(), device.idle_breakdown(acts, events)), (ns.comm_overlap(), device.comm_overlap(acts)),
        (ns.copies(), device.copies(acts, dev)), (ns.copy_summary(), device.copy_summary(acts, dev)),
        (ns.kernel_categories(by=("rank",)), device.kernel_categories(acts, by=("rank",))),
        (ns.launch_delay(), device.launch_delay(acts)), (ns.annotations(), device.annotations(events, dev)),
    ]
    for got, want in pairs:
        assert_frame_equal(got, want)


def test_cpu_only_trace_has_no_device_rows(tmp_path: Path) -> None:
    tr = load_events(tmp_path, [op("aten::add", us(0), us(1000), ext=1)])
    assert tr.device.activities().is_empty() and tr.device.summary().is_empty()
    assert tr.device.self_time().is_empty()
    assert tr.device.busy().is_empty() and tr.device.idle().is_empty() and tr.device.annotations().is_empty()
    assert tr.key_averages()["self_device_ns"].sum() == 0


# --------------------------------------------------------------------------- the shared corpus


def _gpu_traces() -> list[Path]:
    return sorted(SHARED_PUBLIC.glob("*/*.json.gz")) if SHARED.exists() else []


@needs_shared
@pytest.mark.slow
def test_invariants_on_every_public_gpu_trace() -> None:
    seen = regions = 0
    for path in _gpu_traces():
        tr = pt.load(path)
        if tr.device.activities().is_empty():
            continue
        seen += 1
        check_invariants(tr)
        regions += check_region_invariant(tr)
    assert seen >= 40 and regions > 40


@needs_shared
def test_trace_diff_control_attributes_through_containment() -> None:
    tr = pt.load(SHARED_PUBLIC / "hta" / "trace_diff__control__control.json.gz")
    d = tr.device.diagnostics().row(0, named=True)
    assert d["external_id_mode"] == "correlation" and d["n_external_id"] == 0
    assert d["unattributed_ns"] == 0 and d["n_containment"] > 9000


@needs_shared
def test_b200_same_stream_overlaps_count_once() -> None:
    tr = pt.load(SHARED_PUBLIC / "tracelens" / "b200__eager_trace.json.gz")
    b = tr.device.busy().row(0, named=True)
    w = tr.device.activities().filter(pl.col("kind") != "sync").sort("start_ns")
    prev = w["end_ns"].cum_max().shift(1)
    assert int((w["start_ns"] < prev).sum()) == 74  # kernels starting before the previous ends
    assert 0 < b["overlap_ns"] and b["busy_ns"] == b["sum_ns"] - b["overlap_ns"]


@needs_shared
def test_margins_of_every_kineto_era_in_the_corpus() -> None:
    want = {"nccl_parser_config__nccl_data.json.gz": (1000, 1500),
            "ns_resolution_trace__rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz": (1, 1),
            "with_gpu_user_annotation__step_based_trace_2543932.json.gz": (1000, 1000)}
    for name, margin in want.items():
        m = pt.load(SHARED_PUBLIC / "hta" / name).device.margins().row(0, named=True)
        assert (m["margin_start_ns"], m["margin_dur_ns"]) == margin and m["n_margin_evidence"] == m["n_annotations"]


@needs_shared
def test_graph_launch_kernels_belong_to_the_graph_not_the_region_around_it() -> None:
    tr = pt.load(SHARED_PUBLIC / "tracelens" / "inference__vllm_decode_full__graph_execution.json.gz")
    a = tr.device.activities()
    g = a.filter(pl.col("launch_name") == "hipGraphLaunch")
    assert g.height == 421 and g["launch_id"].n_unique() == 1
    assert set(g["link"].cast(pl.String)) == {"graph_launch"} and (g["op_id"] == g["launch_id"]).all()
    assert g.sort("start_ns")["graph_node"].to_list() == list(range(421))
    # the execute_... annotation around the launch has the graph's time as total, not self, device time
    ka = tr.key_averages().filter(pl.col("device_type") == "CPU")
    ann = ka.filter(pl.col("name").str.starts_with("execute_")).row(0, named=True)
    assert ann["self_device_ns"] == 0 and ann["device_total_ns"] >= g["dur_ns"].sum()
    assert ka.filter(pl.col("name") == "hipGraphLaunch")["self_device_ns"].item() == g["dur_ns"].sum()
