"""The scanner's column writes against a plain-Python reading of the same JSON (issue 29, commit side).

A column keeps no validity bitmap while every row so far is valid and builds it at its first null row
(or at finish, when only its last rows are null); a string column appends its next row inline and fills
a run of null rows at once; a dictionary looks a string up through a front cache keyed by length and
first/last 8 bytes before its hash table. These cases put null runs at the start, in the middle and at
the end of every kind of column (fixed, string, dictionary, typed number, typed text), with names that
share a cache slot, and compare every value and null with `json.loads`, fed whole and in small pieces.
"""

from __future__ import annotations

import json
import random
from typing import TYPE_CHECKING, Any

import pytest

from proftab import schema
from proftab.io import _kineto, kineto
from proftab.io.kineto import columns

if TYPE_CHECKING:
    import polars as pl

TYPED = list(schema.TYPED_COLUMNS)


def _scan(text: bytes, piece: int | None) -> dict[str, Any]:
    parser = _kineto.Parser(kineto.TYPED_SPEC, salvage=False, max_token=kineto.MAX_TOKEN_BYTES)
    if piece is None:
        parser.feed(text)
    else:
        for i in range(0, len(text), piece):
            parser.feed(text[i:i + piece])
    res: dict[str, Any] = parser.finish()
    assert res["error"] is None
    return res


def _values(series: pl.Series | None, n: int) -> list[Any]:
    return [None] * n if series is None else series.to_list()


def _check(events: list[dict[str, Any]], piece: int | None) -> None:
    text = json.dumps({"traceEvents": events}).encode()
    res = _scan(text, piece)
    tab = res["events"]
    n = len(events)
    assert tab["rows"] == n and res["other"]["rows"] == 0

    def col(key: str) -> list[Any]:
        return [e.get(key) for e in events]

    def arg(key: str) -> list[Any]:
        return [e.get("args", {}).get(key) for e in events]

    assert _values(columns.fixed_column(tab["pid"], n, "i64", "pid"), n) == col("pid")
    def ns(us: list[Any]) -> list[Any]:
        return [None if v is None else v * 1000 for v in us]

    assert _values(columns.fixed_column(tab["ts"], n, "i64", "ts"), n) == ns(col("ts"))
    assert _values(columns.fixed_column(tab["dur"], n, "i64", "dur"), n) == ns(col("dur"))
    assert _values(columns.fixed_column(tab["event_index"], n, "i64", "event_index"), n) == list(range(n))
    assert _values(columns.dict_column(tab["name"], n, "name", strings=True), n) == col("name")
    assert _values(columns.dict_column(tab["cat"], n, "cat", strings=True), n) == col("cat")
    assert _values(columns.string_column(tab["tid_text"], n, "tid_text"), n) == [
        t if isinstance(t, str) else None for t in col("tid")]
    ext = TYPED.index("external_id")
    assert _values(columns.fixed_column(tab["typed"][ext], n, "i64", "x"), n) == arg("External id")
    occ = TYPED.index("blocks_per_sm")
    assert _values(columns.fixed_column(tab["typed"][occ], n, "f64", "x"), n) == arg("blocks per SM")
    stack = TYPED.index("call_stack")
    assert _values(columns.string_column(tab["typed"][stack], n, "x"), n) == arg("Call stack")
    dims = TYPED.index("input_dims")
    assert _values(columns.string_column(tab["typed"][dims], n, "x"), n) == [
        None if d is None else json.dumps(d) for d in arg("Input Dims")]  # the JSON text as written
    rest = [{k: v for k, v in e.get("args", {}).items() if k == "zz"} for e in events]
    assert _values(columns.string_column(tab["args"], n, "args"), n) == [
        None if not r else '{"zz": ' + json.dumps(r["zz"]) + "}" for r in rest]


def _event(i: int, present: set[str], name: str) -> dict[str, Any]:
    e: dict[str, Any] = {"ph": "X", "name": name}
    if "pid" in present:
        e["pid"] = i % 3
    if "tid" in present:
        e["tid"] = f"t{i % 2}"
    if "ts" in present:
        e["ts"] = i
    if "dur" in present:
        e["dur"] = i % 5
    if "cat" in present:
        e["cat"] = "cpu_op" if i % 7 else ""
    args: dict[str, Any] = {}
    if "ext" in present:
        args["External id"] = i
    if "occ" in present:
        args["blocks per SM"] = i / 4
    if "stack" in present:
        args["Call stack"] = "a.py(1): f;" * (i % 3)
    if "dims" in present:
        args["Input Dims"] = [[i, 2], []]
    if "zz" in present:
        args["zz"] = i % 4
    if args:
        e["args"] = args
    return e


KEYS = ["pid", "tid", "ts", "dur", "cat", "ext", "occ", "stack", "dims", "zz"]


@pytest.mark.parametrize("piece", [None, 97])
@pytest.mark.parametrize("shape", ["dense", "null_head", "null_middle", "null_tail", "one_null", "random"])
def test_null_runs_in_every_kind_of_column(shape: str, piece: int | None) -> None:
    rng = random.Random(shape)
    n = 1500  # more than one bitmap byte and one 64-row word either side of every run

    def present(i: int) -> set[str]:
        if shape == "dense":
            return set(KEYS)
        if shape == "null_head":
            return set(KEYS) if i >= 700 else set()
        if shape == "null_middle":
            return set() if 600 <= i < 901 else set(KEYS)
        if shape == "null_tail":
            return set(KEYS) if i < 1493 else set()
        if shape == "one_null":
            return {k for k in KEYS if i != KEYS.index(k) * 131 + 5}
        return {k for k in KEYS if rng.random() < 0.6}

    _check([_event(i, present(i), f"op{i % 37}") for i in range(n)], piece)


def test_names_sharing_a_front_cache_slot() -> None:
    # same length and same first and last 8 bytes: one front-cache slot for all; each must keep its code
    names = [f"aaaaaaaa{i:06d}bbbbbbbb" for i in range(3000)]
    names += [f"aaaaaaaa{i:06d}bbbbbbbb" for i in range(2999, -1, -7)] + ["", "x", "xy", "abcd", "abcdefg", "abcdefgh"]
    names += ["", "abcdefgh", "abcdefg", "abcd", "xy", "x"]
    _check([{"ph": "X", "name": s, "ts": i, "pid": 1} for i, s in enumerate(names)], None)
