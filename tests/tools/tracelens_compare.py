"""Run TraceLens's perf report on a trace and join its per-op numbers with `tr.perf.ops()`.

TraceLens (AMD, MIT) writes one CSV per op family; each row is one unique (op, args) with the
first instance's `UID_first` (the event's position in `traceEvents` = proftab's `event_id`),
`GFLOPS_first` (10**9 FLOPs) and `Data Moved (MB)_first` (MB = 2**20 bytes). This module only
runs it as a separate program and reads its CSVs.

    python -m tests.tools.tracelens_compare TRACE [TRACE ...] --csv out.csv
"""

from __future__ import annotations

import argparse
import csv
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import polars as pl

import proftab as pt
from proftab.perf.models import model_ops

CLI = "TraceLens_generate_perf_report_pytorch"
COLUMNS = ("trace", "event_id", "name", "category", "tl_flops", "tl_bytes")


def tracelens_cli() -> str | None:
    """The TraceLens perf-report program: $TRACELENS_BIN, on PATH, or next to an importable TraceLens."""
    env = os.environ.get("TRACELENS_BIN")
    if env and Path(env).exists():
        return env
    found = shutil.which(CLI)
    if found:
        return found
    if importlib.util.find_spec("TraceLens") is not None:
        cand = Path(sys.executable).parent / CLI
        return str(cand) if cand.exists() else None
    cand = Path("/work/venv-tl/bin") / CLI
    return str(cand) if cand.exists() else None


def read_tracelens(out_dir: Path, trace_name: str) -> pl.DataFrame:
    """TraceLens's per-op rows (`COLUMNS`) from a perf report's CSV folder."""
    rows: list[dict[str, object]] = []
    for path in sorted(Path(out_dir).glob("*.csv")):
        with path.open(newline="") as fh:
            for r in csv.DictReader(fh):
                if "UID_first" not in r or "GFLOPS_first" not in r:
                    continue
                gf, mb = r.get("GFLOPS_first") or "", r.get("Data Moved (MB)_first") or ""
                rows.append({
                    "trace": trace_name, "event_id": int(float(r["UID_first"])), "name": r["name"],
                    "category": path.stem,
                    "tl_flops": round(float(gf) * 1e9) if gf not in ("", "nan") else None,
                    "tl_bytes": round(float(mb) * 2**20) if mb not in ("", "nan") else None,
                })
    schema = {"trace": pl.String, "event_id": pl.Int64, "name": pl.String, "category": pl.String,
              "tl_flops": pl.Int64, "tl_bytes": pl.Int64}
    return pl.DataFrame(rows, schema=schema)


def run_tracelens(trace: Path, cli: str) -> pl.DataFrame:
    """Run TraceLens's perf report on `trace`; its per-op rows (`COLUMNS`)."""
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([cli, "--profile_json_path", str(trace), "--output_csvs_dir", tmp], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=900)
        return read_tracelens(Path(tmp), trace.name)


def join_proftab(trace: Path, tl: pl.DataFrame) -> pl.DataFrame:
    """TraceLens's rows with proftab's `family`, `flops`, `bytes` for the same event."""
    tr = pt.load(trace)
    # the model on the very event TraceLens reports (it reports some wrapper ops too, e.g.
    # aten::layer_norm and aten::native_layer_norm, where tr.perf.ops() gives the time to one)
    events = tr.events.filter(pl.col("event_id").is_in(tl["event_id"].implode()))
    ops = model_ops(events).select("event_id", "family", "flops", "bytes")
    return tl.join(ops, on="event_id", how="left").with_columns(
        flops_rel=(pl.col("flops") - pl.col("tl_flops")) / pl.col("tl_flops").cast(pl.Float64),
        bytes_rel=(pl.col("bytes") - pl.col("tl_bytes")) / pl.col("tl_bytes").cast(pl.Float64),
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("traces", nargs="+", type=Path)
    p.add_argument("--csv", type=Path, help="write TraceLens's rows (COLUMNS) here")
    args = p.parse_args(argv)
    cli = tracelens_cli()
    if cli is None:
        print("TraceLens not found", file=sys.stderr)
        return 2
    frames = [run_tracelens(t, cli) for t in args.traces]
    tl = pl.concat(frames)
    if args.csv:
        tl.write_csv(args.csv)
    pl.Config.set_tbl_rows(200)
    pl.Config.set_tbl_width_chars(200)
    for t, f in zip(args.traces, frames, strict=True):
        print(join_proftab(t, f))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
