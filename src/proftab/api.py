"""Attaching analyses to `Trace`: registered namespaces and methods (Polars' `register_*_namespace`).

An analysis is a module of free functions over frames. It is exposed on every `Trace` as a
*namespace*, a class constructed with the trace (`tr.device.busy()`), or, for torch's own
API, a *method* (`tr.key_averages()`). Built-in entries are listed here by module name and
imported on first use, so `import proftab` and `trace.py` import no feature module.

A user attaches their own namespace the same way the built-ins do:

>>> import proftab as pt
>>> @pt.register_trace_namespace("mine")
... class Mine:
...     def __init__(self, trace):
...         self._trace = trace
...     def kernels(self):
...         return self._trace.collect("events").filter(pl.col("cat") == "kernel")
>>> pt.load("data/h100_bert_small.pt.trace.json.gz").mine.kernels()   # doctest: +SKIP
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, Literal, TypeVar

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["BUILTIN", "hook", "register_hook", "register_trace_method", "register_trace_namespace", "registered",
           "resolve"]

Kind = Literal["namespace", "method"]
T = TypeVar("T")
C = TypeVar("C", bound="Callable[[Any], Any]")

#: built-in attributes of Trace -> the module that registers them (imported on first use)
BUILTIN: dict[str, str] = {
    "device": "proftab.device",
    "ranks": "proftab.ranks",
    "tree": "proftab.calltree",
    "export": "proftab.export",
    "plot": "proftab.plot",
    "anomalies": "proftab.anomalies",
    "critical_path": "proftab.critical_path",
    "memory": "proftab.memory",
    "modules": "proftab.modules",
    "perf": "proftab.perf",
    "compiled": "proftab.compiled",
    "key_averages": "proftab.torch",
    "table": "proftab.torch",
    "torch_version": "proftab.torch",
    "torch_validator": "proftab.torch.validator",
    "to_parquet": "proftab.pipeline",
    "select_events": "proftab.io.dataset.query",
    "select_threads": "proftab.tracks",
    "with_utc": "proftab.clock",
    "findings": "proftab.findings",
    "report": "proftab.report",
}

#: functions the Trace itself calls (its text and HTML reprs) -> the module that registers them
BUILTIN_HOOKS: dict[str, str] = {"repr": "proftab.display", "repr_html": "proftab.display"}

_REGISTRY: dict[str, tuple[Kind, Any]] = {}
_HOOKS: dict[str, Callable[..., Any]] = {}
#: names a registration may not take: the Trace's own members
RESERVED = frozenset({
    "tables", "files", "events", "nested", "instants", "flows", "counters", "threads", "rejected",
    "accounting", "meta", "collect", "lazy", "is_lazy", "with_tables", "categories",
})


def _register(name: str, kind: Kind, target: Any) -> None:
    if name in RESERVED or name.startswith("_"):
        msg = f"cannot register {name!r}: it is a Trace member or private"
        raise AttributeError(msg)
    _REGISTRY[name] = (kind, target)


def register_trace_namespace(name: str) -> Callable[[C], C]:
    """Register a class as `Trace.<name>`: built once per trace as `cls(trace)`, then cached.

    Any callable of one argument works the same way (a function giving a derived table, as
    `tr.anomalies` is).

    Parameters
    ----------
    name
        The attribute name (`tr.<name>`); registering a name again replaces the entry.
    """
    def decorator(cls: C) -> C:
        _register(name, "namespace", cls)
        return cls
    return decorator


def register_trace_method(name: str) -> Callable[[Callable[..., T]], Callable[..., T]]:
    """Register `fn(trace, ...)` as the method `Trace.<name>(...)`."""
    def decorator(fn: Callable[..., T]) -> Callable[..., T]:
        _register(name, "method", fn)
        return fn
    return decorator


def resolve(name: str) -> tuple[Kind, Any] | None:
    """The registered entry for `name` (importing its built-in module first), or None."""
    if name not in _REGISTRY and name in BUILTIN:
        importlib.import_module(BUILTIN[name])
    return _REGISTRY.get(name)


def registered() -> list[str]:
    """Every attribute name that `resolve` knows, built-in or user-registered."""
    return sorted(set(BUILTIN) | set(_REGISTRY))


def register_hook(name: str) -> Callable[[Callable[..., T]], Callable[..., T]]:
    """Register `fn` as the Trace's `name` hook (`repr`, `repr_html`)."""
    def decorator(fn: Callable[..., T]) -> Callable[..., T]:
        _HOOKS[name] = fn
        return fn
    return decorator


def hook(name: str) -> Callable[..., Any]:
    """The registered `name` hook (importing its built-in module first)."""
    if name not in _HOOKS:
        importlib.import_module(BUILTIN_HOOKS[name])
    return _HOOKS[name]
