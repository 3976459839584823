"""proftab: exact, columnar tables from PyTorch profiler traces.

>>> import proftab as pt
>>> tr = pt.load("data/train_cnn.pt.trace.json.gz")      # doctest: +SKIP
>>> tr.events                   # one row per complete event, int64-ns times
>>> tr.key_averages()           # torch's key_averages as a DataFrame, never negative
>>> print(tr.table())           # torch's text table, same layout
"""

from __future__ import annotations

import importlib as _importlib
import os as _os
import sys as _sys
import types as _types
from typing import TYPE_CHECKING as _TYPE_CHECKING
from typing import Any as _Any


def _cli_interrupted() -> None:
    """Ctrl-C while the `proftab` command imports its libraries: exit 130 without a traceback."""
    argv = getattr(_sys, "orig_argv", _sys.argv)
    as_module = "-m" in argv[:-1] and argv[argv.index("-m") + 1] == "proftab"
    if as_module or _os.path.basename(_sys.argv[0]).startswith("proftab"):
        print("proftab: interrupted", file=_sys.stderr)
        raise SystemExit(130) from None


# Polars-free: `load` starts scanning before Polars and numpy are imported (proftab.io.kineto.reader)
try:
    from proftab._version import __version__
    from proftab.api import register_trace_method, register_trace_namespace
    from proftab.codes import Flag
    from proftab.exceptions import ProftabError, ProftabWarning, TraceError
    from proftab.paths import data_path
    from proftab.pipeline import convert, from_profiler, load, profiler_handler
except KeyboardInterrupt:
    _cli_interrupted()
    raise

#: the rest of the API, imported on first use (`__getattr__`): each imports Polars
_LAZY = {"Trace": "proftab.trace", "diff": "proftab.diff", "join_samples": "proftab.joins",
         "overlaps": "proftab.joins", "read_parquet": "proftab.io.dataset.read", "scan": "proftab.io.dataset.read"}

if _TYPE_CHECKING:
    from proftab.diff import diff
    from proftab.io.dataset.read import read_parquet, scan
    from proftab.joins import join_samples, overlaps
    from proftab.trace import Trace
del annotations  # keep dir(proftab) to the API

__all__ = [
    "Flag", "ProftabError", "ProftabWarning", "Trace", "TraceError", "__version__", "convert", "data_path",
    "diff", "from_profiler", "join_samples", "load", "overlaps", "profiler_handler", "read_parquet",
    "register_trace_method",
    "register_trace_namespace", "scan",
]


def __getattr__(name: str) -> _Any:
    """The lazily imported part of the API (`_LAZY`), imported once on first use."""
    module = _LAZY.get(name)
    if module is None:
        msg = f"module 'proftab' has no attribute {name!r}"
        raise AttributeError(msg)
    value = getattr(_importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*__all__, *(k for k in globals() if not k.startswith("_"))})


class _Package(_types.ModuleType):
    """`proftab`'s module type: `pt.diff` stays the function when the import system binds the
    submodule `proftab.diff` to the package's name `diff` (its first import, from anywhere)."""

    def __setattr__(self, name: str, value: object) -> None:
        if name == "diff" and isinstance(value, _types.ModuleType):
            value = value.diff
        super().__setattr__(name, value)


_sys.modules[__name__].__class__ = _Package
