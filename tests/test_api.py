"""The Trace holder and namespace registration (proftab.api), as a user sees them."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

import proftab as pt
from proftab import api

DATA = Path(__file__).resolve().parents[1] / "data"
H100 = DATA / "h100_bert_small.pt.trace.json.gz"


def test_a_user_registers_a_namespace_and_a_method(tmp_path: Path) -> None:
    calls: list[str] = []

    @pt.register_trace_namespace("kernels_ns")
    class Kernels:
        def __init__(self, trace: pt.Trace) -> None:
            calls.append("init")
            self._trace = trace

        def longest(self, n: int = 3) -> pl.DataFrame:
            ev = self._trace.collect("events", ["cat", "name", "dur_ns"])
            return ev.filter(pl.col("cat") == "kernel").sort("dur_ns", descending=True).head(n)

    @pt.register_trace_method("kernel_count")
    def kernel_count(trace: pt.Trace) -> int:
        return trace.collect("events", ["cat"]).filter(pl.col("cat") == "kernel").height

    try:
        tr = pt.load(H100)
        top = tr.kernels_ns.longest(2)
        assert top.height == 2 and top["dur_ns"][0] >= top["dur_ns"][1]
        assert tr.kernels_ns is tr.kernels_ns and calls == ["init"]  # built once per trace
        assert tr.kernel_count() == tr.events.filter(pl.col("cat") == "kernel").height > 0
        assert "kernels_ns" in dir(tr) and "kernel_count" in dir(tr)
        # the same namespace works on a scanned (lazy) dataset
        sc = pt.scan(tr.to_parquet(tmp_path / "ds"))
        assert sc.is_lazy
        assert_frame_equal(sc.kernels_ns.longest(2), top, categorical_as_str=True)
    finally:
        api._REGISTRY.pop("kernels_ns", None)
        api._REGISTRY.pop("kernel_count", None)


def test_reserved_and_unknown_names() -> None:
    with pytest.raises(AttributeError, match="cannot register 'events'"):
        pt.register_trace_namespace("events")(type("X", (), {}))
    tr = pt.load(H100)
    with pytest.raises(AttributeError, match="no attribute 'not_a_namespace'"):
        _ = tr.not_a_namespace


def test_trace_is_an_immutable_holder_of_frames() -> None:
    tr = pt.load(H100)
    with pytest.raises(AttributeError):
        tr.events = tr.events.head(0)  # type: ignore[misc]
    tables = tr.tables
    tables["events"] = tables["events"].head(0)  # a copy of the mapping: the trace is unchanged
    assert tr.events.height == 2060
    assert tr.files.columns == list(pt.schema.FILES_COLUMNS)
    assert tr.files["rank"].to_list() == [0] and tr.files["time_resolution_ns"].to_list() == [1]
    assert tr.meta["source_file"].endswith("h100_bert_small.pt.trace.json.gz")
    # a Trace built from a user's own frames runs the same analyses
    own = pt.Trace(tr.tables, tr.files)
    assert_frame_equal(own.key_averages(), tr.key_averages())
    with pytest.raises(ValueError, match="missing"):
        pt.Trace({"events": tr.events}, tr.files)


def test_collect_reads_only_the_columns_asked_for(tmp_path: Path) -> None:
    sc = pt.scan(pt.load(H100).to_parquet(tmp_path / "ds"))
    plan = sc.lazy("events").select("name", "dur_ns").explain()
    stored = len(sc.lazy("nested").collect_schema())  # events + nesting columns in the part files
    assert f"PROJECT 2/{stored} COLUMNS" in plan  # the scan reads 2 of the stored columns
    two = sc.collect("events", ["name", "dur_ns"])
    assert two.columns == ["name", "dur_ns"] and two.height == 2060


def test_read_parquet_is_the_eager_twin_of_scan(tmp_path: Path) -> None:
    tr = pt.load(H100)
    out = tr.to_parquet(tmp_path / "ds")
    eager, lazy = pt.read_parquet(out), pt.scan(out)
    assert not eager.is_lazy and lazy.is_lazy
    assert isinstance(eager.events, pl.DataFrame) and isinstance(lazy.events, pl.LazyFrame)
    assert_frame_equal(eager.events, tr.events, categorical_as_str=True)
    assert_frame_equal(eager.device.self_time(), lazy.device.self_time())
