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
    t2 = time.perf_counter()
    gt = cp.graphs(step, rank=rank, tail=True)[0]
    pt_ = path_frame(gt)
    tail_s = time.perf_counter() - t2
    kind = pl.col("kind").cast(pl.String)
    hta_class = (pl.when(kind == "launch_delay").then(pl.lit("gpu_kernel_launch_overhead"))
                 .when(kind == "stream_gap").then(pl.lit("gpu_kernel_kernel_overhead"))
                 .when(pl.col("bound_by").cast(pl.String) == "gpu_communication_bound")
                 .then(pl.lit("gpu_communication_bound"))
                 .when(kind.is_in(["kernel", "memcpy", "memset"])).then(pl.lit("gpu_compute_bound"))
                 .when(pl.col("via") == "dependency").then(pl.lit(""))
                 .otherwise(pl.lit("cpu_bound")))
    def classes(q: pl.DataFrame, how: pl.Expr) -> dict[str, int]:
        return dict(q.group_by(how.alias("c")).agg(pl.col("dur_ns").sum()).iter_rows())

    own = pl.col("bound_by").cast(pl.String)
    return {"ok": True, "gpu": True, "load_s": load_s, "cp_s": cp_s, "tail_s": tail_s, "rank": rank,
            "annotation": annotation, "step": step if isinstance(step, int) else None,
            "length_ns": int(p["dur_ns"].sum()), "tail_length_ns": int(pt_["dur_ns"].sum()),
            "window_ns": g.end_ns - g.start_ns, "nodes": g.n_nodes, "segments": p.height,
            "hta_bound_ns": classes(p, hta_class), "bound_ns": classes(p, own),
            "tail_hta_bound_ns": classes(pt_, hta_class), "tail_bound_ns": classes(pt_, own)}


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


def _shares(b: object, total: float) -> str:
    if not isinstance(b, dict) or not total:
        return "-"
    return " / ".join(f"{100 * float(b.get(k, 0)) / total:.0f}" for k in HTA_BOUNDS)


def table(rows: list[dict[str, object]]) -> str:
    """The Markdown comparison table (ms; shares in % of each tool's own path length)."""
    head = ("| trace | window | window (ms) | proftab path (ms) | proftab tail path (ms) | HTA Σ weights (ms) | "
            "HTA path span (ms) | proftab s (load + path) | HTA s (load + path) | "
            "proftab tail cpu/gpu/comm/launch/k-k/dep % | HTA cpu/gpu/comm/launch/k-k/dep % |")
    out = [head, "|" + "---|" * 11]
    for r in rows:
        p, h = r["proftab"], r["hta"]
        assert isinstance(p, dict) and isinstance(h, dict)
        win = f"{p.get('annotation') or '(whole trace)'}" + (f"#{p['step']}" if p.get("step") is not None else "")
        ok = bool(p.get("ok"))
        hok = bool(h.get("ok")) and "length_us" in h
        cells = [f"`{r['trace']}`", win,
                 f"{int(p['window_ns']) / 1e6:.3f}" if ok else "-",
                 f"{int(p['length_ns']) / 1e6:.3f}" if ok else "failed",
                 f"{int(p['tail_length_ns']) / 1e6:.3f}" if ok else "failed",
                 f"{float(h['length_us']) / 1e3:.3f}" if hok else "failed: " + str(h.get("error", ""))[:70].replace(
                     "|", "/"),
                 f"{float(h.get('span_us', 0)) / 1e3:.3f}" if hok else "-",
                 f"{float(p['load_s']):.2f} + {float(p['cp_s']):.2f}" if ok else "-",
                 f"{float(h['load_s']):.2f} + {float(h['cp_s']):.2f}" if "cp_s" in h else "-",
                 _shares(p.get("tail_hta_bound_ns"), float(p.get("tail_length_ns", 0) or 0)) if ok else "-",
                 _shares(h.get("bound_us"), float(h.get("length_us", 0) or 0)) if hok else "-"]
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hta-python", default="/work/venv-hta/bin/python")
    ap.add_argument("--json", default=None)
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--reuse-hta", default=None, metavar="JSON",
                    help="take HTA's results from an earlier --json output instead of running it")
    ap.add_argument("traces", nargs="*")
    a = ap.parse_args()
    if a.child:
        print(json.dumps(proftab_child(a.child)))
        return
    traces = [Path(t) for t in a.traces] or sorted(PUBLIC.glob("*/*.json.gz"))
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    rows = []
    earlier = {r["trace"]: r["hta"] for r in json.loads(Path(a.reuse_hta).read_text())} if a.reuse_hta else {}
    for t in traces:
        p = run_child([sys.executable, __file__, "--child", str(t)], a.timeout, env)
        if not p.get("gpu", True):
            continue
        name = f"{t.parent.name}/{t.name}"
        h: dict[str, object] = {"ok": False, "error": "proftab failed: no window"}
        if name in earlier:
            h = earlier[name]
        elif p.get("ok"):
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
