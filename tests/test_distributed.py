"""`convert(..., client=...)` on a real distributed.LocalCluster (2 worker processes, loopback).

The rank set is tests/data/gloo4 (4 real gloo ranks); the kill test converts 16 copies of it
(explicit ranks) and SIGKILLs a worker while it runs a task.
"""

from __future__ import annotations

import gzip
import os
import shutil
import signal
import threading
import time
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

import proftab as pt

distributed = pytest.importorskip("distributed")

ROOT = Path(__file__).resolve().parents[1]
GLOO4 = sorted((ROOT / "tests" / "data" / "gloo4").glob("rank-*.json.gz"))


@pytest.fixture(scope="module")
def client():
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                                  dashboard_address=":0") as cluster, distributed.Client(cluster) as c:
        yield c


def _same_tables(a: pt.Trace, b: pt.Trace) -> None:
    assert a.files["rank"].to_list() == b.files["rank"].to_list()
    for name in ("events", "nested", "threads", "flows"):
        key = ["rank", "event_id"] if name in ("events", "nested") else None
        x, y = a.collect(name), b.collect(name)
        assert_frame_equal(x.sort(key) if key else x, y.sort(key) if key else y, check_row_order=key is None)


@pytest.mark.slow
def test_convert_on_local_cluster(client, tmp_path: Path) -> None:
    out = pt.convert([str(p) for p in GLOO4], tmp_path / "ds", client=client, progress=False)
    sc, tr = pt.scan(out), pt.load([str(p) for p in GLOO4])
    _same_tables(sc, tr)
    status = sc.collect("status")
    assert status["status"].to_list() == ["ok"] * 4 and status["rank"].to_list() == [0, 1, 2, 3]
    # both workers did work (4 tasks, 2 single-threaded workers)
    assert status["host"].n_unique() >= 1 and status["error"].null_count() == 4
    # cross-rank tables from the stored summaries equal those computed from every event
    assert "summary_calls" in sc.tables and "summary_steps" in sc.tables
    assert_frame_equal(sc.ranks.collective_instances(), tr.ranks.collective_instances())
    assert_frame_equal(sc.ranks.rank_step_comm(), tr.ranks.rank_step_comm())
    assert_frame_equal(sc.ranks.step_times(), tr.ranks.step_times())
    assert_frame_equal(sc.ranks.slowest_ranks(), tr.ranks.slowest_ranks())
    ka = sc.collect("summary_key_averages")
    assert ka["rank"].unique().sort().to_list() == [0, 1, 2, 3]
    one = pt.load(str(GLOO4[2])).key_averages()
    assert_frame_equal(ka.filter(pl.col("rank") == 2).drop("rank"), one)
    # merged over ranks, the summaries give the multi-rank key_averages' counts and times
    keys = ["name", "device_type", "is_user_annotation", "overload_name", "input_shapes", "is_async", "top_level"]
    cols = ["calls", "self_cpu_ns", "cpu_total_ns", "min_ns", "max_ns", "cpu_avg_ns"]
    merged = sc.ranks.key_averages()
    assert merged["ranks"].max() == 4
    assert_frame_equal(merged.select(*keys, *cols).sort(keys), tr.key_averages().select(*keys, *cols).sort(keys))
    dev = sc.collect("summary_device")
    assert dev.height == 0  # CPU-only ranks: no device work
    anomalies = sc.collect("summary_anomalies")
    assert anomalies["count"].sum() == sc.anomalies.height


@pytest.mark.slow
def test_fsspec_urls_failed_file_and_resume(client, tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    for p in GLOO4:
        shutil.copy(p, src / p.name)
    bad = src / "rank-9.json.gz"
    bad.write_bytes(gzip.compress(b'{"traceEvents": [{"ph": "X", "name": "a", "ts": 1, "dur": 2, "pid": 1, "tid"'))
    url_glob = f"file://{src}/rank-*.json.gz"
    out = f"file://{tmp_path}/ds"
    # a damaged file fails alone: the dataset has the others, and says why in its status table
    with pytest.warns(pt.ProftabWarning, match="skipped .*rank-9.json.gz"):
        ds = pt.convert(url_glob, out, client=client, on_error="skip", progress=False)
    with pytest.warns(pt.ProftabWarning, match="a rank is missing: 1 source file"):
        sc = pt.scan(ds)
    assert sc.files["rank"].to_list() == [0, 1, 2, 3]
    status = sc.collect("status").sort("position")
    assert status["status"].to_list() == ["ok", "ok", "ok", "ok", "failed"]
    assert "rank-9.json.gz" in status["source_file"][4] and "TraceError" in status["error"][4]
    # without on_error="skip" the same conversion fails and leaves the dataset as it was
    with pytest.raises(pt.TraceError, match="rank-9"):
        pt.convert(url_glob, out, client=client, force=True, progress=False)
    with pytest.warns(pt.ProftabWarning, match="a rank is missing"):
        assert pt.scan(ds).collect("status").height == 5
    # repaired: --resume converts only that file; the other ranks' parts are reused
    shutil.copy(GLOO4[0], bad)
    ds2 = pt.convert(url_glob, out, client=client, resume=True, on_error="skip", ranks=[0, 1, 2, 3, 9],
                     progress=False)
    sc2 = pt.scan(ds2)
    st2 = sc2.collect("status").sort("position")
    assert st2["status"].to_list() == ["resumed"] * 4 + ["ok"]
    assert sc2.files["rank"].to_list() == [0, 1, 2, 3, 9]
    ref = pt.load([str(p) for p in GLOO4])
    assert_frame_equal(sc2.collect("events").filter(pl.col("rank") < 4).sort("rank", "event_id"),
                       ref.collect("events").sort("rank", "event_id"))


def test_local_process_pool_status_and_skip(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"traceEvents": [{"ph": "X", "name": "a", "ts": 1, "dur": 2, "pid": 1, "tid": 1}, {"ph": ')
    with pytest.warns(pt.ProftabWarning, match="skipped .*bad.json"):
        out = pt.convert([str(bad), str(GLOO4[1])], tmp_path / "ds", on_error="skip", max_workers=1, progress=False)
    with pytest.warns(pt.ProftabWarning, match="a rank is missing"):
        st = pt.scan(out).collect("status")
    assert st["status"].to_list() == ["failed", "ok"] and st["rank"].to_list() == [None, 1]


@pytest.mark.slow
def test_cli_scheduler_address_keep_going_resume(client, tmp_path: Path) -> None:
    from proftab.__main__ import main

    bad = tmp_path / "rank-7.json"
    bad.write_text('{"traceEvents": [{"ph": "X", "name": "a", "ts": 1, "dur": 2, "pid": 1, "tid": 1}, {"ph": ')
    out = tmp_path / "ds"
    args = ["convert", str(GLOO4[0]), str(GLOO4[1]), str(bad), str(out), "--scheduler", client.scheduler.address,
            "-q"]
    assert main([*args, "--keep-going"]) == 1  # written, one file skipped
    with pytest.warns(pt.ProftabWarning, match="a rank is missing"):
        st = pt.scan(out).collect("status")
    assert st["status"].to_list() == ["ok", "ok", "failed"]
    assert main([*args, "--keep-going", "--resume"]) == 1
    with pytest.warns(pt.ProftabWarning, match="a rank is missing"):
        assert pt.scan(out).collect("status")["status"].to_list() == ["resumed", "resumed", "failed"]


def test_resume_continues_a_failed_run(tmp_path: Path) -> None:
    """With resume, finished files survive a failed run in .OUT.proftab-resume and are reused."""
    bad = tmp_path / "rank-2.json"
    bad.write_text('{"traceEvents": [{"ph": "X", "name": "a", "ts": 1, "dur": 2, "pid": 1, "tid": 1}, {"ph": ')
    srcs = [str(GLOO4[0]), str(GLOO4[1]), str(bad)]
    out = tmp_path / "ds"
    with pytest.raises(pt.TraceError, match="rank-2"):
        pt.convert(srcs, out, resume=True, max_workers=1, progress=False)
    ckpt = tmp_path / ".ds.proftab-resume"
    assert not out.exists() and len(list(ckpt.glob(".staging-*/_done.json"))) == 2
    bad.write_bytes(gzip.decompress(GLOO4[2].read_bytes()))  # repaired (new size: converted again)
    pt.convert(srcs, out, resume=True, max_workers=1, progress=False)
    sc = pt.scan(out)
    assert sc.collect("status")["status"].to_list() == ["resumed", "resumed", "ok"]
    assert not ckpt.exists()
    ref = pt.load([str(p) for p in GLOO4[:3]])
    assert_frame_equal(sc.collect("events").sort("rank", "event_id"), ref.collect("events").sort("rank", "event_id"))
    assert_frame_equal(sc.ranks.collective_instances(), ref.ranks.collective_instances())


def test_resume_continues_a_killed_run(tmp_path: Path) -> None:
    """The converting process is SIGKILLed after some files: rerun with resume, only the rest run."""
    import subprocess
    import sys

    n = 8
    srcs = [str(GLOO4[i % 4]) for i in range(n)]
    out = tmp_path / "ds"
    code = ("import sys, proftab as pt; pt.convert(sys.argv[2:], sys.argv[1], resume=True, max_workers=1, "
            f"ranks=list(range({n})), progress=False)")
    env = {**os.environ, "PYTHONPATH": str(Path(pt.__file__).parents[1])}  # the proftab under test, installed or not
    proc = subprocess.Popen([sys.executable, "-c", code, str(out), *srcs], env=env)
    ckpt = tmp_path / ".ds.proftab-resume"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and len(list(ckpt.glob(".staging-*/_done.json"))) < 2 and proc.poll() is None:
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    finished = len(list(ckpt.glob(".staging-*/_done.json")))
    assert 2 <= finished < n and not out.exists()
    pt.convert(srcs, out, resume=True, max_workers=1, ranks=list(range(n)), progress=False)
    st = pt.scan(out).collect("status")["status"].to_list()
    assert st.count("resumed") >= finished and set(st) <= {"resumed", "ok"} and len(st) == n
    heights = pt.scan(out).collect("events", ["rank"]).group_by("rank").len().sort("rank")["len"].to_list()
    ref = [pt.load(str(p)).events.height for p in GLOO4]
    assert heights == [ref[i % 4] for i in range(n)]


@pytest.mark.slow
def test_client_local_starts_and_closes_a_local_cluster(tmp_path: Path) -> None:
    out = pt.convert([str(p) for p in GLOO4[:2]], tmp_path / "ds", client="local", max_workers=1, progress=False)
    assert pt.scan(out).collect("status")["status"].to_list() == ["ok", "ok"]
    with pytest.raises(pt.ProftabError, match="client must be"):
        pt.convert([str(p) for p in GLOO4[:2]], tmp_path / "ds2", client=3, progress=False)
    with pytest.raises(pt.ProftabError, match="cannot open this URL's file system"):
        pt.convert([str(p) for p in GLOO4[:2]], "nosuchproto://bucket/ds", progress=False)


@pytest.mark.slow
def test_a_killed_worker_does_not_lose_files(client, tmp_path: Path) -> None:
    """Last in this module: the cluster's nanny restarts the killed worker."""
    n = 8
    srcs = [str(GLOO4[i % 4]) for i in range(n)]
    c = client
    pids = c.run(os.getpid)
    killed: list[str] = []

    def killer() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not killed:
            for addr, tasks in c.processing().items():
                if tasks and any(str(t).startswith("proftab-convert-") for t in tasks) and addr in pids:
                    os.kill(pids[addr], signal.SIGKILL)
                    killed.append(addr)
                    break
            time.sleep(0.01)

    t = threading.Thread(target=killer)
    t.start()
    try:
        out = pt.convert(srcs, tmp_path / "ds", client=c, ranks=list(range(n)), progress=False)
    finally:
        t.join()
    assert killed, "no worker was running a conversion task when polled"
    sc = pt.scan(out)
    assert sc.files["rank"].to_list() == list(range(n))
    assert sc.collect("status")["status"].to_list() == ["ok"] * n
    heights = sc.collect("events", ["rank"]).group_by("rank").len().sort("rank")["len"].to_list()
    ref = [pt.load(str(p)).events.height for p in GLOO4]
    assert heights == [ref[i % 4] for i in range(n)]
    assert not list(out.glob(".staging-*"))


@pytest.mark.slow
def test_convert_on_the_cluster_to_an_object_store_url(client, tmp_path: Path) -> None:
    """Workers write the ranks under `staging`; the client uploads the dataset, manifest last."""
    fsspec = pytest.importorskip("fsspec")
    url = "memory://proftab-dask-test/gloo4.pq"
    if fsspec.filesystem("memory").exists("/proftab-dask-test"):
        fsspec.filesystem("memory").rm("/proftab-dask-test", recursive=True)
    staging = tmp_path / "staging"
    staging.mkdir()
    assert pt.convert([str(p) for p in GLOO4], url, client=client, progress=False, staging=staging) == url
    assert list(staging.iterdir()) == []  # the local copy is gone after the upload
    sc, tr = pt.scan(url), pt.load([str(p) for p in GLOO4])
    _same_tables(sc, tr)
    assert_frame_equal(sc.ranks.collective_instances(), tr.ranks.collective_instances())
    assert sc.collect("status")["status"].to_list() == ["ok"] * 4
