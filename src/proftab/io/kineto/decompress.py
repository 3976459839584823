"""Decompressed chunks of a trace file: gzip by magic bytes, on a helper thread.

Inflation uses Intel ISA-L (`isal`, a default dependency where it has wheels) when it is
installed, about 3x zlib's speed: its C gzip reader inflates straight into the caller's buffers
(the loader cycles a few, so no memory is allocated and faulted in per chunk). zlib is the
fallback, and the exact path for damage: when ISA-L reports a damaged, truncated or
trailing-garbage stream, the file is replayed with zlib, which recovers the intact prefix byte for
byte (`_gzip_prefix`). ``PROFTAB_GZIP=zlib`` forces zlib.

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
if _isal is not None and not hasattr(_isal, "_GzipReader"):  # an isal without its C gzip reader
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

    def update(self, data: bytes | memoryview) -> None:
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


#: `threaded`'s queue: chunks decompressed ahead of the scanner
_QUEUE = 3
#: buffers `raw_chunks(..., reuse=True)` cycles through: one being filled, the queue's, one being
#: scanned, one spare
_RING = _QUEUE + 3


class _FeedingFile:
    """A file whose reads also feed a `FileDigest` (ISA-L's gzip reader pulls its input through it)."""

    def __init__(self, fh: Any, digest: FileDigest | None) -> None:
        self._fh = fh
        self._digest = digest

    def read(self, n: int = -1) -> bytes:
        data: bytes = self._fh.read(n)
        if self._digest is not None:
            self._digest.update(data)
        return data

    def readinto(self, buf: Any) -> int:
        n: int = self._fh.readinto(buf)
        if self._digest is not None and n:
            self._digest.update(memoryview(buf)[:n])
        return n


def _filled(read: Any, ring: list[bytearray], i: int) -> memoryview:
    """Buffer `i` of the ring (allocated on first use) filled by `read` (a readinto) up to CHUNK bytes
    or the end; its filled part."""
    if len(ring) < _RING:
        ring.append(bytearray(CHUNK))
    view = memoryview(ring[i % _RING])
    n = 0
    while n < CHUNK and (k := read(view[n:])):
        n += k
    return view[:n]


def raw_chunks(path: str, digest: FileDigest | None = None, *, reuse: bool = False) -> Iterator[bytes | memoryview]:
    """Yield the decompressed bytes of `path` (gzip detected by magic bytes).

    A damaged gzip stream raises `GzipDamage` after yielding the intact prefix. `digest` is fed
    the file's bytes as they are read (the first pass only; a replay after damage is not fed).

    With `reuse`, the chunks are views of `_RING` buffers filled in turn (a plain file read into
    them, a gzip stream inflated into them by ISA-L): no memory is allocated, and so faulted in,
    per chunk. A chunk is then valid only until `_RING - 1` more were yielded: for a consumer that
    is done with each chunk before it takes the next one through `threaded`.
    """
    with open(path, "rb") as fh:
        head = fh.read(2)
        gzipped = head == b"\x1f\x8b"
        if not gzipped:
            fh.seek(0)
            yield from _plain_chunks(_FeedingFile(fh, digest), reuse=reuse)
            if digest is not None:
                digest.at_end = True
            return
    if gzip_backend() == "zlib":
        yield from _gzip_chunks(path, digest)
        return
    produced = 0
    try:
        for chunk in _isal_chunks(path, digest, reuse=reuse):
            produced += len(chunk)
            yield chunk
        return
    except (_isal.error, EOFError, OSError):
        # damaged, truncated, or trailing bytes that are not a gzip member: zlib decides exactly
        pass
    # damage: replay with zlib, which finds the exact intact prefix; skip what was yielded
    skip = produced
    for chunk in _gzip_chunks(path):
        if skip >= len(chunk):
            skip -= len(chunk)
            continue
        yield chunk[skip:]
        skip = 0


def _plain_chunks(fh: _FeedingFile, *, reuse: bool) -> Iterator[bytes | memoryview]:
    """An uncompressed file in CHUNK pieces (views of reused buffers with `reuse`)."""
    if not reuse:
        while chunk := fh.read(CHUNK):
            yield chunk
        return
    ring: list[bytearray] = []
    i = 0
    while view := _filled(fh.readinto, ring, i):
        yield view
        i += 1


def _isal_chunks(path: str, digest: FileDigest | None, *, reuse: bool) -> Iterator[bytes | memoryview]:
    """The inflated bytes of the gzip file `path`, by ISA-L's gzip reader straight into a ring of
    reused buffers (copied out without `reuse`); concatenated members and zero padding as gzip reads
    them. Its errors (damage, truncation, trailing bytes that are not a member) propagate: `raw_chunks`
    replays the file with zlib then."""
    with open(path, "rb") as fh:
        reader = _isal._GzipReader(_FeedingFile(fh, digest), 1 << 20)
        ring: list[bytearray] = []
        i = 0
        while view := _filled(reader.readinto, ring, i):
            yield view if reuse else bytes(view)
            i += 1
    if digest is not None:
        digest.at_end = True


def _gzip_chunks(path: str, digest: FileDigest | None = None) -> Iterator[bytes]:
    """The bytes zlib inflates from the gzip file `path`, concatenated members included.

    A damaged stream yields its intact prefix (zlib's state can be copied before each call), then
    raises `GzipDamage`. `digest` is fed each compressed block read.
    """
    with open(path, "rb") as fh:
        dec = zlib.decompressobj(wbits=31)
        consumed = 0  # compressed bytes before `raw`
        produced = 0  # decompressed bytes yielded
        while raw := fh.read(1 << 20):
            if digest is not None:
                digest.update(raw)
            data = raw
            while data:
                saved = dec.copy()
                try:
                    out = dec.decompress(data, CHUNK)
                except zlib.error as exc:
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
                    dec = zlib.decompressobj(wbits=31)
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


def threaded(gen: Iterator[bytes | memoryview]) -> Generator[bytes | memoryview, None, None]:
    """Run a chunk generator on a helper thread (zlib releases the GIL)."""
    q: queue.Queue[Any] = queue.Queue(maxsize=_QUEUE)
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
