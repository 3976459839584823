"""Generate `data/telemetry_sample.parquet`: SYNTHETIC GPU telemetry for a bundled trace.

The samples are made up -- no GPU was measured.  They imitate what a DCGM / nvidia-smi
exporter writes every 10 ms for the two GPUs of the bundled HTA two-rank trace
(`tests/data/public/trace_filter__sampled_rank-{0,1}.json.gz`, ranks 0 and 1 on GPUs 0
and 1), so that the examples of `pt.join_samples` have something realistic to join:

* ``time``: Datetime(ns, UTC), every 10 ms on the 10 ms grid, from 50 ms before the
  traces' first event (any rank) to 50 ms after their last one;
* ``host`` (String), ``gpu`` (Int64, the trace's `device` of that rank's kernels);
* ``gpu_util_pct``: the share of the preceding 10 ms with a kernel, memcpy or memset
  running on that GPU in the trace (nvidia-smi's definition), in percent;
* ``power_w``: ``85 + 3.1 * gpu_util_pct`` plus seeded Gaussian noise (sd 4 W).

Run from the repository root: ``python data/make_telemetry_sample.py``.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl

import proftab as pt
from proftab import schema

ROOT = Path(__file__).resolve().parents[1]
TRACES = sorted((ROOT / "tests" / "data" / "public").glob("trace_filter__sampled_rank-*.json.gz"))
OUT = ROOT / "data" / "telemetry_sample.parquet"
PERIOD_NS = 10_000_000
MARGIN_NS = 50_000_000


def main() -> None:
    tr = pt.load([str(p) for p in TRACES])
    work = tr.events.filter(pl.col("cat").cast(pl.String).is_in(list(schema.DEVICE_WORK_CATEGORIES)))
    work = tr.with_utc(work).select("rank", "device", pl.col("start_utc").cast(pl.Int64).alias("start_ns"),
                                    pl.col("end_utc").cast(pl.Int64).alias("end_ns"))
    gpus = work.group_by("rank").agg(pl.col("device").drop_nulls().first()).sort("rank")
    span = tr.with_utc().select(pl.col("start_utc").min().cast(pl.Int64), pl.col("end_utc").max().cast(pl.Int64))
    t0 = (int(span.item(0, 0)) - MARGIN_NS) // PERIOD_NS * PERIOD_NS
    t1 = int(span.item(0, 1)) + MARGIN_NS
    grid = np.arange(t0, t1, PERIOD_NS, dtype=np.int64)
    frames = []
    rng = np.random.default_rng(20261129)
    for rank, gpu in gpus.iter_rows():
        windows = pl.DataFrame({"time_ns": grid, "start_ns": grid - PERIOD_NS, "end_ns": grid})
        # busy time of each window: overlap with the union of the GPU's activities
        mine = work.filter(pl.col("rank") == rank).sort("start_ns")
        merged = mine.with_columns(
            _blk=(pl.col("start_ns") > pl.col("end_ns").cum_max().shift(1)).fill_null(True).cum_sum()
        ).group_by("_blk").agg(pl.col("start_ns").min(), pl.col("end_ns").max())
        busy = pt.overlaps(windows, merged.drop("_blk")).group_by("time_ns").agg(pl.col("overlap_ns").sum())
        util = windows.join(busy, on="time_ns", how="left").sort("time_ns")["overlap_ns"].fill_null(0).to_numpy()
        util_pct = np.round(100.0 * util / PERIOD_NS, 1)
        power = np.round(85.0 + 3.1 * util_pct + rng.normal(0.0, 4.0, len(grid)), 1)
        frames.append(pl.DataFrame({
            "time": pl.Series(grid).cast(pl.Datetime("ns", "UTC")),
            "host": ["node0"] * len(grid),
            "gpu": pl.Series([gpu] * len(grid), dtype=pl.Int64),
            "gpu_util_pct": util_pct,
            "power_w": power,
        }))
    out = pl.concat(frames).sort("time", "gpu")
    meta = {
        "synthetic": "true",
        "description": "SYNTHETIC GPU telemetry (no GPU was measured): utilization from the kernels of the "
                       "bundled trace_filter__sampled_rank-{0,1} traces, power = 85 + 3.1*util + noise",
        "generator": "data/make_telemetry_sample.py",
        "traces": json.dumps([p.name for p in TRACES]),
    }
    out.write_parquet(OUT, compression="zstd", metadata=meta)
    print(f"wrote {OUT} ({out.height} rows)")


if __name__ == "__main__":
    main()
