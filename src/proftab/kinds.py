"""What kind of row an event is: the category predicates, defined once.

Every analysis asks these questions through this module (as Polars expressions over the
`cat` column, or over the set of categories present), with one null handling: an event
without a category is a host event.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

from proftab import schema

if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = ["CPU_OP", "MODULE_PREFIX", "OP_CATEGORIES", "PYTHON_FRAME", "RUNTIME_2021", "USER_ANNOTATION", "device_type",
           "has_device_rows", "in_categories", "is_device", "is_device_work", "is_host", "is_host_op", "is_op",
           "is_profiler_span", "is_python_frame", "is_runtime", "is_user_annotation", "use_device"]


#: the category of a Python frame recorded with `with_stack=True` (`file.py(12): fn`, `nn.Module: ...`)
PYTHON_FRAME = "python_function"
#: the category of an aten / c10 operator (torch >= 1.11; "Operator" before)
CPU_OP = "cpu_op"
#: host ops, the events that own device launches: `cpu_op`, and `Operator` of 2021-era traces
OP_CATEGORIES = frozenset({CPU_OP, "Operator"})
#: a `record_function` region (torch's `is_user_annotation`)
USER_ANNOTATION = "user_annotation"

#: the name prefix of the `python_function` frame torch records for an `nn.Module` call (with_stack)
MODULE_PREFIX = "nn.Module: "


def in_categories(categories: Iterable[str], col: str = "cat") -> pl.Expr:
    """`col` is one of `categories` (False for a null category).

    Compared on the column as it is (String, Categorical or Enum): no String cast, which
    would materialise every row's category (3x slower on a Categorical column).
    """
    return pl.col(col).is_in(sorted(categories)).fill_null(False)


def is_device(col: str = "cat") -> pl.Expr:
    """A device-side row (kernel, memcpy, memset, gpu annotation, sync: pid = device, tid = stream)."""
    return in_categories(schema.DEVICE_CATEGORIES, col)


def is_device_work(col: str = "cat") -> pl.Expr:
    """A device row that is the device's own work (kernel, memcpy, memset), not an annotation or sync."""
    return in_categories(schema.DEVICE_WORK_CATEGORIES, col)


def is_profiler_span(col: str = "cat") -> pl.Expr:
    """A span that describes the profiler itself (`cat` "Trace"), not work."""
    return in_categories(schema.PROFILER_SPAN_CATEGORIES, col)


def is_host(col: str = "cat") -> pl.Expr:
    """A host-side row (not a device row)."""
    return ~is_device(col)


def is_python_frame(col: str = "cat") -> pl.Expr:
    """A Python frame (`python_function`), not an op (False for a null category)."""
    return in_categories((PYTHON_FRAME,), col)


def is_op(col: str = "cat") -> pl.Expr:
    """A host operator (`OP_CATEGORIES`)."""
    return in_categories(OP_CATEGORIES, col)


def is_user_annotation(col: str = "cat") -> pl.Expr:
    """A `record_function` region on the host (`user_annotation`)."""
    return in_categories((USER_ANNOTATION,), col)


#: the category of a CUDA runtime call in 2021-era (tb_plugin) traces; later ones write `cuda_runtime`
RUNTIME_2021 = "Runtime"


def is_runtime(col: str = "cat") -> pl.Expr:
    """A runtime or driver call on the host (`cuda_runtime`, `hip_runtime`, `cuda_driver`..., and the
    2021 `Runtime`): the launches, copies and syncs (False for a null category)."""
    cat = pl.col(col).cast(pl.String)
    return (cat.str.ends_with("_runtime") | cat.str.ends_with("_driver") | (cat == RUNTIME_2021)).fill_null(False)


def is_host_op(col: str = "cat") -> pl.Expr:
    """A host row that is work: not a device row and not a profiler span."""
    return ~(is_device(col) | is_profiler_span(col))


def has_device_rows(categories: frozenset[str]) -> bool:
    """Whether a trace with these categories has device rows."""
    return bool(categories & schema.DEVICE_CATEGORIES)


def device_type(categories: frozenset[str]) -> str:
    """torch's device name for the device rows of a trace with these categories (`CUDA`, `XPU`, `MTIA`)."""
    if any(c.startswith("xpu") for c in categories):
        return "XPU"
    if any(c.startswith("mtia") for c in categories):
        return "MTIA"
    return "CUDA"


def use_device(categories: frozenset[str]) -> str | None:
    """torch's `use_device` (`"cuda"`...) when the trace has device activity, else None."""
    if has_device_rows(categories) or any(c.endswith(("_runtime", "_driver")) for c in categories):
        return device_type(categories).lower()
    return None
