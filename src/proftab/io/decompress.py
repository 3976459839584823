"""Decompressed chunks of a trace file: gzip by magic bytes, on a helper thread.

Inflation uses Intel ISA-L (`isal`, a default dependency where it has wheels) when it is
installed, about 3x zlib's speed; zlib is the fallback, and the exact path for damage: when
ISA-L reports a damaged stream, the file is replayed with zlib, which recovers the intact
prefix byte for byte (`_gzip_prefix`). ``PROFTAB_GZIP=zlib`` forces zlib.

A damaged gzip stream yields every byte that decompressed before the damage, then raises
`GzipDamage` (the loader raises a TraceError, or with ``salvage=True`` keeps that prefix).
"""

from __future__ import annotations

import hashlib
import os
import queue
import threading
import zlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Generator, Iterator

__all__ = ["CHUNK", "FileDigest", "GzipDamage", "gzip_backend", "raw_chunks", "threaded"]

CHUNK = 8 << 20

_isal: Any
try:
    from isal import isal_zlib as _isal
except ImportError:  # no wheel for this platform: zlib does it all
    _isal = None


def gzip_backend() -> str:
    """The inflater `raw_chunks` uses for a sound stream: ``"isal"`` or ``"zlib"``."""
    return "isal" if _isal is not None and os.environ.get("PROFTAB_GZIP", "").lower() != "zlib" else "zlib"


class GzipDamage(Exception):
    """A damaged gzip stream: everything before `offset` (decompressed bytes) was yielded."""

    def __init__(self, message: str, offset: int, compressed_offset: int) -> None:
        super().__init__(message)
        self.message = message
        self.offset = offset
        self.compressed_offset = compressed_offset


def _gzip_prefix(dec: Any, data: bytes) -> tuple[bytes, int]:
    """The output a decompressor state yields from `data` before its error, and the input used.

    zlib drops the whole output of a call that fails: this replays the failed call in 4 KiB
    steps, then byte by byte, from a copy of the state before it.
    """
    out: list[bytes] = []
    pos = 0
    for step in (4096, 1):
        while pos < len(data):
            before = dec.copy()
            try:
                out.append(dec.decompress(data[pos:pos + step]))
            except zlib.error:
                dec = before
                break
            pos += step
    return b"".join(out), pos


class FileDigest:
    """sha256 of a file's bytes (compressed, as on disk), fed by the reader as it reads them.

    The reader reads the file front to back once: `update` sees each block read, in order, so
    the digest costs no extra read. When reading stops early (the scanner gave up, a damaged
    gzip stream), `hexdigest` reads the unread rest of the file (no decompression).
    """

    def __init__(self) -> None:
        self._h = hashlib.sha256()
        self.n_bytes = 0
        self.at_end = False
        """the reader fed every byte up to the end of the file"""

    def update(self, data: bytes) -> None:
        """Feed the next block of the file."""
        self._h.update(data)  # hashlib releases the GIL for blocks over 2 KiB
        self.n_bytes += len(data)

    def hexdigest(self, path: str) -> str | None:
        """The digest of the whole file `path` (its unread rest is read here); None when that
        rest cannot be read (a pipe)."""
        if not self.at_end:
            try:
                with open(path, "rb") as fh:
                    fh.seek(self.n_bytes)
                    while block := fh.read(1 << 22):
                        self.update(block)
            except OSError:
                return None
        return self._h.hexdigest()


def raw_chunks(path: str, digest: FileDigest | None = None) -> Iterator[bytes]:
    """Yield the decompressed bytes of `path` (gzip detected by magic bytes).

    A damaged gzip stream raises `GzipDamage` after yielding the intact prefix. `digest` is fed
    the file's bytes as they are read (the first pass only; a replay after damage is not fed).
    """
    with open(path, "rb") as fh:
        head = fh.read(2)
        gzipped = head == b"\x1f\x8b"
        if not gzipped:
            chunk = head + fh.read(CHUNK - len(head))
            while chunk:
                if digest is not None:
                    digest.update(chunk)
                yield chunk
                chunk = fh.read(CHUNK)
            if digest is not None:
                digest.at_end = True
            return
    if gzip_backend() == "zlib":
        yield from _gzip_chunks(path, zlib, exact=True, digest=digest)
        return
    produced = 0
    try:
        for chunk in _gzip_chunks(path, _isal, exact=False, digest=digest):
            produced += len(chunk)
            yield chunk
        return
    except _isal.error:
        pass
    # damage: replay with zlib, which finds the exact intact prefix; skip what was yielded
    skip = produced
    for chunk in _gzip_chunks(path, zlib, exact=True):
        if skip >= len(chunk):
            skip -= len(chunk)
            continue
        yield chunk[skip:]
        skip = 0


def _gzip_chunks(path: str, inflater: Any, *, exact: bool, digest: FileDigest | None = None) -> Iterator[bytes]:
    """The inflated bytes of the gzip file `path`, concatenated members included.

    `inflater` is `zlib` or `isal_zlib`. With `exact` (zlib: its state can be copied) a
    damaged stream yields its intact prefix, then raises `GzipDamage`; otherwise the
    inflater's own error propagates. `digest` is fed each compressed block read.
    """
    with open(path, "rb") as fh:
        dec = inflater.decompressobj(wbits=31)
        consumed = 0  # compressed bytes before `raw`
        produced = 0  # decompressed bytes yielded
        while raw := fh.read(1 << 20):
            if digest is not None:
                digest.update(raw)
            data = raw
            while data:
                saved = dec.copy() if exact else None
                try:
                    out = dec.decompress(data, CHUNK)
                except zlib.error as exc:
                    if saved is None:
                        raise
                    good, used = _gzip_prefix(saved, data[:CHUNK])
                    if good:
                        produced += len(good)
                        yield good
                    where = consumed + len(raw) - len(data) + used
                    msg = f"corrupt gzip data ({exc}) after {produced} decompressed bytes"
                    raise GzipDamage(msg, produced, where) from None
                if out:
                    produced += len(out)
                    yield out
                if dec.eof:  # concatenated gzip members: continue with the rest
                    data = dec.unused_data
                    dec = inflater.decompressobj(wbits=31)
                    if not data.strip(b"\x00"):
                        data = b""
                    continue
                data = dec.unconsumed_tail
            consumed += len(raw)
        if digest is not None:
            digest.at_end = True
        tail = dec.flush()
        if tail:
            yield tail
        if not dec.eof and consumed:
            yield b""  # a truncated gzip stream: the JSON scanner reports the truncation itself


def threaded(gen: Iterator[bytes]) -> Generator[bytes, None, None]:
    """Run a chunk generator on a helper thread (zlib releases the GIL)."""
    q: queue.Queue[Any] = queue.Queue(maxsize=3)
    stop = threading.Event()

    def work() -> None:
        try:
            for item in gen:
                if stop.is_set():
                    return
                q.put(item)
            q.put(None)
        except BaseException as exc:  # noqa: BLE001 - re-raised on the consumer side
            q.put(exc)
        finally:  # a reader stopped early closes its file here, not at garbage collection
            close = getattr(gen, "close", None)
            if close is not None:
                close()

    t = threading.Thread(target=work, daemon=True)
    t.start()
    try:
        while True:
            item = q.get()
            if item is None:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        while t.is_alive():
            try:
                q.get_nowait()
            except queue.Empty:
                t.join(0.01)
