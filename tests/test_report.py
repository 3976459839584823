"""The report page: every section present, no external URL, renders in headless Chromium offline."""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
import zlib
from typing import TYPE_CHECKING

import pytest

import proftab as pt
from proftab.report import SECTIONS
from tests.conftest import BUNDLED, DATA

if TYPE_CHECKING:
    from pathlib import Path

_NOT_FETCHED = {  # URLs inside the inlined Vega code and specs that are names, not requests (as test_plot)
    "http://www.w3.org/1999/xlink", "http://www.w3.org/2000/svg", "http://www.w3.org/2000/xmlns/",
    "https://github.com/vega/vega-lite/issues/2415", "https://vega.github.io/editor/",
}


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("vl_convert")
    out = tmp_path_factory.mktemp("report") / "report.html"
    assert pt.load(BUNDLED / "h100_bert_small.pt.trace.json.gz").report(out) == str(out)
    return out


def test_every_section_and_no_external_url(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    for key, title in SECTIONS.items():
        assert f'<section id="{key}"><h2>{title}</h2>' in text
    assert text.index('id="findings"') < text.index('id="steps"') < text.index('id="ranks"')
    assert "<script src" not in text and "<link" not in text and "cdn." not in text
    urls = set(re.findall(r"https?://[^\s\"'`)\\]+", text))
    schema_ids = {u for u in urls if re.fullmatch(r"https://vega\.github\.io/schema/vega(-lite)?/v[\d.]+\.json", u)}
    assert urls - schema_ids <= _NOT_FETCHED, urls - schema_ids - _NOT_FETCHED
    assert "not available for this trace" not in text  # every section built on this GPU trace
    assert len(text) < 5_000_000
    assert "compute_efficiency" in text and "aten::addmm" in text  # the findings table


def _png_pixels(png: bytes) -> bytes:
    """The decompressed image rows of a PNG (filter bytes included)."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    pos, data = 8, b""
    while pos < len(png):
        n, kind = struct.unpack(">I4s", png[pos:pos + 8])
        if kind == b"IDAT":
            data += png[pos + 8:pos + 8 + n]
        pos += 12 + n
    return zlib.decompress(data)


_CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


@pytest.mark.slow
@pytest.mark.skipif(_CHROMIUM is None, reason="no chromium (apt-get install chromium)")
def test_report_renders_in_headless_chromium_without_network(page: Path, tmp_path: Path) -> None:
    assert _CHROMIUM is not None
    flags = [_CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={tmp_path / 'profile'}", "--proxy-server=http://127.0.0.1:9",
             "--proxy-bypass-list=<-loopback>", "--virtual-time-budget=20000"]
    dom = subprocess.run([*flags, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=180).stdout
    assert dom.count("<svg") >= 6, dom[-2000:]  # the charts were drawn by Vega, offline
    assert "roofline" in dom and "self CPU time (ms)" in dom  # titles and axis labels with units
    shot = tmp_path / "shot.png"
    subprocess.run([*flags, "--window-size=1200,3000", f"--screenshot={shot}", page.as_uri()], capture_output=True,
                   timeout=180, check=False)
    pixels = _png_pixels(shot.read_bytes())
    assert len(set(pixels[::97])) > 20  # not a blank page


def test_cli_report_on_a_cpu_trace(tmp_path: Path) -> None:
    pytest.importorskip("vl_convert")
    from proftab.cli import main

    out = tmp_path / "r.html"
    assert main(["report", str(DATA / "findings" / "leak.pt.trace.json.gz"), "-o", str(out), "-q"]) == 0
    text = out.read_text(encoding="utf-8")
    assert all(f'<section id="{k}">' in text for k in SECTIONS)
    assert "memory_leak" in text and "no device time in this trace" in text
    assert main(["report", str(DATA / "findings" / "leak.pt.trace.json.gz"), "-o", str(tmp_path / "r.txt"), "-q"]) == 2


def test_many_steps_are_summarized_not_listed() -> None:
    import polars as pl

    from proftab.report import STEP_ROWS, _step_table

    few = pl.DataFrame({"rank": [0] * STEP_ROWS, "step": list(range(STEP_ROWS)), "dur_ns": list(range(STEP_ROWS))})
    assert _step_table(few, "dur_ns").count("<tr>") == STEP_ROWS + 1
    durs = [(7 * i) % 101 * 1_000_000 for i in range(880)]  # 880 steps, as the 512 MB generated trace
    many = pl.DataFrame({"rank": [0] * 880, "step": list(range(880)), "dur_ns": durs})
    text = _step_table(many, "dur_ns")
    assert "880 steps" in text and text.count("<tr>") == 2 + 1 + 10  # two headers, one rank, 10 longest
    assert "100.000ms" in text and "0.000us" in text  # max and min
