"""Benchmark: load a trace and attribute its device activities to ops.

Each repetition runs in a fresh child process and measures, after ``import proftab``:

* ``load``: ``tr = pt.load(trace)``;
* ``attribute``: ``tr.device.activities()`` + ``tr.device.self_time()`` (what
  ``key_averages`` needs: kernel -> launch -> op links and the per-op sums);
* ``total``: the two together;
* ``analyses`` (informative): ``summary``, ``busy``, ``idle_breakdown``, ``comm_overlap``,
  ``kernel_categories``, ``launch_delay`` on the same trace.

The machine is shared, so the figure to quote is the minimum over the repetitions (the
median is printed too). Usage::

    python benchmarks/bench_device.py [TRACE ...] [--repeat 7] [--json out.json]

Without arguments it runs on the largest public GPU trace, xDiT SD3.5 (62 MB JSON, 239k
events) from ../shared/traces/public.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = [ROOT.parent / "shared/traces/public/tracelens/inference__xdit_sd_3.5__profile_trace_rank_0.json.gz"]

CHILD = r"""
import json, sys, time
import proftab as pt
src = sys.argv[1]
t0 = time.perf_counter()
tr = pt.load(src)
t1 = time.perf_counter()
dev = tr.device
acts = dev.activities()
own = dev.self_time()
t2 = time.perf_counter()
dev.summary(); dev.busy(); dev.idle_breakdown(); dev.comm_overlap()
dev.kernel_categories(); dev.launch_delay()
t3 = time.perf_counter()
print(json.dumps({"load": t1 - t0, "attribute": t2 - t1, "total": t2 - t0, "analyses": t3 - t2,
                  "events": tr.events.height, "activities": acts.height,
                  "unattributed": int(acts.filter(acts["op_id"].is_null()).height)}))
"""


def run(trace: Path, repeat: int) -> dict:
    """Measure `trace` `repeat` times, each in a fresh interpreter."""
    runs = []
    for _ in range(repeat):
        out = subprocess.run([sys.executable, "-c", CHILD, str(trace)], capture_output=True, text=True, check=True)
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    keys = ("load", "attribute", "total", "analyses")
    return {
        "trace": trace.name, "events": runs[0]["events"], "activities": runs[0]["activities"],
        "unattributed": runs[0]["unattributed"], "repeat": repeat,
        "min_s": {k: min(r[k] for r in runs) for k in keys},
        "median_s": {k: statistics.median(r[k] for r in runs) for k in keys},
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("traces", nargs="*", type=Path, default=DEFAULT)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--json", type=Path, default=None, help="write the results here")
    args = ap.parse_args(argv)
    results = []
    for trace in args.traces:
        if not trace.exists():
            print(f"missing: {trace}", file=sys.stderr)
            continue
        r = run(trace, args.repeat)
        results.append(r)
        mn, md = r["min_s"], r["median_s"]
        print(f"{r['trace']}: {r['events']:,} events, {r['activities']:,} device activities "
              f"({r['unattributed']} unattributed), {r['repeat']} runs")
        for k in ("load", "attribute", "total", "analyses"):
            print(f"  {k:<10} min {mn[k]:.3f} s   median {md[k]:.3f} s")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0 if results else 1


if __name__ == "__main__":
    raise SystemExit(main())
