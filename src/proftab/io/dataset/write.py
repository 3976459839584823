"""Writing a proftab Parquet dataset (`proftab.io.dataset.layout`): a Trace's tables per rank.

Every part file keeps its ``rank`` column, so a single file is self-describing, and carries
key-value metadata ``proftab`` (JSON: proftab version, schema version, table, rank,
``baseTimeNanoseconds``, time resolution, source file and its sha256).

What the analyses add to a dataset (its `anomalies` table, the stored key_averages of a
one-file dataset, the per-rank summaries) is computed above io and handed in as `Derived` by
a `Derive` function (`proftab.pipeline.derived_tables`): io writes it, and imports no analysis.

Writes are atomic: everything goes to a hidden temporary directory next to the output,
which is renamed into place at the end; on any error (or Ctrl-C) it is removed.  An
existing output is replaced only with ``force=True``, and only if it is a proftab dataset.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import polars as pl

from proftab.io.dataset.atomic import atomic_dir
from proftab.io.dataset.layout import MANIFEST, TABLES
from proftab.io.dataset.read import DERIVED_KEY_AVERAGES, META_COLUMNS, SCHEMA_VERSION, _analysis_fingerprint, _version
from proftab.trace import TABLES as TRACE_TABLES

if TYPE_CHECKING:
    from proftab.trace import Trace

__all__ = ["Derive", "Derived", "sha256_file", "write_dataset", "write_key_averages", "write_summaries"]


@dataclass
class Derived:
    """What the analyses add to a dataset, computed above io and written by it.

    Attributes
    ----------
    anomalies
        The trace's `anomalies` table (every rank): a table of the dataset.
    key_averages
        The trace's key_averages with torch's floats, stored for a one-file dataset (else None).
    summaries
        Per-rank summary tables by name (``summary_*``), each with a ``rank`` column.
    summary_errors
        The summaries that could not be computed, with their errors.
    """

    anomalies: pl.DataFrame
    key_averages: pl.DataFrame | None = None
    summaries: dict[str, pl.DataFrame] = field(default_factory=dict)
    summary_errors: dict[str, str] = field(default_factory=dict)


class Derive(Protocol):
    """Computes `Derived` for a trace: `key_averages` and `summaries` say whether those are wanted.

    It runs in convert's worker processes too, so it must pickle: a module-level function.
    """

    def __call__(self, trace: Trace, *, key_averages: bool, summaries: bool) -> Derived:
        """The tables the analyses add to a dataset of `trace`."""


def sha256_file(path: str | os.PathLike[str]) -> str | None:
    """Hex sha256 of a file's bytes, None when it cannot be read."""
    h = hashlib.sha256()
    try:
        with open(path, "rb") as fh:
            while chunk := fh.read(1 << 22):
                h.update(chunk)
    except OSError:
        return None
    return h.hexdigest()


def _source_info(meta: dict[str, Any], loaded_sha: str | None = None) -> tuple[str | None, int | None]:
    """The source file's sha256 and size: the sha256 `pt.load` computed while reading it (the
    bytes the tables came from), else the file's now; (None, None) when the file is gone."""
    src = meta.get("source_file")
    if not isinstance(src, str) or not os.path.isfile(src):
        return loaded_sha, None
    return loaded_sha or sha256_file(src), os.path.getsize(src)


def _files_row(files: pl.DataFrame, rank: int, sha: str | None, size: int | None) -> pl.DataFrame:
    """The rank's `files` row as written: with the source's sha256 and size, this proftab's version."""
    return files.filter(pl.col("rank") == rank).with_columns(
        source_sha256=pl.lit(sha, pl.String), source_bytes=pl.lit(size, pl.Int64),
        proftab_version=pl.lit(_version()), schema_version=pl.lit(SCHEMA_VERSION, pl.Int32),
    ).select(list(META_COLUMNS))


def _write_rank(root: Path, rank: int, tables: dict[str, pl.DataFrame], meta: dict[str, Any],
                files_row: pl.DataFrame) -> dict[str, int]:
    """Write one rank's partition of every table; returns rows per table."""
    tables = {**tables, "meta": files_row}
    base = meta.get("baseTimeNanoseconds")
    rows = {}
    for name in TABLES:
        df = tables[name]
        file_meta = {
            "proftab_version": _version(), "schema_version": SCHEMA_VERSION, "table": name, "rank": rank,
            "baseTimeNanoseconds": base if isinstance(base, int) else None,
            "base_time_ns": int(files_row["base_time_ns"][0]),
            "time_resolution_ns": int(files_row["time_resolution_ns"][0]),
            "source_file": meta.get("source_file"), "source_sha256": files_row["source_sha256"][0],
        }
        d = root / name / f"rank={rank}"
        d.mkdir(parents=True, exist_ok=True)
        df.write_parquet(d / "part-0.parquet", compression="zstd", metadata={"proftab": json.dumps(file_meta)})
        rows[name] = df.height
    return rows


def _split_by_rank(tr: Trace, anomalies: pl.DataFrame) -> dict[int, dict[str, pl.DataFrame]]:
    """Every table of `tr` (events as `nested`, plus its `anomalies`) split per rank."""
    full = {name: tr.collect(name) for name in TRACE_TABLES}
    full["events"] = tr.collect("nested")
    full["anomalies"] = anomalies
    ranks = tr.files["rank"].to_list()
    out: dict[int, dict[str, pl.DataFrame]] = {r: {} for r in ranks}
    for name, df in full.items():
        if len(ranks) == 1:
            out[ranks[0]][name] = df
            continue
        parts = df.partition_by("rank", as_dict=True, maintain_order=True)
        for r in ranks:
            out[r][name] = parts.get((r,), df.clear())
    return out


def _manifest(ranks: dict[int, dict[str, Any]], rows: dict[int, dict[str, int]]) -> dict[str, Any]:
    totals = {name: sum(rows[r][name] for r in rows) for name in TABLES}
    return {
        "format": "proftab-parquet",
        "proftab_version": _version(),
        "schema_version": SCHEMA_VERSION,
        "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "layout": "{table}/rank={rank}/part-0.parquet",
        "tables": list(TABLES),
        "rows": totals,
        "ranks": [{"rank": r, **ranks[r], "rows": rows[r]} for r in sorted(ranks)],
    }



def write_dataset(trace: Trace, path: str | os.PathLike[str], *, derive: Derive, force: bool = False,
                  storage_options: dict[str, Any] | None = None) -> Path | str:
    """Write every table of `trace` and what `derive` computes into a dataset at `path`.

    `proftab.Trace.to_parquet` (`proftab.pipeline.write_parquet`) documents the arguments.
    """
    from proftab.io.dataset.distributed import local_path
    from proftab.io.dataset.remote import is_remote, remote_output
    from proftab.meta import file_meta

    if is_remote(path):
        with remote_output(os.fspath(path), force=force, storage_options=storage_options) as local:
            write_dataset(trace, local, derive=derive)
        return os.fspath(path)
    path = local_path(os.fspath(path)) or path

    derived = derive(trace, key_averages=trace.files.height == 1, summaries=False)
    per_rank = _split_by_rank(trace, derived.anomalies)
    with atomic_dir(path, force=force) as tmp:
        infos, rows = {}, {}
        for r in trace.files["rank"].to_list():
            meta = file_meta(trace.files, r)
            sha, size = _source_info(meta, trace.files.filter(pl.col("rank") == r)["source_sha256"][0])
            rows[r] = _write_rank(tmp, r, per_rank[r], meta, _files_row(trace.files, r, sha, size))
            infos[r] = {"source_file": meta.get("source_file"), "source_sha256": sha, "source_bytes": size}
        if derived.key_averages is not None:
            write_key_averages(tmp, derived.key_averages)
        (tmp / MANIFEST).write_text(json.dumps(_manifest(infos, rows), indent=1))
    return Path(path)


def write_key_averages(root: Path, key_averages: pl.DataFrame) -> None:
    """Store a one-file dataset's key_averages (default options, with torch's floats for `table()`) next
    to its tables, stamped with the fingerprint of the code that computed it (`read._analysis_fingerprint`)."""
    key_averages.write_parquet(root / f"{DERIVED_KEY_AVERAGES}.parquet", compression="zstd",
                               metadata={"proftab": json.dumps({"fingerprint": _analysis_fingerprint(),
                                                                "table": DERIVED_KEY_AVERAGES})})


def write_summaries(root: Path, rank: int, summaries: dict[str, pl.DataFrame]) -> None:
    """Write one rank's part of every summary table (`Derived.summaries`)."""
    for name, df in summaries.items():
        d = root / name / f"rank={rank}"
        d.mkdir(parents=True, exist_ok=True)
        df.write_parquet(d / "part-0.parquet", compression="zstd")
