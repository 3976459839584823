"""Record the `pt.diff(stats=True)` test traces: torch CPU, a 4-block MLP, 40 profiled steps each.

Three separate processes (one per trace, so each is a real rerun) running at the same time, so
that the load of the (shared, 2-core) machine falls on all three alike, one thread each
(`torch.set_num_threads(1)`), `record_shapes`, `with_stack`, `with_modules`, forward only
(`torch.no_grad`), batch 64, width 512 -> 2048 -> 512, steps through
`torch.profiler.schedule(wait=1, warmup=1, active=40)` and `prof.step()`:

* `rerun_a.pt.trace.json.gz`, `rerun_b.pt.trace.json.gz`: the same model and input, twice;
* `slowed.pt.trace.json.gz`: the same, but `layers.2` (the third `Block`, python-tracer
  path `Net_0.ModuleList_0.Block_2`) adds `x @ extra` (aten::mm [64, 512] x [512, 2048],
  2 * 64 * 512 * 2048 = 134,217,728 FLOPs per step) to its hidden activation.

Run from the repository root: `python tests/data/diff/generate.py` (about 1 min).
"""

from __future__ import annotations

import gzip
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ACTIVE = 40


def record(out: Path, slowed: bool) -> None:
    """Profile `ACTIVE` steps of the model in this process and write `out` (gzip)."""
    import torch
    from torch import nn

    torch.set_num_threads(1)
    torch.manual_seed(0)

    class Block(nn.Module):
        def __init__(self, width: int, extra: bool) -> None:
            super().__init__()
            self.fc1 = nn.Linear(width, 4 * width)
            self.act = nn.ReLU()
            self.fc2 = nn.Linear(4 * width, width)
            self.extra = nn.Parameter(torch.randn(width, 4 * width) * 0.01) if extra else None

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = self.fc1(x)
            if self.extra is not None:
                h = h + x @ self.extra  # the known cause: one extra matmul in layers.2
            return x + self.fc2(self.act(h))

    class Net(nn.Module):
        def __init__(self, width: int = 512, n_layers: int = 4) -> None:
            super().__init__()
            self.layers = nn.ModuleList([Block(width, slowed and i == 2) for i in range(n_layers)])

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            for layer in self.layers:
                x = layer(x)
            return x

    model = Net().eval()
    x = torch.randn(64, 512)
    sched = torch.profiler.schedule(wait=1, warmup=1, active=ACTIVE)
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "trace.json"
        with torch.no_grad(), torch.profiler.profile(
                activities=[torch.profiler.ProfilerActivity.CPU], schedule=sched, record_shapes=True,
                with_stack=True, with_modules=True,
                on_trace_ready=lambda p: p.export_chrome_trace(str(raw))) as prof:
            for _ in range(ACTIVE + 2):
                model(x)
                prof.step()
        with raw.open("rb") as src, gzip.open(out, "wb", compresslevel=9) as dst:
            shutil.copyfileobj(src, dst)


def main() -> None:
    """Record the three traces, each in its own process."""
    if len(sys.argv) == 3:
        record(Path(sys.argv[1]), sys.argv[2] == "slowed")
        return
    procs = [subprocess.Popen([sys.executable, __file__, str(HERE / f"{name}.pt.trace.json.gz"), kind])
             for name, kind in (("rerun_a", "same"), ("rerun_b", "same"), ("slowed", "slowed"))]
    if any(p.wait() != 0 for p in procs):
        sys.exit("a recording failed")


if __name__ == "__main__":
    main()
