"""torch's own trace validator: `Trace.torch_validator()` reports every violation torch's
`torch.profiler._trace_validator.validate_trace` reports (same events, in ns), and `proftab check`
shows them. torch's module is in torch 2.13 and 2.14 (identical); the comparisons skip without torch."""

from __future__ import annotations

import collections
import json
import re
from decimal import Decimal
from typing import TYPE_CHECKING

import polars as pl
import pytest

import proftab as pt
from proftab.torch.validator import TORCH_VALIDATOR_COLUMNS, TORCH_VALIDATOR_RULES, torch_validator
from tests.builders import event, write_events
from tests.conftest import needs_shared, shared_public_traces

if TYPE_CHECKING:
    from pathlib import Path


def known_causes() -> list[dict]:
    """One or more violations of every rule, each by construction, and sound events beside them."""
    return [
        # causality: kernel of External id 7 starts 2 µs before its launch; id 8 is fine
        event("cudaLaunchKernel", 100.0, 5.0, cat="cuda_runtime", args={"External id": 7, "correlation": 70}),
        event("k_early", 98.0, 3.0, cat="kernel", tid=7,
              args={"External id": 7, "correlation": 70, "device": 0, "stream": 7}),
        event("cudaLaunchKernel", 110.0, 5.0, cat="cuda_runtime", args={"External id": 8, "correlation": 80}),
        event("k_ok", 112.5, 30.0, cat="kernel", tid=7,
              args={"External id": 8, "correlation": 80, "device": 0, "stream": 7}),
        # populated: a Stream Wait Event without the corr id, an Event Sync with -1
        event("Stream Wait Event", 120.0, 0.01, cat="cuda_sync", tid=7, cuda_sync_kind="Stream Wait Event",
              device=0, stream=7),
        event("Event Sync", 121.0, 0.01, cat="cuda_sync", tid=7, cuda_sync_kind="Event Sync", device=0, stream=7,
              wait_on_cuda_event_record_corr_id=-1),
        # sync overlap: a Stream Sync at 130 while k_ok (112.5 .. 142.5) runs on stream 7
        event("Stream Sync", 130.0, 1.0, cat="cuda_sync", tid=7, cuda_sync_kind="Stream Sync", device=0, stream=7),
        # in the past: waits on a record that comes later (corr 90) and on one that is not there (91)
        event("cudaEventRecord", 150.0, 1.0, cat="cuda_runtime", args={"External id": 90, "correlation": 900}),
        event("Stream Wait Event", 140.0, 0.01, cat="cuda_sync", tid=7, cuda_sync_kind="Stream Wait Event",
              device=0, stream=7, wait_on_cuda_event_record_corr_id=90),
        event("Stream Wait Event", 141.0, 0.01, cat="cuda_sync", tid=7, cuda_sync_kind="Stream Wait Event",
              device=0, stream=7, wait_on_cuda_event_record_corr_id=91),
        event("cudaEventRecord", 10.0, 1.0, cat="cuda_runtime", args={"External id": 92, "correlation": 920}),
        event("Stream Wait Event", 142.0, 0.01, cat="cuda_sync", tid=7, cuda_sync_kind="Stream Wait Event",
              device=0, stream=7, wait_on_cuda_event_record_corr_id=920),
        # NCCL: one record_param_comms without Group size and dtype, one complete
        event("record_param_comms", 200.0, 2.0, args={"Collective name": "allreduce", "In msg nelems": 4,
                                                      "Out msg nelems": 4}),
        event("record_param_comms", 210.0, 2.0, args={"Collective name": "allreduce", "dtype": "Float",
                                                      "In msg nelems": 4, "Out msg nelems": 4,
                                                      "Group size": 2}),
        # backward sequence ids: 5 names two backward ops; 6 one (twice)
        event("autograd::engine::evaluate_function: MulBackward0", 300.0, 3.0, args={"Sequence number": 5}),
        event("autograd::engine::evaluate_function: AddBackward0", 310.0, 3.0, args={"Sequence number": 5}),
        event("autograd::engine::evaluate_function: TBackward0", 320.0, 3.0, args={"Sequence number": 6}),
        event("autograd::engine::evaluate_function: TBackward0", 330.0, 3.0, args={"Sequence number": 6}),
    ]


def test_every_rule_on_known_causes(tmp_path: Path) -> None:
    rows = pt.load(write_events(tmp_path / "t.json", known_causes())).torch_validator()
    assert rows.columns == list(TORCH_VALIDATOR_COLUMNS)
    assert dict(collections.Counter(rows["rule"].to_list())) == {
        "gpu_kernel_causality": 1, "stream_wait_corr_id_populated": 2, "stream_sync_overlap": 1,
        "stream_wait_corr_id_in_past": 2, "nccl_metadata": 1, "backward_seq_id_uniqueness": 1}
    cause = rows.filter(pl.col("rule") == "gpu_kernel_causality").row(0, named=True)
    assert (cause["name"], cause["other_name"], cause["gap_ns"]) == ("k_early", "cudaLaunchKernel", 2000)
    overlap = rows.filter(pl.col("rule") == "stream_sync_overlap").row(0, named=True)
    assert (overlap["other_name"], overlap["gap_ns"]) == ("k_ok", 12_500)  # k_ok ends at 142.5 µs
    past = rows.filter(pl.col("rule") == "stream_wait_corr_id_in_past").sort("start_ns")
    assert past["gap_ns"].to_list() == [10_000, None]  # the record is 10 µs later; corr 91 is nowhere
    assert rows.filter(pl.col("rule") == "nccl_metadata")["detail"].to_list() == [
        "missing metadata: Group size, dtype"]
    assert "MulBackward0 | " in rows.filter(pl.col("rule") == "backward_seq_id_uniqueness")["detail"][0]


def torch_report(path: Path) -> list[tuple[str, str]]:
    validator = pytest.importorskip("torch.profiler._trace_validator")
    _, violations = validator.validate_trace(str(path))
    return [(v.rule_name.removeprefix("_check_"), v.message) for v in violations]


_TS = re.compile(r"ts=(-?[\d.]+)us")


def covered(message: tuple[str, str], rows: pl.DataFrame) -> bool:
    """A proftab row of the same rule names the event of torch's message (its id or its time)."""
    rule, text = message
    mine = rows.filter(pl.col("rule") == rule)
    if rule == "gpu_kernel_causality":
        ext = re.search(r"External id=(\d+)", text)
        return ext is not None and mine["detail"].str.contains(rf"\(External id {ext.group(1)}\)").any()
    if rule == "backward_seq_id_uniqueness":
        seq = re.search(r"Sequence number (-?\d+) ", text)
        return seq is not None and mine["detail"].str.starts_with(f"Sequence number {seq.group(1)} ").any()
    ts = _TS.search(text) or re.search(r"at ts=(-?[\d.]+)", text)
    assert ts is not None, text
    # torch prints its float µs with one decimal; the float itself is off by up to an ulp
    ts_us = float(ts.group(1))
    ts_ns = round(Decimal(ts.group(1)) * 1000)
    near = mine.filter((pl.col("start_ns") - ts_ns).abs() <= 51 + abs(ts_us) * 4.4e-13)
    if rule == "stream_sync_overlap":
        kernel = re.search(r"kernel '(.*)' \(ends", text)
        return kernel is not None and (near["other_name"] == kernel.group(1)).any()
    return not near.is_empty()


def assert_superset(path: Path) -> tuple[int, int]:
    theirs = torch_report(path)
    rows = pt.load(path).torch_validator()
    by_rule = collections.Counter(r for r, _ in theirs)
    mine = collections.Counter(rows["rule"].to_list())
    assert all(mine[r] >= n for r, n in by_rule.items()), (path, by_rule, mine)
    missing = [m for m in theirs if not covered(m, rows)]
    assert not missing, (path, missing[:5])
    return len(theirs), rows.height


def test_torch_reports_the_same_on_known_causes(tmp_path: Path) -> None:
    path = write_events(tmp_path / "t.json", known_causes())
    theirs, mine = assert_superset(path)
    assert theirs == mine == 8


def test_proftab_is_stricter_where_torch_skips(tmp_path: Path) -> None:
    """torch's `args.get("Sequence number") or ...` skips sequence number 0; proftab checks it."""
    events = [event("autograd::engine::evaluate_function: MulBackward0", 1.0, 1.0, args={"Sequence number": 0}),
              event("autograd::engine::evaluate_function: AddBackward0", 3.0, 1.0, args={"Sequence number": 0})]
    path = write_events(tmp_path / "t.json", events)
    assert torch_report(path) == []
    assert pt.load(path).torch_validator()["rule"].to_list() == ["backward_seq_id_uniqueness"]


def test_empty_and_missing_columns() -> None:
    out = torch_validator(pl.DataFrame({"rank": [0], "event_id": [1], "cat": ["cpu_op"], "name": ["aten::mm"],
                                        "start_ns": [0], "end_ns": [5]}))
    assert out.is_empty() and out.columns == list(TORCH_VALIDATOR_COLUMNS)
    assert set(TORCH_VALIDATOR_RULES) >= set(out["rule"].to_list())


def test_check_reports_them(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from proftab.__main__ import main

    path = write_events(tmp_path / "t.json", known_causes())
    assert main(["check", str(path), "--format", "json", "--quiet"]) == 0
    rep = json.loads(capsys.readouterr().out)
    found = rep["findings"]["torch_validator"]
    assert found["count"] == 8 and found["by_rule"]["stream_wait_corr_id_populated"] == 2
    assert main(["check", str(path), "--strict", "--fail-on", "torch_validator", "--quiet"]) == 1


@pytest.mark.slow
@needs_shared
def test_public_corpus_superset() -> None:
    """Over ../shared/traces/public: every violation torch's validator reports is one of proftab's."""
    total = 0
    for path in shared_public_traces():
        theirs, _ = assert_superset(path)
        total += theirs
    assert total > 0  # the corpus has violations (NCCL metadata, stream waits)
