"""Freeze TraceLens's perf-report numbers for the public traces into compact CSVs (see README.md).

Runs in a virtual environment that has TraceLens installed (not proftab's): it calls TraceLens's
own `generate_perf_report_pytorch` (what `TraceLens_generate_perf_report_pytorch` runs) once per
trace and keeps, besides the family CSVs the report writes, the per-event rows the report
aggregated and TraceLens's kernel -> launch -> op links. No TraceLens code is copied here.

    VENV/bin/python tests/data/tracelens/freeze.py OUTDIR TRACE [TRACE ...] [--arch MI300X.json]

Per trace (`<folder>__<file stem>`, gzip -9, no timestamp):
  `.ops.csv.gz`     one row per row of a family CSV (GEMM.csv, SDPA_fwd.csv, ...): csv, name,
                    uid_first, name_count, params (JSON of the `param: *` cells as written),
                    gflops_first / data_moved_mb_first (as written), tl_flops = round(GFLOPS x 1e9),
                    tl_bytes = round(MB x 2**20), compute_spec, kernel time and rate columns, and
                    roofline columns when the trace's device has an arch file (--arch).
  `.events.csv.gz`  one row per op event the report aggregated: csv, name, uid, uid_first (the
                    row of .ops it belongs to), kernel_us (TraceLens's busy time of its kernels, float
                    us from the trace), n_kernels, kernel_uids (';'-joined traceEvents positions).
  `.kernels.csv.gz` one row per GPU event (kernel, gpu_memcpy, gpu_memset): uid, cat, runtime_uid
                    (the launch TraceLens linked it to, empty if none), op_uid (innermost cpu_op
                    above that launch), op_name.
and one line in `index.csv`: device, TraceLens's linking key, GPU events, linked, seconds.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import importlib
import io
import json
import math
import os
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

from TraceLens import TreePerfAnalyzer

if TYPE_CHECKING:
    import pandas as pd

# the module itself (TraceLens.Reporting re-exports a function of the same name)
report = importlib.import_module("TraceLens.Reporting.generate_perf_report_pytorch")
csv.field_size_limit(sys.maxsize)  # the CSVs hold whole kernel-detail lists in one cell
SINGLE_TABLE = {"GEMM", "UnaryElementwise", "BinaryElementwise", "Normalization"}
# the report moves these names from the forward table to the backward one (generate_perf_report_pytorch)
BWD_NAMES_IN_FWD = {"flash_attn::_flash_attn_varlen_backward", "aten::convolution_backward",
                    "ConvBias_Backward", "ConvBiasReLU_Backward"}
GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}
KEEP = [  # (column in TraceLens's family CSV, column here)
    ("Compute Spec", "compute_spec"),
    ("Kernel Time (µs)_sum", "kernel_us_sum"), ("Kernel Time (µs)_mean", "kernel_us_mean"),
    ("Kernel Time (µs)_min", "kernel_us_min"), ("Kernel Time (µs)_max", "kernel_us_max"),
    ("TB/s_mean", "tb_s_mean"), ("TFLOPS/s_mean", "tflops_s_mean"),
    ("Roofline Time (µs)_first", "roofline_time_us"), ("Roofline Bound_first", "roofline_bound"),
    ("Pct Roofline_mean", "pct_roofline_mean"),
]


def write_gz(path: Path, header: list[str], rows: list[list[object]]) -> None:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(header)
    w.writerows(rows)
    with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=9, mtime=0, filename="") as gz:
        gz.write(buf.getvalue().encode())


def cell(v: object) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return ""
    return str(v)


def to_int(v: str, scale: float) -> str:
    return "" if v in ("", "nan") else str(round(float(v) * scale))


def target_csv(sheet: str, name: str, bwd: bool) -> str:
    """The family CSV the report puts a per-event row in."""
    if sheet in SINGLE_TABLE:
        return sheet
    return f"{sheet}_bwd" if bwd or name in BWD_NAMES_IN_FWD else f"{sheet}_fwd"


def run(trace: Path, out: Path, arch: str | None, label: str) -> dict[str, object]:
    captured: list[tuple[bool, pd.DataFrame]] = []
    analyzers: list[TreePerfAnalyzer] = []
    original = TreePerfAnalyzer.build_df_perf_metrics

    def capture(self, events, bwd=False, *a, **kw):  # the report's own call, recorded
        df = original(self, events, bwd, *a, **kw)
        captured.append((bwd, df))
        if not analyzers:
            analyzers.append(self)
        return df

    TreePerfAnalyzer.build_df_perf_metrics = capture
    t0 = time.perf_counter()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            report.generate_perf_report_pytorch(profile_json_path=str(trace), output_csvs_dir=tmp,
                                                gpu_arch_json_path=arch)
            seconds = time.perf_counter() - t0
            tables = {p.stem: list(csv.DictReader(p.open(newline="", encoding="utf-8")))
                      for p in sorted(Path(tmp).glob("*.csv"))}
    finally:
        TreePerfAnalyzer.build_df_perf_metrics = original

    # .ops: the family CSVs' rows
    ops_rows, expected = [], {}
    for stem, rows in tables.items():
        if not rows or "UID_first" not in rows[0] or "GFLOPS_first" not in rows[0]:
            continue
        for r in rows:
            params = {k[len("param: "):]: r[k] for k in r if k.startswith("param: ")}
            uid = int(float(r["UID_first"]))
            expected[(stem, uid)] = int(float(r["name_count"]))
            ops_rows.append([stem, r["name"], uid, r["name_count"], json.dumps(params, ensure_ascii=False),
                             r["GFLOPS_first"], r["Data Moved (MB)_first"],
                             to_int(r["GFLOPS_first"], 1e9), to_int(r["Data Moved (MB)_first"], 2**20),
                             *[r.get(src, "") for src, _ in KEEP]])
    ops_rows.sort(key=lambda x: (x[0], x[2]))

    # .events: the per-event rows those CSV rows aggregate (same grouping: name + param cells)
    names_by_sheet = {}
    pa = analyzers[0] if analyzers else None
    if pa is not None:
        for sheet, names in report.build_sheet_category_to_op_names(pa.op_to_perf_model_class_map).items():
            for n in names:
                names_by_sheet.setdefault(n, sheet)
    groups: dict[tuple, list[dict]] = {}
    for bwd, df in captured:
        if df is None or df.empty:
            continue
        pcols = [c for c in df.columns if c.startswith("param: ")]
        for rec in df.to_dict("records"):
            sheet = names_by_sheet.get(rec["name"])
            if sheet is None:
                continue
            csv_name = target_csv(sheet, rec["name"], bwd)
            if csv_name not in tables:
                continue
            key = (csv_name, rec["name"], *[str(rec[c]) for c in pcols])
            kd = rec.get("kernel_details") or []
            groups.setdefault(key, []).append({
                "uid": int(rec["UID"]), "kernel_us": rec["Kernel Time (µs)"], "n": len(kd),
                "kernels": ";".join(str(k["gpu_op_uid"]) for k in kd)})
    ev_rows = []
    for key, evs in groups.items():
        first = min(e["uid"] for e in evs)
        if (key[0], first) not in expected:  # e.g. a convolution row the report drops from a bwd table
            continue
        for e in evs:
            ev_rows.append([key[0], key[1], e["uid"], first, repr(float(e["kernel_us"])), e["n"], e["kernels"]])
    ev_rows.sort(key=lambda x: (x[0], x[2]))
    got: dict[tuple, int] = {}
    for r in ev_rows:
        got[(r[0], r[3])] = got.get((r[0], r[3]), 0) + 1
    if got != expected:
        missing = {k: v for k, v in expected.items() if got.get(k) != v}
        print(f"  {label}: per-event rows differ from the CSVs' name_count on {len(missing)} rows: "
              f"{list(missing.items())[:5]}", file=sys.stderr)

    # .kernels: TraceLens's links, GPU event -> launch -> innermost cpu_op
    k_rows, linking_key, n_gpu, n_linked = [], "", 0, 0
    if pa is not None:
        tree = pa.tree
        linking_key = tree.linking_key
        for ev in tree.events:
            if ev.get("cat") not in GPU_CATS:
                continue
            n_gpu += 1
            rt = ev.get("parent")
            op_uid, op_name = "", ""
            if rt is not None:
                n_linked += 1
                p = tree.events_by_uid[rt].get("parent")
                while p is not None and tree.events_by_uid[p].get("cat") != "cpu_op":
                    p = tree.events_by_uid[p].get("parent")
                if p is not None:
                    op_uid, op_name = p, tree.events_by_uid[p]["name"]
            k_rows.append([ev["UID"], ev["cat"], "" if rt is None else rt, op_uid, op_name])

    header = ["csv", "name", "uid_first", "name_count", "params", "gflops_first", "data_moved_mb_first",
              "tl_flops", "tl_bytes", *[dst for _, dst in KEEP]]
    write_gz(out / f"{label}.ops.csv.gz", header, ops_rows)
    write_gz(out / f"{label}.events.csv.gz",
             ["csv", "name", "uid", "uid_first", "kernel_us", "n_kernels", "kernel_uids"], ev_rows)
    write_gz(out / f"{label}.kernels.csv.gz", ["uid", "cat", "runtime_uid", "op_uid", "op_name"], k_rows)
    device = ""
    if pa is not None:
        props = pa.trace_metadata.get("deviceProperties") or []
        device = "; ".join(sorted({str(p.get("name", "")) for p in props if isinstance(p, dict)}))
    return {"trace": label, "device": device, "arch": Path(arch).stem if arch else "",
            "gpu_only": bool(pa.gpu_only) if pa is not None else "", "linking_key": linking_key,
            "gpu_events": n_gpu, "linked": n_linked, "op_rows": len(ops_rows), "event_rows": len(ev_rows),
            "seconds": f"{seconds:.1f}"}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out", type=Path)
    p.add_argument("traces", nargs="+", type=Path)
    p.add_argument("--arch", help="TraceLens arch JSON, used for traces whose device name contains its 'name'")
    p.add_argument("--arch-also", nargs="*", default=[], help="trace labels that get --arch whatever their device")
    args = p.parse_args()
    warnings.filterwarnings("ignore")  # TraceLens warns with whole events (e.g. ops with no kernel time)
    args.out.mkdir(parents=True, exist_ok=True)
    arch_name = json.loads(Path(args.arch).read_text())["name"] if args.arch else None
    index = []
    for t in args.traces:
        label = f"{t.parent.name}__{t.name.removesuffix('.gz').removesuffix('.json')}"
        with gzip.open(t, "rt", encoding="utf-8", errors="replace") as fh:
            head = fh.read(200_000)
        use_arch = args.arch if args.arch and (arch_name in head or label in args.arch_also) else None
        print(f"{label} (arch: {use_arch is not None})", file=sys.stderr)
        stdout, sys.stdout = sys.stdout, open(os.devnull, "w")  # the report prints a line per CSV
        try:
            index.append(run(t, args.out, use_arch, label))
        except Exception as e:  # noqa: BLE001 - record that TraceLens could not run on this trace
            index.append({"trace": label, "device": "", "arch": "", "gpu_only": "", "linking_key": "",
                          "gpu_events": "", "linked": "", "op_rows": "", "event_rows": "",
                          "seconds": f"error: {type(e).__name__}: {str(e)[:200]}"})
        finally:
            sys.stdout.close()
            sys.stdout = stdout
    path = args.out / "index.csv"
    old = {r["trace"]: r for r in csv.DictReader(path.open())} if path.exists() else {}
    old.update({r["trace"]: {k: cell(v) for k, v in r.items()} for r in index})
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(index[0]), lineterminator="\n")
        w.writeheader()
        w.writerows(sorted(old.values(), key=lambda r: r["trace"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
