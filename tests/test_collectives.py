"""Collectives matched across ranks by process group and sequence (proftab.ranks.collectives).

Real data: tests/data/gloo4 (4 CPU processes, torch.distributed gloo, recorded here by its
generate.py; rank 3 sleeps 30 ms in a `data_wait` range at the start of every step), the HTA
two-rank NCCL pair, and (when ../shared is present) TraceLens' B200 trace whose kernels carry
process-group args.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

import proftab as pt
from proftab.ranks.collectives import DTYPE_BYTES
from tests.builders import read_trace

ROOT = Path(__file__).resolve().parents[1]
GLOO4 = sorted((ROOT / "tests" / "data" / "gloo4").glob("rank-*.json.gz"))
SHARED_B200 = ROOT.parent / "shared" / "traces" / "public" / "tracelens" / "b200__eager_trace.json.gz"
#: the collectives one step of generate.py runs in the default group, in order: gloo runs
#: reduce_scatter_tensor as an all_reduce of the flat buffer (its trace says gloo:all_reduce); an
#: all_gather moves group_size times its input (nccl-tests' size)
STEP = ["allgather", "allreduce", "allreduce", "allreduce", "allreduce", "allreduce", "broadcast"]
STEP_BYTES = [4 * 4, 128 * 64 * 4, 128 * 4, 16 * 128 * 4, 16 * 4, 1024 * 4, 128 * 4]


@pytest.fixture(scope="module")
def gloo() -> pt.Trace:
    return pt.load([str(p) for p in GLOO4])


def _raw_gloo(path: Path) -> list[tuple[int, str]]:
    """(tid, name) of every gloo range of a file, read from its JSON."""
    d = read_trace(path)
    return [(e["tid"], e["name"]) for e in d["traceEvents"]
            if e.get("ph") == "X" and e.get("name", "").startswith("gloo:")]


def test_gloo_groups_and_sequences(gloo: pt.Trace) -> None:
    cr = gloo.ranks.collective_ranks()
    # every gloo range of every file is one row
    assert cr.height == sum(len(_raw_gloo(p)) for p in GLOO4)
    assert set(cr["source"]) == {"host"}
    members = cr.group_by("group").agg(pl.col("rank").unique().sort()).sort("group").rows()
    assert members == [("gloo#0", [0, 1, 2, 3]), ("gloo#1", [0, 1])]
    assert cr.filter(pl.col("group") == "gloo#1")["group_ranks"].unique().to_list() == ["[0, 1]"]
    inst = gloo.ranks.collective_instances()
    assert inst["consistent"].all()
    default = inst.filter(pl.col("group") == "gloo#0").sort("seq")
    steps = default["step"].unique().sort().to_list()
    assert len(steps) == 4 and default.height == 7 * len(steps)
    assert default["collective"].to_list() == STEP * len(steps)
    assert default["bytes"].to_list() == STEP_BYTES * len(steps)
    assert (default["n_ranks"] == 4).all() and (default["group_size"] == 4).all()
    pair = inst.filter(pl.col("group") == "gloo#1")
    assert pair["collective"].to_list() == ["allreduce"] * 4 and (pair["n_ranks"] == 2).all()
    # occurrence-by-name matching would pair rank 0's pair-group all_reduce with rank 2's
    # gradient all_reduce; group+sequence keeps every instance's sizes equal across ranks
    assert cr.group_by("group", "seq").agg(pl.col("in_nelems").n_unique())["in_nelems"].max() == 1


def test_gloo_instance_numbers_against_rows(gloo: pt.Trace) -> None:
    cr = gloo.ranks.collective_ranks()
    inst = gloo.ranks.collective_instances()
    by_key: dict = {}
    for g, s, r, d, a, e in cr.select("group", "seq", "rank", "dur_ns", "abs_start_ns", "abs_end_ns").rows():
        by_key.setdefault((g, s), []).append((r, d, a, e))
    for row in inst.iter_rows(named=True):
        calls = by_key[(row["group"], row["seq"])]
        durs = [d for _, d, _, _ in calls]
        starts = {r: a for r, _, a, _ in calls}
        assert row["transfer_ns"] == min(durs) and row["max_dur_ns"] == max(durs)
        assert row["wait_ns"] == sum(d - min(durs) for d in durs)
        assert row["start_skew_ns"] == max(starts.values()) - min(starts.values())
        assert row["end_skew_ns"] == max(e for *_, e in calls) - min(e for *_, e in calls)
        assert starts[row["last_rank"]] == max(starts.values())
        n = row["group_size"]
        algbw = row["bytes"] / row["transfer_ns"]
        assert row["algbw_gb_per_s"] == pytest.approx(algbw)
        factor = {"allreduce": 2 * (n - 1) / n, "allgather": (n - 1) / n, "broadcast": 1.0}[row["collective"]]
        assert row["busbw_gb_per_s"] == pytest.approx(algbw * factor)


def test_gloo_straggler_is_the_data_loading_rank(gloo: pt.Trace) -> None:
    """Rank 3 sleeps 30 ms in `data_wait` before each step's compute: it reaches every step's
    first collective last, by about that much, and the cause shows as data loading."""
    inst = gloo.ranks.collective_instances()
    firsts = inst.filter(pl.col("group") == "gloo#0").sort("seq").group_by("step", maintain_order=True).first()
    assert firsts["collective"].to_list() == ["allgather"] * 4
    assert firsts["last_rank"].to_list() == [3, 3, 3, 3]
    assert firsts["cause"].to_list() == ["data loading"] * 4
    assert (firsts["start_skew_ns"] > 20_000_000).all()
    assert (firsts["data_excess_ns"] > 25_000_000).all()
    per = gloo.ranks.rank_step_comm()
    r3 = per.filter(pl.col("rank") == 3)
    assert (r3["n_last_arrivals"] >= 1).all() and (r3["cause"] == "data loading").all()
    # rank 3 made the others wait longest in every step
    worst = per.sort("delay_ns", descending=True).group_by("step").first().sort("step")
    assert worst["rank"].to_list() == [3, 3, 3, 3]
    # gloo's collectives here are synchronous: the main thread computes nothing meanwhile
    assert (per["exposed_ns"] == per["comm_union_ns"]).all()
    assert per.group_by("step").agg(pl.col("straggler").sum())["straggler"].to_list() == [1, 1, 1, 1]


def test_hta_pair_matches_in_one_sequence() -> None:
    pair = sorted((ROOT / "tests" / "data" / "public").glob("trace_filter__sampled_rank-*.json.gz"))
    tr = pt.load([str(p) for p in pair])
    cr = tr.ranks.collective_ranks()
    assert set(cr["source"]) == {"kernel"} and set(cr["group"]) == {"?"}
    inst = tr.ranks.collective_instances()
    assert inst.height == cr.group_by("rank").len()["len"].max()
    # the kernel names say the collective when the args do not
    assert inst["collective"].null_count() == 0
    assert set(inst["collective"]) <= {"allreduce", "allgather", "reducescatter", "alltoall", "sendrecv",
                                       "broadcast", "reduce"}


@pytest.mark.skipif(not SHARED_B200.exists(), reason="../shared (the full trace corpus) is not present")
def test_kernels_with_process_group_args() -> None:
    tr = pt.load(str(SHARED_B200))
    cr = tr.ranks.collective_ranks()
    ev = tr.events.filter(pl.col("cat").cast(pl.String) == "kernel", pl.col("name").str.contains("(?i)nccl"))
    assert cr.height == ev.height and cr["group"].null_count() == 0
    assert cr.group_by("group").agg(pl.col("seq").sort())["seq"].map_elements(
        lambda s: s.to_list() == list(range(len(s))), return_dtype=pl.Boolean).all()
    inst = tr.ranks.collective_instances()
    row = inst.filter(pl.col("collective") == "allgather").row(0, named=True)
    assert row["bytes"] == row["out_nelems"] * DTYPE_BYTES[row["dtype"].lower()]
    assert row["busbw_gb_per_s"] == pytest.approx(row["algbw_gb_per_s"] * (row["group_size"] - 1) / row["group_size"])


SHARED_GLOO = (ROOT.parent / "shared" / "traces" / "public" / "hta"
               / "cpu_only__rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz")


@pytest.mark.skipif(not SHARED_GLOO.exists(), reason="../shared (the full trace corpus) is not present")
def test_hta_gloo_rank_34_of_300() -> None:
    """HTA's CPU-only gloo trace (rank 34 of a 300-rank job): its gloo ranges are its collectives."""
    tr = pt.load(str(SHARED_GLOO))
    cr = tr.ranks.collective_ranks()
    raw = _raw_gloo(SHARED_GLOO)
    assert cr.height == len(raw) == 10 and set(cr["rank"]) == {34}
    assert set(cr["collective"]) == {"allreduce"} and cr["seq"].to_list() == list(range(10))
    assert cr["in_nelems"].null_count() == 0 and cr["dtype"].null_count() == 0
