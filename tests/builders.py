"""Synthetic Kineto traces for tests: event builders, the trace envelope, the writer (`write_trace`, and
`write_events` / `load_events` on top of it) and a reader.

Times are Kineto's: µs, written as given. An int is written without decimals and a float with its
shortest exact decimals, so a test decides the text the loader reads (the loader takes a trace's time
resolution from that text); `us(ns)` is the float Kineto writes for an exact ns figure.

    from tests.builders import kernel, launch, load_events, op

    tr = load_events(tmp_path, [op("aten::mm", 10, 20, ext=1), launch(12, 5, corr=7, ext=1),
                                kernel(30, 400, corr=7)])
"""

from __future__ import annotations

import gzip
import json
from typing import TYPE_CHECKING, Any

import proftab as pt

if TYPE_CHECKING:
    from pathlib import Path

Event = dict[str, Any]

#: the kernel name of `kernel` when none is given (a CUDA C++ kernel, as Kineto names one)
KERNEL = "void gemm_kernel()"


def us(ns: int) -> float:
    """`ns` as the µs number Kineto writes (at most 3 decimals, exact)."""
    return ns / 1000


def event(name: str, ts: float, dur: float, *, cat: str = "cpu_op", pid: int | str = 1, tid: int | str = 1,
          args: dict[str, Any] | None = None, **named_args: Any) -> Event:
    """A complete ("X") event at `ts` lasting `dur` µs.

    Its args are `args` (keys Kineto spells with spaces, such as ``"External id"``) and `named_args`
    together; without either it has no args key.
    """
    ev: Event = {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur}
    merged = {**(args or {}), **named_args}
    if merged:
        ev["args"] = merged
    return ev


def _with_external_id(args: dict[str, Any] | None, ext: int | None) -> dict[str, Any] | None:
    return args if ext is None else {"External id": ext, **(args or {})}


def op(name: str, ts: float, dur: float, *, ext: int | None = None, cat: str = "cpu_op", pid: int = 1,
       tid: int = 1, args: dict[str, Any] | None = None, **named_args: Any) -> Event:
    """A host op on thread `tid`; `ext` is its "External id" (the id its runtime calls name)."""
    return event(name, ts, dur, cat=cat, pid=pid, tid=tid, args=_with_external_id(args, ext), **named_args)


def annotation(name: str, ts: float, dur: float, *, tid: int = 1, **kwargs: Any) -> Event:
    """A host user annotation (`record_function`; ``ProfilerStep#N`` for a profiler step)."""
    return op(name, ts, dur, cat="user_annotation", tid=tid, **kwargs)


def launch(ts: float, dur: float, corr: int, *, name: str = "cudaLaunchKernel", ext: int | None = None,
           pid: int = 1, tid: int = 1, args: dict[str, Any] | None = None, **named_args: Any) -> Event:
    """A runtime call (cat cuda_runtime) with correlation id `corr`: the launch of the kernel with that id."""
    return event(name, ts, dur, cat="cuda_runtime", pid=pid, tid=tid, args=_with_external_id(args, ext),
                 correlation=corr, **named_args)


def kernel(ts: float, dur: float, corr: int | None, *, name: str = KERNEL, stream: int = 7, device: int = 0,
           ext: int | None = None, cat: str = "kernel", args: dict[str, Any] | None = None,
           **named_args: Any) -> Event:
    """A device activity on `stream` of `device` (Kineto's pid and tid), launched by correlation `corr`.

    `corr` None writes no correlation (an activity no launch names); `cat` gives a copy or a set
    (``gpu_memcpy``, ``gpu_memset``) instead of a kernel.
    """
    ids = {} if corr is None else {"correlation": corr}
    return event(name, ts, dur, cat=cat, pid=device, tid=stream,
                 args={**(_with_external_id(args, ext) or {}), **ids, "device": device, "stream": stream},
                 **named_args)


def kineto_trace(events: list[Event], **meta: Any) -> dict[str, Any]:
    """A Kineto trace document: ``schemaVersion`` 1 (as torch writes), the other top-level `meta`
    keys (``distributedInfo``, ``deviceProperties``...), then `events`."""
    return {"schemaVersion": 1, **meta, "traceEvents": events}


def write_trace(path: Path, trace: object, *, gz: bool | None = None, compact: bool = False,
                compresslevel: int = 1) -> Path:
    """Write `trace` to `path` and return `path`.

    `trace` is a document (`kineto_trace(...)`, or a bare event list as old torch wrote), or JSON text
    (str or bytes) written as it is. `gz` None compresses when the name ends in ``.gz`` (at the fastest
    level by default: the level changes no decompressed byte); `compact` writes JSON without spaces, as
    torch itself does.
    """
    if isinstance(trace, bytes | str):
        text = trace.encode() if isinstance(trace, str) else trace
    else:
        text = json.dumps(trace, separators=(",", ":") if compact else None).encode()
    if gz is None:
        gz = path.name.endswith(".gz")
    path.write_bytes(gzip.compress(text, compresslevel=compresslevel) if gz else text)
    return path


def write_events(path: Path, events: list[Event], **meta: Any) -> Path:
    """Write `events` as the Kineto trace file `path` (`meta`: see `kineto_trace`) and return `path`."""
    return write_trace(path, kineto_trace(events, **meta))


def read_trace(path: Path) -> Any:
    """The JSON document of a trace file, gzipped or not (told by its first bytes)."""
    raw = path.read_bytes()
    return json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)


def load_events(directory: Path, events: list[Event], *, name: str = "t.json", **meta: Any) -> pt.Trace:
    """`pt.load` of `events` written as the Kineto file `directory / name` (`meta`: see `kineto_trace`)."""
    return pt.load(write_events(directory / name, events, **meta))
