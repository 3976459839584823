"""speedscope and folded-stack exports: format validity and exact self-time weights."""

from __future__ import annotations

import collections
import json
from pathlib import Path

import polars as pl
import pytest

import proftab as pt
from proftab import schema
from tests.builders import load_events, op

ROOT = Path(__file__).resolve().parents[1]
CNN = ROOT / "data" / "train_cnn.pt.trace.json.gz"
H100 = ROOT / "data" / "h100_bert_small.pt.trace.json.gz"
PUB = ROOT / "tests" / "data" / "public"
RANKS = [PUB / "trace_filter__sampled_rank-0.json.gz", PUB / "trace_filter__sampled_rank-1.json.gz"]
SHARED = Path(__file__).resolve().parents[1].parent / "shared"

# The speedscope file format (https://www.speedscope.app/file-format-schema.json), restated as a
# JSON Schema: evented and sampled profiles, frames, units, open/close events.
_UNIT = {"enum": ["bytes", "microseconds", "milliseconds", "nanoseconds", "none", "seconds"]}
SPEEDSCOPE_SCHEMA = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "type": "object",
    "required": ["$schema", "profiles", "shared"],
    "properties": {
        "$schema": {"const": "https://www.speedscope.app/file-format-schema.json"},
        "name": {"type": "string"},
        "exporter": {"type": "string"},
        "activeProfileIndex": {"type": "number"},
        "shared": {
            "type": "object", "required": ["frames"],
            "properties": {"frames": {"type": "array", "items": {
                "type": "object", "required": ["name"],
                "properties": {"name": {"type": "string"}, "file": {"type": "string"},
                               "line": {"type": "number"}, "col": {"type": "number"}}}}},
        },
        "profiles": {"type": "array", "items": {"anyOf": [
            {"type": "object", "required": ["type", "name", "unit", "startValue", "endValue", "events"],
             "properties": {
                 "type": {"const": "evented"}, "name": {"type": "string"}, "unit": _UNIT,
                 "startValue": {"type": "number"}, "endValue": {"type": "number"},
                 "events": {"type": "array", "items": {
                     "type": "object", "required": ["type", "at", "frame"],
                     "properties": {"type": {"enum": ["O", "C"]}, "at": {"type": "number"},
                                    "frame": {"type": "number"}}}}}},
            {"type": "object", "required": ["type", "name", "unit", "startValue", "endValue", "samples", "weights"],
             "properties": {
                 "type": {"const": "sampled"}, "name": {"type": "string"}, "unit": _UNIT,
                 "samples": {"type": "array", "items": {"type": "array", "items": {"type": "number"}}},
                 "weights": {"type": "array", "items": {"type": "number"}}}},
        ]}},
    },
}


def replay(doc: dict) -> collections.Counter[str]:
    """speedscope's evented semantics: frames must nest, time accrues to the top of the stack."""
    frames = doc["shared"]["frames"]
    out: collections.Counter[str] = collections.Counter()
    for prof in doc["profiles"]:
        stack: list[int] = []
        last = None
        for ev in prof["events"]:
            at = ev["at"]
            assert last is None or at >= last, "events out of order"
            assert prof["startValue"] <= at <= prof["endValue"]
            if stack and last is not None:
                out[frames[stack[-1]]["name"]] += at - last
            last = at
            if ev["type"] == "O":
                stack.append(ev["frame"])
            else:
                assert stack and stack[-1] == ev["frame"], "close does not match the open frame"
                stack.pop()
        assert not stack, "frames left open"
    return out


def _self_by_name(tr: pt.Trace, *, device: bool = True) -> dict[str, int]:
    cat = pl.col("cat").cast(pl.String)
    ev = tr.nested.filter(~cat.is_in(list(schema.PROFILER_SPAN_CATEGORIES)).fill_null(False))
    if not device:
        ev = ev.filter(~cat.is_in(list(schema.DEVICE_CATEGORIES)).fill_null(False))
    agg = ev.group_by("name").agg(pl.col("self_ns").sum())
    return {n: s for n, s in agg.iter_rows() if s}


def _check_speedscope(tr: pt.Trace, path: Path, **kw: object) -> dict:
    jsonschema = pytest.importorskip("jsonschema")
    tr.export.speedscope(str(path), **kw)  # type: ignore[arg-type]
    doc = json.loads(path.read_text())
    jsonschema.validate(doc, SPEEDSCOPE_SCHEMA)
    assert {k: v for k, v in replay(doc).items() if v} == _self_by_name(tr, device=bool(kw.get("device", True)))
    return doc


@pytest.mark.parametrize("src", [CNN, H100, RANKS], ids=["train_cnn", "h100_overruns", "two_ranks_gpu"])
def test_speedscope_valid_and_weights_are_self_times(src: object, tmp_path: Path) -> None:
    tr = pt.load(src)  # type: ignore[arg-type]
    doc = _check_speedscope(tr, tmp_path / "out.speedscope.json")
    from proftab.tracks import track_labels

    tracks = track_labels(tr.collect("events"), tr.collect("threads")).filter(~pl.col("label").str.contains("Spans"))
    assert len(doc["profiles"]) <= tracks.height
    assert all(p["unit"] == "nanoseconds" for p in doc["profiles"])
    assert len({f["name"] for f in doc["shared"]["frames"]}) == len(doc["shared"]["frames"])


def test_speedscope_host_only_and_python_frames(tmp_path: Path) -> None:
    tr = pt.load(H100)
    doc = _check_speedscope(tr, tmp_path / "host.json", device=False)
    assert all("stream" not in p["name"] for p in doc["profiles"])
    py = [f for f in doc["shared"]["frames"] if f["name"] == "threading.py(359): wait"]
    assert py == [{"name": "threading.py(359): wait", "file": "threading.py", "line": 359}]


def test_speedscope_overruns_zero_length_and_ties(tmp_path: Path) -> None:
    ev = [op("g", 0, 100), op("p", 10, 40), op("c", 30, 40), op("d", 55, 5), op("zero", 60, 0),
          op("same", 70, 10), op("same2", 70, 10), op("e", 80, 0.5), op("f", 80.5, 1), op("neg", 90, -1),
          op("t2", 0, 3, tid=2)]
    tr = load_events(tmp_path, ev, name="t.json.gz")
    assert (tr.nested["overrun_ns"] > 0).any()
    doc = _check_speedscope(tr, tmp_path / "t.speedscope.json")
    names = {f["name"] for f in doc["shared"]["frames"]}
    assert "zero" not in names and "neg" not in names  # zero-length: no time, no frame
    got = replay(doc)
    assert got["c"] == 35_000 and got["p"] == 20_000  # c overruns p: its tail shows under g, d nests in c
    assert sum(got.values()) == 100_000 + 3_000  # the union of each thread


def test_folded_sums_to_self_time(tmp_path: Path) -> None:
    for src in (CNN, H100):
        tr = pt.load(src)
        out = tmp_path / "out.folded"
        assert tr.export.folded(str(out)) is None
        lines = out.read_text().splitlines()
        weights = [int(line.rsplit(" ", 1)[1]) for line in lines]
        assert all(w > 0 for w in weights)
        assert sum(weights) == tr.tree.call_tree()["self_ns"].sum() == sum(_self_by_name(tr, device=False).values())
        assert len({line.rsplit(" ", 1)[0] for line in lines}) == len(lines)  # one line per path
        text = tr.export.folded()
        assert text == out.read_text()
    dev = pt.load(H100).export.folded(device=True)
    assert sum(int(line.rsplit(" ", 1)[1]) for line in dev.splitlines()) == sum(_self_by_name(pt.load(H100)).values())


def test_folded_escapes_and_threads(tmp_path: Path) -> None:
    tr = load_events(tmp_path, [op("outer;x", 0, 10), op("in\nner", 2, 3), op("b", 0, 4, tid=2)], name="t.json.gz")
    text = tr.export.folded()
    assert text.splitlines() == ["outer:x 7000", "outer:x;in ner 3000", "b 4000"]
    by_thread = tr.export.folded(by_thread=True).splitlines()
    assert by_thread[0].startswith("thread 1;outer:x ") and by_thread[-1] == "thread 2;b 4000"


@pytest.mark.skipif(not (SHARED / "traces" / "public").is_dir(), reason="needs ../shared")
def test_speedscope_many_overlaps_real(tmp_path: Path) -> None:
    """A TraceLens H100 trace with python/user_annotation overlaps on the main thread."""
    path = SHARED / "traces" / "public" / "tracelens" / "h100__Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"
    if not path.exists():
        pytest.skip("trace missing")
    tr = pt.load(path)
    assert (tr.nested["overrun_ns"] > 0).sum() > 0
    _check_speedscope(tr, tmp_path / "q.json")


def test_unnamed_event_is_named_empty(tmp_path: Path) -> None:
    """An X event without a name (null `name`) is the frame "" in trees, folded stacks and speedscope."""
    ev = [{"ph": "X", "cat": "cpu_op", "ts": 0, "dur": 5, "pid": 1, "tid": 1},
          {"ph": "X", "cat": "cpu_op", "name": "a", "ts": 1, "dur": 2, "pid": 1, "tid": 1}]
    tr = load_events(tmp_path, ev, name="t.json.gz")
    assert tr.events["name"].null_count() == 1
    assert tr.tree.call_tree().select("path", "self_ns").rows() == [([""], 3000), (["", "a"], 2000)]
    assert tr.tree.bottom_up()["path"].to_list() == [[""], ["a"], ["a", ""]]
    assert tr.export.folded() == " 3000\n;a 2000\n"
    tr.export.speedscope(str(tmp_path / "t.speedscope.json"))
    assert replay(json.loads((tmp_path / "t.speedscope.json").read_text())) == {"": 3000, "a": 2000}
