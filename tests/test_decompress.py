"""gzip inflation: ISA-L when installed, zlib otherwise; both give the same bytes, damage included."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from proftab.io import decompress

DATA = Path(__file__).resolve().parents[1] / "data"


def _all(path: Path) -> tuple[bytes, str | None]:
    out, err = [], None
    try:
        for chunk in decompress.raw_chunks(str(path)):
            out.append(chunk)
    except decompress.GzipDamage as exc:
        err = exc.message
    return b"".join(out), err


@pytest.mark.parametrize("backend", ["isal", "zlib"])
def test_every_backend_gives_the_same_bytes_and_the_same_salvage(backend: str, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    if backend == "isal":
        pytest.importorskip("isal")
        monkeypatch.delenv("PROFTAB_GZIP", raising=False)
    else:
        monkeypatch.setenv("PROFTAB_GZIP", "zlib")
    assert decompress.gzip_backend() == backend
    src = DATA / "train_cnn.pt.trace.json.gz"
    text = gzip.decompress(src.read_bytes())
    assert _all(src) == (text, None)
    # two members concatenated, as `cat a.gz b.gz` writes them
    two = tmp_path / "two.json.gz"
    two.write_bytes(gzip.compress(text[:1000]) + gzip.compress(text[1000:]))
    assert _all(two) == (text, None)
    # a flipped byte in the middle: inflated as zlib inflates it (deflate may decode a damaged block into
    # wrong bytes until the CRC check at the end fails), then the same damage report
    raw = bytearray(src.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    bad = tmp_path / "bad.json.gz"
    bad.write_bytes(bytes(raw))
    monkeypatch.setenv("PROFTAB_GZIP", "zlib")
    expected = _all(bad)
    if backend == "isal":
        monkeypatch.delenv("PROFTAB_GZIP")
    got = _all(bad)
    assert got == expected and got[1] is not None and "corrupt gzip data" in got[1]
