"""torch's ``EventList.table()`` text, byte for byte, from a key_averages frame.

The rules are torch's ``torch.autograd.profiler_util._build_table`` (see
``pytorch_spec.md`` §2.5): right-aligned columns (Name included) each followed by two
spaces, percentages over the *self* CPU total, the ``Self <DEV>`` block only when some row
has self device time, the device total over device rows that are not user annotations, and
torch's column swap when both stacks and FLOPs are shown.

Times arrive as int64 ns and are printed the torch way from ``ns / 1000`` (a float in µs).
torch accumulates its µs floats with ``+=``; where the exact value is a rounding tie at the
printed precision (e.g. 172.7585 µs) its float noise picks the side. A frame with torch's
own floats (``key_averages(..., torch_floats=True)``: ``_torch_self_cpu_us``,
``_torch_cpu_total_us``) is printed, sorted and summed from those, which gives torch's text
byte for byte, ties included.
"""

from __future__ import annotations

import math

import polars as pl

from proftab.exceptions import UsageError
from proftab.render.sanitize import sanitize_expr
from proftab.render.text import distinct_cuts

__all__ = ["render_table", "SORT_KEYS"]

#: torch's ``sort_by`` attribute names (after the cuda/xpu/privateuse1 -> device rewrite)
#: mapped to key_averages columns.
SORT_KEYS: dict[str, str] = {
    "self_cpu_time_total": "self_cpu_ns",
    "cpu_time_total": "cpu_total_ns",
    "cpu_time": "cpu_avg_ns",
    "self_device_time_total": "self_device_ns",
    "device_time_total": "device_total_ns",
    "device_time": "device_avg_ns",
    "count": "calls",
    "cpu_memory_usage": "cpu_mem_bytes",
    "self_cpu_memory_usage": "self_cpu_mem_bytes",
    "device_memory_usage": "device_mem_bytes",
    "self_device_memory_usage": "self_device_mem_bytes",
    "flops": "flops",
}
_TIME_UNITS = (None, "s", "ms", "us")
# Device types whose self time makes up the ``Self <DEV> time total`` (torch: CUDA,
# PrivateUse1, MTIA, XPU; legacy CPU events are not produced from traces).
_DEVICE_SUM_TYPES = frozenset({"cuda", "privateuse1", "mtia", "xpu"})
_FLOPS_HEADERS = ("FLOPs", "KFLOPs", "MFLOPs", "GFLOPs", "TFLOPs", "PFLOPs")
_W = 12  # torch's DEFAULT_COLUMN_WIDTH
#: torch's own float µs sums (`key_averages(..., torch_floats=True)`)
_TORCH_FLOATS = ("_torch_self_cpu_us", "_torch_cpu_total_us")
_USED = (
    "name", "device_type", "is_user_annotation", "is_async", "top_level", "overload_name",
    "input_shapes", "stack", "calls", "self_cpu_ns", "cpu_total_ns", "cpu_avg_ns",
    "self_device_ns", "device_total_ns", "device_avg_ns", "cpu_mem_bytes",
    "self_cpu_mem_bytes", "device_mem_bytes", "self_device_mem_bytes", "flops",
)


def _fmt_time(us: float, unit: str | None) -> str:
    """Format a µs value like torch's ``_format_time`` / ``override_time_unit``."""
    if unit == "s" or (unit is None and us >= 1000.0 * 1000.0):
        return f"{us / (1000.0 * 1000.0):.3f}s"
    if unit == "ms" or (unit is None and us >= 1000.0):
        return f"{us / 1000.0:.3f}ms"
    return f"{us:.3f}us"


def _fmt_share(us: float, total_us: float) -> str:
    """torch's ``_format_time_share``; ``"NaN"`` when the total is 0 (torch asserts)."""
    if total_us == 0:
        return "NaN"
    return f"{us * 100.0 / total_us:.2f}%"


def _fmt_mem(nbytes: int) -> str:
    """torch's ``_format_memory`` (binary units, 2 decimals, plain bytes below 1 KB)."""
    for scale, unit in ((1 << 30, "GB"), (1 << 20, "MB"), (1 << 10, "KB")):
        if abs(nbytes) >= scale:
            return f"{nbytes * 1.0 / scale:.2f} {unit}"
    return f"{nbytes} B"


def _trim_path(path: str, width: int) -> str:
    """Keep the last ``width`` chars of a stack entry, marking the cut with ``...``."""
    if len(path) > width:
        path = path[len(path) - width :]
        if len(path) > 3:
            path = "..." + path[3:]
    return path


def _cut_name(name: str, max_width: int | None) -> str:
    """torch's name rule: ``len >= max_width - 3`` -> first ``max_width - 3`` chars + ``...``."""
    if max_width is not None and len(name) >= max_width - 3:
        return name[: max_width - 3] + "..."
    return name


def _sort_column(sort_by: str) -> str:
    """Map a torch ``sort_by`` name (or one of our column names) to a column."""
    attr = sort_by.replace("cuda", "device").replace("xpu", "device").replace("privateuse1", "device")
    if attr in SORT_KEYS:
        return SORT_KEYS[attr]
    if sort_by in SORT_KEYS.values():
        return sort_by
    valid = ", ".join(sorted(SORT_KEYS) + sorted(set(SORT_KEYS.values()) - set(SORT_KEYS)))  # each name once
    msg = (
        f"unknown sort_by {sort_by!r}; valid keys: {valid} "
        "(and the cuda_/xpu_/privateuse1_ spellings of the device keys)"
    )
    raise UsageError(
        msg
    )


def _device_name(rows: pl.DataFrame, use_device: str | None) -> str | None:
    """The profiler's device string: ``use_device``, else the first non-CPU device type."""
    if use_device:
        return use_device
    others = [d for d in rows["device_type"].to_list() if d and d.upper() != "CPU"]
    return others[0].lower() if others else None


def render_table(
    rows: pl.DataFrame,
    *,
    sort_by: str | None = None,
    row_limit: int = 100,
    max_src_column_width: int = 75,
    max_name_column_width: int | None = 55,
    max_shapes_column_width: int = 80,
    header: str | None = None,
    top_level_events_only: bool = False,
    time_unit: str | None = None,
    use_device: str | None = None,
    profile_memory: bool = False,
    with_flops: bool = False,
    distinct_names: bool = False,
) -> str:
    r"""Render torch's ``EventList.table()`` from a ``key_averages`` frame.

    Parameters
    ----------
    rows
        ``Trace.key_averages()`` output, in torch's first-occurrence order.
    sort_by
        torch's sort key (``self_cpu_time_total``, ``cuda_time_total``, ``count``, ...) or
        a column name; stable descending. ``None`` keeps the input order.
    row_limit
        Rows to print; ``-1`` (any negative) prints all, ``0`` none.
    max_src_column_width, max_name_column_width, max_shapes_column_width, header,
    top_level_events_only, time_unit
        As in torch. ``time_unit`` is ``None``, ``"s"``, ``"ms"`` or ``"us"``.
    use_device
        The profiler's device (``"cuda"``, ``"xpu"``, ...); inferred from the first non-CPU
        ``device_type`` when ``None``.
    profile_memory, with_flops
        The profile's flags; they add the memory and FLOPs columns.
    distinct_names
        Where torch's cut prints two different names alike (long kernel names sharing a
        template prefix), print those as front, ``...`` and the part where they differ, at the
        same width (`proftab.render.text.distinct_cuts`). Off: torch's text byte for byte.

    Returns
    -------
    str
        The table, each line ending in ``"\\n"``; ``""`` for an empty frame.

    Raises
    ------
    ValueError
        Unknown ``sort_by`` or ``time_unit``, or device time without a known device.
    """
    sort_col = _sort_column(sort_by) if sort_by is not None else None
    if time_unit not in _TIME_UNITS:
        msg = f"unknown time_unit {time_unit!r}; valid: 's', 'ms', 'us' or None"
        raise UsageError(msg)
    if rows.height == 0:
        return ""

    rows = rows.with_columns(
        # a null name: an unnamed event; control characters from the trace become visible escapes
        sanitize_expr(pl.col("name", "input_shapes", "overload_name").fill_null("")),
        pl.col("stack").fill_null([]).list.eval(sanitize_expr(pl.element())),
    )
    has_device_time = bool((rows["self_device_ns"] > 0).any())
    has_device_mem = bool((rows["self_device_mem_bytes"] > 0).any())
    device = _device_name(rows, use_device)
    if has_device_time and not device:
        msg = "rows have device time but no device is known; pass use_device"
        raise UsageError(msg)
    dev = device.upper() if device else "None"
    has_shapes = bool(rows["input_shapes"].is_in(["", "[]"]).not_().any())
    has_overload = bool((rows["overload_name"].str.len_chars() > 0).any())
    has_stack = bool((rows["stack"].list.len() > 0).any())

    floats = _TORCH_FLOATS[0] in rows.columns and _TORCH_FLOATS[1] in rows.columns
    # µs floats computed one by one in Python, as torch does (an engine may divide by 1000 as a
    # multiplication by 0.001, which rounds ties differently)
    if floats:  # torch's own µs floats: printed, sorted and summed as torch does
        self_us = rows[_TORCH_FLOATS[0]].to_list()
        total_us = rows[_TORCH_FLOATS[1]].to_list()
        avg_us = [t / c if c else 0.0 for t, c in zip(total_us, rows["calls"].to_list(), strict=True)]
    else:
        self_us = [v / 1000 for v in rows["self_cpu_ns"].to_list()]
        total_us = [v / 1000 for v in rows["cpu_total_ns"].to_list()]
        avg_us = [v / 1000 for v in rows["cpu_avg_ns"].to_list()]
    rows = rows.with_columns(pl.Series("__self_us", self_us, pl.Float64), pl.Series("__total_us", total_us, pl.Float64),
                             pl.Series("__avg_us", avg_us, pl.Float64))
    if sort_col is not None:
        by = {"self_cpu_ns": "__self_us", "cpu_total_ns": "__total_us", "cpu_avg_ns": "__avg_us"}.get(
            sort_col, sort_col) if floats else sort_col
        rows = (
            rows.with_row_index("__pos")
            .sort([by, "__pos"], descending=[True, False])
            .drop("__pos")
        )
    r = {c: rows[c].to_list() for c in (*_USED, "__self_us", "__total_us", "__avg_us") if c in rows.columns}
    n = rows.height

    name_w = max(len(s) for s in r["name"]) + 4
    if max_name_column_width is not None:
        name_w = min(name_w, max_name_column_width)
    shapes_w = min(max(len(s) for s in r["input_shapes"]) + 4, max_shapes_column_width)
    src_w = 0
    if has_stack:
        src_w = max(len(e) for st in r["stack"] for e in st) + 4
        src_w = min(src_w, max_src_column_width)

    headers = ["Name"] + (["Overload Name"] if has_overload else [])
    headers += ["Self CPU %", "Self CPU", "CPU total %", "CPU total", "CPU time avg"]
    if has_device_time:
        headers += [f"Self {dev}", f"Self {dev} %", f"{dev} total", f"{dev} time avg"]
    show_dev_mem = profile_memory and bool(device) and has_device_mem
    if profile_memory:
        headers += ["CPU Mem", "Self CPU Mem"]
        if show_dev_mem:
            headers += [f"{dev} Mem", f"Self {dev} Mem"]
    headers.append("# of Calls")
    widths = [name_w] * (1 + has_overload) + [_W] * (len(headers) - 1 - has_overload)
    aligns = [">"] * len(headers)
    if has_shapes:
        headers.append("Input Shapes")
        widths.append(shapes_w)
        aligns.append(">")
    if has_stack:
        headers.append("Source Location")
        widths.append(src_w)
        aligns.append("<")
    positive_flops = [f for f in r["flops"] if f > 0]
    show_flops = with_flops and bool(positive_flops)
    if show_flops:
        log_flops = max(0, min(math.log10(min(positive_flops)) / 3, float(len(_FLOPS_HEADERS) - 1)))
        flops_scale = pow(10, math.floor(log_flops) * -3.0)
        headers.append(f"Total {_FLOPS_HEADERS[int(log_flops)]}")
        widths.append(_W)
        aligns.append(">")

    row_format = "".join(f"{{: {a}{w}}}  " for a, w in zip(aligns, widths, strict=False))
    sep = "".join("-" * w + "  " for w in widths)
    line_length = sum(widths) + 2 * len(widths) - 2

    sum_cpu_us = 0.0
    for us in r["__self_us"]:  # torch's `+=` in row order (the floats' sum depends on it)
        sum_cpu_us += us
    if not floats:
        sum_cpu_us = sum(r["self_cpu_ns"]) / 1000
    sum_dev_us = sum(
        ns
        for ns, dt, ua in zip(r["self_device_ns"], r["device_type"], r["is_user_annotation"], strict=False)
        if (dt or "").lower() in _DEVICE_SUM_TYPES and not ua
    ) / 1000

    def t(us: float) -> str:
        return _fmt_time(us, time_unit)

    out: list[str] = []
    if header is not None:
        out += ["=" * line_length, header]
    if top_level_events_only:
        out += ["=" * line_length, "This report only display top-level ops statistics"]
    out += [sep, row_format.format(*headers), sep]

    shown = [i for i in range(n) if not top_level_events_only or r["top_level"][i]]
    shown = shown if row_limit is None or row_limit < 0 else shown[:row_limit]
    # torch's cut names, made distinct where two different names would print the same
    cut_names = {i: _cut_name(r["name"][i], max_name_column_width) for i in shown}
    if distinct_names:
        cut_names = dict(zip(shown, distinct_cuts([r["name"][i] for i in shown], [cut_names[i] for i in shown],
                                                  ellipsis="..."), strict=True))
    for i in shown:
        self_cpu, cpu_total = r["__self_us"][i], r["__total_us"][i]
        vals: list[object] = [cut_names[i]]
        if has_overload:
            vals.append(_cut_name(r["overload_name"][i], max_name_column_width))
        vals += [
            _fmt_share(self_cpu, sum_cpu_us),
            t(self_cpu),
            0 if r["is_async"][i] else _fmt_share(cpu_total, sum_cpu_us),
            t(cpu_total),
            t(r["__avg_us"][i]),
        ]
        if has_device_time:
            self_dev = r["self_device_ns"][i] / 1000
            vals += [
                t(self_dev),
                _fmt_share(self_dev, sum_dev_us),
                t(r["device_total_ns"][i] / 1000),
                t(r["device_avg_ns"][i] / 1000),
            ]
        if profile_memory:
            vals += [_fmt_mem(r["cpu_mem_bytes"][i]), _fmt_mem(r["self_cpu_mem_bytes"][i])]
            if show_dev_mem:
                vals += [_fmt_mem(r["device_mem_bytes"][i]), _fmt_mem(r["self_device_mem_bytes"][i])]
        vals.append(r["calls"][i])
        if has_shapes:
            vals.append(r["input_shapes"][i][:shapes_w])
        # torch appends FLOPs before the source cell although its header order is
        # "Source Location, Total FLOPs": with both, the two columns swap contents.
        if show_flops:
            f = r["flops"][i]
            vals.append("--" if f <= 0 else f"{f * flops_scale:8.3f}")
        stack = r["stack"][i]
        if has_stack:
            vals.append(_trim_path(stack[0], src_w) if stack else "")
        out.append(row_format.format(*vals))
        if has_stack:
            blank = [""] * (len(headers) - 1)
            out += [row_format.format(*blank, _trim_path(e, src_w)) for e in stack[1:]]
            out.append(row_format.format(*blank, ""))

    out += [sep, f"Self CPU time total: {t(sum_cpu_us)}"]
    if has_device_time:
        out.append(f"Self {dev} time total: {t(sum_dev_us)}")
    return "".join(line + "\n" for line in out)
