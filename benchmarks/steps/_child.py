"""Tiny helpers shared by the measurement children (stdlib only).

Every child runs in its own fresh process (started by benchmarks/run.py), does
one measurement, and writes one JSON object to the file named by the
environment variable PROFTAB_BENCH_RESULT. The parent records the process wall
time and peak RSS (os.wait4) itself.
"""
from __future__ import annotations

import json
import os
import sys
import time
import traceback

perf = time.perf_counter


def emit(obj: dict) -> None:
    path = os.environ.get("PROFTAB_BENCH_RESULT")
    text = json.dumps(obj, default=str)
    if path:
        with open(path, "w") as f:
            f.write(text)
    else:
        print(text)


def error_info(ex: BaseException) -> dict:
    tb = traceback.format_exception(type(ex), ex, ex.__traceback__)
    msg = str(ex)
    if len(msg) > 2000:
        msg = msg[:2000] + "..."
    return {"error_type": type(ex).__name__, "error": msg, "traceback_tail": "".join(tb)[-3000:]}


def run(fn) -> None:
    """Call fn() -> dict; emit it with status ok, or the exception with status error."""
    try:
        out = fn()
        out.setdefault("status", "ok")
    except Exception as ex:  # noqa: BLE001 - a failing peer is a result, not a crash
        out = {"status": "error", **error_info(ex)}
    emit(out)
    sys.stdout.flush()
