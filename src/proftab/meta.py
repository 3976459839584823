"""The `files` table (one row per trace file / rank) and the facts read from it.

`files` replaces a per-rank dict of metadata: base time and resolution are columns that
join onto events by `rank` (`proftab.clock` reads them), and the file's full top-level keys
stay in `meta_json`.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import polars as pl

from proftab import schema
from proftab._version import __version__
from proftab.exceptions import ProftabError

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["file_meta", "file_metas", "files_frame"]


def files_frame(metas: Mapping[int, Mapping[str, Any]], *, sha256: Mapping[int, str | None] | None = None,
                source_bytes: Mapping[int, int | None] | None = None) -> pl.DataFrame:
    """The `files` table from each rank's metadata dict (`source_file`, `base_time_ns`, ...);
    `sha256` / `source_bytes`: each rank's file digest and size on disk (else the JSON's size)."""
    rows = []
    for rank in sorted(metas):
        m = metas[rank]
        size = (source_bytes or {}).get(rank, m.get("json_bytes"))
        rows.append({
            "rank": rank, "source_file": m.get("source_file"), "source_sha256": (sha256 or {}).get(rank),
            "source_bytes": size if isinstance(size, int) else None,
            "base_time_ns": int(m.get("base_time_ns", 0)), "time_resolution_ns": int(m.get("time_resolution_ns", 1)),
            "proftab_version": __version__, "schema_version": schema.SCHEMA_VERSION,
            "meta_json": json.dumps(dict(m), default=str),
        })
    return pl.DataFrame(rows, schema=schema.FILES_COLUMNS)


def file_meta(files: pl.DataFrame, rank: int | None = None) -> dict[str, Any]:
    """The metadata dict of the file of `rank` (default: the lowest rank)."""
    row = files.sort("rank") if rank is None else files.filter(pl.col("rank") == rank)
    if row.height == 0:
        ranks = files["rank"].to_list()
        msg = f"no file for rank {rank!r}; ranks present: {ranks}"
        raise ProftabError(msg)
    meta: dict[str, Any] = json.loads(row["meta_json"][0])
    return meta


def file_metas(files: pl.DataFrame) -> dict[int, dict[str, Any]]:
    """Every file's metadata dict, by rank (ascending)."""
    return {int(r): json.loads(m) for r, m in files.sort("rank").select("rank", "meta_json").iter_rows()}
