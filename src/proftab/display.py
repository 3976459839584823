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

from proftab import schema
from proftab.steps import step_windows

if TYPE_CHECKING:
    from collections.abc import Sequence

    from proftab.trace import Trace

__all__ = ["fmt_ns", "fmt_share", "plain_table", "summary_facts", "top_ops", "track_labels",
           "trace_repr", "trace_repr_html"]


def fmt_ns(ns: float | None, *, signed: bool = False) -> str:
    """Format nanoseconds the way torch's tables do (``us`` below 1 ms, then ``ms``, ``s``).

    >>> fmt_ns(1_234), fmt_ns(12_345_678), fmt_ns(-2_500, signed=True)
    ('1.234us', '12.346ms', '-2.500us')
    """
    if ns is None:
        return ""
    sign = ("+" if ns > 0 else "") if signed else ""
    us = ns / 1000.0
    a = abs(us)
    if a >= 1e6:
        return f"{sign}{us / 1e6:.3f}s"
    if a >= 1e3:
        return f"{sign}{us / 1e3:.3f}ms"
    return f"{sign}{us:.3f}us"


def fmt_share(x: float | None, *, signed: bool = False) -> str:
    """A ratio as a percentage with 2 decimals (``""`` for null/NaN/inf)."""
    if x is None or x != x or x in (float("inf"), float("-inf")):
        return ""
    return f"{x * 100:+.2f}%" if signed else f"{x * 100:.2f}%"


def plain_table(headers: Sequence[str], rows: Sequence[Sequence[str]], aligns: str | None = None) -> str:
    """A fixed-width text table; `aligns` is one ``<`` / ``>`` per column (default: first left)."""
    aligns = aligns or "<" + ">" * (len(headers) - 1)
    widths = [max([len(h)] + [len(r[i]) for r in rows]) for i, h in enumerate(headers)]
    def line(cells: Sequence[str]) -> str:
        return "  ".join(f"{c:{a}{w}}" for c, a, w in zip(cells, aligns, widths, strict=True)).rstrip()
    sep = "  ".join("-" * w for w in widths)
    return "\n".join([line(headers), sep, *(line(r) for r in rows)]) + "\n"


def _is_device_cat() -> pl.Expr:
    return pl.col("cat").cast(pl.String).is_in(list(schema.DEVICE_CATEGORIES)).fill_null(False)


def track_labels(tr: Trace) -> pl.DataFrame:
    """One row per track of `tr.events`: the track keys, `kind` (host/device), `label`, `events`.

    The label is the thread name from the trace metadata (``thread 123 (python3)``,
    ``stream 7``), prefixed with the rank when the trace has several.
    """
    keys = schema.TRACK_KEYS
    tracks = tr.events.group_by(keys).agg(
        pl.len().alias("events"), _is_device_cat().any().alias("_dev"),
        pl.col("start_ns").min().alias("first_ns"))
    names = tr.threads.select(*keys, "thread_name", "thread_sort_index")
    tracks = tracks.join(names, on=keys, how="left", nulls_equal=True)
    pid = pl.coalesce(pl.col("pid").cast(pl.String), pl.col("pid_text"), pl.lit("?"))
    tid = pl.coalesce(pl.col("tid").cast(pl.String), pl.col("tid_text"), pl.lit("?"))
    fallback = pl.when(pl.col("_dev")).then(pl.lit("stream ") + tid).otherwise(pl.lit("thread ") + tid)
    base = pl.coalesce(pl.col("thread_name").str.strip_chars(), fallback)
    base = pl.when(pl.col("pid_text").is_not_null()).then(pid + pl.lit(" / ") + tid).otherwise(base)
    if len(tr.ranks) > 1:
        base = pl.lit("rank ") + pl.col("rank").cast(pl.String) + pl.lit(" · ") + base
    return tracks.with_columns(
        kind=pl.when(pl.col("_dev")).then(pl.lit("device")).otherwise(pl.lit("host")),
        label=base,
    ).sort(["rank", "_dev", "thread_sort_index", "pid", "tid"], nulls_last=True).select(
        *keys, "kind", "label", "events", "first_ns")


def _span_ns(tr: Trace) -> int:
    """Longest per-rank span of the events (ns)."""
    if tr.events.is_empty():
        return 0
    s = tr.events.group_by("rank").agg((pl.col("end_ns").max() - pl.col("start_ns").min()).alias("w"))
    return int(s["w"].max() or 0)


def summary_facts(tr: Trace) -> dict[str, object]:
    """Cheap facts for the summaries (no nesting): counts, span, start time, devices."""
    ev = tr.events
    cats = ev.select(pl.col("cat").cast(pl.String))["cat"]
    device = _is_device_cat()
    span_cat = pl.col("cat").cast(pl.String).is_in(list(schema.PROFILER_SPAN_CATEGORIES)).fill_null(False)
    tracks = ev.filter(~span_cat).group_by(schema.TRACK_KEYS).agg(device.any().alias("dev"))
    start_utc = None
    if not ev.is_empty():
        rank0 = tr.ranks[0]
        first = ev.filter(pl.col("rank") == rank0)["start_ns"].min()
        if first is not None:
            abs_ns = int(tr.metas[rank0].get("base_time_ns", 0)) + int(first)  # type: ignore[arg-type]
            if 0 < abs_ns < 4_102_444_800 * 10**9:  # before 2100: a real wall clock
                start_utc = datetime.fromtimestamp(abs_ns / 1e9, tz=UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    devices: list[str] = []
    for meta in tr.metas.values():
        for d in meta.get("deviceProperties") or []:
            if isinstance(d, dict) and d.get("name") and d["name"] not in devices:
                devices.append(str(d["name"]))
    steps = step_windows(ev).select("rank", "step").unique().height
    return {
        "files": [str(m.get("source_file")) for m in tr.metas.values()],
        "ranks": tr.ranks,
        "events": ev.height, "instants": tr.instants.height, "flows": tr.flows.height,
        "counters": tr.counters.height, "rejected": tr.rejected.height,
        "threads": int((~tracks["dev"]).sum()), "streams": int(tracks["dev"].sum()),
        "device_events": int(cats.is_in(list(schema.DEVICE_CATEGORIES)).sum()),
        "span_ns": _span_ns(tr), "start_utc": start_utc, "devices": devices, "steps": steps,
    }


def top_ops(tr: Trace, n: int = 5) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Top `n` host ops by self time and top `n` device activities by time (from `tr.nested`)."""
    from proftab.aggregate import torch_name_expr

    nested = tr.nested
    cat = pl.col("cat").cast(pl.String)
    host = nested.filter(~cat.is_in(list(schema.DEVICE_CATEGORIES | schema.PROFILER_SPAN_CATEGORIES))
                         .fill_null(True))
    total = int(host["self_ns"].sum() or 0)
    top_host = (host.group_by(torch_name_expr().alias("name"))
                .agg(pl.len().alias("calls"), pl.col("self_ns").sum(), pl.col("dur_ns").sum().alias("total_ns"))
                .with_columns(share=pl.col("self_ns") / total if total else pl.lit(None, pl.Float64))
                .sort(["self_ns", "name"], descending=[True, False]).head(n))
    dev = nested.filter(cat.is_in(list(schema.DEVICE_WORK_CATEGORIES)).fill_null(False))
    dtotal = int(dev["dur_ns"].sum() or 0)
    top_dev = (dev.group_by("name").agg(pl.len().alias("calls"), pl.col("dur_ns").sum().alias("total_ns"))
               .with_columns(share=pl.col("total_ns") / dtotal if dtotal else pl.lit(None, pl.Float64))
               .sort(["total_ns", "name"], descending=[True, False]).head(n))
    return top_host, top_dev


def trace_repr(tr: Trace) -> str:
    """`Trace.__repr__`: one header line and the key facts (no nesting is computed)."""
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
            parts.append(f"<details open><summary>top {len(host)} host ops by self time</summary>"
                         f"<table>{head.format('name', 'self')}{_rows_html(host, 'self_ns')}</table></details>")
        if not dev.is_empty():
            parts.append(f"<details open><summary>top {len(dev)} device activities by time</summary>"
                         f"<table>{head.format('name', 'time')}{_rows_html(dev, 'total_ns')}</table></details>")
    parts.append("</div>")
    return "".join(parts)
