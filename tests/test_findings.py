"""tr.findings(): rules whose cause is known by construction (tests/data/findings) and real GPU traces.

Every test recomputes the finding's numbers from its `evidence` with plain code.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from typing import Any

import polars as pl
import pytest

import proftab as pt
from proftab.exceptions import UsageError
from proftab.findings import FINDING_SCHEMA, finding, frame, register_rule, rule_names, unregister_rule
from proftab.render.text import fmt_bytes, fmt_ns
from proftab.steps import step_windows
from tests.conftest import BUNDLED, DATA, SHARED_PUBLIC, needs_shared

FIND = DATA / "findings"
sys.path.insert(0, str(FIND))
import generate as scenario  # noqa: E402  - the constants the traces were recorded with


def _steps(tr: pt.Trace) -> pl.DataFrame:
    return step_windows(tr.collect("events"))


def _union(starts: Any, ends: Any) -> int:
    """Length of the union of [s, e) intervals: a plain reference."""
    total, cur_s, cur_e = 0, None, None
    for s, e in sorted(zip(starts.tolist(), ends.tolist(), strict=True)):
        if cur_e is None or s > cur_e:
            total += 0 if cur_e is None else cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    return total + (0 if cur_e is None else cur_e - cur_s)


def _rule(tr: pt.Trace, rule: str, scope: str | None = None) -> pl.DataFrame:
    f = tr.findings()
    f = f.filter(pl.col("rule") == rule)
    return f if scope is None else f.filter(pl.col("scope").str.contains(scope, literal=True))


@pytest.fixture(scope="module")
def leak() -> pt.Trace:
    return pt.load(FIND / "leak.pt.trace.json.gz")


@pytest.fixture(scope="module")
def sleep() -> pt.Trace:
    return pt.load(FIND / "sleep.pt.trace.json.gz")


def test_findings_frame_has_the_schema_and_is_ranked_by_saving(sleep: pt.Trace) -> None:
    f = sleep.findings()
    assert dict(f.schema) == FINDING_SCHEMA
    savings = f["est_saving_ns"].drop_nulls().to_list()
    assert savings == sorted(savings, reverse=True) and f["est_saving_ns"][0] == max(savings)
    assert set(f["rule"]) <= set(rule_names())
    assert f["share"].drop_nulls().is_between(0, 1).all()


def test_memory_leak_names_the_op_and_the_bytes_per_step_exactly(leak: pt.Trace) -> None:
    f = _rule(leak, "memory_leak")
    assert f.height == 1
    r = f.row(0, named=True)
    assert r["value"] == scenario.LEAK_BYTES and r["unit"] == "bytes_per_step"
    assert "aten::empty" in r["scope"] and "aten::empty" in r["message"] and "4.000 MiB per step" in r["message"]
    # recompute from the evidence: the [memory] allocation events of the never-freed blocks
    assert r["evidence_table"] == "instants"
    inst = leak.instants.filter(pl.col("event_id").is_in(r["evidence"]))
    assert inst.height == len(r["evidence"]) == _steps(leak).height
    assert (inst["bytes"] == scenario.LEAK_BYTES).all()
    assert inst["bytes"].sum() // _steps(leak).height == r["value"]
    addr = set(inst["addr"].to_list())  # never freed: no later [memory] event releases those addresses
    frees = leak.instants.filter((pl.col("name") == "[memory]") & (pl.col("bytes") < 0) & pl.col("addr").is_in(addr))
    assert frees.is_empty()


@pytest.fixture(scope="module")
def memory() -> pt.Trace:
    return pt.load(FIND / "memory.pt.trace.json.gz")


def _replay(tr: pt.Trace) -> list[tuple[int, int, int, int]]:
    """The [memory] events as (start_ns, event_id, addr, bytes) in recorded order: a plain reference."""
    m = tr.instants.filter(pl.col("name") == "[memory]").sort("start_ns", "event_id")
    return list(zip(*(m[c].to_list() for c in ("start_ns", "event_id", "addr", "bytes")), strict=True))


def _line_of(text: str) -> int:
    """The line of generate.py holding `text` (torch's Python frames name a function by its `def` line)."""
    src = (FIND / "generate.py").read_text().splitlines()
    return next(i for i, line in enumerate(src, 1) if text in line)


def test_memory_peak_names_the_block_that_holds_it(memory: pt.Trace) -> None:
    f = _rule(memory, "memory_peak")
    r = f.row(0, named=True)
    assert f.height == 1 and r["value"] == scenario.PEAK_BYTES and r["unit"] == "bytes"
    assert "op=aten::ones" in r["scope"] and "module=Holder_0" in r["scope"]
    assert f"generate.py({_line_of('def forward(self) -> torch.Tensor:')}): forward" in r["message"]
    # recompute from the evidence: replay every [memory] event; the peak is the running total's maximum
    events = _replay(memory)
    running, peak_at, peak = 0, 0, -1
    for i, (_, _, _, b) in enumerate(events):
        running += b
        if running > peak:
            peak, peak_at = running, i
    assert f"peak of {fmt_bytes(peak)}" in r["message"] and r["share"] == pytest.approx(r["value"] / peak, rel=1e-12)
    assert r["evidence_table"] == "instants" and len(r["evidence"]) == 1
    pos = next(i for i, e in enumerate(events) if e[1] == r["evidence"][0])
    _, _, addr, nbytes = events[pos]
    assert nbytes == scenario.PEAK_BYTES and pos <= peak_at
    # alive at the peak: no free of its address between its allocation and the peak
    assert not any(a == addr and b < 0 for _, _, a, b in events[pos + 1:peak_at + 1])
    # and it is the largest block alive there (the churn blocks are 64 KiB)
    live: dict[int, int] = {}
    for _, _, a, b in events[:peak_at + 1]:
        live[a] = live.get(a, 0) + b
    assert max(live.values()) == scenario.PEAK_BYTES and sum(live.values()) == peak


def test_memory_churn_counts_the_pairs_of_the_loop(memory: pt.Trace) -> None:
    f = _rule(memory, "memory_churn")
    r = f.row(0, named=True)
    steps = _steps(memory)
    assert f.height == 1 and r["value"] == scenario.CHURN_N and r["unit"] == "allocations_per_step"
    assert "op=aten::empty" in r["scope"] and f"generate.py({_line_of('def churn() -> None:')}): churn" \
        in r["message"]
    assert f"{scenario.CHURN_N} blocks of {fmt_bytes(scenario.CHURN_BYTES)}" in r["message"]
    assert f"{fmt_bytes(scenario.CHURN_N * scenario.CHURN_BYTES)} per step" in r["message"]
    # recompute from the evidence: each is an allocation of CHURN_BYTES freed later in the same step
    events = _replay(memory)
    pos = {e[1]: i for i, e in enumerate(events)}
    bounds = list(steps.select("start_ns", "end_ns").iter_rows())

    def step_of(ts: int) -> int:
        return next(k for k, (s0, s1) in enumerate(bounds) if s0 <= ts < s1)

    per_step = [0] * len(bounds)
    for eid in r["evidence"]:
        i = pos[eid]
        ts, _, addr, nbytes = events[i]
        assert nbytes == scenario.CHURN_BYTES
        free = next(e for e in events[i + 1:] if e[2] == addr)
        assert free[3] == -nbytes and step_of(free[0]) == step_of(ts)
        per_step[step_of(ts)] += 1
    assert per_step == [scenario.CHURN_N] * steps.height


def test_input_pipeline_names_the_sleeping_frame_and_its_share(sleep: pt.Trace) -> None:
    f = _rule(sleep, "input_pipeline")
    r = f.row(0, named=True)
    assert "<built-in function sleep>" in r["scope"] and "load_batch" in r["message"]
    steps = _steps(sleep)
    total = int(steps["dur_ns"].sum())
    known = json.loads((FIND / "sleep.known.json").read_text())
    assert len(known["slept_ns"]) == steps.height
    # the share of step time the sleeps took by the wall clock, within 1 %
    assert abs(r["share"] - sum(known["slept_ns"]) / total) < 0.01
    assert r["value"] >= scenario.SLEEP_S * 1e9
    # recompute from the evidence: the sleep frames, no op inside them, so all of each is idle
    ev = sleep.nested.filter(pl.col("event_id").is_in(r["evidence"]))
    assert ev.height == steps.height and (ev["name"] == "<built-in function sleep>").all()
    inside = sleep.nested.filter(pl.col("parent_id").is_in(r["evidence"]))
    assert inside.is_empty()
    assert int(ev["dur_ns"].sum()) // steps.height == r["value"] == r["est_saving_ns"]
    assert r["share"] == pytest.approx(int(ev["dur_ns"].sum()) / total, rel=1e-12)


def test_python_overhead_counts_the_tiny_ops() -> None:
    tr = pt.load(FIND / "tiny_ops.pt.trace.json.gz")
    r = _rule(tr, "python_overhead").row(0, named=True)
    steps = _steps(tr)
    n = steps.height
    assert r["unit"] == "ops_per_step" and r["value"] >= scenario.TINY_OPS and "aten::add" in r["message"]
    ev = tr.nested.filter(pl.col("event_id").is_in(r["evidence"]))
    assert len(r["evidence"]) // n == r["value"]
    assert (ev["name"] == "aten::add").sum() == scenario.TINY_OPS * n  # one add per loop iteration
    busy = _union(ev["start_ns"].to_numpy(), ev["end_ns"].to_numpy())
    total = int(steps["dur_ns"].sum())
    assert r["share"] == pytest.approx((total - busy) / total, rel=1e-12)
    assert r["est_saving_ns"] == (total - busy) // n


def test_thread_imbalance_names_the_straggler_thread() -> None:
    tr = pt.load(FIND / "thread_pool.pt.trace.json.gz")
    r = _rule(tr, "thread_imbalance").row(0, named=True)
    assert "straggler" in r["scope"] and "straggler" in r["message"]
    ev = tr.nested.filter(pl.col("event_id").is_in(r["evidence"]))
    tid = ev["tid"].unique().to_list()
    assert len(tid) == 1
    names = tr.threads.filter(pl.col("tid") == tid[0])["thread_name"].to_list()
    assert any("straggler" in (n or "") for n in names)
    # recompute: per step, each worker thread's busy union; the straggler's excess over the median
    steps = _steps(tr)
    work = tr.nested.filter(pl.col("cat").cast(pl.String).is_in(["cpu_op", "user_annotation"])
                            & ~pl.col("name").str.starts_with("ProfilerStep") & (pl.col("tid") != tr.events.filter(
                                pl.col("name").str.starts_with("ProfilerStep"))["tid"][0]))
    excess = 0
    for s0, s1 in steps.select("start_ns", "end_ns").iter_rows():
        busy = {}
        for (t,), g in work.group_by(["tid"]):
            st, en = g["start_ns"].to_numpy().clip(s0, s1), g["end_ns"].to_numpy().clip(s0, s1)
            busy[t] = _union(st[en > st], en[en > st])
        vals = sorted(v for v in busy.values() if v >= 0.01 * (s1 - s0))
        if max(busy, key=lambda t: (busy[t], -t)) == tid[0]:
            excess += busy[tid[0]] - vals[(len(vals) - 1) // 2]
    assert excess // steps.height == r["value"]


def test_a_user_rule_registers_like_a_builtin(sleep: pt.Trace) -> None:
    @register_rule("always_one", "a test rule")
    def _one(trace: pt.Trace) -> pl.DataFrame:
        return frame([finding("always_one", "info", value=1, unit="count", message="one", suggestion="none",
                              evidence=[0], est_saving_ns=10**15)])

    try:
        f = sleep.findings(rules=["always_one", "input_pipeline"])
        assert f["rule"][0] == "always_one"
    finally:
        unregister_rule("always_one")
    assert "always_one" not in rule_names()
    with pytest.raises(UsageError, match="unknown rule"):
        sleep.findings(rules=["no_such_rule"])


def test_compute_efficiency_lost_time_adds_up_from_the_evidence() -> None:
    tr = pt.load(BUNDLED / "h100_bert_small.pt.trace.json.gz")
    f = _rule(tr, "compute_efficiency")
    assert f.height >= 1
    ops = tr.perf.ops()
    n = _steps(tr).height
    for r in f.iter_rows(named=True):
        ev = ops.filter(pl.col("event_id").is_in(r["evidence"]))
        assert ev.height == len(r["evidence"]) and ev["family"].is_in(["gemm", "attention", "conv"]).all()
        assert int(ev["lost_ns"].sum()) // n == r["value"]


def test_cli_findings_formats_and_fail_on(tmp_path: pytest.TempPathFactory) -> None:
    from proftab.cli import main

    trace = str(FIND / "leak.pt.trace.json.gz")
    out = tmp_path / "f.json"  # type: ignore[operator]
    assert main(["findings", trace, "--format", "json", "-o", str(out), "-q"]) == 0
    rows = json.loads(out.read_text())
    assert rows[0]["rule"] == "memory_leak" and rows[0]["value"] == scenario.LEAK_BYTES and rows[0]["evidence"]
    assert main(["findings", trace, "--fail-on", "memory_leak", "-q", "-o", str(tmp_path / "a.txt")]) == 1  # type: ignore[operator]
    assert main(["findings", trace, "--fail-on", "input_pipeline", "-q", "-o", str(tmp_path / "b.txt")]) == 0  # type: ignore[operator]
    assert main(["findings", trace, "--fail-on", "nope", "-q"]) == 2
    res = subprocess.run([sys.executable, "-m", "proftab", "findings", trace, "--format", "markdown", "-q"],
                         capture_output=True, text=True, timeout=300, check=False)
    assert res.returncode == 0 and "| memory_leak |" in res.stdout and "n_evidence" in res.stdout
    res = subprocess.run([sys.executable, "-m", "proftab", "findings", trace, "-q"], capture_output=True, text=True,
                         timeout=300, check=False)
    assert "[high] memory_leak" in res.stdout and "->" in res.stdout  # plain text when piped


# ------------------------------------------------------------------ public GPU traces


@needs_shared
def test_launch_queue_in_hta_ns_resolution_trace() -> None:
    tr = pt.load(SHARED_PUBLIC / "hta" / "ns_resolution_trace__rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz")
    r = _rule(tr, "launch_bound", "launch_queue").row(0, named=True)
    steps = _steps(tr)
    calls = tr.events.filter(pl.col("name") == "cudaLaunchKernel")
    calls = calls.join_asof(steps.select(pl.col("start_ns").alias("s0"), "end_ns", "step").sort("s0"),
                            left_on="start_ns", right_on="s0").filter(pl.col("start_ns") < pl.col("end_ns_right"))
    med = calls.group_by("step").agg(pl.col("dur_ns").median().alias("med"))
    ev = calls.filter(pl.col("event_id").is_in(r["evidence"])).join(med, on="step")
    assert ev.height == len(r["evidence"]) > 100
    assert (ev["dur_ns"] > 10 * ev["med"]).all()
    blocked = calls.join(med, on="step").filter(pl.col("dur_ns") > 10 * pl.col("med"))
    assert blocked.height == ev.height  # every blocked call is evidence
    assert int(ev["dur_ns"].sum()) // steps.height == r["value"]


@needs_shared
def test_sleeping_tqdm_thread_in_h100_traces() -> None:
    for path in sorted((SHARED_PUBLIC / "tracelens").glob("h100__gaunernst*.json.gz")):
        tr = pt.load(path)
        r = _rule(tr, "trace_health", "helper_thread").row(0, named=True)
        ev = tr.nested.filter(pl.col("event_id").is_in(r["evidence"]))
        assert int(ev["self_ns"].sum()) == r["value"]
        is_step = pl.col("name").str.starts_with("ProfilerStep") & (pl.col("cat") == "user_annotation")
        step_tid = tr.events.filter(is_step)["tid"].unique().to_list()
        assert ev["tid"].unique().to_list() != step_tid and ev["tid"].n_unique() == 1
        assert "threading.py" in r["message"] and r["share"] >= 0.25


@needs_shared
def test_graph_launch_in_vllm_trace() -> None:
    tr = pt.load(SHARED_PUBLIC / "tracelens" / "inference__vllm_decode_full__graph_execution.json.gz")
    r = _rule(tr, "launch_bound", "graph_launch").row(0, named=True)
    launches = tr.events.filter(pl.col("event_id").is_in(r["evidence"]))
    assert (launches["name"] == "hipGraphLaunch").all()
    kernels = tr.device.activities().filter((pl.col("kind") == "kernel") & pl.col("launch_id").is_in(r["evidence"]))
    assert kernels.height // launches.height == r["value"] > 100
    assert _rule(tr, "launch_bound", "short_kernels").is_empty()  # graphs in use: no CUDA-graph advice


_LIBRARY = re.compile(r"^<built-in|(^|/)torch/|^nn\.Module: ")


def _issuer(tr: pt.Trace, event_id: int) -> tuple[str | None, str | None, str | None, list[str]]:
    """(outermost cpu_op, innermost nn.Module, innermost user frame, every ancestor's name) of a host
    call, by walking its parents one by one: a plain reference."""
    n = tr.nested.filter(pl.col("rank") == 0).select("event_id", "parent_id", "cat", "name")
    up = {e: (p, c, name) for e, p, c, name in n.iter_rows()}
    op = module = frame = None
    names = []
    p = up[event_id][0]
    while p is not None:
        p, cat, name = up[p]
        names.append(name)
        if cat == "cpu_op":
            op = name
        if cat == "python_function" and module is None and name.startswith("nn.Module: "):
            module = name.removeprefix("nn.Module: ")
        if cat == "python_function" and frame is None and not _LIBRARY.search(name):
            frame = name
    return op, module, frame, names


def _check_sync(tr: pt.Trace) -> dict[str, Any]:
    """The synchronisation finding's numbers recomputed from its evidence; returns the finding."""
    r = tr.findings(rules=["synchronisation"]).row(0, named=True)
    ev = tr.events.filter(pl.col("event_id").is_in(r["evidence"]))
    assert ev.height == len(r["evidence"])
    dtoh = tr.device.activities().filter(pl.col("name").str.contains("Device -> Pageable"))["launch_id"]
    blocking = ev["name"].str.contains("Synchronize$|^cudaMemcpy$") | (
        (ev["name"] == "cudaMemcpyAsync") & ev["event_id"].is_in(dtoh.implode()))
    assert blocking.all()
    steps = _steps(tr)
    n = steps.height
    assert int(ev["dur_ns"].sum()) // n == r["value"]
    assert r["share"] == pytest.approx(int(ev["dur_ns"].sum()) / int(steps["dur_ns"].sum()), rel=1e-12)
    # time on the critical path: the path's sync segments of these calls, per step; at most the host's wait
    path = tr.critical_path.path().filter(pl.col("bound_by") == "sync")
    mine = path.filter(pl.col("event_id").is_in(r["evidence"]))
    assert r["est_saving_ns"] == int(mine["dur_ns"].sum()) // n <= r["value"]
    assert set(path.filter(pl.col("name").str.contains("Synchronize$"))["event_id"]) <= set(r["evidence"])
    # the issuer: the longest single call's op, module and source line, found by walking its parents
    top = ev.sort("dur_ns", descending=True).row(0, named=True)
    op, module, frame, _ = _issuer(tr, top["event_id"])
    assert f"op={op or top['name']}" in r["scope"] and (module is None or f"module={module}" in r["scope"])
    assert frame is not None and f"at {frame}" in r["message"]
    return r


def test_synchronisation_of_torch_cuda_synchronize_in_the_h100_qwen_trace() -> None:
    """TraceLens' H100 Qwen trace: one `torch.cuda.synchronize()` (its stack says so) in the step."""
    tr = pt.load(DATA / "public" / "h100__Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz")
    r = _check_sync(tr)
    top = tr.events.filter(pl.col("event_id").is_in(r["evidence"])).sort("dur_ns", descending=True).row(0, named=True)
    assert top["name"] == "cudaDeviceSynchronize"
    _, _, frame, names = _issuer(tr, top["event_id"])
    assert names[:2] == ["<built-in function _cuda_synchronize>", "torch/cuda/__init__.py(975): synchronize"]
    assert frame == "moca/library/profiling/profile.py(34): run_torch_profiler"
    # the device is idle while the host waits: the whole wait but the launch is on the path
    assert r["est_saving_ns"] >= 0.99 * top["dur_ns"]


@needs_shared
def test_synchronisation_of_dtoh_copies_in_the_h100_owlv2_trace() -> None:
    """TraceLens' H100 OWLv2 trace: `.to()` of device tensors in `box_predictor` (cudaStreamSynchronize
    after DtoH copies to pageable memory), while the GPU is the bottleneck: little of it is on the path."""
    tr = pt.load(SHARED_PUBLIC / "tracelens" / "h100__google_owlv2-large-patch14-ensemble__1016001.json.gz")
    r = _check_sync(tr)
    assert "op=aten::to module=Owlv2ForObjectDetection_0" in r["scope"]
    assert "modeling_owlv2.py(1421): box_predictor" in r["message"]
    assert r["est_saving_ns"] < 0.01 * r["value"]


# ------------------------------------------------------------------ several ranks (gloo, recorded here)

STRAGGLER = FIND / "straggler"


@pytest.fixture(scope="module")
def ranks() -> pt.Trace:
    return pt.load(STRAGGLER)


def _gloo_calls(tr: pt.Trace) -> dict[int, list[tuple[int, int, int, int]]]:
    """Per rank, its gloo:all_reduce ranges as (absolute start, end, event_id, tid), in start order:
    the k-th of every rank is the same collective (one process group)."""
    base = dict(tr.files.select("rank", "base_time_ns").iter_rows())
    g = tr.events.filter(pl.col("name") == "gloo:all_reduce").sort("rank", "start_ns")
    out: dict[int, list[tuple[int, int, int, int]]] = {}
    for r, s, e, i, t in g.select("rank", "start_ns", "end_ns", "event_id", "tid").iter_rows():
        out.setdefault(r, []).append((s + base[r], e + base[r], i, t))
    return out


def test_communication_names_the_straggler_rank_and_its_wait(ranks: pt.Trace) -> None:
    known = json.loads((FIND / "straggler.known.json").read_text())
    f = _rule(ranks, "communication", "straggler")
    assert f.height == 1
    r = f.row(0, named=True)
    assert r["rank"] == known["straggler"] and "op=slow_preprocess" in r["scope"]
    calls = _gloo_calls(ranks)
    n = _steps(ranks).filter(pl.col("rank") == r["rank"]).height
    mine = calls[r["rank"]]
    assert sorted(r["evidence"]) == sorted(c[2] for c in mine) and len(mine) == n
    # recompute from the evidence: each of its calls starts last; the first rank waited start - earliest start
    delay = 0
    for k, (start, *_) in enumerate(mine):
        starts = [calls[q][k][0] for q in calls]
        assert start == max(starts)
        delay += start - min(starts)
    assert r["value"] == delay // n == r["est_saving_ns"]
    # the wait is the known sleep, within 10 % (a 2-core machine shared by 3 ranks and other jobs: the
    # straggler also loses the CPU between its sleep and its all_reduce)
    slept = sum(known["slept_ns"]) // len(known["slept_ns"])
    assert abs(r["value"] - slept) <= 0.10 * slept
    # what made it late: slow_preprocess, as long as the sleeps within 2 %, against ~0 on the others
    pre = ranks.events.filter((pl.col("name") == "slow_preprocess") & (pl.col("rank") == r["rank"]))
    per_step = int(pre["dur_ns"].sum()) // n
    assert f"{fmt_ns(per_step)} per step in slow_preprocess" in r["message"]
    assert abs(per_step - slept) <= 0.02 * slept


def test_communication_exposed_collectives_without_compute(ranks: pt.Trace) -> None:
    f = _rule(ranks, "communication", "exposed").sort("rank")
    assert f["rank"].to_list() == [0, 1, 2]  # a synchronous all_reduce with nothing beside it, on every rank
    calls = _gloo_calls(ranks)
    steps = _steps(ranks)
    for r in f.iter_rows(named=True):
        mine = calls[r["rank"]]
        assert sorted(r["evidence"]) == sorted(c[2] for c in mine)
        ev = ranks.events.filter((pl.col("rank") == r["rank"]) & pl.col("event_id").is_in(r["evidence"]))
        union = _union(ev["start_ns"].to_numpy(), ev["end_ns"].to_numpy())
        # compute beside them: ops of the threads that run no collective (the main thread's c10d call waits)
        ops = ranks.events.filter((pl.col("rank") == r["rank"]) & (pl.col("cat") == "cpu_op")
                                  & ~pl.col("tid").is_in([c[3] for c in mine])
                                  & ~pl.col("name").str.contains("^c10d::|wait"))
        both = pl.concat([ev.select("start_ns", "end_ns"), ops.select("start_ns", "end_ns")])
        overlap = union + _union(ops["start_ns"].to_numpy(), ops["end_ns"].to_numpy()) \
            - _union(both["start_ns"].to_numpy(), both["end_ns"].to_numpy())
        own = steps.filter(pl.col("rank") == r["rank"])
        assert r["value"] == (union - overlap) // own.height
        assert r["share"] == pytest.approx((union - overlap) / int(own["dur_ns"].sum()), rel=1e-12)
    # the fast ranks' exposed time is mostly their wait for the straggler: little to gain by overlapping
    fast = f.filter(pl.col("rank") != 2)
    assert (fast["est_saving_ns"] < fast["value"] // 2).all()


def test_several_ranks_name_the_rank_in_the_cli_text() -> None:
    res = subprocess.run([sys.executable, "-m", "proftab", "findings", str(STRAGGLER), "--rules", "communication",
                          "-q"], capture_output=True, text=True, timeout=300, check=False)
    assert res.returncode == 0 and "rank 2 · straggler op=slow_preprocess" in res.stdout
    assert all(f"rank {r} · exposed" in res.stdout for r in (0, 1, 2))


def test_shape_hints_name_only_the_misaligned_sizes() -> None:
    from proftab.findings.compute_efficiency import shape_hints

    hints = shape_hints("[[512], [141, 512], [512, 512], [], []]", "bf16")
    assert hints == ["a matrix dimension is not a multiple of 8 (141)"]
    assert shape_hints("[[64, 128], [128, 256]]", "bf16") == []  # aligned: nothing to say
    assert shape_hints("[[30, 100], [100, 20]]", "fp8_e4m3")[0].endswith("multiple of 16 (30, 100, 20)")
    assert shape_hints("not json", None) == []
