"""Running `convert`'s per-file work on Dask, and reading sources through fsspec.

`convert(..., client=...)` submits one task per trace file (read, nest, device attribution,
per-rank summaries, write the rank's Parquet partition) to a `distributed.Client`:

- ``client=Client(...)``: an existing client (left open);
- ``client="tcp://host:8786"``: a scheduler address (a client is opened and closed here);
- ``client="local"``: a `distributed.LocalCluster` on this machine (loopback only, worker
  processes, one thread each; ``n_workers`` of them), closed at the end.

Every worker must see the output directory at the same path (a local disk for a
LocalCluster, a shared file system such as NFS/Lustre on a cluster) and be able to read the
sources: local paths, or any fsspec URL (``s3://``, ``gs://``, ``https://`` ... with the
filesystem package installed on the workers), which a task copies to a local temporary file
before reading. A task that dies with its worker is retried by the scheduler on another worker
(its partial output is removed first); a file that fails is reported in the status table.

Dask is an optional dependency (the ``dask`` extra: ``pip install '.[dask]'`` from a checkout).
"""

from __future__ import annotations

import contextlib
import importlib
import os
import shutil
import tempfile
from typing import TYPE_CHECKING, Any

from proftab.exceptions import ProftabError, TraceError

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence

__all__ = ["dask_client", "expand_urls", "filesystem", "is_url", "local_path", "localized", "run_tasks",
           "source_size"]


def is_url(path: str) -> bool:
    """Whether `path` is a URL (``scheme://...``) rather than a local path."""
    return "://" in path


def local_path(path: str) -> str | None:
    """The local path of a plain path or a ``file://`` URL; None for another URL."""
    if path.startswith("file://"):
        return path[len("file://"):]
    return None if is_url(path) else path


def filesystem(url: str, storage_options: dict[str, Any] | None = None) -> tuple[Any, str]:
    """(fsspec file system, path within it) for `url`; a clear error when it cannot be opened."""
    from proftab._dependencies import import_optional

    fsspec: Any = import_optional("fsspec", extra="dask", what=f"using {url}")
    try:
        fs, path = fsspec.url_to_fs(url, **(storage_options or {}))
    except (ImportError, ValueError) as exc:  # an unknown protocol, or its package is missing
        msg = f"{url}: cannot open this URL's file system ({exc})"
        raise ProftabError(msg) from None
    return fs, str(path).rstrip("/")


def _fs(url: str) -> Any:
    return filesystem(url)[0]


def expand_urls(items: Sequence[str]) -> list[str]:
    """Expand fsspec URLs (globs, directories) into file URLs, sorted; local items unchanged."""
    out: list[str] = []
    for item in items:
        lp = local_path(item)
        if lp is not None:
            out.append(lp)
            continue
        fs = _fs(item)
        proto = item.split("://", 1)[0]
        if any(ch in item for ch in "*?["):
            found = sorted(fs.glob(item))
        elif fs.isdir(item):
            found = sorted(p for p in fs.ls(item, detail=False) if str(p).endswith((".json", ".gz", ".json.gzip")))
        else:
            found = [item]
        if not found:
            msg = "URL matches no files"
            raise TraceError(msg, path=item)
        out.extend(p if "://" in str(p) else f"{proto}://{p}" for p in found)
    return out


def source_size(path: str) -> int:
    """Bytes of a local file or URL."""
    lp = local_path(path)
    if lp is not None:
        return os.path.getsize(lp)
    return int(_fs(path).size(path))


@contextlib.contextmanager
def localized(path: str) -> Iterator[str]:
    """A local path for `path`: itself, or a temporary copy of a remote URL (removed after)."""
    lp = local_path(path)
    if lp is not None:
        yield lp
        return
    d = tempfile.mkdtemp(prefix="proftab-src-")
    try:
        dest = os.path.join(d, os.path.basename(path.rstrip("/")) or "trace.json")
        _fs(path).get(path, dest)
        yield dest
    finally:
        shutil.rmtree(d, ignore_errors=True)


@contextlib.contextmanager
def dask_client(client: Any, n_workers: int | None = None) -> Iterator[Any]:
    """A `distributed.Client` for `client` (a Client, a scheduler address or ``"local"``)."""
    from proftab._dependencies import import_optional

    distributed: Any = import_optional("distributed", extra="dask", what="converting on Dask")
    if isinstance(client, distributed.Client):
        yield client
        return
    if not isinstance(client, str):
        msg = f"client must be a distributed.Client, a scheduler address or 'local', not {client!r}"
        raise ProftabError(msg)
    if client == "local":
        with distributed.LocalCluster(n_workers=n_workers or min(os.cpu_count() or 1, 4), threads_per_worker=1,
                                      processes=True, host="127.0.0.1", dashboard_address=":0") as cluster, \
                distributed.Client(cluster) as c:
            yield c
        return
    with distributed.Client(client) as c:
        yield c


def run_tasks(client: Any, fn: Callable[..., dict[str, Any]], calls: Sequence[tuple[Any, ...]],
              on_done: Callable[[int, dict[str, Any]], None], *, retries: int = 2) -> list[dict[str, Any]]:
    """Run ``fn(*args)`` for every tuple of `calls` on the cluster; results in call order.

    Tasks are pure (``pure=False``: each is run, never deduplicated); a task whose worker dies
    is rescheduled by Dask, and one that raises is retried `retries` times before its error
    propagates.  `on_done(i, result)` is called as each finishes.
    """
    as_completed: Any = importlib.import_module("distributed").as_completed
    tag = f"{os.getpid()}-{id(calls)}"
    futs = [client.submit(fn, *args, pure=False, retries=retries, key=f"proftab-convert-{i}-{tag}")
            for i, args in enumerate(calls)]
    index = {f.key: i for i, f in enumerate(futs)}
    results: list[dict[str, Any]] = [{}] * len(futs)
    try:
        for fut in as_completed(futs):
            i = index[fut.key]
            results[i] = fut.result()
            on_done(i, results[i])
    except BaseException:
        client.cancel(futs)
        raise
    return results
