"""Run the C scanner over a trace file or JSON text: the loader's first step, polars-free.

This module imports only the scanner, the decompressor and `proftab.codes`, so `pt.load` can
start scanning while Polars, numpy and the table builders (`proftab.io.kineto`) are imported
on another thread (`proftab.io.files.load`).
"""

from __future__ import annotations

from typing import Any

from proftab.codes import TYPED_ARGS
from proftab.exceptions import TraceError
from proftab.io import _kineto
from proftab.io.kineto.decompress import FileDigest, GzipDamage, raw_chunks, threaded

__all__ = ["MAX_TOKEN_BYTES", "TYPED_SPEC", "scan_bytes", "scan_file", "scan_path"]

#: the largest single JSON value (one event, one top-level value) the scanner holds while it is
#: incomplete; a longer one stops the read with a TraceError (resource bound on hostile input)
MAX_TOKEN_BYTES = int(_kineto.DEFAULT_MAX_TOKEN)
#: the typed columns in first-appearance order (`proftab.schema.TYPED_COLUMNS`' order)
_TYPED_NAMES = list(dict.fromkeys(col for _, col, _ in TYPED_ARGS))
#: the scanner's configuration: (json key, typed column index, ArgKind) per `TYPED_ARGS` entry
TYPED_SPEC = [(k.encode(), _TYPED_NAMES.index(c), kind) for k, c, kind in TYPED_ARGS]


def scan_file(path: str, *, salvage: bool = False) -> dict[str, Any]:
    """Run the C scanner over a file; returns its raw column buffers.

    Reading stops at the scanner's first fatal error (a garbage gzip bomb is not decompressed
    to its end). A damaged gzip stream raises TraceError, or with `salvage` keeps what
    decompressed (`res["gzip_error"]` holds the message). `res["digest"]`: the file's
    `FileDigest`, fed as it was read (on the reading thread, beside decompression).
    """
    parser = _kineto.Parser(TYPED_SPEC, salvage=salvage, max_token=MAX_TOKEN_BYTES)
    digest = FileDigest()
    chunks = threaded(raw_chunks(path, digest, reuse=True))  # each chunk is scanned before the next is taken
    damage = None
    try:
        for chunk in chunks:
            if parser.feed(chunk):
                break  # the scanner has stopped: nothing after this can be kept
    except GzipDamage as exc:
        if not salvage:
            raise TraceError(exc.message, path=path, offset=exc.compressed_offset,
                             hint="pt.load(..., salvage=True) (CLI: --salvage) keeps the events that "
                                  "decompressed") from None
        damage = exc
    finally:
        chunks.close()
    res: dict[str, Any] = parser.finish()
    res["gzip_error"] = None if damage is None else damage.message
    res["digest"] = digest
    return res


def scan_path(path: str, *, salvage: bool = False) -> dict[str, Any]:
    """`scan_file`, with a file that cannot be read as a TraceError naming it."""
    try:
        return scan_file(path, salvage=salvage)
    except OSError as exc:
        msg = f"cannot read the file ({exc.strerror or exc})"
        raise TraceError(msg, path=path) from None


def scan_bytes(data: bytes, *, salvage: bool = False) -> dict[str, Any]:
    """Run the C scanner over JSON text in memory."""
    parser = _kineto.Parser(TYPED_SPEC, salvage=salvage, max_token=MAX_TOKEN_BYTES)
    parser.feed(data)
    res: dict[str, Any] = parser.finish()
    res["gzip_error"] = None
    return res
