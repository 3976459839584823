"""torch's profiler FLOPs: `key_averages()["flops"]` and the table's `Total <unit>FLOPs` column."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

import proftab as pt
from proftab.torch.flops import torch_flops
from tests.conftest import DATA, shared_torch213_cases

FLOPS_OPS = DATA / "torch_flops" / "flops_ops"


def torch_flops_rows(case: Path, kind: str) -> pl.DataFrame:
    rows = json.loads((case / f"{kind}.json").read_text())
    return pl.DataFrame({
        "name": [r["key"] for r in rows],
        "input_shapes": [str(r["input_shapes"]) if "input_shapes" in r else "" for r in rows],
        "calls": [r["count"] for r in rows],
        "want": [int(r["flops"] or 0) for r in rows],
    })


def flops_cases() -> list[tuple[Path, str]]:
    cases = [(FLOPS_OPS, "key_averages"), (FLOPS_OPS, "key_averages_by_shape")]
    for case in shared_torch213_cases():
        for kind in ("key_averages", "key_averages_by_shape"):
            path = case / f"{kind}.json"
            if path.exists() and any(r.get("flops") for r in json.loads(path.read_text())):
                cases.append((case, kind))
    return cases


#: the ../shared torch 2.13 cases (every one with FLOPs) are a corpus sweep: slow
SHARED_SLOW = pytest.mark.slow


@pytest.mark.parametrize(("case", "kind"), [pytest.param(c, k, marks=() if c == FLOPS_OPS else SHARED_SLOW)
                                            for c, k in flops_cases()],
                         ids=lambda v: v.name if isinstance(v, Path) else v)
def test_flops_equal_torch(case: Path, kind: str) -> None:
    tr = pt.load(case / "trace.json.gz")
    assert tr.meta["with_flops"]
    got = tr.key_averages(group_by_input_shape=kind.endswith("shape"))
    keys = ["name", "input_shapes"]
    j = got.join(torch_flops_rows(case, kind), on=keys, how="full", coalesce=True)
    assert j.filter(pl.col("flops").is_null() | pl.col("want").is_null()).is_empty()
    bad = j.filter(pl.col("flops") != pl.col("want"))
    assert bad.is_empty(), bad.select(*keys, "calls", "flops", "want")
    assert (j["want"] > 0).sum() >= 3


def test_flops_ops_case_covers_every_rule() -> None:
    want = torch_flops_rows(FLOPS_OPS, "key_averages").filter(pl.col("want") > 0)
    assert set(want["name"]) == {"aten::conv2d", "aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm",
                                 "aten::mul", "aten::add"}


def flops_cells(text: str) -> tuple[str, dict[str, str]]:
    """The FLOPs header and the FLOPs cell per row name of a torch table (last column)."""
    lines = text.splitlines()
    header = lines[1].split("  ")[-2].strip() if lines[1].endswith("  ") else lines[1].split("  ")[-1].strip()
    cells = {}
    for line in lines[3:]:
        if line.startswith("-"):
            break
        parts = line.rstrip().split()
        cells[parts[0]] = parts[-1]
    return header, cells


@pytest.mark.parametrize("case", [FLOPS_OPS, *(pytest.param(c, marks=SHARED_SLOW) for c, k in flops_cases()[2:]
                                                 if k == "key_averages")],
                         ids=lambda p: p.name)
def test_table_flops_column_equals_torch(case: Path) -> None:
    tr = pt.load(case / "trace.json.gz")
    want = (case / "key_averages.txt").read_text()
    got = tr.table(row_limit=-1)
    w_head, w_cells = flops_cells(want)
    g_head, g_cells = flops_cells(got)
    assert w_head.startswith("Total ") and w_head.endswith("FLOPs")
    assert g_head == w_head
    assert g_cells == w_cells
    assert got.splitlines()[1] == want.splitlines()[1]  # header line byte for byte


def test_no_flops_without_with_flops() -> None:
    """torch leaves FLOPs at 0 unless the profile was taken with_flops (train_cnn was not)."""
    tr = pt.load(DATA / "torch213" / "train_cnn" / "trace.json.gz")
    assert not tr.meta.get("with_flops")
    assert (tr.key_averages()["flops"] == 0).all()
    asked = tr.key_averages(with_flops=True)
    conv = asked.filter(pl.col("name") == "aten::conv2d")["flops"].item()
    assert conv > 0
    assert "FLOPs" not in tr.table().splitlines()[1]


def test_torch_flops_rules_on_hand_rows() -> None:
    rows = pl.DataFrame({
        "name": ["aten::mm", "aten::addmm", "aten::bmm", "aten::mul", "aten::add", "aten::mm", "aten::relu",
                 "aten::conv2d", "aten::conv2d"],
        "input_dims": ["[[3, 4], [4, 5]]", "[[5], [3, 4], [4, 5], [], []]", "[[2, 3, 4], [2, 4, 5]]",
                       "[[2, 3], []]", "[[], [2, 3], []]", "[[3, 0], [0, 5]]", "[[7]]",
                       "[[1, 2, 5, 5], [4, 2, 3, 3], [], [], [], [], []]",
                       "[[1, 2, 5, 5], [4, 2, 3, 3], [], [], [], [], []]"],
        "input_type": ['["float", "float"]', '["float", "float", "float", "Scalar", "Scalar"]',
                       '["float", "float"]', '["float", "Scalar"]', '["Scalar", "float", "Scalar"]',
                       '["float", "float"]', '["float"]',
                       '["float", "float", "", "ScalarList", "ScalarList", "ScalarList", "Scalar"]',
                       '["float", "float", "", "ScalarList", "String", "ScalarList", "Scalar"]'],
        "concrete_inputs": [None, None, None, None, None, None, None,
                            '["", "", "", "[2, 2]", "[1, 1]", "[1, 1]", "1"]',
                            '["", "", "", "[1, 1]", "same", "[1, 1]", "1"]'],
    })
    # conv: OH = OW = (5 + 2 - 2 - 1) // 2 + 1 = 3 -> 2 * 1 * 3 * 3 * 3 * 3 * 2 * 4 = 1296
    assert torch_flops(rows).to_list() == [120, 120, 240, 6, 0, 0, 0, 1296, 0]
