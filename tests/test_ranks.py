"""Cross-rank tables: step times, slowest ranks, collective time and skew."""

from __future__ import annotations

import re
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

import proftab as pt
from proftab import schema
from tests.builders import annotation, event, kernel, write_events

ROOT = Path(__file__).resolve().parents[1]
PAIR = sorted((ROOT / "tests" / "data" / "public").glob("trace_filter__sampled_rank-*.json.gz"))
SHARED = Path(__file__).resolve().parents[1].parent / "shared"
SHARED_PAIR = sorted((SHARED / "traces" / "public" / "hta").glob("trace_filter__sampled_rank-*.json.gz"))

US = 1000


def _rank_file(tmp: Path, rank: int, events: list[dict]) -> Path:
    return write_events(tmp / f"r{rank}.json", events, distributedInfo={"rank": rank, "world_size": 2})


@pytest.fixture
def two_ranks(tmp_path: Path) -> list[Path]:
    """Hand-made two-rank trace (integer-us epoch times) with known answers."""
    r0 = [
        annotation("ProfilerStep#1", 1000, 100, pid=9, tid=9),
        annotation("ProfilerStep#2", 1100, 150, pid=9, tid=9),
        kernel(1010, 20, None, name="gemm", stream=7, device=0),
        kernel(1040, 20, None, name="gemm", stream=7, device=0),
        kernel(1020, 30, None, name="ncclKernel_AllReduce_RING_LL_Sum_float", stream=20, device=0),
        kernel(1150, 20, None, name="ncclKernel_AllReduce_RING_LL_Sum_float", stream=20, device=0),
        event("ProfilerStep#1", 1000, 100, cat="gpu_user_annotation", pid=0, tid=7),  # device side: not a step window
    ]
    r1 = [
        annotation("ProfilerStep#1", 1005, 120, pid=9, tid=9),
        annotation("ProfilerStep#2", 1125, 115, pid=9, tid=9),
        kernel(1100, 10, None, name="Memcpy HtoD", stream=7, device=1, cat="gpu_memcpy"),
        kernel(1030, 22, None, name="ncclKernel_AllReduce_RING_LL_Sum_float", stream=20, device=1),
        kernel(1160, 15, None, name="ncclKernel_AllReduce_RING_LL_Sum_float", stream=20, device=1),
    ]
    return [_rank_file(tmp_path, 0, r0), _rank_file(tmp_path, 1, r1)]


def test_hand_made_two_ranks(two_ranks: list[Path]) -> None:
    tr = pt.load([str(p) for p in two_ranks])
    st = tr.ranks.step_times()
    assert st.select("step", "rank", "dur_ns").rows() == [(1, 0, 100 * US), (1, 1, 120 * US), (2, 0, 150 * US),
                                                          (2, 1, 115 * US)]
    assert st["start_utc"].cast(pl.Int64).to_list() == [1000 * US, 1005 * US, 1100 * US, 1125 * US]
    slow = tr.ranks.slowest_ranks()
    assert slow.rows() == [
        # step n slowest max fastest min median spread excess start_skew end_skew last_to_start
        (1, 2, 1, 120 * US, 0, 100 * US, 100 * US, 20 * US, 20 * US, 5 * US, 25 * US, 1),
        (2, 2, 0, 150 * US, 1, 115 * US, 115 * US, 35 * US, 35 * US, 25 * US, 10 * US, 1),
    ]
    ct = tr.ranks.collective_times()
    assert ct.rows() == [
        # rank step n coll_ns coll_union compute_union overlapped exposed
        (0, 1, 1, 30 * US, 30 * US, 40 * US, 20 * US, 10 * US),
        (0, 2, 1, 20 * US, 20 * US, 0, 0, 20 * US),
        (1, 1, 1, 22 * US, 22 * US, 10 * US, 0, 22 * US),
        (1, 2, 1, 15 * US, 15 * US, 0, 0, 15 * US),
    ]
    per_rank = tr.ranks.collective_times(by_step=False)
    assert per_rank.select("rank", "collective_ns", "exposed_ns").rows() == [(0, 50 * US, 30 * US),
                                                                              (1, 37 * US, 37 * US)]
    sk = tr.ranks.collective_skew()
    # no process group in the args: every collective of a rank is in group "?", in start order
    assert sk.select("group", "seq", "collective", "n_ranks", "start_skew_ns", "end_skew_ns", "last_rank",
                     "min_dur_ns", "max_dur_ns").rows() == [
        ("?", 0, "allreduce", 2, 10 * US, 2 * US, 1, 22 * US, 30 * US),
        ("?", 1, "allreduce", 2, 10 * US, 5 * US, 1, 15 * US, 20 * US)]
    # a clock offset for rank 1 moves its times: the first collective now starts together
    shifted = tr.ranks.collective_skew(offsets_ns={1: -10 * US})
    assert shifted["start_skew_ns"].to_list() == [0, 0]
    assert shifted["last_rank"].to_list() == [0, 0]  # ties go to the lowest rank
    assert tr.ranks.slowest_ranks(offsets_ns={1: -5 * US})["start_skew_ns"].to_list() == [0, 20 * US]


def _merge(intervals):
    out = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return out


def test_real_two_rank_pair_against_reference(tmp_path: Path) -> None:
    """The HTA pair converted to one dataset: tables equal the loaded ones and a reference."""
    tr = pt.load([str(p) for p in PAIR])
    sc = pt.scan(pt.convert([str(p) for p in PAIR], tmp_path / "pair", progress=False))
    assert sc.files["rank"].to_list() == [0, 1]
    for fn in ("step_times", "slowest_ranks", "collective_times", "collective_skew"):
        assert_frame_equal(getattr(sc.ranks, fn)(), getattr(tr.ranks, fn)())

    ev = tr.events
    steps = {}
    for rank, name, s, e in ev.filter(pl.col("name").str.starts_with("ProfilerStep#")
                                      & (pl.col("cat").cast(pl.String) != "gpu_user_annotation")
                                      ).select("rank", "name", "start_ns", "end_ns").rows():
        steps[(rank, int(name.split("#")[1]))] = (s, e)
    st = tr.ranks.step_times()
    assert {(r, k): (s, e) for r, k, s, e in st.select("rank", "step", "start_ns", "end_ns").rows()} == steps
    slow = tr.ranks.slowest_ranks()
    for step, slowest, max_dur in slow.select("step", "slowest_rank", "max_dur_ns").rows():
        durs = {r: e - s for (r, k), (s, e) in steps.items() if k == step}
        assert max_dur == max(durs.values()) and durs[slowest] == max_dur

    dev = ev.filter(pl.col("cat").cast(pl.String).is_in(list(schema.DEVICE_WORK_CATEGORIES))).select(
        "rank", "cat", "name", "start_ns", "end_ns").rows()
    groups: dict = {}
    for rank, cat, name, s, e in dev:
        step = next((k for (r, k), (a, b) in steps.items() if r == rank and a <= s < b), None)
        is_coll = cat == "kernel" and re.search(r"(?i)nccl|rccl", name) is not None
        g = groups.setdefault((rank, step), {"coll": [], "comp": []})
        g["coll" if is_coll else "comp"].append((s, e))
    ct = tr.ranks.collective_times()
    assert ct.height == sum(1 for g in groups.values() if g["coll"])
    for rank, step, n, coll_ns, cu, ku, ov, ex in ct.rows():
        g = groups[(rank, step)]
        uc, uk = _merge(g["coll"]), _merge(g["comp"])
        overlap = sum(max(0, min(b, d) - max(a, c)) for a, b in uc for c, d in uk)
        assert (n, coll_ns) == (len(g["coll"]), sum(e - s for s, e in g["coll"]))
        assert (cu, ku, ov, ex) == (sum(e - s for s, e in uc), sum(e - s for s, e in uk), overlap,
                                    sum(e - s for s, e in uc) - overlap)
    assert ct["collective_ns"].sum() > 0 and ct["overlapped_ns"].sum() > 0

    # no process group names in this (2022) trace: a rank's collective kernels are one sequence
    sk = tr.ranks.collective_skew()
    kern = sorted((r, s, e) for r, _, n, s, e in dev if re.search(r"(?i)nccl", n))
    by_rank = {r: [(s, e) for rr, s, e in kern if rr == r] for r in (0, 1)}
    assert sk.height == max(len(v) for v in by_rank.values())
    assert set(sk["group"]) == {"?"}
    for inst, n_ranks, start_skew, last in sk.select("seq", "n_ranks", "start_skew_ns", "last_rank").rows():
        starts = {r: sorted(v)[inst][0] for r, v in by_rank.items() if inst < len(v)}
        assert n_ranks == len(starts)
        assert start_skew == max(starts.values()) - min(starts.values())
        assert starts[last] == max(starts.values())


@pytest.mark.skipif(not SHARED_PAIR, reason="../shared (the full trace corpus) is not present")
def test_shared_hta_pair_converts_to_one_dataset(tmp_path: Path) -> None:
    glob = str(SHARED / "traces" / "public" / "hta" / "trace_filter__sampled_rank-*")
    sc = pt.scan(pt.convert(glob, tmp_path / "hta", progress=False))
    tr = pt.load(glob)
    assert sc.files["rank"].to_list() == [0, 1]
    assert_frame_equal(sc.ranks.collective_times(), tr.ranks.collective_times())
    assert_frame_equal(sc.ranks.slowest_ranks(), tr.ranks.slowest_ranks())
    assert sc.ranks.slowest_ranks()["n_ranks"].to_list() == [2, 2]


def test_single_rank_and_no_steps() -> None:
    tr = pt.load(str(ROOT / "data" / "h100_bert_small.pt.trace.json.gz"))
    st = tr.ranks.step_times()
    host_steps = tr.events.filter(pl.col("name").str.starts_with("ProfilerStep#")
                                  & (pl.col("cat").cast(pl.String) == "user_annotation"))
    assert st["rank"].unique().to_list() == [0] and st.height == host_steps.height >= 1
    assert tr.ranks.slowest_ranks()["n_ranks"].to_list() == [1] * st.height
    assert tr.ranks.slowest_ranks()["start_skew_ns"].to_list() == [0] * st.height
    assert tr.ranks.collective_times().height == 0  # no collectives in a single-GPU inference
    assert tr.ranks.collective_skew().height == 0
    flat = pt.load(str(ROOT / "tests" / "data" / "public"
                       / "large_integer_trace__rank-70.Mar_25_20_48_12.2861.pt.trace.json.gz"))
    assert flat.ranks.step_times().height == 0 and flat.ranks.slowest_ranks().height == 0


def test_collective_times_outside_steps(tmp_path: Path) -> None:
    """Kernels outside every step (step null) overlap each other like any other group."""
    r0 = [
        annotation("ProfilerStep#1", 1000, 100, pid=9, tid=9),
        kernel(900, 30, None, name="ncclKernel_AllReduce_RING_LL_Sum_float", stream=20, device=0),
        kernel(910, 30, None, name="gemm", stream=7, device=0),
        kernel(1010, 20, None, name="ncclKernel_AllReduce_RING_LL_Sum_float", stream=20, device=0),
        kernel(1020, 30, None, name="gemm", stream=7, device=0),
    ]
    tr = pt.load(str(_rank_file(tmp_path, 0, r0)))
    assert tr.ranks.collective_times().rows() == [
        # rank step n coll_ns coll_union compute_union overlapped exposed
        (0, 1, 1, 20 * US, 20 * US, 30 * US, 10 * US, 10 * US),
        (0, None, 1, 30 * US, 30 * US, 30 * US, 20 * US, 10 * US),
    ]
