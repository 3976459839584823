"""Kineto / Chrome trace JSON, the profiler's own format: read into proftab's tables.

- `scan`: the C scanner (`proftab.io._kineto`) over a file or bytes: Arrow column buffers, `ts`
  and `dur` converted from their decimal text to int64 ns exactly;
- `decompress`: gzip by magic bytes, inflated on a helper thread while the scanner reads;
- `columns`: the scanner's buffers as one frame, each row's kind from its `ph`;
- `pairing`: B/E and b/e rows joined into complete events;
- `counters`: ph C rows as the long `counters` table;
- `tables`: one file's tables (`build_tables`, `read_kineto`);
- `reader`: the Kineto reader of `proftab.io.readers` (files read in parallel into one Trace).

Importing the package imports neither Polars nor numpy; the table builders' names below are
imported on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from proftab.io.kineto.scan import MAX_TOKEN_BYTES, TYPED_SPEC, scan_bytes, scan_file, scan_path

if TYPE_CHECKING:
    from proftab.io.kineto.tables import build_tables, canonical_json_columns, read_kineto, tables_from_scan
    from proftab.io.tables import FileTables

__all__ = ["MAX_TOKEN_BYTES", "TYPED_SPEC", "FileTables", "build_tables", "canonical_json_columns", "read_kineto",
           "scan_bytes", "scan_file", "scan_path", "tables_from_scan"]

#: names imported on first use (each module imports Polars)
_LAZY = {"build_tables": "proftab.io.kineto.tables", "canonical_json_columns": "proftab.io.kineto.tables",
         "read_kineto": "proftab.io.kineto.tables", "tables_from_scan": "proftab.io.kineto.tables",
         "FileTables": "proftab.io.tables"}


def __getattr__(name: str) -> Any:
    """The table builders' names (`_LAZY`), imported on first use."""
    module = _LAZY.get(name)
    if module is None:
        msg = f"module {__name__!r} has no attribute {name!r}"
        raise AttributeError(msg)
    return getattr(importlib.import_module(module), name)
