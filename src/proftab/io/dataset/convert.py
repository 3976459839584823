"""Converting trace files into one Parquet dataset, in a local process pool or on Dask.

Each file is read through the reader seam (`proftab.io.readers.open_trace`), nested and written
as its own rank partition in a staging directory (`_convert_one`, retryable as `_convert_task`)
with what the analyses add to it (`proftab.io.dataset.write.Derived`, computed by the `derive`
function the caller passes: io imports no analysis). The dataset appears at `out` only when the
conversion finished (`atomic.atomic_dir`), with a per-file status table. The public entry point
is `proftab.convert` (`proftab.pipeline`).
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
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl

from proftab.exceptions import ProftabError, ProftabWarning, SkippedFileWarning, TraceError
from proftab.io.dataset.atomic import atomic_dir
from proftab.io.dataset.layout import DONE_MARKER, MANIFEST, STATUS, SUMMARY_PREFIX, is_dataset
from proftab.io.dataset.read import DERIVED_KEY_AVERAGES, SCHEMA_VERSION, read_manifest
from proftab.io.dataset.write import (
    _files_row,
    _manifest,
    _split_by_rank,
    _write_rank,
    write_key_averages,
    write_summaries,
)
from proftab.meta import file_meta, files_frame
from proftab.progress import Progress

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence

    from proftab.io.dataset.write import Derive

__all__ = ["convert_files"]


def _convert_one(path: str, position: int, rank: int | None, salvage: bool, staging: str, derive: Derive, *,
                 key_averages: bool = False, summaries: bool = True) -> dict[str, Any]:
    """Read one trace file (a local path or an fsspec URL), nest it and write its rank
    partition under `staging`, with what `derive` adds (its `key_averages()` when
    `key_averages`: the single-file case; the rank's summaries when `summaries`).

    Runs in a worker process (or a Dask task) for multi-file conversions; the file's warnings
    are returned as text so that the parent re-emits them.
    """
    from proftab.io.dataset.distributed import localized
    from proftab.io.readers import ReadOptions, open_trace

    with warnings.catch_warnings(record=True) as caught, localized(path) as local:
        warnings.simplefilter("always", ProftabWarning)
        options = ReadOptions(salvage=salvage, ranks=None if rank is None else [rank], first_position=position)
        tr = open_trace(local, options, kinds=("kineto",))
        rank = int(tr.files["rank"][0])
        meta = file_meta(tr.files)
        if local != path:
            meta["source_file"] = path
        derived = derive(tr, key_averages=key_averages, summaries=summaries)
        tables = _split_by_rank(tr, derived.anomalies)[rank]
        sha, size = tr.files["source_sha256"][0], os.path.getsize(local)  # hashed while it was read
        rows = _write_rank(Path(staging), rank, tables, meta, _files_row(files_frame({rank: meta}), rank, sha, size))
        if derived.key_averages is not None:
            write_key_averages(Path(staging), derived.key_averages)
        write_summaries(Path(staging), rank, derived.summaries)
    return {"rank": rank, "summary_errors": derived.summary_errors, "path": path, "rank_source": meta["rank_source"],
            "rows": rows,
            "info": {"source_file": meta.get("source_file"), "source_sha256": sha, "source_bytes": size},
            "warnings": [str(w.message) for w in caught if issubclass(w.category, ProftabWarning)],
            "other_warnings": [(str(w.message), w.category.__name__) for w in caught
                               if not issubclass(w.category, ProftabWarning)]}


def _convert_task(path: str, position: int, rank: int | None, salvage: bool, staging: str, key_averages: bool,
                  summaries: bool, on_error: str, derive: Derive) -> dict[str, Any]:
    """`_convert_one` as a retryable task.

    The staging directory is cleaned first (a retry after a worker died); with
    ``on_error="skip"`` a failure is returned as a status instead of raised.
    """
    import socket

    t0 = time.monotonic()
    shutil.rmtree(staging, ignore_errors=True)
    host = f"{socket.gethostname()}:{os.getpid()}"
    try:
        res = _convert_one(path, position, rank, salvage, staging, derive, key_averages=key_averages,
                           summaries=summaries)
    except Exception as e:
        shutil.rmtree(staging, ignore_errors=True)
        if on_error == "raise":
            raise
        return {"path": path, "status": "failed", "error": f"{type(e).__name__}: {e}", "host": host,
                "seconds": time.monotonic() - t0, "warnings": [], "other_warnings": []}
    out = {**res, "status": "ok", "error": None, "host": host, "seconds": time.monotonic() - t0}
    (Path(staging) / DONE_MARKER).write_text(json.dumps(out))  # written last: the partition is complete
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


def convert_files(sources: str | os.PathLike[str] | Sequence[str | os.PathLike[str]], out: str | os.PathLike[str], *,
                  derive: Derive, force: bool = False, progress: bool | str = "auto", salvage: bool = False,
                  ranks: Sequence[int] | None = None, max_workers: int | None = None, client: Any = None,
                  on_error: str = "raise", resume: bool = False, summaries: bool = True,
                  storage_options: dict[str, Any] | None = None, staging: str | os.PathLike[str] | None = None,
                  ) -> Path | str:
    """Convert trace files into one Parquet dataset at `out`, with what `derive` adds to each rank.

    `proftab.convert` (`proftab.pipeline.convert`) documents the other arguments, what is
    returned and raised.
    """
    from proftab.io.dataset.distributed import local_path, source_size

    if on_error not in ("raise", "skip"):
        msg = f"on_error must be 'raise' or 'skip', not {on_error!r}"
        raise ProftabError(msg)
    out_local = local_path(os.fspath(out))
    if out_local is None:  # an object store: convert locally, then upload
        return _convert_to_url(sources, os.fspath(out), derive=derive, force=force, resume=resume,
                               storage_options=storage_options, staging=staging, progress=progress, salvage=salvage,
                               ranks=ranks, max_workers=max_workers, client=client, on_error=on_error,
                               summaries=summaries)
    out = Path(out_local)
    paths = _source_paths(sources)
    if ranks is not None and len(ranks) != len(paths):
        msg = f"ranks has {len(ranks)} entries for {len(paths)} files"
        raise TraceError(msg)
    plan = _Plan.make(out, paths, [source_size(p) for p in paths], ranks, salvage, resume=resume)
    bar = Progress([paths[i] for i in plan.todo], progress, title="proftab convert", poll=False)
    with atomic_dir(out, force=force or bool(resume)) as tmp:
        stage_dirs = plan.staging_dirs(tmp)
        for i, res in plan.reuse.items():
            plan.results[i] = _link_rank(out, tmp, res)
        single = len(paths) == 1
        calls = [(paths[i], i, None if ranks is None else ranks[i], salvage, str(stage_dirs[i]), single, summaries,
                  on_error, derive) for i in plan.todo]
        bar.show("starting")

        def done(k: int, res: dict[str, Any]) -> None:
            i = plan.todo[k]
            plan.results[i] = res
            bar.file_done(plan.sizes[i], os.path.basename(paths[i]))

        try:
            _run(calls, done, client=client, max_workers=max_workers)
        finally:
            bar.close()
        _finish(tmp, paths, plan.results, stage_dirs)
    if plan.checkpoint is not None:
        shutil.rmtree(plan.checkpoint, ignore_errors=True)
    for res in plan.results:  # on_error="skip": name every file left out
        if res.get("status") == "failed":
            warnings.warn(SkippedFileWarning(
                f"skipped {res['path']}: {res['error']} (not in {out}; its _status.parquet says why)",
                str(res["path"])), stacklevel=3)
    return out


def _convert_to_url(sources: str | os.PathLike[str] | Sequence[str | os.PathLike[str]], url: str, *, derive: Derive,
                    force: bool, resume: bool, storage_options: dict[str, Any] | None,
                    staging: str | os.PathLike[str] | None, **options: Any) -> str:
    """`convert_files` into an object store: converted under `staging`, then uploaded (`remote`)."""
    from proftab.io.dataset.remote import remote_output

    if resume:
        msg = (f"{url}: resume needs a file-system output (an object store has no rename to resume into); "
               "convert to a local or shared path with resume, then convert or copy that to the URL")
        raise ProftabError(msg)
    with remote_output(url, force=force, storage_options=storage_options, staging=staging) as local:
        convert_files(sources, local, derive=derive, **options)
    return url


def _source_paths(sources: str | os.PathLike[str] | Sequence[str | os.PathLike[str]]) -> list[str]:
    """The trace files `sources` names: local paths, or fsspec URLs (globs and directories expanded)."""
    from proftab.io.dataset.distributed import expand_urls, is_url, local_path
    from proftab.io.files import expand_sources

    items = [os.fspath(sources)] if isinstance(sources, str | os.PathLike) else [os.fspath(x) for x in sources]
    if any(is_url(i) and local_path(i) is None for i in items):
        return expand_urls(items)
    return expand_sources([local_path(i) or i for i in items])


@dataclass
class _Plan:
    """Which files a conversion converts, and which it takes from before.

    With `resume`, the ranks an existing dataset at `out` holds from unchanged files are reused
    (`reuse`), and finished files are kept in a checkpoint directory next to `out` until the
    dataset is complete: a failed or killed run continues from them when rerun with resume.
    """

    sizes: list[int]
    keys: list[str]
    reuse: dict[int, dict[str, Any]]
    checkpoint: Path | None
    results: list[dict[str, Any]] = field(default_factory=list)
    todo: list[int] = field(default_factory=list)

    @classmethod
    def make(cls, out: Path, paths: list[str], sizes: list[int], ranks: Sequence[int] | None, salvage: bool, *,
             resume: bool) -> _Plan:
        """The plan for converting `paths` into `out`."""
        reuse = _reusable(out, paths, sizes, ranks) if resume and is_dataset(out) else {}
        ckpt = out.parent / f".{out.name}.proftab-resume" if resume else None
        if ckpt is not None:
            ckpt.mkdir(parents=True, exist_ok=True)
        keys = [_source_key(paths[i], sizes[i], None if ranks is None else ranks[i], salvage)
                for i in range(len(paths))]
        plan = cls(sizes, keys, reuse, ckpt, results=[{}] * len(paths))
        done_before: set[int] = set()
        if ckpt is not None:
            for i in range(len(paths)):
                marker = ckpt / f".staging-{keys[i]}" / DONE_MARKER
                if i not in reuse and marker.is_file():
                    plan.results[i] = {**json.loads(marker.read_text()), "status": "resumed"}
                    done_before.add(i)
        plan.todo = [i for i in range(len(paths)) if i not in reuse and i not in done_before]
        return plan

    def staging_dirs(self, tmp: Path) -> list[Path]:
        """Each file's staging directory: in the checkpoint (kept across runs), else in `tmp`."""
        if self.checkpoint is None:
            return [tmp / f".staging-{i}" for i in range(len(self.keys))]
        return [self.checkpoint / f".staging-{key}" for key in self.keys]


def _run(calls: list[tuple[Any, ...]], done: Callable[[int, dict[str, Any]], None], *, client: Any,
         max_workers: int | None) -> None:
    """The per-file tasks on Dask (`client`), else in this process or a spawn process pool."""
    if client is not None and calls:
        from proftab.io.dataset.distributed import dask_client, run_tasks

        with dask_client(client, max_workers) as c:
            run_tasks(c, _convert_task, calls, done)
    else:
        _run_local(calls, done, max_workers)


def _source_key(path: str, size: int, rank: int | None, salvage: bool) -> str:
    """A file's identity for the resume checkpoint: path, size, rank, salvage and the schema version."""
    return hashlib.sha256(json.dumps([path, size, rank, salvage, SCHEMA_VERSION]).encode()).hexdigest()[:16]


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
    manifest = read_manifest(out)
    if manifest.get("schema_version") != SCHEMA_VERSION:  # an older layout: convert every file again
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
            warnings.warn(note, ProftabWarning, stacklevel=4)
        for note, cat in res["other_warnings"]:
            warnings.warn(f"{res['path']}: {cat}: {note}", ProftabWarning, stacklevel=4)
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
        derived = st / f"{DERIVED_KEY_AVERAGES}.parquet"
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
    status.write_parquet(tmp / STATUS)
    infos = {res["rank"]: res["info"] for res in ok}
    rows = {res["rank"]: res["rows"] for res in ok}
    manifest = _manifest(infos, rows)
    manifest["summaries"] = sorted(d.name for d in tmp.iterdir() if d.is_dir() and d.name.startswith(SUMMARY_PREFIX))
    manifest["failed"] = [{"source_file": r["path"], "error": r["error"]} for r in results if r["status"] == "failed"]
    manifest["summary_errors"] = {str(r["rank"]): r["summary_errors"] for r in ok if r.get("summary_errors")}
    (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1))
