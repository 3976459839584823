"""Peak RSS of key_averages() on a scanned dataset (lazy: only the columns it needs) vs eager paths.

Builds a multi-rank dataset from N copies of one trace (explicit ranks, so no stored
key_averages is reused), then measures in a fresh process each:

* ``lazy``: ``pt.scan(ds).key_averages()`` (projection pushdown through ``Trace.collect``);
* ``eager_dataset``: every table of the dataset collected whole first, then ``key_averages()``;
* ``json``: ``pt.load(files, ranks=...).key_averages()`` from the JSON files.

usage: python benchmarks/bench_scan_rss.py TRACE [N_RANKS] [WORKDIR]
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

CHILD = r"""
import json, resource, sys, time
import polars as pl
import proftab as pt
mode, ds, files = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
t0 = time.perf_counter()
if mode == "lazy":
    ka = pt.scan(ds).key_averages()
elif mode == "eager_dataset":
    sc = pt.scan(ds)
    tables = {k: v.collect() for k, v in sc.tables.items()}
    ka = pt.Trace(tables, sc.files).key_averages()
else:
    ka = pt.load(files, ranks=list(range(len(files)))).key_averages()
dt = time.perf_counter() - t0
print(json.dumps({"mode": mode, "seconds": dt, "rows": ka.height,
                  "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def main() -> None:
    trace = sys.argv[1]
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 8
    work = sys.argv[3] if len(sys.argv) > 3 else tempfile.mkdtemp(prefix="proftab-bench-")
    import proftab as pt

    files = [trace] * n
    ds = os.path.join(work, f"ds{n}")
    if not os.path.isdir(ds):
        pt.convert(files, ds, ranks=list(range(n)), progress=False, max_workers=1)
    size = sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(ds) for f in fs)
    print(f"trace {trace} x {n} ranks; dataset {size / 1e6:.1f} MB on disk")
    base = None
    for mode in ("lazy", "eager_dataset", "json"):
        out = subprocess.run([sys.executable, "-c", CHILD, mode, ds, json.dumps(files)], check=True,
                             capture_output=True, text=True)
        r = json.loads(out.stdout.strip().splitlines()[-1])
        base = base or r["peak_rss_mb"]
        print(f"{mode:14s} {r['seconds']:7.2f} s  peak RSS {r['peak_rss_mb']:8.1f} MB  "
              f"({r['peak_rss_mb'] / base:4.2f}x lazy)  rows {r['rows']}")


if __name__ == "__main__":
    main()
