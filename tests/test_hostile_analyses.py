"""Hostile input, round 2 (issue 30): the analyses, datasets and snapshots under attack.

Every reproducer of `tests/fuzz/hostile.py` runs in a child process under a memory limit
(``RLIMIT_AS``) and its own time limit, so a bomb or a hang fails the test, not the machine.
The tests below it check the errors name what is wrong, and every tree/DAG kernel of
`proftab.intervals` on 10^5 adversarial rows against a loop or a closed form.
"""

from __future__ import annotations

import os
import pickle
import time
from typing import TYPE_CHECKING

import numpy as np
import polars as pl
import pytest

import proftab as pt
from proftab.exceptions import UsageError
from proftab.intervals import dag, merge, overlap, tree
from proftab.intervals.nest import nest
from tests.builders import event, write_events
from tests.fuzz import hostile

if TYPE_CHECKING:
    from pathlib import Path

CLASSES = sorted({cls for cls, _, _ in hostile.REPRODUCERS.values()})


@pytest.mark.parametrize("cls", CLASSES)
def test_reproducers_of_each_class_are_bounded(cls: str) -> None:
    """No crash, hang, raw error or wrong number: each answer is right or a ProftabError."""
    names = [n for n, (c, _, _) in hostile.REPRODUCERS.items() if c == cls]
    res = hostile.run_bounded(names)
    bad = [(r.name, r.outcome, r.detail) for r in res if r.outcome != "ok"]
    assert not bad, bad
    assert len(res) == len(names)


def test_the_runner_catches_a_hang_and_a_bomb() -> None:
    """The bounds themselves: a sleeping case is a hang, an allocation past the limit a crash."""
    res = hostile.run_bounded(["selftest_sleep", "selftest_bomb", "selftest_resident"], memory=2**30)
    out = {r.name: r.outcome for r in res}
    assert out == {"selftest_sleep": "hang", "selftest_bomb": "crash", "selftest_resident": "crash"}, res


# ----------------------------------------------------------------------------- the errors say what is wrong


@pytest.fixture
def ds(tmp_path: Path) -> Path:
    return hostile.dataset(tmp_path)


def test_manifest_rank_twice_is_named(ds: Path) -> None:
    hostile.manifest_edit(ds, lambda m: m["ranks"].append(m["ranks"][0]))
    with pytest.raises(pt.TraceError, match="rank 0 is listed more than once") as info:
        pt.scan(ds)
    assert "_proftab.json" in str(info.value)


@pytest.mark.parametrize("value", [7, "x", ["../outside"], ["a/b"], ["events"], [3]])
def test_summaries_must_be_plain_names(ds: Path, value: object) -> None:
    hostile.manifest_edit(ds, lambda m: m.__setitem__("summaries", value))
    with pytest.raises(pt.TraceError, match="'summaries' must be a list of table names"):
        pt.scan(ds)


def test_part_file_column_types_are_checked_at_scan(ds: Path) -> None:
    part = ds / "events" / "rank=0" / "part-0.parquet"
    meta = pl.read_parquet_metadata(part)
    pl.read_parquet(part).with_columns(pl.col("start_ns").cast(pl.String)).write_parquet(part, metadata=meta)
    with pytest.raises(pt.TraceError, match="start_ns is String, expected Int64") as info:
        pt.scan(ds)
    assert "part-0.parquet" in str(info.value)


def test_a_fifo_part_file_is_refused_without_blocking(ds: Path) -> None:
    part = ds / "flows" / "rank=0" / "part-0.parquet"
    part.unlink()
    os.mkfifo(part)
    with pytest.raises(pt.TraceError, match="not a regular file"):
        pt.scan(ds)


def test_a_symlink_out_of_the_dataset_is_refused(ds: Path, tmp_path: Path) -> None:
    part = ds / "flows" / "rank=0" / "part-0.parquet"
    outside = tmp_path / "outside.parquet"
    part.rename(outside)
    part.symlink_to(outside)
    with pytest.raises(pt.TraceError, match="not a regular file inside the dataset"):
        pt.scan(ds)


def test_a_stored_parent_cycle_is_a_clear_error(tmp_path: Path) -> None:
    ds = hostile.dataset(tmp_path, [event("a", 0, 10), event("b", 1, 5), event("c", 2, 1)])
    part = ds / "events" / "rank=0" / "part-0.parquet"
    meta = pl.read_parquet_metadata(part)
    df = pl.read_parquet(part)
    ids = df["event_id"].to_list()
    df.with_columns(parent_id=pl.Series([ids[2], ids[0], ids[1]])).write_parquet(part, metadata=meta)
    tr = pt.scan(ds)
    with pytest.raises(pt.TraceError, match="parent_id links form a cycle"):
        tr.tree.call_tree()
    (tmp_path / "ok").mkdir()
    assert pt.scan(hostile.dataset(tmp_path / "ok")).tree.call_tree().height > 0


def test_a_scan_is_pinned_to_its_generation(tmp_path: Path) -> None:
    ds = hostile.dataset(tmp_path)
    tr = pt.scan(ds)
    assert tr.collect("events", ["name"]).height == 4
    new = write_events(tmp_path / "new.json.gz", [event("other", 0, 5)])
    pt.load(new).to_parquet(ds, force=True)
    with pytest.raises(pt.TraceError, match="replaced or removed after it was scanned"):
        tr.collect("events")
    assert pt.scan(ds).collect("events")["name"].to_list() == ["other"]


def test_snapshot_bombs_are_refused_before_expansion() -> None:
    from proftab.memory.snapshot import MAX_DEPTH, read_snapshot

    bomb = hostile._memo_bomb()
    assert len(bomb) < 6000
    t0 = time.perf_counter()
    with pytest.raises(pt.ProftabError, match="expands to over"):
        read_snapshot(bomb)
    assert time.perf_counter() - t0 < 5
    deep: list[object] = []
    for _ in range(MAX_DEPTH + 5):
        deep = [deep]
    with pytest.raises(pt.ProftabError, match="nests containers over"):
        read_snapshot(pickle.dumps({"segments": deep, "device_traces": []}))
    loop: list[object] = []
    loop.append(loop)
    with pytest.raises(pt.ProftabError, match="reference cycle"):
        read_snapshot(pickle.dumps({"segments": [], "device_traces": [loop]}))
    # a normal snapshot with shared frames still reads
    frames = [{"filename": "f.py", "line": 1, "name": "g"}]
    snap = read_snapshot(pickle.dumps({"segments": [], "device_traces": [[
        {"action": "alloc", "addr": 1, "size": 8, "time_us": 1, "frames": frames},
        {"action": "free_requested", "addr": 1, "size": 8, "time_us": 2, "frames": frames}]]}))
    assert snap.trace["stack"].to_list() == [["f.py:1:g"], ["f.py:1:g"]]


def test_perf_bad_ops_get_a_reason_and_the_rest_stands(tmp_path: Path) -> None:
    d = 2**21
    tr = hostile._perf_trace(tmp_path, {"Input Dims": [[d, d], [d, d]], "Input type": ["float", "float"]})
    ops = tr.perf.ops().sort("event_id")
    assert ops["flops"].to_list() == [None, 2 * 4 * 8 * 16]
    assert ops["bytes"].to_list()[0] == (2 * d * d + d * d) * 4  # bytes fit: kept
    assert ops["model_error"].to_list() == ["FLOPs or bytes overflow int64", None]
    tr = hostile._perf_trace(tmp_path, {"Input Dims": [[-3, 5], [5, -7]], "Input type": ["float", "float"]})
    assert tr.perf.ops().sort("event_id")["model_error"].to_list() == ["negative dimension", None]
    tr = hostile._perf_trace(tmp_path, {"Input Dims": [[4, 8], [8, 16]], "Input type": ["float", "float"],
                                        "Concrete Inputs": [[1]]})
    ops = tr.perf.ops().sort("event_id")
    assert ops["flops"].to_list() == [1024, 1024]  # an mm needs no concrete inputs: modelled, the issue noted
    assert ops["model_error"].to_list() == ["malformed Concrete Inputs", None]


def test_what_if_and_window_arguments_are_checked(tmp_path: Path) -> None:
    tr = hostile._perf_trace(tmp_path, {})
    for bad in (-1, float("nan"), float("inf"), "2"):
        with pytest.raises(UsageError, match="finite number >= 0"):
            tr.critical_path.what_if(scale={"kernel": bad})  # type: ignore[dict-item]
    with pytest.raises(UsageError, match="two int64 ns"):
        tr.critical_path.path(step=(10**30, 1))
    assert hostile.cli("critical-path", str(tmp_path / "t.json.gz"), "--what-if", "kernel=nan") == 2
    assert hostile.cli("critical-path", str(tmp_path / "t.json.gz"), "--window", str(2**63), "1") == 2


def test_memory_totals_that_pass_int64_are_null(tmp_path: Path) -> None:
    big = 2**62
    ev = [event("aten::empty", 0, 100)] + [
        {"ph": "i", "s": "t", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 1, "ts": 1 + i,
         "args": {"Device Type": 1, "Device Id": 0, "Addr": 4096 * (i + 1), "Bytes": big}} for i in range(3)]
    tl = pt.load(write_events(tmp_path / "t.json.gz", ev)).memory.timeline()
    assert tl["replayed_bytes"].to_list() == [big, None, None]  # 2^63 and 3 * 2^62 do not fit int64: null, not wrapped


# ----------------------------------------------------------------------------- kernels at 10^5 adversarial rows

N = 100_000


def _timed(f, *args, limit: float = 20.0):  # type: ignore[no-untyped-def]
    t0 = time.perf_counter()
    out = f(*args)
    assert time.perf_counter() - t0 < limit, f"{f.__name__}: {time.perf_counter() - t0:.1f} s"
    return out


def test_tree_kernels_on_a_deep_chain() -> None:
    parent = np.arange(-1, N - 1)
    assert (_timed(tree.tree_depth, parent) == np.arange(N)).all()
    target = np.zeros(N, bool)
    target[::1000] = True
    got = _timed(tree.nearest_ancestor, parent, np.arange(N), target)
    want = np.where(np.arange(N) % 1000 == 0, np.arange(N) - 1000, np.arange(N) // 1000 * 1000)
    want[0] = -1
    assert (got == want).all()
    start = np.arange(N, dtype=np.int64)
    assert (_timed(tree.containing_ancestor, parent, start, start + 2) == -1).all()  # a crossing chain
    # every 10th row reaches far: the others re-parent to the nearest such row above them
    end = start + 2
    end[::10] = 10 * N
    got = _timed(tree.containing_ancestor, parent, start, end)
    want = np.where(np.arange(N) % 10 == 0, np.arange(N) - 10, np.arange(N) // 10 * 10)
    want[0] = -1
    assert (got == want).all()
    depth = tree.tree_depth(parent)
    assert (_timed(tree.subtree_sum, np.ones(N, np.int64), parent, depth) == N - np.arange(N)).all()
    pos = _timed(tree.row_positions, np.zeros(N, np.int32), np.arange(N) * 7, np.zeros(3, np.int32),
                 np.array([0, 7 * (N - 1), 5]))
    assert pos.tolist() == [0, N - 1, -1]
    item, anc = _timed(tree.ancestor_pairs, np.full(N, -1), np.arange(N), True)  # output-sized: flat here
    assert len(item) == N


def test_tree_kernels_refuse_a_cycle() -> None:
    cyc = np.concatenate([np.arange(1, N), [0]])  # one cycle through every row
    for f in (lambda: tree.tree_depth(cyc), lambda: tree.nearest_ancestor(cyc, np.arange(N), np.zeros(N, bool)),
              lambda: tree.ancestor_pairs(cyc, np.arange(3), True),
              lambda: tree.containing_ancestor(cyc, np.zeros(N, np.int64), np.arange(N, dtype=np.int64))):
        t0 = time.perf_counter()
        with pytest.raises(tree.TreeCycleError):
            f()
        assert time.perf_counter() - t0 < 20


def test_containing_ancestor_matches_a_loop_on_random_forests() -> None:
    rng = np.random.default_rng(3)
    for trial in range(60):
        n = int(rng.integers(1, 300))
        parent = np.array([-1] + [int(rng.integers(max(0, i - 40), i)) for i in range(1, n)]) if trial % 2 else \
            np.arange(-1, n - 1)
        start = rng.integers(0, 100, n)
        end = start + rng.integers(0, 100, n)
        want = []
        for i in range(n):
            p = parent[i]
            while p >= 0 and not (end[p] > start[i] and end[p] >= end[i]):
                p = parent[p]
            want.append(p)
        assert tree.containing_ancestor(parent, start, end).tolist() == want


def test_walk_back_on_a_long_chain_and_a_cycle() -> None:
    pred = np.arange(-1, N - 1)
    assert (_timed(dag.walk_back, pred, N - 1) == np.arange(N)).all()
    pred = np.concatenate([[-1], np.arange(N - 1)])[::-1].copy()  # N-1 -> ... no: a reversed chain
    pred = np.arange(1, N + 1)
    pred[-1] = N - 2  # the last two nodes point at each other: a zero-weight tie cycle
    seq = _timed(dag.walk_back, pred, 0)
    assert seq[-1] == 0 and len(seq) == N and len(set(seq.tolist())) == N


def test_dag_longest_path_on_two_long_chains() -> None:
    """Two chains of N/2 nodes, a cross edge from every node of the first to its twin: 2 rounds."""
    h = N // 2
    w = np.concatenate([np.full(h, 2, np.int64), np.ones(h, np.int64)])
    head = np.zeros(N, bool)
    head[[0, h]] = True
    base = np.full(N, dag.UNREACHED)
    base[[0, h]] = 0
    src = np.arange(h)
    x, rounds = _timed(dag.earliest, w, head, base, src, src + h, np.zeros(h, np.int64))
    assert (x[h:] == 2 * np.arange(h)).all() and rounds <= 3
    preds = dag.argmax_pred(x, w, head, base, src, src + h, np.zeros(h, np.int64))
    path = _timed(dag.walk_back, preds.node, N - 1)
    assert path[0] == 0 and path[-1] == N - 1


def test_interval_kernels_on_adversarial_rows() -> None:
    start = np.arange(N, dtype=np.int64)
    chain = pl.DataFrame({"k": np.zeros(N, np.int64), "start_ns": start, "end_ns": start + 2,
                          "event_id": np.arange(N)})
    nested = _timed(lambda: nest(chain, by=["k"]))  # a crossing chain: each row starts inside the previous
    assert nested["parent_id"].to_list()[:3] == [None, 0, 1]
    assert int(nested["self_ns"].sum()) == N + 1  # the union, to the nanosecond
    merged = _timed(lambda: merge.merge_intervals(chain, by=["k"]))
    assert merged.select("start_ns", "end_ns").rows() == [(0, N + 1)]
    assert _timed(lambda: merge.union_ns(chain, by=["k"]))["union_ns"].to_list() == [N + 1]
    # every row overlaps its two neighbours: 3N - 2 pairs, found without N^2 work
    li, ri = _timed(overlap.overlap_pairs, start, start + 2, start, start + 2)
    assert len(li) == 3 * N - 2
    assert (np.abs(li - ri) <= 1).all()
