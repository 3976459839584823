"""proftab: exact, columnar tables from PyTorch profiler traces.

>>> import proftab as pt
>>> tr = pt.load("data/train_cnn.pt.trace.json.gz")      # doctest: +SKIP
>>> tr.events                   # one row per complete event, int64-ns times
>>> tr.key_averages()           # torch's key_averages as a DataFrame, never negative
>>> print(tr.table())           # torch's text table, same layout
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from proftab.api import register_trace_method, register_trace_namespace
from proftab.diff import diff
from proftab.exceptions import ProftabError, ProftabWarning, TraceError
from proftab.io.parquet import convert, scan
from proftab.joins import join_samples, overlaps
from proftab.paths import data_path
from proftab.schema import Flag
from proftab.trace import Trace

if TYPE_CHECKING:
    import os
    from collections.abc import Sequence
del TYPE_CHECKING, annotations  # keep dir(proftab) to the API

__version__ = "0.1.0"
__all__ = [
    "Flag", "ProftabError", "ProftabWarning", "Trace", "TraceError", "__version__", "convert", "data_path", "diff",
    "from_profiler", "join_samples", "load", "overlaps", "register_trace_method", "register_trace_namespace", "scan",
]


def load(source: str | os.PathLike[str] | Sequence[str | os.PathLike[str]], *, salvage: bool = False,
         ranks: Sequence[int] | None = None) -> Trace:
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

    Raises
    ------
    TraceError
        A file is missing, not a trace, or damaged (names the file, byte offset, excerpt).
    """
    from proftab.io.files import expand_sources, read_files, trace_from_files

    paths = expand_sources(source)
    return trace_from_files(read_files(paths, salvage=salvage, ranks=ranks))


def from_profiler(prof: object, *, json_path: str | os.PathLike[str] | None = None) -> Trace:
    """The same tables as `load`, straight from a stopped `torch.profiler.profile`.

    Times come from the profiler's in-memory int64 ns (`start_ns()` / `end_ns()`).
    Kineto writes a profile once: pass `json_path` to also keep the JSON file.
    Requires torch (the optional `torch` extra).
    """
    from proftab.io.torch_live import from_profiler as _from_profiler

    return _from_profiler(prof, json_path=json_path)
