"""The scanner's columns reach Polars through the Arrow PyCapsule interface (issue 17).

`_kineto.Column` exports the scanner's own buffers; string columns are string views built in C.
These tests check the values against a plain Python reading of the same JSON, the argument
checks of the exporters, and that loading and key_averages never import pyarrow.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

import proftab as pt
from proftab.io import _kineto, kineto
from tests.builders import read_trace, write_events
from tests.conftest import BUNDLED

CNN = BUNDLED / "train_cnn.pt.trace.json.gz"


def test_string_views_inline_long_null_and_unicode(tmp_path: Path) -> None:
    """Names and args of every length class (empty, <= 12 bytes inline, longer, non-ASCII) and nulls."""
    names = ["", "a", "exactly12byt", "thirteen_byte", "x" * 300, "ünïcødé→名前", "aten::mm"]
    events = [{"ph": "X", "name": n, "pid": 1, "tid": 1, "ts": i, "dur": 1,
               **({"args": {"k": n}} if i % 2 else {})} for i, n in enumerate(names)]
    tr = pt.load(write_events(tmp_path / "t.json", events))
    got = tr.events.sort("event_id")
    assert got["name"].to_list() == names
    args = [json.loads(a)["k"] if a is not None else None for a in got["args"].to_list()]
    assert args == [n if i % 2 else None for i, n in enumerate(names)]


def test_mostly_null_text_column_keeps_its_few_values(tmp_path: Path) -> None:
    """A text column with one value in thousands of rows (the sparse string-view path)."""
    events = [{"ph": "X", "name": "op", "pid": 1, "tid": 1, "ts": i, "dur": 1} for i in range(5000)]
    events[4321]["pid"] = "Spans"
    tr = pt.load(write_events(tmp_path / "t.json", events))
    text = tr.events.sort("event_id")["pid_text"]
    assert text.null_count() == 4999
    assert text[4321] == "Spans"


def test_columns_equal_the_json_on_the_bundled_trace() -> None:
    """Every X event's name, cat, ts and dur equal a plain json reading of the file."""
    raw = read_trace(CNN)["traceEvents"]
    xs = [e for e in raw if e.get("ph") == "X"]
    ev = pt.load(CNN).events.sort("event_id")
    assert ev["name"].to_list() == [e["name"] for e in xs]
    assert ev["cat"].cast(pl.String).to_list() == [e.get("cat") for e in xs]
    assert ev["start_ns"].to_list() == [round(e["ts"] * 1000) for e in xs]
    assert ev["dur_ns"].to_list() == [round(e["dur"] * 1000) for e in xs]


def test_exporters_check_their_arguments() -> None:
    res = kineto.scan_bytes(b'{"traceEvents": [{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": 2}]}')
    data, valid, nulls = res["events"]["ts"]
    assert pl.Series(_kineto.fixed_column("i64", data, valid, 1, nulls)).to_list() == [1000]
    with pytest.raises(ValueError, match="unknown column kind"):
        _kineto.fixed_column("i128", data, valid, 1, nulls)
    with pytest.raises(ValueError, match="shorter than the column"):
        _kineto.fixed_column("i64", data, valid, 2, nulls)
    with pytest.raises(TypeError, match="scanner Buffer"):
        _kineto.fixed_column("i64", b"\0" * 8, None, 1, 0)
    (codes, cvalid, cnulls), offsets, text, size = res["events"]["name"]
    with pytest.raises(ValueError, match="shorter than the column"):
        _kineto.dict_string_column(codes, cvalid, offsets, text, 5, cnulls, size)
    with pytest.raises(ValueError, match="code out of range"):
        _kineto.dict_string_column(codes, cvalid, offsets, text, 1, cnulls, 0)


def test_an_exported_column_outlives_the_scan_result() -> None:
    """The Series keeps the scanner's memory alive after every other reference is gone."""
    res = kineto.scan_bytes(b'{"traceEvents": [{"ph": "X", "name": "kept_name_longer_than_12", '
                            b'"pid": 1, "tid": 1, "ts": 1, "dur": 2}]}')
    (codes, cvalid, cnulls), offsets, text, size = res["events"]["name"]
    series = pl.Series(_kineto.dict_string_column(codes, cvalid, offsets, text, 1, cnulls, size))
    del res, codes, cvalid, offsets, text
    assert series.to_list() == ["kept_name_longer_than_12"]


def test_load_and_key_averages_do_not_import_pyarrow() -> None:
    """pyarrow costs ~0.17 s and ~27 MB at import; only Parquet writing and reading need it."""
    code = ("import sys, proftab as pt\n"
            f"tr = pt.load({str(CNN)!r}); tr.key_averages(); tr.table()\n"
            "print('pyarrow' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"PYTHONPATH": str(Path(pt.__file__).parents[1]), "PATH": "/usr/bin:/bin"})
    assert out.stdout.strip() == "False"
