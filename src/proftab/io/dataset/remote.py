"""Datasets on object stores and other fsspec file systems (``s3://``, ``gs://``, ``memory://`` ...).

Object stores have no atomic rename, so a dataset for a URL is written to a local temporary
directory first (or under `staging`) exactly as a local one, then uploaded file by file with its
manifest last: a reader that finds the manifest finds every file the manifest lists, and a
dataset whose upload stopped has no manifest, which `scan` reports as such. Replacing one
(`force`) deletes the old files first, so during the upload there is no dataset at the URL.

`proftab.scan` reads a URL dataset through pyarrow's dataset layer over the fsspec file system
(`polars.scan_pyarrow_dataset`): projections and simple predicates are pushed down, so a query
reads only the column chunks and row groups it needs. `storage_options` go to fsspec
(``fsspec.url_to_fs(url, **storage_options)``: credentials, ``client_kwargs={"endpoint_url": ...}``
for s3fs, and so on), the same keys that Dask and pandas take.

fsspec (the ``dask`` extra: ``pip install '.[dask]'`` from a checkout) and the file system's own
package (s3fs, gcsfs, adlfs...) are needed for URLs; local paths and ``file://`` URLs never come here.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from proftab.exceptions import ProftabError
from proftab.io.dataset.distributed import filesystem, local_path
from proftab.io.dataset.layout import MANIFEST

if TYPE_CHECKING:
    from collections.abc import Iterator


__all__ = ["has_files", "is_remote", "remote_output", "upload_dataset"]


def is_remote(path: str | os.PathLike[str]) -> bool:
    """Whether `path` is a URL that is not a local path (``file://`` is local)."""
    return local_path(os.fspath(path)) is None


def has_files(fs: Any, path: str) -> bool:
    """Whether `path` is a file, or a directory with files under it."""
    try:
        return bool(fs.isfile(path) or (fs.isdir(path) and fs.find(path)))
    except FileNotFoundError:
        return False


def upload_dataset(local: Path, url: str, *, force: bool = False,
                   storage_options: dict[str, Any] | None = None) -> str:
    """Copy the finished dataset directory `local` to `url`, its manifest last; returns `url`.

    Raises ProftabError when `url` holds files (without `force`, which deletes them first).
    """
    fs, root = filesystem(url, storage_options)
    if has_files(fs, root):
        if not force:
            msg = f"{url} exists (force=True / --force replaces it)"
            raise ProftabError(msg)
        fs.rm(root, recursive=True)
    files = sorted(p for p in local.rglob("*") if p.is_file() and p.name != MANIFEST)
    dests = [f"{root}/{p.relative_to(local).as_posix()}" for p in files]
    try:
        # one call for every file: asynchronous file systems (s3fs, gcsfs) upload them concurrently;
        # object stores have no directories to create (a makedirs per directory was a request each)
        fs.put([str(p) for p in files], dests)
        fs.put_file(str(local / MANIFEST), f"{root}/{MANIFEST}")  # last: the dataset is complete
    except OSError as exc:
        msg = (f"{url}: the upload stopped ({type(exc).__name__}: {exc}); the URL holds no manifest, so "
               "it is not a dataset (rerun with force=True / --force)")
        raise ProftabError(msg) from None
    return url


@contextlib.contextmanager
def remote_output(url: str, *, force: bool = False, storage_options: dict[str, Any] | None = None,
                  staging: str | os.PathLike[str] | None = None) -> Iterator[Path]:
    """A local directory path to write a dataset into; uploaded to `url` when the block succeeds.

    The local copy is removed in every case. `url` is checked first, so that a conversion is not
    run for an upload that would be refused.
    """
    fs, root = filesystem(url, storage_options)
    if not force and has_files(fs, root):
        msg = f"{url} exists (force=True / --force replaces it)"
        raise ProftabError(msg)
    tmp = Path(tempfile.mkdtemp(prefix="proftab-upload-", dir=staging))
    try:
        local = tmp / "dataset"
        yield local
        upload_dataset(local, url, force=force, storage_options=storage_options)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
