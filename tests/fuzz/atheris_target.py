"""Coverage-guided fuzz target (atheris) for the scanner + table builder.

Run by ``benchmarks/fuzz/asan.sh`` when atheris installs: any exception other than a proftab
error, and any broken accounting, is a finding.
"""

from __future__ import annotations

import sys
import warnings

import atheris
import polars as pl

with atheris.instrument_imports():
    import proftab as pt
    from proftab.io import kineto


def one(data: bytes) -> None:
    for salvage in (False, True):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                res = kineto.scan_bytes(data, salvage=salvage)
                tables = kineto.build_tables(res, "fuzz.json", salvage=salvage)
            except pt.ProftabError:
                continue
        acc = tables.accounting.row(0, named=True)
        parts = sum(acc[k] for k in ("events_in", "instants", "flows", "counters", "metadata", "rejected"))
        if parts != acc["trace_events"]:
            raise AssertionError(acc)
        for frame in (tables.events, tables.instants, tables.rejected, tables.flows, tables.counters):
            for c, dt in frame.schema.items():
                if dt in (pl.String, pl.Categorical):
                    frame[c].to_list()  # invalid UTF-8 would panic here


if __name__ == "__main__":
    atheris.Setup(sys.argv, one)
    atheris.Fuzz()
