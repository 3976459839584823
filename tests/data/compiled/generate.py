"""Record the compiled-model test traces (torch.compile, Inductor C++ backend on CPU) of one small model.

usage: python tests/data/compiled/generate.py OUTDIR [eager|compiled|provenance ...]

The model has a conv block (Conv2d, ReLU, residual), then LayerNorm, GELU and a residual MLP.
Each variant runs in its own process (Inductor reads its environment variables at import):

- `eager`: the model uncompiled (the reference for `pt.diff`).
- `eager_stack`: the same with `with_stack=True` (the Python tracer writes `nn.Module: <Class>_<N>`
  frames, the eager side of `tr.modules.modules()`), plus `eager_stack.names.json`, the model's
  attribute names of the tracer's instances (`proftab.modules.instance_names(model, x)`).
- `metrics`: no trace; compiles the model with `inductor_metrics` logging on and writes
  Inductor's own per-scheduler-node figures (`get_read_write_buffers_sizes()`, `estimate_flops()`,
  the FX origins) to OUTDIR/provenance/inductor_metrics.json (the check of proftab's perf models).
- `compiled`: `torch.compile(model)` with TORCHINDUCTOR_CPP_ENABLE_KERNEL_PROFILE=1, so each
  generated C++ kernel is a profiler event (`graph_0_cpp_fused_...`); no provenance artifacts.
- `provenance`: the same plus TORCH_COMPILE_DEBUG=1 (provenance_tracking_level >= 1 and
  trace.enabled), which writes `inductor_provenance_tracking_node_mappings.json`,
  `fx_graph_transformed.py` (the post-grad graph with `# File:` lines) and `output_code.py`
  into the debug directory and the structured trace log (`torch_compile_debug/tlparse/*.log`,
  what TORCH_TRACE writes) with the kernels' stack traces. `save_artifacts` copies the mapping
  JSON and the post-grad graph (gzip, so no linter reads it as Python) to OUTDIR/provenance/
  and keeps of the log only the records proftab reads (gzip), as OUTDIR/provenance/torch_trace.log.gz.
- `breaks`: the model with a `torch._dynamo.graph_break()` between the conv block and the MLP
  (two compiled frames per call: a graph break by construction), compiled with `dynamic=False`;
  after the three profiled calls a fourth with batch size 4 recompiles both frames inside the
  profiler (compile ids `N/1`: a recompile by construction).

Caches are disabled and the Inductor cache directory is fresh, so every run compiles (a cache hit
would skip the provenance tracking). Three calls are profiled after one warm-up call.
"""

from __future__ import annotations

import glob
import gzip
import os
import shutil
import subprocess
import sys
import tempfile


def child(variant: str, out: str) -> None:
    import torch
    from torch import nn
    from torch.profiler import ProfilerActivity, profile, record_function

    torch.manual_seed(0)
    torch.set_num_threads(1)

    class ConvBlock(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv2d(4, 4, 3, padding=1)
            self.act = nn.ReLU()

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.act(self.conv(x)) + x

    class Mlp(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.norm = nn.LayerNorm(64)
            self.fc1 = nn.Linear(64, 128)
            self.act = nn.GELU()
            self.fc2 = nn.Linear(128, 64)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + self.fc2(self.act(self.fc1(self.norm(x))))

    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.block = ConvBlock()
            self.mlp = Mlp()
            self.head = nn.LayerNorm(64)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = self.block(x).flatten(2)            # (8, 4, 64)
            if variant == "breaks":
                torch._dynamo.graph_break()
            return self.head(self.mlp(y) * 0.5)

    model = Model().eval()
    x = torch.randn(8, 4, 8, 8)
    if variant == "metrics":
        record_inductor_metrics(model, x, out)
        return
    eager = variant in ("eager", "eager_stack")
    run = model if eager else torch.compile(model, dynamic=False if variant == "breaks" else None)
    with torch.no_grad():
        run(x)  # warm-up (compiles)
        with profile(activities=[ProfilerActivity.CPU], record_shapes=True, with_stack=variant == "eager_stack",
                     with_modules=True) as prof:
            for _ in range(3):
                with record_function("step"):
                    run(x)
            if variant == "breaks":
                with record_function("step"):
                    run(torch.randn(4, 4, 8, 8))
    if variant == "eager_stack":
        import json

        try:
            from proftab.modules import instance_names
        except ImportError:  # an interpreter without proftab's dependencies: the names are the same for any torch
            print("proftab not importable: eager_stack.names.json not written (copy another version's)")
        else:
            with open(os.path.join(out, "eager_stack.names.json"), "w") as fh:
                json.dump(instance_names(model, x), fh, indent=1, sort_keys=True)
    path = os.path.join(out, f"{variant}.pt.trace.json")
    prof.export_chrome_trace(path)
    with open(path, "rb") as src, gzip.open(path + ".gz", "wb", compresslevel=9) as dst:
        shutil.copyfileobj(src, dst)
    os.remove(path)


def record_inductor_metrics(model: object, x: object, out: str) -> None:
    """Inductor's own bytes / FLOPs per scheduler node, as its `inductor_metrics` log computes them.

    `GraphLowering.count_bytes` (called when the `inductor_metrics` log is on) sums each scheduler
    node's `get_read_write_buffers_sizes()`; it is wrapped here to keep, per node, that figure,
    `estimate_flops()` and the post-grad FX nodes it came from (`origins`), so each node can be
    matched to the kernel whose provenance names those nodes.
    """
    import json

    import torch
    from torch._inductor import graph as inductor_graph

    torch._logging.set_logs(inductor_metrics=True)
    rows: list[dict[str, object]] = []
    original = inductor_graph.GraphLowering.count_bytes

    def count_bytes(self):  # type: ignore[no-untyped-def]
        for node in self.scheduler.nodes:
            for sub in node.get_nodes():
                rows.append({"node": node.get_name(), "sub": sub.get_name(), "kind": type(sub).__name__,
                             "bytes": int(sub.get_read_write_buffers_sizes()),
                             "fused_bytes": int(node.get_read_write_buffers_sizes()),
                             "flops": sub.estimate_flops(),
                             "origins": sorted(o.name for o in sub.node.origins) if sub.node is not None else []})
        return original(self)

    inductor_graph.GraphLowering.count_bytes = count_bytes
    with torch.no_grad():
        torch.compile(model)(x)  # type: ignore[operator]
    dest = os.path.join(out, "provenance")
    os.makedirs(dest, exist_ok=True)
    with open(os.path.join(dest, "inductor_metrics.json"), "w") as fh:
        json.dump({"torch": torch.__version__, "scheduler_nodes": rows}, fh, indent=1)


KEPT_ARTIFACTS = ("inductor_provenance_tracking_node_mappings", "inductor_provenance_tracking_kernel_stack_traces",
                  "inductor_post_grad_graph")


def save_artifacts(debug: str, dest: str) -> None:
    """Copy the provenance artifacts of one TORCH_COMPILE_DEBUG directory (one graph) to `dest`."""
    import json

    os.makedirs(dest, exist_ok=True)
    for src in glob.glob(os.path.join(debug, "**", "inductor_provenance_tracking_node_mappings.json"), recursive=True):
        shutil.copy(src, os.path.join(dest, os.path.basename(src)))
    for src in glob.glob(os.path.join(debug, "**", "fx_graph_transformed.py"), recursive=True):  # gzip: not linted
        with open(src, "rb") as fin, gzip.open(os.path.join(dest, "fx_graph_transformed.py.gz"), "wb") as fout:
            shutil.copyfileobj(fin, fout)
    kept: list[str] = []
    for log in glob.glob(os.path.join(debug, "**", "tlparse", "*.log"), recursive=True):
        with open(log, encoding="utf-8") as fh:
            lines = fh.read().split("\n")
        keep = False
        for line in lines:
            if not line.startswith("\t"):
                head = line[line.find("{"):] if "] {" in line else ""
                try:
                    meta = json.loads(head) if head else {}
                except json.JSONDecodeError:
                    meta = {}
                art = meta.get("artifact", {}).get("name") if isinstance(meta.get("artifact"), dict) else None
                keep = art in KEPT_ARTIFACTS or "dynamo_output_graph" in meta
            if keep:
                kept.append(line)
    with gzip.open(os.path.join(dest, "torch_trace.log.gz"), "wt", encoding="utf-8", compresslevel=9) as fh:
        fh.write("\n".join(kept) + "\n")


def main() -> None:
    out = os.path.abspath(sys.argv[1])
    variants = sys.argv[2:] or ["eager", "compiled", "provenance"]
    os.makedirs(out, exist_ok=True)
    for variant in variants:
        work = tempfile.mkdtemp(prefix=f"proftab_{variant}_")
        env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=os.path.join(work, "cache"),
                   TORCHINDUCTOR_FORCE_DISABLE_CACHES="1", TORCHINDUCTOR_CPP_ENABLE_KERNEL_PROFILE="1")
        if variant == "provenance":
            env.update(TORCH_COMPILE_DEBUG="1", TORCH_COMPILE_DEBUG_DIR=os.path.join(work, "debug"))
        subprocess.run([sys.executable, __file__, "--child", variant, out], env=env, check=True, cwd=work)
        if variant == "provenance":
            save_artifacts(os.path.join(work, "debug"), os.path.join(out, "provenance"))
        print(variant, "->", out, "(work dir", work + ")")


if __name__ == "__main__":
    if sys.argv[1] == "--save-artifacts":  # DEBUG_DIR DEST: redo the copy of one run
        save_artifacts(sys.argv[2], sys.argv[3])
    elif sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3])
    else:
        main()
