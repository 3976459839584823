"""Damaged input: clear errors naming file, offset and excerpt; salvage keeps every complete event."""

from __future__ import annotations

import gzip
import re
from typing import TYPE_CHECKING

import polars as pl
import pytest

import proftab as pt
from tests.builders import load_events
from tests.conftest import SHARED_PUBLIC, TORCH213, needs_shared

if TYPE_CHECKING:
    from pathlib import Path

TRAIN = TORCH213 / "train_cnn" / "trace.json.gz"


@pytest.fixture(scope="module")
def full_text() -> bytes:
    return gzip.decompress(TRAIN.read_bytes())


@pytest.fixture(scope="module")
def full() -> pt.Trace:
    return pt.load(TRAIN)


@pytest.mark.parametrize("fraction", [0.001, 0.1, 0.37, 0.5, 0.9, 0.999])
def test_truncated_file_error_and_salvage(tmp_path: Path, full_text: bytes, full: pt.Trace, fraction: float) -> None:
    cut = int(len(full_text) * fraction)
    p = tmp_path / "trunc.json.gz"
    p.write_bytes(gzip.compress(full_text[:cut]))
    with pytest.raises(pt.TraceError) as info:
        pt.load(p)
    err = info.value
    assert str(p) in str(err)
    assert "truncated" in str(err)
    assert err.offset is not None and err.offset <= cut
    n_complete = err.recoverable_events
    if n_complete:
        assert "salvage=True" in str(err)
    with pytest.warns(pt.ProftabWarning) as caught:
        tr = pt.load(p, salvage=True)
    assert any(re.search(r"kept \d+ complete events", str(w.message)) for w in caught)
    assert tr.accounting["trace_events"].item() == n_complete
    # the salvaged events are exactly the full trace's events among the complete elements
    want = full.events.filter(pl.col("event_id") < n_complete)
    assert tr.events.equals(want)


def test_truncated_gzip_stream(tmp_path: Path, full_text: bytes) -> None:
    data = gzip.compress(full_text)
    p = tmp_path / "cut.json.gz"
    p.write_bytes(data[: len(data) // 2])
    with pytest.raises(pt.TraceError, match="truncated"):
        pt.load(p)
    with pytest.warns(pt.ProftabWarning):
        assert len(pt.load(p, salvage=True).events) > 0


def test_invalid_utf8_and_unescaped_quote_are_repaired(tmp_path: Path) -> None:
    text = (b'{"traceEvents": [\n'
            b'{"ph": "X", "name": "bad \xff\xfe name", "pid": 1, "tid": 1, "ts": 1, "dur": 5},\n'
            b'{"ph": "X", "cat": "python_function", "name": "torch/_dynamo/x.py(3): f "quoted" thing", '
            b'"pid": 1, "tid": 1, "ts": 2, "dur": 1, "args": {"Call stack": "a\xc3(b"}},\n'
            b'{"ph": "X", "name": "ok \xc3\xa9", "pid": 1, "tid": 1, "ts": 3, "dur": 1}\n]}')
    p = tmp_path / "t.json"
    p.write_bytes(text)
    with pytest.warns(pt.ProftabWarning, match="repaired 2 event names/args"):
        tr = pt.load(p)
    ev = tr.events.sort("event_id")
    assert ev["name"].to_list() == ["bad \ufffd\ufffd name", 'torch/_dynamo/x.py(3): f "quoted" thing', "ok é"]
    flags = ev["flags"].to_list()
    assert flags[0] & pt.Flag.NAME_REPAIRED and flags[1] & pt.Flag.NAME_REPAIRED and not flags[2]
    assert flags[1] & pt.Flag.ARGS_REPAIRED
    assert ev["call_stack"][1] == "a\ufffd(b"
    assert set(tr.anomalies["kind"]) == {"name_repaired"}


def test_malformed_event_error_names_offset_and_excerpt(tmp_path: Path) -> None:
    good = '{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": 1}'
    text = '{"traceEvents": [' + good + ', {"ph": "X", "name": "b", "pid": 1 "tid": 2}, ' + good + "]}"
    p = tmp_path / "t.json"
    p.write_text(text)
    with pytest.raises(pt.TraceError) as info:
        pt.load(p)
    assert info.value.offset == text.index('"tid": 2')
    assert '"pid": 1 "tid"' in str(info.value)
    with pytest.warns(pt.ProftabWarning) as caught:
        tr = pt.load(p, salvage=True)
    assert any("skipped 1 damaged region" in str(w.message) for w in caught)
    assert tr.events["name"].to_list() == ["a", "a"]
    assert tr.rejected["reason"].str.starts_with("malformed JSON at byte").all()


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "empty input"),
        (b"   \n", "empty input"),
        (b'{"nodes": [], "schema": 1}', "no 'traceEvents' array"),
        (b"hello", "not a JSON trace"),
        (b'{"traceEvents": []} trailing', "unexpected data after the end"),
    ],
)
def test_not_a_trace(tmp_path: Path, content: bytes, message: str) -> None:
    p = tmp_path / "x.json"
    p.write_bytes(content)
    with pytest.raises(pt.TraceError, match=message):
        pt.load(p)


def test_empty_trace_loads(tmp_path: Path) -> None:
    tr = load_events(tmp_path, [], name="empty.json")
    assert tr.events.is_empty() and tr.accounting["trace_events"].item() == 0
    assert tr.key_averages().is_empty()
    assert tr.table() == ""


def test_missing_file_and_corrupt_gzip(tmp_path: Path) -> None:
    with pytest.raises(pt.TraceError, match="no such file"):
        pt.load(tmp_path / "nope.json")
    p = tmp_path / "bad.json.gz"
    p.write_bytes(b"\x1f\x8b" + b"\x00" * 40)
    with pytest.raises(pt.TraceError, match="corrupt gzip"):
        pt.load(p)


@pytest.mark.slow
@needs_shared
def test_every_shared_trace_loads_and_accounts_for_every_event() -> None:
    paths = sorted(SHARED_PUBLIC.glob("*/*.json.gz"))
    assert len(paths) >= 46  # the corpus grows (47 with the CUPTI-counter trace of issue 41)
    for path in paths:
        tr = pt.load(path)
        acc = tr.accounting.row(0, named=True)
        parts = sum(acc[k] for k in ("events_in", "instants", "flows", "counters", "metadata", "rejected"))
        assert parts == acc["trace_events"], path
        assert tr.events.select((pl.col("end_ns") == pl.col("start_ns") + pl.col("dur_ns")).all()).item()
