"""Record the known-cause traces of issue 37: one cause each, known by construction, torch 2.13 CPU.

Each recording writes ``<name>.pt.trace.json.gz`` (gzip -9) and ``<name>.known.json`` with the cause's
exact quantities (the constants below, and what the code measured with ``time.perf_counter_ns``
in the profiled steps). Run from the repository root::

    nice python tests/data/findings/generate_causes.py                 # all of them
    nice python tests/data/findings/generate_causes.py waits outliers  # some

* ``dataloader_inline``: a ``DataLoader`` with ``num_workers=0`` whose transforms run torch ops
  (crop, flip, normalize, a 9x9 blur by ``conv2d``): about 40 % of the step, on the step thread;
* ``thread_churn``: 4 worker threads created and joined every step (new thread ids each step, the same
  names ``worker0`` .. ``worker3``), ``worker3`` gets ``STRAGGLER_TASKS`` times the work; a
  ``torch.distributed`` gloo group of one process runs an ``all_reduce`` per step on gloo's own thread;
* ``waits``: per step the step thread waits for a lock another thread holds (sleeping) and joins a
  thread that sleeps: waits, not CPU work;
* ``barrier``: 4 gloo processes; rank ``BARRIER_SLOW_RANK`` sleeps in a plain Python function
  (``read_shard``, no ``record_function``) every step, the others wait in ``dist.barrier()``;
* ``outlier_steps``: 30 profiled steps, 3 of them (known) do 10x the work;
* ``loss_scalar``: a training loop that keeps each step's 0-dim loss (``loss.detach()``): 4 bytes per step;
* ``aligned_gemms``: bf16 GEMMs whose dimensions are all multiples of 8 and a bf16 3x3 conv on 28x28
  maps (padding advice must not fire on them), beside one bf16 GEMM with an output width of 1001
  (the control: a dimension that is not a multiple of 8).
"""

from __future__ import annotations

import ctypes
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch._C._profiler import _ExperimentalConfig
from torch.profiler import ProfilerActivity, profile, record_function, schedule

HERE = Path(__file__).resolve().parent

#: dataloader_inline: samples per batch, image size before/after the crop, profiled steps
DL_BATCH = 16
DL_RAW = 72
DL_CROP = 64
DL_STEPS = 6
#: thread_churn: workers per step, the straggler's multiple of a worker's tasks, matmul+tanh per task
CHURN_WORKERS = 4
STRAGGLER_TASKS = 6
CHURN_TASK = 24
CHURN_STEPS = 6
#: waits: the holder thread keeps the lock this long (sleeping); the joined thread sleeps this long
LOCK_HOLD_S = 0.020
JOIN_SLEEP_S = 0.015
WAIT_STEPS = 6
#: barrier: ranks, the slow rank, its sleep per step, profiled steps
BARRIER_WORLD = 4
BARRIER_SLOW_RANK = 1
BARRIER_SLEEP_S = 0.040
BARRIER_STEPS = 5
#: outlier_steps: profiled steps, the profiled steps (0-based) that do OUTLIER_FACTOR times the work
OUTLIER_STEPS = 30
OUTLIERS = (6, 17, 25)
OUTLIER_FACTOR = 10
OUTLIER_WORK = 4
OUTLIER_M = 256
OUTLIER_K = 512
#: loss_scalar: profiled steps
LOSS_STEPS = 8
#: aligned_gemms: batch, widths, conv maps
GEMM_BATCH = 64
GEMM_IN = 512
GEMM_HIDDEN = 1024
CONTROL_OUT = 1001
CONV_BATCH = 8
CONV_CHANNELS = 64
CONV_HW = 28
GEMM_STEPS = 5


def _write(prof: profile, name: str) -> None:
    """Export the trace, gzip -9 (mtime 0), into tests/data/findings/<name>.pt.trace.json.gz."""
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(raw))
        _gzip(raw, HERE / f"{name}.pt.trace.json.gz")


def _gzip(src: Path, dst: Path) -> None:
    with src.open("rb") as fi, gzip.GzipFile(dst, "wb", compresslevel=9, mtime=0) as fo:
        shutil.copyfileobj(fi, fo)


def _known(name: str, **facts: object) -> None:
    facts = {"torch": torch.__version__, **facts}
    (HERE / f"{name}.known.json").write_text(json.dumps(facts, indent=1) + "\n")


def _thread_names(trace: Path) -> dict[str, str | None]:
    """tid -> the thread_name metadata Kineto wrote (None: none written), for every tid with an event."""
    with gzip.open(trace, "rt") as fh:
        events = json.load(fh)["traceEvents"]
    named = {str(e["tid"]): e["args"]["name"] for e in events if e.get("ph") == "M" and e.get("name") == "thread_name"}
    tids = {str(e["tid"]) for e in events if e.get("ph") == "X" and isinstance(e.get("tid"), int)}
    return {tid: named.get(tid) for tid in sorted(tids, key=int)}


def _schedule(active: int) -> schedule:
    """Iteration 0 is the profiler's warm-up; iterations 1..active are ProfilerStep#1..#active."""
    return schedule(wait=0, warmup=1, active=active, repeat=1)


def _name_thread(name: str) -> None:
    """Set the OS thread name (what Kineto writes as thread_name): prctl(PR_SET_NAME)."""
    ctypes.CDLL(None).prctl(15, ctypes.c_char_p(name.encode()), 0, 0, 0)


# --- c1: a DataLoader with num_workers=0, torch-op transforms on the step thread -------------------------

MEAN = torch.tensor([0.485, 0.456, 0.406]).view(3, 1, 1)
STD = torch.tensor([0.229, 0.224, 0.225]).view(3, 1, 1)
BLUR = torch.full((3, 1, 9, 9), 1.0 / 81.0)


def transform(img: torch.Tensor) -> torch.Tensor:
    """Crop, flip, normalize and blur (9x9) one image: torch ops, run by the DataLoader on the step thread."""
    off = (DL_RAW - DL_CROP) // 2
    img = img[:, off:off + DL_CROP, off:off + DL_CROP]
    img = torch.flip(img, dims=[2])
    img = (img - MEAN) / STD
    return F.conv2d(img[None], BLUR, padding=4, groups=3)[0]


class Images(torch.utils.data.Dataset[tuple[torch.Tensor, int]]):
    """Synthetic 3x72x72 images (a decode stand-in: `torch.rand` with a per-index generator)."""

    def __len__(self) -> int:
        return 1 << 20

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        img = torch.rand(3, DL_RAW, DL_RAW, generator=torch.Generator().manual_seed(index))
        return transform(img), index % 10


def dataloader_inline() -> None:
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                          nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                          nn.Flatten(), nn.Linear(8, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = torch.utils.data.DataLoader(Images(), batch_size=DL_BATCH, num_workers=0)
    it = iter(loader)
    data_ns: list[int] = []
    step_ns: list[int] = []
    data_cpu_ns: list[int] = []
    step_cpu_ns: list[int] = []
    with profile(activities=[ProfilerActivity.CPU], schedule=_schedule(DL_STEPS), record_shapes=True,
                 with_stack=True, with_modules=True) as prof:
        for _ in range(DL_STEPS + 1):
            t0, c0 = time.perf_counter_ns(), time.thread_time_ns()
            x, y = next(it)
            t1, c1 = time.perf_counter_ns(), time.thread_time_ns()
            opt.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            step_ns.append(time.perf_counter_ns() - t0)
            step_cpu_ns.append(time.thread_time_ns() - c0)
            data_ns.append(t1 - t0)
            data_cpu_ns.append(c1 - c0)
            prof.step()
    _write(prof, "dataloader_inline")
    _known("dataloader_inline", num_workers=0, batch_size=DL_BATCH, image=[3, DL_RAW, DL_RAW],
           crop=[3, DL_CROP, DL_CROP],
           transform_ops_per_sample=["aten::rand", "aten::slice (x2)", "aten::flip", "aten::sub", "aten::div",
                                     "aten::conv2d 9x9 depthwise (blur)"],
           collate="aten::stack of the batch", range_name="enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
           thread="the step (main) thread", profiled_steps=DL_STEPS,
           data_wall_ns=data_ns[1:], step_wall_ns=step_ns[1:], data_cpu_ns=data_cpu_ns[1:],
           step_cpu_ns=step_cpu_ns[1:],
           note="data_*: next(iterator) per profiled step; step_*: from next() to after opt.step(); *_wall_ns "
                "by perf_counter_ns, *_cpu_ns by thread_time_ns (the step thread's CPU time: load-independent)")


# --- c2: worker threads re-created every step, one straggler; gloo's own thread -----------------------------

def _task(n: int) -> float:
    a = torch.randn(160, 160)
    with record_function("worker_task"):
        for _ in range(n):
            a = torch.tanh(a @ a)
    return float(a.sum())


def thread_churn() -> None:
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(29500 + os.getpid() % 1000))
    dist.init_process_group("gloo", rank=0, world_size=1)
    grad = torch.randn(1 << 16)
    per_step: list[dict[str, Any]] = []

    def worker(i: int, out: dict[str, dict[str, int]]) -> None:
        name = f"worker{i}"
        _name_thread(name)
        t0, c0 = time.perf_counter_ns(), time.thread_time_ns()
        _task(CHURN_TASK * (STRAGGLER_TASKS if i == CHURN_WORKERS - 1 else 1))
        out[name] = {"tid": threading.get_native_id(), "busy_ns": time.perf_counter_ns() - t0,
                     "cpu_ns": time.thread_time_ns() - c0}

    with profile(activities=[ProfilerActivity.CPU], schedule=_schedule(CHURN_STEPS), record_shapes=True,
                 with_stack=True, experimental_config=_ExperimentalConfig(profile_all_threads=True)) as prof:
        for _ in range(CHURN_STEPS + 1):
            threads_out: dict[str, dict[str, int]] = {}
            threads = [threading.Thread(target=worker, args=(i, threads_out), name=f"worker{i}")
                       for i in range(CHURN_WORKERS)]
            t0 = time.perf_counter_ns()
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            joined_ns = time.perf_counter_ns() - t0
            t1 = time.perf_counter_ns()
            dist.all_reduce(grad)          # gloo runs it on its own thread
            allreduce_ns = time.perf_counter_ns() - t1
            per_step.append({"workers": threads_out, "start_to_join_ns": joined_ns, "all_reduce_ns": allreduce_ns})
            prof.step()
    dist.destroy_process_group()
    _write(prof, "thread_churn")
    steps = per_step[1:]
    busy_by_step = [{name: w["busy_ns"] for name, w in s["workers"].items()} for s in steps]
    excess = []
    for workers in busy_by_step:
        others = sorted(ns for name, ns in workers.items() if name != f"worker{CHURN_WORKERS - 1}")
        excess.append(workers[f"worker{CHURN_WORKERS - 1}"] - others[len(others) // 2])
    _known("thread_churn", thread_names_in_trace=_thread_names(HERE / "thread_churn.pt.trace.json.gz"),
           workers=CHURN_WORKERS, straggler=f"worker{CHURN_WORKERS - 1}",
           straggler_tasks_multiple=STRAGGLER_TASKS, task="record_function('worker_task'): "
           f"{CHURN_TASK} x (aten::mm [160,160]x[160,160] + aten::tanh) per unit of work",
           library_thread="gloo's worker thread (torch.distributed, world_size=1): gloo:all_reduce of 65536 float32",
           profiled_steps=CHURN_STEPS, steps=steps, straggler_excess_over_median_ns=excess,
           note="each step creates new threads (new tids), named worker0..worker3 with prctl; the main thread "
                "starts and joins them (start_to_join_ns), then all_reduces. busy_ns: a worker's task by the wall "
                "clock (on 2 busy cores it includes waiting for a CPU, so it is noisy); cpu_ns: its thread CPU "
                "time (thread_time_ns). straggler_excess_over_median_ns is by busy_ns. thread_names_in_trace: "
                "the thread_name metadata Kineto wrote (None: none, for threads that exited before the export)")


# --- c3: lock waits and thread joins on the step thread -------------------------------------------------------

def waits() -> None:
    lock = threading.Lock()
    go = threading.Event()
    held = threading.Event()

    def holder() -> None:
        _name_thread("lock_holder")
        while True:
            go.wait()
            go.clear()
            with lock:
                held.set()
                time.sleep(LOCK_HOLD_S)

    threading.Thread(target=holder, daemon=True).start()
    w = torch.randn(256, 256)
    lock_ns: list[int] = []
    handoff_ns: list[int] = []
    join_ns: list[int] = []
    step_ns: list[int] = []
    with profile(activities=[ProfilerActivity.CPU], schedule=_schedule(WAIT_STEPS), record_shapes=True,
                 with_stack=True) as prof:
        for _ in range(WAIT_STEPS + 1):
            t0 = time.perf_counter_ns()
            x = torch.randn(128, 256)
            for _ in range(10):
                x = torch.tanh(x @ w)
            go.set()
            held.wait()                     # the holder has the lock now
            held.clear()
            t1 = time.perf_counter_ns()
            lock.acquire()                  # the wait: the holder sleeps LOCK_HOLD_S with it
            t2 = time.perf_counter_ns()
            lock.release()
            helper = threading.Thread(target=time.sleep, args=(JOIN_SLEEP_S,))
            helper.start()
            t3 = time.perf_counter_ns()
            helper.join()                   # the wait: the helper sleeps JOIN_SLEEP_S
            t4 = time.perf_counter_ns()
            for _ in range(10):
                x = torch.tanh(x @ w)
            step_ns.append(time.perf_counter_ns() - t0)
            handoff_ns.append(t1 - t0)
            lock_ns.append(t2 - t1)
            join_ns.append(t4 - t3)
            prof.step()
    _write(prof, "waits")
    _known("waits", lock_hold_s=LOCK_HOLD_S, join_sleep_s=JOIN_SLEEP_S, profiled_steps=WAIT_STEPS,
           lock_wait_ns=lock_ns[1:], join_wait_ns=join_ns[1:], step_wall_ns=step_ns[1:],
           frames={"lock": "<built-in method acquire of _thread.lock object at 0x...> called from "
                           "generate_causes.py(N): waits",
                   "join": "threading.py(N): join -> threading.py(N): _wait_for_tstate_lock -> "
                           "<built-in method acquire of _thread.lock object at 0x...>",
                   "handoff": "threading.py(N): wait (Event.wait for the holder to take the lock; short)"},
           note="lock_wait_ns: lock.acquire() on the step thread while thread 'lock_holder' sleeps holding it; "
                "join_wait_ns: Thread.join() of a thread running time.sleep; step_wall_ns includes both and "
                "2 x 10 (aten::mm [128,256]x[256,256] + aten::tanh)")


# --- c4: a barrier-bound rank set (gloo, 4 processes) ---------------------------------------------------------

def read_shard(rank: int, slept: list[int]) -> torch.Tensor:
    """The slow rank's stall: a plain sleep, no record_function."""
    if rank == BARRIER_SLOW_RANK:
        t0 = time.perf_counter_ns()
        time.sleep(BARRIER_SLEEP_S)
        slept.append(time.perf_counter_ns() - t0)
    return torch.randn(64, 128)


def _barrier_rank(rank: int, port: int, tmp: str) -> None:
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=BARRIER_WORLD)
    torch.manual_seed(rank)
    w = torch.randn(128, 128)
    grad = torch.randn(1 << 14)
    slept: list[int] = []
    barrier_ns: list[int] = []
    path = os.path.join(tmp, f"rank-{rank}.json")
    with profile(activities=[ProfilerActivity.CPU], schedule=_schedule(BARRIER_STEPS), record_shapes=True,
                 with_stack=True, on_trace_ready=lambda p: p.export_chrome_trace(path)) as prof:
        for _ in range(BARRIER_STEPS + 1):
            x = read_shard(rank, slept)
            for _ in range(4):
                x = torch.tanh(x @ w)
            t0 = time.perf_counter_ns()
            dist.barrier()
            barrier_ns.append(time.perf_counter_ns() - t0)
            dist.all_reduce(grad)
            grad /= BARRIER_WORLD
            prof.step()
    Path(tmp, f"known-{rank}.json").write_text(json.dumps({"barrier_wall_ns": barrier_ns[1:],
                                                           "slept_ns": slept[1:] if slept else None}))
    dist.barrier()
    dist.destroy_process_group()


def barrier() -> None:
    import torch.multiprocessing as mp

    port = 29500 + (os.getpid() + 500) % 1000
    out = HERE / "barrier"
    out.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(_barrier_rank, args=(port, tmp), nprocs=BARRIER_WORLD, join=True)
        ranks = {}
        for r in range(BARRIER_WORLD):
            _gzip(Path(tmp) / f"rank-{r}.json", out / f"rank-{r}.json.gz")
            ranks[str(r)] = json.loads(Path(tmp, f"known-{r}.json").read_text())
    _known("barrier", world=BARRIER_WORLD, slow_rank=BARRIER_SLOW_RANK, sleep_s=BARRIER_SLEEP_S,
           profiled_steps=BARRIER_STEPS, slept_ns=ranks[str(BARRIER_SLOW_RANK)]["slept_ns"],
           barrier_wall_ns={r: k["barrier_wall_ns"] for r, k in ranks.items()},
           sleep_frame="read_shard -> <built-in function sleep> (no record_function)",
           per_step="read_shard; 4 x (aten::mm [64,128]x[128,128] + aten::tanh); dist.barrier(); "
                    "dist.all_reduce of 16384 float32; grad /= world",
           note="barrier_wall_ns: dist.barrier() per profiled step and rank (the fast ranks wait in it "
                "for the slow one)")


# --- c5: outlier steps ----------------------------------------------------------------------------------------

def outlier_steps() -> None:
    w = torch.randn(OUTLIER_K, OUTLIER_K)
    step_ns: list[int] = []
    with profile(activities=[ProfilerActivity.CPU], schedule=_schedule(OUTLIER_STEPS), record_shapes=True) as prof:
        for i in range(OUTLIER_STEPS + 1):
            t0 = time.perf_counter_ns()
            n = OUTLIER_WORK * (OUTLIER_FACTOR if i - 1 in OUTLIERS else 1)
            x = torch.randn(OUTLIER_M, OUTLIER_K)
            for _ in range(n):
                x = torch.tanh(x @ w)
            step_ns.append(time.perf_counter_ns() - t0)
            prof.step()
    _write(prof, "outlier_steps")
    mm = f"[{OUTLIER_M},{OUTLIER_K}]x[{OUTLIER_K},{OUTLIER_K}]"
    _known("outlier_steps", profiled_steps=OUTLIER_STEPS, outlier_indices=list(OUTLIERS),
           outlier_profiler_steps=[f"ProfilerStep#{i + 1}" for i in OUTLIERS], factor=OUTLIER_FACTOR,
           work_per_normal_step=f"{OUTLIER_WORK} x (aten::mm {mm} + aten::tanh)",
           work_per_outlier_step=f"{OUTLIER_WORK * OUTLIER_FACTOR} x (aten::mm {mm} + aten::tanh)",
           mm_flops_per_normal_step=OUTLIER_WORK * 2 * OUTLIER_M * OUTLIER_K * OUTLIER_K,
           mm_flops_per_outlier_step=OUTLIER_FACTOR * OUTLIER_WORK * 2 * OUTLIER_M * OUTLIER_K * OUTLIER_K,
           step_wall_ns=step_ns[1:],
           note="outlier_indices are 0-based among the profiled steps; iteration 0 is the profiler warm-up, "
                "so profiled step i is ProfilerStep#(i+1)")


# --- c6: a 0-dim loss kept per step ---------------------------------------------------------------------------

def loss_scalar() -> None:
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 8))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    kept: list[torch.Tensor] = []
    data = [(torch.randn(32, 64), torch.randn(32, 8)) for _ in range(LOSS_STEPS + 1)]
    with profile(activities=[ProfilerActivity.CPU], schedule=_schedule(LOSS_STEPS), profile_memory=True,
                 record_shapes=True, with_stack=True, with_modules=True) as prof:
        for x, y in data:
            opt.zero_grad()
            with record_function("compute_loss"):
                loss = (model(x) - y).pow(2).mean()   # a 0-dim result with its own 4-byte storage
            loss.backward()
            opt.step()
            kept.append(loss.detach())   # the "leak": a 0-dim float32 (4 bytes) kept per step
            prof.step()
    _write(prof, "loss_scalar")
    _known("loss_scalar", bytes_per_step=4, dtype="float32", shape=[], profiled_steps=LOSS_STEPS,
           site="the output of aten::mean inside record_function('compute_loss')",
           kept_after_profiling=len(kept),
           note="kept.append(loss.detach()) keeps each step's 0-dim loss storage alive: 4 bytes per step, "
                "harmless (not a real leak of consequence). F.mse_loss is not used: its 0-dim result keeps "
                "the storage of its unreduced [32, 8] buffer (1,024 bytes)")


# --- c7: aligned bf16 GEMMs and a 3x3 conv on 28x28 maps ------------------------------------------------------

class Aligned(nn.Module):
    """bf16 GEMMs with every dimension a multiple of 8, and a 3x3 conv on 28x28 maps."""

    def __init__(self) -> None:
        super().__init__()
        self.up = nn.Linear(GEMM_IN, GEMM_HIDDEN)
        self.down = nn.Linear(GEMM_HIDDEN, GEMM_IN)
        self.conv = nn.Conv2d(CONV_CHANNELS, CONV_CHANNELS, 3, padding=1)

    def forward(self, x: torch.Tensor, maps: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.down(torch.relu(self.up(x))), self.conv(maps)


class Control(nn.Module):
    """One bf16 GEMM with an output width not a multiple of 8 (1001)."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(GEMM_HIDDEN, CONTROL_OUT)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x)


def aligned_gemms() -> None:
    aligned = Aligned().to(torch.bfloat16).eval()
    control = Control().to(torch.bfloat16).eval()
    x = torch.randn(GEMM_BATCH, GEMM_IN, dtype=torch.bfloat16)
    h = torch.randn(GEMM_BATCH, GEMM_HIDDEN, dtype=torch.bfloat16)
    maps = torch.randn(CONV_BATCH, CONV_CHANNELS, CONV_HW, CONV_HW, dtype=torch.bfloat16)
    with torch.no_grad(), profile(activities=[ProfilerActivity.CPU], schedule=_schedule(GEMM_STEPS),
                                  record_shapes=True, with_stack=True, with_modules=True) as prof:
        for _ in range(GEMM_STEPS + 1):
            for _ in range(4):
                aligned(x, maps)
            control(h)
            prof.step()
    _write(prof, "aligned_gemms")
    m, k, n = GEMM_BATCH, GEMM_IN, GEMM_HIDDEN
    _known("aligned_gemms", dtype="bfloat16", profiled_steps=GEMM_STEPS, calls_per_step={"Aligned": 4, "Control": 1},
           must_not_fire=[
               {"module": "up", "op": "aten::linear -> aten::addmm", "gemm_mnk": [m, n, k],
                "flops": 2 * m * n * k},
               {"module": "down", "op": "aten::linear -> aten::addmm", "gemm_mnk": [m, k, n],
                "flops": 2 * m * n * k},
               {"module": "conv", "op": "aten::conv2d", "input": [CONV_BATCH, CONV_CHANNELS, CONV_HW, CONV_HW],
                "weight": [CONV_CHANNELS, CONV_CHANNELS, 3, 3], "padding": 1,
                "implicit_gemm_mnk": [CONV_BATCH * CONV_HW * CONV_HW, CONV_CHANNELS, CONV_CHANNELS * 9],
                "flops": 2 * CONV_BATCH * CONV_HW * CONV_HW * CONV_CHANNELS * CONV_CHANNELS * 9},
           ],
           should_fire=[{"module": "proj", "op": "aten::linear -> aten::addmm", "gemm_mnk": [m, CONTROL_OUT, n],
                         "flops": 2 * m * CONTROL_OUT * n, "why": "N = 1001 is not a multiple of 8"}],
           note="implicit GEMM of a conv: M = N*H*W, N = K (out channels), K = C*R*S; every dimension of the "
                "aligned ops is a multiple of 8 (784 = 8 x 98, 576 = 8 x 72)")


RECORDINGS = ("dataloader_inline", "thread_churn", "waits", "barrier", "outlier_steps", "loss_scalar", "aligned_gemms")

def main() -> None:
    """Record each named recording (default: all) in a process of its own, one after another."""
    names = sys.argv[1:] or list(RECORDINGS)
    for name in names:
        if name not in RECORDINGS:
            sys.exit(f"unknown recording {name!r}; one of {', '.join(RECORDINGS)}")
    if len(names) > 1:   # a fresh process each: no thread or allocator state carries over
        for name in names:
            if subprocess.run([sys.executable, __file__, name]).returncode != 0:
                sys.exit(f"recording {name} failed")
        return
    torch.manual_seed(0)
    torch.set_num_threads(1)   # one intra-op thread: less noise from a busy machine
    globals()[names[0]]()


if __name__ == "__main__":
    main()
