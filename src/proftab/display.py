"""Text and HTML summaries of a Trace, and the number formats shared by the renderers.

`trace_repr` is `Trace.__repr__` (cheap: no nesting); `trace_repr_html` is
`Trace._repr_html_`, the notebook card (time span, events, threads, ranks, top ops).
Every name that comes from the trace is HTML-escaped.
"""

from __future__ import annotations

import html
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import polars as pl

from proftab import kinds, schema
from proftab.api import register_hook
from proftab.meta import file_metas
from proftab.render.text import fmt_ns, fmt_share, plain_table  # noqa: F401 - re-exported for the renderers
from proftab.steps import step_windows

if TYPE_CHECKING:

    from proftab.trace import Trace

__all__ = ["summary_facts", "top_ops",
           "trace_repr", "trace_repr_html"]


def _span_ns(tr: Trace) -> int:
    """Longest per-rank span of the events (ns)."""
    if tr.collect("events").is_empty():
        return 0
    s = tr.collect("events").group_by("rank").agg((pl.col("end_ns").max() - pl.col("start_ns").min()).alias("w"))
    return int(s.select(pl.col("w").max().fill_null(0)).item())


def summary_facts(tr: Trace) -> dict[str, object]:
    """Cheap facts for the summaries (no nesting): counts, span, start time, devices."""
    ev = tr.collect("events")
    device = kinds.is_device()
    tracks = ev.filter(~kinds.is_profiler_span()).group_by(schema.TRACK_KEYS).agg(device.any().alias("dev"))
    start_utc = None
    if not ev.is_empty():
        rank0, base0 = tr.files.row(0, named=True)["rank"], tr.files.row(0, named=True)["base_time_ns"]
        first = ev.filter(pl.col("rank") == rank0)["start_ns"].min()
        if first is not None:
            abs_ns = int(base0 or 0) + int(first)  # type: ignore[arg-type]
            if 0 < abs_ns < 4_102_444_800 * 10**9:  # before 2100: a real wall clock
                start_utc = datetime.fromtimestamp(abs_ns / 1e9, tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    devices: list[str] = []
    metas = file_metas(tr.files)
    for meta in metas.values():
        for d in meta.get("deviceProperties") or []:
            if isinstance(d, dict) and d.get("name") and d["name"] not in devices:
                devices.append(str(d["name"]))
    steps = step_windows(ev).select("rank", "step").unique().height
    return {
        "files": [str(f) for f in tr.files["source_file"]],
        "ranks": tr.files["rank"].to_list(),
        "events": ev.height, "instants": tr.collect("instants").height, "flows": tr.collect("flows").height,
        "counters": tr.collect("counters").height, "rejected": tr.collect("rejected").height,
        "threads": int((~tracks["dev"]).sum()), "streams": int(tracks["dev"].sum()),
        "device_events": int(ev.select(kinds.is_device().sum()).item()),
        "span_ns": _span_ns(tr), "start_utc": start_utc, "devices": devices, "steps": steps,
    }


def top_ops(tr: Trace, n: int = 5, *, python: bool = False) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Top `n` host ops by self time and top `n` device activities by time (from `tr.collect("nested")`).

    Without `python`, ``python_function`` frames are left out and their self time goes to the
    op above them (`proftab.views.without_python`): a helper thread's sleeping frame does not
    top the list.
    """
    from proftab.steps import torch_step_name_expr
    from proftab.views import without_python

    nested = tr.collect("nested")
    nested = nested if python else without_python(nested)
    host = nested.filter(kinds.is_host_op())
    total = int(host["self_ns"].sum() or 0)
    top_host = (host.group_by(torch_step_name_expr().alias("name"))
                .agg(pl.len().alias("calls"), pl.col("self_ns").sum(), pl.col("dur_ns").sum().alias("total_ns"))
                .with_columns(share=pl.col("self_ns") / total if total else pl.lit(None, pl.Float64))
                .sort(["self_ns", "name"], descending=[True, False]).head(n))
    dev = nested.filter(kinds.is_device_work())
    dtotal = int(dev["dur_ns"].sum() or 0)
    top_dev = (dev.group_by("name").agg(pl.len().alias("calls"), pl.col("dur_ns").sum().alias("total_ns"))
               .with_columns(share=pl.col("total_ns") / dtotal if dtotal else pl.lit(None, pl.Float64))
               .sort(["total_ns", "name"], descending=[True, False]).head(n))
    return top_host, top_dev


@register_hook("repr")
def trace_repr(tr: Trace) -> str:
    """`Trace.__repr__`: one header line and the key facts (no nesting is computed).

    A lazy (scanned) Trace reads only row counts, from the Parquet metadata.
    """
    if tr.is_lazy:
        counts = {t: tr.lazy(t).select(pl.len()).collect().item() for t in ("events", "instants", "flows", "rejected")}
        ranks_ = tr.files["rank"].to_list()
        return (f"<proftab.Trace (lazy): {len(ranks_)} file{'s' if len(ranks_) != 1 else ''}, ranks={ranks_} "
                + " ".join(f"{t}={n:,}" for t, n in counts.items()) + ">")
    f = summary_facts(tr)
    files = f["files"]
    assert isinstance(files, list)
    ranks = f["ranks"]
    assert isinstance(ranks, list)
    head = (f"<proftab.Trace: {len(files)} file{'s' if len(files) != 1 else ''}, "
            f"rank{'s' if len(ranks) != 1 else ''} {', '.join(map(str, ranks))}>")
    lines = [
        head,
        f"  span {fmt_ns(f['span_ns'])}" + (f" from {f['start_utc']}" if f["start_utc"] else "")  # type: ignore[arg-type]
        + (f", {f['steps']} profiler step{'s' if f['steps'] != 1 else ''}" if f["steps"] else ""),
        f"  {f['events']:,} events ({f['device_events']:,} on device), {f['instants']:,} instants, "
        f"{f['flows']:,} flows, {f['counters']:,} counter samples, {f['rejected']:,} rejected",
        f"  {f['threads']} host thread{'s' if f['threads'] != 1 else ''}, "
        f"{f['streams']} device stream{'s' if f['streams'] != 1 else ''}"
        + (f" on {', '.join(f['devices'])}" if f["devices"] else ""),  # type: ignore[arg-type]
        "  files: " + ", ".join(files),
    ]
    return "\n".join(lines)


_CSS = ("font-family:system-ui,sans-serif;font-size:13px;border:1px solid rgba(127,127,127,.4);"
        "border-radius:6px;padding:8px 12px;max-width:880px")


def _rows_html(df: pl.DataFrame, time_col: str) -> str:
    out = []
    for r in df.iter_rows(named=True):
        out.append(
            "<tr>"
            f"<td style='text-align:left;font-family:monospace'>{html.escape(str(r['name']))}</td>"
            f"<td style='text-align:right'>{fmt_ns(r[time_col])}</td>"
            f"<td style='text-align:right'>{fmt_share(r['share'])}</td>"
            f"<td style='text-align:right'>{r['calls']:,}</td></tr>")
    return "".join(out)


@register_hook("repr_html")
def trace_repr_html(tr: Trace, n: int = 5) -> str:
    """`Trace._repr_html_`: a summary card (span, events, threads, ranks, top ops), escaped."""
    f = summary_facts(tr)
    esc = html.escape
    files = f["files"]
    assert isinstance(files, list)
    facts = [
        ("span", fmt_ns(f["span_ns"]) + (f" from {f['start_utc']}" if f["start_utc"] else "")),  # type: ignore[arg-type]
        ("ranks", ", ".join(map(str, f["ranks"]))),  # type: ignore[call-overload]
        ("events", f"{f['events']:,} ({f['device_events']:,} on device)"),
        ("instants / flows / counters", f"{f['instants']:,} / {f['flows']:,} / {f['counters']:,}"),
        ("host threads / device streams", f"{f['threads']} / {f['streams']}"),
        ("profiler steps", str(f["steps"])),
    ]
    if f["devices"]:
        facts.append(("devices", ", ".join(f["devices"])))  # type: ignore[arg-type]
    if f["rejected"]:
        facts.append(("rejected input events", f"{f['rejected']:,}"))
    facts.append(("files", ", ".join(files)))
    fact_rows = "".join(f"<tr><th style='text-align:left;padding-right:1em'>{esc(k)}</th>"
                        f"<td style='text-align:left'>{esc(str(v))}</td></tr>" for k, v in facts)
    parts = [f"<div class='proftab-trace' style='{_CSS}'>",
             "<div style='font-weight:600;margin-bottom:4px'>proftab.Trace</div>",
             f"<table>{fact_rows}</table>"]
    if f["events"]:
        host, dev = top_ops(tr, n)
        head = ("<tr><th style='text-align:left'>{}</th><th style='text-align:right'>{}</th>"
                "<th style='text-align:right'>%</th><th style='text-align:right'>calls</th></tr>")
        if not host.is_empty():
            parts.append(f"<details open><summary>top {len(host)} host ops by self time "
                         "(Python frames folded into their ops)</summary>"
                         f"<table>{head.format('name', 'self')}{_rows_html(host, 'self_ns')}</table></details>")
        if not dev.is_empty():
            parts.append(f"<details open><summary>top {len(dev)} device activities by time</summary>"
                         f"<table>{head.format('name', 'time')}{_rows_html(dev, 'total_ns')}</table></details>")
    parts.append("</div>")
    return "".join(parts)
