"""Atomic, locked replacement of an output directory (used by `to_parquet` and `convert`).

Everything is written into a hidden sibling ``.NAME.proftab-tmp-*`` directory that replaces
the output at the end. One writer per output holds ``.NAME.proftab-lock``; under it, stale
temporaries of killed writers are removed and a dataset an interrupted replace set aside is
restored. The replace itself is one ``renameat2(RENAME_EXCHANGE)`` where Linux offers it.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import sys
import uuid
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

from proftab.exceptions import ProftabError, ProftabWarning
from proftab.io.dataset.layout import is_dataset

if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = ["atomic_dir"]


def _lock(out: Path) -> int:
    """Take the exclusive write lock of `out` (a hidden lock file next to it); returns its fd.

    The lock file is removed on release; a waiter that locked a removed file retries, so two
    writers never both believe they hold the lock.
    """
    path = out.parent / f".{out.name}.proftab-lock"
    try:
        import fcntl
    except ImportError:  # not POSIX: no lock (the writes stay atomic)
        return os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            msg = f"{out}: another proftab process is writing this output (lock {path})"
            raise ProftabError(msg) from None
        try:
            same = os.stat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            return fd
        os.close(fd)  # the holder released (and removed) it between our open and flock


def _unlock(out: Path, fd: int) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(out.parent / f".{out.name}.proftab-lock")
    os.close(fd)


def _recover(out: Path) -> None:
    """Under the lock: restore a dataset left aside by an interrupted replace; drop stale temporaries."""
    olds = sorted(out.parent.glob(f".{out.name}.proftab-old-*"), key=lambda p: p.stat().st_mtime)
    if olds and not (out.exists() or out.is_symlink()) and is_dataset(olds[-1]):
        os.rename(olds[-1], out)
        warnings.warn(f"{out}: restored the dataset an interrupted replace had set aside", ProftabWarning,
                      stacklevel=4)
        olds = olds[:-1]
    for stale in [*olds, *out.parent.glob(f".{out.name}.proftab-tmp-*")]:
        if stale.is_dir() and not stale.is_symlink():
            shutil.rmtree(stale, ignore_errors=True)
        else:
            stale.unlink(missing_ok=True)


def _exchange(a: Path, b: Path) -> bool:
    """Atomically swap two paths (Linux renameat2 RENAME_EXCHANGE); False where unsupported."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    try:
        fn = ctypes.CDLL(None, use_errno=True).renameat2
    except AttributeError:  # glibc < 2.28, musl
        return False
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    at_fdcwd, rename_exchange = -100, 2
    if fn(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP):  # file system without exchange
        return False
    raise OSError(err, os.strerror(err), str(b))


def _replace(tmp: Path, out: Path) -> None:
    """Put `tmp` at `out`; at every instant `out` is the old or the new dataset."""
    if _exchange(tmp, out):
        old = tmp  # now holds the previous output
    else:
        # two renames: an interrupt between them leaves the old dataset aside, where the next
        # write to `out` (under the lock) restores it
        old = out.parent / f".{out.name}.proftab-old-{uuid.uuid4().hex[:12]}"
        os.rename(out, old)
        os.rename(tmp, out)
    if old.is_dir() and not old.is_symlink():
        shutil.rmtree(old, ignore_errors=True)
    else:
        old.unlink()


@contextlib.contextmanager
def atomic_dir(out: str | os.PathLike[str], *, force: bool = False) -> Iterator[Path]:
    """Yield a fresh temporary directory that replaces `out` when the block succeeds.

    On an exception (including KeyboardInterrupt) the temporary directory is removed and
    `out` is left as it was. One writer per output at a time (a lock next to it: a second
    concurrent write fails); temporaries a killed writer left behind are removed, and a
    dataset an interrupted replace set aside is restored.
    """
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fd = _lock(out)
    try:
        _recover(out)
        if out.exists() or out.is_symlink():
            if not force:
                msg = f"{out}: output already exists (Hint: pass force=True, CLI --force, to replace it)"
                raise ProftabError(msg)
            if out.is_dir() and not is_dataset(out) and any(out.iterdir()):
                msg = f"{out}: refusing to replace a non-empty directory that is not a proftab dataset"
                raise ProftabError(msg)
        tmp = out.parent / f".{out.name}.proftab-tmp-{uuid.uuid4().hex[:12]}"
        tmp.mkdir()
        try:
            yield tmp
            if out.exists() or out.is_symlink():
                _replace(tmp, out)
            else:
                os.rename(tmp, out)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    finally:
        _unlock(out, fd)
