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


@pytest.mark.slow
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


@pytest.mark.slow
def test_renderers_on_a_pty_bounded() -> None:
    """Every CLI renderer (summary, perf, memory, modules, critical-path, check, diff, findings, report,
    plot) and tr.findings() / tr.report() on a pseudo-terminal, over one random trace with hostile names
    and file name (tests/fuzz/terminal.py): a child process under an RSS and a per-renderer time limit;
    no crash, hang, raw error or raw control character."""
    from tests.fuzz import terminal

    res = terminal.run(1, seed=3, kinds=["random"], limit_s=60, n_ops=60)
    assert len(res) == 14
    bad = [(r.cls, r.outcome, r.detail) for r in res if r.outcome != "ok"]
    assert not bad, bad
    shown = {r.cls for r in res if r.escaped}
    # the hostile names reached the terminal (as escapes)
    assert {"summary", "modules", "critical-path --by name", "diff"} <= shown, shown


def test_pty_judge_flags_raw_output() -> None:
    """The pty harness's oracle: rich's colours pass, anything else raw is an injection."""
    from tests.fuzz.terminal import judge

    assert judge("\x1b[1;31maten::mm\x1b[0m  1.2ms\n", 0) == ("ok", "")
    assert judge("aten::bad\\x1b]8;;x\\x07 \\u202e", 0) == ("ok", "")
    for raw in ("a\x1b]8;;https://e.example\x1b\\x", "a\x1b[2Jb", "x\u202ey", "x\x9b2J", "x\ry", "a\x07"):
        assert judge(raw, 0)[0] == "injection", repr(raw)
    assert judge("│ x │\n│ FAKE ROW │ 1 │\n", 0)[0] == "injection"
    assert judge("proftab: internal error: KeyError: 'x'", 1)[0] == "raw_error"
    assert judge("proftab: internal error: MemoryError", 1)[0] == "crash"
