"""Pushed-down lazy selections over a scanned dataset (proftab.io.dataset.query) and streaming aggregates."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

import proftab as pt

ROOT = Path(__file__).resolve().parents[1]
GLOO4 = sorted((ROOT / "tests" / "data" / "gloo4").glob("rank-*.json.gz"))


@pytest.fixture(scope="module")
def scanned(tmp_path_factory) -> pt.Trace:
    out = tmp_path_factory.mktemp("q") / "ds"
    return pt.scan(pt.convert([str(p) for p in GLOO4], out, progress=False, max_workers=1))


def test_filters_reach_the_parquet_scan(scanned: pt.Trace) -> None:
    lf = scanned.select_events(ranks=[1, 3], steps=[2], cats=["cpu_op"], columns=["rank", "name", "dur_ns"])
    plan = lf.explain()
    scan = plan[plan.index("Parquet SCAN"):]
    selection = next(line for line in scan.splitlines() if "SELECTION" in line)
    # rank, step windows (as start_ns ranges) and cat are all evaluated in the scan
    assert 'col("rank").is_in' in selection and 'col("start_ns") >=' in selection and 'col("cat")' in selection
    assert "PROJECT" in scan and "COLUMNS" in scan  # only the named (and filter) columns are read
    ev = pt.load([str(p) for p in GLOO4]).events
    steps = ev.filter(pl.col("name") == "ProfilerStep#2", pl.col("cat") == "user_annotation").select(
        "rank", pl.col("start_ns").alias("s"), pl.col("end_ns").alias("e"))
    ref = (ev.join(steps, on="rank").filter(pl.col("rank").is_in([1, 3]), pl.col("cat") == "cpu_op",
                                              pl.col("start_ns") >= pl.col("s"), pl.col("start_ns") < pl.col("e"))
           .select("rank", "name", "dur_ns"))
    got = lf.collect()
    assert got.height == ref.height > 0
    assert_frame_equal(got.sort(pl.all()), ref.sort(pl.all()))


def test_window_and_streaming_aggregate(scanned: pt.Trace) -> None:
    ev = scanned.collect("events")
    lo = int(ev["start_ns"].quantile(0.25))  # type: ignore[arg-type]
    hi = int(ev["start_ns"].quantile(0.5))  # type: ignore[arg-type]
    lf = scanned.select_events(window=(lo, hi), columns=["name", "dur_ns"])
    agg = lf.group_by("name").agg(pl.len(), pl.col("dur_ns").sum()).sort("name")
    ref = (ev.filter(pl.col("start_ns") < hi, pl.col("end_ns") > lo).group_by("name")
           .agg(pl.len(), pl.col("dur_ns").sum()).sort("name"))
    assert_frame_equal(agg.collect(engine="streaming"), ref)
    assert scanned.select_events(steps=[999]).collect().height == 0
