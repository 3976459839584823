"""The reader seam: every input proftab reads becomes a `Trace` of the same tables.

Each kind of input has one reader, and the reader is chosen by what the input is:

==========  ==============================================================  =========================
kind        input                                                           reader
==========  ==============================================================  =========================
kineto      Kineto / Chrome trace JSON (plain or gzip): a file, a           `io.kineto.reader`
            directory of rank files, a glob, or a list of those
dataset     a proftab Parquet dataset: its directory or `_proftab.json`,    `io.dataset.read`
            or an object-store URL
profiler    a stopped `torch.profiler.profile`                              `io.torch_live`
==========  ==============================================================  =========================

Every reader is a function ``read(source, options: ReadOptions) -> Trace`` returning the tables
of `proftab.trace.TABLES` with the columns of `proftab.schema`: eager frames concatenated from
one `proftab.io.tables.FileTables` per file (kineto, profiler), or LazyFrames over a dataset's
part files. `kind_of` says which reader an input needs; `open_trace` reads it with that reader.
`pt.load` reads with the kineto reader, `pt.scan` is the dataset reader, `pt.from_profiler` the
profiler reader, and `pt.convert` reads each of its files through `open_trace`.

Importing this module imports neither Polars nor numpy.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Literal, Protocol

from proftab.exceptions import TraceError
from proftab.io.dataset.layout import dataset_root, not_a_trace_file
from proftab.io.dataset.remote import is_remote
from proftab.io.files import TRACE_SUFFIXES
from proftab.io.kineto.reader import read_traces  # Polars-free: the scanner is ready when `load` starts
from proftab.io.tables import ReadOptions

if TYPE_CHECKING:
    from collections.abc import Sequence

    from proftab.trace import Trace

__all__ = ["KINDS", "Kind", "ReadOptions", "Reader", "kind_of", "open_trace", "reader"]

Kind = Literal["kineto", "dataset", "profiler"]
#: every kind of input, with the public function that reads it (named in messages)
KINDS: dict[Kind, str] = {"kineto": "pt.load", "dataset": "pt.scan", "profiler": "pt.from_profiler"}


class Reader(Protocol):
    """One kind of input read into a Trace."""

    def __call__(self, source: Any, options: ReadOptions, /) -> Trace:
        """`source` as a Trace (raises TraceError or ProftabError for an input it cannot read)."""


def reader(kind: Kind) -> Reader:
    """The reader of `kind` (its module is imported now)."""
    if kind == "kineto":
        return read_traces
    if kind == "dataset":
        from proftab.io.dataset.read import read_dataset

        return read_dataset
    if kind == "profiler":
        from proftab.io.torch_live import read_profiler

        return read_profiler
    msg = f"no reader for {kind!r}; kinds: {list(KINDS)}"
    raise ValueError(msg)


def _is_profiler(source: object) -> bool:
    """A torch profiler object (it exports Chrome traces), not a path or a list of paths."""
    return not isinstance(source, str | os.PathLike | list | tuple) and hasattr(source, "export_chrome_trace")


def kind_of(source: object) -> Kind:
    """Which reader `source` needs, from what it is: a profiler object, a proftab dataset (its
    directory, its manifest, or a URL that is not a local file nor names a trace file), else
    Kineto trace files."""
    if _is_profiler(source):
        return "profiler"
    if isinstance(source, str | os.PathLike):
        path = os.fspath(source)
        if dataset_root(path) is not None or (is_remote(path) and not path.endswith(TRACE_SUFFIXES)):
            return "dataset"
    return "kineto"


def open_trace(source: Any, options: ReadOptions | None = None, *, kinds: Sequence[Kind] = tuple(KINDS)) -> Trace:
    """`source` read by the reader its kind needs (`kind_of`).

    Parameters
    ----------
    source
        Trace files (a path, directory, glob or list), a dataset (a directory or URL), or a
        stopped torch profiler.
    options
        How to read it (`ReadOptions`); default: the defaults of every reader.
    kinds
        The kinds the caller accepts; another kind is a TraceError naming its reader.

    Raises
    ------
    TraceError
        `source` is of a kind the caller does not accept, or its reader raises one.
    """
    kind = kind_of(source)
    if kind not in kinds:
        raise _wrong_kind(source, kind, kinds)
    return reader(kind)(source, options or ReadOptions())


#: each kind of input as messages name it
_WHAT: dict[Kind, str] = {"kineto": "a trace file", "dataset": "a proftab Parquet dataset (written by convert)",
                          "profiler": "a torch profiler object"}


def _wrong_kind(source: object, kind: Kind, kinds: Sequence[Kind]) -> TraceError:
    """The error for an input of `kind` given to a caller that reads only `kinds`."""
    if kind == "dataset" and "kineto" in kinds:
        where = os.fspath(source)  # type: ignore[call-overload]
        return not_a_trace_file(dataset_root(where) or where)
    return TraceError(f"{_WHAT[kind]}, not {' or '.join(_WHAT[k] for k in kinds)}",
                      hint=f"read it with {KINDS[kind]}(...)")
