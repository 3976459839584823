"""`tr.memory`: the [memory] timeline, alloc/free pairing, the peak, growth, on real traces.

Exactness checks run on every trace with [memory] events: the bundled ones here, and the whole
../shared corpus when present (torch213 cases with torch's own key_averages, public GPU traces).
"""

from __future__ import annotations

import importlib.util
import json
from typing import TYPE_CHECKING

import hypothesis.strategies as st
import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings

import proftab as pt
from proftab import schema
from proftab.intervals.tree import row_positions, subtree_sum
from proftab.memory import allocations, enclosing_ops, memory_events, timeline
from proftab.torch.aggregate import host_tree, key_averages
from tests.conftest import BUNDLED, SHARED_PUBLIC, SHARED_TORCH213, TORCH213, needs_shared

if TYPE_CHECKING:
    from pathlib import Path

LOCAL = [BUNDLED / "train_cnn.pt.trace.json.gz", BUNDLED / "h100_bert_small.pt.trace.json.gz",
         BUNDLED / "mi300_bert_small.pt.trace.json.gz", TORCH213 / "train_cnn" / "trace.json.gz"]
#: ../shared traces with [memory] events (measured: the other shared traces have none)
SHARED_MEMORY = [
    *(SHARED_PUBLIC / "tracelens" / name for name in (
        "h100__Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz",
        "h100__facebook_timesformer-base-finetuned-k400__1016002.json.gz",
        "h100__google_owlv2-large-patch14-ensemble__1016001.json.gz",
        "inference__vllm_decode_full__capture_traces__graph_capture_rank_0.1773709742341309550.pt.trace.json.gz",
        "mi300__Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz",
        "mi300__ddp_resnet18_no_pool__train_resnet18.json.gz",
        "mi300__google_owlv2-large-patch14-ensemble__1016001.json.gz",
        "perf_model__normalization__normalization_layer_test.json.gz")),
    SHARED_PUBLIC / "hta" / "df_index_resolver__df_index_resolver.json.gz",
    SHARED_PUBLIC / "tb_plugin" / "samples__resnet50_num_workers_0__worker0.1623143089861.pt.trace.json.gz",
    SHARED_PUBLIC / "tb_plugin" / "samples__resnet50_num_workers_4__worker0.1623212756351.pt.trace.json.gz",
    SHARED_TORCH213 / "llama_generate_shapes_stack" / "trace.json.gz",
]

_CACHE: dict[Path, pt.Trace] = {}


def _load(path: Path) -> pt.Trace:
    if path not in _CACHE:
        _CACHE[path] = pt.load(path)
    return _CACHE[path]


def _params(paths: list[Path], shared: bool = False) -> list[object]:
    marks = [needs_shared, pytest.mark.slow] if shared else []  # a sweep over ../shared: slow
    return [pytest.param(p, id=p.name[:48], marks=marks) for p in paths]


ALL = _params(LOCAL) + _params(SHARED_MEMORY, shared=True)


# ------------------------------------------------------------------ timeline: exact replay


@pytest.mark.parametrize("path", ALL)
def test_replay_of_bytes_reproduces_every_total_allocated_change(path: Path) -> None:
    tl = _load(path).memory.timeline()
    assert tl.height > 0
    recorded = tl.filter(pl.col("allocated_bytes").is_not_null())
    if recorded.is_empty():  # torch <= 1.9 writes no Total Allocated: only the replay exists
        assert tl["live_bytes"].equals(tl["replayed_bytes"])
        return
    # allocated[i] - allocated[i-1] == bytes[i] for every event of every device
    step = recorded.with_columns(prev=pl.col("allocated_bytes").shift(1).over(["rank", "device_type", "device"]))
    changes = step.filter(pl.col("prev").is_not_null())
    assert (changes["allocated_bytes"] - changes["prev"]).equals(changes["bytes"], check_names=False)
    # hence allocated - replayed is one constant per device: what was allocated before the window
    pre = tl.group_by(["rank", "device_type", "device"]).agg(pl.col("pre_window_bytes").n_unique().alias("n"),
                                                               pl.col("pre_window_bytes").first().alias("v"))
    assert (pre["n"] == 1).all()
    assert (pre["v"] >= 0).all()


@pytest.mark.parametrize("path", ALL)
def test_allocated_minus_freed_over_the_window_is_final_minus_initial(path: Path) -> None:
    tr = _load(path)
    summary = tr.memory.peak()
    al = tr.memory.allocations()
    ev = tr.memory.events().filter(pl.col("addr").is_not_null())
    keys = ["rank", "device_type", "device"]
    alloc = al.filter(pl.col("alloc_ns").is_not_null()).group_by(keys).agg(pl.col("bytes").sum().alias("a"))
    freed = al.filter(pl.col("free_ns").is_not_null()).group_by(keys).agg(pl.col("bytes").sum().alias("f"))
    got = summary.join(alloc, on=keys, how="left").join(freed, on=keys, how="left").fill_null(0)
    if ev.height == tr.memory.events().height:  # every event paired or counted
        assert (got["a"] - got["f"]).equals(got["final_bytes"] - got["initial_bytes"], check_names=False)
    # every allocation event is one block, every free event closes one
    assert al.filter(pl.col("alloc_ns").is_not_null()).height == ev.filter(pl.col("bytes") > 0).height
    assert al.filter(pl.col("free_ns").is_not_null()).height == ev.filter(pl.col("bytes") < 0).height
    # a pair frees what it allocated
    fb = ev.select(pl.col("event_id").alias("free_event_id"), pl.col("bytes").alias("fb"))
    paired = al.filter(pl.col("status") == "freed").join(fb, on="free_event_id")
    assert (paired["fb"] == -paired["bytes"]).all()
    assert (paired["lifetime_ns"] >= 0).all()


# ------------------------------------------------------------------ torch's per-op memory columns


def _memory_from_allocations(nested: pl.DataFrame, al: pl.DataFrame) -> dict[str, dict[str | None, tuple[int, int]]]:
    """torch's (inclusive, self) memory per key name, built only from `allocations()`' ops.

    Each alloc adds its bytes to the self memory of its op, each free subtracts them; an op
    torch filters gives them to its nearest kept ancestor; inclusive = Σ over the subtree of
    torch's tree; `_remove_dup_nodes` folds self into the kept parent.
    """
    tree, names = host_tree(nested)
    n = len(tree)
    rank, eid = tree["rank"].to_numpy(), tree["event_id"].to_numpy()
    nrank, nid = nested["rank"].to_numpy(), nested["event_id"].to_numpy()
    nparent = row_positions(nrank, nid, nrank, nested["parent_id"].fill_null(-1).to_numpy())
    kept_row = row_positions(rank, eid, nrank, nid)  # nested row -> tree row, -1 where filtered
    out: dict[str, dict[str | None, tuple[int, int]]] = {}
    cpu_types = np.isin(al["device_type"].to_numpy(), schema.CPU_MEMORY_DEVICE_TYPES)
    for label, mask in (("cpu", cpu_types), ("device", ~cpu_types)):
        own = np.zeros(n, np.int64)
        blocks = al.filter(pl.Series(mask))
        for col, t, sign in (("alloc_op_id", "alloc_ns", 1), ("free_op_id", "free_ns", -1)):
            rows = blocks.filter(pl.col(t).is_not_null() & pl.col(col).is_not_null())
            at = row_positions(nrank, nid, rows["rank"].to_numpy(), rows[col].to_numpy())
            pos = np.where(at >= 0, kept_row[np.maximum(at, 0)], -1)
            while ((pos < 0) & (at >= 0)).any():  # filtered op: walk up to a kept ancestor
                walk = (pos < 0) & (at >= 0)
                at[walk] = nparent[at[walk]]
                pos[walk] = np.where(at[walk] >= 0, kept_row[np.maximum(at[walk], 0)], -1)
            ok = pos >= 0
            np.add.at(own, pos[ok], sign * rows["bytes"].to_numpy()[ok])
        incl = subtree_sum(own, tree["kept_parent"].to_numpy(), tree["tree_depth"].to_numpy())
        merged = tree["_merged"].to_numpy()
        folded = own.copy()
        np.add.at(folded, tree["rep"].to_numpy()[merged], own[merged])
        folded[merged] = 0
        per_key = pl.DataFrame({"code": tree["name_code"].to_numpy(), "incl": incl, "self": folded}).filter(
            pl.Series(~merged)).group_by("code").agg(pl.col("incl").sum(), pl.col("self").sum())
        out[label] = {names[c]: (i, s) for c, i, s in per_key.iter_rows()}
    return out


def _per_thread_processes(tr: pt.Trace) -> tuple[pl.DataFrame, pl.DataFrame]:
    """`nested` and `instants` with every thread made its own process: torch's rule counts the
    [memory] events of any thread of the op's process, allocations() those of the op's thread."""
    thread = pl.col("tid").fill_null(-1) * 1_000_003 + pl.col("pid").fill_null(-1)
    return (tr.collect("nested").with_columns(pid=thread),
            tr.collect("instants").with_columns(pid=thread))


@pytest.mark.parametrize("path", ALL)
def test_torch_memory_columns_follow_from_allocations(path: Path) -> None:
    tr = _load(path)
    al = tr.memory.allocations()
    if al.is_empty():
        pytest.skip("no [memory] event has an address (torch <= 1.9)")
    nested, instants = _per_thread_processes(tr)
    derived = _memory_from_allocations(tr.collect("nested"), al)
    ka = key_averages(nested, instants).filter(pl.col("device_type") == "CPU")
    got = {name: (*derived["cpu"].get(name, (0, 0)), *derived["device"].get(name, (0, 0)))
           for name in ka["name"]}
    want = {r[0]: tuple(r[1:]) for r in ka.select("name", "cpu_mem_bytes", "self_cpu_mem_bytes", "device_mem_bytes",
                                                     "self_device_mem_bytes").iter_rows()}
    assert got == want
    # one thread allocates: the trace's own key_averages has the same numbers, except for ops of
    # other threads that were open during that thread's allocations (torch counts those too)
    threads = tr.memory.events()["tid"].unique()
    if len(threads) == 1:
        ka0 = tr.key_averages().filter(pl.col("device_type") == "CPU")
        own = {r[0]: tuple(r[1:]) for r in ka0.select("name", "cpu_mem_bytes", "self_cpu_mem_bytes",
                                                      "device_mem_bytes", "self_device_mem_bytes").iter_rows()}
        differ = {k for k in want if own[k] != want[k]}
        elsewhere = set(tr.collect("events").filter(~pl.col("tid").is_in(threads.implode()))["name"])
        assert differ <= elsewhere


@pytest.mark.parametrize("case", [pytest.param(TORCH213 / "train_cnn", id="train_cnn"),
                                  pytest.param(SHARED_TORCH213 / "llama_generate_shapes_stack", id="llama",
                                               marks=needs_shared)])
def test_torch_key_averages_memory_from_allocations(case: Path) -> None:
    """torch 2.13's own key_averages (recorded with the trace): cpu_memory_usage and
    self_cpu_memory_usage of every row follow from allocations()."""
    tr = _load(case / "trace.json.gz")
    derived = _memory_from_allocations(tr.collect("nested"), tr.memory.allocations())["cpu"]
    rows = [r for r in json.loads((case / "key_averages.json").read_text()) if r["device_type"] == "CPU"]
    assert len(rows) > 50
    assert {r["key"]: (r["cpu_memory_usage"], r["self_cpu_memory_usage"]) for r in rows} == {
        r["key"]: derived.get(r["key"], (0, 0)) for r in rows}
    assert sum(r["self_cpu_memory_usage"] != 0 for r in rows) > 5


# ------------------------------------------------------------------ peak and growth


@pytest.mark.parametrize("path", ALL)
def test_peak_holders_add_up(path: Path) -> None:
    tr = _load(path)
    tl = tr.memory.timeline()
    summary = tr.memory.peak()
    keys = ["rank", "device_type", "device"]
    top = tl.group_by(keys).agg(pl.col("live_bytes").max().alias("m"), pl.col("reserved_bytes").max().alias("r"))
    got = summary.join(top, on=keys)
    assert (got["peak_bytes"] == got["m"]).all()
    assert got["max_reserved_bytes"].equals(got["r"], check_names=False)
    if tr.memory.allocations().is_empty():
        return
    # the blocks live at the peak add up to it, with what was allocated before the window
    assert (summary["pre_window_bytes"] >= 0).all()
    for by in ("op", "top_op", "module", "stack", "step", "allocation"):
        holders = tr.memory.peak(by=by)
        sums = holders.group_by(keys).agg(pl.col("bytes").sum().alias("b"), pl.col("blocks").sum().alias("n"))
        both = summary.join(sums, on=keys, how="left").fill_null(0)
        assert both["b"].equals(both["in_window_bytes"], check_names=False), by
        assert both["n"].equals(both["n_blocks_at_peak"], check_names=False), by
        assert (holders["cumulative_share"] <= 1 + 1e-12).all()


@pytest.mark.parametrize("path", ALL)
def test_growth_net_is_the_change_over_each_step(path: Path) -> None:
    tr = _load(path)
    if tr.memory.allocations().is_empty():
        return
    g = tr.memory.growth()
    tl = tr.memory.timeline()
    keys = ["rank", "device_type", "device", "step"]
    per_step = tl.filter(pl.col("step").is_not_null()).group_by(keys).agg(pl.col("bytes").sum().alias("delta"))
    both = g.join(per_step, on=keys, how="left").fill_null(0)
    assert both["net_bytes"].equals(both["delta"], check_names=False)
    assert (g["retained_bytes"] <= g["allocated_bytes"]).all()
    assert (g["never_freed_bytes"] <= g["retained_bytes"]).all()
    for by in ("op", "top_op", "module", "stack"):
        split = tr.memory.growth(by=by)
        sums = split.group_by(keys).agg(pl.col("retained_bytes").sum().alias("r"))
        assert g.filter(pl.col("retained_bytes") > 0).join(sums, on=keys, how="left")["r"].equals(
            g.filter(pl.col("retained_bytes") > 0)["retained_bytes"], check_names=False), by


def test_train_cnn_numbers() -> None:
    """The bundled CPU training trace: measured facts (docs/memory.md's worked example)."""
    tr = _load(BUNDLED / "train_cnn.pt.trace.json.gz")
    s = tr.memory.peak().row(0, named=True)
    assert (s["device_name"], s["peak_bytes"], s["initial_bytes"], s["final_bytes"], s["step"]) == (
        "cpu", 10_438_832, 0, 394_756, 2)
    al = tr.memory.allocations()
    assert al["status"].value_counts().sort("status").rows() == [("freed", 676), ("live", 4)]
    g = tr.memory.growth()
    assert g["net_bytes"].to_list() == [394_756, 0, 0, 0]
    holders = tr.memory.peak(by="top_op")
    assert holders.row(0, named=True)["alloc_top_op"] == "aten::conv2d"


def test_gpu_trace_has_ops_modules_stacks_and_pre_window_bytes() -> None:
    tr = _load(BUNDLED / "h100_bert_small.pt.trace.json.gz")
    s = tr.memory.peak().filter(pl.col("device_name") == "cuda:0").row(0, named=True)
    # the model's weights were allocated before the profile started
    assert s["initial_bytes"] == s["pre_window_bytes"] == 91_360_768
    assert s["peak_bytes"] == s["initial_bytes"] + s["in_window_bytes"]
    al = tr.memory.allocations().filter(pl.col("device_name") == "cuda:0")
    assert al["alloc_op"].null_count() == 0
    assert al["module"].null_count() < al.height
    assert (al["stack"].list.len() > 0).all()
    assert set(al["status"]) == {"freed"}


# ------------------------------------------------------------------ the pairing rules, against a reference


def _instants(rows: list[tuple[int, int, int]]) -> pl.DataFrame:
    """[memory] instants (addr, bytes, device) at ts = 10 * position, one thread."""
    n = len(rows)
    running: dict[int, int] = {}
    total = []
    for _, b, d in rows:  # Total Allocated per device after each event
        running[d] = running.get(d, 0) + b
        total.append(running[d])
    cols = {c: pl.Series(c, [None] * n, dtype=dt) for c, dt in schema.INSTANT_COLUMNS.items()}
    cols.update(event_id=pl.Series(range(n), dtype=pl.Int64), rank=pl.Series([0] * n, dtype=pl.Int32),
                pid=pl.Series([1] * n, dtype=pl.Int64), tid=pl.Series([1] * n, dtype=pl.Int64),
                name=pl.Series(["[memory]"] * n), start_ns=pl.Series([10 * i for i in range(n)], dtype=pl.Int64),
                device_type=pl.Series([1] * n, dtype=pl.Int64),
                device=pl.Series([d for _, _, d in rows], dtype=pl.Int64),
                addr=pl.Series([a for a, _, _ in rows], dtype=pl.Int64),
                bytes=pl.Series([b for _, b, _ in rows], dtype=pl.Int64),
                total_allocated=pl.Series(total, dtype=pl.Int64))
    return pl.DataFrame(cols)


def _reference(rows: list[tuple[int, int, int]]) -> set[tuple[object, ...]]:
    """Blocks by replaying the events in order with a dict of live addresses."""
    live: dict[tuple[int, int], tuple[int, int]] = {}
    out = set()
    for i, (addr, b, dev) in enumerate(rows):
        key = (dev, addr)
        if b > 0:
            if key in live:  # allocated again before a free was recorded
                t, size = live.pop(key)
                out.add((dev, addr, size, t, None, "lost"))
            live[key] = (10 * i, b)
        elif key in live:
            t, size = live.pop(key)
            out.add((dev, addr, size, t, 10 * i, "freed"))
        else:
            out.add((dev, addr, -b, None, 10 * i, "pre_window"))
    out |= {(dev, addr, size, t, None, "live") for (dev, addr), (t, size) in live.items()}
    return out


_EVENT = st.tuples(st.integers(0, 5), st.integers(1, 4) , st.integers(0, 1), st.booleans())


@settings(max_examples=200, deadline=None)
@given(st.lists(_EVENT, max_size=40))
def test_pairing_matches_a_replay_with_a_dict_of_live_addresses(spec: list[tuple[int, int, int, bool]]) -> None:
    # mostly well-formed: a free frees what is live at its address, else a pre-window block
    live: dict[tuple[int, int], int] = {}
    rows = []
    for addr, size, dev, free in spec:
        key = (dev, addr)
        if free:
            rows.append((addr, -live.pop(key, size * 16), dev))
        else:
            live[key] = size * 16
            rows.append((addr, size * 16, dev))
    al = allocations(memory_events(_instants(rows)))
    got = {(r["device"], r["addr"], r["bytes"], r["alloc_ns"], r["free_ns"], r["status"])
           for r in al.iter_rows(named=True)}
    assert got == _reference(rows)
    assert al.height == len(got)
    tl = timeline(memory_events(_instants(rows)))
    assert tl.filter(pl.col("pre_window_bytes") != 0).is_empty()


def test_reused_address_and_pre_window_free() -> None:
    rows = [(7, -32, 0), (5, 16, 0), (5, -16, 0), (5, 48, 0), (9, 8, 0), (5, -48, 0)]
    al = allocations(memory_events(_instants(rows)))
    assert al.select("addr", "bytes", "alloc_ns", "free_ns", "status").rows() == [
        (7, 32, None, 0, "pre_window"), (5, 16, 10, 20, "freed"), (5, 48, 30, 50, "freed"), (9, 8, 40, None, "live")]


# ------------------------------------------------------------------ scanned datasets


def test_scanned_dataset_gives_the_same_tables(tmp_path: Path) -> None:
    tr = _load(BUNDLED / "h100_bert_small.pt.trace.json.gz")
    sc = pt.scan(tr.to_parquet(str(tmp_path / "ds")))
    assert sc.is_lazy
    for name in ("timeline", "allocations", "peak", "growth"):
        assert getattr(sc.memory, name)().equals(getattr(tr.memory, name)()), name
    assert sc.memory.peak(by="module").equals(tr.memory.peak(by="module"))


# ------------------------------------------------------------------ CLI


def _cli(argv: list[str]) -> tuple[int, str, str]:
    import contextlib
    import io

    from proftab.__main__ import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(argv)
    return rc, out.getvalue(), err.getvalue()


def test_cli_memory_text_and_tables(tmp_path: Path) -> None:
    cnn = str(BUNDLED / "train_cnn.pt.trace.json.gz")
    rc, out, _ = _cli(["memory", cnn])
    assert rc == 0
    assert "9.955 MiB" in out and "aten::conv2d" in out and "top 10 of 11" in out
    rc, out, _ = _cli(["memory", str(BUNDLED / "h100_bert_small.pt.trace.json.gz"), "--by", "module",
                       "--device", "cuda:0"])
    assert rc == 0 and "Linear_25" in out and "allocated before the profile started" in out and "cpu " not in out
    target = tmp_path / "blocks.parquet"
    assert _cli(["memory", cnn, "--table", "allocations", "-o", str(target)])[0] == 0
    assert pl.read_parquet(target).equals(_load(BUNDLED / "train_cnn.pt.trace.json.gz").memory.allocations())
    rc, out, _ = _cli(["memory", cnn, "--table", "growth", "--format", "csv"])
    assert rc == 0 and out.splitlines()[0].startswith("rank,device_type,device,device_name,step")
    assert len(out.splitlines()) == 5
    if importlib.util.find_spec("altair") is not None:
        chart = tmp_path / "memory.json"
        rc, out, err = _cli(["memory", cnn, "--chart", str(chart)])
        assert rc == 0 and "9.955 MiB" in out and "wrote" in err
        assert json.loads(chart.read_text())["vconcat"]
    rc, out, _ = _cli(["memory", str(TORCH213 / "multithread" / "trace.json.gz")])
    assert rc == 0 and "no [memory] events" in out


# ------------------------------------------------------------------ chart


def test_memory_chart_shows_the_timeline_the_peak_and_the_steps() -> None:
    pytest.importorskip("altair")
    tr = _load(BUNDLED / "train_cnn.pt.trace.json.gz")
    spec = tr.plot.memory().to_dict()
    values = [v for data in spec["datasets"].values() for v in data]
    lines = [v for v in values if v.get("series") == "allocated"]
    assert len(lines) == tr.memory.timeline().height == 1356
    peak = [v for v in values if "label" in v]
    assert [p["label"] for p in peak] == ["peak 9.955 MiB"]
    assert peak[0]["size"] == 10_438_832 / 2**20 and "cpu memory (MiB)" in json.dumps(spec)  # axis unit adapts
    assert max(v["size"] for v in lines) == peak[0]["size"]
    assert sorted({v["step"] for v in values if "step" in v}) == ["step 2", "step 3", "step 4", "step 5"]
    # a long timeline is thinned per bin, keeping the peak
    small = tr.memory.chart(max_points=100).to_dict()
    kept = [v for data in small["datasets"].values() for v in data if v.get("series") == "allocated"]
    assert len(kept) == 100 and max(v["size"] for v in kept) == peak[0]["size"]
    gpu = _load(BUNDLED / "h100_bert_small.pt.trace.json.gz").plot.memory(device="cuda:0").to_dict()
    assert len(gpu["vconcat"]) == 1
    with pytest.raises(ValueError, match="no \\[memory\\] events"):
        tr.plot.memory(device="cuda:7")


def test_memory_chart_axis_in_adaptive_units() -> None:
    """A device that never holds 1 KiB draws its axis in bytes (16 B, not 0.000015 MiB)."""
    pytest.importorskip("altair")
    tr = _load(BUNDLED / "train_cnn.pt.trace.json.gz")
    tl = tr.memory.timeline()
    small = tl.with_columns(pl.col("live_bytes").clip(upper_bound=16), pl.col("reserved_bytes").clip(upper_bound=16))
    from proftab.memory._chart import memory_chart

    t0 = tl.group_by("rank").agg(pl.col("start_ns").min().alias("t0"))
    peak = tr.memory.peak().with_columns(pl.lit(16, pl.Int64).alias("peak_bytes"))
    spec = json.dumps(memory_chart(small, peak, pl.DataFrame(schema={"rank": pl.Int32, "step": pl.Int64,
                                                                     "start_ns": pl.Int64, "end_ns": pl.Int64}),
                                   t0).to_dict())
    assert "cpu memory (B)" in spec and '"size": 16.0' in spec


def test_multi_rank_trace_gives_each_rank_its_own_tables() -> None:
    """Event ids repeat across rank files: every join and the nesting must key on the rank."""
    files = [BUNDLED / "h100_bert_small.pt.trace.json.gz", BUNDLED / "mi300_bert_small.pt.trace.json.gz"]
    both = pt.load(files)
    for rank, path in enumerate(files):
        one = _load(path)
        for name in ("timeline", "allocations", "peak", "growth"):
            mine = getattr(both.memory, name)().filter(pl.col("rank") == rank).drop("rank")
            assert mine.equals(getattr(one.memory, name)().drop("rank")), (rank, name)
        mine = both.memory.peak(by="module").filter(pl.col("rank") == rank).drop("rank")
        assert mine.equals(one.memory.peak(by="module").drop("rank"))


def test_live_profile_memory_matches_torchs_key_averages() -> None:
    """A profile recorded here (torch CPU, profile_memory): allocations() reproduces torch's own
    per-op memory columns and the Total Allocated replay."""
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        for _ in range(3):
            model(torch.randn(32, 64)).sum().backward()
            opt.step()
            opt.zero_grad()
            prof.step()
    tr = pt.from_profiler(prof)
    tl = tr.memory.timeline()
    assert tl.height > 50
    assert tl["pre_window_bytes"].n_unique() == 1
    al = tr.memory.allocations()
    derived = _memory_from_allocations(tr.collect("nested"), al)["cpu"]
    # torch's in-memory key_averages (not the JSON's) has a `[memory]` row: the events no op holds
    outside = (al.filter(pl.col("alloc_ns").is_not_null() & pl.col("alloc_op_id").is_null())["bytes"].sum()
               - al.filter(pl.col("free_ns").is_not_null() & pl.col("free_op_id").is_null())["bytes"].sum())
    derived["[memory]"] = (outside, outside)
    rows = [e for e in prof.key_averages() if e.device_type.name == "CPU"]
    assert "[memory]" in {e.key for e in rows}
    assert {e.key: (e.cpu_memory_usage, e.self_cpu_memory_usage) for e in rows} == {
        e.key: derived.get(e.key, (0, 0)) for e in rows}
    assert any(e.self_cpu_memory_usage for e in rows)


def test_events_outside_any_op_and_no_stacks() -> None:
    tr = _load(BUNDLED / "train_cnn.pt.trace.json.gz")
    mem = tr.memory.events()
    none = enclosing_ops(mem, tr.collect("events").head(0))
    assert none.height == mem.height
    assert none["op_id"].null_count() == none["op"].null_count() == none["top_op"].null_count() == mem.height
    flat = enclosing_ops(mem, tr.collect("events"), stack_depth=0)
    assert flat["op_id"].null_count() == 0
    assert (flat["stack"].list.len() == 0).all()
    assert enclosing_ops(mem.head(0), tr.collect("events")).is_empty()
