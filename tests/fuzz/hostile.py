"""Hostile inputs for the analyses, datasets and snapshots (issue 30), run under time and memory bounds.

Each reproducer builds a small input from code (a trace, a dataset, a pickle) and runs the
analysis a user would run on it. It passes when the analysis answers correctly or raises a
`ProftabError`; any other exception is a *raw error*, a wrong number a *wrap*, a child killed
by the memory limit or a signal a *crash*, one over its time limit a *hang*.

`run_bounded(names)` runs reproducers in a child process under ``RLIMIT_AS`` and a wall-clock
limit per case (a bomb or a hang fails the case, not the machine); `python -m
tests.fuzz.hostile` prints the table per class. `random_cases` draws seeded random variants of
the same inputs (the analyses' fuzz classes in `tests/test_fuzz.py`).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import json
import math
import os
import pickle
import random
import select
import shutil
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tests.builders import event, write_events

if TYPE_CHECKING:
    from collections.abc import Callable

ROOT = Path(__file__).resolve().parents[2]
OUTCOMES = ("ok", "crash", "hang", "raw_error", "wrap")
#: resident-memory limit of a child (bytes): the inputs are KB, any analysis of them fits in this.
#: The parent polls the child's RSS; ``RLIMIT_AS`` is `ADDRESS_FACTOR` times it, a backstop for a
#: burst between polls (Polars' and glibc's per-thread arenas reserve gigabytes of address space
#: they never touch: a 3 GiB RLIMIT_AS alone killed children holding 250 MB)
MEMORY_LIMIT = 3 * 2**30
ADDRESS_FACTOR = 4
#: seconds between two RSS polls
POLL_S = 0.05


def rss_bytes(pid: int) -> int:
    """Resident set size of a live process (0 once it is gone)."""
    try:
        with open(f"/proc/{pid}/statm", encoding="ascii") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def wait_readable(fd: int, deadline: float, pid: int, memory: int) -> str:
    """Wait until `fd` is readable (``"ready"``), `deadline` passes (``"time"``) or the process's
    RSS passes `memory` (``"memory"``), polling every `POLL_S`."""
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return "time"
        ready, _, _ = select.select([fd], [], [], min(left, POLL_S))
        if ready:
            return "ready"
        if rss_bytes(pid) > memory:
            return "memory"


class Wrong(AssertionError):
    """An analysis returned a wrong (wrapped, negative, duplicated) result."""


def check(cond: object, what: str) -> None:
    """Raise `Wrong` unless `cond`."""
    if not cond:
        raise Wrong(what)


# ----------------------------------------------------------------------------- builders


def load(path: Path) -> Any:
    """`pt.load`, its warnings silenced (hostile inputs warn)."""
    import proftab as pt

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return pt.load(path)


def cli(*argv: str) -> int:
    """Run the CLI in-process with stdout/stderr captured; an internal error is a raw error."""
    from proftab.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rc = main(list(argv))
    if "internal error" in err.getvalue():
        raise RuntimeError(err.getvalue().strip()[-400:])
    return rc


def dataset(tmp: Path, events: list[dict[str, Any]] | None = None) -> Path:
    """A converted dataset of a small trace with a kernel."""
    events = events or [event("ProfilerStep#1", 0, 100, cat="user_annotation"), event("aten::mm", 1, 50),
                        event("cudaLaunchKernel", 2, 5, cat="cuda_runtime", correlation=1),
                        event("gemm", 10, 30, cat="kernel", pid=0, tid=7, correlation=1, stream=7, device=0)]
    tr = load(write_events(tmp / "t.json.gz", events))
    out = tmp / "ds"
    tr.to_parquet(out)
    return out


def manifest_edit(ds: Path, edit: Callable[[dict[str, Any]], None]) -> None:
    """Rewrite a dataset's manifest with `edit` applied."""
    p = ds / "_proftab.json"
    m = json.loads(p.read_text())
    edit(m)
    p.write_text(json.dumps(m))


# ----------------------------------------------------------------------------- reproducers

REPRODUCERS: dict[str, tuple[str, Callable[[Path], None], float]] = {}


def reproducer(cls: str, timeout: float = 30.0) -> Callable[[Callable[[Path], None]], Callable[[Path], None]]:
    """Register a reproducer of class `cls` with its wall-clock limit."""
    def deco(f: Callable[[Path], None]) -> Callable[[Path], None]:
        REPRODUCERS[f.__name__] = (cls, f, timeout)
        return f
    return deco


@reproducer("1 join/graph blow-ups")
def shared_external_id(tmp: Path) -> None:
    """10,000 ops, launches and kernels sharing one External id: `summary` stays bounded."""
    ev = [event("ProfilerStep#1", 0, 10**6, cat="user_annotation")]
    for i in range(10_000):
        ev.append(event("aten::add", 1 + 50 * i, 40, **{"External id": 1}))
        ev.append(event("cudaLaunchKernel", 2 + 50 * i, 5, cat="cuda_runtime", correlation=i + 1, **{"External id": 1}))
        ev.append(event("k", 10 + 50 * i, 5, cat="kernel", pid=0, tid=7, correlation=i + 1, stream=7, device=0,
                    **{"External id": 1}))
    p = write_events(tmp / "t.json.gz", ev)
    cli("summary", str(p))
    act = load(p).device.activities()
    check(act.height == 10_000, f"10,000 kernels became {act.height} activities")
    check(act["op_id"].null_count() == 0, "a kernel lost its op")
    ops = act["op_id"].to_list()
    check(len(set(ops)) == 10_000, "launches were given the wrong op")


@reproducer("1 join/graph blow-ups")
def sync_many_streams(tmp: Path) -> None:
    """8,000 bare cudaDeviceSynchronize calls and kernels on 8,000 streams: critical path bounded."""
    ev = [event("ProfilerStep#1", 0, 10**6, cat="user_annotation")]
    for i in range(8_000):
        ev.append(event("cudaLaunchKernel", 1 + 100 * i, 2, cat="cuda_runtime", correlation=2 * i + 1))
        ev.append(event("k", 4 + 100 * i, 3, cat="kernel", pid=0, tid=100 + i, correlation=2 * i + 1, stream=100 + i,
                    device=0))
        ev.append(event("cudaDeviceSynchronize", 50 + 100 * i, 10, cat="cuda_runtime", correlation=2 * i + 2))
    tr = load(write_events(tmp / "t.json.gz", ev))
    s = tr.critical_path.summary()
    check(int(s["dur_ns"].sum()) <= 10**9, "path longer than its window")


@reproducer("1 join/graph blow-ups")
def overlapping_ops_tree(tmp: Path) -> None:
    """20,000 partially overlapping ops on one thread: `plot tree` (the call tree) stays bounded."""
    ev = [event(f"op{i % 7}", i, 20_000 - i // 2 + 5) for i in range(20_000)]
    p = write_events(tmp / "t.json.gz", ev)
    tr = load(p)
    from proftab.calltree import call_tree
    from proftab.plot import icicle_layout

    t = call_tree(tr.nested, max_depth=8)
    icicle_layout(t)
    check(int(t["depth"].max()) <= 8, "max_depth not applied")


@reproducer("1 join/graph blow-ups")
def nested_modules(tmp: Path) -> None:
    """2,000 nested nn.Module frames: the module tree and its paths stay linear."""
    n = 2_000
    ev = [event(f"nn.Module: Linear_{i}", i, 2 * (n - i) + 1, cat="python_function") for i in range(n)]
    ev.append(event("aten::mm", n, 1))
    tr = load(write_events(tmp / "t.json.gz", ev))
    t = tr.modules.tree()
    check(t.height == n, f"{t.height} frames of {n}")
    deepest = t.sort("depth")["path"][-1]
    check(deepest.count(".") == n - 1, "deepest path lacks frames")
    tr.modules.modules()


@reproducer("2 quadratic paths", timeout=40.0)
def crossing_chain(tmp: Path) -> None:
    """100,000 partially overlapping ops on one thread: containing_ancestor and summary stay fast."""
    import numpy as np

    from proftab.intervals.tree import containing_ancestor

    n = 100_000
    parent = np.arange(-1, n - 1)
    start = np.arange(n, dtype=np.int64)
    end = start + 2  # each crosses its parent's end: the containing ancestor of every row is none
    t0 = time.perf_counter()
    got = containing_ancestor(parent, start, end)
    check((got == -1).all(), "a crossing row got a containing ancestor")
    end2 = np.full(n, 10 * n, np.int64) - start  # a proper chain: every parent contains its child
    check((containing_ancestor(parent, start, end2) == parent).all(), "proper chain re-parented")
    check(time.perf_counter() - t0 < 10, f"containing_ancestor took {time.perf_counter() - t0:.1f} s")
    ev = [event(f"op{i % 5}", i, 1.5) for i in range(n)]
    cli("summary", str(write_events(tmp / "t.json.gz", ev)))


@reproducer("2 quadratic paths")
def long_shared_prefix(tmp: Path) -> None:
    """3,000 names sharing a 5 KB prefix: distinct_cuts (summary --limit -1) stays fast."""
    from proftab.render.text import distinct_cuts

    prefix = "void at::native::kernel<" + "a" * 5_000
    names = [f"{prefix}{i:05d}>" for i in range(3_000)]
    cuts = [n[:40] for n in names]
    t0 = time.perf_counter()
    out = distinct_cuts(names, cuts)
    check(len(set(out)) == len(names), "two names print the same")
    check(time.perf_counter() - t0 < 5, f"distinct_cuts took {time.perf_counter() - t0:.1f} s")


@reproducer("2 quadratic paths")
def deep_call_tree(tmp: Path) -> None:
    """A 100,000-deep chain of nested ops: tree depth, nearest ancestor and the call tree stay fast."""
    import numpy as np

    from proftab.intervals.tree import nearest_ancestor, tree_depth

    n = 100_000
    parent = np.arange(-1, n - 1)
    t0 = time.perf_counter()
    check((tree_depth(parent) == np.arange(n)).all(), "depth of a chain")
    target = np.zeros(n, bool)
    target[0] = True
    got = nearest_ancestor(parent, np.arange(n), target)
    check((got[1:] == 0).all() and got[0] == -1, "nearest ancestor of a chain")
    check(time.perf_counter() - t0 < 10, f"tree kernels took {time.perf_counter() - t0:.1f} s")
    ev = [event(f"op{i % 3}", i, 2 * (20_000 - i)) for i in range(20_000)]
    tr = load(write_events(tmp / "t.json.gz", ev))
    t = tr.tree.call_tree(max_depth=10)
    check(t.height == 11, f"{t.height} nodes to depth 10")


@reproducer("3 hangs")
def zero_weight_cycle(tmp: Path) -> None:
    """walk_back over predecessors that form a cycle (zero-length kernels) ends, bounded."""
    import numpy as np

    from proftab.intervals.dag import walk_back

    pred = np.array([-1, 2, 1, 2], np.int64)  # 1 <-> 2 form a cycle; 3 hangs off it
    seq = walk_back(pred, 3)
    check(len(seq) <= 4 and seq[-1] == 3, f"walk_back gave {seq}")


@reproducer("3 hangs", timeout=40.0)
def many_steps(tmp: Path) -> None:
    """5,000 one-op steps: critical-path stays fast."""
    ev = []
    for i in range(5_000):
        ev.append(event(f"ProfilerStep#{i}", 10 * i, 9, cat="user_annotation"))
        ev.append(event("aten::add", 10 * i + 1, 5))
    p = write_events(tmp / "t.json.gz", ev)
    t0 = time.perf_counter()
    cli("critical-path", str(p))
    check(time.perf_counter() - t0 < 20, f"critical-path took {time.perf_counter() - t0:.1f} s")


@reproducer("3 hangs")
def stored_parent_cycle(tmp: Path) -> None:
    """A dataset whose stored parent_id links form a cycle: a clear error, no hang."""
    import polars as pl

    import proftab as pt

    ds = dataset(tmp, [event("a", 0, 10), event("b", 1, 5), event("c", 2, 1)])
    part = ds / "events" / "rank=0" / "part-0.parquet"
    df = pl.read_parquet(part)
    meta = pl.read_parquet_metadata(part)
    ids = df["event_id"].to_list()
    df = df.with_columns(parent_id=pl.Series([ids[-1], ids[0], ids[1]], dtype=pl.Int64))
    df.write_parquet(part, metadata=meta)
    try:
        tr = pt.scan(ds)
        tr.tree.call_tree()
        tr.modules.tree()
    except pt.ProftabError:
        return
    raise Wrong("a parent_id cycle was accepted")


@reproducer("3 hangs", timeout=15.0)
def fifo_part_file(tmp: Path) -> None:
    """A FIFO in place of a part file: scan refuses it instead of blocking."""
    import proftab as pt

    ds = dataset(tmp)
    part = ds / "flows" / "rank=0" / "part-0.parquet"
    part.unlink()
    os.mkfifo(part)
    try:
        pt.scan(ds).collect("flows")
    except pt.ProftabError:
        return
    raise Wrong("a FIFO was read as a part file")


def _memo_bomb() -> bytes:
    """A pickle of a few hundred bytes whose frames reference one list 2^30 times (through the memo)."""
    shared: list[Any] = [{"filename": "f", "line": 1, "name": "n"}]
    for _ in range(30):
        shared = [shared, shared]
    obj = {"segments": [], "device_traces": [[{"action": "alloc", "addr": 1, "size": 1, "frames": shared}]]}
    return pickle.dumps(obj, protocol=4)


@reproducer("3 hangs", timeout=20.0)
def snapshot_memo_bomb(tmp: Path) -> None:
    """A 6 KB snapshot pickle that shares one object 10^9 times: refused, bounded."""
    import proftab as pt
    from proftab.memory.snapshot import read_snapshot

    data = _memo_bomb()
    check(len(data) < 8192, "bomb too large")
    try:
        read_snapshot(data)
    except pt.ProftabError:
        return
    raise Wrong("a memo bomb was expanded")


@reproducer("3 hangs", timeout=20.0)
def snapshot_deep_nesting(tmp: Path) -> None:
    """A snapshot pickle nested 100,000 lists deep: refused, bounded."""
    import proftab as pt
    from proftab.memory.snapshot import read_snapshot

    depth = 100_000
    data = b"\x80\x04}(\x8c\x08segments]\x8c\rdevice_traces" + b"]" * depth + b"a" * (depth - 1) + b"u."
    try:
        read_snapshot(data)
    except pt.ProftabError:
        return
    raise Wrong("a 100,000-deep pickle was accepted")


@reproducer("4 datasets")
def manifest_rank_twice(tmp: Path) -> None:
    """A manifest listing rank 0 twice: refused (not every row read twice)."""
    import proftab as pt

    ds = dataset(tmp)
    manifest_edit(ds, lambda m: m["ranks"].append(m["ranks"][0]))
    try:
        tr = pt.scan(ds)
    except pt.ProftabError:
        return
    n = tr.collect("events").height
    raise Wrong(f"rank listed twice read as {n} rows")


@reproducer("4 datasets")
def manifest_many_duplicates(tmp: Path) -> None:
    """20,000 duplicate rank entries: refused before anything is allocated per entry."""
    import proftab as pt

    ds = dataset(tmp)
    manifest_edit(ds, lambda m: m["ranks"].extend([m["ranks"][0]] * 20_000))
    try:
        pt.scan(ds).collect("events")
    except pt.ProftabError:
        return
    raise Wrong("20,000 duplicate ranks accepted")


@reproducer("4 datasets")
def summaries_outside(tmp: Path) -> None:
    """A `summaries` entry `../outside`: never read outside the dataset."""
    import polars as pl

    import proftab as pt

    ds = dataset(tmp)
    outside = tmp / "outside" / "rank=0"
    outside.mkdir(parents=True)
    pl.DataFrame({"secret": [1]}).write_parquet(outside / "part-0.parquet")
    manifest_edit(ds, lambda m: m.setdefault("summaries", []).append("../outside"))
    try:
        tr = pt.scan(ds)
    except pt.ProftabError:
        return
    check(not any("outside" in t for t in tr.tables), "a table outside the dataset was attached")


@reproducer("4 datasets")
def summaries_number(tmp: Path) -> None:
    """`summaries` a number: a clear error."""
    import proftab as pt

    ds = dataset(tmp)
    manifest_edit(ds, lambda m: m.__setitem__("summaries", 7))
    try:
        pt.scan(ds)
    except pt.ProftabError:
        return
    raise Wrong("summaries = 7 accepted")


@reproducer("4 datasets")
def part_start_as_text(tmp: Path) -> None:
    """A part file whose start_ns is text: a clear error at scan (not a ComputeError later)."""
    import polars as pl

    import proftab as pt

    ds = dataset(tmp)
    part = ds / "events" / "rank=0" / "part-0.parquet"
    meta = pl.read_parquet_metadata(part)
    df = pl.read_parquet(part)
    df.with_columns(pl.col("start_ns").cast(pl.String)).write_parquet(part, metadata=meta)
    try:
        pt.scan(ds).device.activities()
    except pt.ProftabError:
        return
    raise Wrong("text start_ns accepted")


@reproducer("4 datasets")
def replaced_generation(tmp: Path) -> None:
    """A lazy Trace whose dataset is replaced by `convert --force`: the old events, or a clear error."""
    import proftab as pt

    ds = dataset(tmp)
    tr = pt.scan(ds)
    old_files = tr.files
    new = write_events(tmp / "new.json.gz", [event("other", 0, 5), event("other2", 1, 2), event("other3", 2, 1)])
    cli("convert", str(new), str(ds), "--force")
    try:
        ev = tr.collect("events")
    except pt.ProftabError:
        return
    check(ev.height == 4 and "other" not in ev["name"].to_list(),
          f"a scan of the old dataset read the new events ({ev.height} rows, files {old_files.height})")


@reproducer("5 numbers that wrap")
def mm_flops_overflow(tmp: Path) -> None:
    """An mm of 2^21 x 2^21 x 2^21: FLOPs 2^64 do not fit int64: null and flagged, never a wrap."""
    d = 2**21
    ev = [event("aten::mm", 0, 100, **{"Input Dims": [[d, d], [d, d]], "Input type": ["float", "float"]}),
          event("cudaLaunchKernel", 1, 5, cat="cuda_runtime", correlation=1),
          event("gemm", 10, 30, cat="kernel", pid=0, tid=7, correlation=1, stream=7, device=0)]
    ops = load(write_events(tmp / "t.json.gz", ev)).perf.ops()
    f = ops["flops"][0]
    check(f is None or f == 2 * d**3, f"flops {f}")
    b = ops["bytes"][0]
    check(b is None or b > 0, f"bytes {b}")


@reproducer("5 numbers that wrap")
def negative_input_dims(tmp: Path) -> None:
    """Negative Input Dims: null FLOPs/bytes, never negative or made up."""
    ev = [event("aten::mm", 0, 100, **{"Input Dims": [[-3, 5], [5, -7]], "Input type": ["float", "float"]}),
          event("aten::add", 0, 100, **{"Input Dims": [[-4], [-4], []], "Input type": ["float", "float", "Scalar"]}),
          event("cudaLaunchKernel", 1, 5, cat="cuda_runtime", correlation=1),
          event("gemm", 10, 30, cat="kernel", pid=0, tid=7, correlation=1, stream=7, device=0)]
    ops = load(write_events(tmp / "t.json.gz", ev)).perf.ops()
    for c in ("flops", "bytes"):
        check(all(v is None for v in ops[c].to_list()), f"{c} {ops[c].to_list()} from negative dims")


#: timeline byte columns that are differences, negative by what they measure
_SIGNED_BYTES = {"pre_window_bytes", "reserved_delta_bytes"}


@reproducer("5 numbers that wrap")
def memory_total_wrap(tmp: Path) -> None:
    """Allocations whose byte total passes int64: no wrapped (negative) totals."""
    import polars as pl

    big = 2**62
    ev = [event("aten::empty", 0, 100)]
    for i in range(4):
        ev.append({"ph": "i", "s": "t", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 1,
                   "ts": 1 + i, "args": {"Device Type": 1, "Device Id": 0, "Addr": 4096 * (i + 1), "Bytes": big,
                                         "Total Allocated": big, "Total Reserved": big}})
    tr = load(write_events(tmp / "t.json.gz", ev))
    for frame in (tr.memory.timeline(), tr.memory.peak(), tr.memory.ops()):
        for c, dt in frame.schema.items():
            if c.endswith("bytes") and dt.is_integer():
                m = frame.select(pl.col(c).min()).item()
                check(m is None or m >= -(2**63) + 1 and not (m < 0 and "live" in c), f"{c} wrapped to {m}")
    tl = tr.memory.timeline()
    cols = [c for c in tl.columns if c.endswith("bytes") and tl.schema[c].is_integer()]
    for c in cols:
        vals = [v for v in tl[c].to_list() if v is not None]
        check(all(v >= 0 for v in vals) or c.startswith("delta") or c in _SIGNED_BYTES, f"{c} wrapped: {vals[:6]}")


def _perf_trace(tmp: Path, args: dict[str, Any], name: str = "aten::mm", **head: Any) -> Any:
    ev = [event(name, 0, 100, **args), event("aten::mm", 200, 100, **{"Input Dims": [[4, 8], [8, 16]],
                                                              "Input type": ["float", "float"]}),
          event("cudaLaunchKernel", 1, 5, cat="cuda_runtime", correlation=1),
          event("gemm", 10, 30, cat="kernel", pid=0, tid=7, correlation=1, stream=7, device=0),
          event("cudaLaunchKernel", 201, 5, cat="cuda_runtime", correlation=2),
          event("gemm", 210, 30, cat="kernel", pid=0, tid=7, correlation=2, stream=7, device=0)]
    return load(write_events(tmp / "t.json.gz", ev, **head))


@reproducer("6 malformed metadata/args")
def device_properties_ints(tmp: Path) -> None:
    """deviceProperties entries that are ints: peaks unknown (or a clear error), never AttributeError."""
    tr = _perf_trace(tmp, {}, deviceProperties=[1, 2])
    tr.perf.ops()
    cli("perf", str(tmp / "t.json.gz"))


@reproducer("6 malformed metadata/args")
def total_global_mem_text(tmp: Path) -> None:
    """totalGlobalMem "lots": peaks unknown (or a clear error), never ValueError."""
    tr = _perf_trace(tmp, {}, deviceProperties=[{"id": 0, "name": "NVIDIA A100", "totalGlobalMem": "lots"}])
    tr.perf.ops()
    cli("perf", str(tmp / "t.json.gz"))


@reproducer("6 malformed metadata/args")
def bad_concrete_inputs(tmp: Path) -> None:
    """One op with "Concrete Inputs": [[1]]: that op unmodelled with a reason, the rest stands."""
    tr = _perf_trace(tmp, {"Input Dims": [[4, 8], [8, 16]], "Input type": ["float", "float"],
                           "Concrete Inputs": [[1]]})
    ops = tr.perf.ops().sort("event_id")
    check(ops["flops"].to_list()[-1] == 2 * 4 * 8 * 16, f"the good mm lost its flops: {ops['flops'].to_list()}")


@reproducer("6 malformed metadata/args")
def conv_stride_mismatch(tmp: Path) -> None:
    """A convolution whose stride list does not match its spatial dims: null model, the rest stands."""
    tr = _perf_trace(tmp, {"Input Dims": [[1, 3, 8, 8], [4, 3, 3, 3], [], [], [], [], [], [], []],
                           "Input type": ["float", "float", "", "ScalarList", "ScalarList", "ScalarList", "Scalar",
                                          "ScalarList", "Scalar"],
                           "Concrete Inputs": ["", "", "", "[1, 1, 1]", "[0]", "[1, 1]", "False", "[0, 0]", "1"]},
                     name="aten::convolution")
    ops = tr.perf.ops().sort("event_id")
    check(ops["flops"].to_list()[-1] == 2 * 4 * 8 * 16, f"the good mm lost its flops: {ops['flops'].to_list()}")
    f = ops["flops"].to_list()[0]
    check(f is None or f >= 0, f"conv flops {f}")


@reproducer("6 malformed metadata/args")
def what_if_bad_scale(tmp: Path) -> None:
    """what_if(scale=-1 / NaN / inf): a clear error."""
    import proftab as pt

    tr = _perf_trace(tmp, {})
    for bad in (-1.0, float("nan"), float("inf")):
        try:
            tr.critical_path.what_if(scale={"kernel": bad})
        except pt.ProftabError:
            continue
        raise Wrong(f"scale {bad} accepted")


@reproducer("6 malformed metadata/args")
def window_out_of_range(tmp: Path) -> None:
    """`critical-path --window 99999999999999999999999 1`: a usage error (exit 2)."""
    _perf_trace(tmp, {})
    rc = cli("critical-path", str(tmp / "t.json.gz"), "--window", "99999999999999999999999", "1")
    check(rc == 2, f"exit {rc}")


@reproducer("6 malformed metadata/args")
def snapshot_pair_count(tmp: Path) -> None:
    """A snapshot alignment whose same-key pair count passes 2^32: sampled, never 4.3e9 rows."""
    import polars as pl

    from proftab.memory.snapshot import _offset

    n = 70_000  # 70,000^2 = 4.9e9 pairs: wraps in UInt32 to 6e8
    keyed = pl.DataFrame({"device": [0] * n, "addr": [4096] * n, "_sign": [1] * n,
                          "_t": list(range(0, 1000 * n, 1000))})
    dev = keyed.rename({"_t": "_ts"}).with_columns(pl.col("_ts") + 5_000)
    check(_offset(keyed, dev) == 5_000, "offset")


# ----------------------------------------------------------------------------- bounded runner


def _limit_memory(limit: int) -> None:  # pragma: no cover - runs in the child
    import resource

    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def child_main(names: list[str]) -> None:  # pragma: no cover - runs in the child
    """Run reproducers by name, printing one JSON line per case."""
    import proftab as pt

    wanted: dict[int, int] = {}
    for name in names:  # random cases are registered by the parent: draw the same ones here
        if name.startswith("random_"):
            _, _, seed, i = name.rsplit("_", 3)
            wanted[int(seed)] = max(wanted.get(int(seed), 0), int(i) + 1)
    for seed, n in wanted.items():
        random_cases(seed, n)
    for name in names:
        print(json.dumps({"start": name}), flush=True)
        cls, f, _ = REPRODUCERS.get(name) or _RANDOM[name]
        tmp = Path(tempfile.mkdtemp(prefix="proftab-hostile-"))
        t0 = time.perf_counter()
        try:
            f(tmp)
            outcome, detail = "ok", ""
        except Wrong as exc:
            outcome, detail = "wrap", str(exc)[:300]
        except pt.ProftabError:
            outcome, detail = "ok", ""
        except MemoryError:
            outcome, detail = "crash", "MemoryError"
        except BaseException as exc:  # noqa: BLE001 - a raw error (a Rust panic is a BaseException)
            if isinstance(exc, KeyboardInterrupt):
                raise
            outcome, detail = "raw_error", f"{type(exc).__name__}: {str(exc)[:300]}"
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        print(json.dumps({"name": name, "outcome": outcome, "detail": detail,
                          "s": round(time.perf_counter() - t0, 2)}), flush=True)


@dataclasses.dataclass
class Result:
    """The outcome of one bounded case."""

    name: str
    cls: str
    outcome: str
    detail: str = ""
    seconds: float = 0.0


def run_bounded(names: list[str], *, memory: int = MEMORY_LIMIT, scale_timeout: float = 1.0,
                src: str | None = None) -> list[Result]:
    """Run reproducers in child processes under an RSS limit `memory` and their time limits.

    A child that exceeds a case's time limit is killed (the case is a hang) and a new child takes
    the remaining cases; a child that dies (a signal, RLIMIT_AS = `ADDRESS_FACTOR` x `memory`) or
    whose RSS passes `memory` (it is killed) makes its case a crash.
    `src` runs another source tree's proftab (the *before* column).
    """
    results: list[Result] = []
    todo = list(names)
    # the proftab under test is the one this process imports (CI installs the package, not an
    # editable copy; a checkout puts its src/ on PYTHONPATH), or `src` (a tree given with --src,
    # for "before" runs); ROOT makes tests.fuzz importable
    from tests.fuzz.terminal import proftab_dir

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src or proftab_dir(), str(ROOT)])}
    code = ("import sys, json; from tests.fuzz.hostile import child_main, _limit_memory; "
            f"_limit_memory({memory * ADDRESS_FACTOR}); child_main(json.loads(sys.argv[1]))")
    while todo:
        err_file = tempfile.TemporaryFile()
        proc = subprocess.Popen([sys.executable, "-c", code, json.dumps(todo)], stdout=subprocess.PIPE,
                                stderr=err_file, cwd=ROOT, env=env, bufsize=0)
        assert proc.stdout is not None
        fd = proc.stdout.fileno()
        buf = b""
        current: str | None = None
        deadline = time.monotonic() + 120  # the child's import
        done = False
        while not done:
            while b"\n" not in buf:
                why = wait_readable(fd, deadline, proc.pid, memory)
                if why != "ready":  # over the case's time or memory limit
                    proc.kill()
                    proc.wait()
                    if current is None:
                        raise RuntimeError("the child did not start")
                    detail = (f"over {_timeout(current) * scale_timeout:.0f} s" if why == "time"
                              else f"resident memory over {memory / 2**30:.1f} GiB")
                    results.append(Result(current, _cls(current), "hang" if why == "time" else "crash", detail))
                    todo = todo[todo.index(current) + 1:]
                    done = True
                    break
                chunk = os.read(fd, 65536)
                if not chunk:  # the child died
                    rc = proc.wait()
                    err_file.seek(0)
                    err = err_file.read().decode(errors="replace")
                    if current is None:
                        raise RuntimeError(f"the child failed: {err[-2000:]}")
                    results.append(Result(current, _cls(current), "crash", f"exit {rc}: {err.strip()[-300:]}"))
                    todo = todo[todo.index(current) + 1:]
                    done = True
                    break
                buf += chunk
            if done:
                break
            line, buf = buf.split(b"\n", 1)
            msg = json.loads(line)
            if "start" in msg:
                current = msg["start"]
                deadline = time.monotonic() + _timeout(current) * scale_timeout
                continue
            results.append(Result(msg["name"], _cls(msg["name"]), msg["outcome"], msg["detail"], msg["s"]))
            current = None
            if msg["name"] == todo[-1]:
                proc.wait()
                todo = []
                done = True
        with contextlib.suppress(Exception):
            proc.kill()
        proc.wait()
        proc.stdout.close()
        err_file.close()
    return results


def _cls(name: str) -> str:
    return (REPRODUCERS.get(name) or _RANDOM[name])[0]


def _timeout(name: str) -> float:
    return (REPRODUCERS.get(name) or _RANDOM[name])[2]


def outcome_table(results: list[Result]) -> str:
    """Markdown: class -> tried, crashes, hangs, raw errors, wraps."""
    counts: dict[str, dict[str, int]] = {}
    for r in results:
        counts.setdefault(r.cls, dict.fromkeys(OUTCOMES, 0))[r.outcome] += 1
    lines = ["| class | tried | crashes | hangs | raw errors | wraps |", "|---|---:|---:|---:|---:|---:|"]
    for cls in sorted(counts):
        c = counts[cls]
        lines.append(f"| {cls} | {sum(c.values())} | {c['crash']} | {c['hang']} | {c['raw_error']} | {c['wrap']} |")
    return "\n".join(lines)


# ----------------------------------------------------------------------------- random variants

_RANDOM: dict[str, tuple[str, Callable[[Path], None], float]] = {}


def random_cases(seed: int, n: int) -> list[str]:
    """Register `n` seeded random analysis cases; returns their names (for `run_bounded`)."""
    rng = random.Random(seed)
    names = []
    for i in range(n):
        kind = rng.choice(sorted(_GENERATORS))
        case_seed = rng.randrange(2**32)
        name = f"random_{kind}_{seed}_{i}"
        gen = _GENERATORS[kind]
        _RANDOM[name] = (f"fuzz {kind}", lambda tmp, g=gen, s=case_seed: g(tmp, random.Random(s)), 30.0)
        names.append(name)
    return names


def _perf_args(rng: random.Random) -> dict[str, Any]:
    pool: list[Any] = [[], [1], [-1], [0], [2**40], [2**31, 2**31], [3, 4], [1, 2, 3, 4], [[1]], "x", None, [[]]]
    dims = [rng.choice(pool + [[rng.randrange(-4, 9) for _ in range(rng.randrange(0, 5))]])
            for _ in range(rng.randrange(0, 6))]
    types = [rng.choice(["float", "c10::Half", "c10::BFloat16", "long int", "Scalar", "ScalarList", "", "bool",
                         "weird"]) for _ in range(len(dims))]
    conc = [rng.choice(["", "[1, 1]", "[0]", "[[1]]", "1", "True", "x", "[-1, 2, 3]", "99999999999999999999"])
            for _ in range(len(dims))]
    args: dict[str, Any] = {"Input Dims": dims, "Input type": types}
    if rng.random() < 0.7:
        args["Concrete Inputs"] = rng.choice([conc, [[1]], "x", 5, [None]])
    if rng.random() < 0.3:
        args["Input Strides"] = rng.choice([dims, [[1]], [[-1, 0]], "x"])
    return args


def gen_perf(tmp: Path, rng: random.Random) -> None:
    """Random per-op args over every modelled op name: the good op keeps its model, no negatives."""
    from proftab.perf.models import OP_FAMILY

    names = sorted(OP_FAMILY)
    ev = []
    bad = [rng.choice(names) for _ in range(8)]
    for i, name in enumerate(bad):
        ev += [event(name, 1000 * i, 100, **_perf_args(rng)),
               event("cudaLaunchKernel", 1000 * i + 1, 5, cat="cuda_runtime", correlation=i + 1),
               event("k", 1000 * i + 10, 30, cat="kernel", pid=0, tid=7, correlation=i + 1, stream=7, device=0)]
    ev += [event("aten::mm", 10**5, 100, **{"Input Dims": [[4, 8], [8, 16]], "Input type": ["float", "float"]}),
           event("cudaLaunchKernel", 10**5 + 1, 5, cat="cuda_runtime", correlation=999),
           event("k", 10**5 + 10, 30, cat="kernel", pid=0, tid=7, correlation=999, stream=7, device=0)]
    head = rng.choice([{}, {"deviceProperties": [1]}, {"deviceProperties": [{"id": 0, "totalGlobalMem": "x"}]},
                       {"deviceProperties": [{"id": 0, "name": "NVIDIA H100", "numSms": "many"}]},
                       {"deviceProperties": "x"}])
    ops = load(write_events(tmp / "t.json.gz", ev, **head)).perf.ops().sort("event_id")
    check(ops["flops"].to_list()[-1] == 2 * 4 * 8 * 16, f"the good mm lost its flops ({bad})")
    for c in ("flops", "bytes"):
        neg = [v for v in ops[c].to_list() if v is not None and v < 0]
        check(not neg, f"negative {c} {neg[:3]} ({bad})")


def gen_tree(tmp: Path, rng: random.Random) -> None:
    """Random overlapping ops and module frames: tree, modules, critical path, memory run bounded.

    A third of the cases are deep: a nested chain (up to 20,000 levels) with random crossings,
    or a 'caterpillar' whose ops nest in one of the last few opened."""
    n = rng.choice([10, 200, 3000, 3000, 20_000])
    shape = rng.choice(["random", "random", "chain", "caterpillar"])
    ev = [event("ProfilerStep#1", 0, 10 * n + 100, cat="user_annotation")]
    stack: list[tuple[int, int]] = []
    for i in range(n):
        if shape == "random":
            ts = rng.randrange(0, 10 * n)
            dur = rng.choice([0, 1, rng.randrange(1, 10 * n)])
        elif shape == "chain":  # each op inside the previous one, a few crossing its end
            ts, dur = i + 1, 10 * n - 2 * i - rng.choice([0, 0, 0, 5])
        else:  # nest in one of the last 3 open ops
            while len(stack) > 3 and rng.random() < 0.5:
                stack.pop(rng.randrange(len(stack) - 3, len(stack)))
            lo, hi = stack[-1] if stack else (0, 10 * n + 100)
            ts = lo + 1
            dur = max(hi - ts - 1 - rng.randrange(2), 0)
            stack.append((ts, ts + dur))
        cat = rng.choice(["cpu_op", "cpu_op", "python_function", "user_annotation"])
        name = rng.choice(["aten::mm", "aten::add", f"nn.Module: Lin_{i % 5}", "autograd::engine::evaluate_function: "
                           "AddBackward0", "x"])
        ev.append(event(name, ts, dur, cat=cat, tid=rng.choice([1, 1, 2]) if shape == "random" else 1,
                    **{"External id": rng.randrange(3)}))
        if rng.random() < (0.3 if n < 20_000 else 0.01):
            c = rng.randrange(1, 5)
            ev.append(event(rng.choice(["cudaLaunchKernel", "cudaDeviceSynchronize", "cudaStreamSynchronize"]), ts, 1,
                        cat="cuda_runtime", correlation=c, **{"External id": rng.randrange(3)}))
            ev.append(event("k", ts + rng.randrange(0, 5), rng.choice([0, 3]), cat="kernel", pid=0,
                        tid=rng.randrange(7, 10), correlation=c, stream=7, device=0))
        if rng.random() < 0.1:
            ev.append({"ph": "i", "s": "t", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 1,
                       "ts": ts, "args": {"Device Type": 1, "Device Id": 0, "Addr": rng.randrange(3),
                                          "Bytes": rng.choice([1, -1, 2**62, -(2**62)]), "Total Allocated": 0}})
    import proftab as pt

    tr = load(write_events(tmp / "t.json.gz", ev))
    import inspect

    def call_tree() -> Any:
        kw: dict[str, Any] = {"max_depth": rng.choice([None, 3]), "paths": rng.random() < 0.5}
        if "paths" not in inspect.signature(tr.tree.call_tree).parameters:  # a --src tree from before `paths`
            kw["max_depth"] = kw["max_depth"] if kw.pop("paths") else 3
        return tr.tree.call_tree(**kw)

    for f in (call_tree,
              lambda: tr.tree.bottom_up(max_depth=rng.choice([None, 4])),
              tr.modules.tree, tr.modules.modules, tr.critical_path.summary, tr.memory.timeline, tr.perf.ops):
        with contextlib.suppress(pt.ProftabError):  # a clear error (a depth bound) is an answer
            f()


def gen_dataset(tmp: Path, rng: random.Random) -> None:
    """A dataset with a mutated manifest or part file: scan + an analysis give a clear error or work."""
    import polars as pl

    import proftab as pt

    ds = dataset(tmp)
    choice = rng.randrange(6)
    if choice == 0:
        key = rng.choice(["ranks", "rows", "summaries", "tables", "schema_version"])
        val = rng.choice([None, 7, "x", [], [7], {}, [{"rank": 0}], ["../x"], [{"rank": 0, "rows": {}}] * 3, -1])
        manifest_edit(ds, lambda m: m.__setitem__(key, val))
    elif choice == 1:
        manifest_edit(ds, lambda m: m["ranks"][0].__setitem__("rank", rng.choice([1, -1, 2**40, "0", True, 0.5])))
    else:
        table = rng.choice(["events", "flows", "threads", "meta", "instants"])
        part = ds / table / "rank=0" / "part-0.parquet"
        meta = pl.read_parquet_metadata(part)
        df = pl.read_parquet(part)
        cols = [c for c in df.columns if c != "rank"]
        col = rng.choice(cols)
        mutate = rng.randrange(3)
        if mutate == 0:
            df = df.with_columns(pl.col(col).cast(pl.String))
        elif mutate == 1:
            df = df.with_columns(pl.lit(None).alias(col))
        else:
            df = df.drop(col)
        df.write_parquet(part, metadata=meta)
    try:
        tr = pt.scan(ds)
        tr.collect("events")
        tr.device.activities()
        tr.tree.call_tree()
        tr.key_averages()
    except pt.ProftabError:
        pass


def gen_snapshot(tmp: Path, rng: random.Random) -> None:
    """A snapshot pickle of random (nested, shared, odd-typed) objects: read or a clear error."""
    from proftab.memory.snapshot import read_snapshot

    def value(depth: int) -> Any:
        r = rng.random()
        if depth > 4 or r < 0.3:
            return rng.choice([0, -1, 2**70, 1.5, math.nan, "s", None, True, b"b"])
        if r < 0.6:
            return [value(depth + 1) for _ in range(rng.randrange(3))]
        return {rng.choice(["addr", "size", "action", "frames", "time_us", "x"]): value(depth + 1)
                for _ in range(rng.randrange(4))}

    entry = {"action": rng.choice(["alloc", "free_requested", "x"]), "addr": value(3), "size": value(3),
             "time_us": value(3), "frames": value(2)}
    obj = {"segments": rng.choice([[], [value(1)], value(0)]), "device_traces": rng.choice([[[entry]], value(0)])}
    data = pickle.dumps(obj, protocol=rng.choice([2, 4, 5]))
    if rng.random() < 0.3:
        k = rng.randrange(len(data))
        data = data[:k] + bytes([rng.randrange(256)]) + data[k + 1:]
    with contextlib.suppress(Exception):
        Path(tmp / "s.pickle").write_bytes(data)
    import proftab as pt

    with contextlib.suppress(pt.ProftabError):
        read_snapshot(data)


_GENERATORS: dict[str, Callable[[Path, random.Random], None]] = {
    "perf": gen_perf, "tree": gen_tree, "dataset": gen_dataset, "snapshot": gen_snapshot}


def _selftest_sleep(tmp: Path) -> None:
    """Sleeps past its limit: the runner must call it a hang."""
    time.sleep(60)


def _selftest_bomb(tmp: Path) -> None:
    """Allocates past the memory limit: the runner must call it a crash."""
    b = bytearray(8 * 2**30)
    b[-1] = 1


def _selftest_resident(tmp: Path) -> None:
    """Touches memory page by page past the RSS limit (under RLIMIT_AS): the runner must call it a crash."""
    chunks = []
    for _ in range(2**30 // 2**24 * 6):  # up to 6 GiB, 16 MiB at a time
        chunks.append(bytearray(b"x" * 2**24))
        time.sleep(0.001)


_RANDOM["selftest_resident"] = ("selftest", _selftest_resident, 60.0)
_RANDOM["selftest_sleep"] = ("selftest", _selftest_sleep, 2.0)
_RANDOM["selftest_bomb"] = ("selftest", _selftest_bomb, 30.0)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--src", help="another source tree's src/ (the before column)")
    ap.add_argument("--random", type=int, default=0, help="also N seeded random analysis cases")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--pty", type=int, default=0, help="also N cases of every renderer on a pty (fuzz/terminal.py)")
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    names = args.only or list(REPRODUCERS)
    if args.random:
        names += random_cases(args.seed, args.random)
    res = run_bounded(names, src=args.src)
    for r in res:
        print(f"{r.cls:28} {r.name:26} {r.outcome:9} {r.seconds:6.1f}s {r.detail[:160]}")
    print(outcome_table(res))
    bad = any(r.outcome != "ok" for r in res)
    if args.pty:
        from tests.fuzz import terminal

        pty_res = terminal.run(args.pty, args.seed, src=args.src, verbose=True)
        print(terminal.outcome_table(pty_res))
        bad = bad or any(r.outcome != "ok" for r in pty_res)
    if args.json:
        Path(args.json).write_text(json.dumps([dataclasses.asdict(r) for r in res], indent=1))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
