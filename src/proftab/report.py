"""`tr.report(path)` / `proftab report`: one self-contained HTML page answering "what is wrong with my step".

The page inlines its scripts (Vega, Vega-Lite, vega-embed from vl-convert, once) and its data (each
chart's aggregated or sampled rows) and loads nothing: it opens from a file on a machine without
network. Sections, in order (`SECTIONS`): the findings ranked by `est_saving_ns`, the step-time
breakdown (critical path per step, or step durations; more than `STEP_ROWS` steps are summarized
per rank, with the longest listed), the top ops on the host and on the device,
the timeline of one representative step (the median-length one; at most `TIMELINE_EVENTS` events),
the critical path of that step, the roofline, memory over time, modules, and ranks when there are
several. A section that does not apply to the trace says why in one line; it is never left out.
"""

from __future__ import annotations

import html
import os
from typing import TYPE_CHECKING, Any

import polars as pl

from proftab.api import register_trace_method
from proftab.plot import _alt, _data
from proftab.render.text import fmt_bytes, fmt_ns, fmt_share
from proftab.units import unit_of

if TYPE_CHECKING:
    from collections.abc import Callable

    from proftab.trace import Trace

__all__ = ["SECTIONS", "STEP_ROWS", "TIMELINE_EVENTS", "report_html", "write_report"]

#: section id -> heading, in page order
SECTIONS = {
    "findings": "Findings",
    "steps": "Step time",
    "top-ops": "Top ops (host and device)",
    "timeline": "Timeline of a representative step",
    "critical-path": "Critical path",
    "roofline": "Roofline",
    "memory": "Memory over time",
    "modules": "Modules",
    "ranks": "Ranks",
}
#: events drawn at most in the timeline (the page stays a few MB for any trace)
TIMELINE_EVENTS = 4_000
#: a step table with more rows is summarized (per rank: min, median, p90, max) plus the longest steps
STEP_ROWS = 20
_TOP = 15

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px auto;max-width:1200px;color:#222}
h1{font-size:22px}h2{font-size:18px;border-bottom:1px solid #ddd;padding-bottom:4px;margin-top:32px}
table{border-collapse:collapse;font-size:13px;margin:8px 0}th,td{border:1px solid #ddd;padding:3px 6px;
vertical-align:top}th{background:#f4f4f4;text-align:left}td.n{text-align:right;font-variant-numeric:tabular-nums}
.sev-high{color:#b00020;font-weight:600}.sev-medium{color:#b26a00;font-weight:600}.sev-low{color:#555}
.sev-info{color:#1565c0}.note{color:#666;font-size:13px}.sugg{color:#2e7d32}nav a{margin-right:10px}
"""


def _esc(v: object) -> str:
    return html.escape("" if v is None else str(v))


def _table(df: pl.DataFrame, fmt: dict[str, Callable[[Any], str]] | None = None) -> str:
    fmt = fmt or {}
    head = "".join(f"<th>{_esc(c)}</th>" for c in df.columns)
    numeric = {c for c, t in df.schema.items() if t.is_numeric()}
    body = []
    for row in df.iter_rows(named=True):
        cells = []
        for c, v in row.items():
            text = fmt[c](v) if c in fmt and v is not None else ("" if v is None else str(v))
            cells.append(f"<td class=\"n\">{_esc(text)}</td>" if c in numeric else f"<td>{_esc(text)}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _ns_cols(df: pl.DataFrame) -> dict[str, Callable[[Any], str]]:
    out: dict[str, Callable[[Any], str]] = {}
    fmt = {"ns": fmt_ns, "bytes": fmt_bytes, "share": fmt_share}
    for c in df.columns:
        unit = unit_of(c)
        if unit in fmt and c != "ns":
            out[c] = fmt[unit]
    return out


class _Page:
    """Collects sections and charts; `html()` writes the page."""

    def __init__(self, title: str) -> None:
        self.title = title
        self.sections: list[str] = []
        self.specs: list[str] = []

    def chart(self, chart: Any) -> str:
        """A div that the page's script fills with `chart` (its spec, escaped for a <script>)."""
        spec = chart.to_json(indent=None)
        self.specs.append(spec.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e"))
        return f'<div class="chart" id="chart{len(self.specs) - 1}"></div>'

    def section(self, key: str, body: str) -> None:
        self.sections.append(f'<section id="{key}"><h2>{_esc(SECTIONS[key])}</h2>{body}</section>')

    def html(self, bundle: str | None) -> str:
        nav = "".join(f'<a href="#{k}">{_esc(v)}</a>' for k, v in SECTIONS.items())
        if bundle is not None and self.specs:
            script = ("<script>\n" + bundle.replace("</script", "<\\/script") + "\n</script>\n<script>\nconst SPECS = ["
                      + ",".join(self.specs) + "];\nSPECS.forEach((s, i) => vegaEmbed('#chart' + i, s, "
                      "{renderer: 'svg', actions: false}).catch(console.error));\n</script>")
        else:
            script = ""
        return (f"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>{_esc(self.title)}</title>"
                f"<style>{_CSS}</style></head><body><h1>{_esc(self.title)}</h1><nav>{nav}</nav>"
                + "".join(self.sections) + script + "</body></html>\n")


def _safely(page: _Page, key: str, build: Callable[[], str]) -> None:
    try:
        body = build()
    except Exception as exc:  # noqa: BLE001 - a section that cannot be built says why; the page still renders
        body = f'<p class="note">not available for this trace: {_esc(type(exc).__name__)}: {_esc(str(exc)[:200])}</p>'
    page.section(key, body)


def _representative_step(tr: Trace) -> int | None:
    from proftab.steps import step_windows

    w = step_windows(tr.collect("events", ["rank", "cat", "name", "start_ns", "end_ns", "dur_ns", "event_id"]))
    if w.is_empty():
        return None
    w = w.filter(pl.col("rank") == w["rank"].min()).sort("dur_ns", "step")
    return int(w["step"][(w.height - 1) // 2])


def _findings(tr: Trace) -> str:
    from proftab.findings import format_value, scope_text

    f = tr.findings()
    several = f["rank"].drop_nulls().n_unique() > 1
    if f.is_empty():
        return '<p class="note">no findings: no rule fired (docs/findings.md lists the rules and thresholds)</p>'
    rows = []
    for i, r in enumerate(f.iter_rows(named=True), 1):
        saving = fmt_ns(r["est_saving_ns"]) if r["est_saving_ns"] is not None else ""
        rows.append(
            f"<tr><td class=\"n\">{i}</td><td class=\"sev-{_esc(r['severity'])}\">{_esc(r['severity'])}</td>"
            f"<td>{_esc(r['rule'])}</td><td class=\"n\">{_esc(saving)}</td><td class=\"n\">"
            f"{_esc(fmt_share(r['share']))}</td><td class=\"n\">{_esc(format_value(r['value'], r['unit']))}</td>"
            f"<td>{_esc(scope_text(r['rank'], r['scope'], several))}</td>"
            f"<td>{_esc(r['message'])}<br><span class=\"sugg\">→ "
            f"{_esc(r['suggestion'])}</span></td><td class=\"n\">{len(r['evidence'])}</td></tr>")
    return ("<p class=\"note\">ranked by the estimated saving per step; every number is a query over the trace's "
            "tables, computed from the listed evidence events (tr.findings()).</p><table><thead><tr><th>#</th>"
            "<th>severity</th><th>rule</th><th>est. saving / step</th><th>share of step</th><th>value</th>"
            "<th>scope</th><th>finding → suggestion</th><th>evidence events</th></tr></thead><tbody>"
            + "".join(rows) + "</tbody></table>")


def _steps(tr: Trace, page: _Page) -> str:
    alt = _alt()

    from proftab import kinds

    if kinds.has_device_rows(tr.categories):
        by = tr.critical_path.summary(by="step")
        if by.height:
            long = by.unpivot(index=["rank", "step"], on=[c for c in by.columns if c not in ("rank", "step",
                                                                                             "length_ns")],
                              variable_name="bound_by", value_name="ns").with_columns(
                                  ms=pl.col("ns") / 1e6, bound_by=pl.col("bound_by").str.strip_suffix("_ns"))
            chart = alt.Chart(_data(long)).mark_bar().encode(
                x=alt.X("step:O", title="step"), y=alt.Y("sum(ms):Q", title="critical path (ms)"),
                color=alt.Color("bound_by:N", title="bound by"), tooltip=["rank:N", "step:O", "bound_by:N", "ms:Q"]
            ).properties(width=700, height=220, title="critical-path time per step by what bounds it (ms)")
            return page.chart(chart) + _step_table(by, "length_ns")
    from proftab.ranks import step_times

    st = step_times(tr.collect("events", ["rank", "cat", "name", "start_ns", "end_ns", "dur_ns", "event_id"]),
                    tr.files)
    if st.is_empty():
        return '<p class="note">no ProfilerStep#N windows in this trace</p>'
    st = st.select("rank", "step", "dur_ns")
    chart = alt.Chart(_data(st.with_columns(ms=pl.col("dur_ns") / 1e6))).mark_bar().encode(
        x=alt.X("step:O", title="step"), y=alt.Y("ms:Q", title="step time (ms)"), color=alt.Color("rank:N"),
        tooltip=["rank:N", "step:O", "ms:Q"]).properties(width=700, height=200, title="step time (ms)")
    return page.chart(chart) + _step_table(st, "dur_ns")


def _step_table(df: pl.DataFrame, key: str) -> str:
    """The per-step table, or for more than `STEP_ROWS` steps its summary and the 10 longest steps."""
    if df.height <= STEP_ROWS:
        return _table(df, _ns_cols(df))
    stats = df.group_by("rank").agg(
        pl.len().alias("steps"), pl.col(key).min().alias("min_ns"),
        pl.col(key).quantile(0.5, interpolation="lower").alias("median_ns"),
        pl.col(key).quantile(0.9, interpolation="lower").alias("p90_ns"), pl.col(key).max().alias("max_ns"),
        pl.col(key).sum().alias("total_ns")).sort("rank")
    top = df.sort([key, "rank", "step"], descending=[True, False, False]).head(10)
    return (f'<p class="note">{df.height} steps (all in the chart): per rank</p>' + _table(stats, _ns_cols(stats))
            + '<p class="note">the 10 longest steps</p>' + _table(top, _ns_cols(top)))


def _top_ops(tr: Trace, page: _Page) -> str:
    alt = _alt()

    ka = tr.key_averages()
    host = ka.sort("self_cpu_ns", descending=True).head(_TOP).select("name", "calls", "self_cpu_ns", "cpu_total_ns",
                                                                     "self_cpu_share")
    out = ["<h3>host: self CPU time</h3>", page.chart(alt.Chart(_data(host.with_columns(
        ms=pl.col("self_cpu_ns") / 1e6))).mark_bar().encode(
        y=alt.Y("name:N", sort="-x", title=None), x=alt.X("ms:Q", title="self CPU time (ms)"),
        tooltip=["name:N", "calls:Q", "ms:Q"]).properties(width=600, title="top ops by self CPU time (ms)")),
        _table(host, _ns_cols(host))]
    if "self_device_ns" in ka.columns and int(ka["self_device_ns"].fill_null(0).sum()) > 0:
        dev = ka.filter(~pl.col("is_user_annotation").fill_null(False)).sort("self_device_ns", descending=True).head(
            _TOP).select("name", "calls", "self_device_ns",
                                                                           "device_total_ns")
        out += ["<h3>device: self device time</h3>", page.chart(alt.Chart(_data(dev.with_columns(
            ms=pl.col("self_device_ns") / 1e6))).mark_bar(color="#e45756").encode(
            y=alt.Y("name:N", sort="-x", title=None), x=alt.X("ms:Q", title="self device time (ms)"),
            tooltip=["name:N", "calls:Q", "ms:Q"]).properties(width=600, title="top ops by self device time (ms)")),
            _table(dev, _ns_cols(dev))]
    else:
        out.append('<p class="note">no device time in this trace (a CPU-only profile)</p>')
    return "".join(out)


def _timeline(tr: Trace, page: _Page, step: int | None) -> str:
    from proftab.plot import timeline

    chart = timeline(tr, step, max_depth=2, max_events=TIMELINE_EVENTS)
    what = f"step {step} (the median-length step)" if step is not None else "the whole trace (no steps)"
    return (f'<p class="note">{_esc(what)}; at most {TIMELINE_EVENTS} events drawn (x: time in the step, ms)</p>'
            + page.chart(chart))


def _critical_path(tr: Trace, page: _Page, step: int | None) -> str:
    from proftab import kinds

    if not kinds.has_device_rows(tr.categories):
        return '<p class="note">a CPU-only trace: the step thread is the path (see Step time)</p>'
    summ = tr.critical_path.summary(step)
    return _table(summ, _ns_cols(summ)) + page.chart(tr.critical_path.chart(step))


def _roofline(tr: Trace, page: _Page) -> str:
    if tr.perf.device_peaks().is_empty():
        return '<p class="note">no device peak rates known for this trace (tr.perf.roofline(peaks=...))</p>'
    lost = tr.perf.lost(_TOP)
    return page.chart(tr.perf.roofline()) + "<h3>ops losing the most time to the roofline</h3>" + _table(
        lost, _ns_cols(lost))


def _memory(tr: Trace, page: _Page) -> str:
    if not tr.memory.recorded():
        return '<p class="note">no [memory] events: record with profile_memory=True</p>'
    peak = tr.memory.peak()
    return page.chart(tr.memory.chart(max_points=2_000)) + _table(
        peak.select("device_name", "peak_ns", "peak_bytes", "max_reserved_bytes", "final_bytes"),
        {"peak_bytes": fmt_bytes, "max_reserved_bytes": fmt_bytes, "final_bytes": fmt_bytes})


def _modules(tr: Trace) -> str:
    mods = tr.modules.modules(depth=2)
    if mods.is_empty():
        return '<p class="note">no nn.Module information (record with with_modules=True or with_stack=True)</p>'
    keep = [c for c in mods.columns if not isinstance(mods.schema[c], pl.List)]
    return _table(mods.select(keep).head(30), _ns_cols(mods))


def _ranks(tr: Trace, page: _Page) -> str:
    alt = _alt()

    if tr.files.height < 2:
        return '<p class="note">one rank</p>'
    st = tr.ranks.step_times()
    chart = alt.Chart(_data(st.with_columns(ms=pl.col("dur_ns") / 1e6))).mark_line(point=True).encode(
        x=alt.X("step:O"), y=alt.Y("ms:Q", title="step time (ms)"), color=alt.Color("rank:N"),
        tooltip=["rank:N", "step:O", "ms:Q"]).properties(width=700, height=220, title="step time per rank (ms)")
    slow = tr.ranks.slowest_ranks()
    return page.chart(chart) + _table(slow, _ns_cols(slow))


def report_html(tr: Trace, *, title: str | None = None) -> str:
    """The report page of `tr` as HTML text (module docstring)."""
    from proftab.plot import _js_bundle

    files = ", ".join(os.path.basename(str(f)) for f in tr.files["source_file"][:3])
    page = _Page(title or f"proftab report · {files}")
    step = _representative_step(tr)
    _safely(page, "findings", lambda: _findings(tr))
    _safely(page, "steps", lambda: _steps(tr, page))
    _safely(page, "top-ops", lambda: _top_ops(tr, page))
    _safely(page, "timeline", lambda: _timeline(tr, page, step))
    _safely(page, "critical-path", lambda: _critical_path(tr, page, step))
    _safely(page, "roofline", lambda: _roofline(tr, page))
    _safely(page, "memory", lambda: _memory(tr, page))
    _safely(page, "modules", lambda: _modules(tr))
    _safely(page, "ranks", lambda: _ranks(tr, page))
    bundle = _js_bundle() if page.specs else None
    if page.specs and bundle is None:
        page.sections.insert(0, '<p class="note">charts left out: pip install vl-convert-python (the page inlines '
                                'Vega from it and never loads scripts from the network)</p>')
    return page.html(bundle)


def write_report(tr: Trace, path: str | os.PathLike[str], *, title: str | None = None) -> str:
    """Write the report page of `tr` to `path`; returns the path."""
    text = report_html(tr, title=title)
    out = os.fspath(path)
    tmp = f"{out}.{os.getpid()}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)
    os.replace(tmp, out)
    return out


@register_trace_method("report")
def _trace_report(trace: Trace, path: str | os.PathLike[str], *, title: str | None = None) -> str:
    """`tr.report(path)`: write the self-contained HTML report (`proftab.report.write_report`)."""
    return write_report(trace, path, title=title)

