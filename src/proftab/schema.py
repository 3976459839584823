"""Column names and dtypes of proftab's tables (documented in docs/schema.md).

`TYPED_ARGS` (defined in the polars-free `proftab.codes`, with `Flag` and `ArgKind`) is the
single source of truth for which trace `args` keys become typed columns; the C scanner is
configured from it.
"""

from __future__ import annotations

import polars as pl

from proftab.codes import TYPED_ARGS, ArgKind, Flag

# the category sets live in proftab.kinds (one home); re-exported here for code that read them from schema
from proftab.kinds import DEVICE_CATEGORIES as DEVICE_CATEGORIES
from proftab.kinds import DEVICE_WORK_CATEGORIES as DEVICE_WORK_CATEGORIES
from proftab.kinds import PROFILER_SPAN_CATEGORIES as PROFILER_SPAN_CATEGORIES

#: a column dtype as the tables declare it (a dtype class such as `pl.Int64`, or an instance)
DType = pl.DataType | type[pl.DataType]

__all__ = ["EVENT_COLUMNS", "RENAMED_COLUMNS", "STORED_RENAMES", "TRACK_KEYS", "TYPED_ARGS", "TYPED_COLUMNS", "ArgKind",
           "Flag", "stored_renames", "with_old_names"]


_DTYPES = {ArgKind.I64: pl.Int64, ArgKind.U64: pl.UInt64, ArgKind.F64: pl.Float64, ArgKind.STR: pl.String,
           ArgKind.JSON: pl.String, ArgKind.BOOL: pl.Boolean}

#: typed column name -> (polars dtype, kind code), in first-appearance order
TYPED_COLUMNS: dict[str, tuple[DType, int]] = {}
for _key, _col, _kind in TYPED_ARGS:
    TYPED_COLUMNS.setdefault(_col, (_DTYPES[ArgKind(_kind)], _kind))

#: columns that identify a host thread track (or a device stream track)
TRACK_KEYS = ["rank", "pid", "pid_text", "tid", "tid_text"]

_COMMON = {
    "event_id": pl.Int64,
    "rank": pl.Int32,
    "pid": pl.Int64,
    "pid_text": pl.String,
    "tid": pl.Int64,
    "tid_text": pl.String,
    "cat": pl.Categorical,
    "name": pl.String,
}

#: the columns of `Trace.events`, in order
EVENT_COLUMNS: dict[str, DType] = {
    **_COMMON,
    "ph": pl.Categorical,
    "start_ns": pl.Int64,
    "dur_ns": pl.Int64,
    "end_ns": pl.Int64,
    "flags": pl.UInt16,
    **{c: dt for c, (dt, _) in TYPED_COLUMNS.items()
       if c not in ("device_type", "addr", "total_allocated", "total_reserved")},
    "args": pl.String,
    "extra": pl.String,
}

INSTANT_COLUMNS: dict[str, DType] = {
    **_COMMON,
    "start_ns": pl.Int64,
    "scope": pl.Categorical,
    "device_type": pl.Int64,
    "device": pl.Int64,
    "addr": pl.Int64,
    "bytes": pl.Int64,
    "total_allocated": pl.Int64,
    "total_reserved": pl.Int64,
    "ev_idx": pl.Int64,
    "flags": pl.UInt16,
    "args": pl.String,
    "extra": pl.String,
}

FLOW_COLUMNS: dict[str, DType] = {
    **_COMMON,
    "ph": pl.Categorical,
    "start_ns": pl.Int64,
    "id": pl.Int64,
    "id_text": pl.String,
    "bp": pl.Categorical,
    "args": pl.String,
}

COUNTER_COLUMNS: dict[str, DType] = {
    **_COMMON,
    "start_ns": pl.Int64,
    "series": pl.String,
    "value": pl.Float64,
}

THREAD_COLUMNS: dict[str, DType] = {
    "rank": pl.Int32,
    "pid": pl.Int64,
    "pid_text": pl.String,
    "tid": pl.Int64,
    "tid_text": pl.String,
    "process_name": pl.String,
    "process_labels": pl.String,
    "process_sort_index": pl.Int64,
    "thread_name": pl.String,
    "thread_sort_index": pl.Int64,
}

REJECTED_COLUMNS: dict[str, DType] = {
    "rank": pl.Int32,
    "event_id": pl.Int64,
    "byte_offset": pl.Int64,
    "reason": pl.String,
    "excerpt": pl.String,
}

ACCOUNTING_COLUMNS: dict[str, DType] = {
    "path": pl.String,
    "rank": pl.Int32,
    "trace_events": pl.Int64,
    "events_in": pl.Int64,
    "instants": pl.Int64,
    "flows": pl.Int64,
    "counters": pl.Int64,
    "metadata": pl.Int64,
    "rejected": pl.Int64,
}


def empty(columns: dict[str, DType]) -> pl.DataFrame:
    """An empty frame with these columns."""
    return pl.DataFrame(schema=columns)

#: names torch's key_averages drops before building its tree (their time is their parent's)
TORCH_FILTERED_NAMES = frozenset({
    "[memory]", "[OutOfMemory]", "profiler::_record_function_enter", "profiler::_record_function_enter_new",
    "profiler::_record_function_exit", "aten::is_leaf", "aten::output_nr", "aten::_version",
})
#: c10::DeviceType codes of [memory] instants counted as CPU / device memory by torch
CPU_MEMORY_DEVICE_TYPES = (0, 2, 5)
DEVICE_MEMORY_DEVICE_TYPES = (1, 6, 12, 20)

#: the `files` table: one row per trace file (rank) of a Trace; `meta_json` holds the file's
#: top-level keys and derived facts (`proftab.meta.file_meta`)
FILES_COLUMNS: dict[str, DType] = {
    "rank": pl.Int32,
    "source_file": pl.String,
    "source_sha256": pl.String,
    "source_bytes": pl.Int64,
    "base_time_ns": pl.Int64,
    "time_resolution_ns": pl.Int64,
    "proftab_version": pl.String,
    "schema_version": pl.Int32,
    "meta_json": pl.String,
}
#: version of proftab's table schema (the Parquet dataset layout); 2: `ts_ns` -> `start_ns` (issue 25)
SCHEMA_VERSION = 2
#: stored-table columns renamed at each schema version: a dataset of an older version is read with
#: them renamed (`proftab.io.dataset.read.scan`), so datasets written before still scan
STORED_RENAMES: dict[int, dict[str, dict[str, str]]] = {
    2: {"instants": {"ts_ns": "start_ns"}, "flows": {"ts_ns": "start_ns"}, "counters": {"ts_ns": "start_ns"},
        # the per-rank summaries `convert` stores (proftab.ranks.summaries)
        "summary_comm": {"collectives": "n_collectives"}, "summary_device": {"activities": "n_activities"}},
}


def stored_renames(version: int) -> dict[str, dict[str, str]]:
    """Per table, the renames that bring a dataset of schema `version` to `SCHEMA_VERSION`."""
    out: dict[str, dict[str, str]] = {}
    for v in sorted(STORED_RENAMES):
        if v > version:
            for table, m in STORED_RENAMES[v].items():
                out.setdefault(table, {}).update(m)
    return out
#: the table under which a dataset stores its default `key_averages()` (io.parquet, proftab.torch)
STORED_KEY_AVERAGES = "key_averages"

#: columns renamed to the one vocabulary (docs/schema.md, issue 25): frame -> {old name: new name}.
#: The old names stay available for one release through `with_old_names`.
RENAMED_COLUMNS: dict[str, dict[str, str]] = {
    "critical_path.path": {"duration_ns": "dur_ns"},
    "critical_path.summary": {"ns": "dur_ns", "steps": "n_steps", "segments": "n_segments",
                              **{f"{b}": f"{b}_ns" for b in ("cpu_bound", "gpu_compute_bound",
                                                              "gpu_communication_bound", "gpu_memcpy_bound",
                                                              "launch_overhead", "sync")}},
    "perf.ops": {"roofline_pct": "roofline_share", "peak_tb_s": "peak_tb_per_s", "kernels": "n_kernels"},
    "perf.summary": {"roofline_pct": "roofline_share", "compute_bound": "n_compute_bound", "ops": "n_ops"},
    "perf.lost": {"roofline_pct": "roofline_share"},
    "memory.peak": {"reserved_at_peak": "reserved_at_peak_bytes", "max_reserved": "max_reserved_bytes",
                    "blocks_at_peak": "n_blocks_at_peak", "events": "n_events"},
    "ranks.collective_instances": {"arrival_skew_ns": "start_skew_ns",
                                   # one spelling of a rate: <unit>_per_s (proftab.units, issue 36)
                                   "algbw_gbps": "algbw_gb_per_s", "busbw_gbps": "busbw_gb_per_s"},
    # counts are n_* (torch's key_averages keeps torch's `calls`)
    "modules.modules": {"calls": "n_calls", "bwd_calls": "n_bwd_calls", "recompute_calls": "n_recompute_calls",
                        "ops": "n_ops"},
    "tree.call_tree": {"calls": "n_calls"},
    "tree.bottom_up": {"calls": "n_calls"},
    "device.summary": {"activities": "n_activities"},
    "device.busy": {"activities": "n_activities"},
    "device.kernel_categories": {"activities": "n_activities"},
    "device.annotations": {"activities": "n_activities"},
    "device.ops": {"activities": "n_activities", "total_activities": "n_total_activities"},
    "device.launch_delay": {"activities": "n_activities", "negative": "n_negative"},
    "device.idle_breakdown": {"gaps": "n_gaps"},
    "device.copies": {"bandwidth_gbs": "gb_per_s"},
    "device.copy_summary": {"count": "n_copies", "bandwidth_gbs": "gb_per_s", "max_bandwidth_gbs": "max_gb_per_s"},
    "device.margins": {"annotations": "n_annotations", "margin_evidence": "n_margin_evidence"},
    "device.diagnostics": {c: f"n_{c}" for c in ("activities", "external_id", "containment", "annotation",
                                                 "device_external_id", "graph_capture", "graph_launch", "no_launch",
                                                 "no_op", "ext_rejected", "shared_correlation", "clamped",
                                                 "ac2g_checked", "ac2g_agree", "margin_evidence")},
    "memory.growth": {"allocations": "n_allocations", "retained_blocks": "n_retained_blocks"},
    "ranks.collective_times": {"collectives": "n_collectives"},
    "ranks.rank_step_comm": {"collectives": "n_collectives", "last_arrivals": "n_last_arrivals"},
    # a point in time on the trace's axis is start_ns, as in events (stored tables: schema version 2)
    "instants": {"ts_ns": "start_ns"},
    "flows": {"ts_ns": "start_ns"},
    "counters": {"ts_ns": "start_ns"},
    "memory.events": {"ts_ns": "start_ns"},
    "memory.timeline": {"ts_ns": "start_ns", **{c: f"{c}_bytes" for c in ("allocated", "reserved", "replayed",
                                                                           "pre_window", "reserved_delta", "live")}},
    "memory.allocations": {"new_reserved": "new_reserved_bytes"},
    "memory.snapshot.trace": {"ts_ns": "start_ns"},
}


def with_old_names(df: pl.DataFrame, frame: str) -> pl.DataFrame:
    """`df` (the frame `frame`, a key of `RENAMED_COLUMNS`) with the pre-rename columns added back
    beside the new ones, for code written against the old names (deprecated: one release).

    Emits a `DeprecationWarning` naming the renames.
    """
    import warnings

    renames = {old: new for old, new in RENAMED_COLUMNS.get(frame, {}).items() if new in df.columns}
    if renames:
        warnings.warn(f"old column names of {frame} are deprecated: "
                      + ", ".join(f"{o} -> {n}" for o, n in renames.items()), DeprecationWarning, stacklevel=2)
    return df.with_columns(pl.col(new).alias(old) for old, new in renames.items())
