#!/usr/bin/env python3
"""The scanner alone on its two walks: scalar (the reference) against SIMD (the structural index).

For each trace (JSON text, or .gz decompressed first into memory):

* ``ir``: callgrind instructions per byte of JSON inside `Parser.feed` for each path, in a child
  process each (stable on a loaded machine; needs valgrind);
* ``time``: the scanner over the text already in memory, the two paths in alternating pairs
  (scalar, simd, scalar, simd, ... in one process), the median of the per-pair ratios and the
  median MB/s of each path.

usage: python benchmarks/scanner_paths.py [--pairs 7] [--no-ir] TRACE [TRACE ...]
Prints one JSON object per trace.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CHILD = r"""
import sys
from proftab.io import kineto
data = open(sys.argv[1], "rb").read()
kineto.scan_bytes(data)
"""


def _text(path: str) -> bytes:
    raw = Path(path).read_bytes()
    return gzip.decompress(raw) if path.endswith(".gz") else raw


def instructions(json_path: str, path: str) -> int | None:
    """callgrind's instruction count inside Parser.feed for one scan on `path`, or None without valgrind."""
    if shutil.which("valgrind") is None:
        return None
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "cg.out"
        env = dict(os.environ, PROFTAB_SCANNER=path)
        subprocess.run(["valgrind", "--tool=callgrind", "--toggle-collect=Parser_feed",
                        f"--callgrind-out-file={out}", sys.executable, "-c", CHILD, json_path],
                       env=env, check=True, capture_output=True)
        for line in out.read_text().splitlines():
            if line.startswith("summary:") or line.startswith("totals:"):
                return int(line.split()[1])
    return None


def timings(data: bytes, pairs: int) -> dict[str, float]:
    """Alternating scalar/simd scans of `data` in this process: medians of MB/s and of simd/scalar."""
    from proftab.io import _kineto, kineto

    secs: dict[str, list[float]] = {"scalar": [], "simd": []}
    for _ in range(pairs):
        for path in ("scalar", "simd"):
            _kineto.set_path(path)
            t = time.perf_counter()
            kineto.scan_bytes(data)
            secs[path].append(time.perf_counter() - t)
    _kineto.set_path("auto")
    ratios = [b / a for a, b in zip(secs["scalar"], secs["simd"], strict=True)]
    mb = len(data) / 1e6
    return {"scalar_mb_s": mb / statistics.median(secs["scalar"]), "simd_mb_s": mb / statistics.median(secs["simd"]),
            "simd_over_scalar_time": statistics.median(ratios)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("traces", nargs="+")
    ap.add_argument("--pairs", type=int, default=7)
    ap.add_argument("--no-ir", action="store_true", help="skip the callgrind counts")
    args = ap.parse_args()
    from proftab.io import _kineto

    for trace in args.traces:
        data = _text(trace)
        res: dict[str, object] = {"trace": trace, "json_bytes": len(data), "isa": _kineto.get_path()[1]}
        if not args.no_ir:
            with tempfile.NamedTemporaryFile(suffix=".json") as fh:
                fh.write(data)
                fh.flush()
                for path in ("scalar", "simd"):
                    ir = instructions(fh.name, path)
                    res[f"{path}_ir_per_byte"] = None if ir is None else round(ir / len(data), 2)
        res.update(timings(data, args.pairs))
        print(json.dumps(res), flush=True)


if __name__ == "__main__":
    main()
