"""Runtime / driver calls and collectives by name: each family one table of names, one pattern.

A host runtime or driver call (`kinds.is_runtime`) says what it does only by its name. Each
family below lists its names per API (`cuda` runtime, `cu` driver, `hip`, `mtia`) and is asked
through `Calls.expr` (a Polars predicate over a name column), `Calls.pattern` (the regex, for
`str.contains`) or `name in family` (one Python string); `any_call` asks several at once. A name
matches with CUPTI's suffixes (`_ptsz` / `_ptds`: per-thread default stream, `_v<N>`: a
versioned entry point, `cudaLaunchKernel_ptsz_v7000`). A family of *prefixes* (the copies:
`cudaMemcpy` holds `cudaMemcpy2DAsync`, `cudaMemcpyPeer`...) matches every name that starts
with one. `apis` narrows a family to some APIs, for a caller whose rule is CUDA's and HIP's only.

Collectives are named by library (`nccl`, `rccl`) and operation (`all_reduce`...) words, and on
the host by the ranges of the process-group backends (`gloo:`, `c10d::`, `nccl:`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

import polars as pl

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

__all__ = ["BLOCKING_COPY", "C10D_PREFIX", "CAPTURE_BEGIN", "CAPTURE_END", "COLLECTIVE_HOST_PREFIXES",
           "COLLECTIVE_KERNEL_PATTERN", "COLLECTIVE_LIBRARIES", "COLLECTIVE_OPERATIONS", "CUDA_HIP", "CUPTI_SUFFIX",
           "EVENT_RECORD", "EVENT_SYNC", "GLOO_PREFIX", "GRAPH_LAUNCH", "HOST_FUNC_LAUNCH", "KERNEL_LAUNCH", "LAUNCH",
           "MEMCPY", "MEMCPY_ASYNC", "MEMSET", "NCCL_RANGE_PREFIX", "RECORD_PARAM_COMMS", "STREAM_SYNC",
           "STREAM_WAIT", "SYNC", "Calls", "any_call", "any_pattern", "collective_words", "is_collective_range"]

#: the APIs of a rule written for CUDA's and HIP's calls only: the critical path's and the
#: `synchronisation` finding's sync and stream-wait rules (MTIA's `synchronize` would change their numbers)
CUDA_HIP = ("cuda", "hip")
#: what CUPTI may append to an API name: a per-thread-default-stream variant, then a version
CUPTI_SUFFIX = r"(?:_ptsz|_ptds)?(?:_v\d+)?"
_META = frozenset("\\.^$|?*+()[]{}")


def _escape(text: str) -> str:
    """`text` as a literal in a regex (only the metacharacters escaped: a space stays a space)."""
    return "".join("\\" + c if c in _META else c for c in text)


@dataclass(frozen=True)
class Calls:
    """One family of runtime / driver calls: its names per API and the pattern they make.

    Attributes
    ----------
    family
        What the calls do, in words.
    names
        API (`cuda`, `cu`, `hip`, `mtia`) -> the calls' names in that API.
    prefix
        The names are prefixes: any name that starts with one is in the family.
    """

    family: str
    names: Mapping[str, tuple[str, ...]]
    prefix: bool = False

    def spellings(self, apis: Iterable[str] | None = None) -> tuple[str, ...]:
        """The family's names (of `apis` only, when given), without suffixes."""
        keep = self.names if apis is None else {a: self.names[a] for a in apis if a in self.names}
        return tuple(n for ns in keep.values() for n in ns)

    def pattern(self, apis: Iterable[str] | None = None) -> str:
        """The regex a name of the family (of `apis` only, when given) matches, for `str.contains`."""
        names = self.spellings(apis)
        if not names:
            return r"[^\s\S]"  # matches nothing
        body = "|".join(_escape(n) for n in names)
        return f"^(?:{body})" if self.prefix else f"^(?:{body}){CUPTI_SUFFIX}$"

    @cached_property
    def _regex(self) -> re.Pattern[str]:
        return re.compile(self.pattern())

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self._regex.search(name) is not None

    def expr(self, col: str = "name", *, apis: Iterable[str] | None = None) -> pl.Expr:
        """`col` names a call of the family (False for a null name)."""
        return pl.col(col).str.contains(self.pattern(apis)).fill_null(False)

    @classmethod
    def union(cls, family: str, *parts: Calls) -> Calls:
        """One family of the names of `parts` (exact names all, or prefixes all)."""
        if len({p.prefix for p in parts}) != 1:
            msg = "a union of calls is of exact names or of prefixes, not both"
            raise ValueError(msg)
        names: dict[str, tuple[str, ...]] = {}
        for p in parts:
            for api, ns in p.names.items():
                names[api] = names.get(api, ()) + ns
        return cls(family, names, parts[0].prefix)


def any_pattern(*families: Calls, apis: Iterable[str] | None = None) -> str:
    """The regex of a name in any of `families` (of `apis` only, when given)."""
    apis = None if apis is None else tuple(apis)
    return "|".join(f"(?:{f.pattern(apis)})" for f in families)


def any_call(*families: Calls, col: str = "name", apis: Iterable[str] | None = None) -> pl.Expr:
    """`col` names a call of any of `families` (False for a null name)."""
    return pl.col(col).str.contains(any_pattern(*families, apis=apis)).fill_null(False)


# ----------------------------------------------------------------------------- launches

#: calls that launch one kernel
KERNEL_LAUNCH = Calls("kernel launch", {
    "cuda": ("cudaLaunchKernel", "cudaLaunchKernelExC", "cudaLaunchCooperativeKernel"),
    "cu": ("cuLaunchKernel", "cuLaunchKernelEx", "cuLaunchCooperativeKernel"),
    "hip": ("hipLaunchKernel", "hipLaunchKernelExC", "hipExtLaunchKernel", "hipModuleLaunchKernel",
            "hipExtModuleLaunchKernel", "hipLaunchCooperativeKernel"),
})
#: calls that queue a host function on a stream (the stream waits for it; captured into a graph as a node)
HOST_FUNC_LAUNCH = Calls("host function launch", {"cuda": ("cudaLaunchHostFunc",), "cu": ("cuLaunchHostFunc",),
                                                  "hip": ("hipLaunchHostFunc",)})
#: calls that replay a captured CUDA / HIP graph (every kernel of the graph has the launch's correlation)
GRAPH_LAUNCH = Calls("graph launch", {"cuda": ("cudaGraphLaunch",), "cu": ("cuGraphLaunch",),
                                      "hip": ("hipGraphLaunch",)})
#: every launch: a kernel, a graph or a host function queued on a stream
LAUNCH = Calls.union("launch", KERNEL_LAUNCH, GRAPH_LAUNCH, HOST_FUNC_LAUNCH)
#: calls that begin / end a stream capture (the calls between them are recorded into a graph, not run)
CAPTURE_BEGIN = Calls("stream capture begin", {"cuda": ("cudaStreamBeginCapture",), "cu": ("cuStreamBeginCapture",),
                                               "hip": ("hipStreamBeginCapture",)})
CAPTURE_END = Calls("stream capture end", {"cuda": ("cudaStreamEndCapture",), "cu": ("cuStreamEndCapture",),
                                           "hip": ("hipStreamEndCapture",)})

# ----------------------------------------------------------------------------- copies and fills

#: every copy call (prefixes: `cudaMemcpy` holds `cudaMemcpyAsync`, `cudaMemcpy2D`, `cudaMemcpyPeerAsync`...)
MEMCPY = Calls("memcpy", {"cuda": ("cudaMemcpy",), "cu": ("cuMemcpy",), "hip": ("hipMemcpy",),
                          "mtia": ("enqueueCommand memcpy",)}, prefix=True)
#: every fill call (prefixes)
MEMSET = Calls("memset", {"cuda": ("cudaMemset",), "cu": ("cuMemset",), "hip": ("hipMemset",)}, prefix=True)
#: the plain asynchronous copy (queued on a stream; blocking only into pageable host memory)
MEMCPY_ASYNC = Calls("async memcpy", {"cuda": ("cudaMemcpyAsync",), "hip": ("hipMemcpyAsync",)})
#: the plain synchronous copies: the host waits for the copy (and the work queued before it)
BLOCKING_COPY = Calls("blocking memcpy", {"cuda": ("cudaMemcpy", "cudaMemcpy2D"), "hip": ("hipMemcpy", "hipMemcpy2D")})

# ----------------------------------------------------------------------------- synchronisation

#: calls that block the host until an event recorded on a stream completes
EVENT_SYNC = Calls("event synchronize", {"cuda": ("cudaEventSynchronize",), "cu": ("cuEventSynchronize",),
                                         "hip": ("hipEventSynchronize",)})
#: calls that block the host until a stream's / the device's work finishes
STREAM_SYNC = Calls("stream / device synchronize", {
    "cuda": ("cudaDeviceSynchronize", "cudaStreamSynchronize"), "cu": ("cuCtxSynchronize", "cuStreamSynchronize"),
    "hip": ("hipDeviceSynchronize", "hipStreamSynchronize"), "mtia": ("synchronize", "synchronizeStream"),
})
#: calls that block the host until device work finishes (device, stream or event)
SYNC = Calls.union("synchronize", STREAM_SYNC, EVENT_SYNC)
#: calls that make a stream wait on an event recorded on another stream (the host does not wait)
STREAM_WAIT = Calls("stream wait", {"cuda": ("cudaStreamWaitEvent",), "cu": ("cuStreamWaitEvent",),
                                    "hip": ("hipStreamWaitEvent",), "mtia": ("enqueueCommand waitOnEvent",)})
#: calls that record an event on a stream (what a stream wait or an event sync waits for)
EVENT_RECORD = Calls("event record", {"cuda": ("cudaEventRecord", "cudaEventRecordWithFlags"),
                                      "cu": ("cuEventRecord", "cuEventRecordWithFlags"),
                                      "hip": ("hipEventRecord", "hipEventRecordWithFlags"),
                                      "mtia": ("recordEvent",)})

# ----------------------------------------------------------------------------- collectives

#: the collective libraries: a kernel whose name holds one (any case) is a collective
COLLECTIVE_LIBRARIES = ("nccl", "rccl")
#: regex (any case) of collective kernel names: a library's name
COLLECTIVE_KERNEL_PATTERN = "(?i)" + "|".join(COLLECTIVE_LIBRARIES)
#: the collective operations as kernel and op names spell them (regexes, any case, `_` optional)
COLLECTIVE_OPERATIONS = ("all_?reduce", "all_?gather", "reduce_?scatter", "all_?to_?all")
#: the prefix of gloo's worker-thread ranges (`gloo:all_reduce`), c10d's ops (`c10d::allreduce_`) and
#: NCCL's `record_function` ranges (`nccl:all_reduce`)
GLOO_PREFIX = "gloo:"
C10D_PREFIX = "c10d::"
NCCL_RANGE_PREFIX = "nccl:"
#: host ranges of the process-group backends: the collective calls as the host sees them
COLLECTIVE_HOST_PREFIXES = (GLOO_PREFIX, C10D_PREFIX, NCCL_RANGE_PREFIX)
#: torch's `record_function` around a collective call (its args: `Collective name`, `dtype`, `In msg nelems`...)
RECORD_PARAM_COMMS = "record_param_comms"


def collective_words(*extra: str) -> str:
    """The alternation (no flags) of the collective libraries, operations and `extra` regexes."""
    return "|".join((*COLLECTIVE_LIBRARIES, *COLLECTIVE_OPERATIONS, *extra))


def is_collective_range(col: str = "name", *, prefixes: Iterable[str] = COLLECTIVE_HOST_PREFIXES) -> pl.Expr:
    """`col` is a host range of a process-group backend (`COLLECTIVE_HOST_PREFIXES`, or `prefixes`)."""
    expr = pl.lit(False)
    for p in prefixes:
        expr = expr | pl.col(col).str.starts_with(p)
    return expr.fill_null(False)
