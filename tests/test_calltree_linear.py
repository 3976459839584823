"""Call trees at any depth: 10^5 adversarial rows under a time limit, and a property test against
a tiny recursive reference (issue 30: path building was nodes x depth)."""

from __future__ import annotations

import time
from typing import Any
from unittest import mock

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proftab.calltree import MAX_PATH_NAMES, bottom_up, call_tree
from proftab.exceptions import UsageError
from proftab.intervals import tree as tree_mod

N = 100_000
LIMIT_S = 20.0  # generous: the shared 2-core machine runs ~10 test processes at once


def nested_frame(parent: np.ndarray, names: list[str], self_ns: np.ndarray, dur_ns: np.ndarray | None = None,
                 tid: np.ndarray | None = None) -> pl.DataFrame:
    """A minimal `Trace.nested` of host ops: event i has parent row `parent[i]` (-1: a root)."""
    n = len(parent)
    ids = np.arange(n, dtype=np.int64) * 3 + 5  # event ids are not row numbers
    return pl.DataFrame({
        "event_id": ids, "rank": np.zeros(n, np.int32), "pid": np.ones(n, np.int64), "pid_text": [None] * n,
        "tid": np.ones(n, np.int64) if tid is None else tid, "tid_text": [None] * n,
        "cat": pl.Series(["cpu_op"] * n, dtype=pl.Categorical), "name": names,
        "parent_id": pl.Series(np.where(parent >= 0, ids[np.maximum(parent, 0)], -1)).replace(-1, None),
        "self_ns": self_ns.astype(np.int64), "dur_ns": (self_ns if dur_ns is None else dur_ns).astype(np.int64),
    }, schema_overrides={"pid_text": pl.String, "tid_text": pl.String})


def _timed(f: Any, *args: Any, **kw: Any) -> Any:
    t0 = time.perf_counter()
    out = f(*args, **kw)
    took = time.perf_counter() - t0
    assert took < LIMIT_S, f"{took:.1f} s"
    return out


# ----------------------------------------------------------------------------- 10^5 adversarial rows


def test_a_100000_deep_chain() -> None:
    parent = np.arange(-1, N - 1)
    names = [f"op{i % 7}" for i in range(N)]
    nested = nested_frame(parent, names, np.ones(N, np.int64))
    ct = _timed(call_tree, nested, paths=False)
    assert ct.height == N and ct["depth"].to_list() == list(range(N))  # one path per level, depth-first
    assert ct["total_ns"].to_list() == list(range(N, 0, -1)) and ct["path"].null_count() == N
    top = _timed(call_tree, nested, max_depth=10)
    assert top["path"].to_list()[-1] == names[:11] and top["total_ns"][0] == N
    with pytest.raises(UsageError, match="max_depth"):  # the paths alone would hold N²/2 names
        call_tree(nested)
    bu = _timed(bottom_up, nested, max_depth=4)
    roots = bu.filter(pl.col("depth") == 0)
    assert sorted(roots["name"].to_list()) == [f"op{i}" for i in range(7)] and roots["self_ns"].sum() == N
    deepest = bu.filter(pl.col("depth") == 4)
    assert deepest["path"].to_list()[0] == [deepest["function"][0], *[f"op{(int(deepest['function'][0][2:]) - k) % 7}"
                                                                      for k in range(1, 5)]]
    with pytest.raises(UsageError, match="max_depth"):
        bottom_up(nested)


def test_a_100000_wide_tree() -> None:
    parent = np.zeros(N, np.int64)
    parent[0] = -1
    names = ["root"] + [f"leaf{i % 5000}" for i in range(1, N)]
    nested = nested_frame(parent, names, np.arange(N) % 13)
    ct = _timed(call_tree, nested)
    assert ct.height == 5001 and ct["total_ns"][0] == int((np.arange(N) % 13).sum())
    kids = ct.filter(pl.col("depth") == 1)
    assert kids["total_ns"].to_list() == sorted(kids["total_ns"].to_list(), reverse=True)
    assert kids["n_calls"].sum() == N - 1 and all(p == ["root", p[1]] for p in kids["path"].to_list())
    bu = _timed(bottom_up, nested)
    assert bu.filter(pl.col("depth") == 0)["self_ns"].sum() == ct["self_ns"].sum()


@pytest.mark.parametrize("deep", [False, True])
def test_100000_random_trees(deep: bool) -> None:
    """Random recursive trees (depth ~ log n) and random 'caterpillars' (each node's parent among the
    last 3 rows: depth ~ n/2): call_tree == the per-event sums, totals by subtree."""
    rng = np.random.default_rng(30 + deep)
    back = rng.integers(1, 4, N) if deep else rng.integers(1, np.arange(N) + 2)
    parent = np.maximum(np.arange(N) - back, -1)
    parent[0] = -1
    names = [f"f{v}" for v in rng.integers(0, 4, N)]
    self_ns = rng.integers(0, 1000, N)
    nested = nested_frame(parent, names, self_ns)
    ct = _timed(call_tree, nested, paths=not deep)
    assert ct["n_calls"].sum() == N and ct["self_ns"].sum() == int(self_ns.sum())
    roots = ct.filter(pl.col("parent_node_id").is_null())
    assert roots["total_ns"].sum() == int(self_ns.sum())
    kids = ct.filter(pl.col("parent_node_id").is_not_null()).group_by("parent_node_id").agg(pl.col("total_ns").sum())
    j = ct.join(kids, left_on="node_id", right_on="parent_node_id", how="left")
    assert (j["total_ns"] == j["self_ns"] + j["total_ns_right"].fill_null(0)).all()
    _timed(bottom_up, nested, max_depth=3)


def test_path_names_are_bounded() -> None:
    """A broom: a 3,000-deep handle with 10,000 bristles holds > MAX_PATH_NAMES path names."""
    k = 3000
    parent = np.concatenate([np.arange(-1, k - 1), np.full(10_000, k - 1)])
    names = [f"h{i}" for i in range(k)] + [f"b{i}" for i in range(10_000)]
    nested = nested_frame(parent, names, np.ones(len(parent), np.int64))
    assert (k + 1) * 10_000 > MAX_PATH_NAMES
    with pytest.raises(UsageError, match="paths=False"):
        _timed(call_tree, nested)
    assert _timed(call_tree, nested, paths=False).height == len(parent)


# ----------------------------------------------------------------------------- against a recursive reference


def _reference(parent: list[int], names: list[str], self_ns: list[int], dur_ns: list[int], tid: list[int],
               by_thread: bool, max_depth: int | None) -> tuple[dict[tuple[Any, ...], tuple[int, ...]], list[Any]]:
    """Per call path: (calls, self, total, dur); and the depth-first order (heaviest, then name, first)."""

    def path(i: int) -> tuple[Any, ...]:
        head = path(parent[i]) if parent[i] >= 0 else ((tid[i],) if by_thread else ())
        return (*head, names[i])

    agg: dict[tuple[Any, ...], list[int]] = {}
    for i in range(len(parent)):
        a = agg.setdefault(path(i), [0, 0, 0])
        a[0] += 1
        a[1] += self_ns[i]
        a[2] += dur_ns[i]
    lead = 1 if by_thread else 0
    total = {p: sum(v[1] for q, v in agg.items() if q[:len(p)] == p) for p in agg}
    out = {p: (v[0], v[1], total[p], v[2]) for p, v in agg.items()
           if max_depth is None or len(p) - lead <= max_depth + 1}
    order: list[Any] = []

    def visit(p: tuple[Any, ...]) -> None:
        if p in out:
            order.append(p)
        kids = sorted((q for q in agg if len(q) == len(p) + 1 and q[:len(p)] == p), key=lambda q: (-total[q], q[-1]))
        for q in kids:
            visit(q)

    if not by_thread:
        visit(())
    return out, order


def _bottom_up_reference(parent: list[int], names: list[str], self_ns: list[int], tid: list[int], by_thread: bool,
                         max_depth: int | None) -> dict[tuple[Any, ...], tuple[int, int]]:
    out: dict[tuple[Any, ...], list[int]] = {}
    for i in range(len(parent)):
        chain, j = [], i
        while j >= 0:
            chain.append(names[j])
            j = parent[j]
        for k in range(len(chain) if max_depth is None else min(len(chain), max_depth + 1)):
            a = out.setdefault(((tid[i],) if by_thread else ()) + tuple(chain[:k + 1]), [0, 0])
            a[0] += 1
            a[1] += self_ns[i]
    return {p: (v[0], v[1]) for p, v in out.items()}


@st.composite
def forests(draw: Any) -> tuple[list[int], list[str], list[int], list[int], list[int]]:
    n = draw(st.integers(1, 40))
    parent = [-1]
    for i in range(1, n):
        parent.append(draw(st.one_of(st.just(-1), st.integers(max(0, i - 4), i - 1), st.integers(0, i - 1))))
    names = draw(st.lists(st.sampled_from(["a", "b", "c", "ProfilerStep#1", "ProfilerStep#2", ""]),
                          min_size=n, max_size=n))
    self_ns = draw(st.lists(st.integers(0, 50), min_size=n, max_size=n))
    dur_ns = [s + draw(st.integers(0, 5)) for s in self_ns]
    root_tid = draw(st.lists(st.integers(1, 2), min_size=n, max_size=n))
    tid = []
    for i in range(n):  # a child is on its root's thread
        tid.append(root_tid[i] if parent[i] < 0 else tid[parent[i]])
    perm = draw(st.permutations(range(n)))  # rows in any order
    inv = {old: new for new, old in enumerate(perm)}
    return ([inv[parent[o]] if parent[o] >= 0 else -1 for o in perm], [names[o] for o in perm],
            [self_ns[o] for o in perm], [dur_ns[o] for o in perm], [tid[o] for o in perm])


@settings(max_examples=150, deadline=None)
@given(forests(), st.booleans(), st.sampled_from([None, 0, 1, 3]), st.booleans())
def test_call_tree_matches_a_recursive_reference(f: Any, by_thread: bool, max_depth: int | None,
                                                 deep_method: bool) -> None:
    parent, names, self_ns, dur_ns, tid = f
    names_m = ["ProfilerStep*" if s.startswith("ProfilerStep#") else s for s in names]
    nested = nested_frame(np.array(parent), names, np.array(self_ns), np.array(dur_ns), np.array(tid))
    # deep_method: the kernels' log-round methods (prefix doubling, Euler tour) instead of the level passes
    with mock.patch.object(tree_mod, "LEVEL_PASSES", 0 if deep_method else tree_mod.LEVEL_PASSES):
        ct = call_tree(nested, by_thread=by_thread, max_depth=max_depth)
        bu = bottom_up(nested, by_thread=by_thread, max_depth=max_depth)
    want, order = _reference(parent, names_m, self_ns, dur_ns, tid, by_thread, max_depth)
    lead = (lambda r: (r["tid"],)) if by_thread else (lambda r: ())
    got = {(*lead(r), *r["path"]): (r["n_calls"], r["self_ns"], r["total_ns"], r["dur_ns"])
           for r in ct.iter_rows(named=True)}
    assert got == want and ct.height == len(want)
    if not by_thread:
        assert [tuple(p) for p in ct["path"].to_list()] == order
    ids = dict(zip(ct["node_id"].to_list(), ct["path"].to_list(), strict=True))
    for r in ct.iter_rows(named=True):
        assert r["depth"] == len(r["path"]) - 1 and r["name"] == r["path"][-1]
        assert (r["parent_node_id"] is None) == (r["depth"] == 0)
        if r["parent_node_id"] is not None:
            assert ids[r["parent_node_id"]] == r["path"][:-1]
    want_bu = _bottom_up_reference(parent, names_m, self_ns, tid, by_thread, max_depth)
    got_bu = {(*lead(r), *r["path"]): (r["n_calls"], r["self_ns"]) for r in bu.iter_rows(named=True)}
    assert got_bu == want_bu and bu.height == len(want_bu)
    bids = {r["node_id"]: (*lead(r), *r["path"]) for r in bu.iter_rows(named=True)}
    pos = {nid: i for i, nid in enumerate(bu["node_id"].to_list())}
    for r in bu.iter_rows(named=True):
        assert r["function"] == r["path"][0] and r["name"] == r["path"][-1] and r["depth"] == len(r["path"]) - 1
        if r["parent_node_id"] is not None:
            assert bids[r["parent_node_id"]] == (*lead(r), *r["path"][:-1])
            assert pos[r["parent_node_id"]] < pos[r["node_id"]]


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(-1, 30), min_size=1, max_size=40), st.randoms(use_true_random=False))
def test_tree_kernels_match_a_recursive_reference(raw: list[int], rnd: Any) -> None:
    """preorder, subtree_sum, path_classes (each by both methods: level passes, log rounds), root_first_paths."""
    n = len(raw)
    parent = np.array([p if 0 <= p < i else -1 for i, p in enumerate(raw)])
    perm = np.array(rnd.sample(range(n), n))
    inv = np.argsort(perm)
    parent = np.where(parent >= 0, inv[np.maximum(parent, 0)], -1)[perm]
    order = np.array(rnd.sample(range(n), n))
    kids: dict[int, list[int]] = {i: [] for i in range(-1, n)}
    for v in order.tolist():
        kids[int(parent[v])].append(v)
    pre_ref, size_ref = [0] * n, [0] * n
    count = [0]

    def dfs(v: int) -> None:
        pre_ref[v] = count[0]
        count[0] += 1
        for k in kids[v]:
            dfs(k)
        size_ref[v] = count[0] - pre_ref[v]

    for r in kids[-1]:
        dfs(r)
    values = np.array([rnd.randrange(-9, 100) for _ in range(n)], np.int64)
    want = [int(values[[u for u in range(n) if pre_ref[v] <= pre_ref[u] < pre_ref[v] + size_ref[v]]].sum())
            for v in range(n)]
    depth = tree_mod.tree_depth(parent)
    token = np.array([rnd.randrange(3) for _ in range(n)])

    def root_path(v: int) -> tuple[int, ...]:
        return (*root_path(int(parent[v])), int(token[v])) if parent[v] >= 0 else (int(token[v]),)

    paths = [root_path(v) for v in range(n)]
    for passes in (0, 64):
        with mock.patch.object(tree_mod, "LEVEL_PASSES", passes):
            pre, size = tree_mod.preorder(parent, order)
            assert pre.tolist() == pre_ref and size.tolist() == size_ref
            assert tree_mod.subtree_sum(values, parent, depth).tolist() == want
            cls = tree_mod.path_classes(parent, token, depth)
        assert all((cls[a] == cls[b]) == (paths[a] == paths[b]) for a in range(n) for b in range(n))
        assert all(cls[parent[v]] < cls[v] for v in range(n) if parent[v] >= 0)
    assert tree_mod.subtree_sum(values, parent).tolist() == want
    rows = np.array([rnd.randrange(n) for _ in range(5)])
    levels = np.array([rnd.randrange(1, int(depth[r]) + 2) for r in rows])
    off, nodes = tree_mod.root_first_paths(parent, rows, depth, levels=levels)
    for i, r in enumerate(rows.tolist()):
        chain = []
        while r >= 0:
            chain.append(r)
            r = int(parent[r])
        assert nodes[off[i]:off[i + 1]].tolist() == chain[::-1][-int(levels[i]):]


def test_tree_kernels_refuse_a_cycle() -> None:
    cyc = np.concatenate([np.arange(1, N), [0]])
    for f in (lambda: tree_mod.preorder(cyc), lambda: tree_mod.path_classes(cyc, np.zeros(N)),
              lambda: tree_mod.subtree_sum(np.ones(N), cyc)):
        with pytest.raises(tree_mod.TreeCycleError):
            _timed(f)


def test_deep_module_frames(tmp_path: Any) -> None:
    """nn.Module frames nested 1,500 deep: the module table charges ancestors by integer ids (it hashed
    each pair's path string: depth x pairs); 7,000 deep is refused by `MAX_ANCESTOR_PAIRS`."""
    from proftab.exceptions import ProftabError
    from tests.builders import event, write_events
    from tests.fuzz.hostile import load

    for n in (1500, 7000):
        ev = [event(f"nn.Module: L_{i}", i, 2 * (n - i) + 1, cat="python_function") for i in range(n)]
        ev.append(event("aten::mm", n, 1))
        tr = load(write_events(tmp_path / f"m{n}.json.gz", ev))
        if n == 1500:
            m = _timed(tr.modules.modules)
            assert m.height == n and m["n_ops"].sum() == 1
            assert m.sort("depth")["host_total_ns"].to_list() == [(2 * (n - i) + 1) * 1000 for i in range(n)]
            # the text tree's order: one Euler tour (sorting by ancestor-path chains held depth² characters a row)
            from proftab.modules import render_modules

            text = _timed(render_modules, m, tr.modules.tree())
            rows = [line for line in text.splitlines() if "L_" in line]
            assert [line.index("L_") for line in rows[:5]] == [0, 2, 4, 6, 8] and len(rows) == n
        else:
            with pytest.raises(ProftabError, match="nest 7,000 deep"):
                _timed(tr.modules.modules)
