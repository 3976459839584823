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
- `train_eager`, `train_compiled`, `train_provenance`: a training step (the model in train mode,
  `loss = run(x).square().mean(); loss.backward()`, gradients zeroed by `set_to_none` before each
  step) eager with `with_stack=True` (the reference of `tr.modules()`' bwd columns; plus
  `train_eager.names.json`), and compiled: AOTAutograd compiles the forward and a backward graph
  (`CompiledFunction` / `CompiledFunctionBackward`, each a `## Call CompiledFxGraph ##`), with
  `TORCHINDUCTOR_CPP_ENABLE_KERNEL_PROFILE=1`, without / with the provenance artifacts
  (`provenance_train/`: the log holds both graphs under compile id `0/0`, forward first; the
  debug directory has a mapping file for the forward graph only).

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

    train = variant.startswith("train")
    model = Model().train() if train else Model().eval()
    x = torch.randn(8, 4, 8, 8)
    if train:
        train_step(model, x, variant, out)
        return
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
    save_trace(prof, out, variant, names_of=(model, x) if variant == "eager_stack" else None)


def save_trace(prof: object, out: str, variant: str, names_of: tuple[object, object] | None = None) -> None:
    """Write `prof` as `<variant>.pt.trace.json.gz`, and with `names_of` = (model, input) the module
    instance names as `<variant>.names.json` (proftab.modules.instance_names)."""
    if names_of is not None:
        import json

        try:
            from proftab.modules import instance_names
        except ImportError:  # an interpreter without proftab's dependencies: the names are the same for any torch
            print(f"proftab not importable: {variant}.names.json not written (copy another version's)")
        else:
            with open(os.path.join(out, f"{variant}.names.json"), "w") as fh:
                json.dump(instance_names(*names_of), fh, indent=1, sort_keys=True)
    path = os.path.join(out, f"{variant}.pt.trace.json")
    prof.export_chrome_trace(path)  # type: ignore[attr-defined]
    with open(path, "rb") as src, gzip.open(path + ".gz", "wb", compresslevel=9) as dst:
        shutil.copyfileobj(src, dst)
    os.remove(path)


def train_step(model: object, x: object, variant: str, out: str) -> None:
    """Profile three training steps (forward, loss, backward) of `model`, eager or compiled."""

    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    eager = variant == "train_eager"
    run = model if eager else torch.compile(model)  # type: ignore[arg-type]
    params = list(model.parameters())  # type: ignore[attr-defined]

    def step() -> None:
        for p in params:
            p.grad = None
        loss = run(x).square().mean()  # type: ignore[operator]
        loss.backward()

    step()  # warm-up (compiles the forward and the backward graph)
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True, with_stack=eager,
                 with_modules=True) as prof:
        for _ in range(3):
            with record_function("step"):
                step()
    save_trace(prof, out, variant, names_of=(model, x) if eager else None)


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
    """Copy the provenance artifacts of one TORCH_COMPILE_DEBUG directory to `dest`.

    One graph: its files as they are named. Several (a training step: forward and backward):
    each graph's mapping file and post-grad graph in a subdirectory named after Inductor's
    per-graph debug directory (`model__0_forward_1.0`, `model__0_backward_2.1`).
    """
    import json

    os.makedirs(dest, exist_ok=True)
    found = sorted(glob.glob(os.path.join(debug, "**", "inductor_provenance_tracking_node_mappings.json"),
                             recursive=True))
    for src in found:
        where = dest if len(found) == 1 else os.path.join(dest, os.path.basename(os.path.dirname(src)))
        os.makedirs(where, exist_ok=True)
        shutil.copy(src, os.path.join(where, os.path.basename(src)))
        post = os.path.join(os.path.dirname(src), "fx_graph_transformed.py")
        if os.path.isfile(post):  # gzip: not linted
            with open(post, "rb") as fin, gzip.open(os.path.join(where, "fx_graph_transformed.py.gz"), "wb") as fout:
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
        if variant in ("provenance", "train_provenance"):
            env.update(TORCH_COMPILE_DEBUG="1", TORCH_COMPILE_DEBUG_DIR=os.path.join(work, "debug"))
        subprocess.run([sys.executable, __file__, "--child", variant, out], env=env, check=True, cwd=work)
        if variant in ("provenance", "train_provenance"):
            save_artifacts(os.path.join(work, "debug"),
                           os.path.join(out, "provenance" if variant == "provenance" else "provenance_train"))
        print(variant, "->", out, "(work dir", work + ")")


if __name__ == "__main__":
    if sys.argv[1] == "--save-artifacts":  # DEBUG_DIR DEST: redo the copy of one run
        save_artifacts(sys.argv[2], sys.argv[3])
    elif sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3])
    else:
        main()
