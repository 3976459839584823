"""Datasets on object stores (issue 16): convert uploads with the manifest last, scan reads lazily.

fsspec's in-memory file system (``memory://``) stands in for an object store: it has no atomic
rename either, and every write and read goes through the same fsspec calls as s3fs or gcsfs.
An S3 round trip against a local moto server runs where moto and s3fs are installed.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal

import proftab as pt
from proftab.exceptions import ProftabError
from proftab.io.dataset.layout import MANIFEST
from tests.conftest import BUNDLED

fsspec = pytest.importorskip("fsspec")

CNN = BUNDLED / "train_cnn.pt.trace.json.gz"
GLOO = sorted((BUNDLED.parent / "tests" / "data" / "gloo4").glob("rank-*.json.gz"))


def _url() -> str:
    return f"memory://proftab-tests/{uuid.uuid4().hex}/ds"


def test_convert_to_a_url_then_scan_it_equals_the_local_dataset(tmp_path: Path) -> None:
    url = _url()
    assert pt.convert([str(CNN)], url, progress=False) == url
    fs = fsspec.filesystem("memory")
    root = url.removeprefix("memory://")
    assert fs.isfile(f"{root}/{MANIFEST}")
    remote = pt.scan(url)
    local = pt.scan(pt.convert([str(CNN)], tmp_path / "local", progress=False))
    assert remote.is_lazy
    for table in ("events", "nested", "instants", "flows", "threads", "accounting"):
        assert_frame_equal(remote.collect(table), local.collect(table))
    assert_frame_equal(remote.key_averages(), local.key_averages())
    assert remote.table(row_limit=10) == local.table(row_limit=10)
    # a query reads only what it asks for: a projection and a filter on the lazy table
    kernels = remote.lazy("events").filter(pl.col("cat") == "cpu_op").select("name", "dur_ns").collect()
    assert_frame_equal(kernels, local.lazy("events").filter(pl.col("cat") == "cpu_op").select("name", "dur_ns")
                       .collect())


@pytest.mark.skipif(len(GLOO) < 2, reason="no recorded gloo rank set")
def test_a_multi_rank_url_dataset_answers_cross_rank_tables_from_its_summaries(tmp_path: Path) -> None:
    url = _url()
    pt.convert([str(p) for p in GLOO], url, progress=False)
    remote, local = pt.scan(url), pt.scan(pt.convert([str(p) for p in GLOO], tmp_path / "l", progress=False))
    assert remote.files.height == len(GLOO)
    assert {"summary_key_averages", "summary_steps"} <= set(remote.tables)  # the cross-rank tables' source
    assert_frame_equal(remote.ranks.key_averages(), local.ranks.key_averages())
    def status(tr: pt.Trace) -> pl.DataFrame:
        return tr.collect("status").drop("host", "seconds")

    assert_frame_equal(status(remote), status(local))


def test_an_existing_url_is_refused_then_replaced_with_force() -> None:
    url = _url()
    pt.convert([str(CNN)], url, progress=False)
    with pytest.raises(ProftabError, match="exists"):
        pt.convert([str(CNN)], url, progress=False)
    pt.convert([str(CNN)], url, progress=False, force=True)
    assert pt.scan(url).files.height == 1


def test_an_upload_without_its_manifest_is_not_a_dataset() -> None:
    """The manifest is uploaded last: files without one are an interrupted upload, said so."""
    url = _url()
    pt.convert([str(CNN)], url, progress=False)
    fs = fsspec.filesystem("memory")
    root = url.removeprefix("memory://")
    fs.rm(f"{root}/{MANIFEST}")
    assert fs.find(root)  # every other file is there
    with pytest.raises(ProftabError, match="upload did not finish"):
        pt.scan(url)
    with pytest.raises(ProftabError, match="no such dataset"):
        pt.scan(_url())


def test_resume_needs_a_file_system_output() -> None:
    with pytest.raises(ProftabError, match="resume"):
        pt.convert([str(CNN)], _url(), progress=False, resume=True)


def test_an_unknown_protocol_is_a_clear_error() -> None:
    with pytest.raises(ProftabError, match="cannot open this URL's file system"):
        pt.convert([str(CNN)], "nosuchproto://bucket/ds", progress=False)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_s3_round_trip_on_a_local_moto_server(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same through s3fs against moto's S3 server on loopback (skipped without them)."""
    pytest.importorskip("s3fs")
    moto_server = pytest.importorskip("moto.server")
    port = _free_port()
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=port)
    server.start()
    try:
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
        opts = {"key": "testing", "secret": "testing",
                "client_kwargs": {"endpoint_url": f"http://127.0.0.1:{port}", "region_name": "us-east-1"}}
        boto3 = pytest.importorskip("boto3")
        s3 = boto3.client("s3", endpoint_url=f"http://127.0.0.1:{port}", region_name="us-east-1",
                          aws_access_key_id="testing", aws_secret_access_key="testing")
        s3.create_bucket(Bucket="proftab-bucket")
        url = "s3://proftab-bucket/job/ds"
        pt.convert([str(CNN)], url, progress=False, storage_options=opts)
        remote = pt.scan(url, storage_options=opts)
        local = pt.load(CNN)
        assert_frame_equal(remote.key_averages(), local.key_averages())
        assert remote.collect("events").height == local.events.height
    finally:
        server.stop()


def test_cli_convert_and_summary_on_a_url(tmp_path: Path) -> None:
    """`proftab convert TRACE URL` then `proftab summary URL`, in one process (memory:// is per process)."""
    code = ("import sys\nfrom proftab.cli import main\n"
            "url = 'memory://cli-test/ds'\n"
            f"rc1 = main(['convert', {str(CNN)!r}, url, '--progress', 'never'])\n"
            "rc2 = main(['summary', url, '--limit', '5'])\n"
            "sys.exit(rc1 or rc2)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(Path(pt.__file__).parents[1])})
    assert out.returncode == 0, out.stderr
    assert "Self CPU time total" in out.stdout
