"""Benchmark: key_averages from the JSON trace vs from its Parquet dataset.

For each trace, in fresh child processes (so neither side profits from a warm cache of
the other), measures the median over `--repeat` runs of

* ``json``: ``pt.load(trace).key_averages()`` (parse, nest, aggregate);
* ``convert``: ``pt.convert(trace, dir)`` once (parse, nest, write);
* ``parquet``: ``pt.scan(dir).key_averages()`` (a single-rank dataset stores the default
  key_averages, written and read back by the same code);
* ``parquet_computed``: ``pt.scan(dir).key_averages(by_step=True)`` against the same call
  on the JSON: an option with no stored copy, aggregated from the stored nesting;
* ``parquet_read``: ``pt.scan(dir).nested`` alone (the I/O share of the computed path);

and checks that both key_averages frames are identical.  Times exclude interpreter start
and ``import proftab``.  Usage::

    python benchmarks/bench_parquet.py [TRACE ...] [--repeat 3] [--json out.json]

Without arguments it runs on the generated traces under /work/bench_traces/ that exist.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

DEFAULT = [f"/work/bench_traces/{name}/trace.json.gz" for name in ("large_50mb", "large_200mb", "large_500mb")]

CHILD = r"""
import sys, time, json
t_import = time.perf_counter()
import proftab as pt
mode, src = sys.argv[1], sys.argv[2]
t0 = time.perf_counter()
if mode == "json":
    ka = pt.load(src).key_averages()
elif mode == "parquet":
    ka = pt.scan(src).key_averages()
elif mode == "json_computed":
    ka = pt.load(src).key_averages(by_step=True)
elif mode == "parquet_computed":
    ka = pt.scan(src).key_averages(by_step=True)
elif mode == "parquet_read":
    ka = pt.scan(src).nested
elif mode == "convert":
    ka = None
    pt.convert(src, sys.argv[3], progress=False)
dt = time.perf_counter() - t0
if len(sys.argv) > 4 and ka is not None:
    ka.write_parquet(sys.argv[4])
print(json.dumps({"seconds": dt}))
"""


def _child(*args: str) -> float:
    res = subprocess.run([sys.executable, "-c", CHILD, *args], capture_output=True, text=True, check=False)
    if res.returncode != 0:
        raise RuntimeError(f"child {args} failed:\n{res.stderr}")
    return float(json.loads(res.stdout.strip().splitlines()[-1])["seconds"])


def _size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def bench(trace: str, repeat: int) -> dict[str, object]:
    import polars as pl
    from polars.testing import assert_frame_equal

    with tempfile.TemporaryDirectory(prefix="proftab-bench-") as tmp:
        out = Path(tmp) / "ds"
        convert_s = _child("convert", trace, str(out))
        json_s = [_child("json", trace, "-", str(Path(tmp) / "ka_json.parquet")) for _ in range(repeat)]
        pq_s = [_child("parquet", str(out), "-", str(Path(tmp) / "ka_pq.parquet")) for _ in range(repeat)]
        read_s = [_child("parquet_read", str(out)) for _ in range(repeat)]
        json_c = [_child("json_computed", trace, "-", str(Path(tmp) / "kc_json.parquet")) for _ in range(repeat)]
        pq_c = [_child("parquet_computed", str(out), "-", str(Path(tmp) / "kc_pq.parquet")) for _ in range(repeat)]
        assert_frame_equal(pl.read_parquet(Path(tmp) / "kc_pq.parquet"), pl.read_parquet(Path(tmp) / "kc_json.parquet"))
        assert_frame_equal(pl.read_parquet(Path(tmp) / "ka_pq.parquet"), pl.read_parquet(Path(tmp) / "ka_json.parquet"))
        manifest = json.loads((out / "_proftab.json").read_text())
        row = {
            "trace": trace,
            "trace_bytes": os.path.getsize(trace),
            "events": manifest["rows"]["events"],
            "dataset_bytes": _size(out),
            "convert_s": round(convert_s, 3),
            "json_key_averages_s": round(statistics.median(json_s), 3),
            "parquet_key_averages_s": round(statistics.median(pq_s), 3),
            "parquet_read_nested_s": round(statistics.median(read_s), 3),
            "json_by_step_s": round(statistics.median(json_c), 3),
            "parquet_by_step_s": round(statistics.median(pq_c), 3),
            "runs": {"json": json_s, "parquet": pq_s, "parquet_read": read_s, "json_by_step": json_c,
                     "parquet_by_step": pq_c},
        }
        row["speedup"] = round(row["json_key_averages_s"] / row["parquet_key_averages_s"], 2)  # type: ignore[operator]
        row["speedup_computed"] = round(row["json_by_step_s"] / row["parquet_by_step_s"], 2)  # type: ignore[operator]
        return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("traces", nargs="*", default=None)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", default=None, help="write the results as JSON here")
    args = ap.parse_args(argv)
    traces = args.traces or [t for t in DEFAULT if os.path.exists(t)]
    rows = []
    print(f"{'trace':<48} {'events':>10} {'json MB':>8} {'pq MB':>7} {'convert':>8} {'ka json':>8} "
          f"{'ka pq':>7} {'read':>6} {'speedup':>8} {'by_step json':>13} {'by_step pq':>11} {'speedup':>8}")
    for t in traces:
        t0 = time.perf_counter()
        r = bench(t, args.repeat)
        rows.append(r)
        print(f"{t[-48:]:<48} {r['events']:>10,} {r['trace_bytes'] / 1e6:>8.1f} {r['dataset_bytes'] / 1e6:>7.1f} "
              f"{r['convert_s']:>7.2f}s {r['json_key_averages_s']:>7.2f}s {r['parquet_key_averages_s']:>6.2f}s "
              f"{r['parquet_read_nested_s']:>5.2f}s {r['speedup']:>7.1f}x {r['json_by_step_s']:>12.2f}s "
              f"{r['parquet_by_step_s']:>10.2f}s {r['speedup_computed']:>7.1f}x   ({time.perf_counter() - t0:.0f}s)",
              flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({"machine": {"cpus": os.cpu_count()}, "results": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
