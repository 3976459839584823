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
