"""Child process for `critical_path_vs_hta.py`: HTA's critical path on one trace (run with the
interpreter of a venv holding ``traceinsight==0.6.1``, the renamed HTA; its module is ``hta``).

Usage: ``python hta_critical_path_worker.py TRACE ANNOTATION`` - prints one JSON object:
``ok``, ``error``, ``load_s``, ``cp_s``, ``rank``, ``length_us`` (Σ edge weights on the path),
``bound_us`` (µs per HTA bound_by, "" = dependency edges), ``span_us`` (last - first path node time).
"""

from __future__ import annotations

import json
import logging
import sys
import tempfile
import time
import traceback
from pathlib import Path


def main() -> None:
    trace, annotation = sys.argv[1], sys.argv[2]
    out: dict[str, object] = {"ok": False}
    logging.disable(logging.CRITICAL)
    try:
        from hta.trace_analysis import TraceAnalysis

        with tempfile.TemporaryDirectory() as d:
            (Path(d) / Path(trace).name).symlink_to(Path(trace).resolve())
            t0 = time.perf_counter()
            an = TraceAnalysis(trace_dir=d)
            out["load_s"] = time.perf_counter() - t0
            rank = sorted(an.t.traces)[0]
            out["rank"] = int(rank)
            t1 = time.perf_counter()
            res = an.critical_path_analysis(rank=rank, annotation=annotation, instance_id=0)
            out["cp_s"] = time.perf_counter() - t1
            if res is None:
                out["error"] = "critical_path_analysis returned None"
            else:
                g, ok = res
                out["ok"] = bool(ok)
                if not ok:
                    out["error"] = "critical_path_analysis reported failure"
                ts = [g.node_list[n].ts for n in g.critical_path_nodes]
                if ts:
                    out["span_us"] = float(max(ts) - min(ts))
                edf = g.get_critical_path_breakdown()
                if edf is not None:
                    out["length_us"] = float(edf["duration"].sum())
                    out["bound_us"] = {str(k): float(v) for k, v in edf.groupby("bound_by")["duration"].sum().items()}
                    out["edges"] = len(edf)
    except Exception as exc:  # noqa: BLE001 - the comparison records any failure
        out["error"] = f"{type(exc).__name__}: {exc}"[:300]
        out["trace"] = traceback.format_exc()[-600:]
    print(json.dumps(out))


if __name__ == "__main__":
    main()
