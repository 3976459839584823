"""tr.modules: module frames and paths, the module table, forward <-> backward links.

References are computed here from the raw events, independently of proftab's nesting: module
paths from the python tracer's own `Python id` / `Python parent id` links, totals as the
union of the frames' spans, the innermost frame of an op by interval containment.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import TYPE_CHECKING

import polars as pl
import pytest

import proftab as pt
from proftab.exceptions import ProftabError
from proftab.modules import MODULE_COLUMNS
from tests.conftest import BUNDLED, DATA, PUBLIC, SHARED_PUBLIC, SHARED_TORCH213, needs_shared, shared_public_traces

if TYPE_CHECKING:
    from pathlib import Path

RECORDED = DATA / "modules_train_step.pt.trace.json.gz"
BERT = BUNDLED / "h100_bert_small.pt.trace.json.gz"
CHECKPOINT = PUBLIC / "mi300__resnet_act_checkpoint.json.gz"
PREFIX = "nn.Module: "


# ----------------------------------------------------------------------------- references

def _ref_frames(ev: pl.DataFrame) -> list[dict]:
    """Module frames with their path from the python tracer's parent links (not the nesting)."""
    py = ev.filter(pl.col("cat").cast(pl.String) == "python_function").select(
        "rank", "event_id", "pid", "tid", "name", "start_ns", "end_ns", "python_id", "python_parent_id")
    by_id = {(r["rank"], r["python_id"]): r for r in py.iter_rows(named=True) if r["python_id"] is not None}
    out = []
    for r in py.iter_rows(named=True):
        if not r["name"].startswith(PREFIX):
            continue
        names, cur = [], r
        while cur is not None:
            if cur["name"].startswith(PREFIX):
                names.append(cur["name"][len(PREFIX):])
            pid = cur["python_parent_id"]
            cur = by_id.get((cur["rank"], pid)) if pid is not None else None
        out.append({**r, "path": ".".join(reversed(names))})
    return out


def _union(spans: list[tuple[int, int]]) -> int:
    total, end = 0, None
    for s, e in sorted(spans):
        if end is None or s > end:
            total += e - s
            end = e
        elif e > end:
            total += e - end
            end = e
    return total


def _ref_innermost_ops(ev: pl.DataFrame, frames: list[dict]) -> Counter:
    """Per reference path: the cpu ops whose innermost enclosing module frame (same thread,
    interval containment) has that path."""
    ops = ev.filter(pl.col("cat").cast(pl.String) == "cpu_op").select("rank", "pid", "tid", "start_ns", "end_ns")
    by_thread: dict[tuple, list] = {}
    for f in frames:
        by_thread.setdefault((f["rank"], f["pid"], f["tid"]), []).append((f["start_ns"], -f["end_ns"], f["path"]))
    for v in by_thread.values():
        v.sort()
    count: Counter = Counter()
    for key, items in ops.group_by("rank", "pid", "tid"):
        fr = by_thread.get(tuple(key))
        if not fr:
            continue
        events = sorted([(s, 0, -e, p) for s, ne, p in fr for e in [-ne]]
                        + [(s, 1, -e, None) for s, e in items.select("start_ns", "end_ns").iter_rows()])
        stack: list[tuple[int, str]] = []
        for s, kind, ne, path in events:
            while stack and stack[-1][0] <= s:
                stack.pop()
            if kind == 0:
                stack.append((-ne, path))
            else:
                inner = [p for end, p in reversed(stack) if end >= -ne]
                if inner:
                    count[inner[0]] += 1
    return count


def _check_table(tr: pt.Trace) -> pl.DataFrame:
    """The issue's checks on one trace; returns the module table."""
    ev = tr.collect("events")
    ref = _ref_frames(ev)
    m = tr.modules.modules()
    fwd_paths = set(m.filter(pl.col("n_recompute_calls") == 0)["path"].to_list())
    # each module's total = the union of its frames' spans (forward frames, by the python links)
    spans: dict[str, list] = {}
    for f in ref:
        spans.setdefault(f["path"], []).append((f["start_ns"], f["end_ns"]))
    got = dict(m.select("path", "host_total_ns").iter_rows())
    checked = [p for p in fwd_paths if p in spans]
    assert checked, "no module path checked"
    assert {p: got[p] for p in checked} == {p: _union(spans[p]) for p in checked}
    assert {p: len(spans[p]) for p in checked} == {p: got_c for p, got_c in m.select("path", "n_calls").iter_rows()
                                                   if p in checked}
    # children <= parent, and a parent's total = its self + its children's totals
    kids = m.filter(pl.col("parent").is_not_null()).join(
        m.select(pl.col("path").alias("parent"), *[pl.col(c).alias(f"p_{c}") for c in m.columns if c.endswith("_ns")]),
        on="parent")
    for c in ("host_total_ns", "device_total_ns", "bwd_host_total_ns", "bwd_device_total_ns"):
        assert (kids[c] <= kids[f"p_{c}"]).all(), c
    sums = kids.group_by("parent").agg(pl.col("host_total_ns", "device_total_ns", "bwd_device_total_ns").sum())
    par = m.join(sums.rename({"parent": "path"}), on="path", how="left", suffix="_kids").fill_null(0)
    assert (par["device_total_ns"] == par["device_self_ns"] + par["device_total_ns_kids"]).all()
    assert (par["bwd_device_total_ns"] == par["bwd_device_self_ns"] + par["bwd_device_total_ns_kids"]).all()
    assert (par["host_total_ns"] == par["host_self_ns"] + par["host_total_ns_kids"]).all()
    # every op inside a module frame is counted once, in the innermost module
    ref_ops = _ref_innermost_ops(ev, ref)
    got_ops = dict(m.select("path", "n_ops").iter_rows())
    assert {p: got_ops[p] for p in checked} == {p: ref_ops.get(p, 0) for p in checked}
    assert m["n_ops"].sum() == tr.modules.modules(by="type")["n_ops"].sum()
    return m


# ----------------------------------------------------------------------------- tree and table

def test_bundled_bert_tree_and_table() -> None:
    tr = pt.load(BERT)
    frames = tr.modules.tree()
    assert frames.height == 84 and (frames["phase"] == "forward").all()
    assert frames.filter(pl.col("depth") == 0)["path"].to_list() == ["BertLMHeadModel_0"]
    linear = frames.filter(pl.col("type") == "Linear")
    assert linear.height == 26 and linear["instance"].n_unique() == 26
    assert "BertLMHeadModel_0.BertModel_0.BertEncoder_0.BertLayer_3.BertAttention_3.BertSdpaSelfAttention_3" \
        in frames["path"].to_list()
    m = _check_table(tr)
    # device time: kernels launched in forward frames; this inference trace has no backward
    acts = tr.device.activities().filter(pl.col("kind").cast(pl.String) != "sync")
    root = m.filter(pl.col("depth") == 0).row(0, named=True)
    assert 0 < root["device_total_ns"] <= acts["dur_ns"].clip(0).sum()
    assert m["device_self_ns"].sum() == root["device_total_ns"]
    assert m["n_bwd_calls"].sum() == 0 and m["bwd_host_total_ns"].sum() == 0
    by_type = tr.modules.modules(by="type")
    assert by_type.filter(pl.col("type") == "Linear")["n_calls"].item() == 26
    assert by_type["device_self_ns"].sum() == m["device_self_ns"].sum()
    assert tr.modules.modules(depth=1)["depth"].max() == 1


def test_checkpoint_recompute_and_steps() -> None:
    tr = pt.load(CHECKPOINT)
    frames = tr.modules.tree()
    rec = frames.filter(pl.col("phase") == "recompute")
    fwd = frames.filter(pl.col("phase") == "forward")
    assert rec.height > 0 and rec["tid"].n_unique() == 1 and set(rec["tid"]).isdisjoint(set(fwd["tid"]))
    # a recomputation keeps the module's path: every recomputed path was also run forward
    assert set(rec["path"]) <= set(fwd["path"])
    m = _check_table(tr)
    wrapped = m.filter(pl.col("n_recompute_calls") > 0)
    assert (wrapped["n_recompute_calls"] == wrapped["n_calls"]).all()
    # every backward op links to a forward op named after it (XxxBackward0 <-> aten::xxx)
    links = tr.modules.links().filter(pl.col("sequence_number").is_not_null())
    assert links["fwd_id"].null_count() == 0
    node = links["name"].str.strip_prefix("autograd::engine::evaluate_function: ").str.to_lowercase()
    fwd_op = links["fwd_name"].str.strip_prefix("aten::").str.replace_all("_", "")
    assert node.str.starts_with(fwd_op).all()
    assert set(node.str.replace(r"backward\d+$", "")) == {
        "convolution", "nativebatchnorm", "relu", "add", "addmm", "view", "mseloss", "t", "mean",
        "maxpool2dwithindices"}
    # steps: each step has its own calls, which add up
    per_step = [tr.modules.modules(step=s) for s in (15, 16, 17)]
    assert sum(p["n_calls"].sum() for p in per_step) == m["n_calls"].sum()
    assert sum(p["bwd_host_self_ns"].sum() for p in per_step) == m["bwd_host_self_ns"].sum()
    with pytest.raises(ProftabError, match="no step"):
        tr.modules.modules(step=99)


def test_user_annotation_fallback() -> None:
    tr = pt.load(BUNDLED / "train_cnn.pt.trace.json.gz")
    frames = tr.modules.tree()
    ann = tr.events.filter((pl.col("cat").cast(pl.String) == "user_annotation")
                           & ~pl.col("name").str.starts_with("ProfilerStep#"))
    assert frames.height == ann.height and set(frames["instance"]) == set(ann["name"])
    m = tr.modules.modules()
    # names may hold dots ("Optimizer.step#Adam.step"): compare names used at one path only
    one_path = frames.group_by("instance").agg(pl.col("path").n_unique()).filter(pl.col("path") == 1)["instance"]
    for path, name, total in m.filter(pl.col("instance").is_in(one_path.implode())).select(
            "path", "instance", "host_total_ns").iter_rows():
        own = ann.filter(pl.col("name") == name)
        assert total == _union(list(own.select("start_ns", "end_ns").iter_rows())), path
    # the backward ops of the phases' ops are charged to the phase that ran their forward op
    assert m.filter(pl.col("path") == "forward.block1")["n_bwd_calls"].item() > 0
    assert tr.modules.tree(source="nn.Module").is_empty()


def test_errors() -> None:
    tr = pt.load(BERT)
    with pytest.raises(ProftabError, match="source must be"):
        tr.modules.tree(source="nope")  # type: ignore[arg-type]
    with pytest.raises(ProftabError, match="by must be"):
        tr.modules.modules(by="nope")  # type: ignore[arg-type]
    with pytest.raises(ProftabError, match="depth applies"):
        tr.modules.modules(by="type", depth=1)


# ----------------------------------------------------------------------------- the recorded training step

#: the model of tests/data/make_modules_trace.py, in forward order: instance -> (attribute path, type)
LAYERS = {
    "TinyNet_0": ("model", "TinyNet"),
    "Embedding_0": ("model.embed", "Embedding"),
    "Block_0": ("model.blocks.0", "Block"), "LayerNorm_0": ("model.blocks.0.norm", "LayerNorm"),
    "Linear_0": ("model.blocks.0.fc1", "Linear"), "GELU_0": ("model.blocks.0.act", "GELU"),
    "Linear_1": ("model.blocks.0.fc2", "Linear"),
    "Block_1": ("model.blocks.1", "Block"), "LayerNorm_1": ("model.blocks.1.norm", "LayerNorm"),
    "Linear_2": ("model.blocks.1.fc1", "Linear"), "GELU_1": ("model.blocks.1.act", "GELU"),
    "Linear_3": ("model.blocks.1.fc2", "Linear"),
    "Linear_4": ("model.head", "Linear"),
    "CrossEntropyLoss_0": ("loss_fn", "CrossEntropyLoss"),
}
#: the autograd nodes each layer type's forward creates (besides views)
NODES = {"Embedding": {"EmbeddingBackward0"}, "LayerNorm": {"NativeLayerNormBackward0"},
         "Linear": {"AddmmBackward0", "TBackward0"}, "GELU": {"GeluBackward0"}, "Block": {"AddBackward0"},
         "CrossEntropyLoss": {"NllLossBackward0", "LogSoftmaxBackward0"}}


def test_recorded_trace_module_tree() -> None:
    tr = pt.load(RECORDED)
    meta = tr.meta
    assert meta["with_stack"] == 1 and meta["with_modules"] == 1 and meta["record_shapes"] == 1
    frames = tr.modules.tree()
    # the tree is the model's: each instance has one path, following the attribute structure
    inst_path = dict(frames.select("instance", "path").unique().iter_rows())
    assert set(inst_path) == set(LAYERS)
    by_attr = {a: i for i, (a, _) in LAYERS.items()}

    def parent_attr(a: str) -> str | None:
        if "." not in a:
            return None
        p = a.rsplit(".", 1)[0]
        return "model" if p.endswith(".blocks") else p   # a ModuleList is not called
    for inst, path in inst_path.items():
        attr, typ = LAYERS[inst]
        p = parent_attr(attr)
        assert path == (inst_path[by_attr[p]] + "." + inst if p else inst)
        assert frames.filter(pl.col("instance") == inst)["type"].unique().to_list() == [typ]
    # two micro-batches: each module is called twice, all in ProfilerStep#1
    assert set(frames.group_by("instance").len()["len"]) == {2} and set(frames["step"]) == {1}
    _check_table(tr)


def test_recorded_trace_backward_links() -> None:
    tr = pt.load(RECORDED)
    links = tr.modules.links()
    assigned = tr.modules.assigned()
    frames = tr.modules.tree()
    inst = dict(frames.select("frame_id", "instance").iter_rows())
    seq = links.filter(pl.col("sequence_number").is_not_null())
    assert seq["fwd_id"].null_count() == 0
    ev = tr.collect("nested")
    micro = ev.filter(pl.col("name").str.starts_with("microbatch_")).select("name", "start_ns", "end_ns").rows()
    starts = dict(ev.select("event_id", "start_ns").iter_rows())

    def batch(t: int) -> str:
        return next(n for n, s, e in micro if s <= t < e)

    fwd_frame = dict(assigned.select("event_id", "frame_id").iter_rows())
    outer = seq.filter(pl.col("outer"))
    per_layer: Counter = Counter()
    for eid, name, fwd_id in outer.select("event_id", "name", "fwd_id").iter_rows():
        node = name.removeprefix("autograd::engine::evaluate_function: ")
        frame = fwd_frame[fwd_id]
        # gradient accumulation: the forward op is in the same micro-batch as its backward
        assert batch(starts[fwd_id]) == batch(starts[eid])
        if frame is None:   # the loss input's reshape runs outside every module
            assert node == "ViewBackward0"
            continue
        layer = inst[frame]
        # the node belongs to the layer whose forward created it
        if node != "ViewBackward0":
            assert node in NODES[LAYERS[layer][1]], (node, layer)
        # the backward op is charged to that layer
        assert fwd_frame[eid] == frame
        per_layer[layer, node] += 1
    # every layer's forward node is backpropagated once per micro-batch
    for layer, (_, typ) in LAYERS.items():
        for node in NODES.get(typ, ()):
            assert per_layer[layer, node] == 2, (layer, node)
    m = tr.modules.modules()
    leaf = m.filter(pl.col("type").is_in(["Linear", "LayerNorm", "GELU", "Embedding"]))
    assert (leaf["n_bwd_calls"] >= 2).all() and (leaf["bwd_host_self_ns"] > 0).all()
    # backward_of: an op nested in a backward op names the forward op and the layer's path
    one = outer.filter(pl.col("name").str.ends_with("AddmmBackward0")).row(0, named=True)
    inner = ev.filter(pl.col("parent_id") == one["event_id"])["event_id"][0]
    got = tr.modules.backward_of(inner)
    assert got["fwd_id"].item() == one["fwd_id"] and got["path"].item().split(".")[-1].startswith("Linear_")
    with pytest.raises(ProftabError, match="not inside a backward op"):
        tr.modules.backward_of(frames["frame_id"][0])
    # AccumulateGrad has no sequence number: a backward op without a link
    acc = links.filter(pl.col("name").str.contains("AccumulateGrad"))
    assert acc.height > 0 and acc["fwd_id"].null_count() == acc.height


# ----------------------------------------------------------------------------- corpus sweeps

def _module_traces() -> list[Path]:
    out = [p for p in shared_public_traces() if p.stat().st_size < 5_000_000]
    return [p for p in out if "tracelens" in p.parts[-2]]


@needs_shared
@pytest.mark.slow
@pytest.mark.parametrize("path", _module_traces(), ids=lambda p: p.name[:40])
def test_public_traces_with_module_frames(path: Path) -> None:
    tr = pt.load(path)
    if tr.modules.tree(source="nn.Module").is_empty():
        pytest.skip("no nn.Module frames")
    _check_table(tr)
    links = tr.modules.links().filter(pl.col("sequence_number").is_not_null())
    if links.height:
        assert links["fwd_id"].null_count() <= links.height // 100


@needs_shared
@pytest.mark.slow
def test_torch213_llama_with_modules() -> None:
    case = SHARED_TORCH213 / "llama_generate_shapes_stack"
    assert json.loads((case / "meta.json").read_text())
    tr = pt.load(case / "trace.json.gz")
    m = _check_table(tr)
    frames = tr.modules.tree()
    assert frames.filter(pl.col("type") == "LlamaDecoderLayer")["instance"].n_unique() >= 2
    assert m.filter(pl.col("type") == "LlamaDecoderLayer")["n_calls"].min() > 1


# ----------------------------------------------------------------------------- CLI

def test_cli_modules(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from proftab.cli import main

    assert main(["modules", str(BERT), "--depth", "2"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[:4] == ["Module", "Type", "Calls", "Host"]
    # the tree in call order, indented by depth
    assert [line.split()[0] for line in out[2:6]] == ["BertLMHeadModel_0", "BertModel_0", "BertEmbeddings_0",
                                                      "BertEncoder_0"]
    assert out[3].startswith("  BertModel_0") and out[4].startswith("    BertEmbeddings_0")
    assert len(out) == 2 + pt.load(BERT).modules.modules(depth=2).height
    csv = tmp_path / "m.csv"
    assert main(["modules", str(RECORDED), "--by", "type", "-o", str(csv)]) == 0
    got = pl.read_csv(csv)
    assert got.columns == [c for c in MODULE_COLUMNS if c not in ("path", "parent", "depth", "instance")]
    assert got.filter(pl.col("type") == "Linear")["n_calls"].item() == 10
    assert main(["modules", str(BUNDLED / "train_cnn.pt.trace.json.gz"), "--source", "nn.Module"]) == 2
    assert "no module frames" in capsys.readouterr().err
    assert main(["modules", str(BERT), "--by", "type", "--depth", "1"]) == 2


# ----------------------------------------------------------------------------- chart

@pytest.mark.parametrize("metric", ["host", "device", "bwd_device"])
def test_icicle_children_inside_parents(metric: str) -> None:
    from proftab.modules._chart import METRICS, icicle_rows

    tr = pt.load(CHECKPOINT)
    rows = icicle_rows(tr.modules.modules(), tr.modules.tree(), metric)  # type: ignore[arg-type]
    total = METRICS[metric][0]
    roots = rows.filter(pl.col("parent_node_id").is_null())
    assert abs(float((roots["x1"] - roots["x0"]).sum()) - 1.0) < 1e-9
    kids = rows.join(rows.select(pl.col("node_id").alias("parent_node_id"), pl.col("x0").alias("p0"),
                                 pl.col("x1").alias("p1")), on="parent_node_id")
    assert kids.height == rows.height - roots.height
    assert ((kids["x0"] >= kids["p0"] - 1e-12) & (kids["x1"] <= kids["p1"] + 1e-12)).all()
    width = (rows["x1"] - rows["x0"]) * float(roots[total].sum())
    assert ((width - rows[total].cast(pl.Float64)).abs() <= 1e-6 * float(roots[total].sum())).all()


def test_icicle_chart_spec() -> None:
    pytest.importorskip("altair")
    tr = pt.load(RECORDED)
    spec = tr.modules.icicle("bwd_host").to_dict()
    values = spec["datasets"][next(iter(spec["datasets"]))] if "datasets" in spec else spec["data"]["values"]
    assert {v["instance"] for v in values} == set(LAYERS)
    with pytest.raises(ProftabError, match="metric must be"):
        tr.modules.icicle("nope")  # type: ignore[arg-type]


def test_recorded_reentrant_checkpoint() -> None:
    """use_reentrant=True: each block's forward is recomputed inside its checkpoint's backward
    op, and the block's backward ops link to the recomputed forward ops."""
    tr = pt.load(DATA / "modules_checkpoint_reentrant.pt.trace.json.gz")
    frames = tr.modules.tree()
    rec = frames.filter(pl.col("phase") == "recompute")
    # the blocks and their layers are recomputed once, under their own paths
    assert set(rec["instance"]) == {i for i, (a, _) in LAYERS.items() if a.startswith("model.blocks.")}
    assert set(rec["path"]) <= set(frames.filter(pl.col("phase") == "forward")["path"])
    links = tr.modules.links()
    assigned = tr.modules.assigned()
    phase = dict(assigned.select("event_id", "phase").iter_rows())
    frame = dict(assigned.select("event_id", "frame_id").iter_rows())
    inst = dict(frames.select("frame_id", "instance").iter_rows())
    ckpt = links.filter(pl.col("name") == "autograd::engine::evaluate_function: CheckpointFunctionBackward")
    assert ckpt.height == 2 and set(ckpt["fwd_name"]) == {"CheckpointFunction"}
    # the checkpoint's own backward op is charged to the module that called checkpoint()
    assert {inst[frame[e]] for e in ckpt["event_id"]} == {"TinyNet_0"}
    for s, e in ckpt.select("start_ns", "end_ns").iter_rows():
        inner = links.filter((pl.col("start_ns") > s) & (pl.col("end_ns") <= e) & pl.col("outer").not_()
                             & pl.col("name").str.starts_with("autograd::") & pl.col("sequence_number").is_not_null())
        assert inner.height >= 10
        blocks = set()
        for eid, name, fwd_id in inner.select("event_id", "name", "fwd_id").iter_rows():
            node = name.removeprefix("autograd::engine::evaluate_function: ")
            assert phase[fwd_id] == "recompute", name
            layer = inst[frame[fwd_id]]
            assert frame[eid] == frame[fwd_id]
            if node != "ViewBackward0":
                assert node in NODES[LAYERS[layer][1]], (node, layer)
            attr = LAYERS[layer][0]
            blocks.add(attr.split(".")[2])
        assert len(blocks) == 1   # one checkpoint = one block
    m = tr.modules.modules()
    blk = m.filter(pl.col("type") == "Block")
    assert (blk["n_recompute_calls"] == 1).all() and (blk["n_bwd_calls"] == 1).all()
    _check_table(tr)


def test_instance_names_match_the_recorded_trace() -> None:
    """instance_names(model, x) numbers instances as the profiler did: the recorded trace's
    instances get the model's attribute names."""
    torch = pytest.importorskip("torch")
    import importlib.util

    from proftab.modules import instance_names

    spec = importlib.util.spec_from_file_location("make_modules_trace", DATA / "make_modules_trace.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    names = instance_names(mod.TinyNet(), torch.randint(0, 50, (2, 3)))
    assert names == {i: a for i, (a, t) in LAYERS.items() if t != "CrossEntropyLoss"}
    m = pt.load(RECORDED).modules.modules(names=names)
    got = dict(m.select("instance", "name").iter_rows())
    assert got == {i: names.get(i) for i in LAYERS}
    with pytest.raises(ProftabError, match="names apply"):
        pt.load(RECORDED).modules.modules(by="type", names=names)


# ----------------------------------------------------------------------------- ranks and datasets

def test_two_ranks_and_a_scanned_dataset(tmp_path: Path) -> None:
    one = pt.load(CHECKPOINT).modules.modules()
    two = pt.load([CHECKPOINT, BERT], ranks=[0, 1]).modules.modules()
    assert set(two["rank"]) == {0, 1}
    bert = pt.load(BERT).modules.modules()
    cols = [c for c in one.columns if c != "rank"]
    assert two.filter(pl.col("rank") == 0).select(cols).sort("path").equals(one.select(cols).sort("path"))
    assert two.filter(pl.col("rank") == 1).select(cols).sort("path").equals(bert.select(cols).sort("path"))
    out = tmp_path / "ds"
    pt.load(CHECKPOINT).to_parquet(out)
    lazy = pt.scan(out)
    assert lazy.is_lazy
    assert lazy.modules.modules().select(cols).sort("path").equals(one.select(cols).sort("path"))


@needs_shared
def test_record_function_fallback_ddp_all_reduce_is_a_call(capsys: pytest.CaptureFixture[str]) -> None:
    """hta/nccl_parser_config (DDP, no nn.Module frames): `nccl:all_reduce` regions run inside the
    backward pass (DDP's hook). Before: 0 calls and its time as "Recompute device"; a
    record_function region is never a recomputation, so it is a call with host and device time."""
    from proftab.cli import main

    path = SHARED_PUBLIC / "hta" / "nccl_parser_config__nccl_data.json.gz"
    tr = pt.load(path)
    assert tr.modules.frame_source() == "user_annotation"
    row = tr.modules.modules().filter(pl.col("path") == "nccl:all_reduce").row(0, named=True)
    assert row["n_calls"] == 15 and row["n_recompute_calls"] == 0 and row["recompute_device_ns"] == 0
    assert row["device_total_ns"] > 40_000_000 and row["host_total_ns"] > 0
    assert (tr.modules.tree()["phase"] == "forward").all()
    assert main(["modules", str(path)]) == 0
    assert "proftab: note: no nn.Module frames" in capsys.readouterr().err
    assert main(["modules", str(BUNDLED / "h100_bert_small.pt.trace.json.gz")]) == 0
    assert "no nn.Module frames" not in capsys.readouterr().err


@needs_shared
def test_overlapping_regions_on_two_threads_self_never_exceeds_total() -> None:
    """hta/cpu_only (gloo): `gloo:all_reduce` runs on two threads at once. Before: host self 2.135 s
    > host total 1.103 s (the union over both threads); the total is now per-thread unions summed."""
    tr = pt.load(SHARED_PUBLIC / "hta" / "cpu_only__rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz")
    t = tr.modules.modules()
    assert (t["host_self_ns"] <= t["host_total_ns"]).all()
    row = t.filter(pl.col("path") == "gloo:all_reduce").row(0, named=True)
    frames = tr.modules.tree().filter(pl.col("path") == "gloo:all_reduce")
    assert frames["tid"].n_unique() == 2
    assert row["host_total_ns"] == frames["dur_ns"].sum() == row["host_self_ns"]
