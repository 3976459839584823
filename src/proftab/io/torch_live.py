"""`from_profiler(prof)`: proftab tables straight from a live `torch.profiler.profile`.

The profile is written once by Kineto's own C++ exporter into a temporary file and read by
the same scanner as any trace (so every column means the same thing), then the times of host
ops and device activities are replaced by the profiler's in-memory `start_ns()` / `end_ns()`
(int64 ns), matched by `(name, External id)` for host ops and `(name, correlation)` for device
activities. With torch >= 2.4 the JSON already holds those exact ns (every `ts`/`dur` has three
decimals: the file's `time_resolution_ns` is 1), so the profiler's events are not walked at all
and the cost is that of writing and loading the JSON; with older torch the JSON held truncated
µs, and the walk restores the exact values.

`read_profiler` is this module's reader in the seam of `proftab.io.readers` (`pt.from_profiler`);
`proftab.pipeline.profiler_handler` writes each finished profile as a proftab dataset.
"""

from __future__ import annotations

import os
import tempfile
from typing import TYPE_CHECKING, Any

import polars as pl

from proftab import kinds
from proftab.exceptions import ProftabError
from proftab.io.kineto.tables import read_kineto
from proftab.io.tables import trace_from_files

if TYPE_CHECKING:
    from proftab.io.tables import ReadOptions
    from proftab.trace import Trace

__all__ = ["from_profiler", "read_profiler"]


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


def read_profiler(source: Any, options: ReadOptions) -> Trace:
    """The profiler reader of `proftab.io.readers`: `from_profiler` with the options' `json_path`."""
    return from_profiler(source, json_path=options.json_path)
