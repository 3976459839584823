r"""Hostile names through every subcommand's text output, piped and on a terminal (issue 30.7).

Real traces (the bundled H100 BERT, torch 2.13 CNN training and module traces) with op and
module names rewritten to carry rich markup (``[/nope]``, ``[link=...]``), an OSC 8 hyperlink
and a CSI colour sequence, RLO (U+202E), C1 CSI (U+009B) and a newline followed by a fake row.
Every renderer (`proftab.render.table`) must print them as visible escapes: no raw control
character, no MarkupError, no hyperlink, no extra row.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
from typing import TYPE_CHECKING

import polars as pl
import pytest

import proftab as pt
from proftab.cli import main
from tests.builders import read_trace, write_trace
from tests.conftest import DATA, PUBLIC, TORCH213

if TYPE_CHECKING:
    from pathlib import Path

pytest.importorskip("rich")

#: a name that attacks rich markup, the terminal and the table layout at once
HOSTILE = ("aten::bad\x1b]8;;https://evil.example\x07[/nope]\u202e\x9b2J[link=https://evil.example]x[/link]"
           "\x1b[31m[bold red]\nFAKE ROW")
RAW = ("\x1b", "\x07", "\u202e", "\x9b")

H100 = PUBLIC / "h100__gaunernst_bert-small-uncased__1016001.json.gz"
CNN = TORCH213 / "train_cnn" / "trace.json.gz"
MODULES = DATA / "modules_train_step.pt.trace.json.gz"


def _rewrite(src: Path, dst: Path, renames: dict[str, str]) -> Path:
    """`src` with every event name's `renames` substrings replaced (the rest byte-equal in meaning)."""
    doc = read_trace(src)
    for ev in doc["traceEvents"]:
        name = ev.get("name")
        if isinstance(name, str):
            for old, new in renames.items():
                name = name.replace(old, new)
            ev["name"] = name
    return write_trace(dst, doc)


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("hostile")
    return {
        "gpu": _rewrite(H100, d / "gpu.json.gz", {"aten::addmm": HOSTILE, "Linear": "Lin" + HOSTILE}),
        "cnn": _rewrite(CNN, d / "cnn.json.gz", {"aten::empty": HOSTILE, "aten::conv2d": HOSTILE + "conv"}),
        "modules": _rewrite(MODULES, d / "modules.json.gz", {"Linear": HOSTILE, "aten::view": HOSTILE}),
        # a hostile file name (titles, the check accounting, errors and warnings name it)
        "named": _rewrite(H100, d / "evil[red]\x1b]0;title\x07\u202e\x9b[link=evil.example].json.gz", {}),
    }


def _argvs(h: dict[str, Path]) -> list[list[str]]:
    gpu, cnn, mods, named = (str(h[k]) for k in ("gpu", "cnn", "modules", "named"))
    return [
        ["summary", gpu], ["summary", gpu, "--group-by-input-shape"], ["check", named], ["perf", named],
        ["perf", named, "--by", "name"], ["perf", named, "--lost", "5"], ["perf", named, "--ops"],
        ["diff", str(H100), gpu], ["memory", cnn], ["memory", cnn, "--by", "op"],
        ["modules", mods], ["modules", mods, "--by", "type"],
        ["critical-path", gpu, "--by", "name"], ["critical-path", gpu, "--by", "path"],
        ["critical-path", gpu, "--by", "module"], ["findings", named],
    ]


def _assert_safe(text: str, argv: list[str]) -> None:
    for ch in RAW:
        assert ch not in text, (argv, repr(ch))
    assert not any(line.lstrip("│┃ ").startswith("FAKE ROW") for line in text.splitlines()), argv
    assert "\\x1b" in text or "…" in text, (argv, "the hostile name is not shown (escaped or cut)")


def _run(argv: list[str], monkeypatch: pytest.MonkeyPatch, *, terminal: bool) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    if terminal:
        from rich.console import Console

        import proftab.cli._common as common
        import proftab.cli.summary as summary

        def console(args: object, stream: object = None) -> Console | None:
            if getattr(args, "plain", False) or getattr(args, "output", None):
                return None
            return Console(file=out, width=120, force_terminal=True, color_system="truecolor")
        monkeypatch.setattr(common, "rich_console", console)
        monkeypatch.setattr(summary, "rich_console", console)
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main([*argv, "-q"])
    return rc, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("terminal", [False, True], ids=["piped", "terminal"])
def test_hostile_names_through_every_subcommand(hostile: dict[str, Path], monkeypatch: pytest.MonkeyPatch,
                                                terminal: bool) -> None:
    for argv in _argvs(hostile):
        rc, out, err = _run(argv, monkeypatch, terminal=terminal)
        assert rc == 0, (argv, err)
        if terminal:  # rich's own styling is the only escape sequence: strip SGR, then nothing raw
            import re

            out = re.sub(r"\x1b\[[0-9;]*m", "", out)
            assert "\x1b]8;" not in out, argv  # a [link=...] name is text, never an OSC 8 hyperlink
        _assert_safe(out, argv)
        if argv[0] != "summary" or terminal:  # (torch's piped table cuts names at 55 characters)
            joined = out.replace("\n", "")  # a long title (the file's path) wraps at the width
            assert any(t in joined for t in ("[/nope]", "[link=evil.example]", "…")), argv  # markup as text (or cut)


def test_hostile_names_on_a_pseudo_terminal(hostile: dict[str, Path]) -> None:
    """The real CLI with stdout on a pty: rich's terminal path, no monkeypatching."""
    import pty

    master, slave = pty.openpty()
    env = {**os.environ, "COLUMNS": "110", "TERM": "xterm-256color"}
    with subprocess.Popen([sys.executable, "-m", "proftab", "modules", str(hostile["modules"]), "-q"],
                          stdout=slave, stderr=subprocess.PIPE, env=env) as proc:
        os.close(slave)
        chunks = []
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:  # the child closed the pty
                break
            if not data:
                break
            chunks.append(data)
        rc = proc.wait(timeout=120)
        err = proc.stderr.read().decode() if proc.stderr else ""
    os.close(master)
    text = b"".join(chunks).decode("utf-8", "replace")
    assert rc == 0, err
    assert "┃" in text  # rich's table: the terminal was detected
    import re

    text = re.sub(r"\x1b\[[0-9;]*m", "", text)
    _assert_safe(text, ["modules", "pty"])


def test_file_names_in_errors_and_warnings_are_escaped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "evil\x1b]0;pwned\x07\u202e.json"
    bad.write_text('{"traceEvents": [{"ph": "X", "name": "a", "ts": 1, "dur": 2, "pid": 1, "tid": 1}, {"ph"')
    assert main(["summary", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "proftab: error:" in err and "evil\\x1b]0;pwned\\x07\\u202e" in err
    assert not any(ch in err for ch in RAW)
    assert main(["summary", str(bad), "--salvage"]) == 0  # warns what was lost, naming the file
    err = capsys.readouterr().err
    assert "proftab: warning:" in err and "evil\\x1b" in err
    assert not any(ch in err for ch in RAW)


def test_renderer_formats_fits_and_rounds() -> None:
    """The one renderer: vocabulary formats, rounded floats, fitted rich tables that say what they dropped."""
    from rich.console import Console

    from proftab.render.table import Col, plain_text, rich_table

    df = pl.DataFrame({"name": ["a" * 80, "a" * 79 + "b"], "dur_ns": [1_234, 12_345_678], "share": [0.5, 0.25],
                       "speedup": [1.113599283047496, 2.0], "n_calls": [1_000_000, 3], "peak_bytes": [512, 2**21],
                       "tflops_per_s": [12.3456, 0.5], "extra": ["x", "y"]})
    text = plain_text(df)
    assert "1.234us" in text and "12.346ms" in text and "50.00%" in text and "1.114" in text
    assert "1,000,000" in text and "2.000 MiB" in text and "TFLOP/s" in text and "1.113599" not in text
    assert "a" * 80 in text  # plain keeps full names
    cols = [Col("name", cut=True), *(Col(c, drop=i) for i, c in enumerate(df.columns[1:]))]
    buf = io.StringIO()
    Console(file=buf, width=80, color_system=None).print(rich_table(df, cols, width=80))
    out = buf.getvalue()
    assert max(len(line) for line in out.splitlines()) <= 80
    assert "columns not shown at width 80: dur" in out and "long names cut in the middle" in out
    rows = [line for line in out.splitlines() if line.startswith("│")]
    assert len(rows) == 2 and len({r.split("│")[1] for r in rows}) == 2  # cut names stay distinct
    # the column that names the rows is cut, never dropped, even when it has a drop rank of its own
    cols = [Col("name", cut=True, drop=0), *(Col(c, drop=i + 1) for i, c in enumerate(df.columns[1:]))]
    buf = io.StringIO()
    Console(file=buf, width=60, color_system=None).print(rich_table(df, cols, width=60))
    assert "name" in buf.getvalue().splitlines()[1] and "aaaa" in buf.getvalue()


def test_summary_of_real_trace_unchanged_when_piped() -> None:
    """`summary` piped is still torch's own table (the torch213 reference text)."""
    tr = pt.load(CNN)
    assert tr.events.height > 0
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["summary", str(CNN), "-q"]) == 0
    assert out.getvalue().splitlines()[0].lstrip().startswith("-")


# ----------------------------------------------------------------------------- charts from the CLI (issue 25.11)


def test_every_chart_reachable_from_the_cli(tmp_path: Path) -> None:
    """`proftab plot roofline|critical-path`, `perf --chart`, `critical-path --chart` on a real GPU trace."""
    pytest.importorskip("altair")
    h100 = str(H100)
    for argv, out in ((["plot", "roofline", h100, "-o"], "roof.json"), (["plot", "critical-path", h100, "-o"],
                                                                        "cp.json"),
                      (["perf", h100, "--chart"], "perf.html"), (["critical-path", h100, "--step", "6", "--chart"],
                                                                 "cp.html")):
        path = tmp_path / out
        err = io.StringIO()
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
            assert main([*argv, str(path)]) == 0, err.getvalue()
        text = path.read_text(encoding="utf-8")
        if out.endswith(".json"):
            spec = json.loads(text)
            assert "layer" in spec or "vconcat" in spec or "hconcat" in spec, out
        else:
            assert "vegaEmbed(" in text and "wrote" in err.getvalue()
    roof = json.loads((tmp_path / "roof.json").read_text(encoding="utf-8"))
    text = json.dumps(roof)
    assert "aten::addmm" in text  # the ops are the points
    assert "bf16 peak 989.4 TFLOP/s" in text and "memory 3.35 TB/s" in text  # ceilings labelled (H100-SXM)


@pytest.mark.parametrize("terminal", [False, True], ids=["piped", "terminal"])
def test_a_newline_in_a_file_name_makes_no_row(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               terminal: bool) -> None:
    """A file named ``t\\nFAKE ROW.json.gz`` (found by tests/fuzz/terminal.py: `memory` and `findings`
    printed it in a text line): every subcommand shows the newline escaped."""
    import shutil

    path = tmp_path / "t\nFAKE ROW.json.gz"
    shutil.copy(MODULES, path)
    for argv in (["summary"], ["perf"], ["memory"], ["modules"], ["critical-path"], ["check"], ["findings"],
                 ["compiled"], ["diff", str(MODULES)]):
        _, out, err = _run([*argv, str(path)], monkeypatch, terminal=terminal)
        for text in (out, err):
            assert not any(line.lstrip("│┃ ").startswith("FAKE ROW") for line in text.splitlines()), (argv, text)
