"""Charts of a trace (Altair, the library behind Polars' `.plot`): functions returning charts.

* `top_ops`: top-N ops, self vs total time;
* `timeline`: a Gantt chart of one profiler step per thread and stream;
* `icicle`: the call tree, width = total time, colour = self time;
* `steps`: per-step stacked bars of self time by op.

Each returns an `altair` chart: display it in a notebook, or `save(chart, "out.html")`
(``.html``, ``.json`` Vega-Lite spec; ``.png`` / ``.svg`` with `vl-convert-python`); the chart's
own ``chart.save("out.html")`` writes the same offline page (`offline_chart`).
Altair is imported only when a chart is made (the ``plot`` extra: ``pip install '.[plot]'`` from a checkout).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import polars as pl

from proftab import kinds, schema
from proftab._dependencies import import_optional
from proftab.api import register_trace_namespace
from proftab.exceptions import UsageError
from proftab.intervals.tree import depth_levels
from proftab.steps import step_windows

if TYPE_CHECKING:
    from proftab.trace import Trace

__all__ = ["KINDS", "icicle", "offline_chart", "save", "steps", "timeline", "top_ops"]

#: chart kinds by name (the `proftab plot KIND` words)
KINDS = ("top", "timeline", "tree", "steps", "roofline", "critical-path")

#: one colour per event category, the same in every chart (Tableau 10, then greys)
CATEGORY_COLORS = {
    kinds.CPU_OP: "#4e79a7", kinds.USER_ANNOTATION: "#f28e2b", kinds.PYTHON_FRAME: "#bab0ac",
    kinds.CUDA_RUNTIME: "#e15759", kinds.CUDA_DRIVER: "#ff9d9a", kinds.KERNEL: "#59a14f", kinds.GPU_MEMCPY: "#edc948",
    kinds.GPU_MEMSET: "#b07aa1", kinds.DEVICE_ANNOTATION: "#ff9da7", kinds.AC2G_FLOW: "#9c755f",
    kinds.FWDBWD_FLOW: "#76b7b2", kinds.CPU_INSTANT_EVENT: "#d4a6c8", kinds.PROFILER_SPAN: "#79706e",
}
_OTHER_COLORS = ("#86bcb6", "#8cd17d", "#b6992d", "#499894", "#d37295", "#fabfd2", "#a0cbe8", "#ffbe7d")


def category_scale(categories: list[str]) -> Any:
    """An Altair colour scale giving each category its fixed colour (`CATEGORY_COLORS`).

    Categories proftab does not know get a colour from their name's checksum, so they too keep
    it from chart to chart.
    """
    import zlib

    cats = sorted(set(categories))
    colors = [CATEGORY_COLORS.get(c) or _OTHER_COLORS[zlib.crc32(c.encode()) % len(_OTHER_COLORS)] for c in cats]
    return _alt().Scale(domain=cats, range=colors)


def _alt() -> Any:
    """The altair every proftab chart is built with: altair itself, except that its chart
    constructors (`Chart`, `layer`, `hconcat`, ...) make charts whose own ``.save("x.html")`` is
    offline (`offline_chart`)."""
    global _OFFLINE_ALT  # noqa: PLW0603 - built once, on the first chart
    if _OFFLINE_ALT is None:
        _OFFLINE_ALT = _OfflineAltair(import_optional("altair", extra="plot", what="plotting"))
    return _OFFLINE_ALT


#: altair's top-level chart classes and the functions that compose charts into one of them
_CHART_CLASSES = ("Chart", "LayerChart", "HConcatChart", "VConcatChart", "ConcatChart", "FacetChart", "RepeatChart")
_CHART_FUNCTIONS = ("layer", "hconcat", "vconcat", "concat", "repeat")
_OFFLINE_ALT: Any = None
_OFFLINE_CLASSES: dict[type, type] = {}


class _OfflineSave:
    """Mixin of the charts proftab returns: altair's ``.save`` with HTML offline by default.

    ``chart.save("x.html")`` writes the page of `to_html`: Vega, Vega-Lite and vega-embed
    inline (vl-convert's bundle, cached), no CDN. ``inline=False`` keeps altair's CDN page;
    every other format and option is altair's own `save`. Charts composed with ``+``, ``|``
    and ``&`` stay offline.
    """

    def save(self, fp: Any, format: str | None = None, *args: Any, inline: bool | None = None,  # noqa: A002
             **kwargs: Any) -> None:
        fmt = format
        if fmt is None and isinstance(fp, str | os.PathLike):
            fmt = os.path.splitext(os.fspath(fp))[1].lstrip(".").lower()
        if fmt != "html" or inline is False:
            super().save(fp, format, *args, inline=bool(inline), **kwargs)  # type: ignore[misc]
        elif args or kwargs:  # altair's own options (embed_options, versions): its inline page
            super().save(fp, format, *args, inline=True, **kwargs)  # type: ignore[misc]
        elif isinstance(fp, str | os.PathLike):
            with open(fp, "w", encoding="utf-8") as fh:
                fh.write(to_html(self))
        else:
            fp.write(to_html(self))

    def __add__(self, other: Any) -> Any:
        return offline_chart(super().__add__(other))  # type: ignore[misc]

    def __or__(self, other: Any) -> Any:
        return offline_chart(super().__or__(other))  # type: ignore[misc]

    def __and__(self, other: Any) -> Any:
        return offline_chart(super().__and__(other))  # type: ignore[misc]


def _offline_class(cls: type) -> type:
    sub = _OFFLINE_CLASSES.get(cls)
    if sub is None:
        sub = type(cls.__name__, (_OfflineSave, cls), {"__module__": cls.__module__, "__doc__": cls.__doc__})
        _OFFLINE_CLASSES[cls] = sub
    return sub


def offline_chart(chart: Any) -> Any:
    """`chart` (an altair top-level chart) made to save HTML offline (`_OfflineSave`); in place.

    Its copies (``.properties()``, ``.interactive()``, ...) keep the class, so they do too.
    """
    alt = _alt()._module
    if isinstance(chart, _OfflineSave) or not isinstance(chart, alt.TopLevelMixin):
        return chart
    object.__setattr__(chart, "__class__", _offline_class(type(chart)))  # altair's __setattr__ sets a spec key
    return chart


class _OfflineAltair:
    """altair, with `_CHART_CLASSES` and `_CHART_FUNCTIONS` making offline-saving charts."""

    def __init__(self, module: Any) -> None:
        self._module = module

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._module, name)
        if name in _CHART_CLASSES:
            value = _offline_class(value)
        elif name in _CHART_FUNCTIONS:
            def compose(*a: Any, _f: Any = value, **k: Any) -> Any:
                return offline_chart(_f(*a, **k))
            value = compose
        setattr(self, name, value)  # looked up once
        return value


def _data(df: pl.DataFrame) -> Any:
    """Inline chart data (row dicts; no dataframe-size limit, no pandas)."""
    return _alt().InlineData(values=df.to_dicts())


def _title(tr: Trace, what: str) -> str:
    files = [os.path.basename(str(f)) for f in tr.files["source_file"]]
    shown = ", ".join(files[:2]) + (f" (+{len(files) - 2})" if len(files) > 2 else "")
    return f"{what} · {shown}"


def top_ops(tr: Trace, n: int = 20, *, metric: Literal["cpu", "device"] = "cpu", python: bool = False) -> Any:
    """Horizontal bars of the top `n` key_averages rows by self time, self next to total.

    Parameters
    ----------
    metric
        ``"cpu"``: host rows by Self CPU; ``"device"``: device rows by Self device time.
    python
        Keep ``python_function`` rows (torch's default); by default their time is their op's
        self time, so a sleeping helper thread's frame does not top the chart.
    """
    alt = _alt()
    ka = tr.key_averages(include_python_functions=python)
    if metric == "cpu":
        rows = ka.filter(pl.col("device_type") == "CPU").select(
            "name", "calls", pl.col("self_cpu_ns").alias("self_ns"), pl.col("cpu_total_ns").alias("total_ns"))
    elif metric == "device":
        rows = ka.filter((pl.col("device_type") != "CPU") & ~pl.col("is_user_annotation")).select(
            "name", "calls", pl.col("self_device_ns").alias("self_ns"), pl.col("device_total_ns").alias("total_ns"))
    else:
        msg = f"unknown metric {metric!r}; valid: 'cpu', 'device'"
        raise UsageError(msg)
    rows = rows.sort(["self_ns", "name"], descending=[True, False]).head(n)
    order = rows["name"].to_list()
    long = rows.unpivot(index=["name", "calls"], on=["self_ns", "total_ns"], variable_name="measure",
                        value_name="ns").with_columns(
        ms=pl.col("ns") / 1e6, measure=pl.col("measure").str.replace("_ns", ""))
    return alt.Chart(_data(long), title=_title(tr, f"top {len(order)} ops by self {metric} time")).mark_bar().encode(
        y=alt.Y("name:N", sort=order, title=None, axis=alt.Axis(labelLimit=360)),
        x=alt.X("ms:Q", title=f"{metric} time (ms)"),
        yOffset=alt.YOffset("measure:N", sort=["self", "total"]),
        color=alt.Color("measure:N", sort=["self", "total"], title=None),
        tooltip=["name:N", "measure:N", alt.Tooltip("ms:Q", format=",.3f"), "calls:Q"],
    ).properties(width=520)


def step_window(tr: Trace, step: int | None = None, rank: int | None = None) -> tuple[int, int, int, str]:
    """`(rank, start_ns, end_ns, label)` of `ProfilerStep#<step>` (host side; default: the first).

    Without profiler steps, the whole span of the rank.
    """
    ranks = tr.files["rank"].to_list()
    rank = ranks[0] if rank is None else rank
    if rank not in ranks:
        msg = f"rank {rank} not in the trace (ranks: {ranks})"
        raise UsageError(msg)
    ev = tr.collect("events").filter(pl.col("rank") == rank)
    steps_ = step_windows(ev)
    if step is not None:
        have = sorted(set(steps_["step"].to_list()))
        steps_ = steps_.filter(pl.col("step") == step)
        if steps_.is_empty():
            shown = ", ".join(map(str, have[:20])) + (f", ... ({len(have)} steps)" if len(have) > 20 else "")
            msg = (f"no ProfilerStep#{step} on rank {rank}; steps on rank {rank}: {shown}" if have
                   else f"no ProfilerStep#{step} on rank {rank}: the rank has no ProfilerStep#N events")
            raise UsageError(msg)
    if steps_.is_empty():
        lo, hi = ev.select(pl.col("start_ns").min().fill_null(0), pl.col("end_ns").max().fill_null(0)).row(0)
        return rank, int(lo), int(hi), "whole trace"
    r = steps_.row(0, named=True)
    return rank, int(r["start_ns"]), int(r["end_ns"]), str(r["name"])


def timeline(tr: Trace, step: int | None = None, *, rank: int | None = None, max_depth: int = 3,
             python: bool = False, max_events: int = 20_000) -> Any:
    """Gantt chart of one profiler step: one band per thread and stream, a lane per depth.

    Parameters
    ----------
    step
        `N` of `ProfilerStep#N` (default: the first step; the whole trace without steps).
        Device activity is shown over the same wall-clock window.
    rank
        Rank to show (default: the lowest).
    max_depth
        Deepest nesting level drawn (0 = top-level events only), counted among the events shown.
    python
        Show `python_function` events (hidden by default: with `with_stack` they bury the ops).
    max_events
        Keep at most this many events (the longest).
    """
    alt = _alt()
    from proftab.render.text import fmt_ns
    from proftab.tracks import track_labels

    rank, t0, t1, label = step_window(tr, step, rank)
    cat = pl.col("cat").cast(pl.String)
    from proftab.intervals import nest

    hidden = list(kinds.PROFILER_SPAN_CATEGORIES) + ([] if python else [kinds.PYTHON_FRAME])
    ev = tr.collect("events").filter((pl.col("rank") == rank) & (pl.col("end_ns") > t0) & (pl.col("start_ns") < t1)
                          & ~cat.is_in(hidden).fill_null(False))
    ev = nest(ev.select(*schema.TRACK_KEYS, "event_id", "name", "cat", "start_ns", "dur_ns",
                        pl.max_horizontal("start_ns", "end_ns").alias("end_ns")), by=schema.TRACK_KEYS)
    ev = ev.filter(pl.col("depth") <= max_depth)
    if ev.height > max_events:
        ev = ev.sort("dur_ns", descending=True).head(max_events)
    labels = track_labels(tr.collect("events"), tr.collect("threads"))
    labels = labels.filter(pl.col("rank") == rank).with_row_index("_track")
    ev = ev.join(labels.select(*schema.TRACK_KEYS, "label", "kind", "_track"), on=schema.TRACK_KEYS, how="left",
                 nulls_equal=True)
    data = ev.select(
        "name", pl.col("cat").cast(pl.String).fill_null("?").alias("cat"), "label", "kind", "depth",
        ((pl.max_horizontal("start_ns", pl.lit(t0)) - t0) / 1e6).alias("start_ms"),
        ((pl.min_horizontal("end_ns", pl.lit(t1)) - t0) / 1e6).alias("end_ms"),
        pl.col("dur_ns").map_elements(fmt_ns, return_dtype=pl.String).alias("dur"),
    )
    order = labels.filter(pl.col("label").is_in(data["label"].unique().implode()))["label"].to_list()
    lanes = max(int(data.select(pl.col("depth").max().fill_null(0)).item()) + 1, 1)
    span_ms = max((t1 - t0) / 1e6, 1e-9)
    # names on the bars wide enough to hold them, so a PNG (no tooltips) still says what is what
    data = data.with_columns(_fit("name", ((pl.col("end_ms") - pl.col("start_ms")) / span_ms * _TIMELINE_WIDTH / 6.0)
                                  .floor().cast(pl.Int64) - 1).alias("text"))
    step_px = max(6, 60 // lanes)
    base = alt.Chart(_data(data), title=_title(tr, f"{label} · rank {rank}"))
    y = alt.Y("label:N", sort=order, title=None, axis=alt.Axis(labelLimit=260))
    x = alt.X("start_ms:Q", title="ms since the step started", scale=alt.Scale(domain=[0, span_ms]))
    bars = base.mark_bar(clip=True).encode(
        y=y, yOffset=alt.YOffset("depth:O"), x=x, x2="end_ms:Q",
        color=alt.Color("cat:N", title="category", scale=category_scale(data["cat"].to_list())),
        tooltip=["name:N", "cat:N", "dur:N", "depth:O", "label:N"],
    )
    text = base.mark_text(align="left", baseline="middle", dx=2, fontSize=min(10, step_px - 1), clip=True).encode(
        y=y, yOffset=alt.YOffset("depth:O"), x=x, text="text:N")
    return (bars + text).properties(width=_TIMELINE_WIDTH, height=alt.Step(step_px))


_TIMELINE_WIDTH = 900


_ICICLE_WIDTH = 900


def _fit(col: str, chars: pl.Expr) -> pl.Expr:
    """`col` cut to `chars` characters (with an ellipsis); empty when fewer than 4 fit."""
    name = pl.col(col)
    return (pl.when(chars < 4).then(pl.lit(""))
            .when(name.str.len_chars() > chars).then(name.str.slice(0, chars - 1) + pl.lit("…"))
            .otherwise(name))


def icicle_layout(tree: pl.DataFrame) -> pl.DataFrame:
    """`x0`, `x1` (fractions of the total) for call-tree nodes in depth-first order."""
    n = tree.height
    if n == 0:
        return tree.with_columns(x0=pl.lit(None, pl.Float64), x1=pl.lit(None, pl.Float64))
    grand = float(tree.filter(pl.col("parent_node_id").is_null())["total_ns"].sum() or 1)
    node = tree["node_id"].to_numpy()
    pos = np.full(int(node.max()) + 1, -1)
    pos[node] = np.arange(n)
    parent_id = tree["parent_node_id"].fill_null(-1).to_numpy()
    parent = np.where(parent_id >= 0, pos[np.maximum(parent_id, 0)], -1)
    off = tree.select((pl.col("total_ns").cum_sum().over(pl.col("parent_node_id").fill_null(-1))
                       - pl.col("total_ns")).alias("o"))["o"].to_numpy() / grand
    depth = tree["depth"].to_numpy()
    x0 = np.zeros(n)
    for rows in depth_levels(depth):
        p = parent[rows]
        x0[rows] = np.where(p >= 0, x0[np.maximum(p, 0)], 0.0) + off[rows]
    return tree.with_columns(pl.Series("x0", x0), (pl.Series("x0", x0) + pl.col("total_ns") / grand).alias("x1"))


def icicle(tr: Trace, *, max_depth: int = 8, min_share: float = 0.002, device: bool = False,
           python: bool = False) -> Any:
    """Icicle of the call tree: width = total time, colour = self time (ms).

    Parameters
    ----------
    python
        Draw ``python_function`` frames too; by default the tree is of ops
        (`proftab.views.without_python`), not of multiprocessing and threading frames.
    max_depth
        Deepest level drawn.
    min_share
        Hide nodes below this share of the total time.
    device
        Include device streams (their own roots).
    """
    alt = _alt()
    from proftab.calltree import call_tree
    from proftab.render.text import fmt_ns
    from proftab.views import without_python

    nested = tr.collect("nested")
    tree = icicle_layout(call_tree(nested if python else without_python(nested), device=device, max_depth=max_depth))
    data = tree.filter((pl.col("depth") <= max_depth) & (pl.col("total_share") >= min_share)).select(
        "name", "depth", "n_calls", "x0", "x1",
        (pl.col("self_ns") / 1e6).alias("self_ms"),
        pl.col("total_ns").map_elements(fmt_ns, return_dtype=pl.String).alias("total"),
        pl.col("self_ns").map_elements(fmt_ns, return_dtype=pl.String).alias("self"),
        pl.col("path").list.join(" › ").alias("path"),
        _fit("name", ((pl.col("x1") - pl.col("x0")) * _ICICLE_WIDTH / 6.5).floor().cast(pl.Int64) - 1).alias("text"),
    )
    base = alt.Chart(_data(data), title=_title(tr, "call tree (width = total, colour = self)"))
    rect = base.mark_rect(stroke="white", strokeWidth=0.5).encode(
        x=alt.X("x0:Q", axis=None, scale=alt.Scale(domain=[0, 1])), x2="x1:Q",
        y=alt.Y("depth:O", title="depth"),
        color=alt.Color("self_ms:Q", title="self (ms)", scale=alt.Scale(scheme="oranges")),
        tooltip=["path:N", "n_calls:Q", "self:N", "total:N"],
    )
    text = base.mark_text(align="left", dx=3, fontSize=10).encode(x="x0:Q", y=alt.Y("depth:O"), text="text:N")
    return (rect + text).properties(width=_ICICLE_WIDTH, height=alt.Step(22))


def rank_trace(tr: Trace, rank: int) -> Trace:
    """The part of `tr` recorded on `rank` (every table filtered; a stored key_averages dropped)."""
    from proftab.trace import Trace

    ranks = tr.files["rank"].to_list()
    if rank not in ranks:
        msg = f"rank {rank} not in the trace (ranks: {ranks})"
        raise UsageError(msg)
    tables = {name: frame.filter(pl.col("rank") == rank) for name, frame in tr.tables.items()
              if "rank" in frame.collect_schema().names()}
    return Trace(tables, tr.files.filter(pl.col("rank") == rank))


def steps(tr: Trace, n: int = 8, *, metric: Literal["cpu", "device"] = "cpu", python: bool = False,
          rank: int | None = None) -> Any:
    """Stacked bars per profiler step: self time of the top `n` ops, the rest as ``other``.

    Parameters
    ----------
    rank
        Only this rank's events (default: every rank's, summed per step).
    metric
        ``"cpu"`` (host rows, Self CPU) or ``"device"`` (device rows, Self device time).
    python
        Keep ``python_function`` rows (default: their time is their op's self time).
    """
    import warnings

    alt = _alt()
    if rank is not None:
        tr = rank_trace(tr, rank)
    with warnings.catch_warnings():  # key_averages(by_step) joins as-of by rank; polars 2 notes it cannot check
        warnings.filterwarnings("ignore", message="Sortedness of columns cannot be checked")
        ka = tr.key_averages(by_step=True, include_python_functions=python).filter(pl.col("step").is_not_null())
    if ka.is_empty():
        msg = "the trace has no ProfilerStep#N events"
        raise UsageError(msg)
    if metric == "cpu":
        rows = ka.filter(pl.col("device_type") == "CPU").select("step", "name", pl.col("self_cpu_ns").alias("ns"))
    elif metric == "device":
        rows = ka.filter((pl.col("device_type") != "CPU") & ~pl.col("is_user_annotation")).select(
            "step", "name", pl.col("self_device_ns").alias("ns"))
    else:
        msg = f"unknown metric {metric!r}; valid: 'cpu', 'device'"
        raise UsageError(msg)
    top = (rows.group_by("name").agg(pl.col("ns").sum()).sort(["ns", "name"], descending=[True, False])
           .head(n)["name"])
    data = (rows.with_columns(op=pl.when(pl.col("name").is_in(top.implode())).then(pl.col("name"))
                              .otherwise(pl.lit("other")))
            .group_by("step", "op").agg(pl.col("ns").sum())
            .with_columns(ms=pl.col("ns") / 1e6).sort("step", "op"))
    order = [*top.to_list(), "other"]
    return alt.Chart(_data(data), title=_title(tr, f"self {metric} time per step")).mark_bar().encode(
        x=alt.X("step:O", title="profiler step"),
        y=alt.Y("ms:Q", title=f"self {metric} time (ms)", stack="zero"),
        color=alt.Color("op:N", sort=order, title=None, legend=alt.Legend(labelLimit=320)),
        order=alt.Order("ms:Q", sort="descending"),
        tooltip=["step:O", "op:N", alt.Tooltip("ms:Q", format=",.3f")],
    ).properties(width=max(200, 40 * data["step"].n_unique()))


def save(chart: Any, path: str | os.PathLike[str]) -> None:
    """Write `chart` by extension: ``.html``, ``.json`` (Vega-Lite), ``.png`` / ``.svg`` (vl-convert)."""
    path = os.fspath(path)
    ext = os.path.splitext(path)[1].lower()
    if ext in (".png", ".svg", ".pdf"):
        import_optional("vl_convert", extra="plot", what=f"writing {ext} (or write .html)")
    elif ext == ".html":
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(to_html(chart))
        return
    elif ext != ".json":
        msg = f"unknown chart file type {ext!r}; use .html, .json, .png, .svg or .pdf"
        raise UsageError(msg)
    chart.save(path)


_HTML = """<!DOCTYPE html>
<html>
<head>
<meta charset="utf-8">
<title>{title}</title>
{scripts}
</head>
<body>
<div id="vis"></div>
<script>
vegaEmbed("#vis", {spec}, {{"renderer": "svg"}}).catch(console.error);
</script>
</body>
</html>
"""
_CDN = """<script src="https://cdn.jsdelivr.net/npm/vega@{vega}"></script>
<script src="https://cdn.jsdelivr.net/npm/vega-lite@{vegalite}"></script>
<script src="https://cdn.jsdelivr.net/npm/vega-embed@{embed}"></script>"""


def _js_bundle() -> str | None:
    """Vega, Vega-Lite and vega-embed as one script (vl-convert's bundle), or None without vl-convert.

    Bundling takes seconds, so the bundle is kept in ``$XDG_CACHE_HOME/proftab`` (default
    ``~/.cache/proftab``), one file per vl-convert and Vega-Lite version.
    """
    try:
        import vl_convert as vlc
    except ImportError:
        return None
    alt = _alt()
    vl = ".".join(alt.SCHEMA_VERSION.lstrip("v").split(".")[:2])
    cache = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "proftab")
    path = os.path.join(cache, f"vega-bundle-vlconvert{getattr(vlc, '__version__', 'x')}-vl{vl}.js")
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read()
    except OSError:
        pass
    bundle = str(vlc.javascript_bundle(vl_version=vl))  # type: ignore[call-arg]
    try:
        os.makedirs(cache, exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(bundle)
        os.replace(tmp, path)
    except OSError:  # a read-only home: bundle again next time
        pass
    return bundle


def to_html(chart: Any, *, offline: bool = True) -> str:
    r"""A standalone HTML page for `chart`.

    With `offline` (the default) the page carries Vega, Vega-Lite and vega-embed inline (from
    vl-convert, ~0.9 MB) and fetches nothing: it renders on an air-gapped machine. Without
    vl-convert installed, or with ``offline=False``, it loads them from a CDN (a
    `ProftabWarning` says so in the first case).

    Names come from user code: every ``<``, ``>`` and ``&`` in the embedded spec is written as
    a JSON ``\\u`` escape, so a name such as ``</script><script>...`` cannot end the script
    element; the chart shows it unchanged.
    """
    import html
    import warnings

    from proftab.exceptions import ProftabWarning

    alt = _alt()
    spec = chart.to_json(indent=None)
    safe = spec.replace("&", "\\u0026").replace("<", "\\u003c").replace(">", "\\u003e")
    title = chart.to_dict().get("title", "proftab chart")
    if isinstance(title, dict):
        title = title.get("text", "proftab chart")
    bundle = _js_bundle() if offline else None
    if bundle is not None:
        # the bundle is trusted library code; only a literal "</script" could end its element
        scripts = "<script>\n" + bundle.replace("</script", "<\\/script") + "\n</script>"
    else:
        if offline:
            warnings.warn("the HTML chart loads Vega from a CDN (it stays blank offline): "
                          "pip install vl-convert-python for a self-contained page", ProftabWarning, stacklevel=2)
        scripts = _CDN.format(vega=alt.VEGA_VERSION, vegalite=alt.VEGALITE_VERSION, embed=alt.VEGAEMBED_VERSION)
    return _HTML.format(title=html.escape(str(title)), scripts=scripts, spec=safe)


@register_trace_namespace("plot")
class PlotNamespace:
    """`tr.plot`: the charts of this module for one Trace (`tr.plot.timeline(step=3)`)."""

    def __init__(self, trace: Trace) -> None:
        self._trace = trace

    def top_ops(self, n: int = 20, *, metric: Literal["cpu", "device"] = "cpu", python: bool = False) -> Any:
        """Top ops by self time (`top_ops`)."""
        return top_ops(self._trace, n, metric=metric, python=python)

    def timeline(self, step: int | None = None, *, rank: int | None = None, max_depth: int = 3, **kw: Any) -> Any:
        """One step's tracks as a timeline (`timeline`)."""
        return timeline(self._trace, step, rank=rank, max_depth=max_depth, **kw)

    def icicle(self, *, max_depth: int = 8, min_share: float = 0.002, device: bool = False,
               python: bool = False) -> Any:
        """The call tree as an icicle chart (`icicle`)."""
        return icicle(self._trace, max_depth=max_depth, min_share=min_share, device=device, python=python)

    def roofline(self, **kw: Any) -> Any:
        """Roofline of the ops' perf models (`tr.perf.roofline`, `proftab.perf.chart`)."""
        return self._trace.perf.roofline(**kw)

    def steps(self, n: int = 8, *, metric: Literal["cpu", "device"] = "cpu", python: bool = False,
              rank: int | None = None) -> Any:
        """Per-step time split by top op (`steps`)."""
        return steps(self._trace, n, metric=metric, python=python, rank=rank)

    def memory(self, *, device: str | None = None, max_points: int = 20_000) -> Any:
        """Allocated and reserved memory over time, peak marked, steps shaded (`tr.memory.chart`)."""
        return self._trace.memory.chart(device=device, max_points=max_points)
