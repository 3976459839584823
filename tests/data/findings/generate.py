"""Record the findings scenario traces: each has one cause, known by construction.

Run with torch (CPU) from the repository root::

    python tests/data/findings/generate.py        # writes tests/data/findings/*.pt.trace.json.gz

The constants below are what the tests check the findings against (tests/test_findings.py).
"""

from __future__ import annotations

import ctypes
import gzip
import json
import os
import shutil
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import torch
from torch._C._profiler import _ExperimentalConfig
from torch.profiler import ProfilerActivity, profile, record_function, schedule

HERE = os.path.dirname(os.path.abspath(__file__))
STEPS = 6
#: leak: one float32 tensor of this many elements kept alive per step (4 MiB)
LEAK_NUMEL = 1 << 20
LEAK_BYTES = LEAK_NUMEL * 4
#: data loading: time.sleep of this many seconds per step
SLEEP_S = 0.030
#: python loop: tiny ops per step
TINY_OPS = 1000
TINY_STEPS = 3
#: thread pool: workers; the thread named `straggler` gets STRAGGLER_TASKS times a worker's work
POOL_WORKERS = 4
STRAGGLER_TASKS = 6
#: matmul+tanh pairs per task of a regular worker
POOL_TASK = 10
#: memory: one float32 tensor of PEAK_NUMEL elements (8 MiB) made by `torch.ones` in `Holder.forward`,
#: alive at each step's peak; then CHURN_N blocks of CHURN_NUMEL float32 (64 KiB) each allocated and
#: freed in `churn()` (`torch.empty`, each freed when the next replaces it)
PEAK_NUMEL = 1 << 21
PEAK_BYTES = PEAK_NUMEL * 4
CHURN_N = 500
CHURN_NUMEL = 1 << 14
CHURN_BYTES = CHURN_NUMEL * 4


def _write(prof: profile, name: str) -> None:
    raw = os.path.join(HERE, f"{name}.pt.trace.json")
    prof.export_chrome_trace(raw)
    with open(raw, "rb") as src, gzip.open(raw + ".gz", "wb", compresslevel=9) as dst:
        shutil.copyfileobj(src, dst)
    os.remove(raw)


def _profile(**kw: object) -> profile:
    return profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=0, warmup=1, active=STEPS, repeat=1), **kw)


def leak() -> None:
    kept: list[torch.Tensor] = []
    w = torch.randn(64, 64)
    with _profile(profile_memory=True, record_shapes=True, with_stack=True) as prof:
        for _ in range(STEPS + 2):
            x = torch.randn(32, 64)
            for _ in range(4):
                x = torch.relu(x @ w)          # temporaries, freed in the step
            kept.append(torch.empty(LEAK_NUMEL))  # the leak: never freed
            prof.step()
    _write(prof, "leak")


class Holder(torch.nn.Module):
    """Makes the step's large activation: the block that holds the peak."""

    def forward(self) -> torch.Tensor:
        return torch.ones(PEAK_NUMEL)     # kept by the caller until after churn(): alive at the step's peak


def churn() -> None:
    for _ in range(CHURN_N):
        t = torch.empty(CHURN_NUMEL)     # allocated, then freed when the next one replaces it
    del t


def memory() -> None:
    holder = Holder()
    with _profile(profile_memory=True, record_shapes=True, with_stack=True, with_modules=True) as prof:
        for _ in range(STEPS + 2):
            big = holder()
            churn()
            del big
            prof.step()
    _write(prof, "memory")


SLEPT_NS: list[int] = []


def load_batch() -> torch.Tensor:
    t0 = time.perf_counter_ns()
    time.sleep(SLEEP_S)                  # the data-loading stall, outside any op
    SLEPT_NS.append(time.perf_counter_ns() - t0)
    return torch.ones(8, 8)


def data_loading() -> None:
    w = torch.randn(256, 256)
    with _profile(with_stack=True) as prof:
        for _ in range(STEPS + 2):
            x = load_batch()
            y = torch.randn(64, 256)
            for _ in range(5):
                y = torch.tanh(y @ w)
            del x
            prof.step()
    _write(prof, "sleep")
    # what the sleeps took by the wall clock in the profiled steps (iteration 0 is the warm-up, the last
    # one runs after the profiler stopped): the tests' reference for the finding's share
    with open(os.path.join(HERE, "sleep.known.json"), "w") as fh:
        json.dump({"sleep_s": SLEEP_S, "slept_ns": SLEPT_NS[1:STEPS + 1]}, fh)


def tiny_ops() -> None:
    with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=0, warmup=1, active=TINY_STEPS, repeat=1)
                 ) as prof:
        for _ in range(TINY_STEPS + 2):
            x = torch.zeros(4)
            for _ in range(TINY_OPS):
                x = x + 1            # thousands of tiny ops: host dispatch dominates
            prof.step()
    _write(prof, "tiny_ops")


def _task(n: int) -> float:
    a = torch.randn(192, 192)
    with record_function("pool_task"):
        for _ in range(n):
            a = torch.tanh(a @ a)
    return float(a.sum())


def _name_thread(name: bytes) -> None:
    """Set the OS thread name (what Kineto writes as thread_name): prctl(PR_SET_NAME)."""
    ctypes.CDLL(None).prctl(15, ctypes.c_char_p(name), 0, 0, 0)


def thread_pool() -> None:
    torch.set_num_threads(1)
    barrier = threading.Barrier(POOL_WORKERS)

    def start(i: int) -> None:
        _name_thread(b"straggler" if i == POOL_WORKERS - 1 else f"worker{i}".encode())
        barrier.wait()   # every worker thread exists and is named before the work is handed out

    pool = ThreadPoolExecutor(POOL_WORKERS)
    list(pool.map(start, range(POOL_WORKERS)))
    names = list(pool.map(lambda _: threading.get_native_id(), range(POOL_WORKERS)))
    del names

    def run(i: int) -> float:
        # the thread named "straggler" (the last) gets STRAGGLER_TASKS times the work of the others
        barrier.wait()
        me = ctypes.create_string_buffer(16)
        ctypes.CDLL(None).prctl(16, me, 0, 0, 0)
        return _task(POOL_TASK * (STRAGGLER_TASKS if me.value == b"straggler" else 1))

    with _profile(experimental_config=_ExperimentalConfig(profile_all_threads=True)) as prof:
        for _ in range(STEPS + 2):
            list(pool.map(run, range(POOL_WORKERS)))
            prof.step()
    pool.shutdown()
    _write(prof, "thread_pool")


if __name__ == "__main__":
    torch.manual_seed(0)
    torch.set_num_threads(1)   # one intra-op thread: less noise from a busy machine
    import sys

    for name in sys.argv[1:] or ["leak", "data_loading", "tiny_ops", "thread_pool", "memory"]:
        globals()[name]()
