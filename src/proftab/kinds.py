"""What kind of row an event is: its category, and the kind of a device activity, defined once.

Every category a trace writes that proftab reads is named here (the sets below, with the Kineto
era that writes each spelling), and every analysis asks about categories through this module:
as Polars expressions over the `cat` column, or over the set of categories present. One null
handling: an event without a category is a host event.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = ["ACTIVITY_KINDS", "ACTIVITY_KIND_DTYPE", "AC2G_FLOW", "BACKWARD_OP_PREFIX", "COPY_KINDS",
           "CPU_INSTANT_EVENT", "CPU_OP", "CUDA_DRIVER", "CUDA_RUNTIME", "CUDA_SYNC", "DEVICE_ANNOTATION",
           "DEVICE_CATEGORIES", "DEVICE_WORK_CATEGORIES", "FWDBWD_FLOW", "GPU_MEMCPY", "GPU_MEMSET", "KERNEL",
           "KERNEL_CATEGORIES", "MEMCPY_CATEGORIES", "MEMCPY_DIRECTION_PATTERN", "MEMSET_CATEGORIES", "MODULE_PREFIX",
           "MTIA_ACTIVITY", "MTIA_DMA_REQUEST", "OP_CATEGORIES", "PROFILER_SPAN", "PROFILER_SPAN_CATEGORIES",
           "PYTHON_FRAME", "RUNTIME_2021", "RUNTIME_CATEGORIES", "SYNC_CATEGORIES", "USER_ANNOTATION", "WORK_KINDS",
           "activity_kind", "device_type", "has_device_rows", "in_categories", "is_device", "is_device_work",
           "is_host", "is_host_op", "is_op", "is_profiler_span", "is_python_frame", "is_runtime",
           "is_runtime_category", "is_user_annotation", "runtime_categories", "use_device"]

# ----------------------------------------------------------------------------- host categories

#: the category of a Python frame recorded with `with_stack=True` (`file.py(12): fn`, `nn.Module: ...`)
PYTHON_FRAME = "python_function"
#: the category of an aten / c10 operator (torch >= 1.11; "Operator" before)
CPU_OP = "cpu_op"
#: host ops, the events that own device launches: `cpu_op`, and `Operator` of 2021-era traces
OP_CATEGORIES = frozenset({CPU_OP, "Operator"})
#: a `record_function` region (torch's `is_user_annotation`)
USER_ANNOTATION = "user_annotation"
#: the category of a CUDA runtime call (`cudaLaunchKernel`...) and of a CUDA driver call (`cuLaunchKernel`...)
CUDA_RUNTIME = "cuda_runtime"
CUDA_DRIVER = "cuda_driver"
#: the category of a CUDA runtime call in 2021-era (tb_plugin) traces; later ones write `cuda_runtime`
RUNTIME_2021 = "Runtime"
#: the runtime / driver categories Kineto writes (any other `*_runtime` / `*_driver` is one too)
RUNTIME_CATEGORIES = frozenset({CUDA_RUNTIME, CUDA_DRIVER, RUNTIME_2021, "xpu_runtime", "xpu_driver",
                                "mtia_runtime", "privateuse1_runtime", "privateuse1_driver"})
#: the category of a host instant event (`ph` "i") torch records
CPU_INSTANT_EVENT = "cpu_instant_event"
#: a span that describes the profiler itself, not work (`cat` "Trace": the `PyTorch Profiler` span)
PROFILER_SPAN = "Trace"
PROFILER_SPAN_CATEGORIES = frozenset({PROFILER_SPAN})

#: the name prefix of the `python_function` frame torch records for an `nn.Module` call (with_stack)
MODULE_PREFIX = "nn.Module: "
#: the name prefix of the op autograd's engine runs one backward node in
#: (`autograd::engine::evaluate_function: MulBackward0` holds `MulBackward0`)
BACKWARD_OP_PREFIX = "autograd::engine::evaluate_function: "

# ----------------------------------------------------------------------------- device categories

#: the category of a kernel (`Kernel` in 2021-era traces)
KERNEL = "kernel"
KERNEL_CATEGORIES = frozenset({KERNEL, "Kernel"})
#: copies and fills on the device (2021-era `Memcpy` / `Memset`)
GPU_MEMCPY = "gpu_memcpy"
GPU_MEMSET = "gpu_memset"
MEMCPY_CATEGORIES = frozenset({GPU_MEMCPY, "Memcpy"})
MEMSET_CATEGORIES = frozenset({GPU_MEMSET, "Memset"})
#: the direction Kineto writes in a memcpy activity's name (`Memcpy HtoD (Pinned -> Device)`: `HtoD`)
MEMCPY_DIRECTION_PATTERN = r"^Memcpy (\w+)"
#: Kineto's device-side copy of a `record_function` region (spans the activities it launched)
DEVICE_ANNOTATION = "gpu_user_annotation"
#: device-side synchronisation records (Context / Stream / Event Sync), not work
CUDA_SYNC = "cuda_sync"
SYNC_CATEGORIES = frozenset({CUDA_SYNC, "xpu_sync"})
#: MTIA's device activity category, and the name of its copies (direction and size in the args)
MTIA_ACTIVITY = "mtia_ccp_events"
MTIA_DMA_REQUEST = "dma_request"
#: categories recorded on the device side (pid = device, tid = stream)
DEVICE_CATEGORIES = (KERNEL_CATEGORIES | MEMCPY_CATEGORIES | MEMSET_CATEGORIES | SYNC_CATEGORIES
                     | {DEVICE_ANNOTATION, MTIA_ACTIVITY, "hpu_op"})
#: device categories whose time is the device's own work (not annotations or syncs)
DEVICE_WORK_CATEGORIES = KERNEL_CATEGORIES | MEMCPY_CATEGORIES | MEMSET_CATEGORIES | {MTIA_ACTIVITY, "hpu_op"}

# ----------------------------------------------------------------------------- flows

#: the flow from a runtime call to the device activity it launched (`ac2g`: async CPU to GPU)
AC2G_FLOW = "ac2g"
#: the flow from a forward op to its backward op
FWDBWD_FLOW = "fwdbwd"

# ----------------------------------------------------------------------------- activity kinds

#: the `kind` of a device activity (`tr.device.activities()`): what the device did
ACTIVITY_KINDS = ("kernel", "memcpy", "memset", "sync")
ACTIVITY_KIND_DTYPE = pl.Enum(list(ACTIVITY_KINDS))
#: the kinds that are the device's own work (a `sync` row is a wait)
WORK_KINDS = ("kernel", "memcpy", "memset")
#: the kinds that move or fill memory
COPY_KINDS = ("memcpy", "memset")


def activity_kind(col: str = "cat", name: str = "name") -> pl.Expr:
    """The `kind` of each device row (`ACTIVITY_KIND_DTYPE`): `memcpy` (a copy category, or an MTIA
    `dma_request`), `memset`, `sync` (`SYNC_CATEGORIES`), else `kernel`."""
    c = pl.col(col).cast(pl.String)
    return (
        pl.when(c.is_in(sorted(MEMCPY_CATEGORIES)) | ((c == MTIA_ACTIVITY) & (pl.col(name) == MTIA_DMA_REQUEST)))
        .then(pl.lit("memcpy"))
        .when(c.is_in(sorted(MEMSET_CATEGORIES))).then(pl.lit("memset"))
        .when(c.is_in(sorted(SYNC_CATEGORIES))).then(pl.lit("sync"))
        .otherwise(pl.lit("kernel"))
        .cast(ACTIVITY_KIND_DTYPE)
    )


# ----------------------------------------------------------------------------- predicates


def in_categories(categories: Iterable[str], col: str = "cat") -> pl.Expr:
    """`col` is one of `categories` (False for a null category).

    Compared on the column as it is (String, Categorical or Enum): no String cast, which
    would materialise every row's category (3x slower on a Categorical column).
    """
    return pl.col(col).is_in(sorted(categories)).fill_null(False)


def is_device(col: str = "cat") -> pl.Expr:
    """A device-side row (kernel, memcpy, memset, gpu annotation, sync: pid = device, tid = stream)."""
    return in_categories(DEVICE_CATEGORIES, col)


def is_device_work(col: str = "cat") -> pl.Expr:
    """A device row that is the device's own work (kernel, memcpy, memset), not an annotation or sync."""
    return in_categories(DEVICE_WORK_CATEGORIES, col)


def is_profiler_span(col: str = "cat") -> pl.Expr:
    """A span that describes the profiler itself (`cat` "Trace"), not work."""
    return in_categories(PROFILER_SPAN_CATEGORIES, col)


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


def is_runtime_category(category: str) -> bool:
    """Whether `category` is a runtime or driver call's (`RUNTIME_CATEGORIES`, any `*_runtime` / `*_driver`)."""
    return category in RUNTIME_CATEGORIES or category.endswith(("_runtime", "_driver"))


def runtime_categories(categories: Iterable[str]) -> set[str]:
    """Those of `categories` that are runtime or driver calls (`is_runtime_category`)."""
    return {c for c in categories if is_runtime_category(c)}


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
    return bool(categories & DEVICE_CATEGORIES)


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
