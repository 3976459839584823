"""key_averages and table() as each torch release prints them: overload names, verbose stacks, torch's
float text, torch 2.13 and 2.14 rows.

Every case under tests/data/torch_parity2 was recorded by its generate.py with torch 2.13.0 and
2.14.1 (CPU); each holds torch's own key_averages rows and table text for the default, the
by-shape and the by-stack-5 grouping. proftab's rows and text must equal torch's byte for byte,
except where docs/nesting.md names the class as torch's (stack grouping without verbose).
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import polars as pl
import pytest

import proftab as pt
from proftab.exceptions import UsageError
from proftab.torch import render_table
from tests.conftest import TORCH213

DATA = Path(__file__).parent / "data" / "torch_parity2"
VERSIONS = ["torch2.13", "torch2.14"]
VARIANTS = {"key_averages": {}, "key_averages_by_shape": {"group_by_input_shape": True},
            "key_averages_by_stack5": {"group_by_stack_n": 5}}


def torch_rows(case: Path, stem: str) -> list[dict]:
    with gzip.open(case / f"{stem}.json.gz", "rt") as f:
        return json.load(f)


def torch_text(case: Path, stem: str) -> str:
    with gzip.open(case / f"{stem}.txt.gz", "rt") as f:
        return f.read()


def row_key(name: str, shapes: str, stack: list[str], stem: str) -> tuple[str, str, tuple[str, ...]]:
    return name, shapes if stem == "key_averages_by_shape" else "", tuple(stack)


def differing_rows(case: Path, stem: str) -> list[tuple]:
    """The rows that are not torch's: missing on either side, or other calls, times or FLOPs."""
    tr = pt.load(case / "trace.json.gz")
    want = {row_key(r["key"], r["input_shapes"], r["stack"], stem): r for r in torch_rows(case, stem)}
    got = {row_key(r["name"], r["input_shapes"], r["stack"], stem): r
           for r in tr.key_averages(**VARIANTS[stem]).iter_rows(named=True)}
    bad = [(k, "missing in proftab") for k in want.keys() - got.keys()]
    bad += [(k, "not in torch") for k in got.keys() - want.keys()]
    for k in want.keys() & got.keys():
        w, g = want[k], got[k]
        if (w["count"] != g["calls"] or abs(w["self_cpu_time_total"] * 1000 - g["self_cpu_ns"]) > 2
                or abs(w["cpu_time_total"] * 1000 - g["cpu_total_ns"]) > 2 or w["flops"] != g["flops"]):
            bad.append((k, w, g))
    return bad


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("case", ["overload", "verbose"])
@pytest.mark.parametrize("stem", list(VARIANTS))
def test_rows_and_text_equal_torch(version: str, case: str, stem: str) -> None:
    """Overload names and verbose stacks: every row is torch's and `table()` is torch's text."""
    case_dir = DATA / version / case
    assert differing_rows(case_dir, stem) == []
    tr = pt.load(case_dir / "trace.json.gz")
    assert tr.table(row_limit=-1, **VARIANTS[stem]) == torch_text(case_dir, stem)


@pytest.mark.parametrize("version", VERSIONS)
def test_overload_names_key_by_base_name(version: str) -> None:
    """`aten::add.Tensor` is `aten::add`; `aten::sum > aten::sum.dim_IntList` folds; FLOPs are found."""
    case_dir = DATA / version / "overload"
    tr = pt.load(case_dir / "trace.json.gz")
    names = set(tr.events.filter(pl.col("cat") == "cpu_op")["name"].to_list())
    assert {"aten::add.Tensor", "aten::sum.dim_IntList", "aten::mul.Tensor", "aten::sum"} <= names
    ka = tr.key_averages()
    assert not ka["name"].str.contains(r"^aten::\w+\.\w+$").any()
    want = {r["key"]: r for r in torch_rows(case_dir, "key_averages")}
    got = {r["name"]: r for r in ka.iter_rows(named=True)}
    # 3 sums with dim (a row of their own) + 3 full sums, each holding one sum.dim_IntList child
    assert got["aten::sum"]["calls"] == want["aten::sum"]["count"] == 6
    for op in ("aten::add", "aten::mul", "aten::mm", "aten::addmm"):
        assert got[op]["flops"] == want[op]["flops"] > 0
    by_overload = tr.key_averages(group_by_overload_name=True)
    add = by_overload.filter(pl.col("name") == "aten::add")
    assert set(add["overload_name"].to_list()) == {"Tensor"}
    assert by_overload["calls"].sum() == ka["calls"].sum()


def test_overload_only_for_ops() -> None:
    """A user annotation whose name looks like an overload keeps it (only ops are split)."""
    from proftab.torch.aggregate import split_overload_expr
    frame = pl.DataFrame({"name": ["aten::add.Tensor", "model::block.attn", "aten::relu"],
                          "cat": ["cpu_op", "user_annotation", "cpu_op"]})
    out = frame.select(*split_overload_expr())
    assert out.to_dict(as_series=False) == {"name": ["aten::add", "model::block.attn", "aten::relu"],
                                            "overload_name": ["Tensor", "", ""]}


@pytest.mark.parametrize("version", VERSIONS)
def test_verbose_stack_rules(version: str) -> None:
    """The three rules torch applies to verbose `Call stack`s, each visible in the rows."""
    tr = pt.load(DATA / version / "verbose" / "trace.json.gz")
    assert tr.events["call_stack"].drop_nulls().str.ends_with(";").all()
    ka = tr.key_averages(group_by_stack_n=5)
    frames = ka["stack"].explode().drop_nulls()
    assert not (frames == "").any()  # no empty last frame
    # autograd/__init__ backward and _make_grads frames are dropped (the JSON has them)
    dropped = r"autograd/__init__.*(backward|_make_grads)"
    assert tr.events["call_stack"].drop_nulls().str.contains(dropped).any()
    assert not frames.str.contains(dropped).any()
    # ops of a backward node carry their forward op's stack (the forward `linear` frame)
    mm_backward = ka.filter(pl.col("name") == "AddmmBackward0")
    assert mm_backward.height > 0
    assert mm_backward["stack"].list.first().to_list() == ["<built-in function linear>"] * mm_backward.height
    # AccumulateGrad has no forward op (sequence number -1, forward thread 0): an empty stack
    acc = ka.filter(pl.col("name") == "torch::autograd::AccumulateGrad")
    assert acc["stack"].list.len().to_list() == [0]


@pytest.mark.parametrize("version", VERSIONS)
def test_stack_grouping_without_verbose_is_proftabs(version: str) -> None:
    """Without verbose, torch does not group by stack (its rows are the default ones);
    proftab groups by the enclosing Python frames, and the totals per name still agree."""
    case_dir = DATA / version / "stack"
    for stem in ("key_averages", "key_averages_by_shape"):
        assert differing_rows(case_dir, stem) == []
    tr = pt.load(case_dir / "trace.json.gz")
    assert tr.table(row_limit=-1) == torch_text(case_dir, "key_averages")
    torch5 = torch_rows(case_dir, "key_averages_by_stack5")
    assert all(r["stack"] == [] for r in torch5)
    assert len(torch5) == len(torch_rows(case_dir, "key_averages"))
    ours = tr.key_averages(group_by_stack_n=5)
    assert ours.height > len(torch5)
    per_name = ours.group_by("name").agg(pl.col("calls", "self_cpu_ns").sum()).sort("name")
    default = tr.key_averages().select("name", "calls", "self_cpu_ns").sort("name")
    assert per_name.equals(default)


def test_torch_version_detection() -> None:
    assert pt.load(DATA / "torch2.13" / "verbose" / "trace.json.gz").torch_version() == "2.13"
    assert pt.load(DATA / "torch2.14" / "verbose" / "trace.json.gz").torch_version() == "2.14"
    # no Python frames: no field tells, and the two releases agree
    assert pt.load(DATA / "torch2.14" / "overload" / "trace.json.gz").torch_version() is None


@pytest.mark.parametrize("version", VERSIONS)
def test_torch_release_semantics(version: str) -> None:
    """`torch="2.14"` leaves python_function rows out, their time in nobody's self time;
    `torch="2.13"` lists them; by default the writer's release decides."""
    tr = pt.load(DATA / version / "verbose" / "trace.json.gz")
    old, new = tr.key_averages(torch="2.13"), tr.key_averages(torch="2.14.1")
    py_names = set(tr.events.filter(pl.col("cat") == "python_function")["name"].to_list())
    assert py_names & set(old["name"].to_list())
    assert not py_names & set(new["name"].to_list())
    kept = old.filter(~pl.col("name").is_in(list(py_names))).select("name", "calls", "self_cpu_ns").sort("name")
    assert kept.equals(new.select("name", "calls", "self_cpu_ns").sort("name"))
    assert tr.key_averages().equals(old if version == "torch2.13" else new)
    with pytest.raises(UsageError, match="not a torch version"):
        tr.key_averages(torch="latest")


def test_table_ties_from_torch_floats() -> None:
    """train_cnn: four `CPU time avg` cells are exact rounding ties; printed from exact ns they
    differ from torch's, from torch's own floats (the default of `tr.table()`) they do not."""
    case = TORCH213 / "train_cnn"
    tr = pt.load(case / "trace.json.gz")
    want = (case / "key_averages.txt").read_text()[:-1]  # common.py wrote table + "\n"
    assert tr.table(row_limit=-1) == want
    exact = render_table(tr.key_averages(), sort_by="self_cpu_time_total", row_limit=-1, profile_memory=True)
    differ = [(a, b) for a, b in zip(exact.splitlines(), want.splitlines(), strict=True) if a != b]
    assert len(differ) == 4
    for a, b in differ:
        assert a.split()[0] == b.split()[0] and a.split()[-1] == b.split()[-1]


def test_cli_summary_torch_release_and_ties(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """`proftab summary` prints torch's text (ties included) and takes `--torch`."""
    from proftab.__main__ import main

    case = TORCH213 / "train_cnn"
    assert main(["summary", str(case / "trace.json.gz"), "--limit", "-1", "--format", "text", "--quiet"]) == 0
    assert capsys.readouterr().out == (case / "key_averages.txt").read_text()[:-1]
    verbose = DATA / "torch2.13" / "verbose" / "trace.json.gz"
    out = tmp_path / "rows.csv"
    assert main(["summary", str(verbose), "--torch", "2.14", "-o", str(out), "--quiet"]) == 0
    rows = pl.read_csv(out)
    assert rows.height == pt.load(verbose).key_averages(torch="2.14").height
    assert not rows["name"].str.contains(r"\.py\(\d+\)").any()
