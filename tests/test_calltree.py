"""Call trees (top-down and bottom-up) on real traces and synthetic edge cases."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import polars as pl
import pytest

import proftab as pt
from proftab import schema
from proftab.calltree import bottom_up, call_tree
from proftab.intervals.tree import tree_depth
from tests.builders import load_events, op

ROOT = Path(__file__).resolve().parents[1]
CNN = ROOT / "data" / "train_cnn.pt.trace.json.gz"
H100 = ROOT / "data" / "h100_bert_small.pt.trace.json.gz"
SHARED = Path(__file__).resolve().parents[1].parent / "shared"


def _host(nested: pl.DataFrame) -> pl.DataFrame:
    cat = pl.col("cat").cast(pl.String)
    return nested.filter(~cat.is_in(list(schema.DEVICE_CATEGORIES | schema.PROFILER_SPAN_CATEGORIES)).fill_null(True))


def _paths_by_walk(nested: pl.DataFrame) -> dict[tuple[str, ...], list[int]]:
    """Oracle: per event, walk parent_id links in Python; group self_ns by name path."""
    host = _host(nested)
    rows = {(r["rank"], r["event_id"]): r for r in host.iter_rows(named=True)}
    out: dict[tuple[str, ...], list[int]] = {}
    for r in rows.values():
        path = []
        cur = r
        while cur is not None:
            name = cur["name"]
            path.append("ProfilerStep*" if name.startswith("ProfilerStep#") else name)
            pid = cur["parent_id"]
            cur = rows.get((cur["rank"], pid)) if pid is not None else None
        out.setdefault(tuple(reversed(path)), []).append(r["self_ns"])
    return out


@pytest.mark.parametrize("path", [CNN, H100], ids=["train_cnn", "h100_bert"])
def test_call_tree_matches_parent_walk_oracle(path: Path) -> None:
    tr = pt.load(path)
    ct = tr.tree.call_tree()
    oracle = _paths_by_walk(tr.nested)
    got = {tuple(p): (c, s) for p, c, s in ct.select("path", "n_calls", "self_ns").iter_rows()}
    assert got == {p: (len(v), sum(v)) for p, v in oracle.items()}
    # totals: Σ self over the subtree; roots add up to all host self time (= busy time per thread)
    assert ct.filter(pl.col("depth") == 0)["total_ns"].sum() == _host(tr.nested)["self_ns"].sum()
    kids = ct.filter(pl.col("parent_node_id").is_not_null()).group_by("parent_node_id").agg(pl.col("total_ns").sum())
    joined = ct.join(kids, left_on="node_id", right_on="parent_node_id", how="left", suffix="_kids")
    assert (joined["total_ns"] == joined["self_ns"] + joined["total_ns_kids"].fill_null(0)).all()
    # depth-first order: every node comes right after its parent's earlier descendants
    pos = {nid: i for i, nid in enumerate(ct["node_id"].to_list())}
    assert all(pos[p] < pos[n] for n, p in ct.select("node_id", "parent_node_id").iter_rows() if p is not None)
    assert (ct["depth"] == ct["path"].list.len() - 1).all()


def test_call_tree_real_structure_train_cnn() -> None:
    ct = pt.load(CNN).tree.call_tree()
    root = ct.row(0, named=True)
    assert root["name"] == "ProfilerStep*" and root["n_calls"] == 4 and root["total_share"] == 1.0
    phases = ct.filter(pl.col("depth") == 1)["name"].to_list()
    assert phases[:3] == ["forward", "backward", "optimizer_step"]  # record_function phases, heaviest first
    assert (ct["dur_ns"] == ct["total_ns"]).all()  # train_cnn nests properly


def test_bottom_up_inverts_self_time() -> None:
    tr = pt.load(CNN)
    bu = tr.tree.bottom_up()
    roots = bu.filter(pl.col("depth") == 0)
    by_name = (_host(tr.nested).group_by(pl.col("name").str.replace(r"^ProfilerStep#\d+$", "ProfilerStep*"))
               .agg(pl.col("self_ns").sum(), pl.len().alias("calls")).filter(pl.col("self_ns") > 0))
    got = dict(roots.select("name", "self_ns").iter_rows())
    assert got == dict(by_name.select("name", "self_ns").iter_rows())
    assert roots["self_ns"].to_list() == sorted(roots["self_ns"].to_list(), reverse=True)
    # children of a node are its callers and split its self time exactly
    kids = bu.filter(pl.col("parent_node_id").is_not_null()).group_by("parent_node_id").agg(pl.col("self_ns").sum())
    j = bu.join(kids, left_on="node_id", right_on="parent_node_id", suffix="_kids")
    assert (j["self_ns_kids"] <= j["self_ns"]).all()
    pool = bu.filter(pl.col("path") == ["aten::max_pool2d_with_indices", "aten::max_pool2d"])
    assert pool.height == 1 and pool["self_ns"][0] == got["aten::max_pool2d_with_indices"]
    assert bu.filter(pl.col("depth") <= 1).height == tr.tree.bottom_up(max_depth=1).height


def test_synthetic_overrun_recursion_threads(tmp_path: Path) -> None:
    ev = [op("a", 0, 100), op("a", 10, 50), op("b", 20, 10), op("b", 80, 40),  # b at 80 overruns a (ends 120 > 100)
          op("c", 85, 5), op("a", 0, 30, tid=2), op("z", 40, 0, tid=2)]
    tr = load_events(tmp_path, ev, name="t.json.gz")
    ct = tr.tree.call_tree()
    rows = {tuple(p): (c, s, t, d) for p, c, s, t, d in
            ct.select("path", "n_calls", "self_ns", "total_ns", "dur_ns").iter_rows()}
    us = 1000
    assert rows[("a",)] == (2, (100 - 50 - 20) * us + 30 * us, (100 + 40 - 20) * us + 30 * us, 130 * us)
    assert rows[("a", "a")] == (1, 40 * us, 50 * us, 50 * us)          # recursion is its own path
    assert rows[("a", "b")] == (1, 35 * us, 40 * us, 40 * us)          # overrun kept under its parent path
    assert rows[("a", "b", "c")] == (1, 5 * us, 5 * us, 5 * us)
    assert rows[("z",)][1:] == (0, 0, 0)                               # zero-length root
    per_thread = tr.tree.call_tree(by_thread=True)
    assert set(per_thread.filter(pl.col("depth") == 0).select("tid", "name").iter_rows()) == {(1, "a"), (2, "a"),
                                                                                               (2, "z")}
    assert per_thread["self_ns"].sum() == ct["self_ns"].sum() == _host(tr.nested)["self_ns"].sum()
    assert tr.tree.call_tree(max_depth=0)["name"].to_list() == ["a", "z"]


def test_device_trees_and_empty(tmp_path: Path) -> None:
    tr = pt.load(H100)
    host = tr.tree.call_tree()
    with_dev = tr.tree.call_tree(device=True)
    dev_roots = set(with_dev.filter(pl.col("depth") == 0)["name"]) - set(host.filter(pl.col("depth") == 0)["name"])
    assert "ProfilerStep*" in dev_roots  # the gpu_user_annotation span on the stream
    assert with_dev["self_ns"].sum() > host["self_ns"].sum()
    empty = load_events(tmp_path, [{"ph": "i", "name": "x", "ts": 1, "pid": 1, "tid": 1, "s": "t"}], name="e.json.gz")
    assert empty.tree.call_tree().is_empty() and empty.tree.bottom_up().is_empty()


def test_tree_depth_pointer_doubling() -> None:
    rng = np.random.default_rng(0)
    n = 500
    parent = np.array([-1] + [int(rng.integers(-1, i)) for i in range(1, n)])
    want = np.zeros(n, np.int64)
    for i in range(n):
        p = parent[i]
        want[i] = 0 if p < 0 else want[p] + 1
    assert (tree_depth(parent) == want).all()


@pytest.mark.skipif(not (SHARED / "traces" / "torch213").is_dir(), reason="needs ../shared")
def test_call_tree_llama_with_stack_overlaps() -> None:
    """with_stack llama trace: record_function spans overlap python frames; sums stay exact."""
    path = SHARED / "traces" / "torch213" / "llama_generate_shapes_stack" / "trace.json.gz"
    if not path.exists():
        pytest.skip("llama trace missing")
    tr = pt.load(path)
    ct = call_tree(tr.nested)
    assert ct.filter(pl.col("depth") == 0)["total_ns"].sum() == _host(tr.nested)["self_ns"].sum()
    assert (ct["self_ns"] >= 0).all()
    bu = bottom_up(tr.nested, max_depth=2)
    assert bu.filter(pl.col("depth") == 0)["self_ns"].sum() == ct["self_ns"].sum()
