"""pt.diff: per-op comparison of two traces, on the HTA pairs and synthetic cases."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

import proftab as pt
from proftab.diff import DIFF_COLUMNS
from tests.builders import event, write_events

ROOT = Path(__file__).resolve().parents[1]
PUB = ROOT / "tests" / "data" / "public"
BASE = PUB / "trace_compare__base__base.json.gz"
TEST = PUB / "trace_compare__test__test.json.gz"
RANKS = [PUB / "trace_filter__sampled_rank-0.json.gz", PUB / "trace_filter__sampled_rank-1.json.gz"]
CNN = ROOT / "data" / "train_cnn.pt.trace.json.gz"
SHARED = Path(__file__).resolve().parents[1].parent / "shared"
HTA = SHARED / "traces" / "public" / "hta"


def test_hta_trace_compare_pair_names_the_changes() -> None:
    d = pt.diff(BASE, TEST)
    assert d.columns == DIFF_COLUMNS
    status = {n: s for n, s, dev in d.select("name", "status", "device_type").iter_rows() if dev == "CPU"}
    # HTA's own test of this pair: added AddmmBackward0, All2All_Pooled_Req, CatBackward0; nccl:all_reduce
    # went (in the iteration HTA compares; over both iterations the count halves)
    assert {n for n, s in status.items() if s == "added"} == {"AddmmBackward0", "All2All_Pooled_Req", "CatBackward0"}
    nccl = d.filter(pl.col("name") == "nccl:all_reduce").row(0, named=True)
    assert (nccl["calls_a"], nccl["calls_b"], nccl["calls_delta"]) == (2, 1, -1)
    for op in ("aten::as_strided", "aten::empty", "cudaEventQuery", "cudaLaunchKernel"):
        assert status[op] == "same"
    assert d["name"][0] == "All2All_Pooled_Req"  # largest absolute self change first
    assert d["self_delta_ns"].abs().to_list() == sorted(d["self_delta_ns"].abs().to_list(), reverse=True)
    added = d.filter(pl.col("status") == "added")
    assert added["self_rel"].is_null().all() and (added["calls_a"] == 0).all()


def test_diff_values_are_key_averages_differences() -> None:
    a, b = pt.load(BASE), pt.load(TEST)
    d = pt.diff(a, b)
    ka, kb = a.key_averages(), b.key_averages()
    for name in ("ProfilerStep*", "nccl:all_reduce", "cudaDeviceSynchronize"):
        ra = ka.filter((pl.col("name") == name) & (pl.col("device_type") == "CPU")).row(0, named=True)
        rb = kb.filter((pl.col("name") == name) & (pl.col("device_type") == "CPU")).row(0, named=True)
        r = d.filter((pl.col("name") == name) & (pl.col("device_type") == "CPU")).row(0, named=True)
        assert r["self_ns_a"] == ra["self_cpu_ns"] and r["self_ns_b"] == rb["self_cpu_ns"]
        assert r["total_delta_ns"] == rb["cpu_total_ns"] - ra["cpu_total_ns"]
        if ra["self_cpu_ns"]:
            assert r["self_rel"] == pytest.approx((rb["self_cpu_ns"] - ra["self_cpu_ns"]) / ra["self_cpu_ns"])
    memset = d.filter(pl.col("name") == "Memset (Device)").row(0, named=True)  # device row: device times
    assert memset["self_ns_a"] == ka.filter(pl.col("name") == "Memset (Device)")["self_device_ns"][0] > 0


def test_diff_self_is_zero_and_antisymmetric() -> None:
    tr = pt.load(CNN)
    same = pt.diff(tr, tr)
    assert (same["status"] == "same").all() and (same["self_delta_ns"] == 0).all()
    ab, ba = pt.diff(BASE, TEST), pt.diff(TEST, BASE)
    j = ab.join(ba, on=["name", "device_type", "is_user_annotation"], suffix="_r")
    assert j.height == ab.height
    assert (j["self_delta_ns"] == -j["self_delta_ns_r"]).all()
    swap = {"added": "removed", "removed": "added", "changed": "changed", "same": "same"}
    assert all(swap[s] == r for s, r in j.select("status", "status_r").iter_rows())


def test_diff_across_formats(tmp_path: Path) -> None:
    """key_averages frames written by `proftab summary` (Parquet) diff like the traces."""
    from proftab.__main__ import main

    pa, pb = tmp_path / "a.parquet", tmp_path / "b.parquet"
    assert main(["summary", str(BASE), "-o", str(pa), "-q"]) == 0
    assert main(["summary", str(TEST), "-o", str(pb), "-q"]) == 0
    from_files = pt.diff(pl.read_parquet(pa), pl.read_parquet(pb))
    from_traces = pt.diff(BASE, TEST)
    key = ["name", "device_type", "is_user_annotation"]
    assert from_files.sort(key).equals(from_traces.sort(key))
    with pytest.raises(ValueError, match="not a key_averages frame"):
        pt.diff(pl.DataFrame({"x": [1]}), from_traces)


def test_diff_across_ranks_normalized() -> None:
    both = pt.load(RANKS)
    one = pt.load(RANKS[0])
    raw = pt.diff(one, both)
    per_rank = pt.diff(one, both, normalize="rank")
    step = raw.filter(pl.col("name") == "ProfilerStep*").row(0, named=True)
    assert step["calls_b"] == 2 * step["calls_a"]  # two ranks: twice the steps
    nstep = per_rank.filter(pl.col("name") == "ProfilerStep*").row(0, named=True)
    assert nstep["calls_b"] == nstep["calls_a"] == step["calls_a"]
    ka = both.key_averages().filter((pl.col("name") == "ProfilerStep*") & (pl.col("device_type") == "CPU"))
    assert nstep["self_ns_b"] == round(ka["self_cpu_ns"][0] / 2)
    per_step = pt.diff(one, both, normalize="step")
    assert per_step.filter(pl.col("name") == "ProfilerStep*")["calls_a"][0] == 1.0


def test_diff_errors(tmp_path: Path) -> None:
    p = write_events(tmp_path / "nosteps.json.gz", [event("a", 0, 1)])
    with pytest.raises(ValueError, match="no ProfilerStep"):
        pt.diff(p, p, normalize="step")
    with pytest.raises(ValueError, match="unknown sort"):
        pt.diff(p, p, sort="bogus")  # type: ignore[arg-type]
    with pytest.raises(pt.TraceError):
        pt.diff(p, tmp_path / "missing.json")


@pytest.mark.skipif(not HTA.is_dir(), reason="needs ../shared")
def test_hta_trace_diff_pair_top_changes() -> None:
    """HTA's TraceDiff pair: rank 3 of 8 on A100 vs rank 1 of 2 on V100, 6 steps each."""
    d = pt.diff(HTA / "trace_diff__control__control.json.gz", HTA / "trace_diff__test__test.json.gz",
                normalize="step")
    top = d.head(5)
    assert top["name"][0] == "cudaMemcpyAsync" and top["self_delta_ns"][0] > 0
    assert "Memcpy DtoD (Device -> Device)" in top["name"].to_list()
    dev = d.filter(pl.col("device_type") != "CPU")
    added = set(dev.filter(pl.col("status") == "added")["name"])
    assert any(n.startswith("volta_sgemm") for n in added)  # V100 kernels appear
    assert any(n.startswith("ampere_") for n in dev.filter(pl.col("status") == "removed")["name"])  # A100 ones go


def test_diff_json_against_parquet_dataset(tmp_path: Path) -> None:
    """The same trace as JSON and as a Parquet dataset (`to_parquet` / `pt.scan`): nothing differs."""
    if not hasattr(pt, "scan"):
        pytest.skip("Parquet datasets not available")
    tr = pt.load(BASE)
    tr.to_parquet(str(tmp_path / "ds"))
    d = pt.diff(tr, pt.scan(str(tmp_path / "ds")))
    assert d.height == tr.key_averages().height and (d["status"] == "same").all()
    changed = pt.diff(pt.scan(str(tmp_path / "ds")), TEST)
    assert changed.equals(pt.diff(BASE, TEST))
