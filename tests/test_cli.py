"""The `proftab` command line through its real entry points (console script, -m, main)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

import proftab as pt
from proftab.__main__ import main
from tests.builders import kernel, launch, op, write_events

ROOT = Path(__file__).resolve().parents[1]
CNN = ROOT / "data" / "train_cnn.pt.trace.json.gz"
H100 = ROOT / "data" / "h100_bert_small.pt.trace.json.gz"
PUB = ROOT / "tests" / "data" / "public"
BASE = PUB / "trace_compare__base__base.json.gz"
TEST = PUB / "trace_compare__test__test.json.gz"


def run_cli(*args: str, entry: str = "module") -> subprocess.CompletedProcess[str]:
    """Run the CLI in a subprocess (`python -m proftab` or the installed `proftab` script)."""
    if entry == "script":
        exe = shutil.which("proftab") or str(Path(sys.executable).with_name("proftab"))
        cmd = [exe, *args]
    else:
        cmd = [sys.executable, "-m", "proftab", *args]
    env = {**os.environ, "COLUMNS": "200"}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env, cwd=ROOT)


# ---------------------------------------------------------------------------- entry points


@pytest.mark.parametrize("entry", ["module", "script"])
def test_summary_entry_points_match_torch_table(entry: str) -> None:
    if entry == "script" and shutil.which("proftab") is None and not Path(sys.executable).with_name("proftab").exists():
        pytest.skip("console script not installed")
    res = run_cli("summary", str(CNN), "--limit", "10", entry=entry)
    assert res.returncode == 0, res.stderr
    assert res.stdout == pt.load(CNN).table(row_limit=10)  # piped: torch's text, byte for byte
    assert res.stderr == ""


def test_help_shows_examples_for_every_command() -> None:
    res = run_cli("--help")
    assert res.returncode == 0
    from proftab.cli import commands

    for name, cmd in commands().items():
        assert name in res.stdout
        rc, text, _ = _capture_main([name, "--help"])
        assert rc == 0
        assert "examples:" in text and f"proftab {name} " in text, name
        assert cmd.examples.strip().splitlines()[0].strip() in text


def test_progress_bar_on_request() -> None:
    rc, out, err = _capture_main(["summary", str(CNN), "--format", "csv", "--progress", "always"])
    assert rc == 0 and out.startswith("name,")
    lines = err.splitlines()
    assert lines[0].startswith("proftab: reading") and "MB" in lines[0]
    assert any(line.startswith("proftab: nesting") and "(100%)" in line for line in lines)
    assert _capture_main(["summary", str(CNN), "--format", "csv", "--progress", "always", "-q"])[2] == ""
    assert _capture_main(["summary", str(CNN), "--format", "csv"])[2] == ""  # auto: small input, not a terminal


def _capture_main(argv: list[str]) -> tuple[int, str, str]:
    import contextlib
    import io

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(argv)
    return rc, out.getvalue(), err.getvalue()


def test_bad_input_is_one_line_error_exit_2(tmp_path: Path) -> None:
    res = run_cli("summary", str(tmp_path / "missing.json"))
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("proftab: error: ")
    assert "missing.json" in lines[0] and "Traceback" not in res.stderr
    bad = tmp_path / "bad.json"
    bad.write_text('{"traceEvents": [{"ph": "X", "name": "a", "ts": 1, "dur": 2, "pid": 1, "tid": 1}, {"ph": ')
    rc, out, err = _capture_main(["summary", str(bad)])
    assert rc == 2 and out == ""
    assert err.startswith("proftab: error: ") and err.count("\n") == 1 and "bad.json" in err
    rc, out, err = _capture_main(["summary", str(bad), "--salvage", "--format", "csv"])
    assert rc == 0, err
    assert "proftab: warning:" in err
    assert pl.read_csv(out.encode())["name"].to_list() == ["a"]
    rc, out, err = _capture_main(["summary", str(bad), "--salvage", "--quiet", "--format", "csv"])
    assert rc == 0 and err == ""


def test_usage_errors_exit_2() -> None:
    assert _capture_main(["summary", str(CNN), "--sort", "bogus"])[0] == 2
    assert "unknown sort_by 'bogus'" in _capture_main(["summary", str(CNN), "--sort", "bogus"])[2]
    assert _capture_main([])[0] == 2
    assert _capture_main(["summary", str(CNN), "--format", "parquet"])[0] == 2  # needs -o


# ---------------------------------------------------------------------------- summary


def test_summary_formats_write_key_averages_columns(tmp_path: Path) -> None:
    tr = pt.load(CNN)
    ka = tr.key_averages().sort("self_cpu_ns", descending=True, maintain_order=True)
    rc, out, _ = _capture_main(["summary", str(CNN), "--format", "csv"])
    assert rc == 0
    csv = pl.read_csv(out.encode())
    assert csv.columns == ka.columns
    assert csv["name"].to_list() == ka["name"].to_list()
    assert csv["self_cpu_ns"].to_list() == ka["self_cpu_ns"].to_list()

    rc, out, _ = _capture_main(["summary", str(CNN), "--format", "json", "--limit", "3", "--sort", "count"])
    rows = json.loads(out)
    assert len(rows) == 3
    assert [r["calls"] for r in rows] == sorted(ka["calls"].to_list(), reverse=True)[:3]

    pq = tmp_path / "ops.parquet"
    assert _capture_main(["summary", str(CNN), "-o", str(pq)])[0] == 0  # format from the extension
    back = pl.read_parquet(pq)
    assert back.height == ka.height and back["self_cpu_ns"].sum() == ka["self_cpu_ns"].sum()

    md = tmp_path / "ops.md"
    assert _capture_main(["summary", str(CNN), "-o", str(md), "--limit", "4"])[0] == 0
    lines = md.read_text().splitlines()
    assert lines[0].startswith("| Name | Self CPU % |") and len(lines) == 2 + 4 + 2  # the human table + totals


def test_summary_options_reach_key_averages() -> None:
    tr = pt.load(CNN)
    rc, out, _ = _capture_main(["summary", str(CNN), "--group-by-input-shape", "--format", "csv", "--limit", "-1"])
    assert rc == 0
    assert pl.read_csv(out.encode()).height == tr.key_averages(group_by_input_shape=True).height
    rc, out, _ = _capture_main(["summary", str(CNN), "--top-level", "--format", "csv"])
    top = pl.read_csv(out.encode())
    assert top["top_level"].all() and top.height == tr.key_averages().filter(pl.col("top_level")).height
    rc, out, _ = _capture_main(["summary", str(CNN), "--top-level", "--limit", "5"])
    assert out == tr.table(row_limit=5, top_level_events_only=True)


def test_summary_multi_rank_files() -> None:
    r0, r1 = PUB / "trace_filter__sampled_rank-0.json.gz", PUB / "trace_filter__sampled_rank-1.json.gz"
    rc, out, _ = _capture_main(["summary", str(r0), str(r1), "--format", "csv", "--sort", "count"])
    assert rc == 0
    both = pt.load([r0, r1]).key_averages()
    assert pl.read_csv(out.encode())["calls"].sum() == both["calls"].sum()


def test_summary_rich_on_a_terminal() -> None:
    pytest.importorskip("rich")
    import pty

    master, slave = pty.openpty()
    env = {**os.environ, "COLUMNS": "160", "TERM": "xterm"}
    proc = subprocess.Popen([sys.executable, "-m", "proftab", "summary", str(H100), "--limit", "5"],
                            stdout=slave, stderr=subprocess.PIPE, cwd=ROOT, env=env)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:
            break
        if not data:
            break
        chunks.append(data)
    proc.wait(timeout=60)
    os.close(master)
    assert proc.stderr is not None
    err = proc.stderr.read()
    proc.stderr.close()
    assert err == b""
    text = b"".join(chunks).decode("utf-8", "replace")
    assert proc.returncode == 0
    assert "aten::addmm" in text and "Self CPU time total" in text
    assert "─" in text or "━" in text  # a rich box, not torch's dashes


# ---------------------------------------------------------------------------- check


def test_check_clean_trace_and_strict() -> None:
    rc, out, _ = _capture_main(["check", str(CNN)])
    assert rc == 0 and "clean: nothing found" in out
    assert _capture_main(["check", str(CNN), "--strict"])[0] == 0


def test_check_reports_overruns_on_real_trace() -> None:
    tr = pt.load(H100)
    overruns = tr.anomalies.filter(pl.col("kind") == "overrun")
    assert overruns.height > 0
    rc, out, _ = _capture_main(["check", str(H100), "--format", "json"])
    assert rc == 0  # a report, not a failure, without --strict
    rep = json.loads(out)
    assert rep["findings"]["overrun"]["count"] == overruns.height
    assert rep["findings"]["overrun"]["max_overrun_ns"] == overruns["overrun_ns"].max()
    assert rep["findings"]["unattributed_device"]["status"]  # degrades when proftab.device is absent
    res = run_cli("check", str(H100), "--strict")  # overruns are torch artifacts: reported, not failed
    assert res.returncode == 0 and "torch artifacts: overrun" in res.stdout
    res = run_cli("check", str(H100), "--strict", "--fail-on", "overrun")
    assert res.returncode == 1 and "found: overrun" in res.stdout


def test_check_finds_damage_synthetic(tmp_path: Path) -> None:
    ev = [
        {"ph": "X", "name": "parent", "cat": "cpu_op", "ts": 0, "dur": 10, "pid": 1, "tid": 1},
        {"ph": "X", "name": "child", "cat": "cpu_op", "ts": 5, "dur": 10, "pid": 1, "tid": 1},  # overrun 5 us
        {"ph": "X", "name": "neg", "cat": "cpu_op", "ts": 30, "dur": -2, "pid": 1, "tid": 1},
        {"ph": "B", "name": "open", "cat": "cpu_op", "ts": 40, "pid": 1, "tid": 2},
        {"ph": "X", "name": "<script>alert(1)</script>", "cat": "cpu_op", "ts": 50, "dur": 1, "pid": 1, "tid": 2},
    ]
    p = write_events(tmp_path / "damaged.json.gz", ev)
    rc, out, err = _capture_main(["check", str(p), "--strict", "--format", "json", "--quiet"])
    assert rc == 1 and err == ""
    rep = json.loads(out)
    assert rep["findings"]["overrun"]["count"] == 1
    assert rep["findings"]["overrun"]["examples"][0]["overrun_ns"] == 5000
    assert rep["findings"]["negative_dur"]["count"] == 1
    assert rep["findings"]["unmatched_begin"]["count"] == 1
    assert set(rep["failing"]) == {"negative_dur", "unmatched_begin"} and set(rep["artifacts"]) == {"overrun"}
    allow = ["--allow", "negative_dur", "--allow", "unmatched_begin"]
    assert _capture_main(["check", str(p), "--strict", "--quiet", *allow])[0] == 0
    assert _capture_main(["check", str(p), "--strict", "--quiet", *allow, "--fail-on", "artifacts"])[0] == 1


# ---------------------------------------------------------------------------- plot


def test_plot_writes_every_kind(tmp_path: Path) -> None:
    pytest.importorskip("altair")
    for kind in ("top", "timeline", "tree", "steps"):
        out = tmp_path / f"{kind}.html"
        rc, _, err = _capture_main(["plot", kind, str(CNN), "-o", str(out)])
        assert rc == 0, err
        text = out.read_text()
        assert "vegaEmbed" in text and "train_cnn" in text
    res = run_cli("plot", "top", str(H100), "--metric", "device", "-n", "3", "-o", str(tmp_path / "dev.json"))
    assert res.returncode == 0, res.stderr
    spec = json.loads((tmp_path / "dev.json").read_text())
    assert len({v["name"] for v in next(iter(spec["datasets"].values()))}) == 3


def test_plot_errors(tmp_path: Path) -> None:
    rc, _, err = _capture_main(["plot", "top", str(CNN), "-o", str(tmp_path / "x.txt")])
    assert rc == 2 and "unknown chart file type" in err
    rc, _, err = _capture_main(["plot", "timeline", str(CNN), "--step", "999", "-o", str(tmp_path / "x.html")])
    assert rc == 2 and err.startswith("proftab: error: ") and "ProfilerStep#999" in err
    assert _capture_main(["plot", "bogus", str(CNN), "-o", "x.html"])[0] == 2


def test_plot_png_when_renderer_installed(tmp_path: Path) -> None:
    pytest.importorskip("vl_convert")
    out = tmp_path / "tree.png"
    assert _capture_main(["plot", "tree", str(CNN), "-o", str(out), "-q"])[0] == 0
    assert out.read_bytes()[:4] == b"\x89PNG"


# ---------------------------------------------------------------------------- diff


def test_diff_cli_hta_pair() -> None:
    res = run_cli("diff", str(BASE), str(TEST))
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0].startswith("proftab diff")
    body = "\n".join(lines[3:])
    assert body.splitlines()[0].startswith("All2All_Pooled_Req") and " added " in body.splitlines()[0]
    for name in ("AddmmBackward0", "CatBackward0", "nccl:all_reduce"):
        assert name in body
    assert "cudaEventQuery" not in body  # unchanged rows are hidden by default
    rc, out, _ = _capture_main(["diff", str(BASE), str(TEST), "--format", "csv", "--status", "same"])
    same = pl.read_csv(out.encode())
    assert set(same["status"]) == {"same"} and "cudaEventQuery" in same["name"].to_list()
    assert (same["self_delta_ns"] == 0).all()


def test_diff_cli_formats_and_limits(tmp_path: Path) -> None:
    out = tmp_path / "d.parquet"
    assert _capture_main(["diff", str(BASE), str(TEST), "-o", str(out), "--sort", "calls"])[0] == 0
    d = pl.read_parquet(out)
    assert d.equals(pt.diff(BASE, TEST, sort="calls").filter(pl.col("status") != "same"))
    rc, text, _ = _capture_main(["diff", str(BASE), str(TEST), "--format", "json", "--limit", "2"])
    assert rc == 0 and len(json.loads(text)) == 2
    rc, _, err = _capture_main(["diff", str(BASE), str(tmp_path / "nope.json")])
    assert rc == 2 and "nope.json" in err


def test_check_unattributed_device_time(tmp_path: Path) -> None:
    """A kernel that no launch links to: counted when proftab.device can tell, else 'not available'."""
    ev = [op("aten::mm", 0, 20, ext=1), launch(2, 5, corr=10, ext=1),
          kernel(8, 6, corr=10, name="gemm", ext=1), kernel(30, 4, corr=99, name="orphan")]
    p = write_events(tmp_path / "gpu.json.gz", ev)
    rc, out, _ = _capture_main(["check", str(p), "--format", "json", "--quiet"])
    f = json.loads(out)["findings"]["unattributed_device"]
    try:
        from proftab import device
    except ImportError:
        device = None
    if device is None or not (hasattr(device, "unattributed") or hasattr(device, "activities")):
        assert f["status"].startswith("not available") and f["count"] == 0
        assert rc == 0
        return
    assert f["status"] == "checked"
    assert f["count"] == 1 and f["dur_ns"] == 4000 and f["examples"][0]["name"] == "orphan"
    assert _capture_main(["check", str(p), "--strict", "--quiet"])[0] == 0  # an artifact: opt-in
    assert _capture_main(["check", str(p), "--strict", "--quiet", "--fail-on", "unattributed"])[0] == 1


def test_import_and_help_stay_light() -> None:
    code = ("import sys, proftab, proftab.cli; from proftab.__main__ import main; main(['--help']);"
            "heavy = [m for m in ('altair', 'rich', 'nbclient', 'ipykernel', 'matplotlib', 'torch') "
            "if m in sys.modules]; print(heavy)")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip().splitlines()[-1] == "[]"


def test_a_bug_is_exit_1_with_one_line_and_traceback_on_debug(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only ProftabError / OSError are the user's fault (exit 2); anything else is a bug (exit 1)."""
    import proftab.cli.summary as summary_cli

    def broken(args: object) -> int:
        msg = "boom"
        raise RuntimeError(msg)

    # a user error is exit 2, one line
    rc, _, err = _capture_main(["summary", str(CNN), "--sort", "bogus_key"])
    assert rc == 2 and err.startswith("proftab: error:") and err.count("\n") == 1
    import dataclasses

    monkeypatch.setattr(summary_cli, "COMMAND", dataclasses.replace(summary_cli.COMMAND, run=broken))
    rc, out, err = _capture_main(["summary", str(CNN)])
    assert rc == 1 and out == ""
    assert err.count("\n") == 1 and "internal error: RuntimeError: boom" in err and "--debug" in err
    rc, _, err = _capture_main(["summary", str(CNN), "--debug"])
    assert rc == 1 and "Traceback (most recent call last)" in err and 'raise RuntimeError(msg)' in err
