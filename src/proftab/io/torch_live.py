"""`from_profiler(prof)`: proftab tables straight from a live `torch.profiler.profile`.

The profile is written once by Kineto's own C++ exporter into a temporary file and read by
the same scanner as any trace (so every column means the same thing), then the times of host
ops and device activities are replaced by the profiler's in-memory `start_ns()` / `end_ns()`
(int64 ns), matched by `(name, External id)` for host ops and `(name, correlation)` for device
activities. With torch >= 2.4 the JSON already holds those exact ns (every `ts`/`dur` has three
decimals: the file's `time_resolution_ns` is 1), so the profiler's events are not walked at all
and the cost is that of writing and loading the JSON; with older torch the JSON held truncated
µs, and the walk restores the exact values.

`profiler_handler(out_dir)` is an `on_trace_ready` callback that writes each finished profile
as a proftab Parquet dataset (no JSON kept).
"""

from __future__ import annotations

import os
import tempfile
from typing import TYPE_CHECKING, Any

import polars as pl

from proftab import kinds
from proftab.exceptions import ProftabError
from proftab.io.files import trace_from_files
from proftab.io.kineto import read_kineto

if TYPE_CHECKING:
    from collections.abc import Callable

    from proftab.trace import Trace

__all__ = ["from_profiler", "profiler_handler"]


def _raw_events(results: Any) -> pl.DataFrame:
    """name, correlation id, start/end ns of every KinetoEvent."""
    evs = results.events()
    return pl.DataFrame(
        {
            "name": [e.name() for e in evs],
            "_corr": [e.correlation_id() for e in evs],
            "_start": [e.start_ns() for e in evs],
            "_end": [e.end_ns() for e in evs],
        },
        schema={"name": pl.String, "_corr": pl.Int64, "_start": pl.Int64, "_end": pl.Int64},
    )


def from_profiler(prof: Any, *, json_path: str | os.PathLike[str] | None = None) -> Trace:
    """Build a `Trace` from a stopped `torch.profiler.profile` (or autograd profile).

    Kineto can write a profile only once; this uses that write. Pass `json_path` to keep
    the JSON file as well (what `prof.export_chrome_trace(json_path)` would have written).

    Parameters
    ----------
    prof
        A `torch.profiler.profile` after it stopped (e.g. after the `with` block), or a
        `torch.autograd.profiler.profile`.
    json_path
        Where to keep Kineto's JSON; by default a temporary file that is removed.

    Raises
    ------
    ProftabError
        The object is not a stopped torch profiler, or its trace was already exported.
    """
    inner = getattr(prof, "profiler", prof)
    results = getattr(inner, "kineto_results", None)
    if results is None or not hasattr(prof, "export_chrome_trace"):
        msg = "from_profiler needs a stopped torch.profiler.profile (its kineto_results are missing)"
        raise ProftabError(msg)
    with tempfile.TemporaryDirectory(prefix="proftab-") as tmp:
        path = os.fspath(json_path) if json_path is not None else os.path.join(tmp, "trace.json")
        try:
            prof.export_chrome_trace(path)
        except RuntimeError as exc:
            if "already saved" not in str(exc):
                raise
            msg = ("this profile was already exported (Kineto writes a profile only once); "
                   "load the exported file with pt.load(path), or call from_profiler(prof, json_path=...) "
                   "before exporting")
            raise ProftabError(msg) from None
        tables = read_kineto(path)
    tables.meta["source_file"] = f"<live profile {type(prof).__module__}.{type(prof).__qualname__}>"
    if tables.meta.get("time_resolution_ns") == 1:  # the JSON's times are the profiler's own ns
        tables.meta["live_exact_events"] = len(tables.events)
        return trace_from_files([tables])
    base = tables.meta["base_time_ns"]
    raw = _raw_events(results).unique(["name", "_corr"], keep="none")  # ambiguous pairs keep JSON times
    device = kinds.is_device()
    key = pl.when(device).then(pl.col("correlation")).otherwise(pl.col("external_id"))
    ev = tables.events.with_columns(_corr=key).join(raw, on=["name", "_corr"], how="left", maintain_order="left")
    exact = pl.col("_start").is_not_null()
    ev = ev.with_columns(
        start_ns=pl.when(exact).then(pl.col("_start") - base).otherwise(pl.col("start_ns")),
        end_ns=pl.when(exact).then(pl.col("_end") - base).otherwise(pl.col("end_ns")),
    ).with_columns(dur_ns=pl.col("end_ns") - pl.col("start_ns"))
    tables.meta["live_exact_events"] = int(ev.select(exact.sum()).item())
    tables.events = ev.select(tables.events.columns)
    return trace_from_files([tables])


def profiler_handler(out_dir: str | os.PathLike[str], *, worker_name: str | None = None) -> Callable[[Any], None]:
    """An `on_trace_ready` callback writing every finished profile as a proftab Parquet dataset.

    Each call writes ``{out_dir}/{worker_name}.{n}.pq`` (`n` counts the profiles this handler
    wrote, from 0) through `from_profiler` and `Trace.to_parquet`, so no JSON is kept. The
    default `worker_name` is ``rank-{rank}`` when `torch.distributed` is initialized (one
    handler per rank, as with `torch.profiler.tensorboard_trace_handler`), else
    ``{hostname}_{pid}``. Open a result with `pt.scan(path)`.
    """
    from proftab.io.parquet import write_parquet

    root = os.fspath(out_dir)
    written = 0

    def handler(prof: Any) -> None:
        nonlocal written
        name = worker_name or _worker_name()
        os.makedirs(root, exist_ok=True)
        write_parquet(from_profiler(prof), os.path.join(root, f"{name}.{written}.pq"))
        written += 1

    return handler


def _worker_name() -> str:
    """``rank-N`` under an initialized `torch.distributed`, else ``{hostname}_{pid}``."""
    import socket

    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return f"rank-{dist.get_rank()}"
    return f"{socket.gethostname()}_{os.getpid()}"
