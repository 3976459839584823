"""The trace files a user's source names: a file, a directory of rank files, a glob, or a list.

Importing this module imports neither Polars nor numpy.
"""

from __future__ import annotations

import glob
import os
from typing import TYPE_CHECKING

from proftab.exceptions import TraceError, UsageError
from proftab.io.dataset.layout import dataset_root, not_a_trace_file
from proftab.io.tables import trace_from_files  # its home is proftab.io.tables; this path is documented

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["TRACE_SUFFIXES", "expand_sources", "trace_from_files"]

TRACE_SUFFIXES = (".json", ".json.gzip", ".gz")  # ".gz" covers ".json.gz"


def expand_sources(source: str | os.PathLike[str] | Sequence[str | os.PathLike[str]]) -> list[str]:
    """Return the trace files named by `source`, sorted for determinism.

    A directory yields its `*.json`, `*.gz` and `*.json.gzip` files (not recursive); a string with
    glob characters is expanded; a list is expanded element by element.
    """
    if isinstance(source, str | os.PathLike):
        items = [os.fspath(source)]
    elif isinstance(source, list | tuple) and all(isinstance(s, str | os.PathLike) for s in source):
        items = [os.fspath(s) for s in source]
    else:
        msg = f"not a trace file, directory, glob or list of those: {type(source).__name__}"
        raise UsageError(msg)
    if not items:
        msg = "no trace files given"
        raise TraceError(msg)
    paths: list[str] = []
    for item in items:
        if (root := dataset_root(item)) is not None:
            raise not_a_trace_file(root)
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
