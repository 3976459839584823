"""Parquet datasets of traces: `write_parquet`, `scan`, `convert`.

Layout of a dataset directory (hive-partitioned by ``rank``, one file per table and rank)::

    out/
      _proftab.json                      manifest (written last)
      events/rank=0/part-0.parquet       events + parent_id, depth, self_ns, overrun_ns
      instants/ flows/ counters/ threads/ rejected/ accounting/ anomalies/ meta/

Every file also keeps its ``rank`` column, so a single file is self-describing, and
carries key-value metadata ``proftab`` (JSON: proftab version, schema version, table,
rank, ``baseTimeNanoseconds``, time resolution, source file and its sha256).

Writes are atomic: everything goes to a hidden temporary directory next to the output,
which is renamed into place at the end; on any error (or Ctrl-C) it is removed.  An
existing output is replaced only with ``force=True``, and only if it is a proftab dataset.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import shutil
import sys
import time
import uuid
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl

from proftab import schema
from proftab._version import __version__
from proftab.api import register_trace_method
from proftab.exceptions import ProftabError, ProftabWarning, TraceError
from proftab.meta import files_frame
from proftab.progress import Progress
from proftab.trace import TABLES as TRACE_TABLES
from proftab.trace import Trace

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

__all__ = ["SCHEMA_VERSION", "TABLES", "convert", "read_parquet", "scan", "write_parquet"]

SCHEMA_VERSION = schema.SCHEMA_VERSION
MANIFEST = "_proftab.json"
#: tables of a dataset, in order; `events` holds the nesting columns too
TABLES = ("events", "instants", "flows", "counters", "threads", "rejected", "accounting", "anomalies", "meta")
NEST_COLUMNS = ("parent_id", "depth", "self_ns", "overrun_ns")
#: a materialized `key_averages()` (default options) of a single-rank dataset, written by the
#: same proftab version that reads it back; any other case is computed from `events`
DERIVED_KEY_AVERAGES = schema.STORED_KEY_AVERAGES
#: the dataset's `meta` table is the Trace's `files` table
META_COLUMNS = schema.FILES_COLUMNS


def _version() -> str:
    return __version__


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


# ----------------------------------------------------------------------------- writing


def _source_info(meta: dict[str, Any]) -> tuple[str | None, int | None]:
    src = meta.get("source_file")
    if not isinstance(src, str) or not os.path.isfile(src):
        return None, None
    return sha256_file(src), os.path.getsize(src)


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


def _split_by_rank(tr: Trace) -> dict[int, dict[str, pl.DataFrame]]:
    """Every table of `tr` (events as `nested`, plus anomalies) split per rank."""
    full = {name: tr.collect(name) for name in TRACE_TABLES}
    full["events"] = tr.collect("nested")
    full["anomalies"] = tr.anomalies
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


def _is_dataset(path: Path) -> bool:
    return (path / MANIFEST).is_file()


@contextlib.contextmanager
def atomic_dir(out: str | os.PathLike[str], *, force: bool = False) -> Iterator[Path]:
    """Yield a fresh temporary directory that replaces `out` when the block succeeds.

    On an exception (including KeyboardInterrupt) the temporary directory is removed and
    `out` is left as it was.
    """
    out = Path(out)
    if out.exists() or out.is_symlink():
        if not force:
            msg = f"{out}: output already exists (Hint: pass force=True, CLI --force, to replace it)"
            raise ProftabError(msg)
        if out.is_dir() and not _is_dataset(out) and any(out.iterdir()):
            msg = f"{out}: refusing to replace a non-empty directory that is not a proftab dataset"
            raise ProftabError(msg)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.proftab-tmp-{uuid.uuid4().hex[:12]}"
    tmp.mkdir()
    try:
        yield tmp
        if out.exists() or out.is_symlink():
            old = out.parent / f".{out.name}.proftab-old-{uuid.uuid4().hex[:12]}"
            os.rename(out, old)
            os.rename(tmp, out)
            if old.is_dir() and not old.is_symlink():
                shutil.rmtree(old, ignore_errors=True)
            else:
                old.unlink()
        else:
            os.rename(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


@register_trace_method("to_parquet")
def write_parquet(trace: Trace, path: str | os.PathLike[str], *, force: bool = False) -> Path:
    """Write every table of `trace` into a Parquet dataset directory (see module docs).

    Parameters
    ----------
    trace
        A loaded (or scanned) Trace; its nesting and anomalies are computed if needed.
    path
        The dataset directory to create.
    force
        Replace an existing dataset at `path`.

    Returns
    -------
    pathlib.Path
        `path`.

    Raises
    ------
    ProftabError
        `path` exists (without `force`), or is a non-empty directory that is not a dataset.
    """
    from proftab.meta import file_meta

    per_rank = _split_by_rank(trace)
    with atomic_dir(path, force=force) as tmp:
        infos, rows = {}, {}
        for r in trace.files["rank"].to_list():
            meta = file_meta(trace.files, r)
            sha, size = _source_info(meta)
            rows[r] = _write_rank(tmp, r, per_rank[r], meta, _files_row(trace.files, r, sha, size))
            infos[r] = {"source_file": meta.get("source_file"), "source_sha256": sha, "source_bytes": size}
        if trace.files.height == 1:
            _write_key_averages(tmp, trace)
        (tmp / MANIFEST).write_text(json.dumps(_manifest(infos, rows), indent=1))
    return Path(path)


@functools.lru_cache(maxsize=1)
def _analysis_fingerprint() -> str:
    """Version + hash of the code that computes key_averages: a stored result is reused
    only by exactly the same code."""
    import importlib

    h = hashlib.sha256(_version().encode())
    for mod in ("proftab.torch", "proftab.torch.aggregate", "proftab.trace", "proftab.schema", "proftab.kinds",
                "proftab.intervals.nest", "proftab.intervals.tree", "proftab.device._link",
                "proftab.device._categories"):
        h.update(Path(importlib.import_module(mod).__file__ or "").read_bytes())
    return h.hexdigest()


def _write_key_averages(root: Path, trace: Trace) -> None:
    """Materialize `trace.key_averages()` (default options) next to the tables."""
    ka = trace.key_averages()
    ka.write_parquet(root / f"{DERIVED_KEY_AVERAGES}.parquet", compression="zstd",
                     metadata={"proftab": json.dumps({"fingerprint": _analysis_fingerprint(),
                                                      "table": DERIVED_KEY_AVERAGES})})


# ----------------------------------------------------------------------------- convert


def _convert_one(path: str, position: int, rank: int | None, salvage: bool, staging: str,
                 progress: Progress | None = None, *, key_averages: bool = False) -> dict[str, Any]:
    """Read one trace file, nest it and write its rank partition under `staging`
    (and its `key_averages()` when `key_averages`: the single-file case).

    Runs in a worker process for multi-file conversions; the file's warnings are
    returned as text so that the parent re-emits them.
    """
    from proftab.io.files import trace_from_files
    from proftab.io.kineto import read_kineto

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ProftabWarning)
        if progress:
            progress.show(f"reading {os.path.basename(path)}")
        ft = read_kineto(path, salvage=salvage, position=position, rank=rank)
        tr = trace_from_files([ft])
        if progress:
            progress.show("nesting")
        tables = _split_by_rank(tr)[ft.rank]
        if progress:
            progress.show("writing")
        sha, size = sha256_file(path), os.path.getsize(path)
        rows = _write_rank(Path(staging), ft.rank, tables, ft.meta,
                           _files_row(files_frame({ft.rank: ft.meta}), ft.rank, sha, size))
        if key_averages:
            _write_key_averages(Path(staging), tr)
    return {"rank": ft.rank, "path": path, "rank_source": ft.meta["rank_source"], "rows": rows,
            "info": {"source_file": ft.meta.get("source_file"), "source_sha256": sha, "source_bytes": size},
            "warnings": [str(w.message) for w in caught if issubclass(w.category, ProftabWarning)],
            "other_warnings": [(str(w.message), w.category.__name__) for w in caught
                               if not issubclass(w.category, ProftabWarning)]}


def _ignore_sigint() -> None:
    """Worker initializer: Ctrl-C is the parent's to handle (one message, not a traceback per worker)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _can_spawn() -> bool:
    """Whether spawned workers can re-import `__main__` (not so for `python - < script`)."""
    main_file = getattr(sys.modules.get("__main__"), "__file__", None)
    return main_file is None or os.path.isfile(main_file)


def convert(sources: str | os.PathLike[str] | Sequence[str | os.PathLike[str]], out: str | os.PathLike[str], *,
            force: bool = False, progress: bool | str = "auto", salvage: bool = False,
            ranks: Sequence[int] | None = None, max_workers: int | None = None) -> Path:
    """Convert trace files (a file, directory, glob or list) into one Parquet dataset.

    Several files are converted in parallel worker processes, each writing its own rank
    partition; the dataset appears at `out` only when every file succeeded.

    Parameters
    ----------
    sources
        As for :func:`proftab.load`.
    out
        The dataset directory to create.
    force
        Replace an existing dataset at `out`.
    progress
        Progress bar on stderr (`proftab.progress`): ``"auto"`` (or True) on a terminal when
        the input files total at least `PROGRESS_MIN_BYTES`; ``"always"`` (one line per step
        when stderr is not a terminal); ``"never"`` (or False).
    salvage, ranks
        As for :func:`proftab.load`.
    max_workers
        Worker processes (default: one per file, at most the CPU count).

    Returns
    -------
    pathlib.Path
        `out`.

    Raises
    ------
    TraceError
        A file is missing or damaged, or two files claim the same rank.
    ProftabError
        `out` exists (without `force`).
    """
    from proftab.io.files import expand_sources

    paths = expand_sources(sources)
    if ranks is not None and len(ranks) != len(paths):
        msg = f"ranks has {len(ranks)} entries for {len(paths)} files"
        raise TraceError(msg)
    sizes = [os.path.getsize(p) for p in paths]
    bar = Progress(paths, progress, title="proftab convert", poll=False)
    with atomic_dir(out, force=force) as tmp:
        staging = [tmp / f".staging-{i}" for i in range(len(paths))]
        results: list[dict[str, Any]] = [{}] * len(paths)
        bar.show("starting")
        try:
            workers = max_workers or min(len(paths), os.cpu_count() or 1)
            if len(paths) == 1 or workers == 1 or not _can_spawn():
                for i, p in enumerate(paths):
                    results[i] = _convert_one(p, i, None if ranks is None else ranks[i], salvage,
                                              str(staging[i]), bar, key_averages=len(paths) == 1)
                    bar.file_done(sizes[i], os.path.basename(p))
            else:
                import multiprocessing  # here, not at `import proftab` time
                from concurrent.futures import ProcessPoolExecutor, as_completed

                ctx = multiprocessing.get_context("spawn")  # fork is unsafe with polars' threads
                with ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=_ignore_sigint) as pool:
                    # workers start with SIGINT ignored (inherited through exec, so Python installs no
                    # KeyboardInterrupt handler in them): Ctrl-C is one message from this process
                    import signal

                    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
                    try:
                        futs = {pool.submit(_convert_one, p, i, None if ranks is None else ranks[i], salvage,
                                            str(staging[i])): i for i, p in enumerate(paths)}
                    finally:
                        signal.signal(signal.SIGINT, previous)
                    try:
                        for fut in as_completed(futs):
                            i = futs[fut]
                            results[i] = fut.result()
                            bar.file_done(sizes[i], os.path.basename(paths[i]))
                    except BaseException:
                        for f in futs:
                            f.cancel()
                        # stop the workers now (they ignore SIGINT), not after their current file
                        for proc in list(getattr(pool, "_processes", {}).values()):
                            proc.terminate()
                        pool.shutdown(wait=True, cancel_futures=True)
                        raise
        finally:
            bar.close()
        for res in results:
            for note in res["warnings"]:
                warnings.warn(note, ProftabWarning, stacklevel=2)
            for note, cat in res["other_warnings"]:
                warnings.warn(f"{res['path']}: {cat}: {note}", ProftabWarning, stacklevel=2)
        seen: dict[int, dict[str, Any]] = {}
        for res in results:
            if res["rank"] in seen:
                first = seen[res["rank"]]
                msg = (f"two files claim rank {res['rank']} ({first['path']} and {res['path']}, from "
                       f"{res['rank_source']})")
                raise TraceError(msg, hint="convert them separately, or give each file its rank: "
                                           "pt.convert(..., ranks=[0, 1, ...]) (CLI: --ranks 0,1,...)")
            seen[res["rank"]] = res
        for st in staging:
            # only a single file has one (per-file aggregates do not add up to a multi-rank one)
            derived = st / f"{DERIVED_KEY_AVERAGES}.parquet"
            if derived.exists():
                os.rename(derived, tmp / derived.name)
            for table_dir in st.iterdir():
                dest = tmp / table_dir.name
                dest.mkdir(exist_ok=True)
                for part in table_dir.iterdir():
                    os.rename(part, dest / part.name)
            shutil.rmtree(st)
        infos = {res["rank"]: res["info"] for res in results}
        rows = {res["rank"]: res["rows"] for res in results}
        (tmp / MANIFEST).write_text(json.dumps(_manifest(infos, rows), indent=1))
    return Path(out)


# ----------------------------------------------------------------------------- scanning


def read_manifest(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The manifest of a dataset directory (raises ProftabError when it is not one)."""
    root = Path(path)
    if not root.exists():
        msg = f"{root}: no such dataset directory"
        raise ProftabError(msg)
    if not _is_dataset(root):
        msg = (f"{root}: not a proftab Parquet dataset (no {MANIFEST}) "
               "(Hint: create one with pt.load(trace).to_parquet(path) or `proftab convert TRACE OUT`)")
        raise ProftabError(msg)
    manifest = json.loads((root / MANIFEST).read_text())
    if manifest.get("schema_version", 0) > SCHEMA_VERSION:
        msg = (f"{root}: dataset schema version {manifest['schema_version']} is newer than this proftab's "
               f"({SCHEMA_VERSION}); upgrade proftab")
        raise ProftabError(msg)
    return manifest


def _part_files(root: Path, table: str, ranks: list[int]) -> list[str]:
    return [str(root / table / f"rank={r}" / "part-0.parquet") for r in ranks]


def _stored_key_averages(root: Path) -> pl.LazyFrame | None:
    """The dataset's stored default key_averages, only if this very code wrote it."""
    stored = root / f"{DERIVED_KEY_AVERAGES}.parquet"
    if not stored.is_file():
        return None
    meta = pl.read_parquet_metadata(stored).get("proftab")
    if meta and json.loads(meta).get("fingerprint") == _analysis_fingerprint():
        return pl.scan_parquet(stored)
    return None


def scan(path: str | os.PathLike[str]) -> Trace:
    """Open a Parquet dataset written by `to_parquet` / `convert` as a lazy Trace.

    Every table is a `polars.LazyFrame` over the dataset's part files; only the small `meta`
    table (the Trace's `files`) is read now. Analyses read the columns they need
    (`Trace.collect(table, columns)`); `nested` is the stored nesting, never recomputed.

    Raises
    ------
    ProftabError
        `path` is not a proftab dataset, or was written by a newer schema version.
    """
    root = Path(path)
    manifest = read_manifest(root)
    ranks = sorted(int(r["rank"]) for r in manifest["ranks"])

    def lazy(table: str) -> pl.LazyFrame:
        return pl.scan_parquet(_part_files(root, table, ranks), hive_partitioning=False)

    nested = lazy("events")
    tables: dict[str, pl.LazyFrame] = {name: lazy(name) for name in TRACE_TABLES if name != "events"}
    tables |= {"events": nested.drop(list(NEST_COLUMNS)), "nested": nested, "anomalies": lazy("anomalies")}
    stored = _stored_key_averages(root)
    if stored is not None:
        tables[DERIVED_KEY_AVERAGES] = stored
    files = lazy("meta").collect().select(list(META_COLUMNS))
    return Trace(tables, files)


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
