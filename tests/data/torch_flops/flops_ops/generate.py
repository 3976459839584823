"""Record the `torch_flops/flops_ops` case: every op torch's profiler estimates FLOPs for, `with_flops=True`.

Run with torch 2.13 CPU from this folder: `python generate.py`. Writes `trace.json.gz`
(`prof.export_chrome_trace`), `key_averages.txt` (`table(sort_by="self_cpu_time_total",
row_limit=-1)`), `key_averages.json` and `key_averages_by_shape.json` (key, count, flops).
"""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

torch.manual_seed(0)
conv = torch.nn.Conv2d(3, 8, 3, stride=2, padding=1)
conv_g = torch.nn.Conv2d(8, 8, (3, 5), dilation=(2, 1), groups=4)
lin = torch.nn.Linear(64, 32)
x = torch.randn(2, 3, 17, 15)
a, b = torch.randn(16, 64), torch.randn(64, 24)
ba, bb = torch.randn(4, 16, 8), torch.randn(4, 8, 12)
bias = torch.randn(4, 16, 12)

with profile(activities=[ProfilerActivity.CPU], with_flops=True) as prof:
    y = conv_g(conv(x))
    _ = lin(a)  # aten::addmm
    _ = torch.mm(a, b)
    _ = torch.bmm(ba, bb)
    _ = torch.baddbmm(bias, ba, bb)
    _ = torch.matmul(ba, bb)
    _ = y * 2.0
    _ = y.mul(y)
    _ = torch.add(a, 1.0)
    _ = a + a
    _ = torch.add(2, a)  # Scalar first input: torch gives 0

here = Path(__file__).parent
tmp = here / "trace.json"
prof.export_chrome_trace(str(tmp))
with tmp.open("rb") as src, (here / "trace.json.gz").open("wb") as raw, gzip.GzipFile(
        fileobj=raw, mode="wb", mtime=0) as dst:
    shutil.copyfileobj(src, dst)
tmp.unlink()
ka = prof.key_averages()
(here / "key_averages.txt").write_text(ka.table(sort_by="self_cpu_time_total", row_limit=-1) + "\n")
rows = [{"key": e.key, "count": e.count, "flops": e.flops} for e in ka]
(here / "key_averages.json").write_text(json.dumps(rows, indent=1))
kas = prof.key_averages(group_by_input_shape=True)
rows = [{"key": e.key, "input_shapes": e.input_shapes, "count": e.count, "flops": e.flops} for e in kas]
(here / "key_averages_by_shape.json").write_text(json.dumps(rows, indent=1))
