"""pt.from_profiler + key_averages against export_chrome_trace + pt.load + key_averages (issue 29.3).

    python benchmarks/from_profiler.py live|json [N]

records a CPU profile of N x 8 ops (default 13,000 iterations: 104,001 events with torch 2.13), then
builds key_averages one way and prints the seconds after the profile stopped. Time the two modes
as whole processes side by side (alternating A B A B); the profiling itself is the same in both.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time

import torch

import proftab as pt


def main() -> None:
    mode = sys.argv[1]
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 13_000
    x = torch.randn(8, 8)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True) as prof:
        for _ in range(n):
            x = torch.relu(x @ x).clamp_max(1.0)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        if mode == "json":
            path = os.path.join(tmp, "trace.json")
            prof.export_chrome_trace(path)
            tr = pt.load(path)
        else:
            tr = pt.from_profiler(prof)
        tr.key_averages()
    print(f"{mode}: {len(tr.events)} events, {time.perf_counter() - t0:.3f} s after the profile stopped")


if __name__ == "__main__":
    main()
