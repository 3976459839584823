"""Floor: plain typed JSON decode of the decompressed bytes with msgspec.

The file is decompressed into memory first (timed separately as decompress_s);
`seconds` is the decode alone. The schema is the minimum a Kineto reader needs:
ph/name/cat/pid/tid/ts/dur/id and args kept as a dict; numbers stay JSON numbers
(float for ts/dur), so this is a lower bound, not an exact-ns reader.

usage: python floor_msgspec.py TRACE.json[.gz]
"""
import gzip
import sys
from typing import Any, Optional, Union

from _child import perf, run


def main():
    import msgspec

    Num = Union[int, float, str, None]

    class Event(msgspec.Struct):
        ph: str = ""
        name: Any = None
        cat: Optional[str] = None
        pid: Num = None
        tid: Num = None
        ts: Num = None
        dur: Num = None
        id: Any = None
        args: Optional[dict] = None

    class TraceFile(msgspec.Struct):
        traceEvents: list[Event] = []

    path = sys.argv[1]
    t0 = perf()
    if path.endswith(".gz"):
        with gzip.open(path, "rb") as f:
            data = f.read()
    else:
        with open(path, "rb") as f:
            data = f.read()
    t1 = perf()
    if data.lstrip()[:1] == b"[":
        events = msgspec.json.decode(data, type=list[Event])
    else:
        events = msgspec.json.decode(data, type=TraceFile).traceEvents
    t2 = perf()
    return {
        "seconds": t2 - t1,
        "timings": {"decompress_s": t1 - t0, "decode_s": t2 - t1},
        "json_bytes": len(data),
        "events": len(events),
        "versions": {"msgspec": msgspec.__version__},
    }


run(main)
