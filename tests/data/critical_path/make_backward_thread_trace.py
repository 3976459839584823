"""Record a torch CPU trace whose backward is known to be bound by one slow backward node, and move
the backward onto a thread of its own, as autograd's device thread runs it on GPU traces.

torch CPU runs the backward on the calling thread (autograd's device threads exist only for
accelerators), so the recorded trace (`backward_main_thread.pt.trace.json.gz`, torch 2.13 CPU,
`with_stack`, two `ProfilerStep#N` ranges) is turned into `backward_worker_thread.pt.trace.json.gz`
by moving every event inside the `run_backward` Python frame (the engine's
`autograd::engine::evaluate_function: X` ops, the Python frames of the backward and everything
under them) to a new tid named
`pt_autograd_0`, which is the layout of a GPU trace (`tracelens/mi300__resnet_act_checkpoint`).
The backward of `SlowBackward` sleeps 50 ms inside `record_function("slow_backward_work")`: by
construction that is what the step waits for, not the `run_backward` frame.

Run from the repository root: `python tests/data/critical_path/make_backward_thread_trace.py`.
"""

from __future__ import annotations

import gzip
import json
import tempfile
import time
from pathlib import Path

import torch
from torch import nn

HERE = Path(__file__).resolve().parent
SLEEP_S = 0.050
WORKER_TID = 424242


class SlowBackward(torch.autograd.Function):
    """Identity forward; the backward sleeps `SLEEP_S` inside a named range."""

    @staticmethod
    def forward(ctx: object, x: torch.Tensor) -> torch.Tensor:
        return x.clone()

    @staticmethod
    def backward(ctx: object, g: torch.Tensor) -> torch.Tensor:
        with torch.profiler.record_function("slow_backward_work"):
            time.sleep(SLEEP_S)
        return g


def record(out: Path) -> None:
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 8))
    x = torch.randn(32, 64)
    acts = [torch.profiler.ProfilerActivity.CPU]
    SlowBackward.apply(model(x)).sum().backward()  # warm-up, not recorded
    with torch.profiler.profile(activities=acts, with_stack=True) as prof:
        for i in range(2):
            with torch.profiler.record_function(f"ProfilerStep#{i + 1}"):
                y = SlowBackward.apply(model(x)).sum()
                y.backward()
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "t.json"
        prof.export_chrome_trace(str(p))
        data = json.loads(p.read_text())
    with gzip.open(out, "wt") as fh:
        json.dump(data, fh)


def move_backward(src: Path, out: Path) -> None:
    with gzip.open(src, "rt") as fh:
        data = json.load(fh)
    ev = data["traceEvents"]
    calls = [e for e in ev if e.get("ph") == "X" and "built-in method run_backward" in e.get("name", "")]
    moved = 0
    for e in ev:
        if e.get("ph") != "X":
            continue
        for c in calls:
            if e is not c and e["tid"] == c["tid"] and c["ts"] <= e["ts"] and e["ts"] + e["dur"] <= c["ts"] + c["dur"]:
                e["tid"] = WORKER_TID
                moved += 1
                break
    pid = calls[0]["pid"]
    ev.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": WORKER_TID, "args": {"name": "pt_autograd_0"}})
    assert moved, "nothing inside run_backward"
    with gzip.open(out, "wt") as fh:
        json.dump(data, fh)


if __name__ == "__main__":
    main = HERE / "backward_main_thread.pt.trace.json.gz"
    record(main)
    move_backward(main, HERE / "backward_worker_thread.pt.trace.json.gz")
