"""Freeze HTA's (traceinsight 0.6.1) answers on HTA's own test traces.

Run with the interpreter of a scratch environment that has ``traceinsight==0.6.1``
installed (pandas 3.1.1, numpy 2.4.6 came with it) plus ``et_replay`` (only for the
execution-trace item; see README.md)::

    python freeze_hta.py --traces ../shared/traces/public/hta --out tests/data/hta

Every file under the output folder except README.md, this script, ``peer/`` and
``recorded/`` is rewritten; with ``--only ITEM...`` just those items' files, and the
entries of crashes.json, meta.json and timings.json they produce.  No file here ends
in ``.json.gz`` (gzip-compressed JSON is named ``*.gz``): the restructuring guard,
benchmarks/guard.py, digests every ``tests/data/**/*.json.gz`` as a trace.

HTA is used as shipped: the only changes to it are that plotly's ``Figure.show`` does
nothing (HTA calls it unconditionally in ``get_aten_op_kernels_and_delay``) and that
``Trace.write_raw_trace`` hands the written trace back instead of writing it next to
the input (HTA's own tests mock it the same way).  Failures are caught and written to ``crashes.json`` with the
exception and the HTA line that raised it.

All times in the outputs are HTA's: integer microseconds after its rounding
(``ts`` ceiled and ``end`` floored for float-µs traces), relative to the earliest
``ts`` of the trace (``meta.json`` gives that ``min_ts`` per trace) unless a column
says otherwise.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import logging
import os
import platform
import sys
import tempfile
import time
import traceback
from importlib.metadata import version
from typing import TYPE_CHECKING, Any

import hta.common.trace as hta_trace
import numpy as np
import pandas as pd
import plotly.graph_objects as go
from hta.common.trace_call_graph import CallGraph
from hta.memory_analysis import MemoryAnalysis
from hta.trace_analysis import TimeSeriesTypes, TraceAnalysis

if TYPE_CHECKING:
    from collections.abc import Callable

go.Figure.show = lambda self, *a, **k: None  # type: ignore[method-assign]
logging.disable(logging.WARNING)

WRITTEN: dict[str, Any] = {}


def _capture_write(self: Any, output_file: str, trace_contents: dict[str, Any]) -> None:
    WRITTEN["file"] = os.path.basename(output_file)
    WRITTEN["trace"] = trace_contents


hta_trace.Trace.write_raw_trace = _capture_write  # type: ignore[method-assign]

# Traces each item is run on: every HTA test trace with device activity for the
# generic items; the ones HTA's own tests use are marked in README.md.
GPU_TRACES = [
    "amd_trace__mi250_minitoy_train_ROCm6_2_kineto.json.gz",
    "critical_path__alexnet__benchmark_result_2869224_1695835535_trace.json.gz",
    "critical_path__cuda_event_sync_multi_stream__event_sync_trace.json.gz",
    "cupti_profiler__benchmark_result_924719_1679055439_trace.json.gz",
    "df_index_resolver__df_index_resolver.json.gz",
    "distributed_info_unavailable__distributed_info_not_found.json.gz",
    "mtia_inference_trace__mtia_inference_rank_0.json.gz",
    "mtia_trace_single_rank__mtia_rank_0.json.gz",
    "nccl_parser_config__nccl_data.json.gz",
    "negative_queue_length_values_check__rank0.json.gz",
    "ns_resolution_trace__rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz",
    "trace_compare__base__base.json.gz",
    "trace_compare__test__test.json.gz",
    "trace_diff__control__control.json.gz",
    "trace_diff__test__test.json.gz",
    "trace_filter__sampled_rank-0.json.gz",
    "trace_filter__sampled_rank-1.json.gz",
    "triton_example__triton_example.json.gz",
    "with_gpu_user_annotation__step_based_trace_2543932.json.gz",
]
# Traces whose counter events are stored whole (the others: summary and digest only).
FULL_COUNTER_EVENTS = {
    "amd_trace__mi250_minitoy_train_ROCm6_2_kineto.json.gz",
    "critical_path__alexnet__benchmark_result_2869224_1695835535_trace.json.gz",
    "critical_path__cuda_event_sync_multi_stream__event_sync_trace.json.gz",
    "negative_queue_length_values_check__rank0.json.gz",
    "ns_resolution_trace__rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz",
    "nccl_parser_config__nccl_data.json.gz",
    "mtia_inference_trace__mtia_inference_rank_0.json.gz",
    "trace_compare__base__base.json.gz",
    "trace_filter__sampled_rank-0.json.gz",
    "triton_example__triton_example.json.gz",
    "with_gpu_user_annotation__step_based_trace_2543932.json.gz",
}
# Traces whose queue-length series is not stored (size); their summaries are.
NO_SERIES = {
    "df_index_resolver__df_index_resolver.json.gz",
    "trace_diff__test__test.json.gz",
}
GPU_ANNOTATION_TRACES = [
    "amd_trace__mi250_minitoy_train_ROCm6_2_kineto.json.gz",
    "nccl_parser_config__nccl_data.json.gz",
    "ns_resolution_trace__rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz",
    "with_gpu_user_annotation__step_based_trace_2543932.json.gz",
    "critical_path__alexnet__benchmark_result_2869224_1695835535_trace.json.gz",
]
# (trace, operator_name) pairs for the frequent kernel sequences.
SEQUENCE_RUNS = [
    ("critical_path__alexnet__benchmark_result_2869224_1695835535_trace.json.gz", "aten::conv2d"),
    ("critical_path__alexnet__benchmark_result_2869224_1695835535_trace.json.gz", "aten::linear"),
    ("trace_diff__control__control.json.gz", "aten::linear"),
    ("trace_diff__control__control.json.gz", "AddmmBackward0"),
    ("negative_queue_length_values_check__rank0.json.gz", "aten::binary_cross_entropy_with_logits"),
    ("negative_queue_length_values_check__rank0.json.gz", "CompiledFunction"),
    ("with_gpu_user_annotation__step_based_trace_2543932.json.gz", "Optimizer.step#SGD.step"),
    ("with_gpu_user_annotation__step_based_trace_2543932.json.gz", "Optimizer.zero_grad"),
    # CUPTI range-profiler trace: kernels are replaced by cuda_profiler_range events.
    ("cupti_profiler__benchmark_result_924719_1679055439_trace.json.gz", "aten::conv2d"),
    # ns-resolution trace: HTA's call graph raises on its rounded negative durations.
    ("ns_resolution_trace__rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz", "aten::linear"),
]
CUPTI_TRACES = [
    "cupti_profiler__benchmark_result_924719_1679055439_trace.json.gz",
    "critical_path__alexnet__benchmark_result_2869224_1695835535_trace.json.gz",
]
MEMORY_TIMELINES = ["memory_analysis__memory_timeline.raw.gz"]


ITEMS = ["queue_length", "counters", "aten_op_kernels", "annotations", "kernel_sequences", "cupti",
         "memory_timeline", "execution_trace"]
# crashes.json keys an item writes (default: the item's own name).
ITEM_CRASH_KEYS = {"annotations": ("gpu_annotations", "cpu_annotations_via_callgraph")}


def short(trace: str) -> str:
    """The shared trace's file name without its ``.json.gz`` / ``.raw.gz`` ending."""
    for end in (".json.gz", ".raw.gz"):
        if trace.endswith(end):
            return trace[: -len(end)]
    return trace


class Freezer:
    def __init__(self, traces_dir: str, out_dir: str, recordings_dir: str) -> None:
        self.traces_dir = traces_dir
        self.out = out_dir
        self.recordings = recordings_dir
        self.crashes: dict[str, dict[str, str]] = {}
        self.meta: dict[str, dict[str, Any]] = {}
        self.timings: dict[str, dict[str, float]] = {}

    # -- helpers ---------------------------------------------------------------
    def path(self, trace: str) -> str:
        return os.path.realpath(os.path.join(self.traces_dir, trace))

    def load(self, trace: str, path: str | None = None) -> TraceAnalysis:
        t0 = time.perf_counter()
        ta = TraceAnalysis(trace_files={0: path or self.path(trace)}, trace_dir="")
        self.timings.setdefault(trace, {})["load_s"] = round(time.perf_counter() - t0, 3)
        t = ta.t
        df = t.get_trace(0) if 0 in t.traces else None
        self.meta[trace] = {
            "min_ts_us": None if df is None else _plain(t.min_ts),
            "device_type": t.get_device_type() if t.traces else None,
            "profiler_steps_kept": [int(s) for s in ta.get_profiler_steps()] if t.traces else [],
            "rows_after_filter": None if df is None else int(len(df)),
            "rows_negative_dur_after_rounding": None if df is None else int((df["dur"] < 0).sum()),
            "device_rows_zero_dur_after_rounding": None if df is None else int(
                ((df["dur"] == 0) & (df["stream"] >= 0)).sum()),
        }
        return ta

    def write_csv(self, rel: str, df: pd.DataFrame) -> None:
        path = os.path.join(self.out, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        if rel.endswith(".gz"):
            with gzip.GzipFile(path, "wb", compresslevel=9, mtime=0) as fh:
                fh.write(df.to_csv(index=False, lineterminator="\n").encode())
        else:
            df.to_csv(path, index=False, lineterminator="\n")

    def write_json(self, rel: str, obj: Any) -> None:
        path = os.path.join(self.out, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        if rel.endswith(".gz"):
            text = json.dumps(obj, sort_keys=True, separators=(",", ":"), default=_plain) + "\n"
            with gzip.GzipFile(path, "wb", compresslevel=9, mtime=0) as fh:
                fh.write(text.encode())
        else:
            text = json.dumps(obj, indent=1, sort_keys=True, default=_plain) + "\n"
            with open(path, "w") as fh:
                fh.write(text)

    def guarded(self, item: str, key: str, fn: Callable[..., None], *args: Any) -> None:
        t0 = time.perf_counter()
        try:
            fn(*args)
        except Exception as exc:  # HTA's failures are data here
            tb = traceback.extract_tb(exc.__traceback__)
            hta_frames = [f for f in tb if "site-packages/hta/" in f.filename]
            where = hta_frames[-1] if hta_frames else tb[-1]
            last = tb[-1]
            self.crashes.setdefault(item, {})[key] = (
                f"{type(exc).__name__}: {str(exc)[:300]} "
                f"(HTA line: {where.filename.split('site-packages/')[-1]}:{where.lineno} {where.name}; "
                f"raised in {last.filename.split('site-packages/')[-1]}:{last.lineno} {last.name})"
            )
            print(f"  {item} {key}: CRASH {type(exc).__name__}: {str(exc)[:200]}")
        self.timings.setdefault(key, {})[item + "_s"] = round(time.perf_counter() - t0, 3)

    # -- 1. queue length and 1b. counter tracks ------------------------------------
    def queue_length(self, trace: str) -> None:
        ta = self.load(trace)
        series = ta.get_queue_length_time_series(ranks=[0])
        summary = ta.get_queue_length_summary_from_time_series(series)
        name = short(trace)
        if summary is None:
            self.write_json(f"queue_length/{name}.none.json", {"summary": None, "series": {}})
            return
        summary = summary.copy()
        summary.columns = [c[1] for c in summary.columns]  # ('queue_length', 'count') -> 'count'
        summary = summary.reset_index()
        self.write_csv(f"queue_length/{name}.summary.csv", summary)
        ql = series[0]
        out = ql.reset_index(names="event_index")[["event_index", "ts", "stream", "queue_length"]]
        if trace not in NO_SERIES:
            self.write_csv(f"queue_length/{name}.series.csv.gz", out)
        # Time at max queue length: HTA's function keeps one stream per rank (the
        # last one it visits), so it is called once per stream as well.
        rows: list[dict[str, Any]] = []
        for threshold in sorted({1024, int(ql.queue_length.max())}):
            whole = ta.get_time_spent_blocked_on_full_queue(series, max_queue_length=threshold)
            for rec in whole.to_dict("records"):
                rows.append({"call": "all_streams", "max_queue_length": threshold, **rec})
        for stream in sorted(ql.stream.unique()):
            one = {0: ql[ql.stream == stream]}
            smax = int(one[0].queue_length.max())
            res = ta.get_time_spent_blocked_on_full_queue(one, max_queue_length=smax)
            for rec in res.to_dict("records"):
                rows.append({"call": "per_stream_at_its_max", "max_queue_length": smax, **rec})
        self.write_csv(
            f"queue_length/{name}.full_queue.csv",
            pd.DataFrame(rows, columns=["call", "max_queue_length", "rank", "stream",
                                        "duration_at_max_queue_length",
                                        "relative_duration_at_max_queue_length"]),
        )
        self.meta[trace]["trace_duration_us"] = _plain(ta.t.get_trace_duration(0))

    def counters(self, trace: str) -> None:
        ta = self.load(trace)
        WRITTEN.clear()
        ta.generate_trace_with_counters(
            time_series=TimeSeriesTypes.QUEUE_LENGTH | TimeSeriesTypes.MEMCPY_BANDWIDTH
        )
        name = short(trace)
        if not WRITTEN:
            self.write_json(f"counters/{name}.none.json", {"written": None})
            return
        events = [e for e in WRITTEN["trace"]["traceEvents"] if e.get("ph") == "C"]
        canonical = json.dumps(events, sort_keys=True, separators=(",", ":"), default=_plain)
        per_name: dict[str, dict[str, Any]] = {}
        for e in events:
            value = next(iter(e["args"].values()))
            d = per_name.setdefault(e["name"], {"n": 0, "min": value, "max": value, "sum": 0,
                                                "first_ts": e["ts"], "last_ts": e["ts"]})
            d["n"] += 1
            d["min"], d["max"] = min(d["min"], value), max(d["max"], value)
            d["sum"] += value
            d["first_ts"], d["last_ts"] = min(d["first_ts"], e["ts"]), max(d["last_ts"], e["ts"])
        doc = {"output_file": WRITTEN["file"], "n_events_total": len(WRITTEN["trace"]["traceEvents"]),
               "n_counter_events": len(events), "per_counter_name": per_name,
               "sha256_of_counter_events": hashlib.sha256(canonical.encode()).hexdigest()}
        self.write_json(f"counters/{name}.counters_summary.json", doc)
        if trace in FULL_COUNTER_EVENTS:
            self.write_json(f"counters/{name}.counter_events.gz", {"counter_events": events})
        bw = ta.get_memory_bw_summary(ranks=[0])
        if bw is not None:
            bw = bw.copy()
            bw.columns = [c[1] for c in bw.columns]
            self.write_csv(f"counters/{name}.memory_bw_summary.csv", bw.reset_index())

    # -- 2. kernels with their user annotation -----------------------------------
    def annotations(self, trace: str) -> None:
        ta = self.load(trace)
        name = short(trace)
        df = ta.get_gpu_kernels_with_user_annotations(rank=0, expand_names=True, shorten_names=False)
        if df is None:
            self.write_json(f"annotations/{name}.gpu.none.json", {"result": None})
        else:
            cols = ["index", "correlation", "pid", "tid", "stream", "ts", "dur", "s_name", "s_user_annotation"]
            out = df[cols].rename(columns={"s_name": "name", "s_user_annotation": "gpu_user_annotation"})
            self.write_csv(f"annotations/{name}.gpu.csv.gz", out.sort_values(["ts", "index"]))

    def cpu_annotations(self, trace: str) -> None:
        """Innermost CPU user_annotation above each kernel's launch, along HTA's call graph.

        Not an HTA API: HTA's CallGraph ``parent`` links (its own nesting rules and
        its re-parenting of the backward thread) are walked up from the launch.
        """
        ta = self.load(trace)
        t = ta.t
        CallGraph(t, ranks=[0])
        df = t.get_trace(0)
        sym = t.symbol_table
        ua_id = sym.sym_index.get("user_annotation", -999)
        parent = dict(zip(df["index"].tolist(), df["parent"].tolist(), strict=True))
        cat = dict(zip(df["index"].tolist(), df["cat"].tolist(), strict=True))
        nm = dict(zip(df["index"].tolist(), df["name"].tolist(), strict=True))
        kernels = df[(df["stream"] >= 0) & (df["index_correlation"] > 0)
                     & df["cat"].isin(sym.get_gpu_kernel_cat_ids())]
        rows = []
        for k_index, corr, launch, ts, dur, kname in kernels[
            ["index", "correlation", "index_correlation", "ts", "dur", "name"]
        ].itertuples(index=False):
            node, found = int(launch), ""
            seen = 0
            while node >= 0 and seen < 10_000:
                if cat.get(node) == ua_id:
                    found = sym.sym_table[nm[node]]
                    break
                node = int(parent.get(node, -1))
                seen += 1
            rows.append({"index": k_index, "correlation": corr, "launch_index": launch, "ts": ts,
                         "dur": dur, "name": sym.sym_table[kname], "cpu_user_annotation": found})
        self.write_csv(f"annotations/{short(trace)}.cpu_via_callgraph.csv.gz",
                       pd.DataFrame(rows).sort_values(["ts", "index"]))

    # -- 3. aten op -> kernels with delays ----------------------------------------
    def aten_ops(self, trace: str) -> None:
        ta = self.load(trace)
        res = ta.get_aten_op_kernels_and_delay(ranks=[0])
        out = res[0].sort_values(["aten_op_name", "kernel_sequence"]).reset_index(drop=True)
        self.write_csv(f"aten_op_kernels/{short(trace)}.csv.gz", out)

    # -- 4. frequent kernel sequences -----------------------------------------------
    def sequences(self, trace: str, op: str) -> None:
        ta = self.load(trace)
        WRITTEN.clear()
        with tempfile.TemporaryDirectory() as tmp:
            res = ta.get_frequent_cuda_kernel_sequences(
                operator_name=op, output_dir=tmp, min_pattern_len=3, rank=0, top_k=5,
                visualize=False, compress_other_kernels=True,
            )
        key = f"{short(trace)}__{op.replace('::', '_').replace('#', '_').replace('.', '_')}"
        self.write_csv(f"kernel_sequences/{key}.csv.gz", res)
        if WRITTEN:
            # Patterns are keyed by their row in the CSV above instead of the whole pattern string.
            row_of = {p: i for i, p in enumerate(res["pattern"])}
            marked = [
                {"ph": e.get("ph"), "name": e.get("name"), "ts": e.get("ts"), "dur": e.get("dur"),
                 "tid": e.get("tid"),
                 "Patterns": {str(row_of[p]): c for p, c in e["args"]["Patterns"].items()}}
                for e in WRITTEN["trace"]["traceEvents"]
                if isinstance(e.get("args"), dict) and "Patterns" in e["args"]
            ]
            self.write_json(f"kernel_sequences/{key}.overlay_marked_events.gz",
                            {"output_file": WRITTEN["file"], "marked_events": marked})

    # -- 5. CUPTI counters on ops -------------------------------------------------
    def cupti(self, trace: str) -> None:
        ta = self.load(trace)
        res = ta.get_cupti_counter_data_with_operators(ranks=[0])
        if not res:
            self.write_json(f"cupti/{short(trace)}.none.json", {"result": []})
            return
        df = res[0].copy()
        df["op_stack"] = df["op_stack"].apply(json.dumps)
        keep = ["index", "ts", "dur", "name", "index_runtime", "op_stack", "top_level_op", "bottom_level_op"]
        counters = sorted(c for c in df.columns if "__" in c)
        self.write_csv(f"cupti/{short(trace)}.csv.gz", df[keep + counters].sort_values("ts"))

    # -- 6. memory timeline -------------------------------------------------------
    def memory(self, label: str, path: str) -> None:
        ma = MemoryAnalysis(path)
        times, sizes = ma._process_raw_events()
        cats = ["Parameter", "Optimizer state", "Input", "Temporary", "Activation",
                "Gradient", "Autograd", "Unknown"]
        df = pd.DataFrame(sizes, columns=cats)
        df.insert(0, "time_ns", times)
        self.write_csv(f"memory_timeline/{label}.steps.csv.gz", df)
        total = df[cats].sum(axis=1)
        peak_row = int(total.idxmax())
        self.write_json(f"memory_timeline/{label}.peak.json", {
            "n_steps": len(df),
            "peak_total_bytes": int(total.max()),
            "peak_step_index": peak_row,
            "peak_time_ns": int(df["time_ns"][peak_row]),
            "by_category_at_peak": {c: int(df[c][peak_row]) for c in cats},
            "max_by_category": {c: int(df[c].max()) for c in cats},
            "final_by_category": {c: int(df[c].iloc[-1]) for c in cats},
        })

    # -- 7. execution trace correlation --------------------------------------------
    def execution_trace(self, label: str, kineto: str, et_file: str) -> None:
        from hta.common import execution_trace as hta_et

        if not hta_et.IMPORT_EXECUTION_TRACE_SUCCESSFULLY:
            raise RuntimeError("et_replay is not importable; see README.md")
        ta = self.load(label, path=kineto)
        et = hta_et.load_execution_trace(et_file)
        hta_et.correlate_execution_trace(ta.t, 0, et)
        df = ta.t.get_trace(0).copy()
        if "et_node" not in df.columns:
            rfs = [n.rf_id for n in et.nodes.values() if n.rf_id is not None
                   and "execution_trace|thread" not in n.name and "execution_trace|process" not in n.name]
            self.write_json(f"execution_trace/{label}.none.json", {
                "et_nodes": len(et.nodes), "correlated": None,
                "why": ("HTA found no overlap: it needs min(external_id) <= min(rf_id)"
                        " and max(external_id) >= max(rf_id)"),
                "kineto_external_id_min_max": [_plain(df["external_id"].min()), _plain(df["external_id"].max())],
                "et_rf_id_min_max": [min(rfs), max(rfs)],
            })
            return
        for col in ["et_node_name", "op_schema", "input_shapes", "input_types", "output_shapes", "output_types"]:
            hta_et.add_et_column(df, et, col)
        df["name"] = df["name"].apply(lambda i: ta.t.symbol_table.sym_table[i])
        cor = df[df["et_node"].notna()].copy()
        cor["et_node"] = cor["et_node"].astype("int64")
        for col in ["input_shapes", "input_types", "output_shapes", "output_types"]:
            cor[col] = cor[col].apply(json.dumps)
        cols = ["index", "ts", "dur", "name", "external_id", "et_node", "et_node_name", "op_schema",
                "input_shapes", "input_types", "output_shapes", "output_types"]
        self.write_csv(f"execution_trace/{label}.correlated.csv", cor[cols].sort_values("index"))
        self.write_json(f"execution_trace/{label}.summary.json", {
            "et_nodes": len(et.nodes),
            "kineto_rows_cpu_op_or_user_annotation": int(df["cat"].isin(
                [ta.t.symbol_table.sym_index.get(c) for c in ("cpu_op", "user_annotation")]).sum()),
            "correlated_rows": int(len(cor)),
            "distinct_et_nodes_correlated": int(cor["et_node"].nunique()),
            "names_equal": int((cor["name"] == cor["et_node_name"]).sum()),
        })

    # -- driver ---------------------------------------------------------------------
    def run(self, only: list[str]) -> None:
        def want(item: str) -> bool:
            return not only or item in only

        for trace in GPU_TRACES:
            print(trace)
            if want("queue_length"):
                self.guarded("queue_length", trace, self.queue_length, trace)
            if want("counters"):
                self.guarded("counters", trace, self.counters, trace)
            if want("aten_op_kernels"):
                self.guarded("aten_op_kernels", trace, self.aten_ops, trace)
        for trace in GPU_ANNOTATION_TRACES:
            if want("annotations"):
                self.guarded("gpu_annotations", trace, self.annotations, trace)
                self.guarded("cpu_annotations_via_callgraph", trace, self.cpu_annotations, trace)
        for trace, op in SEQUENCE_RUNS:
            if want("kernel_sequences"):
                self.guarded("kernel_sequences", f"{trace} {op}", self.sequences, trace, op)
        for trace in CUPTI_TRACES:
            if want("cupti"):
                self.guarded("cupti", trace, self.cupti, trace)
        if want("memory_timeline"):
            for raw in MEMORY_TIMELINES:
                self.guarded("memory_timeline", raw, self.memory, short(raw), self.path(raw))
            rec = os.path.join(self.recordings, "memory_timeline_train.raw.gz")
            if os.path.exists(rec):
                self.guarded("memory_timeline", "recorded", self.memory, "recorded_train", rec)
        if want("execution_trace"):
            peer = os.path.join(os.path.dirname(os.path.abspath(__file__)), "peer")
            pairs = [
                ("hta_simple_add", os.path.join(peer, "execution_trace__benchmark_simple_add_trace.gz"),
                 os.path.join(peer, "execution_trace__benchmark_simple_add_et.gz")),
                ("recorded_train", os.path.join(self.recordings, "et_train.pt.trace.gz"),
                 os.path.join(self.recordings, "et_train.et.gz")),
            ]
            for label, kp, ep in pairs:
                if os.path.exists(kp) and os.path.exists(ep):
                    self.guarded("execution_trace", label, self.execution_trace, label, kp, ep)

        self.write_records(only)

    def write_records(self, only: list[str]) -> None:
        """Write crashes.json, meta.json and timings.json; with ``only``, update the existing ones."""
        crashes, meta, timings = self.crashes, self.meta, self.timings
        if only:
            old_crashes, meta, timings = (self.read_json(n) for n in ("crashes.json", "meta.json", "timings.json"))
            for item in only:
                for key in ITEM_CRASH_KEYS.get(item, (item,)):
                    old_crashes.pop(key, None)
            crashes = {**old_crashes, **self.crashes}
            meta.update(self.meta)
            for key, value in self.timings.items():
                timings.setdefault(key, {}).update(value)
        self.write_json("crashes.json", crashes)
        self.write_json("meta.json", meta)
        self.write_json("timings.json", timings)

    def read_json(self, rel: str) -> dict[str, Any]:
        path = os.path.join(self.out, rel)
        if not os.path.exists(path):
            return {}
        with open(path) as fh:
            return json.load(fh)


def _plain(x: Any) -> Any:
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, (np.floating,)):
        return float(x)
    if isinstance(x, np.ndarray):
        return x.tolist()
    raise TypeError(f"not JSON: {type(x)}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--traces", required=True, help="folder of HTA's test traces (shared corpus)")
    ap.add_argument("--out", required=True, help="output folder (tests/data/hta)")
    ap.add_argument("--recordings", default=None, help="folder with the recorded traces (default: --out/recorded)")
    ap.add_argument("--only", nargs="*", default=[], choices=ITEMS,
                    help="rerun these items only, updating crashes.json, meta.json and timings.json (default: all)")
    args = ap.parse_args()
    recordings = args.recordings or os.path.join(args.out, "recorded")
    fr = Freezer(args.traces, args.out, recordings)
    fr.run(args.only)
    fr.write_json("versions.json", {
        "traceinsight": version("traceinsight"), "pandas": pd.__version__, "numpy": np.__version__,
        "python": platform.python_version(), "plotly": version("plotly"),
        "et_replay": "param@1e115ffc62c6d048405d9b963191736c13811b1d et_replay/execution_trace.py",
    })


if __name__ == "__main__":
    sys.exit(main())
