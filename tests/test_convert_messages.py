"""convert with a failed file names it, check / scan report the missing rank; convert from a plain script."""

from __future__ import annotations

import gzip
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import proftab as pt
from proftab.cli import main
from proftab.exceptions import SkippedFileWarning

ROOT = Path(__file__).resolve().parents[1]
GLOO4 = sorted((ROOT / "tests" / "data" / "gloo4").glob("rank-*.json.gz"))


@pytest.fixture
def bad_dir(tmp_path: Path) -> Path:
    """rank 0 whole, rank 1 cut in half (a truncated file)."""
    d = tmp_path / "bad"
    d.mkdir()
    (d / GLOO4[0].name).write_bytes(GLOO4[0].read_bytes())
    raw = gzip.decompress(GLOO4[1].read_bytes())
    (d / GLOO4[1].name).write_bytes(gzip.compress(raw[: len(raw) // 2]))
    return d


def test_keep_going_names_the_skipped_file_and_check_reports_it(
        bad_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Before: convert --keep-going printed only "wrote" and exited 0, check said "clean: nothing found"
    (exit 0 under --strict too) and summary showed rank 0 alone without a word. Now convert exits 1
    (as make -k) after writing the rest, naming the skipped file; -q keeps that line and the status."""
    out = tmp_path / "bad.pq"
    assert main(["convert", str(bad_dir), str(out), "--keep-going"]) == 1
    err = capsys.readouterr().err
    assert f"proftab: warning: skipped {bad_dir / GLOO4[1].name}: TraceError" in err
    assert "truncated" in err
    assert f"proftab: wrote {out} without 1 skipped file(s): {bad_dir / GLOO4[1].name}" in err
    with pytest.warns(pt.ProftabWarning, match="a rank is missing"):
        assert pt.scan(out).files["rank"].to_list() == [0]  # what could be written was
    assert main(["convert", str(bad_dir), str(tmp_path / "q.pq"), "--keep-going", "-q"]) == 1
    assert capsys.readouterr().err.strip() == \
        f"proftab: wrote {tmp_path / 'q.pq'} without 1 skipped file(s): {bad_dir / GLOO4[1].name}"
    assert main(["convert", str(bad_dir / GLOO4[0].name), str(tmp_path / "ok.pq"), "--keep-going"]) == 0
    assert "skipped" not in capsys.readouterr().err
    assert main(["check", str(out)]) == 0
    cap = capsys.readouterr()
    assert f"found: missing_file 1 (not in the dataset: {bad_dir / GLOO4[1].name})" in cap.out
    assert cap.err.count("a rank is missing") == 1
    assert main(["check", "--strict", str(out)]) == 1
    capsys.readouterr()
    assert main(["summary", str(out)]) == 0
    err = capsys.readouterr().err
    assert err.count("proftab: warning:") == 1
    assert f"a rank is missing: 1 source file(s) failed to convert and are not in the dataset (ranks present: 0): " \
           f"{bad_dir / GLOO4[1].name}" in err


def test_the_python_api_warns_too(bad_dir: Path, tmp_path: Path) -> None:
    with pytest.warns(SkippedFileWarning, match=f"skipped .*{GLOO4[1].name}") as rec:
        ds = pt.convert(bad_dir, tmp_path / "d.pq", on_error="skip", progress=False)
    skipped = [w.message for w in rec if isinstance(w.message, SkippedFileWarning)]
    assert [m.path for m in skipped] == [str(bad_dir / GLOO4[1].name)]
    assert isinstance(skipped[0], pt.ProftabWarning)
    with pytest.warns(pt.ProftabWarning, match="a rank is missing") as rec:
        tr = pt.scan(ds)
        tr.key_averages()
        tr.ranks.step_times()
    assert len(rec) == 1  # once per scan, not once per analysis
    assert tr.files["rank"].to_list() == [0]


@pytest.mark.parametrize("how", ["file", "stdin"])
def test_convert_from_a_plain_script(tmp_path: Path, how: str) -> None:
    """A script without `if __name__ == "__main__":` calling `pt.convert` on several files: the spawn
    workers used to re-run it ("another proftab process is writing this output", BrokenProcessPool)."""
    mr = tmp_path / "mr"
    mr.mkdir()
    for p in GLOO4[:2]:
        (mr / p.name).write_bytes(p.read_bytes())
    script = textwrap.dedent(f"""
        import proftab as pt
        print("top level ran")
        out = pt.convert({str(mr)!r}, {str(tmp_path / "s1.pq")!r}, max_workers=2, progress=False)
        print("ranks", pt.scan(out).files["rank"].to_list())
    """)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # the installed proftab
    if how == "file":
        path = tmp_path / "plain.py"
        path.write_text(script)
        proc = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, env=env, timeout=300,
                              cwd=tmp_path, check=False)
    else:
        proc = subprocess.run([sys.executable, "-"], input=script, capture_output=True, text=True, env=env,
                              timeout=300, cwd=tmp_path, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["top level ran", "ranks [0, 1]"]
