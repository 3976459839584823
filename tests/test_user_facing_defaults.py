"""What a user meets first on real traces: canonical shapes, check --strict, datasets everywhere, readable defaults."""

from __future__ import annotations

import gzip
import json
import os
import re
from pathlib import Path  # noqa: TC003 - fixtures' annotations

import polars as pl
import pytest

import proftab as pt
from tests.builders import read_trace, write_trace
from tests.conftest import BUNDLED

H100 = BUNDLED / "h100_bert_small.pt.trace.json.gz"  # pretty-printed (indent=2) like 9 of the 52 public traces


@pytest.fixture(scope="module")
def h100_compact(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bundled H100 trace re-saved as compact JSON (what torch itself writes)."""
    return write_trace(tmp_path_factory.mktemp("compact") / "h100_compact.json.gz", read_trace(H100), compact=True)


# ----------------------------------------------------------------------------- 1: canonical input shapes


def test_pretty_printed_shapes_are_canonical(h100_compact: Path) -> None:
    with gzip.open(H100, "rt") as fh:
        assert '"Input Dims": [\n' in fh.read()  # the file really is pretty-printed
    pretty, compact = pt.load(H100), pt.load(h100_compact)
    for col in ("input_dims", "input_type", "input_strides", "concrete_inputs"):
        vals = pretty.events[col].drop_nulls()
        assert not vals.str.contains("\n").any(), col
        assert pretty.events[col].equals(compact.events[col]), col
    addmm = pretty.events.filter(pl.col("name") == "aten::addmm")["input_dims"]
    assert "[[512], [141, 512], [512, 512], [], []]" in addmm.to_list()
    ka_p = pretty.key_averages(group_by_input_shape=True)
    ka_c = compact.key_averages(group_by_input_shape=True)
    assert ka_p.select("name", "input_shapes", "calls").equals(ka_c.select("name", "input_shapes", "calls"))
    assert not ka_p["input_shapes"].str.contains("\n").any()
    # the typed form: lists of int64 dims
    from proftab.torch.aggregate import input_shapes_list_expr

    dims = ka_p.select(input_shapes_list_expr().alias("dims"))["dims"]
    assert dims.dtype == pl.List(pl.List(pl.Int64))
    assert [[512], [141, 512], [512, 512], [], []] in dims.to_list()


def test_pretty_printed_shapes_diff_and_tables(h100_compact: Path) -> None:
    from proftab.diff import diff

    d = diff(pt.load(H100), pt.load(h100_compact), group_by_input_shape=True)
    assert d.filter(pl.col("status") != "same").is_empty()
    text = pt.load(H100).table(group_by_input_shape=True, row_limit=10)
    assert "[[512], [141, 512], [512, 512], [], []]" in text
    assert len(text.splitlines()) == 10 + 6  # one line per row: header (3), rows, rule, 2 totals


def test_canonical_json_keeps_invalid_text() -> None:
    from proftab.io.kineto import canonical_json_columns

    df = pl.DataFrame({"input_dims": ["[\n  [\n    2\n  ],\n  []\n]", "[[2], []]", "[1,", None],
                       "grid": ["[1,1,1]", None, None, None]})
    out = canonical_json_columns(df)
    assert out["input_dims"].to_list() == ["[[2], []]", "[[2], []]", "[1,", None]
    assert out["grid"].to_list() == ["[1, 1, 1]", None, None, None]


# ----------------------------------------------------------------------------- 2: check --strict


def _check(*argv: str) -> tuple[int, str]:
    import contextlib
    import io

    from proftab.__main__ import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        rc = main(["check", *argv, "--plain", "--quiet"])
    return rc, out.getvalue()


def test_check_strict_fails_on_salvaged_truncated_trace(tmp_path: Path) -> None:
    raw = gzip.open(BUNDLED / "train_cnn.pt.trace.json.gz").read()
    cut = tmp_path / "cut.json"
    cut.write_bytes(raw[: len(raw) // 2])
    rc, out = _check(str(cut), "--salvage", "--strict")
    assert rc == 1 and "found: truncated 1" in out
    assert _check(str(cut), "--salvage")[0] == 0  # a report without --strict
    assert _check(str(cut), "--salvage", "--strict", "--allow", "truncated")[0] == 0
    assert _check(str(BUNDLED / "train_cnn.pt.trace.json.gz"), "--strict") == (0, _check(
        str(BUNDLED / "train_cnn.pt.trace.json.gz"))[1])


def test_check_strict_passes_torch_artifacts_on_real_trace() -> None:
    rc, out = _check(str(H100), "--strict")  # with_stack ProfilerStep#N overruns: torch's, not damage
    assert rc == 0 and "clean: no damage (torch artifacts: overrun" in out
    assert "ProfilerStep#N" in out  # explained
    assert _check(str(H100), "--strict", "--fail-on", "overrun,unattributed")[0] == 1
    assert _check(str(H100), "--strict", "--fail-on", "all")[0] == 1
    assert _check(str(H100), "--strict", "--fail-on", "nonsense")[0] == 2  # a usage error


# ----------------------------------------------------------------------------- 4: paths from notebooks/


def test_data_path_from_notebooks_dir_and_elsewhere(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from proftab.exceptions import ProftabError

    root = BUNDLED.parent
    monkeypatch.chdir(root / "notebooks")
    p = pt.data_path("data/train_cnn.pt.trace.json.gz")
    assert p.resolve() == (BUNDLED / "train_cnn.pt.trace.json.gz").resolve()
    assert pt.load(p).events.height > 0
    monkeypatch.chdir(root)
    assert pt.data_path("tests/data/public").is_dir()
    monkeypatch.chdir(tmp_path)  # outside the checkout: found through the checkout proftab was imported from
    if Path(pt.__file__).resolve().parents[2] == root.resolve():  # an editable install (or PYTHONPATH=src)
        found = pt.data_path("data/train_cnn.pt.trace.json.gz")
        assert found.resolve() == (BUNDLED / "train_cnn.pt.trace.json.gz").resolve()
    else:  # installed from a wheel: no checkout to fall back on, and the error says where it looked
        with pytest.raises(ProftabError, match=f"looked in: {re.escape(str(tmp_path))}"):
            pt.data_path("data/train_cnn.pt.trace.json.gz")
    with pytest.raises(ProftabError, match="'data/nope.json' not found; looked in"):
        pt.data_path("data/nope.json")


def test_dir_proftab_is_the_api() -> None:
    names = set(dir(pt))
    assert not names & {"os", "TYPE_CHECKING", "annotations", "Sequence"}
    assert {"load", "scan", "data_path", "Trace"} <= names


# ----------------------------------------------------------------------------- 5: datasets everywhere


@pytest.fixture(scope="module")
def h100_dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("ds") / "run.pq"
    pt.convert(str(H100), out, progress=False)
    return out


def _cli(*argv: str) -> tuple[int, str, str]:
    import contextlib
    import io

    from proftab.__main__ import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(list(argv))
    return rc, out.getvalue(), err.getvalue()


def test_every_subcommand_reads_a_dataset(h100_dataset: Path, tmp_path: Path) -> None:
    from proftab.cli import BUILTIN_COMMANDS

    ds = str(h100_dataset)
    text = pt.load(H100).table(row_limit=5)
    rc, out, err = _cli("summary", ds, "--limit", "5", "--plain")
    assert (rc, out) == (0, text), err
    assert _cli("summary", str(h100_dataset / "_proftab.json"), "--limit", "5", "--plain")[1] == text
    rc, out, _ = _cli("check", ds, "--strict", "--plain")
    assert rc == 0 and "torch artifacts: overrun 2" in out
    rc, out, _ = _cli("diff", ds, str(H100), "--plain")
    assert rc == 0 and "0 rows differ" in out
    for kind in ("top", "tree", "timeline", "steps"):
        rc, _, err = _cli("plot", kind, ds, "-o", str(tmp_path / f"{kind}.json"))
        assert rc == 0, err
        assert json.loads((tmp_path / f"{kind}.json").read_text())["$schema"].startswith("https://vega")
    assert set(BUILTIN_COMMANDS) >= {"summary", "check", "diff", "plot", "convert"}


def test_load_on_a_dataset_says_use_scan(h100_dataset: Path) -> None:
    with pytest.raises(pt.TraceError, match=r"(?s)proftab Parquet dataset.*pt\.scan\("):
        pt.load(h100_dataset)
    with pytest.raises(pt.TraceError, match=r"pt\.scan\("):
        pt.load(h100_dataset / "_proftab.json")
    assert pt.scan(h100_dataset).key_averages()["calls"].sum() == pt.load(H100).key_averages()["calls"].sum()


# ----------------------------------------------------------------------------- 6: readable tables on GPU traces

# four kernel names of the TraceLens H100 Qwen1.5-0.5B trace that torch's 55-column cut prints alike
_PREFIX = "void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<at::native::"
QWEN_KERNELS = [
    _PREFIX + "BinaryFunctor<c10::BFloat16, c10::BFloat16, c10::BFloat16, at::native::binary_internal::MulFunctor<"
    "float> > >(at::TensorIteratorBase&, at::native::BinaryFunctor<c10::BFloat16, c10::BFloat16, c10::BFloat16, "
    "at::native::binary_internal::MulFunctor<float> > const&)::{lambda(int)#1}>(int, ...)",
    _PREFIX + "neg_kernel_cuda(at::TensorIteratorBase&)::{lambda()#2}::operator()() const::{lambda()#9}::operator()"
    "() const::{lambda(c10::BFloat16)#1}>(at::TensorIteratorBase&, ...)::{lambda(int)#1})",
    _PREFIX + "CUDAFunctor_add<c10::BFloat16> >(at::TensorIteratorBase&, at::native::CUDAFunctor_add<c10::BFloat16> "
    "const&)::{lambda(int)#1}>(int, ...)::{lambda(int)#1})",
    _PREFIX + "direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::{lambda()#7}::"
    "operator()() const::{lambda(c10::BFloat16)#1}>(at::TensorIteratorBase&, ...)::{lambda(int)#1})",
]


def test_distinct_cuts_keep_real_kernel_names_apart() -> None:
    from proftab.render.text import distinct_cuts, middle_cut
    from proftab.torch.text_table import _cut_name

    torch_cut = [_cut_name(n, 55) for n in QWEN_KERNELS]
    assert len(set(torch_cut)) == 1  # what torch prints: four identical rows
    for cuts, ell in ((torch_cut, "..."), ([middle_cut(n, 40) for n in QWEN_KERNELS], "…")):
        out = distinct_cuts(QWEN_KERNELS, cuts, ellipsis=ell)
        assert len(set(out)) == 4 and {len(c) for c in out} == {len(cuts[0])}
        assert any("neg_kernel" in c for c in out) and any("direct_copy" in c for c in out)
    assert distinct_cuts(["aten::mm", "aten::mul"], ["aten::mm", "aten::mul"]) == ["aten::mm", "aten::mul"]


def _rich_summary(path: Path, width: int, *argv: str) -> str:
    import io

    from rich.console import Console

    from proftab.cli import build_parser
    from proftab.cli.summary import _rich_table, _select

    args = build_parser().parse_args(["summary", str(path), *argv])
    tr = pt.load(path)
    ka = tr.key_averages(args.group_by_input_shape)
    buf = io.StringIO()
    console = Console(file=buf, width=width, force_terminal=False, color_system=None)
    _rich_table(tr, ka, _select(ka, args, args.limit), console, args)
    return buf.getvalue()


@pytest.mark.parametrize("width", [100, 200])
def test_rich_table_fits_the_terminal_and_says_what_it_left_out(width: int) -> None:
    pytest.importorskip("rich")
    text = _rich_summary(H100, width, "--sort", "self_cuda_time_total", "--limit", "10")
    lines = text.splitlines()
    assert max(len(line.rstrip()) for line in lines) <= width
    assert len([line for line in lines if line.startswith("│")]) == 10  # one line per row, no wrapping
    assert len(lines) <= 10 + 5 + 12  # + title, header, rules, a caption of a few lines
    assert "10 of " in text and "rows (--limit N" in text
    if width == 100:
        assert "columns not shown at width 100:" in text
    assert "Self CUDA" in text


@pytest.mark.slow
@pytest.mark.skipif(not (SHARED_QWEN := BUNDLED.parent.parent / "shared" / "traces" / "public" / "tracelens"
                         / "h100__Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz").exists(), reason="needs ../shared")
def test_rich_and_piped_tables_on_qwen_gpu_trace() -> None:
    pytest.importorskip("rich")
    text = _rich_summary(SHARED_QWEN, 200, "--sort", "self_cuda_time_total", "--limit", "10")
    rows = [line for line in text.splitlines() if line.startswith("│")]
    assert len(rows) == 10  # was ~60 lines: kernel names wrapped over up to 21 lines
    assert len({r.split("│")[1] for r in rows}) == 10
    assert "columns not shown at width 200: Self CUDA Mem, CUDA Mem" in text
    tr = pt.load(SHARED_QWEN)
    torch_text = tr.table(sort_by="self_cuda_time_total", row_limit=10)
    assert len({line[:55] for line in torch_text.splitlines()[3:13]}) == 9  # torch prints two rows alike
    piped = tr.table(sort_by="self_cuda_time_total", row_limit=10, distinct_names=True)  # what the CLI prints
    assert len({line[:55] for line in piped.splitlines()[3:13]}) == 10


# ----------------------------------------------------------------------------- 7: noise out of the defaults


def test_no_python_summary_and_ops_defaults_on_h100() -> None:
    tr = pt.load(H100)
    ka = tr.key_averages()
    host = ka.filter(pl.col("device_type") == "CPU").sort("self_cpu_ns", descending=True)
    assert host["name"][0] == "threading.py(359): wait"  # torch's default: a tqdm thread sleeping tops it
    rc, out, err = _cli("summary", str(H100), "--limit", "3", "--plain")
    assert rc == 0 and "--no-python shows ops only" in err
    rc, out, err = _cli("summary", str(H100), "--limit", "3", "--plain", "--no-python")
    assert rc == 0 and "threading.py" not in out and ".py(" not in out and "--no-python" not in err
    assert out.splitlines()[3].split()[0] == "ProfilerStep*"
    # the notebook card and the charts default to ops
    from proftab.display import top_ops

    card, _ = top_ops(tr, 5)
    assert not card["name"].str.contains(r"\.py\(").any() and "aten::addmm" in card["name"].to_list()
    assert "threading.py" not in tr._repr_html_()


def test_without_python_keeps_op_totals() -> None:
    from proftab.views import without_python

    nested = pt.load(H100).nested
    ops = without_python(nested)
    assert (ops["cat"].cast(pl.String) != "python_function").all()
    # an op's subtree time is unchanged: its self gains the frames folded into it
    kept = nested.filter(pl.col("cat").cast(pl.String) != "python_function")
    assert ops["self_ns"].sum() == kept["self_ns"].sum() + (
        nested["self_ns"].sum() - kept["self_ns"].sum() - _orphan_python_self(nested))
    assert (ops["self_ns"] >= 0).all() and ops["depth"].min() == 0
    ids = set(ops["event_id"].to_list())
    assert set(ops["parent_id"].drop_nulls().to_list()) <= ids


def test_thread_views_on_h100(tmp_path: Path) -> None:
    """`--threads ops|main`: only those host threads, nested and aggregated as in the whole trace."""
    from polars.testing import assert_frame_equal

    from proftab.exceptions import UsageError
    from proftab.tracks import thread_view_tracks

    tr = pt.load(H100)
    host_tids = set(tr.events.filter(pl.col("cat").cast(pl.String) != "kernel")["tid"].to_list())
    (main_tid,) = thread_view_tracks(tr.events, "main")["tid"].to_list()
    assert main_tid == 19392 and len(host_tids) > 1  # the thread that calls ProfilerStep#N
    main = tr.select_threads("main")
    whole = tr.nested
    # the kept thread nests exactly as in the whole trace; every device row is kept
    assert_frame_equal(main.nested.filter(pl.col("tid") == main_tid), whole.filter(pl.col("tid") == main_tid))
    dev = pl.col("cat").cast(pl.String).is_in(["kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation"])
    assert main.events.filter(dev).height == tr.events.filter(dev).height
    assert set(main.events.filter(~dev)["tid"].to_list()) == {main_tid}
    ka = main.key_averages().filter(pl.col("device_type") == "CPU").sort("self_cpu_ns", descending=True)
    assert not ka["name"].str.contains("threading.py").any() and ka["name"][0] == "aten::addmm"
    full = tr.key_averages().filter(pl.col("device_type") == "CPU")
    both = ka.join(full, on=["name", "is_user_annotation"], suffix="_all")
    assert (both["calls"] <= both["calls_all"]).all() and both.filter(pl.col("name") == "aten::addmm")["calls"].item() \
        == both.filter(pl.col("name") == "aten::addmm")["calls_all"].item()  # every addmm runs on the main thread
    ops = tr.select_threads("ops")
    assert not ops.key_averages()["name"].str.contains(r"threading\.py\(359\): wait").any()
    rc, out, err = _cli("summary", str(H100), "--limit", "3", "--plain", "--threads", "main")
    assert rc == 0 and "threading.py" not in out and "--threads main: thread 19392" in err
    assert "(1 of 2 host threads; device rows all kept)" in err, err  # as the repr: "2 host threads"
    assert "2 host threads" in repr(tr)
    # a dataset stays lazy and gives the same table (its stored whole-trace key_averages is not used)
    ds = pt.convert(str(H100), tmp_path / "ds", progress=False)
    sc = pt.scan(ds).select_threads("main")
    assert sc.is_lazy
    assert_frame_equal(sc.key_averages().sort("name", "device_type"), main.key_averages().sort("name", "device_type"))
    with pytest.raises(UsageError, match="unknown thread view 'gpu'"):
        tr.select_threads("gpu")


def _orphan_python_self(nested: pl.DataFrame) -> int:
    """Self time of python frames with no op above them (what the ops view leaves out)."""
    import numpy as np

    from proftab.intervals.tree import nearest_ancestor, row_positions

    rank, ids = nested["rank"].to_numpy(), nested["event_id"].to_numpy()
    parent = row_positions(rank, ids, rank, nested["parent_id"].fill_null(-1).to_numpy())
    py = (nested["cat"].cast(pl.String) == "python_function").to_numpy()
    anc = nearest_ancestor(parent, np.arange(nested.height), ~py)
    return int(nested["self_ns"].to_numpy()[py & (anc < 0)].sum())


def test_charts_default_to_ops() -> None:
    pytest.importorskip("altair")
    from proftab import plot

    tr = pt.load(H100)

    def values(chart: object) -> list[dict]:
        return next(iter(chart.to_dict()["datasets"].values()))  # type: ignore[attr-defined]

    assert values(plot.top_ops(tr, 5))[0]["name"] == "ProfilerStep*"
    assert values(plot.top_ops(tr, 5, python=True))[0]["name"] == "threading.py(359): wait"
    roots = {r["name"] for r in values(plot.icicle(tr)) if r["depth"] == 0}
    assert roots == {"ProfilerStep*"}  # was: <string>(1): <module>, threading.py(1032): _bootstrap
    py_roots = {r["name"] for r in values(plot.icicle(tr, python=True)) if r["depth"] == 0}
    assert "threading.py(1032): _bootstrap" in py_roots


def test_annotation_share_over_100_is_explained() -> None:
    rc, _, err = _cli("summary", str(H100), "--limit", "3", "--plain", "--sort", "self_cuda_time_total")
    assert rc == 0 and "ProfilerStep*: Self CUDA % over 100 is torch's arithmetic" in err


# ----------------------------------------------------------------------------- 8: the small things


def _children(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(entry))
    return out


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc (Linux)")
def test_ctrl_c_during_convert_is_one_line_rc_130(tmp_path: Path) -> None:
    import signal
    import subprocess
    import sys
    import time

    src = tmp_path / "run"
    src.mkdir()
    for i in range(6):
        (src / f"r{i}.json.gz").write_bytes(H100.read_bytes())
    out = tmp_path / "run.pq"
    env = {**os.environ, "PYTHONPATH": str(Path(pt.__file__).parents[1])}  # the proftab under test, installed or not
    p = subprocess.Popen([sys.executable, "-m", "proftab", "convert", str(src), str(out), "--ranks", "0,1,2,3,4,5",
                          "--workers", "2", "--progress", "never"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, start_new_session=True, env=env)
    deadline = time.monotonic() + 60
    while len(_children(p.pid)) < 2 and time.monotonic() < deadline and p.poll() is None:
        time.sleep(0.05)
    time.sleep(0.5)  # the workers are importing or converting
    os.killpg(p.pid, signal.SIGINT)  # what a terminal's Ctrl-C does: the whole process group
    _, err = p.communicate(timeout=120)
    if p.returncode == 0:
        pytest.skip("the conversion finished before the interrupt")
    assert (p.returncode, err) == (130, "proftab: interrupted\n")
    assert not out.exists()


def test_two_files_claiming_a_rank_hint_names_the_cli_option(tmp_path: Path) -> None:
    rank0 = BUNDLED.parent / "tests" / "data" / "public" / "trace_filter__sampled_rank-0.json.gz"  # distributedInfo
    a, b = tmp_path / "a.json.gz", tmp_path / "b.json.gz"
    a.write_bytes(rank0.read_bytes())
    b.write_bytes(rank0.read_bytes())
    rc, _, err = _cli("summary", str(a), str(b), "--plain")
    assert rc == 2 and "two files claim rank 0" in err and "CLI: --ranks 0,1" in err
    rc, out, _ = _cli("summary", str(a), str(b), "--plain", "--ranks", "0,1", "--limit", "2")
    assert rc == 0 and "Self CPU time total" in out
    rc, _, err = _cli("convert", str(a), str(b), str(tmp_path / "x.pq"), "-q")
    assert rc == 2 and "CLI: --ranks 0,1" in err
    assert _cli("convert", str(a), str(b), str(tmp_path / "x.pq"), "-q", "--ranks", "0,1")[0] == 0


def test_small_cli_things_on_real_traces(tmp_path: Path) -> None:
    cnn = str(BUNDLED / "train_cnn.pt.trace.json.gz")
    # the sort-key error names each key once
    rc, _, err = _cli("summary", cnn, "--sort", "bogus")
    valid = err.split("valid keys: ")[1].split(" (and")[0].split(", ")
    assert rc == 2 and len(valid) == len(set(valid)) and "flops" in valid
    # --step 999 lists the steps there are
    rc, _, err = _cli("plot", "timeline", cnn, "--step", "999", "-o", str(tmp_path / "t.json"))
    assert rc == 2 and "no ProfilerStep#999 on rank 0; steps on rank 0: 2, 3, 4, 5" in err
    # --format markdown is the human table
    rc, out, _ = _cli("summary", str(H100), "--format", "markdown", "--limit", "3")
    lines = out.splitlines()
    assert rc == 0 and lines[0].startswith("| Name | Self CPU % | Self CPU |") and len(lines) == 2 + 3 + 2
    assert "self_cpu_ns" not in out and "ms |" in out and "Self CPU time total: 9.686ms" in out
    # -o out.xlsx: refused, nothing written
    rc, _, err = _cli("summary", cnn, "-o", str(tmp_path / "out.xlsx"))
    assert rc == 2 and "does not write Excel workbooks" in err and not (tmp_path / "out.xlsx").exists()
    assert _cli("summary", cnn, "-o", str(tmp_path / "out.foo"))[0] == 2
    # check's example tables: a column holding human times is not labelled _ns
    rc, out, _ = _cli("check", str(H100), "--plain")
    head = next(line for line in out.splitlines() if line.startswith("rank  event_id"))
    assert "dur_ns" not in head and " dur " in f" {head} " and "overrun_ns" not in head


def test_plot_steps_rank_is_not_ignored(tmp_path: Path) -> None:
    pytest.importorskip("altair")
    from proftab import plot

    pair = sorted((BUNDLED.parent / "tests" / "data" / "public").glob("trace_filter__sampled_rank-*.json.gz"))
    tr = pt.load(pair)

    def total(chart: object) -> float:
        return sum(r["ns"] for r in next(iter(chart.to_dict()["datasets"].values())))  # type: ignore[attr-defined]

    both, r0, r1 = total(plot.steps(tr)), total(plot.steps(tr, rank=0)), total(plot.steps(tr, rank=1))
    assert 0 < r0 < both and 0 < r1 < both and r0 + r1 == both
    assert r0 == total(plot.steps(pt.load(pair[0])))
    rc, _, err = _cli("plot", "steps", *map(str, pair), "--rank", "0", "-o", str(tmp_path / "s.json"))
    assert rc == 0, err
    spec = json.loads((tmp_path / "s.json").read_text())
    assert sum(r["ns"] for r in next(iter(spec["datasets"].values()))) == r0
