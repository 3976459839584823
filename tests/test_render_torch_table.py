"""render_table: torch's EventList.table() text, byte for byte.

Golden tests rebuild the key_averages frame from torch 2.13's own ``key_averages*.json`` and
compare with the ``key_averages*.txt`` torch printed
(``table(sort_by="self_cpu_time_total", row_limit=-1)``, see
``shared/tools/gen_traces/common.py``).
"""

from __future__ import annotations

import json
import math
import re
from fractions import Fraction
from pathlib import Path

import polars as pl
import pytest

from proftab.torch.text_table import SORT_KEYS, render_table

DATA = Path(__file__).parent / "data" / "torch213"
SHARED = Path("/work/shared/traces/torch213")
LLAMA = SHARED / "llama_generate_shapes_stack"

# The profile flags each case was recorded with (case_*.py): only they change the columns.
FLAGS = {
    "train_cnn": dict(profile_memory=True),
    "llama_generate_shapes_stack": dict(profile_memory=True, with_flops=True),
}
# Lines whose "CPU time avg" is an exact rounding tie (see check_golden), per (case, stem).
TIES = {
    ("compile_jit", "key_averages"): 1, ("compile_jit", "key_averages_by_shape"): 7,
    ("multithread", "key_averages"): 1, ("multithread", "key_averages_by_shape"): 2,
    ("train_cnn", "key_averages"): 4, ("train_cnn", "key_averages_by_shape"): 19,
    ("llama_generate_shapes_stack", "key_averages"): 8,
    ("llama_generate_shapes_stack", "key_averages_by_shape"): 40,
    ("llama_generate_shapes_stack", "key_averages_by_stack5"): 8,
}
CASES = ["train_cnn", "multithread", "multithread_default_config", "misc_async_python_export", "compile_jit"]

INT_COLS = [
    "calls", "self_cpu_ns", "cpu_total_ns", "self_device_ns", "device_total_ns", "cpu_mem_bytes",
    "self_cpu_mem_bytes", "device_mem_bytes", "self_device_mem_bytes", "flops",
]


# --------------------------------------------------------------------------- helpers
def make_rows(rows: list[dict]) -> pl.DataFrame:
    """A key_averages frame with defaults for every column not given."""
    full = []
    for r in rows:
        d = {
            "name": "op", "device_type": "CPU", "is_user_annotation": False, "is_async": False,
            "top_level": True, "overload_name": "", "input_shapes": "", "stack": [],
            **{c: 0 for c in INT_COLS},
        }
        d.update(r)
        d.setdefault("cpu_avg_ns", d["cpu_total_ns"] / d["calls"] if d["calls"] else 0.0)
        d.setdefault("device_avg_ns", d["device_total_ns"] / d["calls"] if d["calls"] else 0.0)
        full.append(d)
    schema = {
        "name": pl.String, "device_type": pl.String, "is_user_annotation": pl.Boolean,
        "is_async": pl.Boolean, "top_level": pl.Boolean, "overload_name": pl.String,
        "input_shapes": pl.String, "stack": pl.List(pl.String),
        **{c: pl.Int64 for c in INT_COLS}, "cpu_avg_ns": pl.Float64, "device_avg_ns": pl.Float64,
    }
    return pl.DataFrame(full, schema=schema)


def frame_from_torch_json(case_dir: Path, stem: str) -> pl.DataFrame:
    """The input frame from torch's key_averages JSON dump (µs floats -> ns).

    The dump has no ``is_async``: it is taken from the first FunctionEvent of that name in
    torch's own ``function_events.parquet`` (FunctionEventAvg copies it from the first event).
    Rows are in torch's sorted order; our stable re-sort keeps it.
    """
    rows = json.loads((case_dir / f"{stem}.json").read_text())
    fe = pl.read_parquet(case_dir / "function_events.parquet", columns=["name", "is_async"])
    first = fe.unique("name", keep="first", maintain_order=True)
    is_async = dict(zip(first["name"].to_list(), first["is_async"].to_list(), strict=False))
    ns = lambda x: round(x * 1000)  # noqa: E731
    return make_rows([
        {
            "name": r["key"], "device_type": r["device_type"],
            "is_user_annotation": r["is_user_annotation"], "is_async": is_async.get(r["key"], False),
            "input_shapes": str(r["input_shapes"]) if "input_shapes" in r else "",
            "stack": r.get("stack", []), "calls": r["count"],
            "self_cpu_ns": ns(r["self_cpu_time_total"]), "cpu_total_ns": ns(r["cpu_time_total"]),
            "self_device_ns": ns(r["self_device_time_total"]),
            "device_total_ns": ns(r["device_time_total"]),
            "cpu_mem_bytes": int(r["cpu_memory_usage"]),
            "self_cpu_mem_bytes": int(r["self_cpu_memory_usage"]), "flops": int(r["flops"]),
        }
        for r in rows
    ])


def spans(sep_line: str) -> list[tuple[int, int]]:
    """Column character spans from a ``----  ----  `` separator line."""
    out, pos = [], 0
    for dashes in sep_line.rstrip().split("  "):
        out.append((pos, pos + len(dashes)))
        pos += len(dashes) + 2
    return out


def cells(text: str) -> list[dict[str, str]]:
    """Parse a rendered table (no stacks) into one dict per body line (header -> cell).

    Splits on runs of 2+ spaces: torch lets a cell overflow its width (``CUDA time avg``
    is 13 chars in a 12-wide column), so fixed spans would cut it.
    """
    lines = text.splitlines()
    first_sep = next(i for i, ln in enumerate(lines) if ln.startswith("-"))
    split = lambda ln: re.split(r" {2,}", ln.strip())  # noqa: E731
    heads = split(lines[first_sep + 1])
    body = lines[first_sep + 3 : lines.index(lines[first_sep], first_sep + 3)]
    out = [dict(zip(heads, split(ln), strict=False)) for ln in body]
    assert all(len(split(ln)) == len(heads) for ln in body)
    return out


def _milli_text(m: int) -> str:
    """``m / 1000`` with exactly 3 decimals, in integer arithmetic."""
    whole, frac = divmod(abs(m), 1000)
    return f"{'-' if m < 0 else ''}{whole}.{frac:03d}"


def tie_candidates(exact_ns: Fraction) -> set[str] | None:
    """For a time exactly halfway between two 3-decimal values, the two texts; else None."""
    for quantum, unit, lo in ((10**6, "s", 10**9), (10**3, "ms", 10**6), (1, "us", None)):
        if lo is None or exact_ns >= lo:
            q = exact_ns / quantum
            if q - math.floor(q) != Fraction(1, 2):
                return None
            return {_milli_text(math.floor(q) + k) + unit for k in (0, 1)}
    raise AssertionError("unreachable")


# ------------------------------------------------------------------------- golden tests
def check_golden(case_dir: Path, stem: str) -> None:
    df = frame_from_torch_json(case_dir, stem)
    got = render_table(df, sort_by="self_cpu_time_total", row_limit=-1, **FLAGS.get(case_dir.name, {}))
    expected = (case_dir / f"{stem}.txt").read_text()
    assert expected.endswith("\n\n")  # common.py writes table + "\n"
    expected = expected[:-1]
    got_lines, exp_lines = got.split("\n"), expected.split("\n")
    assert len(got_lines) == len(exp_lines)
    cols = spans(exp_lines[0])
    heads = [exp_lines[1][a:b].strip() for a, b in cols]
    torch_rows = json.loads((case_dir / f"{stem}.json").read_text())
    ties = 0
    for i, (g, e) in enumerate(zip(got_lines, exp_lines, strict=False)):
        if g == e:
            continue
        # The only tolerated difference: "CPU time avg" = cpu_total_ns / calls lies exactly
        # halfway between two printed values; torch's float sum (noise ~1e-12) picks a side.
        assert len(g) == len(e), (i, g, e)
        diff = [h for h, (a, b) in zip(heads, cols, strict=False) if g[a:b] != e[a:b]]
        assert diff == ["CPU time avg"], (i, g, e)
        a, b = cols[heads.index("CPU time avg")]
        row = df[i - 3]  # body line i -> row i - 3 (sep, header, sep)
        assert row["name"][0][:10] == e[cols[0][0] : cols[0][1]].strip()[:10]
        exact = Fraction(row["cpu_total_ns"][0], row["calls"][0])
        assert tie_candidates(exact) == {g[a:b].strip(), e[a:b].strip()}, (i, exact, g, e)
        # and torch's own float shows which side its noise fell on
        us = torch_rows[i - 3]["cpu_time_avg"]
        assert (f"{us / 1000:.3f}ms" if us >= 1000 else f"{us:.3f}us") == e[a:b].strip()
        ties += 1
    assert ties == TIES.get((case_dir.name, stem), 0)


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("stem", ["key_averages", "key_averages_by_shape"])
def test_golden_torch213(case: str, stem: str) -> None:
    check_golden(DATA / case, stem)


@pytest.mark.parametrize("stem", ["key_averages", "key_averages_by_shape", "key_averages_by_stack5"])
def test_golden_llama(stem: str) -> None:
    if not LLAMA.is_dir():
        pytest.skip("shared llama traces not available")
    check_golden(LLAMA, stem)


def test_golden_ties_are_real() -> None:
    """The known tie in compile_jit: prims::var, 1,590,983 ns over 2 calls = 795.4915 µs."""
    df = frame_from_torch_json(DATA / "compile_jit", "key_averages")
    row = df.filter(pl.col("name") == "prims::var")
    assert (row["cpu_total_ns"][0], row["calls"][0]) == (1_590_983, 2)
    assert tie_candidates(Fraction(1_590_983, 2)) == {"795.491us", "795.492us"}
    text = render_table(df, sort_by="self_cpu_time_total", row_limit=-1)
    line = next(ln for ln in text.splitlines() if ln.strip().startswith("prims::var "))
    assert "795.491us" in line  # float(795491.5 / 1000) rounds down; torch's noisy sum: up
    torch_line = next(
        ln for ln in (DATA / "compile_jit" / "key_averages.txt").read_text().splitlines()
        if ln.strip().startswith("prims::var ")
    )
    assert "795.492us" in torch_line


# ------------------------------------------------------------------- worked example §2.6
WORKED = [
    ("aten::linear", 20, 100), ("aten::t", 2, 10), ("aten::transpose", 8, 8),
    ("aten::addmm", 70, 70), ("aten::relu", 4, 20), ("aten::clamp_min", 16, 16),
]
WORKED_TEXT = """\
-------------------  ------------  ------------  ------------  ------------  ------------  ------------  
               Name    Self CPU %      Self CPU   CPU total %     CPU total  CPU time avg    # of Calls  
-------------------  ------------  ------------  ------------  ------------  ------------  ------------  
       aten::linear        16.67%      20.000us        83.33%     100.000us     100.000us             1  
            aten::t         1.67%       2.000us         8.33%      10.000us      10.000us             1  
    aten::transpose         6.67%       8.000us         6.67%       8.000us       8.000us             1  
        aten::addmm        58.33%      70.000us        58.33%      70.000us      70.000us             1  
         aten::relu         3.33%       4.000us        16.67%      20.000us      20.000us             1  
    aten::clamp_min        13.33%      16.000us        13.33%      16.000us      16.000us             1  
-------------------  ------------  ------------  ------------  ------------  ------------  ------------  
Self CPU time total: 120.000us
"""


def worked_rows() -> pl.DataFrame:
    return make_rows([
        {"name": n, "calls": 1, "self_cpu_ns": s * 1000, "cpu_total_ns": t * 1000,
         "top_level": n in ("aten::linear", "aten::relu")}
        for n, s, t in WORKED
    ])


def test_worked_example_exact() -> None:
    assert render_table(worked_rows()) == WORKED_TEXT
    assert len(WORKED_TEXT.splitlines()[0].rstrip()) + 2 == len(WORKED_TEXT.splitlines()[0])


def test_empty_input() -> None:
    assert render_table(worked_rows().head(0)) == ""
    assert render_table(worked_rows().head(0), sort_by="count") == ""


# ---------------------------------------------------------------------------- formatting
@pytest.mark.parametrize(
    ("ns", "text"),
    [
        (999_999, "999.999us"), (1_000_000, "1.000ms"), (999_999_999, "1000.000ms"),
        (1_000_000_000, "1.000s"), (0, "0.000us"), (1, "0.001us"), (1_234_567_000, "1.235s"),
    ],
)
def test_time_unit_thresholds(ns: int, text: str) -> None:
    c = cells(render_table(make_rows([{"calls": 1, "self_cpu_ns": ns, "cpu_total_ns": ns}])))
    assert c[0]["Self CPU"] == c[0]["CPU total"] == c[0]["CPU time avg"] == text


@pytest.mark.parametrize(
    ("unit", "self_txt", "total_txt", "footer"),
    [
        ("us", "2500000.000us", "3000000.000us", "Self CPU time total: 2500000.000us"),
        ("ms", "2500.000ms", "3000.000ms", "Self CPU time total: 2500.000ms"),
        ("s", "2.500s", "3.000s", "Self CPU time total: 2.500s"),
    ],
)
def test_time_unit_override(unit: str, self_txt: str, total_txt: str, footer: str) -> None:
    df = make_rows([{"calls": 2, "self_cpu_ns": 2_500_000_000, "cpu_total_ns": 3_000_000_000}])
    text = render_table(df, time_unit=unit)
    c = cells(text)[0]
    assert (c["Self CPU"], c["CPU total"]) == (self_txt, total_txt)
    assert text.splitlines()[-1] == footer
    small = cells(render_table(make_rows([{"calls": 1, "self_cpu_ns": 5, "cpu_total_ns": 5}]), time_unit=unit))
    assert small[0]["Self CPU"] == {"us": "0.005us", "ms": "0.000ms", "s": "0.000s"}[unit]


def test_invalid_time_unit() -> None:
    with pytest.raises(ValueError, match="time_unit"):
        render_table(worked_rows(), time_unit="ns")


def test_nan_share_when_self_total_zero() -> None:
    df = make_rows([{"name": "a", "calls": 1}, {"name": "b", "calls": 3}])
    c = cells(render_table(df))
    assert [r["Self CPU %"] for r in c] == ["NaN", "NaN"]
    assert [r["CPU total %"] for r in c] == ["NaN", "NaN"]


def test_negative_self_time_stays_in_us() -> None:
    df = make_rows([
        {"name": "parent", "calls": 1, "self_cpu_ns": -247_365_000, "cpu_total_ns": 1_000_000},
        {"name": "child", "calls": 1, "self_cpu_ns": 1_247_365_000, "cpu_total_ns": 1_247_365_000},
    ])
    text = render_table(df)
    c = cells(text)
    assert c[0]["Self CPU"] == "-247365.000us"
    assert c[0]["Self CPU %"] == "-24.74%"
    assert text.splitlines()[-1] == "Self CPU time total: 1.000s"


def test_async_row_cpu_total_share_is_zero() -> None:
    df = make_rows([
        {"name": "span", "calls": 1, "is_async": True, "cpu_total_ns": 5_000},
        {"name": "op", "calls": 1, "self_cpu_ns": 1_000, "cpu_total_ns": 1_000},
    ])
    line = render_table(df).splitlines()[3]
    assert line.endswith("0.00%       0.000us             0       5.000us       5.000us             1  ")


@pytest.mark.parametrize(
    ("nbytes", "text"),
    [
        (0, "0 B"), (1023, "1023 B"), (-16, "-16 B"), (1024, "1.00 KB"), (-3072, "-3.00 KB"),
        (2**20 - 1, "1024.00 KB"), (2**20, "1.00 MB"), (-(2**20) * 12, "-12.00 MB"),
        (3 * 2**29, "1.50 GB"), (2**40, "1024.00 GB"),
    ],
)
def test_memory_units(nbytes: int, text: str) -> None:
    df = make_rows([{"calls": 1, "cpu_mem_bytes": nbytes, "self_cpu_mem_bytes": nbytes}])
    c = cells(render_table(df, profile_memory=True))[0]
    assert c["CPU Mem"] == c["Self CPU Mem"] == text
    assert "CPU Mem" not in cells(render_table(df))[0]


def test_name_truncation_at_w_minus_3() -> None:
    names = ["a" * 51, "b" * 52, "c" * 55, "d" * 60]
    df = make_rows([{"name": n, "calls": 1} for n in names])
    lines = render_table(df).splitlines()
    assert lines[0].startswith("-" * 55 + "  ")  # min(60 + 4, 55)
    shown = [ln[:55] for ln in lines[3:7]]
    assert shown == [
        " " * 4 + "a" * 51,
        "b" * 52 + "...",  # 52 chars: '...' appended, nothing removed
        "c" * 52 + "...",
        "d" * 52 + "...",
    ]
    wide = render_table(df, max_name_column_width=None).splitlines()
    assert wide[0].startswith("-" * 64 + "  ") and wide[6].startswith("    " + "d" * 60)
    narrow = render_table(df, max_name_column_width=10).splitlines()
    assert narrow[3].startswith("aaaaaaa...  ")


def test_null_name_prints_empty() -> None:
    """An unnamed event's row (null `name`) prints an empty name, like a name of ""."""
    df = make_rows([{"name": None, "calls": 1, "self_cpu_ns": 5}, {"name": "x", "calls": 1}])
    assert render_table(df) == render_table(df.with_columns(pl.col("name").fill_null("")))


@pytest.mark.parametrize(("limit", "n"), [(-1, 6), (-5, 6), (0, 0), (1, 1), (4, 4), (100, 6)])
def test_row_limit(limit: int, n: int) -> None:
    lines = render_table(worked_rows(), row_limit=limit).splitlines()
    assert len(lines) == 3 + n + 2
    assert [ln.split()[0] for ln in lines[3 : 3 + n]] == [w[0] for w in WORKED][:n]


def test_header_lines() -> None:
    text = render_table(worked_rows(), header="My header")
    lines = text.splitlines()
    assert lines[:2] == ["=" * 103, "My header"]
    assert "\n".join(lines[2:]) + "\n" == WORKED_TEXT


def test_top_level_events_only() -> None:
    df = worked_rows().vstack(make_rows([
        {"name": "kernel_x", "device_type": "CUDA", "calls": 1, "self_device_ns": 7_000,
         "device_total_ns": 7_000, "top_level": True},
    ]))
    text = render_table(df, top_level_events_only=True, header="H", use_device="cuda")
    lines = text.splitlines()
    assert lines[0] == "=" * len(lines[4].rstrip())
    assert lines[:4] == [lines[0], "H", lines[0], "This report only display top-level ops statistics"]
    names = [r["Name"] for r in cells(text)]
    assert names == ["aten::linear", "aten::relu", "kernel_x"]
    # skipped rows do not count toward the limit
    assert [r["Name"] for r in cells(render_table(df, top_level_events_only=True, row_limit=2))] == [
        "aten::linear", "aten::relu",
    ]
    # the totals still cover every row
    assert "Self CPU time total: 120.000us" in text


def device_rows() -> pl.DataFrame:
    return make_rows([
        {"name": "aten::mm", "calls": 2, "self_cpu_ns": 30_000, "cpu_total_ns": 40_000,
         "self_device_ns": 0, "device_total_ns": 60_000},
        {"name": "cudaLaunchKernel", "calls": 2, "self_cpu_ns": 10_000, "cpu_total_ns": 10_000},
        {"name": "gemm_kernel", "device_type": "CUDA", "calls": 2, "self_device_ns": 60_000,
         "device_total_ns": 60_000},
        {"name": "memcpy", "device_type": "CUDA", "calls": 1, "self_device_ns": 20_000,
         "device_total_ns": 20_000},
        {"name": "ProfilerStep*", "device_type": "CUDA", "is_user_annotation": True, "calls": 1,
         "self_device_ns": 90_000, "device_total_ns": 90_000},
    ])


def test_device_columns_and_total_excluding_annotations() -> None:
    text = render_table(device_rows())
    lines = text.splitlines()
    heads = [c.strip() for c in lines[1].split("  ") if c.strip()]
    assert heads == [
        "Name", "Self CPU %", "Self CPU", "CPU total %", "CPU total", "CPU time avg", "Self CUDA",
        "Self CUDA %", "CUDA total", "CUDA time avg", "# of Calls",
    ]
    c = {r["Name"]: r for r in cells(text)}
    assert c["gemm_kernel"]["Self CUDA %"] == "75.00%"  # 60 / (60 + 20): annotation excluded
    assert c["ProfilerStep*"]["Self CUDA %"] == "112.50%"
    assert c["aten::mm"]["CUDA total"] == "60.000us" and c["aten::mm"]["CUDA time avg"] == "30.000us"
    assert c["gemm_kernel"]["CPU total %"] == "0.00%"
    assert lines[-2:] == ["Self CPU time total: 40.000us", "Self CUDA time total: 80.000us"]
    xpu = render_table(device_rows(), use_device="xpu").splitlines()
    assert "Self XPU %" in xpu[1] and xpu[-1] == "Self XPU time total: 80.000us"


def test_no_device_columns_without_self_device_time() -> None:
    df = device_rows().with_columns(pl.lit(0, pl.Int64).alias("self_device_ns"))
    text = render_table(df)
    assert "CUDA" not in text and text.splitlines()[-1] == "Self CPU time total: 40.000us"


def test_device_memory_columns() -> None:
    df = device_rows().with_columns(
        pl.when(pl.col("name") == "aten::mm").then(2**20).otherwise(0).alias("device_mem_bytes"),
        pl.when(pl.col("name") == "aten::mm").then(2**20).otherwise(0).alias("self_device_mem_bytes"),
    )
    c = {r["Name"]: r for r in cells(render_table(df, profile_memory=True))}
    assert c["aten::mm"]["CUDA Mem"] == c["aten::mm"]["Self CUDA Mem"] == "1.00 MB"
    no_mem = render_table(df.with_columns(pl.lit(0, pl.Int64).alias("self_device_mem_bytes")), profile_memory=True)
    assert "CUDA Mem" not in no_mem and "CPU Mem" in no_mem


def test_device_time_without_device_raises() -> None:
    df = make_rows([{"name": "op", "calls": 1, "self_device_ns": 5}])
    with pytest.raises(ValueError, match="use_device"):
        render_table(df)
    assert "Self CUDA" in render_table(df, use_device="cuda")


# -------------------------------------------------------------------------------- sorting
def test_sort_aliases_and_stability() -> None:
    df = device_rows()
    by_dev = [r["Name"] for r in cells(render_table(df, sort_by="cuda_time_total"))]
    assert by_dev == ["ProfilerStep*", "aten::mm", "gemm_kernel", "memcpy", "cudaLaunchKernel"]
    for alias in ("device_time_total", "xpu_time_total", "privateuse1_time_total", "device_total_ns"):
        assert [r["Name"] for r in cells(render_table(df, sort_by=alias))] == by_dev
    # ties keep input order (Python's sorted(..., reverse=True) is stable)
    by_count = [r["Name"] for r in cells(render_table(df, sort_by="count"))]
    assert by_count == ["aten::mm", "cudaLaunchKernel", "gemm_kernel", "memcpy", "ProfilerStep*"]
    by_self = [r["Name"] for r in cells(render_table(worked_rows(), sort_by="self_cpu_time_total"))]
    assert by_self == ["aten::addmm", "aten::linear", "aten::clamp_min", "aten::transpose", "aten::relu", "aten::t"]


@pytest.mark.parametrize("key", sorted(SORT_KEYS))
def test_every_torch_sort_key(key: str) -> None:
    render_table(device_rows(), sort_by=key)


def test_unknown_sort_key() -> None:
    with pytest.raises(ValueError, match="unknown sort_by 'self_gpu_time'.*self_cpu_time_total"):
        render_table(worked_rows(), sort_by="self_gpu_time")


# ---------------------------------------------- shapes, overloads, stacks, flops swap bug
def test_input_shapes_and_overload_columns() -> None:
    df = make_rows([
        {"name": "aten::add", "overload_name": "Tensor", "calls": 1, "input_shapes": "[[128, 20], [30, 20], [30]]"},
        {"name": "aten::sum", "calls": 1, "input_shapes": "[]"},
    ])
    lines = render_table(df, max_shapes_column_width=20).splitlines()
    heads = [c.strip() for c in lines[1].split("  ") if c.strip()]
    assert heads[:2] == ["Name", "Overload Name"] and heads[-1] == "Input Shapes"
    assert lines[0].endswith("-" * 20 + "  ")  # min(27 + 4, 20)
    assert lines[3].endswith("[[128, 20], [30, 20]  ")  # plain cut, no ellipsis
    assert lines[4].endswith(" " * 18 + "[]  ")
    assert lines[3].startswith("    aten::add         Tensor  ")  # both 13 wide (9 + 4)
    # only "[]" / "" shapes: no column
    assert "Input Shapes" not in render_table(df.with_columns(pl.lit("[]").alias("input_shapes")))


def test_source_location_layout() -> None:
    long = "/very/long/path/to/some/module/file.py(123): function_name"
    df = make_rows([
        {"name": "op_a", "calls": 1, "stack": ["a.py(1): f", long, "c.py(3): h"]},
        {"name": "op_b", "calls": 1, "stack": []},
    ])
    text = render_table(df, max_src_column_width=30)
    lines = text.splitlines()
    assert lines[0].endswith("-" * 30 + "  ")  # min(len(long) + 4, 30), left-aligned
    assert lines[1].endswith("Source Location" + " " * 15 + "  ")
    assert lines[3].startswith("    op_a") and lines[3].endswith("a.py(1): f" + " " * 20 + "  ")
    blank_cells = " " * len(lines[0].rsplit("-" * 30, 1)[0])
    assert lines[4] == blank_cells + "..." + long[-27:] + "  "
    assert lines[5] == blank_cells + "c.py(3): h".ljust(30) + "  "
    assert lines[6] == blank_cells + " " * 30 + "  "  # blank line after every row
    assert lines[7].startswith("    op_b") and lines[7].endswith(" " * 32)
    assert lines[8] == lines[6]
    assert lines[9] == lines[0]


def test_flops_header_scale_and_swap_bug() -> None:
    df = make_rows([
        {"name": "aten::mm", "calls": 2, "flops": 3_716_153_344, "stack": ["x.py(1): f", "y.py(2): g"]},
        {"name": "aten::relu", "calls": 1, "flops": 0},
        {"name": "aten::mul", "calls": 1, "flops": 2_450_000},
    ])
    no_stack = df.with_columns(pl.lit([], pl.List(pl.String)).alias("stack"))
    c = cells(render_table(no_stack, with_flops=True))
    assert [r["Total MFLOPs"] for r in c] == ["3716.153", "--", "2.450"]
    assert "FLOPs" not in render_table(no_stack)
    zero = no_stack.with_columns(pl.lit(0, pl.Int64).alias("flops"))
    assert "FLOPs" not in render_table(zero, with_flops=True)
    small = cells(render_table(no_stack.with_columns(pl.lit(7, pl.Int64).alias("flops")), with_flops=True))
    assert small[0]["Total FLOPs"] == "7.000"  # f"{7 * 1.0:8.3f}", header unscaled
    # with stacks AND flops torch writes the flops into "Source Location" (left-aligned,
    # src width) and the source into "Total MFLOPs" (right-aligned, width 12)
    lines = render_table(df, with_flops=True).splitlines()
    assert lines[1].endswith("Source Location  Total MFLOPs  ")
    assert lines[3].endswith("3716.153          x.py(1): f  ")
    # further stack entries go to the *last* column, i.e. the (right-aligned) FLOPs one
    assert lines[4].endswith("  y.py(2): g  ") and lines[4][: -len("y.py(2): g  ")].strip() == ""
    assert lines[5].strip() == ""  # blank line after the row
