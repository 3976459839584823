"""Record the torch-parity round-2 cases (issue 24) with the real torch profiler, CPU only.

usage: python tests/data/torch_parity2/generate.py [OUT_DIR]
  OUT_DIR defaults to tests/data/torch_parity2/torch<MAJOR.MINOR> (run once with torch 2.13, once with 2.14).

Cases (each small, a few steps):
  overload  LSTM + MLP inference with record_shapes, with_flops and
            _ExperimentalConfig(capture_overload_names=True): `aten::add.Tensor`, `aten::sum.dim_IntList`
  verbose   MLP training (forward, backward, a hand-written SGD update) with record_shapes, with_stack and
            _ExperimentalConfig(verbose=True): every op carries a `Call stack`
  stack     the same training with with_stack but without verbose (python_function events only)

Each case folder gets `trace.json.gz` (torch's own exporter, gzipped), torch's
`key_averages{,_by_shape,_by_stack5}.{json,txt}.gz` (`table(sort_by="self_cpu_time_total", row_limit=-1)`;
the json has every row with overload_name, input_shapes and stack), `events.json.gz` (per kept
FunctionEvent: name, overload_name, start/end in torch's µs floats, sequence_nr, scope, stack,
torch's parent) and `meta.json` (versions, flags).
"""
from __future__ import annotations

import gzip
import json
import shutil
import sys
import tempfile
from pathlib import Path

import torch
import torch.nn as nn
from torch._C._profiler import _ExperimentalConfig
from torch.profiler import ProfilerActivity, profile, record_function

VERSION = ".".join(torch.__version__.split("+")[0].split(".")[:2])
OUT = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent / f"torch{VERSION}"


def rows(ka) -> list[dict]:
    out = []
    for r in sorted(ka, key=lambda r: r.self_cpu_time_total, reverse=True):
        out.append({
            "key": r.key, "count": int(r.count), "overload_name": r.overload_name or "",
            "self_cpu_time_total": float(r.self_cpu_time_total), "cpu_time_total": float(r.cpu_time_total),
            "cpu_time_avg": float(r.cpu_time), "self_device_time_total": float(r.self_device_time_total),
            "device_time_total": float(r.device_time_total), "cpu_memory_usage": int(r.cpu_memory_usage),
            "self_cpu_memory_usage": int(r.self_cpu_memory_usage), "flops": int(r.flops),
            "is_user_annotation": bool(r.is_user_annotation), "device_type": str(r.device_type).split(".")[-1],
            "input_shapes": str(r.input_shapes), "stack": list(r.stack or []),
        })
    return out


def events(prof) -> list[dict]:
    fe = prof.profiler.function_events
    idx = {id(e): i for i, e in enumerate(fe)}
    return [{
        "name": e.name, "overload_name": e.overload_name or "", "thread": e.thread, "fwd_thread": e.fwd_thread,
        "start_us": float(e.time_range.start), "end_us": float(e.time_range.end),
        "sequence_nr": int(e.sequence_nr), "scope": int(e.scope), "is_async": bool(e.is_async),
        "stack": list(e.stack or []), "parent": idx.get(id(e.cpu_parent)) if e.cpu_parent is not None else None,
    } for e in fe]


def save(case: str, prof, flags: dict) -> None:
    out = OUT / case
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(raw))
        with raw.open("rb") as src, gzip.open(out / "trace.json.gz", "wb", compresslevel=9) as dst:
            shutil.copyfileobj(src, dst)
    variants = {"key_averages": {}, "key_averages_by_shape": {"group_by_input_shape": True},
                "key_averages_by_stack5": {"group_by_stack_n": 5}}
    for stem, kw in variants.items():
        ka = prof.key_averages(**kw)
        with gzip.open(out / f"{stem}.txt.gz", "wt", compresslevel=9) as f:
            f.write(ka.table(sort_by="self_cpu_time_total", row_limit=-1))
        with gzip.open(out / f"{stem}.json.gz", "wt", compresslevel=9) as f:
            json.dump(rows(ka), f)
    with gzip.open(out / "events.json.gz", "wt", compresslevel=9) as f:
        json.dump(events(prof), f)
    meta = {"case": case, "torch": torch.__version__, "python": sys.version.split()[0], "flags": flags,
            "trace_start_ns": prof.profiler.kineto_results.trace_start_ns()}
    (out / "meta.json").write_text(json.dumps(meta, indent=1))
    print(case, torch.__version__, "->", out)


def overload_case() -> None:
    torch.manual_seed(0)
    lstm = nn.LSTM(16, 32, batch_first=True)
    mlp = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 8))
    x = torch.randn(4, 10, 16)
    flags = dict(record_shapes=True, with_flops=True, capture_overload_names=True)
    with torch.no_grad(), profile(activities=[ProfilerActivity.CPU], record_shapes=True, with_flops=True,
                                  experimental_config=_ExperimentalConfig(capture_overload_names=True)) as prof:
        for _ in range(3):
            with record_function("step"):
                h, _ = lstm(x)
                y = mlp(h)
                z = (y * 2 + 1).sum(dim=1)
                z = torch.add(z, 3).mul(z).sum()
                torch.mm(torch.randn(8, 8), torch.randn(8, 8)).add_(1.0)
    save("overload", prof, flags)


def train(prof_kwargs: dict) -> profile:
    # no record_function and no torch.optim (whose step/zero_grad are record_function spans): with
    # with_stack, a record_function span starts inside its Python `__enter__` frame and ends inside
    # `__exit__`, which makes torch's self times wrong (docs/nesting.md); this workload nests properly
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 4))
    data = [(torch.randn(16, 32), torch.randn(16, 4)) for _ in range(3)]
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, **prof_kwargs) as prof:
        for x, y in data:
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()
            with torch.no_grad():
                for p in model.parameters():
                    p.add_(p.grad, alpha=-0.01)
                    p.grad = None
    return prof


def main() -> None:
    overload_case()
    save("verbose", train(dict(with_stack=True, experimental_config=_ExperimentalConfig(verbose=True))),
         dict(record_shapes=True, with_stack=True, verbose=True))
    save("stack", train(dict(with_stack=True)), dict(record_shapes=True, with_stack=True))


if __name__ == "__main__":
    main()
