"""The public read and write entry points, where io meets the analyses: `load`, `convert`, `to_parquet`.

io reads and writes tables and imports no analysis (`tests/test_layering.py`). What an analysis
adds is joined here, one layer above both:

- `load` reads trace files through the reader seam (`proftab.io.readers`) and merges graph
  capture traces (`proftab.device._graphs.merge_capture`) and Inductor provenance into the Trace;
- `convert`, `Trace.to_parquet` and `profiler_handler` write datasets with io's writers, handing
  them `derived_tables`: what the analyses add to a dataset (its `anomalies` table, the stored
  key_averages of a one-file dataset, the per-rank summaries of `proftab.ranks.summaries`).

Importing this module imports neither Polars nor numpy (`import proftab` imports it).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from proftab.api import BUILTIN, register_trace_method
from proftab.exceptions import TraceError
from proftab.io.readers import ReadOptions, open_trace, reader

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from pathlib import Path

    from proftab.io.dataset.write import Derived
    from proftab.trace import Trace

__all__ = ["convert", "derived_tables", "from_profiler", "load", "profiler_handler", "write_parquet"]

#: what a loaded trace is asked next in nearly every session (`tr.key_averages()`): its module is
#: imported on a helper thread while the C scanner reads (`proftab.io.kineto.reader`)
_NEXT_STEP = (BUILTIN["key_averages"],)


def load(source: str | os.PathLike[str] | Sequence[str | os.PathLike[str]], *, salvage: bool = False,
         ranks: Sequence[int] | None = None,
         compile_provenance: str | os.PathLike[str] | Sequence[str | os.PathLike[str]] | None = None,
         graph_capture: str | os.PathLike[str] | Sequence[str | os.PathLike[str]] | None = None) -> Trace:
    """Load a trace: a file, a directory or glob of rank files, or a list of files.

    Parameters
    ----------
    source
        A `.json` / `.json.gz` trace (gzip is detected from the bytes, not the name), a
        directory of them, a glob pattern, or a list of those.
    salvage
        Keep the complete events of a damaged or truncated file (with a `ProftabWarning`
        stating what was lost) instead of raising `TraceError`.
    ranks
        Explicit rank per file (in the sorted file order); by default `distributedInfo.rank`,
        else a `rank-N` pattern in the file name, else the file's position.
    compile_provenance
        Inductor's provenance artifacts (`proftab.io.inductor.read_provenance`: a
        `TORCH_COMPILE_DEBUG` / `TORCH_TRACE` directory, a structured trace log, a mappings
        file, or a list): the Trace then holds the `compile_provenance` table (docs/compiled.md).
    graph_capture
        CUDA / HIP graph capture trace(s): a file, a directory of them (its
        `execution_details.json` is skipped) or a list. Each graph replay's kernels are then
        attributed to virtual copies of the ops that captured them (docs/device.md, "CUDA graphs").

    Raises
    ------
    TraceError
        A file is missing, not a trace, or damaged (names the file, byte offset, excerpt).
    """
    trace = open_trace(source, ReadOptions(salvage=salvage, ranks=ranks, prefetch=_NEXT_STEP), kinds=("kineto",))
    if graph_capture is not None:  # issue 23: graph capture merge (first: provenance keeps its tables)
        trace = _merge_graph_capture(trace, graph_capture, salvage=salvage)
    if compile_provenance is not None:  # issue 28: torch.compile provenance
        from proftab.io.inductor import with_provenance

        trace = with_provenance(trace, compile_provenance)
    return trace


def _merge_graph_capture(trace: Trace, graph_capture: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
                         *, salvage: bool) -> Trace:
    """`trace` with the capture traces merged (`proftab.device._graphs.merge_capture`)."""
    from proftab.device._graphs import merge_capture
    from proftab.io.files import expand_sources

    paths = [p for p in expand_sources(graph_capture) if os.path.basename(p) != "execution_details.json"]
    if not paths:
        msg = "no graph capture trace given (only an execution_details.json)"
        raise TraceError(msg, path=os.fspath(graph_capture) if isinstance(graph_capture, str | os.PathLike) else None)
    options = ReadOptions(salvage=salvage, ranks=[0])
    return merge_capture(trace, [(p, open_trace(p, options, kinds=("kineto",))) for p in paths])


def from_profiler(prof: object, *, json_path: str | os.PathLike[str] | None = None) -> Trace:
    """The same tables as `load`, straight from a stopped `torch.profiler.profile`.

    Times are the profiler's int64 ns (with torch >= 2.4 the JSON Kineto writes holds them
    exactly; with older torch they are read from its in-memory events). Kineto writes a
    profile once: pass `json_path` to also keep the JSON file. Requires torch (the optional
    `torch` extra).
    """
    return reader("profiler")(prof, ReadOptions(json_path=json_path))


def derived_tables(trace: Trace, *, key_averages: bool, summaries: bool) -> Derived:
    """What the analyses add to a dataset of `trace` (`proftab.io.dataset.write.Derive`).

    Its `anomalies` table always; its key_averages with torch's floats (what `table()` prints)
    when `key_averages`; the per-rank summaries of a one-rank trace when `summaries` (best
    effort: a summary that fails is left out, its error kept).
    """
    from proftab.io.dataset.write import Derived

    derived = Derived(anomalies=trace.anomalies)
    if key_averages:
        derived.key_averages = trace.key_averages(torch_floats=True)
    if summaries:
        from proftab.ranks.summaries import rank_summaries

        derived.summaries, derived.summary_errors = rank_summaries(trace, int(trace.files["rank"][0]))
    return derived


@register_trace_method("to_parquet")
def write_parquet(trace: Trace, path: str | os.PathLike[str], *, force: bool = False,
                  storage_options: dict[str, Any] | None = None) -> Path | str:
    """Write every table of `trace` into a Parquet dataset directory (docs/parquet.md).

    Parameters
    ----------
    trace
        A loaded (or scanned) Trace; its nesting and anomalies are computed if needed.
    path
        The dataset directory to create: a local path, a ``file://`` URL, or an object-store /
        fsspec URL (``s3://bucket/ds``: written locally, then uploaded with its manifest last;
        `proftab.io.dataset.remote`).
    force
        Replace an existing dataset at `path`.
    storage_options
        fsspec options for a URL `path` (credentials, endpoint).

    Returns
    -------
    pathlib.Path or str
        `path` (the URL string for a URL).

    Raises
    ------
    ProftabError
        `path` exists (without `force`), or is a non-empty directory that is not a dataset.
    """
    from proftab.io.dataset.write import write_dataset

    return write_dataset(trace, path, derive=derived_tables, force=force, storage_options=storage_options)


def convert(sources: str | os.PathLike[str] | Sequence[str | os.PathLike[str]], out: str | os.PathLike[str], *,
            force: bool = False, progress: bool | str = "auto", salvage: bool = False,
            ranks: Sequence[int] | None = None, max_workers: int | None = None, client: Any = None,
            on_error: str = "raise", resume: bool = False, summaries: bool = True,
            storage_options: dict[str, Any] | None = None, staging: str | os.PathLike[str] | None = None,
            ) -> Path | str:
    """Convert trace files (a file, directory, glob or list) into one Parquet dataset.

    Several files are converted in parallel (worker processes, or Dask tasks with `client`),
    each writing its own rank partition; the dataset appears at `out` only at the end, with a
    per-file status table (``_status.parquet``).

    Parameters
    ----------
    sources
        As for :func:`proftab.load`; also fsspec URLs (``file://``, ``s3://`` ...), read by the
        workers (`proftab.io.dataset.distributed`).
    out
        The dataset directory to create: a local path or ``file://`` URL (the same path on
        every worker), or an object-store / fsspec URL (``s3://bucket/job.pq``): the dataset is
        then converted under `staging` and uploaded with its manifest last
        (`proftab.io.dataset.remote`).
    force
        Replace an existing dataset at `out`.
    progress
        Progress bar on stderr (`proftab.progress`): ``"auto"`` (or True) on a terminal when
        the input files total at least `PROGRESS_MIN_BYTES`; ``"always"`` (one line per step
        when stderr is not a terminal); ``"never"`` (or False).
    salvage, ranks
        As for :func:`proftab.load`.
    max_workers
        Worker processes (default: one per file, at most the CPU count); with
        ``client="local"``, the LocalCluster's workers.
    client
        Run the per-file work on Dask: a `distributed.Client`, a scheduler address
        (``"tcp://host:8786"``) or ``"local"`` (a LocalCluster); None: a local process pool.
    on_error
        ``"raise"``: a file that fails fails the conversion (nothing is written);
        ``"skip"``: it is left out, with its error in the status table, and a
        `SkippedFileWarning` (its ``path`` attribute: the file) is emitted once per such file.
    resume
        Reuse the ranks of an existing dataset at `out` whose source file (path and size) is
        unchanged and converted fine; convert only the other files, then replace `out`. Also
        keeps each finished file in ``.OUT.proftab-resume/`` next to `out` until the dataset is
        complete, so that a failed or killed run rerun with `resume` continues from them.
    summaries
        Write the per-rank summaries (`proftab.ranks.summaries`).
    storage_options
        fsspec options for a URL `out` (credentials, ``client_kwargs={"endpoint_url": ...}``).
    staging
        Where a URL `out` is converted before its upload (default: the system's temporary
        directory); Dask workers other than local ones need it on a shared file system.

    Returns
    -------
    pathlib.Path or str
        `out` (the URL string for a URL).

    Raises
    ------
    TraceError
        A file is missing or damaged (with ``on_error="raise"``), or two files claim the same rank.
    ProftabError
        `out` exists (without `force` or `resume`).
    """
    from proftab.io.dataset.convert import convert_files

    return convert_files(sources, out, derive=derived_tables, force=force, progress=progress, salvage=salvage,
                         ranks=ranks, max_workers=max_workers, client=client, on_error=on_error, resume=resume,
                         summaries=summaries, storage_options=storage_options, staging=staging)


def profiler_handler(out_dir: str | os.PathLike[str], *, worker_name: str | None = None) -> Callable[[Any], None]:
    """An `on_trace_ready` callback writing every finished profile as a proftab Parquet dataset.

    ``torch.profiler.profile(..., on_trace_ready=pt.profiler_handler("prof/"))`` writes
    ``{out_dir}/{worker_name}.{n}.pq`` (`n` counts the profiles this handler wrote, from 0)
    through `from_profiler` and `Trace.to_parquet`, so no JSON is kept. The default
    `worker_name` is ``rank-{rank}`` when `torch.distributed` is initialized (one handler per
    rank, as with `torch.profiler.tensorboard_trace_handler`), else ``{hostname}_{pid}``. Open a
    result with `pt.scan(path)`.
    """
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
