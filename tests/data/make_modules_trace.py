"""Record the module test traces: one training step of a small model, torch CPU.

`record_shapes`, `with_stack`, `with_modules`; one warm-up step, then `ProfilerStep#1`.

* `modules_train_step.pt.trace.json.gz`: two micro-batches (gradient accumulation: forward,
  backward, forward, backward, then one optimizer step), each under a
  `record_function("microbatch_N")` range;
* `modules_checkpoint_reentrant.pt.trace.json.gz`: one micro-batch, each block run through
  `torch.utils.checkpoint.checkpoint(..., use_reentrant=True)` (its forward is recomputed
  inside the backward).

tests/test_modules.py checks the forward <-> backward links against the model's own
structure. Run from the repository root: `python tests/data/make_modules_trace.py`.
"""

from __future__ import annotations

import gzip
import shutil
import tempfile
from pathlib import Path

import torch
from torch import nn

HERE = Path(__file__).resolve().parent
OUT = HERE / "modules_train_step.pt.trace.json.gz"
OUT_REENTRANT = HERE / "modules_checkpoint_reentrant.pt.trace.json.gz"


class Block(nn.Module):
    """A residual MLP block: norm -> fc1 -> act -> fc2, plus the input."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.fc1 = nn.Linear(width, 2 * width)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(2 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fc2(self.act(self.fc1(self.norm(x))))


class TinyNet(nn.Module):
    """embed -> 2 blocks -> head."""

    def __init__(self, vocab: int = 50, width: int = 16, *, reentrant: bool = False) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.blocks = nn.ModuleList([Block(width), Block(width)])
        self.head = nn.Linear(width, vocab)
        self.reentrant = reentrant

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        from torch.utils.checkpoint import checkpoint

        x = self.embed(tokens)
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=True) if self.reentrant else block(x)
        return self.head(x)


def record(out: Path, *, reentrant: bool) -> None:
    """Profile one training step (after one warm-up step) into `out` (gzipped JSON)."""
    torch.manual_seed(0)
    model = TinyNet(reentrant=reentrant)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loss_fn = nn.CrossEntropyLoss()
    data = [(torch.randint(0, 50, (4, 8)), torch.randint(0, 50, (4, 8))) for _ in range(1 if reentrant else 2)]

    def step() -> None:
        opt.zero_grad()
        for i, (x, y) in enumerate(data):
            with torch.profiler.record_function(f"microbatch_{i}"):
                out = model(x)
                loss = loss_fn(out.reshape(-1, out.shape[-1]), y.reshape(-1))
                loss.backward()
        opt.step()

    sched = torch.profiler.schedule(wait=0, warmup=1, active=1, repeat=1)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.json"
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], schedule=sched,
                                    record_shapes=True, with_stack=True, with_modules=True,
                                    on_trace_ready=lambda p: p.export_chrome_trace(str(path))) as prof:
            for _ in range(2):
                step()
                prof.step()
        with path.open("rb") as src, out.open("wb") as raw, \
                gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=9, mtime=0) as dst:
            shutil.copyfileobj(src, dst)
    print(out, out.stat().st_size)


def main() -> None:
    record(OUT, reentrant=False)
    record(OUT_REENTRANT, reentrant=True)


if __name__ == "__main__":
    main()
