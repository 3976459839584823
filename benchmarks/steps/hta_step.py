"""HTA 0.5.0 measurements (run with the HTA venv's python).

step "load":       hta.common.trace.Trace({0: path}).load_traces()  -- what TraceAnalysis(...) does
step "call_graph": the same load, then hta.common.trace_call_graph.CallGraph(trace), timed separately

Default parser backend (JSON: gzip read + json.loads + pandas). Exceptions are
recorded with type and message, not hidden.

usage: python hta_step.py STEP TRACE.json.gz
"""
import logging
import os
import sys

from _child import error_info, perf, run


def main():
    step, path = sys.argv[1], sys.argv[2]
    t = {}
    out = {"timings": t}
    t0 = perf()
    import hta  # noqa: F401
    from hta.common.trace import Trace
    from hta.common.trace_call_graph import CallGraph
    import pandas
    t["import_s"] = perf() - t0
    logging.getLogger("hta").setLevel(logging.ERROR)
    try:
        from importlib.metadata import version
        hv = version("holistictraceanalysis")
    except Exception:
        hv = None
    out["versions"] = {"hta": hv, "pandas": pandas.__version__}

    t0 = perf()
    tr = Trace(trace_files={0: os.path.abspath(path)}, trace_dir=os.path.dirname(os.path.abspath(path)))
    tr.load_traces(use_multiprocessing=False)
    t["load_s"] = perf() - t0
    df = tr.get_trace(0)
    out["rows"] = int(len(df))
    if step == "load":
        out["seconds"] = t["load_s"]
        return out
    if step == "call_graph":
        t0 = perf()
        try:
            cg = CallGraph(tr)
        except Exception as ex:  # noqa: BLE001 - record HTA's failure
            t["call_graph_s"] = perf() - t0
            out.update(status="error", **error_info(ex))
            return out
        t["call_graph_s"] = perf() - t0
        out["call_stacks"] = len(cg.call_stacks)
        out["seconds"] = t["call_graph_s"]
        return out
    raise SystemExit(f"unknown step {step}")


run(main)
