"""What every reader takes and returns: `ReadOptions`, `FileTables` (one file, one rank), and one `Trace` of several.

A reader of a file format (Kineto JSON: `proftab.io.kineto`; a live profiler:
`proftab.io.torch_live`) builds one `FileTables` per input file, with the columns of
`proftab.schema`; `trace_from_files` concatenates them into the Trace the user gets.
Importing this module imports neither Polars nor numpy.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import os
    from collections.abc import Sequence

    import polars as pl

    from proftab.trace import Trace

__all__ = ["FileTables", "ReadOptions", "trace_from_files"]


@dataclass(frozen=True)
class ReadOptions:
    """How to read an input; each reader uses the options that apply to its kind.

    Attributes
    ----------
    salvage
        kineto: keep the complete events of a damaged or truncated file (with a warning).
    ranks
        kineto: the rank of each file, in the sorted file order.
    first_position
        kineto: the position of the first file, when a file's rank falls back to its position
        (a conversion reads its files one by one).
    storage_options
        dataset: fsspec options for a URL.
    json_path
        profiler: where to keep the JSON Kineto writes.
    prefetch
        kineto: modules to import on a helper thread while the C scanner reads (what the
        caller runs next).
    """

    salvage: bool = False
    ranks: Sequence[int] | None = None
    first_position: int = 0
    storage_options: dict[str, Any] | None = None
    json_path: str | os.PathLike[str] | None = None
    prefetch: tuple[str, ...] = ()



@dataclass
class FileTables:
    """Everything read from one trace file (before ranks are merged)."""

    path: str
    rank: int
    meta: dict[str, Any]
    events: pl.DataFrame
    instants: pl.DataFrame
    flows: pl.DataFrame
    counters: pl.DataFrame
    threads: pl.DataFrame
    rejected: pl.DataFrame
    accounting: pl.DataFrame
    warnings: list[str] = field(default_factory=list)
    source_sha256: str | None = None
    """sha256 of the file's bytes as read (null for a trace that was not a file)"""
    source_bytes: int | None = None
    """the file's size on disk (the bytes `source_sha256` is of)"""


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
