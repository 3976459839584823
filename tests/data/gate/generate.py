"""Record the gate sets: A/A reruns and B variants known by construction (torch CPU, one process each).

One small model (`Net`: `stem` Linear 256->512, three pre-norm MLP `Block`s of LayerNorm, Linear
512->1024, GELU, Linear 1024->512 with a residual, `head` Linear 512->16 and log_softmax), forward only
(`torch.no_grad`, `eval`), batch 256, one intra-op thread, `record_shapes`, `with_stack`,
`with_modules`, `torch.profiler.schedule(wait=1, warmup=1, active=N, repeat=1)` with N = 5 or 10 (a separate
process for every trace). Every variant runs this same file (so the Python frames' line numbers agree);
a variant only changes the constants it names:

* ``a``  : the model as is (every rerun identical code);
* ``b1`` : `blocks.1` adds ``h = h @ extra`` after `fc1` (aten::matmul -> aten::mm,
  [256, 1024] x [1024, 1024], 2*256*1024*1024 = 536,870,912 FLOPs per step);
* ``b2`` : `blocks.2` has a hidden width of 1536 instead of 1024 (its fc1, act and fc2 change shape,
  +268,435,456 FLOPs per step);
* ``b3`` : the ``a`` code, recorded while `BURNERS` pure-Python busy-loop processes run beside it
  (the machine runs slower; structure identical);
* ``b4`` : `blocks.0` runs `SPIN` iterations of a pure-Python ``while`` loop (no call, no op, no
  event) after its GELU: CPU time localized in one module, structure identical. Every variant
  times that loop (with 0 iterations outside b4) with ``time.perf_counter_ns``, so the Python
  events agree too.

``acold``: the ``a`` code profiled from its first forward (schedule(wait=0, warmup=0, active=10, repeat=1)):
the leading profiled steps are the cold ones (warm-up detection from the data).

Run from the repository root (23 min on the busy 2-core machine it was recorded on)::

    nice python tests/data/gate/generate.py            # writes tests/data/gate/*.pt.trace.json.gz + known.json

A single trace: ``python tests/data/gate/generate.py one VARIANT STEPS OUT.json.gz META.json [cold]``.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

BATCH = 256
IN_FEATURES = 256
WIDTH = 512
HIDDEN = 1024
N_BLOCKS = 3
OUT_FEATURES = 16
#: b1: the block that adds `h @ extra` ([BATCH, HIDDEN] x [HIDDEN, HIDDEN])
EXTRA_BLOCK = 1
#: b2: the block whose hidden width changes, and its width there
SHAPE_BLOCK = 2
SHAPE_HIDDEN = 1536
#: b4: the block that runs the pure-Python loop, and its iterations per call
SPIN_BLOCK = 0
SPIN = 40_000
#: b3: pure-Python busy-loop processes beside the recording
BURNERS = 3
#: reruns per variant (A, B) and the step counts (one process per trace)
A_RUNS = 8
B_RUNS = 3
STEP_COUNTS = (5, 10)
COLD_RUNS = 2
COLD_STEPS = 10

#: the variants' known change, per file in known.json (module: attribute path / proftab module path)
CHANGES: dict[str, dict[str, object]] = {
    "a": {"change": "none (identical code)"},
    "acold": {"change": "none (identical code); profiled from the process's first forward"},
    "b1": {
        "change": "one extra op", "module": f"blocks.{EXTRA_BLOCK}", "module_path": f"Net_0.Block_{EXTRA_BLOCK}",
        "op": "aten::matmul -> aten::mm",
        "also_added_per_step": f"aten::resolve_conj [[{HIDDEN}, {HIDDEN}]] x1, [[{BATCH}, {HIDDEN}]] x2",
        "shapes": [[BATCH, HIDDEN], [HIDDEN, HIDDEN]],
        "extra_flops_per_step": 2 * BATCH * HIDDEN * HIDDEN,
    },
    "b2": {
        "change": "changed shape", "module": f"blocks.{SHAPE_BLOCK}", "module_path": f"Net_0.Block_{SHAPE_BLOCK}",
        "ops": [
            {"module": f"blocks.{SHAPE_BLOCK}.fc1", "op": "aten::linear",
             "a": [[BATCH, WIDTH], [HIDDEN, WIDTH], [HIDDEN]],
             "b": [[BATCH, WIDTH], [SHAPE_HIDDEN, WIDTH], [SHAPE_HIDDEN]]},
            {"module": f"blocks.{SHAPE_BLOCK}.fc1", "op": "aten::addmm",
             "a": [[HIDDEN], [BATCH, WIDTH], [WIDTH, HIDDEN], [], []],
             "b": [[SHAPE_HIDDEN], [BATCH, WIDTH], [WIDTH, SHAPE_HIDDEN], [], []],
             "flops_a": 2 * BATCH * WIDTH * HIDDEN, "flops_b": 2 * BATCH * WIDTH * SHAPE_HIDDEN},
            {"module": f"blocks.{SHAPE_BLOCK}.act", "op": "aten::gelu", "a": [[BATCH, HIDDEN], []],
             "b": [[BATCH, SHAPE_HIDDEN], []]},
            {"module": f"blocks.{SHAPE_BLOCK}.fc2", "op": "aten::linear",
             "a": [[BATCH, HIDDEN], [WIDTH, HIDDEN], [WIDTH]],
             "b": [[BATCH, SHAPE_HIDDEN], [WIDTH, SHAPE_HIDDEN], [WIDTH]]},
            {"module": f"blocks.{SHAPE_BLOCK}.fc2", "op": "aten::addmm",
             "a": [[WIDTH], [BATCH, HIDDEN], [HIDDEN, WIDTH], [], []],
             "b": [[WIDTH], [BATCH, SHAPE_HIDDEN], [SHAPE_HIDDEN, WIDTH], [], []],
             "flops_a": 2 * BATCH * HIDDEN * WIDTH, "flops_b": 2 * BATCH * SHAPE_HIDDEN * WIDTH},
        ],
        "note": "the linears' children (aten::t, aten::transpose, aten::as_strided, aten::expand, aten::copy_, "
                "aten::resolve_conj) change shape with them",
        "extra_flops_per_step": 2 * 2 * BATCH * WIDTH * (SHAPE_HIDDEN - HIDDEN),
    },
    "b3": {"change": "machine slower (same code, busy-loop processes beside it)", "burners": BURNERS,
           "extra_flops_per_step": 0},
    "b4": {
        "change": "localized slowdown, identical structure", "module": f"blocks.{SPIN_BLOCK}",
        "module_path": f"Net_0.Block_{SPIN_BLOCK}", "op": None,
        "what": f"pure-Python while loop of {SPIN} iterations after act, before fc2 (no op, no Python call)",
        "spin_iterations": SPIN, "extra_flops_per_step": 0,
    },
}


#: the model's attribute names -> proftab module paths (the tracer numbers instances per class in call order)
MODULE_PATHS = {"": "Net_0", "stem": "Net_0.Linear_0", "head": f"Net_0.Linear_{2 * N_BLOCKS + 1}"} | {
    name: path for i in range(N_BLOCKS) for name, path in (
        (f"blocks.{i}", f"Net_0.Block_{i}"), (f"blocks.{i}.norm", f"Net_0.Block_{i}.LayerNorm_{i}"),
        (f"blocks.{i}.fc1", f"Net_0.Block_{i}.Linear_{2 * i + 1}"), (f"blocks.{i}.act", f"Net_0.Block_{i}.GELU_{i}"),
        (f"blocks.{i}.fc2", f"Net_0.Block_{i}.Linear_{2 * i + 2}"))}


def record(variant: str, steps: int, out: Path, meta: Path, cold: bool) -> None:
    """Profile `steps` steps of the variant's model in this process; write the trace (gzip) and its meta."""
    import torch
    from torch import nn

    torch.set_num_threads(1)
    torch.manual_seed(0)
    load_before = os.getloadavg()
    spin_ns: list[int] = []

    class Block(nn.Module):
        def __init__(self, index: int) -> None:
            super().__init__()
            hidden = SHAPE_HIDDEN if variant == "b2" and index == SHAPE_BLOCK else HIDDEN
            self.norm = nn.LayerNorm(WIDTH)
            self.fc1 = nn.Linear(WIDTH, hidden)
            self.act = nn.GELU()
            self.fc2 = nn.Linear(hidden, WIDTH)
            extra = variant == "b1" and index == EXTRA_BLOCK
            self.extra = nn.Parameter(torch.randn(hidden, hidden) * hidden ** -0.5) if extra else None
            self.spin = (SPIN if variant == "b4" else 0) if index == SPIN_BLOCK else None

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = self.fc1(self.norm(x))
            if self.extra is not None:
                h = h @ self.extra  # b1: the extra op
            h = self.act(h)
            if self.spin is not None:
                t0 = time.perf_counter_ns()
                i = 0
                while i < self.spin:  # b4: CPU time in this module, no op and no call
                    i += 1
                spin_ns.append(time.perf_counter_ns() - t0)
            return x + self.fc2(h)

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.stem = nn.Linear(IN_FEATURES, WIDTH)
            self.blocks = nn.ModuleList([Block(i) for i in range(N_BLOCKS)])
            self.head = nn.Linear(WIDTH, OUT_FEATURES)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = self.stem(x)
            for block in self.blocks:
                x = block(x)
            return self.head(x).log_softmax(-1)

    model = Net().eval()
    x = torch.randn(BATCH, IN_FEATURES)
    if cold:
        sched = torch.profiler.schedule(wait=0, warmup=0, active=steps, repeat=1)
        iterations = steps
    else:
        sched = torch.profiler.schedule(wait=1, warmup=1, active=steps, repeat=1)
        iterations = steps + 2
    step_ns: list[int] = []
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp) / "trace.json"
        with torch.no_grad(), torch.profiler.profile(
                activities=[torch.profiler.ProfilerActivity.CPU], schedule=sched, record_shapes=True,
                with_stack=True, with_modules=True,
                on_trace_ready=lambda p: p.export_chrome_trace(str(raw))) as prof:
            for _ in range(iterations):
                t0 = time.perf_counter_ns()
                model(x)
                step_ns.append(time.perf_counter_ns() - t0)
                prof.step()
        with raw.open("rb") as src, gzip.GzipFile(out, "wb", compresslevel=9, mtime=0) as dst:
            shutil.copyfileobj(src, dst)
    first = 0 if cold else 2   # the profiled iterations (wait + warmup come first)
    meta.write_text(json.dumps({
        "loadavg_1m_before": round(load_before[0], 2), "loadavg_1m_after": round(os.getloadavg()[0], 2),
        "step_wall_ns": step_ns[first:first + steps],
        "spin_wall_ns": spin_ns[first:first + steps] if spin_ns else None,
    }))


def _jobs() -> list[tuple[str, list[tuple[str, int, int, bool]]]]:
    """Groups run one after another; the traces of a group are recorded at the same time.

    Each job is (variant, run, steps, cold); a group's label says its load condition.
    """
    groups: list[tuple[str, list[tuple[str, int, int, bool]]]] = []
    for run in (1, 2):   # alone, A and B interleaved in time
        for steps in STEP_COUNTS:
            for variant in ("a", "b1", "b2", "b3", "b4"):
                groups.append(("burners" if variant == "b3" else "alone", [(variant, run, steps, False)]))
    for steps in STEP_COUNTS:   # run 3 of everything in pairs
        groups.append(("paired", [("a", 3, steps, False), ("b1", 3, steps, False)]))
        groups.append(("paired", [("b2", 3, steps, False), ("b4", 3, steps, False)]))
        groups.append(("burners", [("b3", 3, steps, False)]))
    for steps in STEP_COUNTS:
        groups.append(("alone", [("a", 4, steps, False)]))
        groups.append(("paired", [("a", 5, steps, False), ("a", 6, steps, False)]))
        groups.append(("paired", [("a", 7, steps, False), ("a", 8, steps, False)]))
    for run in range(1, COLD_RUNS + 1):
        groups.append(("alone", [("acold", run, COLD_STEPS, True)]))
    return groups


def op_counts(path: Path) -> dict[str, int]:
    """(op name, Input Dims) -> number of cpu_op events in the trace."""
    counts: dict[str, int] = {}
    with gzip.open(path, "rt") as fh:
        for e in json.load(fh)["traceEvents"]:
            if e.get("cat") == "cpu_op":
                key = f"{e['name']} {json.dumps(e.get('args', {}).get('Input Dims'))}"
                counts[key] = counts.get(key, 0) + 1
    return counts


def op_diff_per_step(path: Path, base: Path, steps: int) -> dict[str, float]:
    """Per-step change of each (op, Input Dims) count from `base` to `path` (a check of the construction)."""
    a, b = op_counts(base), op_counts(path)
    return {k: (b.get(k, 0) - a.get(k, 0)) / steps for k in sorted(a.keys() | b.keys()) if a.get(k, 0) != b.get(k, 0)}


def name_of(variant: str, run: int, steps: int) -> str:
    return f"{variant}_{run}_s{steps}.pt.trace.json.gz"


def main() -> None:
    """Record every group (each trace in its own process) and write known.json."""
    if len(sys.argv) >= 6 and sys.argv[1] == "one":
        record(sys.argv[2], int(sys.argv[3]), Path(sys.argv[4]), Path(sys.argv[5]), len(sys.argv) > 6)
        return
    files: dict[str, dict[str, object]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for order, (load, group) in enumerate(_jobs()):
            burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
                       for _ in range(BURNERS if load == "burners" else 0)]
            time.sleep(0.5 if burners else 0)
            procs = []
            for variant, run, steps, cold in group:
                name = name_of(variant, run, steps)
                meta = Path(tmp) / (name + ".meta.json")
                cmd = [sys.executable, __file__, "one", "a" if variant in ("b3", "acold") else variant, str(steps),
                       str(HERE / name), str(meta)] + (["cold"] if cold else [])
                procs.append((name, variant, run, steps, meta, subprocess.Popen(cmd)))
            failed = [p for *_, p in procs if p.wait() != 0]
            for b in burners:
                b.kill()
                b.wait()
            if failed:
                sys.exit("a recording failed")
            others = [n for n, *_ in procs]
            for name, variant, run, steps, meta, _ in procs:
                files[name] = {"variant": variant, "run": run, "steps": steps, "order": order, "load": load,
                               "recorded_beside": [n for n in others if n != name]
                               + ([f"{BURNERS} busy-loop processes"] if load == "burners" else []),
                               **CHANGES[variant], **json.loads(meta.read_text())}
            print(f"{order:2d} {load:8s} {' '.join(others)}", file=sys.stderr)
    for name, entry in files.items():   # the construction checked: what differs from run 1 of A, per step
        if entry["variant"] != "acold":
            base = name_of("a", 1, int(entry["steps"]))
            entry["observed_op_diff_vs_a1_per_step"] = op_diff_per_step(HERE / name, HERE / base, int(entry["steps"]))
    known = {
        "model": {"batch": BATCH, "in_features": IN_FEATURES, "width": WIDTH, "hidden": HIDDEN,
                  "blocks": N_BLOCKS, "out_features": OUT_FEATURES, "threads": 1, "dtype": "float32",
                  "grad": False, "module_paths": MODULE_PATHS},
        "variants": CHANGES,
        "files": files,
    }
    (HERE / "known.json").write_text(json.dumps(known, indent=1) + "\n")


if __name__ == "__main__":
    main()
