"""Compare proftab's collective matching and bandwidths with TraceLens' multi-rank collective report.

Run TraceLens first (in its own virtual environment), then this script on the same rank files::

    TraceLens_generate_multi_rank_collective_report_pytorch --trace_glob 'run/rank*.json.gz' \\
        --world_size N --output_csvs_dir tl/
    PYTHONPATH=src python benchmarks/crosscheck_tracelens.py tl/ run/rank*.json.gz

Prints: rows matched (TraceLens' ``collective_id`` vs proftab's ``(group, seq)``), the largest
start/duration difference, and for instances with sizes the bandwidths (TraceLens' GB/s are
GiB/s: MB = 2**20 bytes, /1024; proftab's are 1e9 B/s as in nccl-tests).
"""

from __future__ import annotations

import sys
from pathlib import Path

import polars as pl

import proftab as pt


def main(tl_dir: str, files: list[str]) -> None:
    tr = pt.load(files)
    cr = tr.ranks.collective_ranks()
    tl = pl.read_csv(Path(tl_dir) / "nccl_long.csv", infer_schema_length=None)
    tl = tl.with_columns(group=pl.col("Process Group Name").cast(pl.String).replace("Unknown_Group", "?"),
                         seq=pl.col("index_in_group").cast(pl.Int64), rank=pl.col("rank").cast(pl.Int32))
    # starts compared relative to each rank's first call (TraceLens keeps the file's raw us)
    mine = cr.select("group", "seq", "rank", (pl.col("start_ns") - pl.col("start_ns").min().over("rank"))
                     .alias("ts_pt"), pl.col("dur_ns").alias("dur_ns_pt"))
    tl = tl.with_columns(ts=(pl.col("ts") - pl.col("ts").min().over("rank")) * 1000)
    j = tl.join(mine, on=["group", "seq", "rank"], how="full", coalesce=True)
    both = j.filter(pl.col("ts").is_not_null() & pl.col("ts_pt").is_not_null())
    print(f"per-rank calls: TraceLens {tl.height}, proftab {cr.height}, matched on (group, seq, rank) {both.height}")
    dts = (both["ts"] - both["ts_pt"]).abs().max()
    ddur = (both["dur"] * 1000 - both["dur_ns_pt"]).abs().max()
    print(f"max |start difference| {dts} ns (TraceLens' float us), max |duration difference| {ddur} ns")
    sync = Path(tl_dir) / "nccl_implicit_sync.csv"
    text = sync.read_text() if sync.exists() else ""
    if len(text.strip().splitlines()) < 2:
        print("TraceLens' implicit-sync table is empty (no collective names / sizes in the trace args)")
        return
    ts = pl.read_csv(sync, infer_schema_length=None).with_columns(
        group=pl.col("collective_id").str.extract(r"^(.*)_\d+$"),
        seq=pl.col("collective_id").str.extract(r"_(\d+)$").cast(pl.Int64))
    inst = tr.ranks.collective_instances()
    k = ts.join(inst, on=["group", "seq"], how="inner")
    gib = 2**30 / 1e9
    k = k.with_columns(algbw_tl=pl.col("algo bw (GB/s)") * gib, busbw_tl=pl.col("bus bw (GB/s)") * gib,
                       lat_diff=(pl.col("comm_latency") * 1000 - pl.col("transfer_ns")).abs())
    print(f"instances with sizes: TraceLens {ts.height}, proftab matched {k.height} of {inst.height}")
    print(k.select("group", "seq", "collective", "Collective name", "bytes", "Full msg size (MB)", "transfer_ns",
                   "lat_diff", "algbw_gb_per_s", "algbw_tl", "busbw_gb_per_s", "busbw_tl").head(12))
    rel = ((k["busbw_gb_per_s"] - k["busbw_tl"]).abs() / k["busbw_tl"]).max()
    print(f"max relative busbw difference (after GiB->GB): {rel}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
