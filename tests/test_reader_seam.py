"""The reader seam (`proftab.io.readers`): the reader is chosen by what the input is, and every reader
returns a Trace of the same tables; what the analyses add to a dataset is passed into io from above."""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl
import pytest
from polars.testing import assert_frame_equal

import proftab as pt
from proftab.io.dataset.write import Derived, write_dataset
from proftab.io.readers import ReadOptions, kind_of, open_trace
from proftab.trace import TABLES
from tests.conftest import BUNDLED, DATA

if TYPE_CHECKING:
    from pathlib import Path

CNN = BUNDLED / "train_cnn.pt.trace.json.gz"
BERT = BUNDLED / "h100_bert_small.pt.trace.json.gz"  # with anomalies
RANKS = sorted((DATA / "gloo4").glob("rank-*.json.gz"))


class _Profiler:
    """Looks like a torch profiler to `kind_of` (it exports Chrome traces)."""

    def export_chrome_trace(self, path: str) -> None:
        raise AssertionError("not called")


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("seam") / "cnn.pq"
    pt.load(CNN).to_parquet(out)
    return out


def test_the_kind_of_an_input_is_what_it_is(dataset: Path) -> None:
    assert kind_of(str(CNN)) == kind_of(CNN) == kind_of(RANKS) == kind_of(str(DATA / "gloo4")) == "kineto"
    assert kind_of(str(DATA / "gloo4" / "rank-*.json.gz")) == "kineto"
    assert kind_of(dataset) == kind_of(dataset / "_proftab.json") == kind_of("s3://bucket/run.pq") == "dataset"
    assert kind_of("s3://bucket/trace.json.gz") == "kineto"  # a URL naming a trace file is no dataset
    assert kind_of(_Profiler()) == "profiler"


def test_every_reader_returns_the_same_tables(dataset: Path) -> None:
    loaded, scanned = open_trace(CNN), open_trace(dataset / "_proftab.json")
    assert not loaded.is_lazy and scanned.is_lazy
    for name in TABLES:
        assert loaded.collect(name).columns == scanned.collect(name).columns, name
    assert_frame_equal(loaded.collect("nested"), scanned.collect("nested"), check_column_order=False)
    assert_frame_equal(open_trace(RANKS).events, pt.load(RANKS).events)


def test_load_and_convert_read_trace_files_only(dataset: Path, tmp_path: Path) -> None:
    with pytest.raises(pt.TraceError, match=r"a proftab Parquet dataset \(written by convert\), not a trace file"):
        pt.load(dataset)
    with pytest.raises(pt.TraceError, match="a torch profiler object, not a trace file"):
        pt.load(_Profiler())  # type: ignore[arg-type]
    with pytest.raises(pt.ProftabError, match="not a trace file, directory, glob or list of those: int"):
        pt.load(3)  # type: ignore[arg-type]
    with pytest.raises(pt.TraceError, match="not a trace file"):
        pt.convert(dataset, tmp_path / "again.pq")


def test_read_options_reach_the_kineto_reader() -> None:
    tr = open_trace(RANKS[:2], ReadOptions(ranks=[7, 3]))
    assert sorted(tr.files["rank"].to_list()) == [3, 7]
    # the rank of a file without one falls back to its position, counted from first_position (convert)
    assert pt.load(CNN).files["rank"].to_list() == [0]
    assert open_trace(CNN, ReadOptions(first_position=5)).files["rank"].to_list() == [5]


def test_io_writes_what_it_is_given(tmp_path: Path) -> None:
    """The dataset writer computes no analysis: anomalies, key_averages and summaries come from `derive`."""
    tr = pt.load(BERT)
    asked: list[tuple[bool, bool]] = []
    anomalies = tr.anomalies.clear()

    def derive(trace: pt.Trace, *, key_averages: bool, summaries: bool) -> Derived:
        asked.append((key_averages, summaries))
        return Derived(anomalies=anomalies)

    write_dataset(tr, tmp_path / "plain.pq", derive=derive)
    assert asked == [(True, False)]  # a one-file trace: its key_averages would be stored
    scanned = pt.scan(tmp_path / "plain.pq")
    assert scanned.collect("anomalies").height == 0 < tr.anomalies.height
    assert "key_averages" not in scanned.tables  # derive gave none
    assert_frame_equal(scanned.collect("events"), tr.events, check_column_order=False)


def test_the_public_writer_stores_what_the_analyses_add(dataset: Path) -> None:
    tr, scanned = pt.load(CNN), pt.scan(dataset)
    assert_frame_equal(scanned.collect("anomalies"), tr.anomalies, check_column_order=False)
    stored = scanned.collect("key_averages")
    assert_frame_equal(stored, tr.key_averages(torch_floats=True))
    assert isinstance(stored, pl.DataFrame)
