"""Parquet datasets under damage (issue 12): atomic, locked writes; damaged datasets raise TraceError."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

import proftab as pt
from proftab.io.dataset import atomic, layout
from tests.conftest import BUNDLED

CNN = BUNDLED / "train_cnn.pt.trace.json.gz"


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("ds") / "ds"
    pt.convert(str(CNN), out, progress=False)
    return out


@pytest.fixture
def copy(dataset: Path, tmp_path: Path) -> Path:
    out = tmp_path / "ds"
    shutil.copytree(dataset, out)
    return out


# 6 ----------------------------------------------------------------------------- atomicity


def test_stale_temporaries_of_a_killed_convert_are_removed(tmp_path: Path) -> None:
    out = tmp_path / "ds"
    stale = tmp_path / ".ds.proftab-tmp-0123456789ab"
    (stale / "events").mkdir(parents=True)
    (tmp_path / ".other.proftab-tmp-0123456789ab").mkdir()  # another output's: not ours to touch
    pt.convert(str(CNN), out, progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == [".other.proftab-tmp-0123456789ab", "ds"]


def test_a_concurrent_write_to_the_same_output_fails(tmp_path: Path) -> None:
    out = tmp_path / "ds"
    with atomic.atomic_dir(out) as tmp:
        (tmp / "x").write_text("1")
        with pytest.raises(pt.ProftabError, match="another proftab process is writing"):
            pt.convert(str(CNN), out, progress=False)
        pt.convert(str(CNN), tmp_path / "other", progress=False)  # a different output is fine
    assert (out / "x").read_text() == "1"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ds", "other"]  # lock file removed


def test_an_interrupted_replace_keeps_the_old_dataset(copy: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    before = pt.scan(copy).collect("events").height

    def interrupted(a: Path, b: Path) -> bool:
        raise KeyboardInterrupt

    monkeypatch.setattr(atomic, "_exchange", interrupted)
    with pytest.raises(KeyboardInterrupt):
        pt.convert(str(CNN), copy, force=True, progress=False)
    assert pt.scan(copy).collect("events").height == before
    assert sorted(p.name for p in copy.parent.iterdir()) == ["ds"]


def test_replace_without_exchange_is_recovered_after_an_interrupt(copy: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    before = pt.scan(copy).collect("events").height
    monkeypatch.setattr(atomic, "_exchange", lambda a, b: False)
    real = os.rename
    calls = []

    def rename(a: object, b: object) -> None:
        calls.append(a)
        if Path(b) == copy and calls and Path(calls[-2] if len(calls) > 1 else a) == copy:
            raise KeyboardInterrupt  # between the two renames of the fallback replace (out -> old, tmp -> out)
        real(a, b)  # type: ignore[arg-type]

    monkeypatch.setattr(atomic.os, "rename", rename)
    with pytest.raises(KeyboardInterrupt):
        pt.convert(str(CNN), copy, force=True, progress=False, max_workers=1)
    monkeypatch.setattr(atomic.os, "rename", real)
    assert not copy.exists()  # the old dataset is set aside...
    with pytest.warns(pt.ProftabWarning, match="restored the dataset"):
        pt.convert(str(CNN), copy, force=True, progress=False)  # ...and the next write restores it first
    assert pt.scan(copy).collect("events").height == before
    assert sorted(p.name for p in copy.parent.iterdir()) == ["ds"]


def test_exchange_swaps_atomically(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    (a / "x").write_text("a")
    b.mkdir()
    (b / "x").write_text("b")
    if not atomic._exchange(a, b):
        pytest.skip("no renameat2(RENAME_EXCHANGE) here")
    assert (a / "x").read_text() == "b" and (b / "x").read_text() == "a"


# 7 ----------------------------------------------------------------------------- damaged datasets


def _part(root: Path, table: str = "events") -> Path:
    return root / table / "rank=0" / "part-0.parquet"


@pytest.mark.parametrize(("damage", "match"), [
    ("delete_part", "part file missing"),
    ("truncate_part", "damaged dataset part file"),
    ("garbage_part", "damaged dataset part file"),
    ("wrong_schema", "lacks columns"),
    ("row_count", "rows, the manifest says"),
    ("garbage_manifest", "manifest is unreadable"),
    ("empty_manifest", "not a valid proftab dataset manifest"),
    ("list_manifest", "not a valid proftab dataset manifest"),
    ("bad_ranks", "lacks an integer 'rank'"),
    ("meta_json", "meta table holds invalid JSON"),
])
def test_a_damaged_dataset_raises_trace_error_naming_the_file(copy: Path, damage: str, match: str) -> None:
    import polars as pl

    part = _part(copy)
    manifest = copy / layout.MANIFEST
    m = json.loads(manifest.read_text())
    if damage == "delete_part":
        part.unlink()
    elif damage == "truncate_part":
        part.write_bytes(part.read_bytes()[: part.stat().st_size // 2])
    elif damage == "garbage_part":
        part.write_bytes(os.urandom(5000))
    elif damage == "wrong_schema":
        pl.DataFrame({"rank": [0], "x": [1]}).write_parquet(part)
    elif damage == "row_count":
        m["ranks"][0]["rows"]["events"] += 1
        manifest.write_text(json.dumps(m))
    elif damage == "garbage_manifest":
        manifest.write_bytes(b"\x00{not json")
    elif damage == "empty_manifest":
        manifest.write_text("{}")
    elif damage == "list_manifest":
        manifest.write_text("[1, 2]")
    elif damage == "bad_ranks":
        m["ranks"] = [{"rank": "zero"}]
        manifest.write_text(json.dumps(m))
    elif damage == "meta_json":
        meta = _part(copy, "meta")
        df = pl.read_parquet(meta).with_columns(meta_json=pl.lit("{broken"))
        df.write_parquet(meta)
    with pytest.raises(pt.TraceError, match=match) as info:
        pt.scan(copy).collect("events")
    assert str(copy) in str(info.value)


def test_a_damaged_page_is_a_trace_error_on_read(copy: Path) -> None:
    part = _part(copy)
    data = bytearray(part.read_bytes())
    for k in range(100, len(data) // 2, 97):  # the column chunks, not the footer
        data[k] ^= 0x5A
    part.write_bytes(bytes(data))
    sc = pt.scan(copy)  # the footer is intact: scan succeeds
    # every 97th byte of the compressed column chunks flipped: decompression fails (this file is
    # the same every run, so this is deterministic; Parquet has no page checksums to rely on)
    with pytest.raises(pt.TraceError, match="cannot read table") as exc:
        sc.collect("events")
    assert str(copy / "events") in str(exc.value)
