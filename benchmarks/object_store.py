"""Object-store datasets: convert N generated ranks to S3 and read cross-rank tables back.

Not a timed test. Runs against a local moto S3 server (loopback, so it measures proftab's
requests and work, not a network) when moto and s3fs are installed, and against the same dataset
on the local disk, side by side::

    PYTHONPATH=src python benchmarks/scale.py gen --ranks 64 --out /tmp/scale/src64
    PYTHONPATH=src python benchmarks/object_store.py --src /tmp/scale/src64 [--json OUT.json]

Each step is timed in this process (wall seconds); every dataset is written fresh.
"""

from __future__ import annotations

import argparse
import json
import shutil
import socket
import sys
import tempfile
import time
from pathlib import Path

import polars as pl

import proftab as pt


def _timed(label: str, fn, out: dict) -> object:
    t = time.perf_counter()
    res = fn()
    out[label] = round(time.perf_counter() - t, 3)
    return res


def _measure(sources: list[str], out: str, so: dict | None) -> dict:
    """Convert `sources` to `out`, then scan it and read three cross-rank answers, each timed."""
    r: dict = {}
    _timed("convert_s", lambda: pt.convert(sources, out, progress=False, storage_options=so), r)
    sc = _timed("scan_s", lambda: pt.scan(out, storage_options=so), r)
    _timed("ranks_key_averages_s", lambda: sc.ranks.key_averages(), r)
    _timed("step_times_s", lambda: sc.ranks.step_times(), r)
    _timed("one_rank_events_s", lambda: sc.lazy("events").filter(pl.col("rank") == 3).select("name", "dur_ns")
           .collect(), r)
    return r


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--src", type=Path, required=True, help="a directory of rank-*.json.gz (scale.py gen)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    from moto.server import ThreadedMotoServer

    sources = sorted(str(p) for p in args.src.glob("rank-*.json.gz"))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port)
    server.start()
    import boto3

    endpoint = f"http://127.0.0.1:{port}"
    boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="testing",
                 aws_secret_access_key="testing").create_bucket(Bucket="bench")
    opts = {"key": "testing", "secret": "testing",
            "client_kwargs": {"endpoint_url": endpoint, "region_name": "us-east-1"}}
    rows = {"ranks": len(sources), "source_mb": round(sum(Path(p).stat().st_size for p in sources) / 1e6, 1)}
    tmp = Path(tempfile.mkdtemp(prefix="proftab-objbench-"))
    try:
        for where, out, so in (("local", str(tmp / "ds"), None), ("s3", "s3://bench/ds", opts)):
            rows[where] = _measure(sources, out, so)
            print(where, json.dumps(rows[where]), flush=True)
    finally:
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    print(json.dumps(rows))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
