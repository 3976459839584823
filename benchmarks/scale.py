"""Scale benchmark: replicate a rank set to N ranks, convert on Dask, cross-rank tables, scans.

Not a timed test. Steps (each optional)::

    PYTHONPATH=src python benchmarks/scale.py gen --ranks 256 --out /tmp/scale/src256
    PYTHONPATH=src python benchmarks/scale.py convert --src /tmp/scale/src256 --ranks 64 256 --workers 1 2 \\
        --out /tmp/scale/ds --json benchmarks/results/scale.json
    PYTHONPATH=src python benchmarks/scale.py tables --dataset /tmp/scale/ds-256-w2
    PYTHONPATH=src python benchmarks/scale.py scan --dataset /tmp/scale/ds-256-w2 --copies 8
    PYTHONPATH=src python benchmarks/scale.py scan --dataset /tmp/scale/ds-256-w2 --copies 128 --modes streaming
    PYTHONPATH=src python benchmarks/scale.py queries --dataset /tmp/scale/ds-20-w2

``scan --copies K`` lists every events part file K times (the same files: K x the rows, read K
times; the page cache serves the repeats, so it measures memory, not disk throughput).

The generator replicates tests/data/gloo4 (4 real gloo ranks): rank r is a copy of source rank
r mod 4 with its own clock offset (uniform 0-200 us), a per-rank speed factor (1 + N(0, 0.02),
every timestamp and duration of the step stretched by it, which keeps nesting intact) and one
straggler rank (N // 3, factor 1.15); ``distributedInfo`` says rank r of N.  Memory is measured
as the peak RSS (``ru_maxrss``) of each worker process and of a fresh process per table/scan.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BASE = sorted((ROOT / "tests" / "data" / "gloo4").glob("rank-*.json.gz"))


def _stretch(trace: dict, rank: int, world: int, offset_us: float, factor: float) -> dict:
    evs = trace["traceEvents"]
    t0 = min(float(e["ts"]) for e in evs if "ts" in e)
    out = []
    for e in evs:
        e = dict(e)
        if "ts" in e:
            e["ts"] = round(t0 + offset_us + (float(e["ts"]) - t0) * factor, 3)
        if "dur" in e:
            e["dur"] = round(float(e["dur"]) * factor, 3)
        out.append(e)
    info = dict(trace.get("distributedInfo", {}), rank=rank, world_size=world)
    return {**trace, "traceEvents": out, "distributedInfo": info}


def gen(n: int, out: Path, seed: int = 0) -> None:
    rng = random.Random(seed)
    out.mkdir(parents=True, exist_ok=True)
    srcs = [json.loads(gzip.decompress(p.read_bytes())) for p in BASE]
    t = time.monotonic()
    for r in range(n):
        factor = 1.15 if r == n // 3 else max(0.95, 1 + rng.gauss(0, 0.02))
        tr = _stretch(srcs[r % len(srcs)], r, n, rng.uniform(0, 200), factor)
        (out / f"rank-{r}.json.gz").write_bytes(gzip.compress(json.dumps(tr).encode(), compresslevel=1))
    print(f"generated {n} ranks in {time.monotonic() - t:.1f}s -> {out}", file=sys.stderr)


def _maxrss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def convert_bench(src: Path, ranks: list[int], workers: list[int], out: Path) -> list[dict]:
    import distributed

    import proftab as pt

    files = sorted(src.glob("rank-*.json.gz"), key=lambda p: int(p.name.split("-")[1].split(".")[0]))
    results = []
    for n in ranks:
        sel = [str(p) for p in files[:n]]
        nbytes = sum(os.path.getsize(p) for p in sel)
        raw = sum(len(gzip.decompress(Path(p).read_bytes())) for p in sel[:4]) * n / 4
        for w in workers:
            t0 = time.monotonic()
            with distributed.LocalCluster(n_workers=w, threads_per_worker=1, processes=True, host="127.0.0.1",
                                          dashboard_address=":0") as cl, distributed.Client(cl) as c:
                startup = time.monotonic() - t0
                dest = Path(f"{out}-{n}-w{w}")
                shutil.rmtree(dest, ignore_errors=True)
                t1 = time.monotonic()
                pt.convert(sel, dest, client=c, progress=False)
                wall = time.monotonic() - t1
                rss = c.run(_maxrss_mb)
            row = {"ranks": n, "workers": w, "startup_s": round(startup, 2), "convert_s": round(wall, 2),
                   "files_per_s": round(n / wall, 2), "gz_MB": round(nbytes / 1e6, 2),
                   "json_MB_est": round(raw / 1e6, 1), "json_MB_per_s": round(raw / 1e6 / wall, 2),
                   "worker_peak_rss_MB": sorted(round(v) for v in rss.values()),
                   "dataset_MB": round(sum(f.stat().st_size for f in dest.rglob("*") if f.is_file()) / 1e6, 2)}
            print(json.dumps(row), flush=True)
            results.append(row)
    return results


_TABLES = """
import json, resource, sys, time
import polars as pl
import proftab as pt
from proftab.ranks import collective_instances, match_calls, rank_calls, rank_comm, rank_step_comm, slowest_ranks
t0 = time.monotonic()
sc = pt.scan(sys.argv[1])
mode = sys.argv[2]
if mode == "summaries":
    inst = sc.ranks.collective_instances(); per = sc.ranks.rank_step_comm(); slow = sc.ranks.slowest_ranks()
else:
    from proftab.ranks import _COMM_COLUMNS
    ev = sc.collect("events", _COMM_COLUMNS)
    calls = rank_calls(ev)
    cr = match_calls(calls, sc.files)
    inst = collective_instances(cr); per = rank_step_comm(cr, inst, rank_comm(calls, ev))
    slow = slowest_ranks(ev, sc.files)
dt = time.monotonic() - t0
top = per.filter(pl.col("straggler")).group_by("rank").len().sort("len", descending=True).head(1).rows()
print(json.dumps({"mode": mode, "seconds": round(dt, 2), "instances": inst.height, "rank_steps": per.height,
                  "steps": slow.height, "straggler_rank(most steps)": top,
                  "peak_rss_MB": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)}))
"""

_SCAN = """
import json, resource, sys, time, glob, os
import polars as pl
parts = sorted(glob.glob(os.path.join(sys.argv[1], "events", "rank=*", "part-0.parquet"))) * int(sys.argv[2])
mode = sys.argv[3]
t0 = time.monotonic()
lf = pl.scan_parquet(parts).filter(pl.col("cat") == "cpu_op").group_by("name").agg(
    pl.len(), pl.col("dur_ns").sum(), pl.col("dur_ns").max().alias("max_ns"))
if mode == "streaming":
    out = lf.collect(engine="streaming")
else:
    out = pl.scan_parquet(parts).collect().lazy().filter(pl.col("cat") == "cpu_op").group_by("name").agg(
        pl.len(), pl.col("dur_ns").sum(), pl.col("dur_ns").max().alias("max_ns")).collect()
dt = time.monotonic() - t0
nbytes = sum(os.path.getsize(p) for p in parts)
print(json.dumps({"mode": mode, "files": len(parts), "parquet_MB": round(nbytes / 1e6, 1),
                  "rows": int(out["len"].sum()), "seconds": round(dt, 2),
                  "peak_rss_MB": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)}))
"""

# proftab-level queries over a dataset, each in a fresh process: `ranks_ka` merges the per-rank
# summary_key_averages, `window` is one rank's first second (predicate pushdown, streaming),
# `ka` is the exact multi-rank key_averages() (every host event of every rank, percentiles)
_QUERY = """
import json, resource, sys, time
import polars as pl
import proftab as pt
mode = sys.argv[2]
t = time.monotonic()
sc = pt.scan(sys.argv[1])
if mode == "ranks_ka":
    rows = sc.ranks.key_averages().height
elif mode == "window":
    lf = sc.lazy("events").filter(pl.col("rank") == 3)
    t0 = lf.select(pl.col("start_ns").min()).collect().item()
    out = (lf.filter(pl.col("start_ns").is_between(t0, t0 + 1_000_000_000)).group_by("name")
           .agg(pl.len(), pl.col("dur_ns").sum()).collect(engine="streaming"))
    rows = int(out["len"].sum())
else:
    rows = sc.key_averages().height
print(json.dumps({"mode": mode, "seconds": round(time.monotonic() - t, 2), "rows": rows,
                  "peak_rss_MB": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)}))
"""


def _sub(code: str, *args: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    res = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, check=True)
    row = json.loads(res.stdout.strip().splitlines()[-1])
    print(json.dumps(row), flush=True)
    return row


def main() -> None:
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("gen")
    g.add_argument("--ranks", type=int, required=True)
    g.add_argument("--out", type=Path, required=True)
    c = sub.add_parser("convert")
    c.add_argument("--src", type=Path, required=True)
    c.add_argument("--ranks", type=int, nargs="+", default=[64, 256])
    c.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    c.add_argument("--out", type=Path, required=True)
    c.add_argument("--json", type=Path)
    t = sub.add_parser("tables")
    t.add_argument("--dataset", required=True)
    s = sub.add_parser("scan")
    s.add_argument("--dataset", required=True)
    s.add_argument("--copies", type=int, default=1)
    s.add_argument("--modes", nargs="+", default=["streaming", "eager"])
    q = sub.add_parser("queries")
    q.add_argument("--dataset", required=True)
    q.add_argument("--modes", nargs="+", default=["ranks_ka", "window", "ka"])
    args = ap.parse_args()
    if args.cmd == "gen":
        gen(args.ranks, args.out)
    elif args.cmd == "convert":
        rows = convert_bench(args.src, args.ranks, args.workers, args.out)
        if args.json:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(rows, indent=1))
    elif args.cmd == "tables":
        for mode in ("summaries", "events"):
            _sub(_TABLES, args.dataset, mode)
    elif args.cmd == "queries":
        for mode in args.modes:
            _sub(_QUERY, args.dataset, mode)
    else:
        for mode in args.modes:
            _sub(_SCAN, args.dataset, str(args.copies), mode)


if __name__ == "__main__":
    main()
