"""The scanner's walks give identical results: the scalar walk, the SIMD structural index and the
reference walk, which is the scalar one without the shortcuts the parser learns from the text it has
read (remembered separators with the keys they lead to, the last pid/tid token, scanning a chunk where it lies)
(`proftab.io._kineto.set_path`, docs/robustness.md "Scanner paths").

Every result the scanner returns is compared whole, byte for byte: each column buffer, the row
counts, the error (message, offset, excerpt), completeness, resyncs and lenient counts, so the
tables, the salvage and the damage reports built from them are identical too. The "check" path
runs both walks on every string and whitespace run and counts disagreements, which must be 0.
"""

from __future__ import annotations

import gzip
import random
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proftab.exceptions import TraceError
from proftab.io import _kineto, kineto
from tests.conftest import needs_shared, shared_public_traces, shared_torch213_cases
from tests.fuzz import harness

if TYPE_CHECKING:
    from collections.abc import Iterator

DATA = Path(__file__).resolve().parent / "data"
PATHS = ("scalar", "simd", "check", "reference")


@pytest.fixture(autouse=True)
def _restore_path() -> Iterator[None]:
    before, isa = _kineto.get_path()
    yield
    _kineto.set_path(before)
    _kineto.set_classifier(isa)


def _classifiers() -> list[str]:
    isa = _kineto.get_path()[1]
    names = []
    for name in ("avx2", "sse2", "portable"):
        try:
            _kineto.set_classifier(name)
        except ValueError:
            continue
        names.append(name)
    _kineto.set_classifier(isa)
    return names


CLASSIFIERS = _classifiers()


def _plain(obj: Any) -> Any:
    """A scanner result as plain, comparable Python (buffers as bytes)."""
    if isinstance(obj, _kineto.Buffer):
        return bytes(memoryview(obj))
    if isinstance(obj, dict):
        return {k: _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    return obj


def _scan(data: bytes, *, salvage: bool, chunk: int | None) -> Any:
    parser = _kineto.Parser(kineto.TYPED_SPEC, salvage=salvage, max_token=kineto.MAX_TOKEN_BYTES)
    if chunk is None:
        parser.feed(data)
    else:
        for i in range(0, len(data), chunk):
            if parser.feed(data[i:i + chunk]):
                break
    return _plain(parser.finish())


def assert_paths_agree(data: bytes, *, salvage: bool = False, chunk: int | None = None) -> Any:
    """Scan `data` on every path; all results must be equal (and "check" must see no difference)."""
    results = {}
    for path in PATHS:
        _kineto.set_path(path)
        results[path] = _scan(data, salvage=salvage, chunk=chunk)
        if path == "check":
            assert _kineto.path_mismatches() == 0
    assert results["simd"] == results["scalar"]
    assert results["check"] == results["scalar"]
    assert results["reference"] == results["scalar"]
    return results["scalar"]


def test_set_path_and_get_path() -> None:
    for path in PATHS:
        _kineto.set_path(path)
        assert _kineto.get_path()[0] == path
    assert _kineto.get_path()[1] in ("avx2", "sse2", "portable")
    assert "portable" in CLASSIFIERS
    with pytest.raises(ValueError, match="not available"):
        _kineto.set_classifier("neon")
    _kineto.set_path("auto")  # the default: the scalar walk (the indexed one does not pay yet)
    assert _kineto.get_path()[0] == "scalar"
    with pytest.raises(ValueError, match="unknown scanner path"):
        _kineto.set_path("fast")


@pytest.mark.parametrize("path", sorted(p.relative_to(DATA).as_posix() for p in DATA.rglob("*.json*")))
def test_bundled_traces(path: str) -> None:
    raw = (DATA / path).read_bytes()
    data = gzip.decompress(raw) if path.endswith(".gz") else raw
    res = assert_paths_agree(data)
    assert res["error"] is None or isinstance(res["error"], (tuple, list))


@needs_shared
@pytest.mark.slow
def test_shared_corpus() -> None:
    """Every trace of ../shared/traces/public and traces/torch213, strict and with salvage."""
    files = shared_public_traces() + [c / "trace.json.gz" for c in shared_torch213_cases()]
    assert files
    for f in files:
        data = gzip.decompress(f.read_bytes())
        assert_paths_agree(data)
        # fed in pieces, as a gzipped file is: strings and blocks cut at every kind of boundary
        assert_paths_agree(data, salvage=True, chunk=(1 << 20) + 37)


def _event(name: bytes, k: int) -> bytes:
    return (b'{"ph": "X", "cat": "cpu_op", "name": "' + name + b'", "pid": 1, "tid": 2, "ts": ' +
            str(1000 + k).encode() + b'.5, "dur": 1, "args": {"k": "' + name + b'", "n": [1, "' + name + b'"]}}')


def _trace(events: list[bytes], sep: bytes = b", ") -> bytes:
    return b'{"traceEvents": [' + sep.join(events) + b"]}"


@pytest.mark.parametrize("classifier", CLASSIFIERS)
def test_escapes_across_block_boundaries(classifier: str) -> None:
    """Backslash runs of every length ending at every offset around a 64-byte block edge, escaped
    quotes, and unescaped inner quotes (the tolerant repair): one index block is 64 bytes, so the
    padding shifts each string across the edge."""
    _kineto.set_classifier(classifier)
    events = []
    k = 0
    for pad in range(0, 70):
        for run in range(0, 6):
            for tail in (b'"', b"x", b'\\"', b'" x', b'" , "'):
                events.append(_event(b"p" * pad + b"\\" * run + tail + b"q", k))
                k += 1
    data = _trace(events)
    for salvage in (False, True):
        assert_paths_agree(data, salvage=salvage)
    for chunk in (1, 7, 63, 64, 65, 4096):
        assert_paths_agree(data[:20000], salvage=True, chunk=chunk)


def test_whitespace_and_window() -> None:
    """Pretty-printed text (runs of spaces, tabs, CR LF) longer than the index window (64 KiB), and
    a string longer than a window."""
    rng = random.Random(5)
    ws = [b" ", b"\n", b"\r\n", b"\t", b" " * 70, b"\n" + b" " * 130]
    events = []
    for k in range(3000):
        e = _event(b"aten::op%d" % (k % 17), k)
        pieces = e.split(b", ")
        events.append((rng.choice(ws) + b",").join(pieces) + rng.choice(ws))
    events.append(_event(b"y" * 200_000 + b"\\\\" + b"z" * 70_000, 99999))
    data = _trace(events, sep=b",\n  ")
    res = assert_paths_agree(data)
    assert res["error"] is None
    assert_paths_agree(data, chunk=50_000)
    assert_paths_agree(data[: len(data) // 2], salvage=True)


@pytest.mark.parametrize("classifier", CLASSIFIERS)
def test_every_byte_value(classifier: str) -> None:
    """Each of the 256 byte values where a token, whitespace or string byte is expected, in a full
    64-byte block and in the padded last block, with every classifier this machine has (the atheris
    run found byte 0x01 taken for whitespace by the AVX2 classifier's table)."""
    _kineto.set_classifier(classifier)
    templates = [b"%s", b"[%s]", b'{"traceEvents": [%s{"ph": "X"}]}',
                 b'{"traceEvents": [{"ph"%s: "X", "name": "a%sb", "ts": 1%s}]}']
    for b in range(256):
        byte = bytes([b])
        for t in templates:
            core = t.replace(b"%s", byte)
            for data in (core, b" " * 70 + core + b" " * 70):  # the padded last block; a full block
                assert_paths_agree(data)
                assert_paths_agree(data, salvage=True)


def test_random_bytes_and_damage() -> None:
    """Random splices of structural bytes into a real trace: errors, offsets and salvage agree."""
    seed = harness.load_seeds(max_events=60)[0]
    rng = random.Random(29)
    alphabet = [b'"', b"\\", b" ", b"\n", b",", b":", b"{", b"}", b"[", b"]", b"\x00", b"\xff", b"x"]
    for _ in range(150):
        text = bytearray(seed.text)
        for _ in range(rng.randrange(1, 6)):
            at = rng.randrange(len(text))
            text[at:at + rng.randrange(0, 3)] = b"".join(rng.choice(alphabet) for _ in range(rng.randrange(1, 4)))
        data = bytes(text)
        for salvage in (False, True):
            assert_paths_agree(data, salvage=salvage)
        assert_paths_agree(data, salvage=True, chunk=rng.choice([1, 13, 64, 1000]))


def _load_result(path: Path, salvage: bool) -> Any:
    try:
        result = kineto.scan_file(str(path), salvage=salvage)
        digest = result.pop("digest", None)  # the file's sha256 (one object per read): compared by value
        return {**_plain(result), "sha256": digest.hexdigest(str(path)) if digest is not None else None}
    except TraceError as exc:
        return ("TraceError", str(exc))


def test_fuzz_harness_cases(tmp_path: Path) -> None:
    """Every mutation class of the fuzz harness (damaged, truncated, hostile, gzip damage): the same
    result, the same error or the same salvage on both walks, read from a file as pt.load does."""
    seeds = harness.load_seeds(max_events=80)
    rng = random.Random(2929)
    f = tmp_path / "case.json"
    for cls, mutate in harness.MUTATORS.items():
        for i in range(6):
            case = mutate(seeds[i % len(seeds)], rng)
            target = f.with_suffix(".json.gz") if case.gz else f
            target.write_bytes(case.data)
            for salvage in (False, True):
                out = {}
                for path in PATHS:
                    _kineto.set_path(path)
                    out[path] = _load_result(target, salvage)
                    if path == "check":
                        assert _kineto.path_mismatches() == 0, (cls, i)
                assert out["simd"] == out["scalar"] == out["check"] == out["reference"], (cls, i, salvage)


# ---------------------------------------------------------------- the learned shortcuts

_WS = [b"", b" ", b"\n    ", b"\n\t ", b"  "]
_EVENT_KEYS = [b'"ph"', b'"cat"', b'"name"', b'"pid"', b'"tid"', b'"ts"', b'"dur"', b'"id"', b'"x"',
               b'"n\\u0061me"', b'"ph" ', b'"ts"  ']
_ARG_KEYS = [b'"External id"', b'"Record function id"', b'"Ev Idx"', b'"Input Dims"', b'"stream"',
             b'"custom key"', b'"Exte\\u0072nal id"', b'"Seq"', b'"a"', b'"External id" ']
_VALUES = [b"0", b"1", b"6236", b"-1", b"01", b"1.5", b"2.125", b"1e3", b"12345678901234567890", b'"7"',
           b'"X"', b'"cpu_op"', b'"aten::mm"', b'"a\\"b"', b"null", b"true", b"[1, 2]", b'{"k": 1}']


def _object(keys: list[bytes], values: list[bytes], ws: list[bytes]) -> bytes:
    pairs = enumerate(zip(keys, values, strict=True))
    parts = [ws[i % len(ws)] + k + b":" + ws[(i + 1) % len(ws)] + v for i, (k, v) in pairs]
    return b"{" + b",".join(parts) + ws[0] + b"}"


@st.composite
def _learned_trace(draw: st.DrawFn) -> bytes:
    """Events made from a few templates, repeated with small changes: the same separators, keys and
    pid/tid tokens come back (so the parser's remembered ones are used) and then change under it."""
    pick = st.sampled_from
    templates = []
    for _ in range(draw(st.integers(1, 3))):
        keys = draw(st.lists(pick(_EVENT_KEYS), min_size=1, max_size=9))
        arg_keys = draw(st.lists(pick(_ARG_KEYS), max_size=6))
        ws = draw(st.lists(pick(_WS), min_size=1, max_size=3))
        templates.append((keys, arg_keys, ws))
    events = []
    for _ in range(draw(st.integers(1, 25))):
        keys, arg_keys, ws = templates[draw(st.integers(0, len(templates) - 1))]
        values = [draw(pick(_VALUES)) for _ in keys]
        args = _object(arg_keys, [draw(pick(_VALUES)) for _ in arg_keys], ws)
        if draw(st.booleans()):
            keys, values = [*keys, b'"args"'], [*values, args]
        events.append(_object(keys, values, ws))
    return _trace(events, sep=draw(pick([b",", b", ", b",\n  "])))


@settings(max_examples=150, deadline=None)
@given(_learned_trace(), st.integers(1, 400))
def test_learned_shortcuts_change_nothing(data: bytes, chunk: int) -> None:
    """Remembered separators (and the keys they lead to) and pid/tid tokens give exactly the generic parse's result,
    whole and fed in pieces, strict and with salvage (the reference path takes none of them)."""
    for salvage in (False, True):
        assert_paths_agree(data, salvage=salvage)
        assert_paths_agree(data, salvage=salvage, chunk=chunk)


def test_chunk_scanned_where_it_lies() -> None:
    """Chunks larger than the 64 KiB stitch: an item completing in the first 64 KiB, one longer than
    that (a 150 KB name), and damage skipped across a chunk edge, all as one whole feed gives."""
    events = []
    for k in range(2500):
        name = b"x" * 150_000 if k % 700 == 5 else b"aten::mm"
        events.append(_event(name, k))
        if k % 900 == 7:
            events.append(b'{"ph": "X", "name": "bad" "oops": }')
    data = _trace(events, sep=b",\n  ")
    for salvage in (True, False):
        whole = assert_paths_agree(data, salvage=salvage)
        for chunk in (65_537, 100_003, 300_007):
            assert assert_paths_agree(data, salvage=salvage, chunk=chunk)["rows"] == whole["rows"]
