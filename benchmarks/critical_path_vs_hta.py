"""proftab's critical path side by side with HTA's (``traceinsight==0.6.1``) on the public traces.

For each trace of ../shared/traces/public with device activity, in fresh child processes (one run
of this script times both tools on the same machine):

* proftab: ``pt.load`` (``load_s``), then the graph and path of the first ``ProfilerStep`` of the
  lowest rank (``cp_s``; without steps the longest host user annotation, without one the whole
  trace);
* HTA: ``TraceAnalysis`` (``load_s``) and ``critical_path_analysis(rank, annotation, 0)`` on the
  same window (``cp_s``), in the venv given by ``--hta-python``.

It writes a JSON of both results and prints the Markdown table of docs/critical_path.md. Usage::

    python benchmarks/critical_path_vs_hta.py --hta-python /work/venv-hta/bin/python [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PUBLIC = ROOT.parent / "shared" / "traces" / "public"
HTA_BOUNDS = ("cpu_bound", "gpu_compute_bound", "gpu_communication_bound", "gpu_kernel_launch_overhead",
              "gpu_kernel_kernel_overhead", "")


def proftab_child(trace: str) -> dict[str, object]:
    """Load, pick the window, build the path; times and the path in both classifications."""
    import polars as pl

    import proftab as pt
    from proftab.critical_path import path_frame

    t0 = time.perf_counter()
    tr = pt.load(trace)
    load_s = time.perf_counter() - t0
    act = tr.device.activities()
    if not act.filter(pl.col("kind").cast(pl.String) != "sync").height:
        return {"ok": False, "gpu": False}
    t1 = time.perf_counter()
    cp = tr.critical_path
    ev = tr.collect("events", columns=["rank", "cat", "name", "start_ns", "end_ns", "dur_ns", "event_id"])
    rank = int(ev["rank"].min())
    wins = cp.windows(rank=rank)
    annotation, step = "ProfilerStep", None
    if wins["step"].null_count() == 0:
        step = int(wins["step"][0])
    else:
        ua = ev.filter((pl.col("rank") == rank) & (pl.col("cat").cast(pl.String) == "user_annotation")
                       & ~pl.col("name").str.starts_with("ProfilerStep")).sort("dur_ns", descending=True)
        annotation = ua["name"][0] if ua.height else ""
        step = annotation or None
    g = cp.graphs(step, rank=rank)[0]
    p = path_frame(g)
    cp_s = time.perf_counter() - t1
    kind = pl.col("kind").cast(pl.String)
    hta_class = (pl.when(kind == "launch_delay").then(pl.lit("gpu_kernel_launch_overhead"))
                 .when(kind == "stream_gap").then(pl.lit("gpu_kernel_kernel_overhead"))
                 .when(pl.col("bound_by").cast(pl.String) == "gpu_communication_bound")
                 .then(pl.lit("gpu_communication_bound"))
                 .when(kind.is_in(["kernel", "memcpy", "memset"])).then(pl.lit("gpu_compute_bound"))
                 .when(pl.col("via") == "dependency").then(pl.lit(""))
                 .otherwise(pl.lit("cpu_bound")))
    by_hta = p.group_by(hta_class.alias("c")).agg(pl.col("duration_ns").sum())
    by_own = p.group_by(pl.col("bound_by").cast(pl.String)).agg(pl.col("duration_ns").sum())
    return {"ok": True, "gpu": True, "load_s": load_s, "cp_s": cp_s, "rank": rank, "annotation": annotation,
            "step": step if isinstance(step, int) else None, "length_ns": int(p["duration_ns"].sum()),
            "window_ns": g.end_ns - g.start_ns, "nodes": g.n_nodes, "segments": p.height,
            "hta_bound_ns": dict(by_hta.iter_rows()), "bound_ns": dict(by_own.iter_rows())}


def run_child(cmd: list[str], timeout: float, env: dict[str, str] | None = None) -> dict[str, object]:
    t0 = time.perf_counter()
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, check=False)
    except subprocess.TimeoutExpired:
        return {"ok": False, "error": f"timeout after {timeout:.0f} s"}
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
    if not lines:
        return {"ok": False, "error": (r.stderr.strip().splitlines() or ["no output"])[-1][:300]}
    out: dict[str, object] = json.loads(lines[-1])
    out["wall_s"] = time.perf_counter() - t0
    return out


def table(rows: list[dict[str, object]]) -> str:
    head = ("| trace | window | proftab path | HTA path | proftab load + path (s) | HTA load + path (s) | "
            "proftab cpu/gpu/comm/launch/k-k/dep % | HTA cpu/gpu/comm/launch/k-k/dep % |")
    out = [head, "|" + "---|" * 8]
    for r in rows:
        p, h = r["proftab"], r["hta"]
        assert isinstance(p, dict) and isinstance(h, dict)
        win = f"{p.get('annotation')}" + (f"#{p['step']}" if p.get("step") is not None else "")

        def shares(b: object, total: float) -> str:
            if not isinstance(b, dict) or not total:
                return "-"
            return " / ".join(f"{100 * float(b.get(k, 0)) / total:.1f}" for k in HTA_BOUNDS)

        pl_ = f"{int(p['length_ns']) / 1e6:.3f} ms" if p.get("ok") else "failed"
        ht = f"{float(h['length_us']) / 1e3:.3f} ms" if h.get("ok") and "length_us" in h else (
            "failed: " + str(h.get("error", ""))[:60].replace("|", "/"))
        pt_ = f"{float(p['load_s']):.2f} + {float(p['cp_s']):.2f}" if p.get("ok") else "-"
        htt = (f"{float(h['load_s']):.2f} + {float(h['cp_s']):.2f}" if "cp_s" in h else "-")
        out.append(f"| `{r['trace']}` | {win} | {pl_} | {ht} | {pt_} | {htt} | "
                   f"{shares(p.get('hta_bound_ns'), float(p.get('length_ns', 0) or 0))} | "
                   f"{shares(h.get('bound_us'), float(h.get('length_us', 0) or 0)) if h.get('ok') else '-'} |")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hta-python", default="/work/venv-hta/bin/python")
    ap.add_argument("--json", default=None)
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("traces", nargs="*")
    a = ap.parse_args()
    if a.child:
        print(json.dumps(proftab_child(a.child)))
        return
    traces = [Path(t) for t in a.traces] or sorted(PUBLIC.glob("*/*.json.gz"))
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    rows = []
    for t in traces:
        p = run_child([sys.executable, __file__, "--child", str(t)], a.timeout, env)
        if not p.get("gpu", True):
            continue
        name = f"{t.parent.name}/{t.name}"
        h: dict[str, object] = {"ok": False, "error": "proftab failed: no window"}
        if p.get("ok"):
            annotation = str(p["annotation"])
            h = run_child([a.hta_python, str(ROOT / "benchmarks" / "hta_critical_path_worker.py"), str(t),
                           annotation], a.timeout)
        rows.append({"trace": name, "proftab": p, "hta": h})
        print(name, "proftab", p.get("ok"), p.get("length_ns"), "| hta", h.get("ok"), h.get("length_us"),
              h.get("error", ""), file=sys.stderr, flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))
    print(table(rows))
    n = len(rows)
    print(f"\nGPU traces: {n}; proftab completes on {sum(bool(r['proftab'].get('ok')) for r in rows)}, "  # type: ignore[union-attr]
          f"HTA on {sum(bool(r['hta'].get('ok')) for r in rows)}")  # type: ignore[union-attr]


if __name__ == "__main__":
    main()
