"""Exactness of the loader against the profiler's own int64-ns events and the decimal text."""

from __future__ import annotations

import gzip
import re
from decimal import Decimal
from typing import TYPE_CHECKING

import polars as pl
import pytest

import proftab as pt
from proftab.io import _kineto
from proftab.io.kineto import scan_bytes
from proftab.io.kineto.columns import fixed_column
from tests.conftest import SHARED_PUBLIC, TORCH213, TORCH213_CASES, needs_shared, shared_torch213_cases

if TYPE_CHECKING:
    from pathlib import Path


def _json_side(tr: pt.Trace) -> pl.DataFrame:
    base = tr.meta["base_time_ns"]
    ev = tr.events.filter(pl.col("cat").cast(pl.String) != "Trace").select(
        "name", (pl.col("start_ns") + base).alias("start"), (pl.col("end_ns") + base).alias("end"),
        pl.col("finished").fill_null(True))
    ins = tr.instants.filter(pl.col("name").is_in(["[memory]", "[OutOfMemory]"])).select(
        "name", (pl.col("start_ns") + base).alias("start"), (pl.col("start_ns") + base).alias("end"),
        pl.lit(True).alias("finished"))
    return pl.concat([ev, ins])


def _check_against_raw(case_dir: Path) -> tuple[int, int]:
    tr = pt.load(case_dir / "trace.json.gz")
    raw = pl.read_parquet(case_dir / "raw_events.parquet").select("name", pl.col("start_ns").alias("start"),
                                                                   pl.col("end_ns").alias("end"))
    js = _json_side(tr)
    # every JSON event starts exactly where the profiler recorded it
    missing = js.join(raw, on=["name", "start"], how="anti")
    assert missing.is_empty(), missing.head()
    # and ends there too, except where the file itself says "finished": false
    ended = js.filter(pl.col("finished")).join(raw, on=["name", "start", "end"], how="anti")
    assert ended.is_empty(), ended.head()
    unfinished = js.filter(~pl.col("finished"))
    return len(js), len(unfinished)


@pytest.mark.parametrize("case", TORCH213_CASES)
def test_start_and_end_equal_raw_events(case: str) -> None:
    n, _ = _check_against_raw(TORCH213 / case)
    assert n > 100


@pytest.mark.slow
@needs_shared
@pytest.mark.parametrize("case_dir", shared_torch213_cases(), ids=lambda p: p.name)
def test_start_and_end_equal_raw_events_shared(case_dir: Path) -> None:
    _check_against_raw(case_dir)


def test_unfinished_event_is_the_only_end_mismatch() -> None:
    n, unfinished = _check_against_raw(TORCH213 / "multithread_default_config")
    assert unfinished == 1


def test_end_is_start_plus_dur_in_int64() -> None:
    tr = pt.load(TORCH213 / "train_cnn" / "trace.json.gz")
    ev = tr.events
    assert ev.select((pl.col("end_ns") == pl.col("start_ns") + pl.col("dur_ns")).all()).item()
    assert ev.schema["start_ns"] == pl.Int64
    assert tr.meta["time_resolution_ns"] == 1


def _ts_by_element(res: dict) -> list[int]:
    """The scanner's ts of every element that has one, in file order."""
    pairs = []
    for tab in (res["events"], res["other"]):
        n = tab["rows"]
        idx = fixed_column(tab["event_index"], n, "i64", "event_index").to_list()
        ts = fixed_column(tab["ts"], n, "i64", "ts").to_list()
        pairs.extend(zip(idx, ts, strict=True))
    return [t for _, t in sorted(pairs) if t is not None]


def _ts_texts(text: str) -> list[str]:
    return re.findall(r'"ts": ?(-?[0-9][0-9.eE+-]*)', text)


def test_every_ts_equals_its_decimal_text() -> None:
    """The scanner's ts of every element equals Decimal(text) * 1000, row by row."""
    text = gzip.decompress((TORCH213 / "compile_jit" / "trace.json.gz").read_bytes()).decode()
    res = scan_bytes(text.encode())
    ts = _ts_by_element(res)
    want = [int(Decimal(t) * 1000) for t in _ts_texts(text)]
    assert ts == want


@needs_shared
def test_float64_is_wrong_where_proftab_is_exact() -> None:
    """The issue's claim on the HTA ns-resolution trace: float64 gets ~all epoch-µs ts wrong."""
    path = next((SHARED_PUBLIC / "hta").glob("ns_resolution_trace__rank-0*.json.gz"))
    text = gzip.decompress(path.read_bytes()).decode()
    texts = _ts_texts(text)[:50_000]
    exact = [int(Decimal(t) * 1000) for t in texts]
    via_float = [round(float(t) * 1000) for t in texts]
    wrong = sum(a != b for a, b in zip(exact, via_float, strict=True))
    assert wrong > 45_000  # float64 cannot hold 16-digit µs with 3 decimals
    res = scan_bytes(text.encode())
    ours = _ts_by_element(res)
    assert ours[:50_000] == exact


@pytest.mark.parametrize(
    ("text", "ns", "rounded"),
    [
        ("1.5", 1500, False),
        ("5115252809154.884", 5115252809154884, False),
        ("1712195495522624.816", 1712195495522624816, False),
        ("12", 12000, False),
        ("-1.5", -1500, False),
        ("1e3", 1_000_000, False),
        ("1.5E-3", 2, True),  # 1.5 ns -> ties to even
        ("0.0025", 2, True),  # 2.5 ns -> ties to even
        ("0.0035", 4, True),
        ("0.00251", 3, True),
        ("0.0005", 0, True),
        ("-0.0015", -2, True),
        ("1.9999999", 2000, True),
        ("9223372036854775.807", 2**63 - 1, False),
    ],
)
def test_us_text_to_ns(text: str, ns: int, rounded: bool) -> None:
    got, _frac, was_rounded = _kineto.us_to_ns(text)
    assert got == ns
    assert was_rounded is rounded


@pytest.mark.parametrize("text", ["9223372036854775.808", "abc", "", "-", "1e"])
def test_us_text_out_of_range_or_invalid(text: str) -> None:
    assert _kineto.us_to_ns(text) is None
