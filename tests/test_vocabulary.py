"""Every public frame of every registered namespace follows the column vocabulary (docs/schema.md).

Walks `proftab.api.BUILTIN` (so namespaces registered later are covered without editing this
test), calls each public method that needs no argument on real traces (a GPU trace, a
torch 2.13 CPU training trace with memory, a 4-rank gloo run) and checks every returned frame's
names and dtypes: snake_case; ``*_ns`` Int64; ``*_bytes`` integer; ``*_id`` integer; ``n_*``
integer counts; ``share`` / ``*_share`` Float64 in [0, 1]; ``*_pct`` Float64 in [0, 100]; no
renamed (old) name; a frame, not a dict.
"""

from __future__ import annotations

import inspect
import re
import warnings
from typing import Any

import polars as pl
import pytest

import proftab as pt
from proftab import api
from proftab.schema import RENAMED_COLUMNS, with_old_names
from tests.conftest import DATA, PUBLIC, TORCH213

#: (namespace.method or namespace, column) -> why it does not follow the rule; keep this short
EXEMPT_COLUMNS: dict[tuple[str, str], str] = {
    ("key_averages", "cpu_avg_ns"): "torch's key_averages average (a float mean, as torch reports it)",
    ("key_averages", "device_avg_ns"): "torch's key_averages average (a float mean, as torch reports it)",
    ("ranks.key_averages", "cpu_avg_ns"): "torch's key_averages average",
    ("ranks.key_averages", "device_avg_ns"): "torch's key_averages average",
}
#: column names exempt in every frame, with the reason
EXEMPT_NAMES: dict[str, str] = {
    "cpu_avg_ns": "torch's key_averages average: a Float64 mean, as torch reports it",
    "device_avg_ns": "torch's key_averages average: a Float64 mean, as torch reports it",
    "compile_id": "torch.compile's own id text ('0/1': frame / recompile), kept as torch writes it",
}
#: share columns that may exceed 1 by what they measure
UNBOUNDED_SHARES: dict[str, str] = {
    "roofline_share": "above 1 means the model or the peak is wrong; flagged, never clipped (issue 25.1)",
    "wall_share": "torch's annotation arithmetic: a span over overlapping work can exceed the wall",
}
#: namespace members that are not frame-returning methods
NOT_FRAMES = {"export", "plot", "table", "to_parquet", "select_threads", "critical_path.chart", "memory.chart",
              "modules.icicle", "perf.roofline", "critical_path.graphs", "export.folded"}
#: deprecated members that return the old shape for one release (they warn)
DEPRECATED = {"perf.coverage", "perf.peaks"}
#: members that return a mapping on purpose, with the reason
DICT_RETURNS = {"perf.rank_peaks": "a lookup of each rank's peak rates by rank (the input of perf.ops)"}

_SNAKE = re.compile(r"^[a-z][a-z0-9_]*$")
#: count columns named by what they count before issue 25 (now n_*); torch's key_averages keeps `calls`
_BARE_COUNTS = {"calls", "kernels", "activities", "total_activities", "count", "gaps", "negative", "annotations",
                "collectives", "last_arrivals", "allocations", "retained_blocks", "ops", "bwd_calls",
                "recompute_calls", "margin_evidence", "ext_rejected", "shared_correlation", "clamped"}
#: byte quantities named without their unit before issue 25 (now *_bytes)
_BARE_BYTES = {"allocated", "reserved", "replayed", "pre_window", "reserved_delta", "live", "new_reserved"}
_OLD = {(frame, old) for frame, m in RENAMED_COLUMNS.items() for old in m}


@pytest.fixture(scope="module")
def traces() -> dict[str, pt.Trace]:
    return {"gpu": pt.load(PUBLIC / "h100__gaunernst_bert-small-uncased__1016001.json.gz"),
            "cnn": pt.load(TORCH213 / "train_cnn" / "trace.json.gz"),
            "gloo4": pt.load(sorted((DATA / "gloo4").glob("rank-*.json.gz")))}


def _members(tr: pt.Trace, ns: str) -> list[tuple[str, Any]]:
    obj = getattr(tr, ns)
    if isinstance(obj, pl.DataFrame | pl.LazyFrame):
        return [(ns, lambda obj=obj: obj)]
    if inspect.ismethod(obj) or inspect.isfunction(obj) or not hasattr(obj, "__dict__"):
        return [(ns, obj)]
    return [(f"{ns}.{m}", getattr(obj, m)) for m in dir(type(obj))
            if not m.startswith("_") and callable(getattr(type(obj), m, None))]


def _no_required_args(f: Any) -> bool:
    try:
        sig = inspect.signature(f)
    except (TypeError, ValueError):
        return False
    return not any(p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
                   for p in sig.parameters.values())


def _problems(where: str, df: pl.DataFrame) -> list[str]:
    out = []
    frame = where.split(":", 1)[1]
    for col, dtype in df.schema.items():
        if (frame, col) in EXEMPT_COLUMNS or col in EXEMPT_NAMES:
            continue
        bad = None
        if not _SNAKE.match(col):
            bad = "not snake_case"
        elif (frame, col) in _OLD:
            bad = f"renamed: use {RENAMED_COLUMNS[frame][col]}"
        elif col in ("ns", "duration_ns", "arrival_skew_ns", "roofline_pct", "ts_ns"):
            bad = "an old name (docs/schema.md: renamed)"
        elif col.endswith("_ns") and dtype != pl.Int64:
            bad = f"*_ns must be Int64, is {dtype}"
        elif col.endswith("_bytes") and not dtype.is_integer():
            bad = f"*_bytes must be an integer, is {dtype}"
        elif col.endswith("_id") and not dtype.is_integer():
            bad = f"*_id must be an integer, is {dtype}"
        elif col.startswith("n_") and not dtype.is_integer():
            bad = f"n_* counts must be integers, is {dtype}"
        elif col in _BARE_COUNTS and dtype.is_integer() and not frame.endswith("key_averages"):
            bad = "a count named by what it counts: name it n_* (torch's key_averages alone keeps calls)"
        elif col in _BARE_BYTES and dtype.is_integer():
            bad = "a byte quantity without its unit: name it *_bytes"
        elif col.endswith("_bound") and dtype.is_integer() and not col.startswith("n_"):
            bad = "reads like a flag but is a count: name it n_*"
        elif col == "share" or col.endswith("_share"):
            if dtype != pl.Float64:
                bad = f"a share must be Float64, is {dtype}"
            elif col not in UNBOUNDED_SHARES:
                v = df[col].drop_nulls().drop_nans()
                if v.len() and not (float(v.min()) >= -1e-12 and float(v.max()) <= 1 + 1e-9):  # type: ignore[arg-type,operator]
                    bad = f"a share must lie in [0, 1], spans [{v.min()}, {v.max()}]"
        elif col.endswith("_pct"):
            v = df[col].drop_nulls()
            if dtype != pl.Float64 or (v.len() and not (float(v.min()) >= 0 and float(v.max()) <= 100)):  # type: ignore[arg-type]
                bad = "a *_pct must be Float64 in [0, 100]"
        if bad:
            out.append(f"{where} {col}: {bad}")
    return out


def test_every_public_frame_follows_the_vocabulary(traces: dict[str, pt.Trace]) -> None:
    problems: list[str] = []
    checked: set[str] = set()
    for ns in api.BUILTIN:
        for tname, tr in traces.items():
            for name, f in _members(tr, ns):
                if name in NOT_FRAMES or name in DEPRECATED or name in DICT_RETURNS or not _no_required_args(f):
                    continue
                try:
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")  # a trace without memory or modules warns
                        got = f()
                except pt.ProftabError:
                    continue  # what this trace lacks (no module frames, no steps)
                if isinstance(got, pl.LazyFrame):
                    got = got.collect()
                if isinstance(got, dict):
                    problems.append(f"{tname}:{name} returns a dict, not a frame")
                    continue
                if isinstance(got, pl.DataFrame):
                    checked.add(name)
                    problems += _problems(f"{tname}:{name}", got)
    assert not problems, "\n".join(problems)
    # the walk reaches every namespace that returns frames (a broken walk must not pass)
    assert {n.split(".")[0] for n in checked} >= {"device", "ranks", "tree", "anomalies", "critical_path", "memory",
                                                  "modules", "perf", "key_averages", "with_utc"}
    assert len(checked) >= 40


def test_critical_path_summary_by_variants_follow_it(traces: dict[str, pt.Trace]) -> None:
    cp = traces["gpu"].critical_path
    for by in ("bound_by", "kind", "name", "module", "step"):
        assert not _problems(f"gpu:critical_path.summary[{by}]", cp.summary(by=by))
    assert cp.summary()["n_steps"].dtype == pl.Int64
    assert int(cp.summary(by="step").select(pl.col("^.*_bound_ns$"), "launch_overhead_ns", "sync_ns")
               .sum_horizontal().sum()) == int(cp.path()["dur_ns"].sum())


def test_deprecated_members_warn_and_keep_the_old_shape(traces: dict[str, pt.Trace]) -> None:
    perf = traces["gpu"].perf
    with pytest.warns(DeprecationWarning, match="device_peaks"):
        assert perf.peaks()["device"] == perf.device_peaks()["device"].item()
    with pytest.warns(DeprecationWarning, match="model_coverage"):
        assert perf.coverage()["unknown_ops"] == perf.model_coverage()["n_unknown_ops"].item()
    summary = perf.summary()
    with pytest.warns(DeprecationWarning, match="roofline_pct -> roofline_share"):
        old = with_old_names(summary, "perf.summary")
    assert old["roofline_pct"].equals(summary["roofline_share"], check_names=False)
    assert old["compute_bound"].equals(summary["n_compute_bound"], check_names=False)


def test_the_trace_tables_and_memory_frames_name_a_point_in_time_start_ns(traces: dict[str, pt.Trace]) -> None:
    """Issue 25.9: memory's `ts_ns` beside the events' `start_ns` for the same thing (the trace's `ts`).
    Every stored table and memory frame now says `start_ns`; `ts_ns` is an old name."""
    cnn, gpu = traces["cnn"], traces["gpu"]
    frames = {"instants": cnn.instants, "flows": gpu.flows, "counters": gpu.counters,
              "memory.events": cnn.memory.events(), "memory.timeline": cnn.memory.timeline()}
    for name, df in frames.items():
        assert "start_ns" in df.columns and "ts_ns" not in df.columns, name
        assert df.schema["start_ns"] == pl.Int64, name
        assert not _problems(f"cnn:{name}", df), name
        assert RENAMED_COLUMNS[name]["ts_ns"] == "start_ns"
    assert cnn.instants.height > 1000 and gpu.flows.height > 0
    with pytest.warns(DeprecationWarning, match="ts_ns -> start_ns"):
        old = with_old_names(cnn.memory.timeline(), "memory.timeline")
    assert old["ts_ns"].equals(old["start_ns"], check_names=False)


def test_memory_byte_columns_say_bytes(traces: dict[str, pt.Trace]) -> None:
    """Issue 25.9: `memory.timeline()`'s byte columns (`allocated`, `reserved`, `live`...) and
    `allocations()`' `new_reserved` are `*_bytes`; the old names come back through `with_old_names`."""
    mem = traces["cnn"].memory
    tl, al = mem.timeline(), mem.allocations()
    renamed = {"allocated": "allocated_bytes", "reserved": "reserved_bytes", "replayed": "replayed_bytes",
               "pre_window": "pre_window_bytes", "reserved_delta": "reserved_delta_bytes", "live": "live_bytes"}
    assert {k: v for k, v in RENAMED_COLUMNS["memory.timeline"].items() if k != "ts_ns"} == renamed
    assert set(renamed.values()) <= set(tl.columns) and not set(renamed) & set(tl.columns)
    assert all(tl.schema[c] == pl.Int64 for c in renamed.values())
    assert "new_reserved_bytes" in al.columns and "new_reserved" not in al.columns
    for name, df in (("memory.timeline", tl), ("memory.allocations", al)):
        assert not _problems(f"cnn:{name}", df), name
    assert tl["live_bytes"].max() == mem.peak()["peak_bytes"].max()  # the peak is the timeline's largest live
    with pytest.warns(DeprecationWarning, match="live -> live_bytes"):
        old = with_old_names(tl, "memory.timeline")
    for o, n in renamed.items():
        assert old[o].equals(tl[n], check_names=False)
    with pytest.warns(DeprecationWarning, match="new_reserved -> new_reserved_bytes"):
        assert with_old_names(al, "memory.allocations")["new_reserved"].equals(al["new_reserved_bytes"],
                                                                                check_names=False)
