"""TraceLens (AMD, MIT) perf report measurement (run with the TraceLens venv's python).

step "perf_report": TraceLens.Reporting.generate_perf_report_pytorch(path, output_xlsx_path=TMP) --
what `TraceLens_generate_perf_report_pytorch --profile_json_path PATH` does (its tables, written as
an .xlsx into a temporary directory that is removed after). TraceLens needs GPU activity: on a
CPU-only trace it raises, and the error is recorded.

usage: python tracelens_step.py perf_report TRACE.json.gz
"""
import os
import shutil
import sys
import tempfile

from _child import perf, run


def main():
    step, path = sys.argv[1], sys.argv[2]
    if step != "perf_report":
        raise SystemExit(f"unknown step {step}")
    t = {}
    out = {"timings": t}
    t0 = perf()
    import pandas
    from TraceLens.Reporting.generate_perf_report_pytorch import generate_perf_report_pytorch
    t["import_s"] = perf() - t0
    try:
        from importlib.metadata import version
        tv = version("TraceLens")
    except Exception:
        tv = None
    out["versions"] = {"tracelens": tv, "pandas": pandas.__version__}
    tmp = tempfile.mkdtemp(prefix="tracelens-bench-")
    try:
        t0 = perf()
        tables = generate_perf_report_pytorch(os.path.abspath(path), output_xlsx_path=os.path.join(tmp, "report.xlsx"))
        out["seconds"] = t["perf_report_s"] = perf() - t0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    out["tables"] = len(tables)
    out["rows"] = int(sum(len(v) for v in tables.values()))
    return out


run(main)
