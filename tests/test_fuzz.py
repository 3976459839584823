"""A bounded, seeded run of the loader fuzz harness (tests/fuzz/harness.py; docs/robustness.md)."""

from __future__ import annotations

import pytest

from tests.fuzz import harness


@pytest.fixture(scope="module")
def h() -> harness.Harness:
    return harness.Harness(harness.load_seeds(max_events=120), deep_every=4)


@pytest.mark.parametrize("cls", list(harness.MUTATORS))
def test_fuzz_class(h: harness.Harness, cls: str) -> None:
    """8 cases per mutation class: only proftab errors, exact accounting, no wrap, full salvage."""
    counts = h.run(seed=12, cases=8, classes=[cls])[cls]
    found = {k: v for k, v in counts.items() if k != "ok" and v}
    assert not found, (found, {k: v for k, v in h.examples.items() if k[0] == cls})


def test_truncation_at_every_element_boundary(h: harness.Harness) -> None:
    seed = h.seeds[0]
    for j in range(0, len(seed.spans), 15):
        a, b = seed.spans[j]
        for cut in (a, b):
            out = h.run_case(seed, harness.Case("truncate", seed.text[:cut], j, salvage_loads=j > 0))
            assert out == "ok", h.examples


def test_fuzz_analyses_bounded() -> None:
    """Seeded random per-op perf args (every modelled op name), overlapping ops / module frames /
    syncs / [memory] bytes through tree, modules, critical path, memory and perf, mutated dataset
    manifests and part files, and random snapshot pickles (tests/fuzz/hostile.py): each case in a
    child process under RLIMIT_AS and a time limit; only right answers or ProftabErrors."""
    from tests.fuzz import hostile

    res = hostile.run_bounded(hostile.random_cases(seed=30, n=8))
    bad = [(r.name, r.outcome, r.detail) for r in res if r.outcome != "ok"]
    assert not bad, bad
    assert {r.cls for r in res} <= {f"fuzz {k}" for k in hostile._GENERATORS}
