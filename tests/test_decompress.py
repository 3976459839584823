"""gzip inflation: ISA-L when installed, zlib otherwise; both give the same bytes, damage included."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from proftab.io.kineto import decompress

DATA = Path(__file__).resolve().parents[1] / "data"


def _all(path: Path, *, reuse: bool = False) -> tuple[bytes, str | None]:
    out, err = [], None
    try:
        for chunk in decompress.raw_chunks(str(path), reuse=reuse):
            out.append(bytes(chunk))
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


@pytest.mark.parametrize("reuse", [False, True])
def test_reused_buffers_and_every_ending_agree_with_zlib(reuse: bool, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The loader's way (ISA-L's reader inflating into a ring of reused buffers, 4 KiB chunks here so
    that the ring turns over many times) gives zlib's bytes and damage report for every ending: sound,
    two members, zero padding, trailing garbage (a damage report: the ISA-L stream reader used to
    ignore it), truncated, a flipped byte; and a plain file read into the ring."""
    pytest.importorskip("isal")
    monkeypatch.setattr(decompress, "CHUNK", 4096)
    text = gzip.decompress((DATA / "train_cnn.pt.trace.json.gz").read_bytes())
    gz = gzip.compress(text)
    flipped = bytearray(gz)
    flipped[len(gz) // 2] ^= 0xFF
    endings = {"sound": gz, "two": gzip.compress(text[:5000]) + gzip.compress(text[5000:]),
               "zeros": gz + bytes(700), "garbage": gz + b"garbage!", "truncated": gz[: len(gz) // 2],
               "flipped": bytes(flipped)}
    for name, blob in endings.items():
        f = tmp_path / f"{name}.json.gz"
        f.write_bytes(blob)
        monkeypatch.setenv("PROFTAB_GZIP", "zlib")
        expected = _all(f)
        monkeypatch.delenv("PROFTAB_GZIP")
        assert _all(f, reuse=reuse) == expected, name
    assert _all(tmp_path / "garbage.json.gz", reuse=reuse)[1] is not None
    plain = tmp_path / "plain.json"
    plain.write_bytes(text)
    assert _all(plain, reuse=reuse) == (text, None)
