"""Expand a user's source (file, directory, glob or list), read the files in parallel, build the Trace.

Importing this module imports neither Polars nor numpy: `read_files` starts the C scanner
first and imports the table builders on a second thread meanwhile (`_TableModules`), so in a
fresh process `import proftab; pt.load(path)` spends the import time beside the scan.
"""

from __future__ import annotations

import glob
import importlib
import os
import sys
import threading
from typing import TYPE_CHECKING

from proftab.api import BUILTIN
from proftab.exceptions import TraceError
from proftab.io.scan import scan_path

if TYPE_CHECKING:
    from collections.abc import Sequence

    from proftab.io.kineto import FileTables
    from proftab.trace import Trace

__all__ = ["dataset_root", "expand_sources", "load", "read_files", "trace_from_files"]

TRACE_SUFFIXES = (".json", ".json.gzip", ".gz")  # ".gz" covers ".json.gz"
DATASET_MANIFEST = "_proftab.json"  # proftab.io.parquet.MANIFEST (not imported: pyarrow-free here)


def dataset_root(item: str | os.PathLike[str]) -> str | None:
    """The directory of the proftab Parquet dataset `item` names, or None when it is not one.

    `item` may be the dataset directory or its `_proftab.json`.
    """
    path = os.fspath(item)
    if os.path.isdir(path) and os.path.isfile(os.path.join(path, DATASET_MANIFEST)):
        return path
    if os.path.basename(path) == DATASET_MANIFEST and os.path.isfile(path):
        return os.path.dirname(path) or "."
    return None


def expand_sources(source: str | os.PathLike[str] | Sequence[str | os.PathLike[str]]) -> list[str]:
    """Return the trace files named by `source`, sorted for determinism.

    A directory yields its `*.json`, `*.gz` and `*.json.gzip` files (not recursive); a string with
    glob characters is expanded; a list is expanded element by element.
    """
    if isinstance(source, str | os.PathLike):
        items = [os.fspath(source)]
    else:
        items = [os.fspath(s) for s in source]
    if not items:
        msg = "no trace files given"
        raise TraceError(msg)
    paths: list[str] = []
    for item in items:
        if (root := dataset_root(item)) is not None:
            msg = "a proftab Parquet dataset (written by convert), not a trace file"
            raise TraceError(msg, path=root, hint=f"open it with pt.scan({root!r}) (the CLI reads it as it is)")
        if os.path.isdir(item):
            found = sorted(
                os.path.join(item, f) for f in os.listdir(item)
                if f.endswith(TRACE_SUFFIXES) and os.path.isfile(os.path.join(item, f))
            )
            if not found:
                msg = "directory holds no *.json, *.gz or *.json.gzip trace files"
                raise TraceError(msg, path=item)
            paths.extend(found)
        elif os.path.isfile(item):  # an existing file is itself, even when its name has glob characters
            paths.append(item)
        elif any(ch in item for ch in "*?["):
            found = sorted(glob.glob(item))
            if not found:
                msg = "glob pattern matches no files"
                raise TraceError(msg, path=item)
            paths.extend(found)
        elif os.path.exists(item):
            paths.append(item)
        else:
            msg = "no such file"
            raise TraceError(msg, path=item, hint="pass a trace file, a directory of rank files or a glob")
    return paths


#: what building a Trace imports (Polars and numpy through them), and the module that registers
#: `tr.key_averages()` (`api.BUILTIN`), which nearly every session calls next; `numpy.ma` is
#: imported by Polars when it first builds a Series from a numpy array
_TABLE_MODULES = ("proftab.io.kineto", "proftab.trace", "proftab.meta", "numpy.ma", BUILTIN["key_averages"])


class _TableModules:
    """Imports `_TABLE_MODULES` on a helper thread while the C scanner reads (the scanner
    releases the GIL; on a second core the imports cost no wall time).

    `wait()` returns once the thread has finished, so no import is left running when `load`
    returns. A failed import is left to the caller's own import, which raises it as usual.
    Nothing is started when the modules are already imported.
    """

    def __init__(self) -> None:
        self._thread: threading.Thread | None = None
        if all(m in sys.modules for m in _TABLE_MODULES):
            return

        def work() -> None:
            for module in _TABLE_MODULES:
                try:
                    importlib.import_module(module)
                except BaseException:  # noqa: BLE001 - the caller's own import raises it
                    return

        self._thread = threading.Thread(target=work, name="proftab-imports", daemon=True)
        self._thread.start()

    def wait(self) -> None:
        """Block until the imports have finished (at once when none were started)."""
        if self._thread is not None:
            self._thread.join()


def read_files(paths: list[str], *, salvage: bool = False, ranks: Sequence[int] | None = None,
               max_workers: int | None = None) -> list[FileTables]:
    """Read several trace files concurrently (the scanner releases the GIL).

    Each file is scanned first (`proftab.io.scan`); the table builders are imported beside the
    scans and used once they are there.
    """
    if ranks is not None and len(ranks) != len(paths):
        msg = f"ranks has {len(ranks)} entries for {len(paths)} files"
        raise TraceError(msg)
    modules = _TableModules()

    def one(i: int) -> FileTables:
        try:
            res = scan_path(paths[i], salvage=salvage)
        finally:  # a file that fails to scan too: no import is left running when load returns or raises
            modules.wait()
        from proftab.io.kineto import tables_from_scan

        return tables_from_scan(res, paths[i], salvage=salvage, position=i,
                                rank=None if ranks is None else ranks[i])

    if len(paths) == 1:
        return [one(0)]
    from concurrent.futures import ThreadPoolExecutor  # (imports logging: not for the one-file case)

    workers = max_workers or min(len(paths), os.cpu_count() or 1)
    with ThreadPoolExecutor(max_workers=workers) as pool:
        tables = list(pool.map(one, range(len(paths))))
    seen: dict[int, str] = {}
    for t in tables:
        if t.rank in seen:
            msg = (f"two files claim rank {t.rank} ({seen[t.rank]} and {t.path}, from "
                   f"{t.meta['rank_source']})")
            raise TraceError(msg, hint="load them separately, or give each file its rank: "
                                       "pt.load(..., ranks=[0, 1, ...]) (CLI: --ranks 0,1,...)")
        seen[t.rank] = t.path
    return tables



def trace_from_files(files: Sequence[FileTables]) -> Trace:
    """One Trace of per-file tables (ranks already assigned), tables concatenated in file order."""
    import polars as pl

    from proftab.meta import files_frame
    from proftab.trace import TABLES, Trace

    def cat(name: str) -> pl.DataFrame:
        frames: list[pl.DataFrame] = [getattr(f, name) for f in files]
        return frames[0] if len(frames) == 1 else pl.concat(frames, how="vertical")
    return Trace({name: cat(name) for name in TABLES},
                 files_frame({f.rank: f.meta for f in files}, sha256={f.rank: f.source_sha256 for f in files},
                             source_bytes={f.rank: f.source_bytes for f in files if f.source_bytes is not None}))


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
    graph_capture
        CUDA / HIP graph capture trace(s): a file, a directory of them (its
        `execution_details.json` is skipped) or a list. Each graph replay's kernels are then
        attributed to virtual copies of the ops that captured them (docs/device.md, "CUDA graphs").

    Raises
    ------
    TraceError
        A file is missing, not a trace, or damaged (names the file, byte offset, excerpt).
    """
    paths = expand_sources(source)
    trace = trace_from_files(read_files(paths, salvage=salvage, ranks=ranks))
    if graph_capture is not None:  # issue 23: graph capture merge (first: provenance keeps its tables)
        trace = _merge_graph_capture(trace, graph_capture, salvage=salvage)
    if compile_provenance is not None:  # issue 28: torch.compile provenance
        from proftab.io.inductor import with_provenance

        trace = with_provenance(trace, compile_provenance)
    return trace


def _merge_graph_capture(trace: Trace, graph_capture: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
                         *, salvage: bool) -> Trace:
    """`trace` with the capture traces merged (`proftab.device._graphs.merge_capture`, through its hook)."""
    from proftab.api import hook

    paths = [p for p in expand_sources(graph_capture) if os.path.basename(p) != "execution_details.json"]
    if not paths:
        msg = "no graph capture trace given (only an execution_details.json)"
        raise TraceError(msg, path=os.fspath(graph_capture) if isinstance(graph_capture, str | os.PathLike) else None)
    captures = [(p, trace_from_files(read_files([p], salvage=salvage, ranks=[0]))) for p in paths]
    merged: Trace = hook("graph_capture")(trace, captures)
    return merged
