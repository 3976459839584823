"""Record the `gloo4` rank set: 4 CPU processes on localhost, torch.distributed with gloo.

A small MLP trained data-parallel by hand: every step all_gathers a batch statistic,
all_reduces the gradients, reduce_scatters a flat buffer and broadcasts a parameter from
rank 0; a second process group (ranks 0 and 1) all_reduces a scalar, so the set holds two
groups.  Rank 3 sleeps 30 ms (in a `data_wait` range) before its gradient all_reduce in every step: the others
wait for it (a known straggler for the tests).  Profiled with record_shapes, profile_memory
and with_stack off (to keep the files small); one ``ProfilerStep#N`` per step.

Run from the repository root::

    python tests/data/gloo4/generate.py            # writes tests/data/gloo4/rank-{0..3}.json.gz

Recorded with torch 2.13.0+cpu, Python 3.11, on a 2-core machine (the 4 processes share them,
so per-rank jitter is real scheduling noise).
"""

from __future__ import annotations

import gzip
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

WORLD = 4
STEPS = 4
STRAGGLER = 3
STRAGGLER_SLEEP_S = 0.03
OUT = Path(__file__).resolve().parent


def _run(rank: int, port: int, tmp: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    pair = dist.new_group([0, 1])
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 16))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    torch.manual_seed(rank + 1)
    data = [(torch.randn(32, 64), torch.randn(32, 16)) for _ in range(STEPS + 1)]
    acts = [torch.profiler.ProfilerActivity.CPU]
    sched = torch.profiler.schedule(wait=0, warmup=1, active=STEPS)
    trace_path = os.path.join(tmp, f"rank-{rank}.json")

    def on_ready(prof: torch.profiler.profile) -> None:
        prof.export_chrome_trace(trace_path)

    with torch.profiler.profile(activities=acts, schedule=sched, on_trace_ready=on_ready, record_shapes=True,
                                profile_memory=False, with_stack=False) as prof:
        for x, y in data:
            with torch.profiler.record_function("data_wait"):
                if rank == STRAGGLER:
                    time.sleep(STRAGGLER_SLEEP_S)
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            stat = [torch.zeros(1) for _ in range(WORLD)]
            dist.all_gather(stat, loss.detach().reshape(1))
            for p in model.parameters():
                assert p.grad is not None
                dist.all_reduce(p.grad)
                p.grad /= WORLD
            flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])[: WORLD * 256].contiguous()
            shard = torch.empty(256)
            dist.reduce_scatter_tensor(shard, flat)
            dist.broadcast(model[0].bias.data, src=0)
            if rank in (0, 1):
                dist.all_reduce(loss.detach().clone(), group=pair)
            opt.step()
            prof.step()
    dist.barrier()
    dist.destroy_process_group()


def main() -> None:
    port = 29500 + (os.getpid() % 1000)
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(_run, args=(port, tmp), nprocs=WORLD, join=True)
        for r in range(WORLD):
            src = Path(tmp) / f"rank-{r}.json"
            with open(src, "rb") as fi, gzip.GzipFile(OUT / f"rank-{r}.json.gz", "wb", mtime=0) as fo:
                shutil.copyfileobj(fi, fo)
    print(f"wrote {WORLD} traces to {OUT}", file=sys.stderr)


if __name__ == "__main__":
    main()
