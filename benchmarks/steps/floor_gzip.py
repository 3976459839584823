"""Floor: stream-decompress a .json.gz with Python's gzip module, discard output.

usage: python floor_gzip.py TRACE.json.gz
"""
import gzip
import sys

from _child import perf, run


def main():
    path = sys.argv[1]
    n = 0
    t0 = perf()
    if path.endswith(".gz"):
        with gzip.open(path, "rb") as f:
            while True:
                b = f.read(1 << 20)
                if not b:
                    break
                n += len(b)
    else:  # plain JSON: just read it
        with open(path, "rb") as f:
            while True:
                b = f.read(1 << 20)
                if not b:
                    break
                n += len(b)
    dt = perf() - t0
    return {"seconds": dt, "timings": {"gunzip_s": dt}, "json_bytes": n}


run(main)
