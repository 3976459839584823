"""Charts: built from real traces, written to files, with the numbers they should show."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import polars as pl
import pytest

import proftab as pt

alt = pytest.importorskip("altair")
from proftab import plot  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CNN = ROOT / "data" / "train_cnn.pt.trace.json.gz"
H100 = ROOT / "data" / "h100_bert_small.pt.trace.json.gz"


def _values(chart: object) -> list[dict]:
    spec = chart.to_dict()  # type: ignore[attr-defined]
    datasets = spec.get("datasets") or {}
    assert len(datasets) == 1
    return next(iter(datasets.values()))


@pytest.fixture(scope="module")
def cnn() -> pt.Trace:
    return pt.load(CNN)


@pytest.fixture(scope="module")
def h100() -> pt.Trace:
    return pt.load(H100)


def test_top_ops(cnn: pt.Trace, tmp_path: Path) -> None:
    chart = plot.top_ops(cnn, 5)
    vals = _values(chart)
    ka = cnn.key_averages().filter(pl.col("device_type") == "CPU").sort("self_cpu_ns", descending=True).head(5)
    self_rows = {v["name"]: v["ns"] for v in vals if v["measure"] == "self"}
    total_rows = {v["name"]: v["ns"] for v in vals if v["measure"] == "total"}
    assert self_rows == dict(ka.select("name", "self_cpu_ns").iter_rows())
    assert total_rows == dict(ka.select("name", "cpu_total_ns").iter_rows())
    out = tmp_path / "top.html"
    plot.save(chart, out)
    assert "vega" in out.read_text() and "aten::max_pool2d_with_indices" in out.read_text()
    with pytest.raises(ValueError, match="unknown metric"):
        plot.top_ops(cnn, metric="gpu")  # type: ignore[arg-type]


def test_top_ops_device(h100: pt.Trace, tmp_path: Path) -> None:
    vals = _values(plot.top_ops(h100, 3, metric="device"))
    assert len({v["name"] for v in vals}) == 3
    ka = h100.key_averages().filter((pl.col("device_type") != "CPU") & ~pl.col("is_user_annotation"))
    assert max(v["ns"] for v in vals if v["measure"] == "self") == ka["self_device_ns"].max()


def test_timeline_step_per_thread_and_stream(h100: pt.Trace, tmp_path: Path) -> None:
    chart = plot.timeline(h100)
    vals = _values(chart)
    labels = {v["label"] for v in vals}
    assert labels == {"thread 19392 (python3)", "stream 7"}
    step = h100.events.filter((pl.col("name") == "ProfilerStep#6")
                              & (pl.col("cat").cast(pl.String) == "user_annotation"))
    width_ms = step["dur_ns"][0] / 1e6
    assert all(0 <= v["start_ms"] <= v["end_ms"] <= width_ms for v in vals)
    assert max(v["depth"] for v in vals) <= 3
    assert not any(v["cat"] == "python_function" for v in vals)
    assert any(v["cat"] == "python_function" for v in _values(plot.timeline(h100, python=True, max_depth=1)))
    out = tmp_path / "timeline.json"
    plot.save(chart, out)
    assert [layer["mark"]["type"] for layer in json.loads(out.read_text())["layer"]] == ["bar", "text"]
    with pytest.raises(ValueError, match="no ProfilerStep#99"):
        plot.timeline(h100, 99)


def test_icicle_layout_and_escaping(cnn: pt.Trace, tmp_path: Path) -> None:
    tree = plot.icicle_layout(cnn.tree.call_tree())
    assert tree.filter(pl.col("depth") == 0)["x1"].max() == pytest.approx(1.0)
    kids = tree.join(tree.select(pl.col("node_id").alias("parent_node_id"), pl.col("x0").alias("px0"),
                                 pl.col("x1").alias("px1")), on="parent_node_id")
    assert ((kids["x0"] >= kids["px0"] - 1e-12) & (kids["x1"] <= kids["px1"] + 1e-12)).all()
    chart = plot.icicle(cnn, max_depth=3)
    vals = _values(chart)
    assert {v["name"] for v in vals if v["depth"] == 1} >= {"forward", "backward"}
    assert max(v["depth"] for v in vals) == 3
    out = tmp_path / "tree.html"
    plot.save(chart, out)
    assert out.stat().st_size > 1000


def test_steps_stacked(cnn: pt.Trace, tmp_path: Path) -> None:
    import warnings

    with warnings.catch_warnings():  # aggregate's by_step join_asof warns on polars 2 (not plot's code)
        warnings.filterwarnings("ignore", message="Sortedness of columns cannot be checked")
        chart = plot.steps(cnn, 3)
        ka = cnn.key_averages(by_step=True)
    vals = _values(chart)
    per_step = {}
    for v in vals:
        per_step[v["step"]] = per_step.get(v["step"], 0) + v["ns"]
    want = ka.filter((pl.col("device_type") == "CPU") & pl.col("step").is_not_null()).group_by("step").agg(
        pl.col("self_cpu_ns").sum())
    assert per_step == dict(want.iter_rows())
    assert {v["op"] for v in vals} <= {*{v["op"] for v in vals if v["op"] != "other"}, "other"}
    assert len({v["op"] for v in vals}) == 4
    plot.save(chart, tmp_path / "steps.html")


def test_save_png_when_renderer_installed(cnn: pt.Trace, tmp_path: Path) -> None:
    pytest.importorskip("vl_convert")
    out = tmp_path / "top.png"
    plot.save(plot.top_ops(cnn, 5), out)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(ValueError, match="unknown chart file type"):
        plot.save(plot.top_ops(cnn, 5), tmp_path / "top.txt")


# ---------------------------------------------------------------------------- offline HTML (issue 11.3)

_NOT_FETCHED = {  # URLs inside the inlined Vega code and spec that are names, not requests
    "http://www.w3.org/1999/xlink", "http://www.w3.org/2000/svg", "http://www.w3.org/2000/xmlns/",
    "https://github.com/vega/vega-lite/issues/2415", "https://vega.github.io/editor/",
}


def _offline_page(tmp_path: Path) -> tuple[Path, str]:
    pytest.importorskip("vl_convert")
    out = tmp_path / "top.html"
    plot.save(plot.top_ops(pt.load(H100), 8), out)
    return out, out.read_text(encoding="utf-8")


def test_html_chart_references_no_external_url(tmp_path: Path) -> None:
    _, page = _offline_page(tmp_path)
    assert "<script src" not in page and "<link" not in page and "cdn." not in page
    assert not _external_urls(page)
    assert "vegaEmbed(" in page and len(page) > 500_000  # the libraries are inline


def _external_urls(page: str) -> set[str]:
    import re

    urls = set(re.findall(r"https?://[^\s\"'`)\\]+", page))
    schema_ids = {u for u in urls if re.fullmatch(r"https://vega\.github\.io/schema/vega(-lite)?/v[\d.]+\.json", u)}
    return urls - schema_ids - _NOT_FETCHED


def test_altairs_own_save_is_offline_for_every_chart_proftab_returns(cnn: pt.Trace, h100: pt.Trace,
                                                                      tmp_path: Path) -> None:
    """Issue 25.11: `tr.plot.roofline().save("x.html")` (Altair's own save) loaded Vega from a CDN.
    Every chart proftab returns now saves its HTML with Vega inline; composed charts too; an
    explicit ``inline=False`` still gives altair's CDN page, and other formats are altair's."""
    pytest.importorskip("vl_convert")
    charts = {"top": h100.plot.top_ops(8), "timeline": h100.plot.timeline(), "icicle": cnn.plot.icicle(),
              "steps": cnn.plot.steps(), "roofline": h100.plot.roofline(), "memory": cnn.plot.memory(),
              "modules": cnn.modules.icicle(), "critical_path": h100.critical_path.chart()}
    charts["composed"] = (charts["top"].properties(width=200) | charts["steps"]) & charts["roofline"]
    for name, chart in charts.items():
        out = tmp_path / f"{name}.html"
        chart.save(str(out))  # altair's method, as a user calls it
        page = out.read_text(encoding="utf-8")
        assert "<script src" not in page and "cdn." not in page, name
        assert not _external_urls(page), (name, _external_urls(page))
        assert "vegaEmbed(" in page and len(page) > 500_000, name  # the libraries are inline
        assert json.dumps(chart.to_dict()["$schema"]) in page
    charts["top"].save(tmp_path / "cdn.html", inline=False)
    assert "cdn.jsdelivr.net" in (tmp_path / "cdn.html").read_text(encoding="utf-8")
    charts["top"].save(tmp_path / "top.json")
    assert json.loads((tmp_path / "top.json").read_text())["mark"]["type"] == "bar"


def _chromium() -> str | None:
    import shutil

    return shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


@pytest.mark.skipif(_chromium() is None, reason="no chromium (apt-get install chromium)")
def test_html_chart_renders_in_headless_chromium_without_network(tmp_path: Path) -> None:
    out, _ = _offline_page(tmp_path)
    # every request goes to a dead proxy: a page that needed the network would stay blank
    cmd = [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           f"--user-data-dir={tmp_path / 'profile'}", "--proxy-server=http://127.0.0.1:9",
           "--proxy-bypass-list=<-loopback>", "--virtual-time-budget=15000", "--dump-dom", out.as_uri()]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    dom = res.stdout
    assert "<svg" in dom, res.stderr[-2000:]
    assert "aten::addmm" in dom  # an axis label drawn by Vega


def test_category_colours_are_the_same_in_every_chart(cnn: pt.Trace) -> None:
    h100 = pt.load(H100)

    def colours(chart: object) -> dict[str, str]:
        layer = chart.to_dict()["layer"][0]  # type: ignore[attr-defined]
        scale = layer["encoding"]["color"]["scale"]
        return dict(zip(scale["domain"], scale["range"], strict=True))

    a, b = colours(plot.timeline(cnn)), colours(plot.timeline(h100))
    assert a["cpu_op"] == b["cpu_op"] == plot.CATEGORY_COLORS["cpu_op"]
    assert set(a) < set(b) and all(a[c] == b[c] for c in a)  # the GPU trace adds categories, changes none
    assert b["kernel"] == plot.CATEGORY_COLORS["kernel"]


def test_timeline_png_has_labels(tmp_path: Path) -> None:
    chart = plot.timeline(pt.load(H100))
    spec = chart.to_dict()
    marks = [layer["mark"]["type"] for layer in spec["layer"]]
    assert marks == ["bar", "text"]
    texts = {r["text"] for r in _values(chart) if r["text"]}
    assert "ProfilerStep#6" in texts  # the step bar is wide enough to carry its name
    pytest.importorskip("vl_convert")
    out = tmp_path / "tl.png"
    plot.save(chart, out)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
