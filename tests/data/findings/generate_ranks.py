"""Record the multi-rank findings scenario: 3 CPU processes, torch.distributed with gloo, one straggler.

Every step each rank computes a little (3 matmul+tanh on 64x64), then runs `slow_preprocess` (a
`record_function`: rank `STRAGGLER` sleeps `SLEEP_S` in it, the others do nothing), then a synchronous
`all_reduce` of `NUMEL` float32: the fast ranks reach it first and wait for the straggler, and no
compute runs beside it (the collectives are exposed). `straggler.known.json` keeps each profiled
sleep's wall-clock ns (`perf_counter_ns`).

Run from the repository root::

    python tests/data/findings/generate_ranks.py   # writes tests/data/findings/straggler/rank-{0,1,2}.json.gz

Recorded with torch 2.13.0+cpu on a 2-core machine shared with other jobs (3 processes share it).
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

WORLD = 3
STEPS = 4
STRAGGLER = 2
SLEEP_S = 0.05
#: the all_reduce's elements (float32): 256 KiB
NUMEL = 1 << 16
OUT = Path(__file__).resolve().parent / "straggler"


def _run(rank: int, port: int, tmp: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    torch.manual_seed(rank)
    w = torch.randn(64, 64)
    grad = torch.randn(NUMEL)
    slept: list[int] = []
    sched = torch.profiler.schedule(wait=0, warmup=1, active=STEPS, repeat=1)
    path = os.path.join(tmp, f"rank-{rank}.json")
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], schedule=sched,
                                on_trace_ready=lambda p: p.export_chrome_trace(path)) as prof:
        for _ in range(STEPS + 1):
            x = torch.randn(64, 64)
            for _ in range(3):
                x = torch.tanh(x @ w)
            with torch.profiler.record_function("slow_preprocess"):
                if rank == STRAGGLER:
                    t0 = time.perf_counter_ns()
                    time.sleep(SLEEP_S)
                    slept.append(time.perf_counter_ns() - t0)
            dist.all_reduce(grad)
            grad /= WORLD
            prof.step()
    dist.barrier()
    if rank == STRAGGLER:   # iteration 0 is the warm-up
        Path(tmp, "known.json").write_text(json.dumps({"straggler": STRAGGLER, "sleep_s": SLEEP_S,
                                                       "slept_ns": slept[1:STEPS + 1]}))
    dist.destroy_process_group()


def main() -> None:
    port = 29500 + (os.getpid() % 1000)
    OUT.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(_run, args=(port, tmp), nprocs=WORLD, join=True)
        for r in range(WORLD):
            with open(Path(tmp) / f"rank-{r}.json", "rb") as fi, \
                    gzip.GzipFile(OUT / f"rank-{r}.json.gz", "wb", compresslevel=9, mtime=0) as fo:
                shutil.copyfileobj(fi, fo)
        shutil.copy(Path(tmp) / "known.json", OUT.parent / "straggler.known.json")
    print(f"wrote {WORLD} traces to {OUT}", file=sys.stderr)


if __name__ == "__main__":
    main()
