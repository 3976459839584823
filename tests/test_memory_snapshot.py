"""torch's memory snapshot pickle: read safely into tables, refuse code, align to a trace.

torch's CPU build cannot record a snapshot (`torch.cuda.memory._record_memory_history` needs
`torch._C._cuda_record_memory_history`, absent without CUDA), so the snapshot here is built by
hand in the layout `torch.cuda.memory._snapshot` documents, from the bundled H100 trace's own
CUDA [memory] events (the allocator's actions, on its clock, shifted by a known offset).
"""

from __future__ import annotations

import io
import pickle
import pickletools
from typing import TYPE_CHECKING, Any

import polars as pl
import pytest

import proftab as pt
from proftab.exceptions import ProftabError
from proftab.memory.snapshot import read_snapshot
from tests.conftest import BUNDLED

if TYPE_CHECKING:
    from pathlib import Path

H100 = BUNDLED / "h100_bert_small.pt.trace.json.gz"
OFFSET_US = 1234  # snapshot clock = trace clock - 1.234 ms


def _snapshot_dict(tr: pt.Trace) -> dict[str, Any]:
    """A `_snapshot()` dict whose device trace is the trace's CUDA alloc/free events."""
    mem = tr.memory.events().filter(pl.col("device_type") == 1)
    entries = [{"action": "alloc" if b > 0 else "free_requested", "addr": a, "size": abs(b), "stream": 7,
                "time_us": ts // 1000 - OFFSET_US,
                "frames": [{"filename": "model.py", "line": 10 + i % 3, "name": "forward"},
                           {"filename": "train.py", "line": 99, "name": "<module>"}]}
               for i, (a, b, ts) in enumerate(mem.select("addr", "bytes", "start_ns").iter_rows())]
    entries.insert(0, {"action": "segment_alloc", "addr": 1 << 40, "size": 2 << 20, "stream": 7,
                       "time_us": entries[0]["time_us"] - 5, "frames": []})
    entries.append({"action": "oom", "size": 1 << 34, "device_free": 12345, "stream": 7,
                    "time_us": entries[-1]["time_us"] + 5, "frames": []})
    block = {"address": 1 << 40, "size": 1 << 20, "requested_size": 1000000, "state": "active_allocated",
             "frames": [{"filename": "model.py", "line": 12, "name": "forward"}]}
    free = {"address": (1 << 40) + (1 << 20), "size": 1 << 20, "requested_size": 0, "state": "inactive",
            "frames": []}
    segment = {"device": 0, "address": 1 << 40, "total_size": 2 << 20, "allocated_size": 1 << 20,
               "active_size": 1 << 20, "requested_size": 1000000, "stream": 7, "segment_type": "large",
               "segment_pool_id": (0, 0), "is_expandable": False, "blocks": [block, free]}
    return {"segments": [segment], "device_traces": [entries],
            "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": None, "max_split_size": -1}}


@pytest.fixture(scope="module")
def trace() -> pt.Trace:
    return pt.load(H100)


@pytest.mark.parametrize("protocol", [2, 4, pickle.HIGHEST_PROTOCOL])
def test_snapshot_tables(trace: pt.Trace, tmp_path: Path, protocol: int) -> None:
    path = tmp_path / "snap.pickle"
    path.write_bytes(pickle.dumps(_snapshot_dict(trace), protocol=protocol))
    snap = read_snapshot(path)
    assert snap.segments.select("device", "total_size", "blocks", "segment_pool_id").rows() == [(0, 2 << 20, 2, [0, 0])]
    assert snap.blocks.select("state", "size", "stack").rows() == [
        ("active_allocated", 1 << 20, ["model.py:12:forward"]), ("inactive", 1 << 20, [])]
    n = trace.memory.events().filter(pl.col("device_type") == 1).height
    assert snap.trace.height == n + 2
    assert snap.trace["seq"].to_list() == list(range(n + 2))
    assert snap.trace["stack"][1].to_list() == ["model.py:10:forward", "train.py:99:<module>"]
    assert snap.trace.filter(pl.col("action") == "oom")["device_free"].to_list() == [12345]
    assert snap.settings == {"allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": None, "max_split_size": -1}}


def test_snapshot_aligns_to_the_trace_and_joins_its_ops(trace: pt.Trace, tmp_path: Path) -> None:
    path = tmp_path / "snap.pickle"
    path.write_bytes(pickle.dumps(_snapshot_dict(trace)))
    snap = trace.memory.snapshot(path)
    # the offset is recovered to within the snapshot's microsecond resolution
    assert abs(snap.offset_ns - OFFSET_US * 1000) < 1000
    mem = trace.memory.events().filter(pl.col("device_type") == 1)
    actions = snap.trace.filter(pl.col("action").is_in(["alloc", "free_requested"]))
    # every alloc / free is matched to the very [memory] event it was made from
    assert actions["event_id"].to_list() == mem["event_id"].to_list()
    assert (actions["start_ns"] - mem["start_ns"]).abs().max() < 1000
    ops = trace.memory.ops().filter(pl.col("event_id").is_in(mem["event_id"].implode()))
    assert actions["op"].to_list() == ops["op"].to_list()
    assert actions["op"].null_count() == 0
    assert snap.trace.filter(~pl.col("action").is_in(["alloc", "free_requested"]))["event_id"].null_count() == 2


class _Evil:
    def __reduce__(self) -> tuple[Any, ...]:
        import os

        return (os.system, ("touch PWNED",))


def test_malicious_pickle_is_refused_without_running_anything(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    evil = pickle.dumps({"segments": [], "device_traces": [[{"action": "alloc", "frames": _Evil()}]]})
    assert b"system" in evil
    with pytest.raises(ProftabError, match=r"refusing to load (posix|os|nt)\.system"):
        read_snapshot(evil)
    assert not (tmp_path / "PWNED").exists()
    # any class, even a harmless one, is refused: a snapshot holds builtin values only
    import collections

    with pytest.raises(ProftabError, match="collections.OrderedDict"):
        read_snapshot(pickle.dumps({"segments": collections.OrderedDict()}))
    # a hand-written GLOBAL + REDUCE (protocol 0) calling builtins.eval
    source = b"cbuiltins\neval\n(S'__import__(\"os\").system(\"touch PWNED\")'\ntR."
    pickletools.dis(source, out=io.StringIO())  # a valid pickle
    with pytest.raises(ProftabError, match="builtins.eval"):
        read_snapshot(source)
    assert not (tmp_path / "PWNED").exists()


def test_persistent_ids_damaged_and_foreign_pickles(tmp_path: Path) -> None:
    with pytest.raises(ProftabError, match="persistent id"):
        read_snapshot(b"\x80\x02X\x01\x00\x00\x00aQ.")  # BINPERSID
    with pytest.raises(ProftabError, match="not a readable memory snapshot"):
        read_snapshot(pickle.dumps({"segments": []})[:-3])
    with pytest.raises(ProftabError, match="not a torch memory snapshot"):
        read_snapshot(pickle.dumps([1, 2, 3]))
    with pytest.raises(ProftabError, match="do not follow torch's layout"):
        read_snapshot(pickle.dumps({"segments": [{"address": "not a number", "blocks": 3}], "device_traces": []}))
    with pytest.raises(ProftabError, match="cannot read the memory snapshot"):
        read_snapshot(tmp_path / "missing.pickle")
