"""`convert`: trace files into one Parquet dataset, in a local process pool or on Dask.

Each file is read, nested and written as its own rank partition in a staging directory
(`_convert_one`, retryable as `_convert_task`); the dataset appears at `out` only when the
conversion finished (`io.atomic.atomic_dir`), with a per-file status table and, per rank,
small mergeable summaries (`io.summaries`). The dataset layout is `io.parquet`'s.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import sys
import time
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl

from proftab.exceptions import ProftabError, ProftabWarning, SkippedFileWarning, TraceError
from proftab.io import parquet as _pq
from proftab.io.atomic import MANIFEST, _is_dataset, atomic_dir
from proftab.meta import files_frame
from proftab.progress import Progress

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

    from proftab.trace import Trace

__all__ = ["convert"]


def _convert_one(path: str, position: int, rank: int | None, salvage: bool, staging: str,
                 progress: Progress | None = None, *, key_averages: bool = False,
                 summaries: bool = True) -> dict[str, Any]:
    """Read one trace file (a local path or an fsspec URL), nest it and write its rank
    partition under `staging` (and its `key_averages()` when `key_averages`: the single-file
    case; and the rank's `proftab.io.summaries` when `summaries`).

    Runs in a worker process (or a Dask task) for multi-file conversions; the file's warnings
    are returned as text so that the parent re-emits them.
    """
    from proftab.io.distributed import localized
    from proftab.io.files import trace_from_files
    from proftab.io.kineto import read_kineto

    with warnings.catch_warnings(record=True) as caught, localized(path) as local:
        warnings.simplefilter("always", ProftabWarning)
        if progress:
            progress.show(f"reading {os.path.basename(path)}")
        ft = read_kineto(local, salvage=salvage, position=position, rank=rank)
        if local != path:
            ft.meta["source_file"] = path
        tr = trace_from_files([ft])
        if progress:
            progress.show("nesting")
        tables = _pq._split_by_rank(tr)[ft.rank]
        if progress:
            progress.show("writing")
        sha, size = ft.source_sha256, os.path.getsize(local)  # hashed while it was read
        rows = _pq._write_rank(Path(staging), ft.rank, tables, ft.meta,
                           _pq._files_row(files_frame({ft.rank: ft.meta}), ft.rank, sha, size))
        if key_averages:
            _pq._write_key_averages(Path(staging), tr)
        summary_errors = _write_summaries(Path(staging), tr, ft.rank) if summaries else {}
    return {"rank": ft.rank, "summary_errors": summary_errors, "path": path, "rank_source": ft.meta["rank_source"],
            "rows": rows,
            "info": {"source_file": ft.meta.get("source_file"), "source_sha256": sha, "source_bytes": size},
            "warnings": [str(w.message) for w in caught if issubclass(w.category, ProftabWarning)],
            "other_warnings": [(str(w.message), w.category.__name__) for w in caught
                               if not issubclass(w.category, ProftabWarning)]}


def _write_summaries(root: Path, trace: Trace, rank: int) -> dict[str, str]:
    """Write the rank's summaries; returns those that could not be computed, with their errors."""
    from proftab.io.summaries import rank_summaries

    tables, errors = rank_summaries(trace, rank)
    for name, df in tables.items():
        d = root / name / f"rank={rank}"
        d.mkdir(parents=True, exist_ok=True)
        df.write_parquet(d / "part-0.parquet", compression="zstd")
    return errors


def _convert_task(path: str, position: int, rank: int | None, salvage: bool, staging: str, key_averages: bool,
                  summaries: bool, on_error: str) -> dict[str, Any]:
    """`_convert_one` as a retryable task.

    The staging directory is cleaned first (a retry after a worker died); with
    ``on_error="skip"`` a failure is returned as a status instead of raised.
    """
    import socket

    t0 = time.monotonic()
    shutil.rmtree(staging, ignore_errors=True)
    host = f"{socket.gethostname()}:{os.getpid()}"
    try:
        res = _convert_one(path, position, rank, salvage, staging, key_averages=key_averages, summaries=summaries)
    except Exception as e:
        shutil.rmtree(staging, ignore_errors=True)
        if on_error == "raise":
            raise
        return {"path": path, "status": "failed", "error": f"{type(e).__name__}: {e}", "host": host,
                "seconds": time.monotonic() - t0, "warnings": [], "other_warnings": []}
    out = {**res, "status": "ok", "error": None, "host": host, "seconds": time.monotonic() - t0}
    (Path(staging) / _pq.DONE_MARKER).write_text(json.dumps(out))  # written last: the partition is complete
    return out


def _ignore_sigint() -> None:
    """Worker initializer: Ctrl-C is the parent's to handle (one message, not a traceback per worker)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)


@contextlib.contextmanager
def _workers_skip_main() -> Iterator[None]:
    """While the pool starts its workers, `__main__` is an empty module.

    A spawned worker re-runs the parent's main script (as ``__mp_main__``) before it unpickles
    its task, so a plain script calling `convert` without ``if __name__ == "__main__":`` would
    convert again in every worker. The workers need nothing from `__main__` (the task is
    `_convert_task` of this module, its arguments are strings), so they are started with a
    main module that has no file to re-run; `python - < script` works the same way.
    """
    import types

    main = sys.modules.get("__main__")
    sys.modules["__main__"] = types.ModuleType("__main__")
    try:
        yield
    finally:
        if main is not None:
            sys.modules["__main__"] = main


def convert(sources: str | os.PathLike[str] | Sequence[str | os.PathLike[str]], out: str | os.PathLike[str], *,
            force: bool = False, progress: bool | str = "auto", salvage: bool = False,
            ranks: Sequence[int] | None = None, max_workers: int | None = None, client: Any = None,
            on_error: str = "raise", resume: bool = False, summaries: bool = True,
            storage_options: dict[str, Any] | None = None, staging: str | os.PathLike[str] | None = None,
            ) -> Path | str:
    """Convert trace files (a file, directory, glob or list) into one Parquet dataset.

    Several files are converted in parallel (worker processes, or Dask tasks with `client`),
    each writing its own rank partition; the dataset appears at `out` only at the end, with a
    per-file status table (``_status.parquet``).

    Parameters
    ----------
    sources
        As for :func:`proftab.load`; also fsspec URLs (``file://``, ``s3://`` ...), read by the
        workers (`proftab.io.distributed`).
    out
        The dataset directory to create: a local path or ``file://`` URL (the same path on
        every worker), or an object-store / fsspec URL (``s3://bucket/job.pq``): the dataset is
        then converted under `staging` and uploaded with its manifest last
        (`proftab.io.remote`).
    force
        Replace an existing dataset at `out`.
    progress
        Progress bar on stderr (`proftab.progress`): ``"auto"`` (or True) on a terminal when
        the input files total at least `PROGRESS_MIN_BYTES`; ``"always"`` (one line per step
        when stderr is not a terminal); ``"never"`` (or False).
    salvage, ranks
        As for :func:`proftab.load`.
    max_workers
        Worker processes (default: one per file, at most the CPU count); with
        ``client="local"``, the LocalCluster's workers.
    client
        Run the per-file work on Dask: a `distributed.Client`, a scheduler address
        (``"tcp://host:8786"``) or ``"local"`` (a LocalCluster); None: a local process pool.
    on_error
        ``"raise"``: a file that fails fails the conversion (nothing is written);
        ``"skip"``: it is left out, with its error in the status table, and a
        `SkippedFileWarning` (its ``path`` attribute: the file) is emitted once per such file.
    resume
        Reuse the ranks of an existing dataset at `out` whose source file (path and size) is
        unchanged and converted fine; convert only the other files, then replace `out`. Also
        keeps each finished file in ``.OUT.proftab-resume/`` next to `out` until the dataset is
        complete, so that a failed or killed run rerun with `resume` continues from them.
    summaries
        Write the per-rank summaries (`proftab.io.summaries`).
    storage_options
        fsspec options for a URL `out` (credentials, ``client_kwargs={"endpoint_url": ...}``).
    staging
        Where a URL `out` is converted before its upload (default: the system's temporary
        directory); Dask workers other than local ones need it on a shared file system.

    Returns
    -------
    pathlib.Path or str
        `out` (the URL string for a URL).

    Raises
    ------
    TraceError
        A file is missing or damaged (with ``on_error="raise"``), or two files claim the same rank.
    ProftabError
        `out` exists (without `force` or `resume`).
    """
    from proftab.io.distributed import expand_urls, is_url, local_path, source_size
    from proftab.io.files import expand_sources

    if on_error not in ("raise", "skip"):
        msg = f"on_error must be 'raise' or 'skip', not {on_error!r}"
        raise ProftabError(msg)
    out_local = local_path(os.fspath(out))
    if out_local is None:  # an object store: convert locally, then upload
        from proftab.io.remote import remote_output

        if resume:
            msg = (f"{out}: resume needs a file-system output (an object store has no rename to resume into); "
                   "convert to a local or shared path with resume, then convert or copy that to the URL")
            raise ProftabError(msg)
        with remote_output(os.fspath(out), force=force, storage_options=storage_options, staging=staging) as local:
            convert(sources, local, progress=progress, salvage=salvage, ranks=ranks, max_workers=max_workers,
                    client=client, on_error=on_error, summaries=summaries)
        return os.fspath(out)
    out = Path(out_local)
    items = [os.fspath(sources)] if isinstance(sources, str | os.PathLike) else [os.fspath(x) for x in sources]
    if any(is_url(i) and local_path(i) is None for i in items):
        paths = expand_urls(items)
    else:
        paths = expand_sources([local_path(i) or i for i in items])
    if ranks is not None and len(ranks) != len(paths):
        msg = f"ranks has {len(ranks)} entries for {len(paths)} files"
        raise TraceError(msg)
    sizes = [source_size(p) for p in paths]
    reuse = _reusable(out, paths, sizes, ranks) if resume and _is_dataset(out) else {}
    # with resume, finished files are kept in a checkpoint directory next to `out` until the
    # dataset is complete: a failed or killed run continues from them when rerun with resume
    ckpt = out.parent / f".{out.name}.proftab-resume" if resume else None
    if ckpt is not None:
        ckpt.mkdir(parents=True, exist_ok=True)
    results: list[dict[str, Any]] = [{}] * len(paths)
    done_before: dict[int, Path] = {}
    keys = [_source_key(paths[i], sizes[i], None if ranks is None else ranks[i], salvage) for i in range(len(paths))]
    if ckpt is not None:
        for i in range(len(paths)):
            marker = ckpt / f".staging-{keys[i]}" / _pq.DONE_MARKER
            if i not in reuse and marker.is_file():
                results[i] = {**json.loads(marker.read_text()), "status": "resumed"}
                done_before[i] = marker.parent
    todo = [i for i in range(len(paths)) if i not in reuse and i not in done_before]
    bar = Progress([paths[i] for i in todo], progress, title="proftab convert", poll=False)
    with atomic_dir(out, force=force or bool(resume)) as tmp:
        base = tmp if ckpt is None else ckpt
        stage_dirs = [base / f".staging-{keys[i] if ckpt is not None else i}" for i in range(len(paths))]
        for i, res in reuse.items():
            results[i] = _link_rank(out, tmp, res)
        single = len(paths) == 1
        calls = [(paths[i], i, None if ranks is None else ranks[i], salvage, str(stage_dirs[i]), single, summaries,
                  on_error) for i in todo]
        bar.show("starting")

        def done(k: int, res: dict[str, Any]) -> None:
            i = todo[k]
            results[i] = res
            bar.file_done(sizes[i], os.path.basename(paths[i]))

        try:
            if client is not None and todo:
                from proftab.io.distributed import dask_client, run_tasks

                with dask_client(client, max_workers) as c:
                    run_tasks(c, _convert_task, calls, done)
            else:
                _run_local(calls, done, max_workers)
        finally:
            bar.close()
        _finish(tmp, paths, results, stage_dirs)
    if ckpt is not None:
        shutil.rmtree(ckpt, ignore_errors=True)
    for res in results:  # on_error="skip": name every file left out
        if res.get("status") == "failed":
            warnings.warn(SkippedFileWarning(
                f"skipped {res['path']}: {res['error']} (not in {out}; its _status.parquet says why)",
                str(res["path"])), stacklevel=2)
    return out


def _source_key(path: str, size: int, rank: int | None, salvage: bool) -> str:
    """A file's identity for the resume checkpoint: path, size, rank, salvage and the schema version."""
    return hashlib.sha256(json.dumps([path, size, rank, salvage, _pq.SCHEMA_VERSION]).encode()).hexdigest()[:16]


def _run_local(calls: list[tuple[Any, ...]], done: Any, max_workers: int | None) -> None:
    """The per-file tasks in this process or a spawn process pool."""
    workers = max_workers or min(len(calls), os.cpu_count() or 1)
    if len(calls) <= 1 or workers == 1:
        for k, args in enumerate(calls):
            done(k, _convert_task(*args))
        return
    import multiprocessing  # here, not at `import proftab` time
    import signal
    from concurrent.futures import ProcessPoolExecutor, as_completed

    ctx = multiprocessing.get_context("spawn")  # fork is unsafe with polars' threads
    with ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=_ignore_sigint) as pool:
        # workers start with SIGINT ignored (inherited through exec, so Python installs no
        # KeyboardInterrupt handler in them): Ctrl-C is one message from this process
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            with _workers_skip_main():  # the workers start here, on submit
                futs = {pool.submit(_convert_task, *args): k for k, args in enumerate(calls)}
        finally:
            signal.signal(signal.SIGINT, previous)
        try:
            for fut in as_completed(futs):
                done(futs[fut], fut.result())
        except BaseException:
            # stop the workers now (they ignore SIGINT), not after their current file; the pool then
            # fails its pending futures as broken. They are not cancelled first: Python 3.11's pool
            # thread sets an exception on each pending future and raised InvalidStateError (printed
            # under "proftab: interrupted") for one cancelled under it
            for proc in list(getattr(pool, "_processes", {}).values()):
                proc.terminate()
            pool.shutdown(wait=True)
            raise


def _reusable(out: Path, paths: list[str], sizes: list[int], ranks: Sequence[int] | None) -> dict[int, dict[str, Any]]:
    """Files of `paths` that the dataset at `out` already holds, converted fine, from the same bytes."""
    manifest = _pq.read_manifest(out)
    if manifest.get("schema_version") != _pq.SCHEMA_VERSION:  # an older layout: convert every file again
        return {}
    by_source = {(r.get("source_file"), r.get("source_bytes")): r for r in manifest["ranks"]}
    reuse: dict[int, dict[str, Any]] = {}
    for i, (p, n) in enumerate(zip(paths, sizes, strict=True)):
        r = by_source.get((p, n))
        if r is not None and (ranks is None or ranks[i] == r["rank"]):
            reuse[i] = r
    return reuse


def _link_rank(old: Path, tmp: Path, entry: dict[str, Any]) -> dict[str, Any]:
    """Hard-link (or copy) a reused rank's part files from the old dataset into `tmp`."""
    rank = int(entry["rank"])
    for table_dir in old.iterdir():
        src = table_dir / f"rank={rank}"
        if table_dir.is_dir() and src.is_dir():
            dest = tmp / table_dir.name / f"rank={rank}"
            dest.mkdir(parents=True, exist_ok=True)
            for part in src.iterdir():
                try:
                    os.link(part, dest / part.name)
                except OSError:
                    shutil.copy2(part, dest / part.name)
    info = {k: entry.get(k) for k in ("source_file", "source_sha256", "source_bytes")}
    return {"rank": rank, "path": entry.get("source_file"), "rank_source": "resumed", "rows": entry["rows"],
            "info": info, "status": "resumed", "error": None, "host": None, "seconds": 0.0, "warnings": [],
            "other_warnings": []}


def _finish(tmp: Path, paths: list[str], results: list[dict[str, Any]], staging: list[Path]) -> None:
    """Warnings, the rank check, staging merged into the dataset, status table, manifest."""
    for res in results:
        for note in res["warnings"]:
            warnings.warn(note, ProftabWarning, stacklevel=3)
        for note, cat in res["other_warnings"]:
            warnings.warn(f"{res['path']}: {cat}: {note}", ProftabWarning, stacklevel=3)
    ok = [res for res in results if res["status"] != "failed"]
    seen: dict[int, dict[str, Any]] = {}
    for res in ok:
        if res["rank"] in seen:
            first = seen[res["rank"]]
            msg = (f"two files claim rank {res['rank']} ({first['path']} and {res['path']}, from "
                   f"{res['rank_source']})")
            raise TraceError(msg, hint="convert them separately, or give each file its rank: "
                                       "pt.convert(..., ranks=[0, 1, ...]) (CLI: --ranks 0,1,...)")
        seen[res["rank"]] = res
    if not ok:
        errors = "; ".join(f"{r['path']}: {r['error']}" for r in results)
        msg = f"every file failed: {errors}"
        raise TraceError(msg)
    for st in staging:
        if not st.exists():
            continue
        # only a single file has one (per-file aggregates do not add up to a multi-rank one)
        derived = st / f"{_pq.DERIVED_KEY_AVERAGES}.parquet"
        if derived.exists():
            os.rename(derived, tmp / derived.name)
        for table_dir in st.iterdir():
            if not table_dir.is_dir():
                continue
            dest = tmp / table_dir.name
            dest.mkdir(exist_ok=True)
            for part in table_dir.iterdir():
                os.rename(part, dest / part.name)
        shutil.rmtree(st)
    status = pl.DataFrame({
        "position": list(range(len(paths))), "source_file": paths,
        "rank": [r.get("rank") for r in results], "status": [r["status"] for r in results],
        "error": [r["error"] for r in results], "host": [r["host"] for r in results],
        "seconds": [float(r["seconds"]) for r in results],
        "source_bytes": [(r.get("info") or {}).get("source_bytes") for r in results],
    }, schema={"position": pl.Int64, "source_file": pl.String, "rank": pl.Int32, "status": pl.String,
               "error": pl.String, "host": pl.String, "seconds": pl.Float64, "source_bytes": pl.Int64})
    status.write_parquet(tmp / _pq.STATUS)
    infos = {res["rank"]: res["info"] for res in ok}
    rows = {res["rank"]: res["rows"] for res in ok}
    manifest = _pq._manifest(infos, rows)
    manifest["summaries"] = sorted(d.name for d in tmp.iterdir() if d.is_dir() and d.name.startswith("summary_"))
    manifest["failed"] = [{"source_file": r["path"], "error": r["error"]} for r in results if r["status"] == "failed"]
    manifest["summary_errors"] = {str(r["rank"]): r["summary_errors"] for r in ok if r.get("summary_errors")}
    (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1))
