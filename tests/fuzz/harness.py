"""Structure-aware fuzzing of the trace loader.

Seeds are slices of real traces (the bundled ``data/*.pt.trace.json.gz``). Each case takes a
seed's raw JSON text, locates its ``traceEvents`` element boundaries and applies one mutation
class (truncation at an element boundary, invalid UTF-8, escaped keys, syntax damage, int64
overflow, hostile counter args, metadata, deep nesting, gzip damage, byte noise...). Every
case is loaded twice (strict and ``salvage=True``) and checked:

* only proftab errors (``ProftabError``): never a Polars panic or a raw library error;
* the accounting identity, and every input element in exactly one table;
* no wrapped times (``end_ns - start_ns == dur_ns``, no negative span from overflow);
* salvage keeps every complete, untouched event before the damage;
* text output (``Trace.table()``) carries no terminal control characters.

``python -m tests.fuzz.harness --seconds 60`` runs it standalone and prints the per-class
table; ``benchmarks/fuzz/asan.sh`` runs it against an ASan+UBSan build of the scanner.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import gzip
import json
import os
import random
import re
import sys
import tempfile
import time
import traceback
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable

ROOT = Path(__file__).resolve().parents[2]
SEED_FILES = sorted((ROOT / "data").glob("*.pt.trace.json.gz"))
OUTCOMES = ("ok", "crash", "hang", "wrong_exception", "silent_loss")
HANG_S = 10.0


# ----------------------------------------------------------------------------- seeds


@dataclasses.dataclass
class Seed:
    """A real trace's text with its element boundaries."""

    name: str
    text: bytes
    spans: list[tuple[int, int]]  # [start, end) of each traceEvents element
    array_end: int  # index of the closing ']'


def _element_spans(text: bytes) -> tuple[list[tuple[int, int]], int]:
    s = text.decode("utf-8")
    if s.isascii():
        to_b = None
    else:  # map character offsets to byte offsets
        to_b = [0]
        for ch in s:
            to_b.append(to_b[-1] + len(ch.encode("utf-8")))
    m = re.search(r'"traceEvents"\s*:\s*\[', s)
    if m is None:
        msg = "no traceEvents array"
        raise ValueError(msg)
    dec = json.JSONDecoder()
    pos = m.end()
    spans = []
    while True:
        while s[pos] in " \t\r\n,":
            pos += 1
        if s[pos] == "]":
            break
        _, end = dec.raw_decode(s, pos)
        spans.append((pos, end))
        pos = end
    if to_b is not None:
        spans = [(to_b[a], to_b[b]) for a, b in spans]
        pos = to_b[pos]
    return spans, pos


def make_seed(name: str, text: bytes, max_events: int | None = 300) -> Seed:
    """Slice a trace to its first `max_events` elements, keeping the original bytes."""
    spans, end = _element_spans(text)
    if max_events is not None and len(spans) > max_events:
        cut_from, cut_to = spans[max_events - 1][1], end
        text = text[:cut_from] + text[cut_to:]
        spans, end = spans[:max_events], cut_from
    return Seed(name, text, spans, end)


def load_seeds(max_events: int | None = 300) -> list[Seed]:
    """The bundled real traces as seeds."""
    return [make_seed(p.name, gzip.decompress(p.read_bytes()), max_events) for p in SEED_FILES]


# ----------------------------------------------------------------------------- mutations


@dataclasses.dataclass
class Case:
    """One mutated input: `damage_at` is the index of the first element that may differ."""

    cls: str
    data: bytes
    damage_at: int
    gz: bool = False
    note: str = ""
    elements: int | None = None  # when a strict load succeeds it must count exactly this many elements
    salvage_loads: bool = False  # salvage=True must not raise
    lost_at_most: int | None = None  # salvage keeps all but this many of the seed's X events
    strict_loads: bool = False  # valid JSON: a strict load must succeed


HOSTILE_SCALARS = [
    b"9223372036854775", b"-9223372036854775", b"9223372036854775807", b"-9223372036854775808", b"1e999",
    b"-1e999", b"NaN", b"Infinity", b"-Infinity", b"01", b"1\x94", b"\xff", b"0x10", b"1.5e3", b"-0",
    b'"\\u0000"', b'"\xc3"', b'"\x1b[2J"', b"true", b"null", b"[]", b"{}", b'"1"', b"18446744073709551616",
    b"-9223372036854775.808", b"-9223372036854775.809", b"9223372036854.775807",
]
HOSTILE_STRINGS = [
    b"\xff\xfe", b"\xc3", b"\xed\xa0\x80", b"\\ud800", b"\\u0058", b"\x1b]0;pwned\x07", b"\x1b[2J", b"a\rb",
    b"a\nb", b"\\n", b"\x00", b'\\"', b"\\x", b"\xf4\x90\x80\x80", b"\x7f", b"\xe2\x80\xae",
]


def _replace_value(elem: bytes, key: bytes, value: bytes) -> bytes | None:
    m = re.search(rb'"' + re.escape(key) + rb'"\s*:\s*', elem)
    if m is None:
        return None
    start = m.end()
    dec = json.JSONDecoder()
    try:
        _, end = dec.raw_decode(elem.decode("utf-8", "surrogateescape"), start)
    except ValueError:
        return None
    return elem[:start] + value + elem[end:]


def _with_element(seed: Seed, j: int, new: bytes) -> bytes:
    a, b = seed.spans[j]
    return seed.text[:a] + new + seed.text[b:]


def _insert_before(seed: Seed, j: int, new: bytes) -> bytes:
    a, _ = seed.spans[j]
    return seed.text[:a] + new + seed.text[a:]


def m_truncate(seed: Seed, rng: random.Random) -> Case:
    j = rng.randrange(len(seed.spans))
    a, b = seed.spans[j]
    where = rng.choice(["start", "end", "inside"])
    cut = a if where == "start" else b if where == "end" else rng.randrange(a, b)
    return Case("truncate", seed.text[:cut], j, gz=rng.random() < 0.5, note=f"cut={cut}")


def m_utf8(seed: Seed, rng: random.Random) -> Case:
    j = rng.randrange(len(seed.spans))
    a, b = seed.spans[j]
    elem = seed.text[a:b]
    key = rng.choice([b"pid", b"tid", b"id", b"name", b"cat", b"ph"])
    bad = rng.choice(HOSTILE_STRINGS[:4] + [b"\x94", b"\xc3"])
    if key in (b"pid", b"tid", b"id"):
        value = rng.choice([b"1" + bad, b'"' + bad + b'"', bad + b"2"])
    else:
        value = b'"x' + bad + b'y"'
    new = _replace_value(elem, key, value)
    if new is None:
        new = elem[:-1] + b', "' + key + b'": ' + value + b"}"
    extra = b""
    if key in (b"pid", b"tid") and rng.random() < 0.5:  # an E on that track (pairing over the bad text)
        extra = b'{"ph": "E", "pid": ' + value + b', "tid": ' + value + b', "ts": 1}, '
    return Case("utf8", _with_element(seed, j, extra + new), j)


def m_escape(seed: Seed, rng: random.Random) -> Case:
    j = rng.randrange(len(seed.spans))
    a, b = seed.spans[j]
    elem = seed.text[a:b]
    choice = rng.randrange(3)
    if choice == 0:  # escaped ph value
        m = re.search(rb'"ph"\s*:\s*"(.)"', elem)
        if m is None:
            return m_truncate(seed, rng)
        ch = m.group(1)
        new = elem[:m.start(1)] + b"\\u%04x" % ch[0] + elem[m.end(1):]
    elif choice == 1:  # escaped key
        key = rng.choice([b"name", b"ph", b"ts", b"dur", b"pid", b"tid", b"cat", b"args"])
        esc = key[:1] + b"\\u%04x" % key[1] + key[2:]
        new = elem.replace(b'"' + key + b'"', b'"' + esc + b'"', 1)
    else:  # escaped typed arg key
        new = elem.replace(b'"External id"', b'"External\\u0020id"', 1).replace(b'"correlation"',
                                                                                  b'"corr\\u0065lation"', 1)
    return Case("escape", _with_element(seed, j, new), j, elements=len(seed.spans), strict_loads=True)


def m_syntax(seed: Seed, rng: random.Random) -> Case:
    j = rng.randrange(1, len(seed.spans))
    a, _ = seed.spans[j]
    pre = seed.text[:a]
    k = pre.rstrip().rfind(b",")
    choice = rng.randrange(5)
    if choice == 0:  # delete the comma before element j
        data = pre[:k] + pre[k + 1:] + seed.text[a:]
    elif choice == 1:  # stray '}' before element j
        data = pre + b"} " + seed.text[a:]
    elif choice == 2:  # double comma
        data = pre + b", " + seed.text[a:]
    elif choice == 3:  # stray ']' -> the array ends early: not damage-free, strict must not lie
        data = pre + b"], " + seed.text[a:]
    else:  # duplicated traceEvents key
        data = seed.text[:seed.array_end + 1] + b', "traceEvents": [' + seed.text[a:seed.spans[-1][1]] + b"]" + \
            seed.text[seed.array_end + 1:]
        return Case("syntax", data, len(seed.spans), note="dup traceEvents", elements=len(seed.spans))
    return Case("syntax", data, j - 1 if choice == 3 else j, note=f"choice={choice}", salvage_loads=True,
                lost_at_most=None if choice == 3 else 1, elements=len(seed.spans) if choice == 2 else None)


def m_overflow(seed: Seed, rng: random.Random) -> Case:
    j = rng.randrange(len(seed.spans))
    choice = rng.randrange(3)
    if choice == 0:
        ts, dur = rng.choice([(b"9223372036854775", b"1000"), (b"-9223372036854775.808", b"-1"),
                              (b"-9223372036854775.808", b"0"), (b"9223372036854775.807", b"0.001"),
                              (b"1", b"9223372036854775.807")])
        new = b'{"ph": "X", "name": "ovf", "pid": 1, "tid": 1, "ts": ' + ts + b', "dur": ' + dur + b"}"
    elif choice == 1:
        new = (b'{"ph": "B", "name": "ovf", "pid": 7, "tid": 7, "ts": -9223372036854775}, '
               b'{"ph": "E", "pid": 7, "tid": 7, "ts": 9223372036854775}')
    else:
        key = rng.choice([b"ts", b"dur"])
        a, b = seed.spans[j]
        new = _replace_value(seed.text[a:b], key, rng.choice(HOSTILE_SCALARS)) or seed.text[a:b]
        return Case("overflow", _with_element(seed, j, new), j)
    return Case("overflow", _insert_before(seed, j, new + b", "), j)


def m_counter(seed: Seed, rng: random.Random) -> Case:
    j = rng.randrange(len(seed.spans))
    vals = [b'{"v": NaN}', b'{"v": Infinity}', b'{"v": 1e999}', b'{"v": [1]}', b'{"v": 1, "v": 2}',
            b'{"v": "x"}', b'{"v": true}', b'{"v": null}', b'{"v": {"w": 1}}', b'{"v": 1}', b"3", b"[]",
            b'{"v": 18446744073709551616}', b'{"\xff": 1}']
    new = b", ".join(b'{"ph": "C", "name": "c", "pid": 1, "tid": 1, "ts": %d, "args": ' % (i + 1) +
                     rng.choice(vals) + b"}" for i in range(rng.randrange(1, 4)))
    return Case("counter", _insert_before(seed, j, new + b", "), j)


def m_metadata(seed: Seed, rng: random.Random) -> Case:
    m = re.search(rb'"traceEvents"', seed.text)
    assert m is not None
    field = rng.choice([b'"distributedInfo": {"rank": 99999999999}', b'"distributedInfo": {"rank": -1}',
                        b'"baseTimeNanoseconds": 100000000000000000000000',
                        b'"baseTimeNanoseconds": -5', b'"baseTimeNanoseconds": 1.5',
                        b'"distributedInfo": {"rank": 2147483648}', b'"deviceProperties": NaN'])
    data = seed.text[:m.start()] + field + b", " + seed.text[m.start():]
    return Case("metadata", data, len(seed.spans))


def m_nesting(seed: Seed, rng: random.Random) -> Case:
    j = rng.randrange(len(seed.spans))
    depth = rng.choice([150, 199, 201, 500, 5000])
    deep = b"[" * depth + b"]" * depth
    new = b'{"ph": "X", "name": "deep", "pid": 1, "tid": 1, "ts": 1, "dur": 1, "args": {"d": ' + deep + b"}}"
    return Case("nesting", _insert_before(seed, j, new + b", "), j, elements=len(seed.spans) + 1,
                strict_loads=True)


def m_control(seed: Seed, rng: random.Random) -> Case:
    j = rng.randrange(len(seed.spans))
    a, b = seed.spans[j]
    bad = rng.choice([b"\\u001b]0;pwned\\u0007", b"\\u001b[2J", b"a\\rb", b"a\\nb", b"\x1b[31m", b"\\u009b1m",
                      b"tab\\tb", b"\\u202e"])
    new = _replace_value(seed.text[a:b], b"name", b'"' + bad + b'"') or seed.text[a:b]
    return Case("control", _with_element(seed, j, new), j)


def m_noise(seed: Seed, rng: random.Random) -> Case:
    j = rng.randrange(len(seed.spans))
    a, b = seed.spans[j]
    elem = bytearray(seed.text[a:b])
    for _ in range(rng.randrange(1, 4)):
        k = rng.randrange(len(elem))
        op = rng.randrange(3)
        if op == 0:
            elem[k] ^= 1 << rng.randrange(8)
        elif op == 1:
            del elem[k]
        else:
            elem[k:k] = bytes([rng.choice(b'{}[]",:\\0123456789eE.-+\x00\xff tnf')])
    return Case("noise", _with_element(seed, j, bytes(elem)), j)


def m_gzip(seed: Seed, rng: random.Random) -> Case:
    comp = bytearray(gzip.compress(seed.text))
    choice = rng.randrange(3)
    if choice == 0:  # corrupt a byte in the deflate stream
        k = rng.randrange(10, len(comp) - 8)
        comp[k] ^= 0xFF
    elif choice == 1:  # bad CRC
        comp[-8] ^= 0xFF
    else:  # cut the compressed stream
        comp = comp[: rng.randrange(10, len(comp))]
    return Case("gzip", bytes(comp), 0, note=f"choice={choice}", salvage_loads=choice == 1,
                lost_at_most=0 if choice == 1 else None)


MUTATORS: dict[str, Callable[[Seed, random.Random], Case]] = {
    "truncate": m_truncate, "utf8": m_utf8, "escape": m_escape, "syntax": m_syntax, "overflow": m_overflow,
    "counter": m_counter, "metadata": m_metadata, "nesting": m_nesting, "control": m_control, "noise": m_noise,
    "gzip": m_gzip,
}


# ----------------------------------------------------------------------------- oracle


class Finding(Exception):
    """A harness check failed: `outcome` is one of OUTCOMES."""

    def __init__(self, outcome: str, detail: str) -> None:
        super().__init__(f"{outcome}: {detail}")
        self.outcome = outcome
        self.detail = detail


_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def check_trace(tr: object, *, deep: bool) -> None:
    """Invariants every loaded trace must satisfy (raises Finding)."""
    import polars as pl

    acc = tr.accounting  # type: ignore[attr-defined]
    for row in acc.iter_rows(named=True):
        parts = sum(row[k] for k in ("events_in", "instants", "flows", "counters", "metadata", "rejected"))
        if parts != row["trace_events"]:
            raise Finding("silent_loss", f"accounting {row}")
    ev = tr.events  # type: ignore[attr-defined]
    tables = {"events": ev, "instants": tr.instants, "flows": tr.flows,  # type: ignore[attr-defined]
              "rejected": tr.rejected,  # type: ignore[attr-defined]
              "counters": tr.counters.select("rank", "event_id").unique()}  # type: ignore[attr-defined]
    ids = pl.concat([t.select(pl.col("rank").cast(pl.Int64), pl.col("event_id")) for t in tables.values()])
    if ids.is_duplicated().any():
        raise Finding("silent_loss", "an input element is in two tables")
    n_in = int(acc["trace_events"].sum())
    if len(ids) and (ids["event_id"].min() < 0 or ids["event_id"].max() >= n_in):  # type: ignore[operator]
        raise Finding("silent_loss", "event_id outside the input")
    paired = ev.filter(pl.col("ph").cast(pl.String).is_in(["B", "b"]) & (pl.col("flags") & 16 == 0)).height
    if int(acc["events_in"].sum()) != len(ev) + paired:
        raise Finding("silent_loss", f"events_in {acc['events_in'].sum()} != {len(ev)} rows + {paired} ends")
    if int(acc["instants"].sum()) != len(tr.instants) or int(acc["rejected"].sum()) != len(tr.rejected):  # type: ignore[attr-defined]
        raise Finding("silent_loss", "instants/rejected counts differ from the tables")
    bad = ev.filter((pl.col("end_ns") != pl.col("start_ns") + pl.col("dur_ns"))
                    | ((pl.col("dur_ns") >= 0) & (pl.col("end_ns") < pl.col("start_ns")))
                    | ((pl.col("dur_ns") < 0) & (pl.col("end_ns") > pl.col("start_ns"))))
    if len(bad):
        raise Finding("silent_loss", f"{len(bad)} events with wrapped times")
    # every string column must be readable (invalid UTF-8 in Arrow panics here)
    for name, t in {**tables, "counters": tr.counters, "threads": tr.threads}.items():  # type: ignore[attr-defined]
        for c, dt in t.schema.items():
            if dt in (pl.String, pl.Categorical):
                t[c].to_list()
                if name == "events" and c == "name" and t[c].str.contains(r"[\x00-\x08\x0b-\x1f]").any():
                    pass  # names keep their text; output sanitizes them (checked below)
    if deep:
        tr.nested  # type: ignore[attr-defined]  # noqa: B018
        text = tr.table(row_limit=50)  # type: ignore[attr-defined]
        lines = text.split("\n")
        if any(_CONTROL.search(line) for line in lines):
            raise Finding("silent_loss", "control characters in table() output")
        tr.key_averages()  # type: ignore[attr-defined]


def _compare_prefix(tr: object, ref: object, upto: int) -> None:
    """Salvage keeps every complete, untouched element before the damage."""
    import polars as pl

    for table in ("events", "instants", "flows"):
        got = getattr(tr, table)
        want = getattr(ref, table)
        cols = ["event_id", "name", *(c for c in ("start_ns", "dur_ns") if c in want.columns)]
        if table == "events":  # B/E pairs may end after the damage
            keep = pl.col("ph").cast(pl.String) == "X"
        else:
            keep = pl.lit(True)
        w = want.filter(keep & (pl.col("event_id") < upto)).select(cols).sort("event_id")
        g = got.filter(keep & (pl.col("event_id") < upto)).select(cols).sort("event_id")
        if not g.equals(w):
            raise Finding("silent_loss", f"{table}: {len(g)} of {len(w)} events before element {upto} kept")


class Harness:
    """Runs cases and tallies outcomes per mutation class."""

    def __init__(self, seeds: list[Seed], *, deep_every: int = 5, workdir: str | None = None) -> None:
        import proftab as pt

        self.pt = pt
        self.seeds = seeds
        self.deep_every = deep_every
        self.tmp = workdir or tempfile.mkdtemp(prefix="proftab-fuzz-")
        self.refs: dict[str, object] = {}
        self.counts: dict[str, dict[str, int]] = {c: dict.fromkeys(OUTCOMES, 0) for c in MUTATORS}
        self.examples: dict[tuple[str, str], str] = {}
        self.n = 0

    def ref(self, seed: Seed) -> object:
        if seed.name not in self.refs:
            p = os.path.join(self.tmp, "ref.json")
            Path(p).write_bytes(seed.text)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                self.refs[seed.name] = self.pt.load(p)
        return self.refs[seed.name]

    def _load(self, path: str, salvage: bool) -> object | None:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            warnings.simplefilter("ignore", self.pt.ProftabWarning)
            try:
                return self.pt.load(path, salvage=salvage)
            except self.pt.ProftabError:
                return None

    def run_case(self, seed: Seed, case: Case) -> str:
        """Run one case; returns its outcome."""
        path = os.path.join(self.tmp, "case.json.gz" if case.gz or case.cls == "gzip" else "case.json")
        data = case.data if case.cls == "gzip" else gzip.compress(case.data, 1) if case.gz else case.data
        Path(path).write_bytes(data)
        deep = self.n % self.deep_every == 0
        self.n += 1
        t0 = time.perf_counter()
        try:
            strict = self._load(path, salvage=False)
            if strict is None and case.strict_loads:
                raise Finding("wrong_exception", "valid JSON refused")
            if strict is not None:
                check_trace(strict, deep=deep)
                n = int(strict.accounting["trace_events"].sum())  # type: ignore[attr-defined]
                if case.elements is not None and n != case.elements:
                    raise Finding("silent_loss", f"{n} elements counted, the input has {case.elements}")
            salv = self._load(path, salvage=True)
            if salv is not None:
                check_trace(salv, deep=False)
                ref = self.ref(seed)
                _compare_prefix(salv, ref, case.damage_at)
                if case.lost_at_most is not None:
                    import polars as pl

                    def nx(t: object) -> int:
                        return t.events.filter(pl.col("ph").cast(pl.String) == "X").height  # type: ignore[attr-defined]
                    if nx(salv) < nx(ref) - case.lost_at_most:
                        raise Finding("silent_loss", f"salvage kept {nx(salv)} of {nx(ref)} X events")
            elif strict is not None:
                raise Finding("wrong_exception", "salvage raised where a strict load succeeded")
            elif case.salvage_loads:
                raise Finding("silent_loss", "salvage=True raised: nothing kept")
            outcome = "ok"
        except Finding as f:
            outcome = f.outcome
            self._example(case, outcome, f.detail)
        except BaseException as exc:
            if isinstance(exc, KeyboardInterrupt):
                raise
            outcome = "wrong_exception"
            self._example(case, outcome, "".join(traceback.format_exception_only(type(exc), exc)).strip()[:300])
        if outcome == "ok" and time.perf_counter() - t0 > HANG_S:
            outcome = "hang"
            self._example(case, outcome, f"{time.perf_counter() - t0:.1f} s")
        self.counts[case.cls][outcome] += 1
        return outcome

    def _example(self, case: Case, outcome: str, detail: str) -> None:
        key = (case.cls, outcome)
        if key not in self.examples:
            self.examples[key] = f"{detail} [{case.note}]"
            with contextlib.suppress(OSError):
                Path(self.tmp, f"finding-{case.cls}-{outcome}.bin").write_bytes(case.data)

    def run(self, *, seed: int = 0, cases: int | None = None, seconds: float | None = None,
            classes: list[str] | None = None) -> dict[str, dict[str, int]]:
        """Run `cases` cases (or for `seconds`), seeded; returns the counts."""
        rng = random.Random(seed)
        names = classes or list(MUTATORS)
        deadline = None if seconds is None else time.monotonic() + seconds
        i = 0
        while (cases is None or i < cases) and (deadline is None or time.monotonic() < deadline):
            s = self.seeds[i % len(self.seeds)]
            cls = names[i % len(names)]
            self.run_case(s, MUTATORS[cls](s, rng))
            i += 1
        return self.counts

    def table(self) -> str:
        """Markdown table: class -> tried / crash / hang / wrong_exception / silent_loss."""
        return outcome_table(self.counts)


def outcome_table(counts: dict[str, dict[str, int]]) -> str:
    """Markdown table of outcome counts per class, with an **all** row."""
    lines = ["| class | tried | crashes | hangs | wrong exception | silent loss |", "|---|---:|---:|---:|---:|---:|"]
    tot = dict.fromkeys(OUTCOMES, 0)
    for cls, c in counts.items():
        lines.append(f"| {cls} | {sum(c.values())} | {c['crash']} | {c['hang']} | {c['wrong_exception']} | "
                     f"{c['silent_loss']} |")
        for k in OUTCOMES:
            tot[k] += c[k]
    lines.append(f"| **all** | {sum(tot.values())} | {tot['crash']} | {tot['hang']} | {tot['wrong_exception']} | "
                 f"{tot['silent_loss']} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--events", type=int, default=300, help="elements kept per seed trace")
    ap.add_argument("--json", help="write the counts and examples here")
    ap.add_argument("--classes", nargs="*")
    args = ap.parse_args(argv)
    h = Harness(load_seeds(args.events))
    t0 = time.monotonic()
    h.run(seed=args.seed, seconds=args.seconds, classes=args.classes)
    print(h.table())
    for (cls, outcome), ex in sorted(h.examples.items()):
        print(f"  {cls}/{outcome}: {ex}")
    print(f"{h.n} cases in {time.monotonic() - t0:.0f} s; findings saved under {h.tmp}")
    if args.json:
        Path(args.json).write_text(json.dumps({"counts": h.counts, "examples": {f"{k[0]}/{k[1]}": v for k, v in
                                                                               h.examples.items()}}, indent=1))
    bad = sum(c[k] for c in h.counts.values() for k in OUTCOMES if k != "ok")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
