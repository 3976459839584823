"""Hostile and damaged trace files (issue 12): one regression test per defect class.

No panic or raw library error reaches the user, nothing is lost silently, no time wraps.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import warnings
import zlib
from pathlib import Path

import polars as pl
import pytest

import proftab as pt
from proftab.io import _kineto
from proftab.io.kineto import decompress, scan
from proftab.schema import Flag
from tests.conftest import BUNDLED

CNN = BUNDLED / "train_cnn.pt.trace.json.gz"


def ev(**kw: object) -> dict[str, object]:
    return {"ph": "X", "name": "op", "pid": 1, "tid": 1, "ts": 1, "dur": 1, **kw}


def write(tmp_path: Path, events: list[bytes] | bytes, name: str = "t.json", head: bytes = b"") -> Path:
    body = events if isinstance(events, bytes) else b",\n".join(events)
    p = tmp_path / name
    p.write_bytes(b'{' + head + b'"traceEvents": [' + body + b"]}")
    return p


def j(obj: object) -> bytes:
    return json.dumps(obj).encode()


def accounted(tr: pt.Trace) -> None:
    acc = tr.accounting.row(0, named=True)
    assert sum(acc[k] for k in ("events_in", "instants", "flows", "counters", "metadata", "rejected")) == \
        acc["trace_events"]


def load_quiet(path: Path, **kw: object) -> pt.Trace:
    with pytest.warns(pt.ProftabWarning):
        return pt.load(path, **kw)  # type: ignore[arg-type]


# 1 ----------------------------------------------------------------------------- invalid UTF-8


@pytest.mark.parametrize("token", [b"1\x94", b"7\xff", b"2\xc3", b'"\xed\xa0\x80"', b"-\xf4\x90\x80\x80"])
@pytest.mark.parametrize("key", [b"pid", b"tid", b"id"])
def test_invalid_utf8_in_raw_tokens_is_repaired_and_flagged(tmp_path: Path, key: bytes, token: bytes) -> None:
    bad = b'{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": 1}'.replace(b'"' + key + b'": 1', b'"' +
                                                                                   key + b'": ' + token)
    if key == b"id":
        bad = bad[:-1] + b', "id": ' + token + b"}"
    end = b'{"ph": "E", "pid": ' + token + b', "tid": ' + token + b', "ts": 5}'
    p = write(tmp_path, [bad, end, j(ev(ts=2))])
    tr = load_quiet(p)
    for table in (tr.events, tr.rejected, tr.instants):
        for c, dt in table.schema.items():
            if dt == pl.String:
                for v in table[c].to_list():
                    assert v is None or "\ufffd" in v or v.isprintable()
    if key != b"id":  # an X event's id is not kept
        text = tr.events.sort("event_id")[f"{key.decode()}_text"][0]
        assert "\ufffd" in text
        assert tr.events.sort("event_id")["flags"][0] & pt.Flag.NAME_REPAIRED
    accounted(tr)
    tr.nested  # noqa: B018 - pairing over the repaired text must not panic


def test_cli_never_prints_a_panic(tmp_path: Path) -> None:
    p = write(tmp_path, [b'{"ph": "X", "name": "a", "pid": 1\x94, "tid": 1, "ts": 1, "dur": 1}',
                         b'{"ph": "E", "pid": 1\x94, "tid": 1, "ts": 3}'])
    r = subprocess.run([sys.executable, "-m", "proftab", "summary", str(p)], capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": str(Path(pt.__file__).parents[1])}, check=False)
    assert "Traceback" not in r.stderr and "PanicException" not in r.stderr and "panicked" not in r.stderr
    assert r.returncode == 0


# 2 ----------------------------------------------------------------------------- counter args


@pytest.mark.parametrize("args", [
    [b'{"v": NaN}', b'{"v": 2}'], [b'{"v": 1}', b'{"v": [1]}'], [b'{"v": 1, "v": 2}'], [b'{"v": 1e999}'],
    [b"3"], [b'{"v": Infinity, "w": "x"}'], [b'{"v": true}', b'{"v": 18446744073709551616}'],
])
def test_hostile_counter_args_never_make_the_file_unloadable(tmp_path: Path, args: list[bytes]) -> None:
    events = [b'{"ph": "C", "name": "c", "pid": 1, "tid": 1, "ts": %d, "args": %s}' % (i + 1, a)
              for i, a in enumerate(args)]
    p = write(tmp_path, [*events, j(ev())])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", pt.ProftabWarning)
        tr = pt.load(p)
    accounted(tr)
    assert tr.counters.schema["value"] == pl.Float64
    assert len(tr.events) == 1
    want = []
    for a in args:
        try:
            obj = json.loads(a)
        except ValueError:
            continue
        if isinstance(obj, dict):
            want += [float(v) for v in obj.values()
                     if isinstance(v, int | float) and not isinstance(v, bool) and abs(v) < 1e300 or
                     isinstance(v, float)]
    got = tr.counters["value"].to_list()
    assert len(got) == len(want) or any("not numbers" in str(w.message) for w in caught)


def test_counter_nan_values_kept_and_mixed_types_flagged(tmp_path: Path) -> None:
    p = write(tmp_path, [b'{"ph": "C", "name": "c", "pid": 1, "tid": 1, "ts": 1, "args": {"v": NaN}}',
                         b'{"ph": "C", "name": "c", "pid": 1, "tid": 1, "ts": 2, "args": {"v": [1]}}',
                         b'{"ph": "C", "name": "c", "pid": 1, "tid": 1, "ts": 3, "args": {"v": 4}}'])
    with pytest.warns(pt.ProftabWarning, match="1 counter values are not numbers"):
        tr = pt.load(p)
    assert tr.counters["start_ns"].to_list() == [1000, 3000]
    v = tr.counters["value"].to_list()
    assert v[0] != v[0] and v[1] == 4.0  # NaN kept as the float it is


# 3 ----------------------------------------------------------------------------- escapes


def test_escaped_ph_is_classified_on_its_decoded_value(tmp_path: Path) -> None:
    p = write(tmp_path, [b'{"ph": "\\u0058", "name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": 1}',
                         b'{"ph": "\\u0069", "name": "i", "pid": 1, "tid": 1, "ts": 1, "s": "t"}',
                         b'{"ph": "B", "name": "b", "pid": 1, "tid": 1, "ts": 2}',
                         b'{"ph": "\\u0045", "pid": 1, "tid": 1, "ts": 4}'])
    tr = pt.load(p)
    accounted(tr)
    assert sorted(tr.events["name"].to_list()) == ["a", "b"]
    assert tr.events.filter(pl.col("name") == "b")["dur_ns"].item() == 2000
    assert tr.instants["name"].to_list() == ["i"]
    assert tr.rejected.is_empty()


def test_escaped_keys_are_recognised(tmp_path: Path) -> None:
    p = write(tmp_path, [(b'{"p\\u0068": "X", "n\\u0061me": "a", "pid": 1, "t\\u0069d": 2, "\\u0074s": 1.5, '
                         b'"dur": 1, "args": {"External\\u0020id": 7, "other": 1}}')])
    tr = pt.load(p)
    row = tr.events.row(0, named=True)
    assert (row["name"], row["tid"], row["start_ns"], row["external_id"]) == ("a", 2, 1500, 7)
    assert json.loads(row["args"]) == {"other": 1}


# 4 ----------------------------------------------------------------------------- salvage gaps


@pytest.fixture(scope="module")
def cnn_text() -> bytes:
    return gzip.decompress(CNN.read_bytes())


@pytest.fixture(scope="module")
def cnn() -> pt.Trace:
    return pt.load(CNN)


@pytest.mark.parametrize("damage", ["delete_comma", "stray_brace", "stray_bytes"])
def test_salvage_resynchronises_on_the_next_event(tmp_path: Path, cnn_text: bytes, cnn: pt.Trace,
                                                  damage: str) -> None:
    k = cnn_text.index(b"},", len(cnn_text) // 3) + 1  # the comma after some event
    if damage == "delete_comma":
        text = cnn_text[:k] + cnn_text[k + 1:]
    elif damage == "stray_brace":
        text = cnn_text[:k] + b"}" + cnn_text[k:]
    else:
        text = cnn_text[:k] + b" @@ " + cnn_text[k:]
    p = tmp_path / "t.json"
    p.write_bytes(text)
    with pytest.raises(pt.TraceError, match="expected ',' or ']' after an event"):
        pt.load(p)
    tr = load_quiet(p, salvage=True)
    accounted(tr)
    assert len(tr.events) == len(cnn.events)  # nothing lost: the damage sits between two events


def test_salvage_note_states_true_byte_counts(tmp_path: Path, cnn_text: bytes) -> None:
    p = tmp_path / "t.json"
    p.write_bytes(cnn_text[: len(cnn_text) // 2])
    with pytest.warns(pt.ProftabWarning, match=r"dropped the last (\d+) of (\d+) bytes") as caught:
        pt.load(p, salvage=True)
    msg = next(str(w.message) for w in caught if "dropped" in str(w.message))
    assert "-" not in msg.split("dropped")[1]


def test_damaged_gzip_salvages_the_decompressed_prefix(tmp_path: Path, cnn_text: bytes, cnn: pt.Trace) -> None:
    comp = bytearray(gzip.compress(cnn_text))
    comp[-8] ^= 0xFF  # bad CRC: every byte decompressed
    p = tmp_path / "crc.json.gz"
    p.write_bytes(bytes(comp))
    with pytest.raises(pt.TraceError, match="corrupt gzip data") as info:
        pt.load(p)
    assert info.value.offset is not None and info.value.offset > len(comp) // 2
    with pytest.warns(pt.ProftabWarning, match="corrupt gzip data"):
        tr = pt.load(p, salvage=True)
    assert tr.events.equals(cnn.events)
    comp = bytearray(gzip.compress(cnn_text))
    comp[len(comp) * 9 // 10] ^= 0xFF  # a damaged block near the end
    p.write_bytes(bytes(comp))
    with pytest.raises(pt.TraceError) as info:  # zlib may notice late: the JSON scanner can see garbage first
        pt.load(p)
    assert info.value.offset > 0
    tr = load_quiet(p, salvage=True)
    accounted(tr)
    assert len(tr.events) > len(cnn.events) * 0.7
    # deflate damage can yield garbage before zlib notices: compare up to the first damaged element
    upto = min([tr.accounting["trace_events"].item(), *tr.rejected["event_id"]])
    x = pl.col("ph").cast(pl.String) == "X"
    assert tr.events.filter(x & (pl.col("event_id") < upto)).equals(
        cnn.events.filter(x & (pl.col("event_id") < upto)))


# 5 ----------------------------------------------------------------------------- int64 overflow


def test_ts_plus_dur_overflow_is_rejected_not_wrapped(tmp_path: Path) -> None:
    p = write(tmp_path, [b'{"ph": "X", "name": "w", "pid": 1, "tid": 1, "ts": 9223372036854775, "dur": 1000}',
                         b'{"ph": "X", "name": "w2", "pid": 1, "tid": 1, "ts": -9223372036854775.808, "dur": -1}',
                         j(ev())])
    with pytest.warns(pt.ProftabWarning, match="2 input events rejected"):
        tr = pt.load(p)
    assert tr.events["name"].to_list() == ["op"]
    assert set(tr.rejected["reason"]) == {"ts + dur out of the int64 ns range"}
    accounted(tr)


def test_ts_at_int64_min_is_accepted() -> None:
    assert _kineto.us_to_ns("-9223372036854775.808") == (-(2**63), 3, False)
    assert _kineto.us_to_ns("-9223372036854775.809") is None
    assert _kineto.us_to_ns("9223372036854775.807") == (2**63 - 1, 3, False)
    assert _kineto.us_to_ns("9223372036854775.808") is None


def test_begin_end_span_overflow_is_rejected_with_a_reason(tmp_path: Path) -> None:
    p = write(tmp_path, [b'{"ph": "B", "name": "b", "pid": 1, "tid": 1, "ts": -9223372036854775}',
                         b'{"ph": "E", "pid": 1, "tid": 1, "ts": 9223372036854775}', j(ev(ts=5))])
    with pytest.warns(pt.ProftabWarning, match="2 input events rejected"):
        tr = pt.load(p)
    assert tr.events["name"].to_list() == ["op"]
    assert tr.rejected["reason"].to_list() == ["'B'/'E' duration out of the int64 ns range"] * 2
    accounted(tr)
    assert len(tr.nested) == 1 and not tr.key_averages().is_empty()
    tr.anomalies  # noqa: B018
    repr(tr)


# 8 ----------------------------------------------------------------------------- terminal escapes


def test_control_characters_never_reach_the_terminal(tmp_path: Path) -> None:
    names = ["\x1b]0;pwned\x07", "\x1b[2J", "a\rb", "a\nb", "\u009b1m", "\u202eevil"]
    p = write(tmp_path, [j(ev(name=n, ts=i)) for i, n in enumerate(names)])
    tr = pt.load(p)
    assert tr.events["name"].to_list() == names  # the tables keep the exact text
    table = tr.table()
    lines = table.split("\n")
    assert not any(ch in line for line in lines for ch in "\x1b\x07\r\u009b\u202e")
    assert "\\x1b]0;pwned\\x07" in table and "a\\x0ab" in table and "\\u202eevil" in table
    # one row per name: the newline did not split a row
    assert sum("\\x" in line or "\\u" in line for line in lines) == len(names)


def test_sanitize_text_and_expr_agree() -> None:
    from proftab.render.sanitize import sanitize_expr, sanitize_text

    texts = ["plain", "tab\there", "\x00\x1f\x7f\x80\x9f", "\u2066x\u2069", "é ✓"]
    got = pl.Series(texts).to_frame("s").select(sanitize_expr(pl.col("s")))["s"].to_list()
    assert got == [sanitize_text(t) for t in texts]
    assert got[0] == "plain" and got[4] == "é ✓" and got[1] == "tab\\x09here"
    assert sanitize_text("a\nb\tc\x1b", keep="\n\t") == "a\nb\tc\\x1b"


# 9 ----------------------------------------------------------------------------- metadata ranges


@pytest.mark.parametrize(("head", "name", "match"), [
    (b'"distributedInfo": {"rank": 2147483648}, ', "t.json", "outside the int32 range"),
    (b"", "trace_rank-99999999999.json", "outside the int32 range"),
    (b'"baseTimeNanoseconds": 100000000000000000000000, ', "t.json", "baseTimeNanoseconds"),
    (b'"baseTimeNanoseconds": 1.5, ', "t.json", "baseTimeNanoseconds"),
])
def test_out_of_range_metadata_is_a_clear_error(tmp_path: Path, head: bytes, name: str, match: str) -> None:
    p = write(tmp_path, [j(ev())], name=name, head=head)
    with pytest.raises(pt.TraceError, match=match) as info:
        pt.load(p)
    assert str(p) in str(info.value)
    assert len(pt.load(p, ranks=[3]).events) == 1 if b"base" not in head else True


# 10 ---------------------------------------------------------------------------- resource bounds


def test_reading_stops_at_the_first_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    p = tmp_path / "bomb.json.gz"
    p.write_bytes(gzip.compress(b"garbage" + b"\x00" * (64 << 20), 1))  # 64 MiB of garbage
    fed: list[int] = []
    real = decompress.raw_chunks

    def counting(path: str, digest: object = None, **kw: object):  # type: ignore[no-untyped-def]
        for chunk in real(path, digest, **kw):  # type: ignore[arg-type]
            fed.append(len(chunk))
            yield chunk

    monkeypatch.setattr(scan, "raw_chunks", counting)
    with pytest.raises(pt.TraceError, match="not a JSON trace"):
        pt.load(p)
    assert sum(fed) <= 5 * decompress.CHUNK  # not decompressed to the end (the reader thread runs ahead a little)


def test_a_huge_token_is_capped_and_rescanned_linearly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    big = b'{"ph": "X", "name": "' + b"n" * (3 << 20) + b'", "pid": 1, "tid": 1, "ts": 1, "dur": 1}'
    p = write(tmp_path, [j(ev()), big])
    monkeypatch.setattr(decompress, "CHUNK", 4096)  # 768 feeds: quadratic rescans would take minutes
    assert len(pt.load(p).events) == 2
    monkeypatch.setattr(scan, "MAX_TOKEN_BYTES", 1 << 20)
    with pytest.raises(pt.TraceError, match="larger than max_token=1048576 bytes"):
        pt.load(p)
    tr = load_quiet(p, salvage=True)
    assert tr.events["name"].to_list() == ["op"]


# 11 ---------------------------------------------------------------------------- consistency


@pytest.mark.parametrize("depth", [201, 900, 40000])
def test_deep_valid_nesting_loads(tmp_path: Path, depth: int) -> None:
    deep = b'[{"a": ' * depth + b"1" + b"}]" * depth
    p = write(tmp_path, [b'{"ph": "X", "name": "d", "pid": 1, "tid": 1, "ts": 1, "dur": 1, "args": {"d": ' + deep +
                         b"}}", j(ev())])
    tr = pt.load(p)
    assert len(tr.events) == 2
    assert tr.events.sort("event_id")["args"][0] == '{"d": ' + deep.decode() + "}"


def test_nesting_beyond_the_limit_is_a_clear_error(tmp_path: Path) -> None:
    deep = b"[" * 100_001 + b"]" * 100_001
    p = write(tmp_path, [b'{"ph": "X", "name": "d", "pid": 1, "tid": 1, "ts": 1, "args": {"d": ' + deep + b"}}"])
    with pytest.raises(pt.TraceError, match="nesting deeper than 100000 levels"):
        pt.load(p)


def test_duplicate_trace_events_key_is_an_error(tmp_path: Path) -> None:
    p = tmp_path / "t.json"
    p.write_bytes(b'{"traceEvents": [' + j(ev()) + b'], "traceEvents": [' + j(ev()) + b"]}")
    with pytest.raises(pt.TraceError, match="a second 'traceEvents' array"):
        pt.load(p)
    assert len(load_quiet(p, salvage=True).events) == 1


def test_invalid_json_is_accepted_but_flagged(tmp_path: Path) -> None:
    p = write(tmp_path, b'{"ph": "X", "name": "a", "pid": 01, "tid": 1, "ts": 01.5, "dur": 1},,' +
              b'{"ph": "X", "name": "b\x01", "pid": 1, "tid": 1, "ts": 2, "dur": 1}')
    with pytest.warns(pt.ProftabWarning, match="accepted 1 JSON syntax error"):
        tr = pt.load(p)
    ev_ = tr.events.sort("event_id")
    assert ev_["start_ns"].to_list() == [1500, 2000]
    assert all(f & pt.Flag.JSON_REPAIRED for f in ev_["flags"])


@pytest.mark.parametrize("content", [b"", b"   ", b"hello", b"\x1f\x8b" + b"\x00" * 40, b'{"nodes": 1}'])
def test_salvage_on_a_non_trace_still_raises(tmp_path: Path, content: bytes) -> None:
    p = tmp_path / "x.json"
    p.write_bytes(content)
    with pytest.raises(pt.TraceError):
        pt.load(p, salvage=True)


def test_ctrl_c_during_import_exits_130_without_traceback(tmp_path: Path) -> None:
    fake = tmp_path / "fake"
    (fake / "polars").mkdir(parents=True)
    (fake / "polars" / "__init__.py").write_text("raise KeyboardInterrupt\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(fake), str(Path(pt.__file__).parents[1])])}
    r = subprocess.run([sys.executable, "-m", "proftab", "summary", "x.json"], capture_output=True, text=True,
                       env=env, check=False)
    assert r.returncode == 130
    assert "Traceback" not in r.stderr and "interrupted" in r.stderr


def test_zlib_prefix_replay_matches_zlib() -> None:
    comp = bytearray(zlib.compress(bytes(range(256)) * 200))
    comp[-2] ^= 0xFF  # bad checksum: the whole output precedes the error
    with pytest.raises(zlib.error):
        zlib.decompress(bytes(comp))
    want, d = [], zlib.decompressobj()
    for i in range(len(comp)):  # the reference: byte by byte until the error
        try:
            want.append(d.decompress(bytes(comp[i:i + 1])))
        except zlib.error:
            break
    good, used = decompress._gzip_prefix(zlib.decompressobj(), bytes(comp))
    assert good == b"".join(want) == bytes(range(256)) * 200
    assert used == i


def test_key_with_a_quote_and_a_final_backslash_does_not_hang(tmp_path: Path) -> None:
    """An args key holding an unescaped quote and ending in `\\"` (raw `"a"b\\"": 1`) made the args repair loop
    forever on a lone trailing backslash (a 104-byte file held `pt.load` forever); it loads, flagged repaired."""
    path = tmp_path / "quote_backslash_key.json"
    path.write_bytes(b'{"traceEvents": [{"ph": "X", "name": "n", "ts": 1, "dur": 1, "pid": 1, "tid": 1, '
                     b'"args": {"a"b\\"": 1}}]}')
    code = ("import sys, warnings, proftab as pt; warnings.simplefilter('ignore'); "
            "tr = pt.load(sys.argv[1]); print(tr.events.height, tr.events['args'][0], tr.events['flags'][0], sep='|')")
    out = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}, check=True)
    height, args, flags = out.stdout.strip().split("|")
    assert int(height) == 1
    assert args.startswith('{"a') and args.endswith(": 1}")
    assert int(flags) & Flag.ARGS_REPAIRED
