"""Parquet datasets: round trip, metadata, atomic writes, parallel convert, lazy scans, CLI."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import polars as pl
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from polars.testing import assert_frame_equal

import proftab as pt
from proftab import ProftabError, ProftabWarning, TraceError
from proftab.io.dataset import read as dataset_read
from proftab.io.dataset import write as dataset_write

ROOT = Path(__file__).resolve().parents[1]
PUBLIC = ROOT / "tests" / "data" / "public"
H100 = ROOT / "data" / "h100_bert_small.pt.trace.json.gz"
CNN = ROOT / "data" / "train_cnn.pt.trace.json.gz"
PAIR = sorted(PUBLIC.glob("trace_filter__sampled_rank-*.json.gz"))
ALEXNET = PUBLIC / "critical_path__alexnet__benchmark_result_2869224_1695835535_trace.json.gz"
MULTITHREAD = ROOT / "tests" / "data" / "torch213" / "multithread" / "trace.json.gz"
TABLES = ("events", "nested", "instants", "flows", "counters", "threads", "rejected", "accounting", "anomalies")

CASES = {
    "h100": [H100],               # GPU, baseTimeNanoseconds, python functions
    "train_cnn": [CNN],           # CPU, [memory] instants, torch 2.13
    "multithread": [MULTITHREAD],  # several host threads
    "alexnet": [ALEXNET],         # epoch-us times, no base
    "hta_pair": PAIR,             # two ranks
}


def _load(paths: list[Path]) -> pt.Trace:
    return pt.load([str(p) for p in paths] if len(paths) > 1 else str(paths[0]))


def _assert_same_trace(a: pt.Trace, b: pt.Trace) -> None:
    for name in TABLES:
        get = (lambda t: t.anomalies) if name == "anomalies" else (lambda t: t.collect(name))  # noqa: B023
        assert_frame_equal(get(a), get(b), check_exact=True, categorical_as_str=True)
    same = ["rank", "source_file", "base_time_ns", "time_resolution_ns", "meta_json"]
    assert_frame_equal(a.files.select(same), b.files.select(same))


@pytest.mark.parametrize("case", list(CASES))
def test_round_trip_tables_meta_and_analyses(case: str, tmp_path: Path) -> None:
    tr = _load(CASES[case])
    out = tr.to_parquet(str(tmp_path / "ds"))
    sc = pt.scan(out)
    assert isinstance(sc, pt.Trace)
    _assert_same_trace(tr, sc)
    assert_frame_equal(sc.with_utc(), tr.with_utc())
    assert_frame_equal(sc.key_averages(), tr.key_averages())
    assert_frame_equal(sc.key_averages(by_step=True), tr.key_averages(by_step=True))
    assert_frame_equal(sc.key_averages(group_by_input_shape=True), tr.key_averages(group_by_input_shape=True))
    assert sc.table(row_limit=20) == tr.table(row_limit=20)
    dev_a, dev_b = tr.device.self_time(), sc.device.self_time()
    if dev_a is not None:
        assert_frame_equal(dev_b, dev_a)
    # a dataset converted from the files equals one written from the loaded trace
    conv = pt.scan(pt.convert([str(p) for p in CASES[case]], tmp_path / "conv", progress=False))
    _assert_same_trace(tr, conv)


def test_scan_is_lazy_until_a_table_is_used(tmp_path: Path) -> None:
    sc = pt.scan(pt.load(str(H100)).to_parquet(str(tmp_path / "ds")))
    text = repr(sc)
    assert "events=2,060" in text and "lazy" in text
    assert sc.is_lazy and all(isinstance(sc.tables[t], pl.LazyFrame) for t in TABLES)  # before any analysis
    assert isinstance(sc.events, pl.LazyFrame) and isinstance(sc.nested, pl.LazyFrame)
    lf = sc.lazy("events")
    kernels = lf.filter(pl.col("cat") == "kernel").select("name", "dur_ns").collect()
    assert_frame_equal(kernels, sc.collect("events").filter(pl.col("cat") == "kernel").select("name", "dur_ns"))
    assert set(sc.lazy("nested").collect_schema()) >= {"parent_id", "depth", "self_ns", "overrun_ns"}
    assert "self_ns" not in sc.lazy("events").collect_schema()
    # a loaded Trace offers the same method
    assert_frame_equal(pt.load(str(H100)).lazy("instants").collect(), sc.collect("instants"))
    with pytest.raises(KeyError, match="no table 'bogus'"):
        sc.lazy("bogus")


def test_file_metadata_versions_base_resolution_sha(tmp_path: Path) -> None:
    out = pt.load(str(H100)).to_parquet(str(tmp_path / "ds"))
    sha = hashlib.sha256(H100.read_bytes()).hexdigest()
    md = pq.read_metadata(out / "events" / "rank=0" / "part-0.parquet").metadata
    info = json.loads(md[b"proftab"])
    assert info["proftab_version"] == pt.__version__
    assert info["schema_version"] == dataset_read.SCHEMA_VERSION
    assert info["baseTimeNanoseconds"] == 1751410836000000000
    assert info["time_resolution_ns"] == 1
    assert info["source_sha256"] == sha
    assert info["table"] == "events" and info["rank"] == 0
    manifest = json.loads((out / "_proftab.json").read_text())
    assert manifest["ranks"][0]["source_sha256"] == sha
    assert manifest["rows"]["events"] == 2060
    meta = pl.read_parquet(out / "meta")
    assert meta["source_sha256"].to_list() == [sha]
    assert json.loads(meta["meta_json"][0])["baseTimeNanoseconds"] == 1751410836000000000
    # an epoch-us trace: no base, resolution 1000 ns
    out2 = pt.load(str(ALEXNET)).to_parquet(str(tmp_path / "ds2"))
    info2 = json.loads(pq.read_metadata(out2 / "flows" / "rank=0" / "part-0.parquet").metadata[b"proftab"])
    assert info2["baseTimeNanoseconds"] is None and info2["base_time_ns"] == 0
    assert info2["time_resolution_ns"] == 1000


def test_plain_pyarrow_dataset_reads_hive_partitions(tmp_path: Path) -> None:
    tr = _load(PAIR)
    out = tr.to_parquet(str(tmp_path / "pair"))
    assert sorted(p.name for p in (out / "events").iterdir()) == ["rank=0", "rank=1"]
    dset = ds.dataset(out / "events", format="parquet", partitioning="hive")
    table = dset.to_table()
    assert table.num_rows == tr.events.height
    by_rank = dset.to_table(filter=ds.field("rank") == 1, columns=["event_id", "start_ns", "self_ns"])
    expect = tr.nested.filter(pl.col("rank") == 1).select("event_id", "start_ns", "self_ns")
    assert_frame_equal(pl.from_arrow(by_rank).sort("event_id"), expect.sort("event_id"))
    # a single file is self-describing: it keeps its rank column
    one = pq.read_table(out / "events" / "rank=1" / "part-0.parquet", columns=["rank"])
    assert set(one.column("rank").to_pylist()) == {1}
    # polars' own hive scan of the directory
    assert pl.scan_parquet(out / "instants", hive_partitioning=True).collect().height == 0
    assert pl.scan_parquet(out / "meta").collect().height == 2


def test_duckdb_reads_the_dataset(tmp_path: Path) -> None:
    duckdb = pytest.importorskip("duckdb")
    out = pt.load(str(H100)).to_parquet(str(tmp_path / "ds"))
    n, total = duckdb.sql(
        f"select count(*), sum(dur_ns) from read_parquet('{out}/events/*/*.parquet', hive_partitioning=true) "
        "where cat = 'kernel'").fetchall()[0]
    ev = pt.load(str(H100)).events.filter(pl.col("cat") == "kernel")
    assert (n, total) == (ev.height, ev["dur_ns"].sum())


def test_existing_output_needs_force_and_force_replaces(tmp_path: Path) -> None:
    tr = pt.load(str(CNN))
    out = tmp_path / "ds"
    tr.to_parquet(str(out))
    with pytest.raises(ProftabError, match="already exists"):
        tr.to_parquet(str(out))
    pt.load(str(H100)).to_parquet(str(out), force=True)
    assert pt.scan(out).collect("events").height == 2060
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ds"]  # no temporary leftovers
    other = tmp_path / "mine"
    other.mkdir()
    (other / "notes.txt").write_text("precious")
    with pytest.raises(ProftabError, match="not a proftab dataset"):
        tr.to_parquet(str(other), force=True)
    assert (other / "notes.txt").read_text() == "precious"


@pytest.mark.parametrize("exc", [RuntimeError, KeyboardInterrupt])
def test_failure_midway_leaves_no_partial_dataset(exc: type[BaseException], tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    tr = _load(PAIR)
    real = dataset_write._write_rank
    calls = []

    def failing(*args, **kwargs):  # the second rank fails after the first was written
        calls.append(1)
        if len(calls) == 2:
            raise exc("interrupted")
        return real(*args, **kwargs)

    monkeypatch.setattr(dataset_write, "_write_rank", failing)
    with pytest.raises(exc):
        tr.to_parquet(str(tmp_path / "new"))
    assert list(tmp_path.iterdir()) == []
    # a forced rewrite that fails keeps the old dataset intact
    monkeypatch.setattr(dataset_write, "_write_rank", real)
    pt.load(str(CNN)).to_parquet(str(tmp_path / "old"))
    calls.clear()
    monkeypatch.setattr(dataset_write, "_write_rank", failing)
    with pytest.raises(exc):
        tr.to_parquet(str(tmp_path / "old"), force=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["old"]
    assert pt.scan(tmp_path / "old").collect("events").height == pt.load(str(CNN)).events.height


def test_convert_errors_leave_nothing(tmp_path: Path) -> None:
    # two files claiming rank 0 (copies of a file with distributedInfo.rank = 0)
    dup = tmp_path / "in"
    dup.mkdir()
    for name in ("a.json.gz", "b.json.gz"):
        (dup / name).write_bytes(PAIR[0].read_bytes())
    with pytest.raises(TraceError, match="two files claim rank 0"):
        pt.convert(str(dup), tmp_path / "out", progress=False, max_workers=1)
    bad = tmp_path / "bad.json"
    bad.write_text('{"traceEvents": [{"ph": "X", "name": "a", "ts": 1, "dur": 2, "pid": 1, "tid": 1}, {"ph": ')
    with pytest.raises(TraceError, match="bad.json"):
        pt.convert([str(bad), str(CNN)], tmp_path / "out", progress=False, max_workers=1)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.json", "in"]


def test_convert_reemits_worker_warnings_and_explicit_ranks(tmp_path: Path) -> None:
    text = gzip.decompress(H100.read_bytes())
    cut = tmp_path / "cut.json"
    cut.write_bytes(text[: len(text) * 2 // 3])
    with pytest.warns(ProftabWarning, match="cut.json"):
        out = pt.convert([str(cut), str(CNN)], tmp_path / "out", salvage=True, ranks=[3, 5], progress=False)
    sc = pt.scan(out)
    assert sc.files["rank"].to_list() == [3, 5]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ProftabWarning)
        ref = pt.load([str(cut), str(CNN)], salvage=True, ranks=[3, 5])
    _assert_same_trace(ref, sc)


def test_progress_bar_on_stderr(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pt.convert([str(p) for p in PAIR], tmp_path / "out", progress="always", max_workers=1)
    err = capsys.readouterr().err
    assert "proftab convert: " in err and "2/2 files" in err
    pt.convert([str(p) for p in PAIR], tmp_path / "out2", progress="auto", max_workers=1)  # small, no tty
    assert capsys.readouterr().err == ""
    with pytest.raises(ProftabError, match="progress must be"):
        pt.convert(str(CNN), tmp_path / "out3", progress="sometimes")


def test_scan_errors(tmp_path: Path) -> None:
    with pytest.raises(ProftabError, match="no such dataset"):
        pt.scan(tmp_path / "missing")
    (tmp_path / "plain").mkdir()
    with pytest.raises(ProftabError, match="not a proftab Parquet dataset"):
        pt.scan(tmp_path / "plain")
    out = pt.load(str(CNN)).to_parquet(str(tmp_path / "ds"))
    manifest = json.loads((out / "_proftab.json").read_text())
    manifest["schema_version"] = dataset_read.SCHEMA_VERSION + 1
    (out / "_proftab.json").write_text(json.dumps(manifest))
    with pytest.raises(ProftabError, match="newer than this proftab"):
        pt.scan(out)


def test_start_utc_for_base_time_and_epoch_traces(tmp_path: Path) -> None:
    h = pt.load(str(H100))
    utc = h.with_utc()
    first = utc.row(0, named=True)
    assert first["start_utc"] == pl.Series([1751410836000000000 + first["start_ns"]]).cast(
        pl.Datetime("ns", "UTC")).item()
    old = pt.load(str(ALEXNET))  # integer-us epoch times, base 0
    assert old.meta["base_time_ns"] == 0
    u = old.with_utc()
    assert (u["start_utc"].cast(pl.Int64) == u["start_ns"]).all()
    assert u["start_utc"].dt.year().unique().to_list() == [2023]
    shifted = old.with_utc(offsets_ns={0: 5_000})
    assert ((shifted["start_utc"].cast(pl.Int64) - u["start_utc"].cast(pl.Int64)) == 5_000).all()
    sc = pt.scan(old.to_parquet(str(tmp_path / "ds")))
    assert_frame_equal(sc.with_utc(offsets_ns={0: 5_000}), shifted)


def test_cli_convert_through_the_entry_point(tmp_path: Path) -> None:
    out = tmp_path / "pair.pq"
    env = dict(os.environ)  # the installed proftab (an editable install in development)
    cmd = [sys.executable, "-m", "proftab", "convert", *map(str, PAIR), str(out)]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert f"wrote {out}" in res.stderr
    _assert_same_trace(_load(PAIR), pt.scan(out))
    again = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    assert again.returncode == 2
    assert again.stderr.startswith("proftab: error:") and "already exists" in again.stderr
    assert "Traceback" not in again.stderr
    forced = subprocess.run([*cmd, "--force", "--quiet", "--workers", "1"], capture_output=True, text=True,
                            timeout=120, env=env, cwd=tmp_path)
    assert forced.returncode == 0 and forced.stderr == ""


def test_stored_key_averages_is_used_only_by_the_same_code(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A single-rank dataset keeps its default key_averages; it is read back (no aggregation)
    only when the code that wrote it is the code reading it, and it equals the computed one."""
    tr = pt.load(CNN)
    computed, text = tr.key_averages(), tr.table()
    out = pt.convert(CNN, tmp_path / "ds", progress=False)
    assert (out / "key_averages.parquet").is_file()
    import proftab.torch

    def boom(*args: object, **kwargs: object) -> None:
        raise AssertionError("aggregated instead of reading the stored table")

    monkeypatch.setattr(proftab.torch, "key_averages_frame", boom)
    sc = pt.scan(out)
    assert_frame_equal(sc.key_averages(), computed)
    assert sc.table() == text
    with pytest.raises(AssertionError, match="aggregated"):
        sc.key_averages(group_by_input_shape=True)  # other options are computed
    monkeypatch.undo()
    # a different fingerprint (older or newer code): recomputed, same result
    stored = pl.read_parquet(out / "key_averages.parquet")
    stored.with_columns(calls=pl.lit(-1, pl.Int64)).write_parquet(
        out / "key_averages.parquet", metadata={"proftab": json.dumps({"fingerprint": "other"})})
    assert_frame_equal(pt.scan(out).key_averages(), computed)


def test_multi_rank_dataset_has_no_stored_key_averages(tmp_path: Path) -> None:
    out = pt.convert([str(p) for p in PAIR], tmp_path / "pair", progress=False)
    assert not (out / "key_averages.parquet").exists()
    assert_frame_equal(pt.scan(out).key_averages(), _load(PAIR).key_averages())


# ----------------------------------------------------------------------------- schema version 1 (issue 25)

V1 = ROOT / "tests" / "data" / "dataset_v1" / "train_cnn.pq"


def test_a_dataset_written_before_the_rename_still_scans(tmp_path: Path) -> None:
    """`tests/data/dataset_v1` was written by proftab before schema version 2: its instants, flows and
    counters store `ts_ns`. It scans with the old name mapped to `start_ns`, and answers as the JSON."""
    assert json.loads((V1 / "_proftab.json").read_text())["schema_version"] == 1
    assert "ts_ns" in pq.read_schema(V1 / "instants" / "rank=0" / "part-0.parquet").names
    old, new = pt.scan(V1), pt.load(CNN)
    for table in ("instants", "flows", "counters"):
        got = old.collect(table)
        assert "start_ns" in got.columns and "ts_ns" not in got.columns
        assert_frame_equal(got.select(new.collect(table).columns), new.collect(table), check_dtypes=False)
    assert old.collect("instants").height == 1358 and old.collect("flows").height == 104
    assert_frame_equal(old.memory.timeline(), new.memory.timeline())
    assert_frame_equal(old.memory.peak(), new.memory.peak())
    # the CLI reads it too, and check finds nothing wrong with it
    from proftab.cli import main

    assert main(["memory", str(V1), "--table", "peak", "--format", "csv", "-o", str(tmp_path / "p.csv")]) == 0
    assert pl.read_csv(tmp_path / "p.csv")["peak_bytes"].to_list() == new.memory.peak()["peak_bytes"].to_list()
    assert main(["check", "--strict", str(V1)]) == 0
    # a newly written dataset is schema version 2 and stores start_ns
    ds_new = new.to_parquet(tmp_path / "v2.pq")
    assert json.loads((ds_new / "_proftab.json").read_text())["schema_version"] == 2
    assert "start_ns" in pq.read_schema(ds_new / "instants" / "rank=0" / "part-0.parquet").names


def test_resume_does_not_reuse_ranks_of_an_older_layout(tmp_path: Path) -> None:
    """`convert --resume` over a version-1 dataset converts every file again (no mixed layouts)."""
    import shutil

    out = tmp_path / "d.pq"
    shutil.copytree(V1, out)
    src = tmp_path / "train_cnn.pt.trace.json.gz"
    src.write_bytes(CNN.read_bytes())
    manifest = json.loads((out / "_proftab.json").read_text())
    manifest["ranks"][0]["source_file"], manifest["ranks"][0]["source_bytes"] = str(src), src.stat().st_size
    (out / "_proftab.json").write_text(json.dumps(manifest))
    pt.convert(src, out, resume=True, progress=False)
    st = pt.scan(out).collect("status")
    assert st["status"].to_list() == ["ok"]  # converted, not "resumed"
    assert json.loads((out / "_proftab.json").read_text())["schema_version"] == 2


def _downgrade_to_v1(root: Path) -> None:
    """Rewrite a dataset in the version-1 layout: the renamed stored columns back to their old names."""
    from proftab.schema import STORED_RENAMES

    for table, renames in STORED_RENAMES[2].items():
        for part in sorted((root / table).glob("rank=*/part-0.parquet")):
            t = pq.read_table(part)
            back = {new: old for old, new in renames.items()}
            pq.write_table(t.rename_columns([back.get(c, c) for c in t.column_names]), part)
    manifest = json.loads((root / "_proftab.json").read_text())
    manifest["schema_version"] = 1
    (root / "_proftab.json").write_text(json.dumps(manifest))


def test_a_converted_version_1_dataset_keeps_its_stored_summaries_usable(tmp_path: Path) -> None:
    """gloo4 converted (with the per-rank summaries), rewritten in the version-1 layout: the stored
    `summary_comm` (`collectives`) and `summary_device` (`activities`) read with today's names, and
    the cross-rank tables equal the JSON's."""
    ranks = sorted((ROOT / "tests" / "data" / "gloo4").glob("rank-*.json.gz"))
    out = pt.convert([str(p) for p in ranks], tmp_path / "g.pq", progress=False)
    _downgrade_to_v1(Path(out))
    assert "collectives" in pq.read_schema(Path(out) / "summary_comm" / "rank=0" / "part-0.parquet").names
    old, new = pt.scan(out), pt.load(ranks)
    assert "summary_comm" in old.tables and "n_collectives" in old.collect("summary_comm").columns
    assert "n_activities" in old.collect("summary_device").columns
    assert_frame_equal(old.ranks.rank_step_comm(), new.ranks.rank_step_comm())
    assert_frame_equal(old.collect("flows"), new.collect("flows"), check_dtypes=False)
