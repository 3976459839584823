"""Formats the loader accepts: Kineto envelopes, bare lists, generic Chrome phases, gzip sniffing."""

from __future__ import annotations

import gzip
import json
from typing import TYPE_CHECKING

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import proftab as pt
from tests.builders import write_trace
from tests.conftest import BUNDLED, DATA, PUBLIC, TORCH213

if TYPE_CHECKING:
    from pathlib import Path


def test_envelope_keys_in_any_order(tmp_path: Path) -> None:
    ev = [{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 1.5, "dur": 1}]
    before = '{"baseTimeNanoseconds": 1000, "traceEvents": ' + json.dumps(ev) + ', "traceName": "x"}'
    after = '{"traceEvents": ' + json.dumps(ev) + ', "displayTimeUnit": "ms", "baseTimeNanoseconds": 1000}'
    for text in (before, after):
        tr = pt.load(write_trace(tmp_path / "t.json", text))
        assert tr.meta["base_time_ns"] == 1000
        assert tr.events["start_ns"].to_list() == [1500]


def test_bare_list_legacy_format(tmp_path: Path) -> None:
    obj = [{"name": "aten::add", "ph": "X", "ts": 10, "dur": 5, "tid": 0, "pid": "CPU functions", "args": {}},
           {"name": "aten::mul", "ph": "X", "ts": 12, "dur": 1, "tid": 0, "pid": "CPU functions", "args": {}}]
    tr = pt.load(write_trace(tmp_path / "t.json", obj))
    assert tr.meta["legacy_list_format"] is True
    assert tr.events["pid_text"].to_list() == ["CPU functions"] * 2
    assert tr.events["pid"].null_count() == 2
    assert tr.events["args"].to_list() == ["{}", "{}"] or tr.events["args"].null_count() == 2


def test_gzip_detected_by_magic_bytes_not_suffix(tmp_path: Path) -> None:
    obj = {"traceEvents": [{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": 1}]}
    gz_named_json = write_trace(tmp_path / "trace.json", obj, gz=True)
    plain_named_gz = write_trace(tmp_path / "trace.json.gz", obj, gz=False)
    assert len(pt.load(gz_named_json).events) == 1
    assert len(pt.load(plain_named_gz).events) == 1


def test_multi_member_gzip(tmp_path: Path) -> None:
    text = json.dumps({"traceEvents": [{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": 1}]}).encode()
    p = tmp_path / "t.json.gz"
    p.write_bytes(gzip.compress(text[:20]) + gzip.compress(text[20:]))
    assert pt.load(p).events["name"].to_list() == ["a"]


def test_generic_chrome_phases(tmp_path: Path) -> None:
    events = [
        {"ph": "M", "name": "process_name", "pid": 7, "tid": 0, "args": {"name": "trainer"}},
        {"ph": "M", "name": "thread_name", "pid": 7, "tid": 3, "args": {"name": "main"}},
        {"ph": "M", "name": "thread_sort_index", "pid": 7, "tid": 3, "args": {"sort_index": 2}},
        {"ph": "B", "name": "outer", "pid": 7, "tid": 3, "ts": 0},
        {"ph": "B", "name": "inner", "pid": 7, "tid": 3, "ts": 2, "args": {"k": 1}},
        {"ph": "E", "pid": 7, "tid": 3, "ts": 5, "args": {"result": "ok"}},
        {"ph": "E", "pid": 7, "tid": 3, "ts": 9},
        {"ph": "E", "pid": 7, "tid": 3, "ts": 11},  # nothing open: rejected
        {"ph": "b", "cat": "io", "name": "read", "id": "0x1", "pid": 7, "tid": 4, "ts": 1},
        {"ph": "e", "cat": "io", "name": "read", "id": "0x1", "pid": 7, "tid": 4, "ts": 4},
        {"ph": "X", "name": "x", "pid": 7, "tid": 3, "ts": 20},  # no dur
        {"ph": "i", "name": "mark", "pid": 7, "tid": 3, "ts": 3, "s": "t"},
        {"ph": "I", "name": "global", "pid": 7, "tid": 3, "ts": 3.25, "s": "g"},
        {"ph": "C", "name": "mem", "pid": 7, "ts": 1, "args": {"used": 10, "free": 2.5}},
        {"ph": "s", "cat": "ac2g", "name": "ac2g", "id": 9, "pid": 7, "tid": 3, "ts": 2},
        {"ph": "f", "cat": "ac2g", "name": "ac2g", "id": 9, "pid": 0, "tid": 7, "ts": 4, "bp": "e"},
        {"ph": "P", "name": "sample", "pid": 7, "tid": 3, "ts": 1},  # unsupported phase
    ]
    with pytest.warns(pt.ProftabWarning, match="2 input events rejected"):
        tr = pt.load(write_trace(tmp_path / "t.json", {"traceEvents": events}))
    ev = tr.events.sort("event_id")
    assert ev.select("name", "ph", "start_ns", "end_ns").rows() == [
        ("outer", "B", 0, 9000), ("inner", "B", 2000, 5000), ("read", "b", 1000, 4000), ("x", "X", 20000, 20000),
    ]
    inner = ev.filter(pl.col("name") == "inner").row(0, named=True)
    assert json.loads(inner["args"]) == {"k": 1}
    assert json.loads(inner["extra"]) == {"end_args": {"result": "ok"}}
    assert (ev.filter(pl.col("name") == "x")["flags"].item() & pt.Flag.DUR_MISSING) != 0
    assert tr.instants.select("name", "start_ns", "scope").rows() == [("mark", 3000, "t"), ("global", 3250, "g")]
    assert sorted(tr.counters.select("series", "value").rows()) == [("free", 2.5), ("used", 10.0)]
    assert tr.flows.select("ph", "id", "bp").rows() == [("s", 9, None), ("f", 9, "e")]
    assert tr.threads.filter(pl.col("tid") == 3).select("process_name", "thread_name", "thread_sort_index").rows() \
        == [("trainer", "main", 2)]
    assert sorted(tr.rejected["reason"].to_list()) == ["'E' event without a matching 'B'", "unsupported phase 'P'"]
    acc = tr.accounting.row(0, named=True)
    parts = acc["events_in"] + acc["instants"] + acc["flows"] + acc["counters"] + acc["metadata"] + acc["rejected"]
    assert parts == acc["trace_events"] == len(events)


def test_rejected_complete_events_next_to_typed_instant_columns(tmp_path: Path) -> None:
    """Rejected X/E rows join the other rows' table even when the two hold different typed columns."""
    events = [
        {"ph": "X", "cat": "c", "name": "no ts", "pid": 1, "tid": 1, "dur": 1},
        {"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": 1},
        {"ph": "E", "pid": 1, "tid": 1, "ts": 5},
        {"ph": "i", "name": "[memory]", "pid": 1, "tid": 1, "ts": 3, "s": "t",
         "args": {"Device Type": 0, "Bytes": 8}},
    ]
    with pytest.warns(pt.ProftabWarning, match="2 input events rejected"):
        tr = pt.load(write_trace(tmp_path / "t.json", {"traceEvents": events}))
    assert tr.rejected.select("event_id", "reason").rows() == [
        (0, "missing ts"), (2, "'E' event without a matching 'B'")]
    assert tr.events["name"].to_list() == ["a"]
    assert tr.instants.select("name", "bytes", "device_type").rows() == [("[memory]", 8, 0)]


def test_pid_tid_strings_and_typed_args(tmp_path: Path) -> None:
    events = [
        {"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "pid": "Spans", "tid": "PyTorch Profiler",
         "ts": 0, "dur": 100, "args": {"Op count": 0}},
        {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1, "dur": 2,
         "args": {"External id": 5, "correlation": 9, "stream": 7, "device": 0, "grid": [1, 2, 3],
                  "warps per SM": 1.5, "stream_extra": "x", "bytes": "12"}},
        {"ph": "X", "cat": "python_function", "name": "f.py(1): g", "pid": 1, "tid": 1, "ts": 1, "dur": 2,
         "args": {"Python id": 3, "Python parent id": None}},
    ]
    tr = pt.load(write_trace(tmp_path / "t.json", {"traceEvents": events}))
    ev = tr.events.sort("event_id")
    assert ev.select("pid", "pid_text", "tid", "tid_text").rows()[0] == (None, "Spans", None, "PyTorch Profiler")
    k = ev.row(1, named=True)
    assert (k["external_id"], k["correlation"], k["stream"], k["device"], k["grid"], k["warps_per_sm"]) == (
        5, 9, 7, 0, "[1, 2, 3]", 1.5)
    # "bytes" holds a string here: the typed column stays null and the value is kept in args
    assert k["bytes"] is None
    assert json.loads(k["args"]) == {"stream_extra": "x", "bytes": "12"}
    py = ev.row(2, named=True)
    assert py["python_id"] == 3 and py["python_parent_id"] is None
    assert json.loads(py["args"]) == {"Python parent id": None}


def test_ids_larger_than_int64_survive() -> None:
    tr = pt.load(PUBLIC / "large_integer_trace__rank-70.Mar_25_20_48_12.2861.pt.trace.json.gz")
    assert tr.events.filter(pl.col("name") == "record_param_comms")["comms_id"].to_list() == [10159970886766084423]
    assert tr.meta["rank"] == 70  # from the rank-70 file name: the file has no distributedInfo


def test_unknown_int_overflow_stays_in_args(tmp_path: Path) -> None:
    events = [{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": 1,
               "args": {"External id": 18446744073709551615, "other": -99999999999999999999}}]
    tr = pt.load(write_trace(tmp_path / "t.json", {"traceEvents": events}))
    row = tr.events.row(0, named=True)
    assert row["external_id"] is None
    assert row["args"] == '{"External id": 18446744073709551615, "other": -99999999999999999999}'


def test_multi_rank_directory_and_glob(tmp_path: Path) -> None:
    tr = pt.load(sorted(PUBLIC.glob("trace_filter__sampled_rank-*.json.gz")))
    assert tr.files["rank"].to_list() == [0, 1]
    assert tr.events.group_by("rank").len().sort("rank")["len"].to_list() == [4811, 4676]
    for f in PUBLIC.glob("trace_filter__sampled_rank-*.json.gz"):
        (tmp_path / f.name).write_bytes(f.read_bytes())
    assert pt.load(tmp_path).files["rank"].to_list() == [0, 1]
    assert pt.load(str(tmp_path / "*rank-1*")).files["rank"].to_list() == [1]


def test_duplicate_ranks_are_an_error_unless_given(tmp_path: Path) -> None:
    a = PUBLIC / "trace_compare__base__base.json.gz"
    b = PUBLIC / "trace_compare__test__test.json.gz"
    with pytest.raises(pt.TraceError, match="two files claim rank 1"):
        pt.load([a, b])
    assert pt.load([a, b], ranks=[0, 1]).files["rank"].to_list() == [0, 1]


def test_with_utc_uses_base_time() -> None:
    tr = pt.load(BUNDLED / "train_cnn.pt.trace.json.gz")
    utc = tr.with_utc()
    first = utc.row(0, named=True)
    assert utc.schema["start_utc"] == pl.Datetime("ns", "UTC")
    assert first["start_utc"].year == 2026
    raw = pl.read_parquet(TORCH213 / "train_cnn" / "raw_events.parquet")
    ops = utc.filter(pl.col("cat").cast(pl.String) != "Trace")
    assert ops["start_utc"].cast(pl.Int64).is_in(raw["start_ns"].implode()).all()


# ----------------------------------------------------------------------------- round trip

names = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=12)
event = st.fixed_dictionaries({
    "name": names,
    "start": st.integers(-(10**12), 10**16),
    "dur": st.integers(0, 10**12),
    "pid": st.one_of(st.integers(-(2**31), 2**31), st.sampled_from(["Spans", ""])),
    "tid": st.integers(0, 2**40),
    "ext": st.one_of(st.none(), st.integers(0, 2**62)),
})


def fmt_us(ns: int, style: int) -> str:
    """Write ns as µs text in one of several valid JSON spellings."""
    sign = "-" if ns < 0 else ""
    q, r = divmod(abs(ns), 1000)
    if style == 0:
        return f"{sign}{q}.{r:03d}"
    if style == 1 and r == 0:
        return f"{sign}{q}"
    if style == 2:
        return f"{sign}{abs(ns)}e-3"
    return f"{sign}{q}.{r:03d}000"


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(event, max_size=25), st.integers(0, 3), st.data())
def test_round_trip_random_events(tmp_path_factory: pytest.TempPathFactory, evs: list[dict],
                                  style: int, data: st.DataObject) -> None:
    """Random int-ns events -> JSON text -> load -> identical values."""
    parts = []
    for e in evs:
        args = {} if e["ext"] is None else {"External id": e["ext"]}
        parts.append(
            '{"ph": "X", "name": %s, "pid": %s, "tid": %d, "ts": %s, "dur": %s, "args": %s}' % (  # noqa: UP031
                json.dumps(e["name"], ensure_ascii=data.draw(st.booleans())), json.dumps(e["pid"]), e["tid"],
                fmt_us(e["start"], style), fmt_us(e["dur"], style), json.dumps(args)))
    text = '{"traceEvents": [' + ",\n".join(parts) + "]}"
    p = tmp_path_factory.mktemp("rt") / "t.json"
    p.write_text(text, encoding="utf-8")
    tr = pt.load(p)
    got = tr.events.sort("event_id").select("name", "start_ns", "dur_ns", "pid", "pid_text", "tid",
                                            "external_id").rows()
    want = [(e["name"], e["start"], e["dur"], e["pid"] if isinstance(e["pid"], int) else None,
             e["pid"] if isinstance(e["pid"], str) else None, e["tid"], e["ext"]) for e in evs]
    assert got == want
    assert (tr.events["flags"] & int(pt.Flag.TS_ROUNDED)).sum() == 0


# ----------------------------------------------------------------------------- source_sha256 (issue 25.13)

def _sha(path: Path) -> str:
    import hashlib

    with open(path, "rb") as fh:
        return hashlib.sha256(fh.read()).hexdigest()


def test_source_sha256_is_the_files_sha256_at_load(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: `files["source_sha256"]` was null after `pt.load` (the README lists it); now the loader
    hashes the file's bytes (compressed, as on disk) while reading them."""
    gz = BUNDLED / "h100_bert_small.pt.trace.json.gz"
    plain = tmp_path / "plain.json"
    plain.write_bytes(gzip.decompress(gz.read_bytes()))
    for p in (gz, plain):
        files = pt.load(p).files
        assert files["source_sha256"].to_list() == [_sha(p)]
        assert files["source_bytes"].to_list() == [p.stat().st_size]  # the bytes hashed, as in a dataset
    ranks = sorted((DATA / "gloo4").glob("rank-*.json.gz"))
    assert pt.load(ranks).files.sort("rank")["source_sha256"].to_list() == [_sha(p) for p in ranks]
    # reading that stops early (a truncated gzip stream, salvaged; a scanner that gives up on a
    # plain file) still hashes the whole file: the unread rest is read for the digest
    from proftab.io.kineto import decompress

    raw = gz.read_bytes()
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(raw[: len(raw) * 2 // 3])
    with pytest.warns(pt.ProftabWarning):
        assert pt.load(cut, salvage=True).files["source_sha256"].to_list() == [_sha(cut)]
    monkeypatch.setattr(decompress, "CHUNK", 4096)  # small reads: the reader stops well before the end
    ev = json.dumps({"ph": "X", "name": "a", "ts": 1, "dur": 2, "pid": 1, "tid": 1}).encode()
    stops = tmp_path / "stops.json"
    stops.write_bytes(b'{"traceEvents": [' + b", ".join([ev] * 100) + b"]} @" + b"x" * (1 << 20))
    fed: list[tuple[bool, int]] = []
    real = decompress.FileDigest.hexdigest
    monkeypatch.setattr(decompress.FileDigest, "hexdigest",
                        lambda self, path: fed.append((self.at_end, self.n_bytes)) or real(self, path))
    with pytest.warns(pt.ProftabWarning, match="unexpected data after the end"):
        tr = pt.load(stops, salvage=True)
    assert tr.events.height == 100 and tr.files["source_sha256"].to_list() == [_sha(stops)]
    assert fed[0][0] is False and fed[0][1] < stops.stat().st_size // 4  # the scanner stopped the reading
    # a dataset keeps the hash of the bytes its tables came from
    ds = pt.load(gz).to_parquet(tmp_path / "ds.pq")
    assert pt.scan(ds).files["source_sha256"].to_list() == [_sha(gz)]
