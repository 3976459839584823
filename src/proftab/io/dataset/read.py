"""Reading a proftab Parquet dataset (`proftab.io.dataset.layout`): `scan` (lazy), `read_parquet`.

`scan` is the dataset reader of `proftab.io.readers` (`read_dataset`). It reads the manifest
and checks every part file's footer, columns and row count before anything is used
(`validate_dataset`); the tables are LazyFrames over the part files, and a Trace over them
refuses to read once the dataset was replaced (`_generation_guard`). A stored key_averages is
used only when the code that computed it is this very code (`_analysis_fingerprint`).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import stat
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import polars as pl

from proftab import schema
from proftab._code_closure import code_fingerprint
from proftab._version import __version__
from proftab.exceptions import ProftabError, ProftabWarning, TraceError
from proftab.io.dataset.layout import DONE_MARKER, MANIFEST, NEST_COLUMNS, STATUS, TABLES, dataset_root, is_dataset
from proftab.trace import TABLES as TRACE_TABLES
from proftab.trace import Trace

if TYPE_CHECKING:
    from collections.abc import Callable

    from proftab.io.tables import ReadOptions

__all__ = ["DONE_MARKER", "MANIFEST", "SCHEMA_VERSION", "STATUS", "TABLES", "read_dataset", "read_manifest",
           "read_parquet", "scan"]

SCHEMA_VERSION = schema.SCHEMA_VERSION
#: a materialized `key_averages()` (default options) of a single-rank dataset, written by the
#: same proftab version that reads it back; any other case is computed from `events`
DERIVED_KEY_AVERAGES = schema.STORED_KEY_AVERAGES
#: the dataset's `meta` table is the Trace's `files` table
META_COLUMNS = schema.FILES_COLUMNS


def _version() -> str:
    return __version__


#: the code that computes the stored key_averages: `Trace.key_averages` (`proftab.torch`, torch's rules,
#: with `tr.device` for the device time of each op) over `Trace.nested` (trace.py, proftab.nesting). A
#: namespace is reached through the Trace, not imported, so each is named here (io names no analysis by
#: import: these are module names read as source text by `proftab._code_closure`).
_KEY_AVERAGES_CODE = ("proftab.torch", "proftab.device", "proftab.trace", "proftab.nesting")


@functools.lru_cache(maxsize=1)
def _analysis_fingerprint() -> str:
    """Version + hash of the code that computes key_averages: a stored result is reused
    only by exactly the same code.

    The code is `_KEY_AVERAGES_CODE` and every proftab module it imports, transitively
    (`proftab._code_closure`: read from the source, nothing is imported here; about 20 ms).
    """
    h = hashlib.sha256(_version().encode())
    h.update(code_fingerprint(_KEY_AVERAGES_CODE).encode())
    return h.hexdigest()




# ----------------------------------------------------------------------------- scanning


def read_manifest(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The manifest of a dataset directory (raises ProftabError when it is not one)."""
    root = Path(path)
    if not root.exists():
        msg = f"{root}: no such dataset directory"
        raise ProftabError(msg)
    if not is_dataset(root):
        msg = (f"{root}: not a proftab Parquet dataset (no {MANIFEST}) "
               "(Hint: create one with pt.load(trace).to_parquet(path) or `proftab convert TRACE OUT`)")
        raise ProftabError(msg)
    mpath = root / MANIFEST
    try:
        manifest: dict[str, Any] = json.loads(mpath.read_bytes())
    except (OSError, ValueError) as exc:
        msg = f"the dataset manifest is unreadable ({exc})"
        raise TraceError(msg, path=str(mpath)) from None
    version = manifest.get("schema_version") if isinstance(manifest, dict) else None
    if isinstance(version, int) and version > SCHEMA_VERSION:
        msg = (f"{root}: dataset schema version {manifest['schema_version']} is newer than this proftab's "
               f"({SCHEMA_VERSION}); upgrade proftab")
        raise ProftabError(msg)
    validate_dataset(root, manifest)
    return manifest


def _required_columns() -> dict[str, set[str]]:
    from proftab import schema

    return {"events": {*schema.EVENT_COLUMNS, *NEST_COLUMNS}, "instants": set(schema.INSTANT_COLUMNS),
            "flows": set(schema.FLOW_COLUMNS), "counters": set(schema.COUNTER_COLUMNS),
            "threads": set(schema.THREAD_COLUMNS), "rejected": set(schema.REJECTED_COLUMNS),
            "accounting": set(schema.ACCOUNTING_COLUMNS), "anomalies": {"rank"}, "meta": set(META_COLUMNS)}


def check_manifest(manifest: object, mpath: str) -> None:
    """The manifest's shape: schema version, rank entries, row counts (raises TraceError)."""

    def bad(what: str) -> TraceError:
        return TraceError(f"not a valid proftab dataset manifest: {what}", path=mpath)

    if not isinstance(manifest, dict):
        msg = f"a JSON {type(manifest).__name__}, not an object"
        raise bad(msg)
    version = manifest.get("schema_version")
    if not isinstance(version, int) or isinstance(version, bool) or not 1 <= version <= SCHEMA_VERSION:
        msg = f"schema_version {version!r}, expected 1 to {SCHEMA_VERSION}"
        raise bad(msg)
    ranks = manifest.get("ranks")
    if not isinstance(ranks, list) or not ranks:
        msg = "no 'ranks' list"
        raise bad(msg)
    totals = manifest.get("rows")
    if not isinstance(totals, dict) or not all(isinstance(totals.get(t), int) for t in TABLES):
        msg = "no row count per table"
        raise bad(msg)
    seen: set[int] = set()
    for entry in ranks:
        rank = entry.get("rank") if isinstance(entry, dict) else None
        rows = entry.get("rows") if isinstance(entry, dict) else None
        if not isinstance(rank, int) or isinstance(rank, bool) or not isinstance(rows, dict):
            msg = f"rank entry {entry!r:.80} lacks an integer 'rank' and its 'rows'"
            raise bad(msg)
        if not -(2**31) <= rank < 2**31:
            msg = f"rank {rank} is outside int32"
            raise bad(msg)
        if rank in seen:  # a rank listed twice would be read twice
            msg = f"rank {rank} is listed more than once"
            raise bad(msg)
        seen.add(rank)
    summaries = manifest.get("summaries", [])
    if not isinstance(summaries, list) or not all(isinstance(n, str) and _PLAIN_NAME.fullmatch(n)
                                                  and n not in TABLES for n in summaries):
        msg = f"'summaries' must be a list of table names (letters, digits, '_'), not {summaries!r:.80}"
        raise bad(msg)


#: a summary table's name: one plain path component, never '..', '/' or a table of the dataset
_PLAIN_NAME = re.compile(r"[A-Za-z0-9_]{1,100}")


def regular_file(path: Path, root: Path) -> bool:
    """`path` is a regular file inside `root` (no FIFO or device, no symlink out of the dataset)."""
    try:
        st = path.stat()
    except OSError:
        return False
    if not stat.S_ISREG(st.st_mode):
        return False
    if path.is_symlink() or any(p.is_symlink() for p in path.parents if len(p.parts) > len(root.parts)):
        return os.path.realpath(path).startswith(os.path.realpath(root) + os.sep)
    return True


def _check_types(schema_: pl.Schema, table: str) -> list[str]:
    """Columns of a part file whose dtype differs from the table's (strings and categoricals agree)."""
    want = _column_types().get(table, {})
    text = (pl.String, pl.Categorical, pl.Enum)
    out = []
    for c, dt in want.items():
        got = schema_.get(c)
        if got is None:
            continue
        if isinstance(dt, text) or dt in text:
            ok = isinstance(got, text) or got in text
        else:
            ok = got == dt
        if not ok:
            out.append(f"{c} is {got}, expected {dt}")
    return out


@functools.lru_cache(maxsize=1)
def _column_types() -> dict[str, dict[str, Any]]:
    from proftab import schema

    return {"events": {**schema.EVENT_COLUMNS, "parent_id": pl.Int64, "self_ns": pl.Int64, "overrun_ns": pl.Int64},
            "instants": schema.INSTANT_COLUMNS, "flows": schema.FLOW_COLUMNS, "counters": schema.COUNTER_COLUMNS,
            "threads": schema.THREAD_COLUMNS, "rejected": schema.REJECTED_COLUMNS,
            "accounting": schema.ACCOUNTING_COLUMNS, "meta": dict(META_COLUMNS)}


def validate_dataset(root: Path, manifest: object) -> None:
    """Cheap checks of a dataset before it is used: the manifest's shape, and every part file's
    presence, Parquet footer, columns and row count (raises TraceError naming the file)."""
    import pyarrow.parquet as pq

    check_manifest(manifest, str(root / MANIFEST))
    required = _required_columns()
    renames = schema.stored_renames(cast("dict[str, Any]", manifest)["schema_version"])
    for entry in cast("dict[str, Any]", manifest)["ranks"]:
        rank, rows = entry["rank"], entry["rows"]
        for table in TABLES:
            part = root / table / f"rank={rank}" / "part-0.parquet"
            if part.exists() and not regular_file(part, root):  # a FIFO would block the read forever
                msg = "dataset part file is not a regular file inside the dataset (a FIFO, device or outside link)"
                raise TraceError(msg, path=str(part))
            try:
                md = pq.read_metadata(part)
            except FileNotFoundError:
                msg = f"dataset part file missing (manifest lists rank {rank})"
                raise TraceError(msg, path=str(part)) from None
            except (OSError, ValueError) as exc:
                msg = f"damaged dataset part file ({exc})"
                raise TraceError(msg, path=str(part)) from None
            names = [renames.get(table, {}).get(n, n) for n in md.schema.names]  # an older dataset's names
            missing = required[table] - set(names)
            if missing:
                msg = f"dataset part file lacks columns {sorted(missing)}"
                raise TraceError(msg, path=str(part))
            if isinstance(rows.get(table), int) and md.num_rows != rows[table]:
                msg = f"dataset part file has {md.num_rows} rows, the manifest says {rows[table]}"
                raise TraceError(msg, path=str(part))
            try:
                empty = cast("pl.DataFrame", pl.from_arrow(md.schema.to_arrow_schema().empty_table()))
                types = empty.rename(renames.get(table, {}), strict=False).schema
            except Exception as exc:  # noqa: BLE001 - a type polars cannot read is damage too
                msg = f"dataset part file has unreadable column types ({type(exc).__name__}: {str(exc)[:200]})"
                raise TraceError(msg, path=str(part)) from None
            if wrong := _check_types(types, table):
                msg = f"dataset part file has wrong column types: {'; '.join(wrong[:5])}"
                raise TraceError(msg, path=str(part))


def collect_checked(lf: pl.LazyFrame, root: Path | str, table: str) -> pl.DataFrame:
    """Collect a dataset scan; a read error (a damaged page) becomes a TraceError naming the table."""
    try:
        return lf.collect()
    except (pl.exceptions.PolarsError, OSError, ValueError) as exc:  # pyarrow.ArrowInvalid is a ValueError
        msg = f"cannot read table {table!r} of the dataset ({type(exc).__name__}: {str(exc)[:300]})"
        raise TraceError(msg, path=f"{root}/{'events' if table == 'nested' else table}") from None


def _dataset_trace(root: str, manifest: dict[str, Any], *, frame: Callable[[list[str], str], pl.LazyFrame],
                   exists: Callable[[str], bool], stored_meta: Callable[[str], str | bytes | None],
                   source: str, guard: Callable[[], None] | None = None) -> Trace:
    """The lazy Trace of the dataset at `root` (a directory, or a path in an fsspec file system).

    `frame(files, table)` opens part files as one LazyFrame, `exists(path)` says whether a file
    is there, `stored_meta(path)` reads the ``proftab`` key of a Parquet file's metadata;
    `source` names the dataset in errors and in `Trace.source`.
    """
    ranks = sorted(int(r["rank"]) for r in manifest["ranks"])
    renames = schema.stored_renames(int(manifest.get("schema_version", SCHEMA_VERSION)))  # a dataset written before

    def parts(table: str) -> list[str]:
        return [f"{root}/{table}/rank={r}/part-0.parquet" for r in ranks]

    def lazy(table: str) -> pl.LazyFrame:
        lf = frame(parts(table), table)
        return lf.rename(renames[table]) if table in renames else lf

    nested = lazy("events")
    tables: dict[str, pl.LazyFrame] = {name: lazy(name) for name in TRACE_TABLES if name != "events"}
    tables |= {"events": nested.drop(list(NEST_COLUMNS)), "nested": nested, "anomalies": lazy("anomalies")}
    stored = f"{root}/{DERIVED_KEY_AVERAGES}.parquet"
    meta = stored_meta(stored) if exists(stored) else None
    if meta and json.loads(meta).get("fingerprint") == _analysis_fingerprint():  # only if this very code wrote it
        tables[DERIVED_KEY_AVERAGES] = frame([stored], DERIVED_KEY_AVERAGES)
    for name in manifest.get("summaries", []):  # plain names (check_manifest)
        present = [p for p in parts(name) if exists(p)]
        if len(present) == len(ranks):  # a summary is used only when every rank has it
            tables[name] = frame(present, name).rename(renames[name]) if name in renames else frame(present, name)
    if exists(f"{root}/{STATUS}"):
        tables["status"] = frame([f"{root}/{STATUS}"], "status")
    files = collect_checked(lazy("meta"), source, "meta").select(list(META_COLUMNS))
    for raw in files["meta_json"]:
        try:
            json.loads(raw)
        except (TypeError, ValueError) as exc:
            msg = f"the dataset's meta table holds invalid JSON ({exc})"
            raise TraceError(msg, path=f"{source}/meta") from None
    failed = manifest.get("failed") or []
    if failed:  # once per scan: every analysis of this Trace lacks those files' ranks
        which = "; ".join(f"{f.get('source_file')} ({str(f.get('error') or '').splitlines()[0][:200]})"
                          for f in failed)
        warnings.warn(f"{source}: a rank is missing: {len(failed)} source file(s) failed to convert and are not in "
                      f"the dataset (ranks present: {', '.join(str(r) for r in ranks)}): {which}", ProftabWarning,
                      stacklevel=3)
    return Trace(tables, files, source=source, guard=guard)


def scan(path: str | os.PathLike[str], *, storage_options: dict[str, Any] | None = None) -> Trace:
    """Open a Parquet dataset written by `to_parquet` / `convert` as a lazy Trace.

    Every table is a `polars.LazyFrame` over the dataset's part files; only the small `meta`
    table (the Trace's `files`) is read now. Analyses read the columns they need
    (`Trace.collect(table, columns)`); `nested` is the stored nesting, never recomputed.
    `path` may be a URL (``s3://``, ``gs://`` ... through fsspec, with `storage_options`;
    `proftab.io.dataset.remote`).

    Raises
    ------
    ProftabError
        `path` is not a proftab dataset, or was written by a newer schema version.
    """
    from proftab.io.dataset.distributed import local_path
    from proftab.io.dataset.remote import is_remote

    if is_remote(path):
        return _scan_url(os.fspath(path), storage_options)
    root = Path(local_path(os.fspath(path)) or path)
    manifest = read_manifest(root)
    return _dataset_trace(
        str(root), manifest,
        frame=lambda files, _table: pl.scan_parquet(files, hive_partitioning=False),
        exists=lambda p: regular_file(Path(p), root), stored_meta=lambda p: pl.read_parquet_metadata(p).get("proftab"),
        source=str(root), guard=_generation_guard(root))


def _generation_guard(root: Path) -> Callable[[], None]:
    """A check that `root` still holds the dataset generation scanned now.

    Every write replaces the whole directory (`atomic_dir`) and writes a new manifest, so the
    manifest's inode and mtime name a generation; a lazy Trace reading part files of another
    generation would mix tables of two datasets.
    """
    mpath = root / MANIFEST

    def stamp() -> tuple[int, int, int] | None:
        try:
            st = mpath.stat()
        except OSError:
            return None
        return (st.st_ino, st.st_mtime_ns, st.st_size)

    first = stamp()

    def guard() -> None:
        if stamp() != first:
            msg = ("the dataset was replaced or removed after it was scanned (e.g. by `convert --force`); "
                   "scan it again to read the new one")
            raise TraceError(msg, path=str(root))

    return guard


def _scan_url(url: str, storage_options: dict[str, Any] | None = None) -> Trace:
    """`scan` for a dataset at a URL (lazy; see `proftab.io.dataset.remote`)."""
    import pyarrow.dataset as pads
    import pyarrow.parquet as pq
    from pyarrow.fs import FSSpecHandler, PyFileSystem

    from proftab.io.dataset.distributed import filesystem
    from proftab.io.dataset.remote import has_files

    fs, root = filesystem(url, storage_options)
    mpath = f"{root}/{MANIFEST}"
    if not fs.exists(mpath):
        if not has_files(fs, root):
            msg = f"{url}: no such dataset"
            raise ProftabError(msg)
        msg = (f"{url}: not a proftab Parquet dataset, or its upload did not finish (no {MANIFEST}) "
               "(Hint: `proftab convert TRACES URL` writes one)")
        raise ProftabError(msg)
    try:
        manifest = json.loads(fs.cat_file(mpath))
    except (OSError, ValueError) as exc:
        msg = f"the dataset manifest is unreadable ({exc})"
        raise TraceError(msg, path=f"{url}/{MANIFEST}") from None
    check_manifest(manifest, f"{url}/{MANIFEST}")
    arrow_fs = PyFileSystem(FSSpecHandler(fs))
    # one recursive listing (a few list requests on an object store), not a request per part file
    listed = {str(p).rstrip("/") for p in fs.find(root)}

    def frame(files: list[str], table: str) -> pl.LazyFrame:
        try:
            return pl.scan_pyarrow_dataset(pads.dataset(files, format="parquet", filesystem=arrow_fs))
        except (OSError, ValueError) as exc:  # pyarrow.ArrowInvalid is a ValueError
            msg = f"cannot open table {table!r} of the dataset ({type(exc).__name__}: {str(exc)[:300]})"
            raise TraceError(msg, path=f"{url}/{table}") from None

    def stored_meta(path: str) -> bytes | None:
        with arrow_fs.open_input_file(path) as fh:
            meta: bytes | None = (pq.read_metadata(fh).metadata or {}).get(b"proftab")
        return meta

    return _dataset_trace(root, manifest, frame=frame, exists=listed.__contains__, stored_meta=stored_meta,
                          source=url)


def read_parquet(path: str | os.PathLike[str]) -> Trace:
    """Read a Parquet dataset written by `to_parquet` / `convert` into an eager Trace.

    The same tables as `scan`, each read whole into a DataFrame now (one chunk per column).

    Raises
    ------
    ProftabError
        `path` is not a proftab dataset, or was written by a newer schema version.
    """
    lazy = scan(path)
    return Trace({name: lazy.collect(name) for name in lazy.tables}, lazy.files)


def read_dataset(source: str | os.PathLike[str], options: ReadOptions) -> Trace:
    """The dataset reader of `proftab.io.readers`: `scan` of the dataset `source` names (its
    directory, its manifest or a URL), with the options' `storage_options`."""
    return scan(dataset_root(source) or source, storage_options=options.storage_options)
