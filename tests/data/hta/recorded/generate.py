"""Record the torch CPU traces of tests/data/hta/recorded/.

    python generate.py [OUT_DIR]      (default: the folder of this script)

Writes, with torch's CPU profiler (no GPU needed):

* ``memory_timeline_train.raw.gz``: ``prof.export_memory_timeline(path, device="cpu")``
  raw export (a path ending in ``.raw.json.gz``), a JSON list of
  ``[time_ns, action, numbytes, category]``;
* ``memory_timeline_train.pt.trace.gz``: the Kineto trace of the same profile
  (``profile_memory``, ``record_shapes``, ``with_stack``);
* ``et_train.et.gz``: a PyTorch execution trace (Chakra schema) from
  ``torch.profiler.ExecutionTraceObserver``;
* ``et_train.pt.trace.gz``: the Kineto trace recorded in the same
  ``torch.profiler.profile`` (``execution_trace_observer=``), so that both files
  carry the same record-function ids.

Both workloads are a 3-step training loop of a small MLP with Adam (so that
parameters, optimizer state, inputs, activations, gradients and temporaries all
appear), seeded; timings, thread ids and pointers differ from run to run.  Every file
is gzip-compressed JSON named ``*.gz`` rather than ``*.json.gz``, which
benchmarks/guard.py would take for a trace to digest; proftab and HTA read them as they are.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import sys
import tempfile
import warnings

import torch
from torch import nn
from torch.profiler import ExecutionTraceObserver, ProfilerActivity, profile, record_function


def _model() -> tuple[nn.Module, torch.optim.Optimizer, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x = torch.randn(32, 64)
    y = torch.randint(0, 10, (32,))
    return model, opt, x, y


def _train(model: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor,
           prof: profile, steps: int = 3) -> None:
    loss_fn = nn.CrossEntropyLoss()
    for _ in range(steps):
        with record_function("## forward ##"):
            loss = loss_fn(model(x), y)
        with record_function("## backward ##"):
            loss.backward()
        with record_function("## optimizer ##"):
            opt.step()
            opt.zero_grad(set_to_none=True)
        prof.step()


def _gzip_to(src: str, dst: str) -> None:
    with open(src, "rb") as fin, gzip.GzipFile(dst, "wb", compresslevel=9, mtime=0) as fout:
        shutil.copyfileobj(fin, fout)


def _gzip_trace_to(src: str, dst: str) -> None:
    """Gzip a Kineto trace, naming it after ``dst`` instead of the temporary file it was exported to."""
    with open(src) as fin:
        trace = json.load(fin)
    trace["traceName"] = os.path.basename(dst)
    with gzip.GzipFile(dst, "wb", compresslevel=9, mtime=0) as fout:
        fout.write(json.dumps(trace).encode())


def record_memory_timeline(out: str) -> None:
    model, opt, x, y = _model()
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=True,
                 with_stack=True) as prof:
        _train(model, opt, x, y, prof)
    with tempfile.TemporaryDirectory() as tmp:
        raw = os.path.join(tmp, "m.raw.json.gz")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # deprecated in torch 2.13, still works
            prof.export_memory_timeline(raw, device="cpu")
        # torch gzips with the current time in the header: re-pack with mtime 0.
        with gzip.open(raw, "rb") as fh:
            events = json.loads(fh.read())
        with gzip.GzipFile(os.path.join(out, "memory_timeline_train.raw.gz"), "wb",
                           compresslevel=9, mtime=0) as fh:
            fh.write(json.dumps(events, separators=(",", ":")).encode())
        trace = os.path.join(tmp, "t.json")
        prof.export_chrome_trace(trace)
        _gzip_trace_to(trace, os.path.join(out, "memory_timeline_train.pt.trace.gz"))


def record_execution_trace(out: str) -> None:
    model, opt, x, y = _model()
    with tempfile.TemporaryDirectory() as tmp:
        et_path = os.path.join(tmp, "et.json")
        et = ExecutionTraceObserver().register_callback(et_path)
        with profile(activities=[ProfilerActivity.CPU], record_shapes=True,
                     execution_trace_observer=et) as prof:
            _train(model, opt, x, y, prof)
        et.unregister_callback()
        _gzip_to(et_path, os.path.join(out, "et_train.et.gz"))
        trace = os.path.join(tmp, "t.json")
        prof.export_chrome_trace(trace)
        _gzip_trace_to(trace, os.path.join(out, "et_train.pt.trace.gz"))


def main() -> None:
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
    os.makedirs(out, exist_ok=True)
    record_memory_timeline(out)
    record_execution_trace(out)
    for name in sorted(os.listdir(out)):
        if name.endswith(".gz"):
            print(f"{name}: {os.path.getsize(os.path.join(out, name))} bytes")


if __name__ == "__main__":
    main()
