"""The layout of a proftab Parquet dataset: its directory, manifest and table names.

A dataset is a directory, hive-partitioned by ``rank`` with one file per table and rank::

    out/
      _proftab.json                      manifest (written last)
      events/rank=0/part-0.parquet       events + parent_id, depth, self_ns, overrun_ns
      instants/ flows/ counters/ threads/ rejected/ accounting/ anomalies/ meta/
      summary_*/rank=0/part-0.parquet    optional per-rank summaries (`convert`)
      key_averages.parquet               optional stored key_averages of a one-file dataset
      _status.parquet                    per-file status (`convert`)

Importing this module imports neither Polars nor pyarrow.
"""

from __future__ import annotations

import os

from proftab.exceptions import TraceError

__all__ = ["DONE_MARKER", "MANIFEST", "NEST_COLUMNS", "STATUS", "SUMMARY_PREFIX", "TABLES", "dataset_root",
           "is_dataset", "not_a_trace_file", "part_file"]

#: the manifest: its presence makes a directory a dataset, and it is written last
MANIFEST = "_proftab.json"
#: per-file status table of a converted dataset (`convert`)
STATUS = "_status.parquet"
#: written into a file's staging directory when its partition is complete (resume)
DONE_MARKER = "_done.json"
#: tables of a dataset, in order; `events` holds the nesting columns too
TABLES = ("events", "instants", "flows", "counters", "threads", "rejected", "accounting", "anomalies", "meta")
NEST_COLUMNS = ("parent_id", "depth", "self_ns", "overrun_ns")
#: the name prefix of the per-rank summary tables (`proftab.ranks.summaries`)
SUMMARY_PREFIX = "summary_"


def part_file(root: str | os.PathLike[str], table: str, rank: int) -> str:
    """The part file of `table` for `rank` under the dataset directory `root`."""
    return f"{os.fspath(root)}/{table}/rank={rank}/part-0.parquet"


def is_dataset(path: str | os.PathLike[str]) -> bool:
    """Whether the directory `path` holds a dataset manifest."""
    return os.path.isfile(os.path.join(path, MANIFEST))


def dataset_root(item: str | os.PathLike[str]) -> str | None:
    """The directory of the proftab Parquet dataset `item` names, or None when it is not one.

    `item` may be the dataset directory or its `_proftab.json`.
    """
    path = os.fspath(item)
    if os.path.isdir(path) and is_dataset(path):
        return path
    if os.path.basename(path) == MANIFEST and os.path.isfile(path):
        return os.path.dirname(path) or "."
    return None


def not_a_trace_file(root: str) -> TraceError:
    """The error for the dataset at `root` given where trace files are read (`pt.load`, `convert`)."""
    msg = "a proftab Parquet dataset (written by convert), not a trace file"
    return TraceError(msg, path=root, hint=f"open it with pt.scan({root!r}) (the CLI reads it as it is)")
