"""The key_averages columns are declared once (`proftab.torch.columns`) and every reader agrees with it."""

from __future__ import annotations

import polars as pl
import pytest

import proftab as pt
from proftab.ranks.merge import merge_key_averages
from proftab.torch import columns
from proftab.torch.text_table import SORT_KEYS, render_table
from tests.conftest import BUNDLED, DATA

GPU_TRACE = BUNDLED / "h100_bert_small.pt.trace.json.gz"


@pytest.fixture(scope="module")
def gpu() -> pt.Trace:
    return pt.load(GPU_TRACE)


def _declared(cols: tuple[columns.KeyAveragesColumn, ...]) -> list[tuple[str, str]]:
    return [(c.name, c.dtype) for c in cols]


def test_key_averages_has_the_declared_columns_and_dtypes(gpu: pt.Trace) -> None:
    ka = gpu.key_averages()
    assert [(n, str(d)) for n, d in ka.schema.items()] == _declared(columns.COLUMNS)
    stepped = gpu.key_averages(by_step=True, torch_floats=True)
    assert [(n, str(d)) for n, d in stepped.schema.items()] == [
        *_declared((columns.STEP, *columns.COLUMNS)), *((c, "Float64") for c in columns.TORCH_FLOAT_COLUMNS)]


def test_roles_and_units_follow_the_names() -> None:
    for c in columns.COLUMNS:
        if c.unit == "ns":
            assert c.name.endswith("_ns"), c.name
        if c.unit == "bytes":
            assert c.name.endswith("_bytes"), c.name
        if c.role == "share":
            assert c.name.endswith("_share") and c.of and c.over in ("host", "wall"), c.name
        if c.role == "mean":
            assert len(c.of) == 1 and columns.BY_NAME[c.of[0]].role == "sum", c.name
        if c.role == "sum":
            assert c.dtype == "Int64", c.name
    assert columns.time_columns("cpu") == ("self_cpu_ns", "cpu_total_ns")
    assert columns.time_columns("device") == ("self_device_ns", "device_total_ns")
    assert columns.SUMMED_COLUMNS == ("self_cpu_ns", "cpu_total_ns", "self_device_ns", "device_total_ns",
                                      "cpu_mem_bytes", "self_cpu_mem_bytes", "device_mem_bytes",
                                      "self_device_mem_bytes", "flops")


def test_torch_sort_keys_are_the_numeric_torch_attributes() -> None:
    # torch's FunctionEventAvg attributes `sort_by` accepts (pytorch_spec.md §2.5)
    assert set(SORT_KEYS) == {"self_cpu_time_total", "cpu_time_total", "cpu_time", "self_device_time_total",
                              "device_time_total", "device_time", "count", "cpu_memory_usage",
                              "self_cpu_memory_usage", "device_memory_usage", "self_device_memory_usage", "flops"}
    assert set(SORT_KEYS.values()) <= set(columns.KEY_AVERAGES_COLUMNS)


def test_the_text_table_prints_the_declared_headers(gpu: pt.Trace) -> None:
    text = render_table(gpu.key_averages(group_by_input_shape=True), profile_memory=True, use_device="cuda")
    header = [h.strip() for h in text.splitlines()[1].split("  ") if h.strip()]
    declared = {columns.torch_header(c.name, "CUDA") for c in columns.COLUMNS if c.header} | {
        columns.torch_share_header(c.name, "CUDA") for c in columns.COLUMNS if c.share_header}
    assert header[:4] == ["Name", "Self CPU %", "Self CPU", "CPU total %"]
    assert set(header) <= declared


def test_ranks_merge_by_role(gpu: pt.Trace) -> None:
    ka = gpu.key_averages()
    per_rank = pl.concat([ka.select(pl.lit(r, pl.Int32).alias("rank"), pl.all()) for r in (0, 1)])
    merged = merge_key_averages(per_rank)
    one = ka.sort(columns.names("key")).select(columns.names("key", "flag", "count", "sum", "min", "max", "mean"))
    two = merged.sort(columns.names("key"))
    summed = columns.names("count", "sum")
    # sums and counts double, min / max / averages stay, percentiles and the wall share do not merge
    assert two.select(summed).equals(one.select(pl.col(summed) * 2))
    assert two.select(columns.names("key", "flag", "min", "max", "mean")).equals(
        one.select(columns.names("key", "flag", "min", "max", "mean")))
    assert two.select(columns.names("quantile")).null_count().row(0) == (two.height,) * 2
    assert two["wall_share"].is_null().all()
    assert two["ranks"].unique().to_list() == [2]


def test_diff_reads_the_declared_columns() -> None:
    rows = pt.load(DATA / "diff" / "rerun_a.pt.trace.json.gz").key_averages()
    with pytest.raises(ValueError, match=r"missing columns \['calls', 'cpu_total_ns'\]"):
        pt.diff(rows.drop("calls", "cpu_total_ns"), rows)
    same = pt.diff(rows.select("name", "device_type", "is_user_annotation", *columns.time_columns("cpu"), "calls"),
                   rows)
    assert set(same.filter(pl.col("device_type") == "CPU")["status"].to_list()) == {"same"}
