"""Restructuring changes no number: every analysis table equals its recorded digest.

`benchmarks/guard.py` digests key_averages, the torch text table, findings, the critical path,
perf, memory, device, modules, step times and anomalies of every trace; the digests in
tests/data/guard/digests.json were recorded before the coherence restructuring (issue 36) and are
re-recorded only by a change that means to change a number, which says so in its commit. The
bundled traces run by default, the rest of tests/data and ../shared in the slow run.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DIGESTS = ROOT / "tests" / "data" / "guard" / "digests.json"

_spec = importlib.util.spec_from_file_location("proftab_guard", ROOT / "benchmarks" / "guard.py")
assert _spec is not None and _spec.loader is not None
guard = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(guard)

WANT: dict[str, dict[str, list]] = json.loads(DIGESTS.read_text())
SOURCES = [(k, p) for k, p in guard.sources() if k in WANT]


def _params() -> list:
    return [pytest.param(k, p, id=k, marks=() if k.startswith("data/") else pytest.mark.slow) for k, p in SOURCES]


@pytest.mark.parametrize(("key", "path"), _params())
def test_every_table_equals_its_recorded_digest(key: str, path: Path) -> None:
    got = guard.compute(path)
    want = WANT[key]
    differ = [t for t, (sha, _rows, _names) in want.items() if got.get(t, ("",))[0] != sha]
    assert not differ, f"{key}: {differ} differ from the recorded digests (benchmarks/guard.py dump to see)"
    renamed = [t for t, (_sha, _rows, names) in want.items() if got[t][2] != names]
    assert not renamed, f"{key}: columns of {renamed} renamed"


def test_the_digests_cover_the_bundled_traces() -> None:
    bundled = {k for k, _ in guard.sources() if k.startswith(("data/", "tests/data/"))}
    assert bundled <= set(WANT), sorted(bundled - set(WANT))


def test_a_changed_value_changes_the_digest() -> None:
    import polars as pl

    a = pl.DataFrame({"x": [1, 2], "y": ["a", "b"]})
    assert guard.digest(a)[0] != guard.digest(a.with_columns(pl.col("x") + 1))[0]
    assert guard.digest(a)[0] != guard.digest(a.reverse())[0]  # row order is part of the answer
    assert guard.digest(a)[0] == guard.digest(a.rename({"x": "z"}))[0]  # a rename shows in the names alone
    assert guard.digest(a)[2] != guard.digest(a.rename({"x": "z"}))[2]
