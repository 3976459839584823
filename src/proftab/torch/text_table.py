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
byte for byte, ties included (`proftab.torch.floats`).

`render_table` builds the table in torch's steps: the column choice (`_choose_columns`:
headers from `proftab.torch.columns`, widths), the sort (`_sorted`), each row's cells
(`_row_cells`, with the `_fmt_*` formats) and the lines (`_layout`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import polars as pl

from proftab.exceptions import UsageError
from proftab.render.sanitize import sanitize_expr
from proftab.render.text import distinct_cuts
from proftab.torch.columns import COLUMNS, torch_header, torch_share_header
from proftab.torch.floats import cpu_microseconds, torch_sum

__all__ = ["render_table", "SORT_KEYS"]

#: torch's ``sort_by`` attribute names (after the cuda/xpu/privateuse1 -> device rewrite)
#: mapped to key_averages columns: its numeric `FunctionEventAvg` attributes.
SORT_KEYS: dict[str, str] = {c.torch_attr: c.name for c in COLUMNS
                             if c.torch_attr is not None and c.role in ("count", "sum", "mean")}
_TIME_UNITS = (None, "s", "ms", "us")
# Device types whose self time makes up the ``Self <DEV> time total`` (torch: CUDA,
# PrivateUse1, MTIA, XPU; legacy CPU events are not produced from traces).
_DEVICE_SUM_TYPES = frozenset({"cuda", "privateuse1", "mtia", "xpu"})
#: the SI prefixes of torch's ``Total <X>FLOPs`` header, by thousands
_FLOPS_PREFIXES = ("", "K", "M", "G", "T", "P")
_W = 12  # torch's DEFAULT_COLUMN_WIDTH
#: the µs floats a row is printed, sorted and summed from (`proftab.torch.floats.cpu_microseconds`)
_SELF_US, _TOTAL_US, _AVG_US = "__self_us", "__total_us", "__avg_us"
#: the key_averages columns the table reads: keys, flags and those torch prints
_READ = tuple(c.name for c in COLUMNS if c.role in ("key", "flag") or c.header is not None)


#: the memory columns torch prints, per side, in its order (total, then self)
_MEMORY_COLUMNS = {side: tuple(c.name for c in COLUMNS if c.unit == "bytes" and c.side == side)
                   for side in ("cpu", "device")}


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
    device = _device_name(rows, use_device)
    if bool((rows["self_device_ns"] > 0).any()) and not device:
        msg = "rows have device time but no device is known; pass use_device"
        raise UsageError(msg)
    self_us, total_us, avg_us, floats = cpu_microseconds(rows)
    rows = rows.with_columns(pl.Series(_SELF_US, self_us, pl.Float64), pl.Series(_TOTAL_US, total_us, pl.Float64),
                             pl.Series(_AVG_US, avg_us, pl.Float64))
    if sort_col is not None:
        rows = _sorted(rows, sort_col, floats)
    r = {c: rows[c].to_list() for c in (*_READ, _SELF_US, _TOTAL_US, _AVG_US) if c in rows.columns}
    columns = _choose_columns(rows, r, device, profile_memory=profile_memory, with_flops=with_flops,
                              max_name_column_width=max_name_column_width,
                              max_shapes_column_width=max_shapes_column_width,
                              max_src_column_width=max_src_column_width)
    # torch's `+=` in row order (the floats' sum depends on it)
    sum_cpu_us = torch_sum(r[_SELF_US]) if floats else sum(r["self_cpu_ns"]) / 1000
    sum_dev_us = sum(
        ns
        for ns, dt, ua in zip(r["self_device_ns"], r["device_type"], r["is_user_annotation"], strict=False)
        if (dt or "").lower() in _DEVICE_SUM_TYPES and not ua
    ) / 1000

    shown = [i for i in range(rows.height) if not top_level_events_only or r["top_level"][i]]
    shown = shown if row_limit is None or row_limit < 0 else shown[:row_limit]
    names = _row_names([r["name"][i] for i in shown], max_name_column_width, distinct_names)
    body = [(_row_cells(r, i, name, columns, sum_cpu_us, sum_dev_us, time_unit, max_name_column_width),
             r["stack"][i][1:]) for i, name in zip(shown, names, strict=True)]
    title = [] if header is None else [header]
    if top_level_events_only:
        title.append("This report only display top-level ops statistics")
    totals = [f"Self CPU time total: {_fmt_time(sum_cpu_us, time_unit)}"]
    if columns.device_time:
        totals.append(f"Self {columns.dev} time total: {_fmt_time(sum_dev_us, time_unit)}")
    return _layout(columns, title, body, totals)


@dataclass(frozen=True)
class _Columns:
    """The columns torch's table shows (`_choose_columns`): their headers, widths and alignments,
    and which blocks a row's cells hold."""

    headers: list[str]
    widths: list[int]
    aligns: list[str]
    #: the device's name in headers (``CUDA``; ``None`` without a device)
    dev: str
    overload: bool
    device_time: bool
    memory: bool
    device_memory: bool
    #: the width the shapes are cut to; None: no shapes column
    shapes_width: int | None
    #: the width of the source column; None: no stacks
    src_width: int | None
    #: the factor of the FLOPs cells (10**-3k for the header's prefix); None: no FLOPs column
    flops_scale: float | None


def _choose_columns(rows: pl.DataFrame, r: dict[str, list[Any]], device: str | None, *, profile_memory: bool,
                    with_flops: bool, max_name_column_width: int | None, max_shapes_column_width: int,
                    max_src_column_width: int) -> _Columns:
    """torch's column choice: the blocks some row has data for (flags over all rows), their widths.

    `r` holds the columns of `rows` as lists; `device` is the profiler's device (`_device_name`).
    """
    has_device_time = bool((rows["self_device_ns"] > 0).any())
    has_device_mem = bool((rows["self_device_mem_bytes"] > 0).any())
    dev = device.upper() if device else "None"
    has_shapes = bool(rows["input_shapes"].is_in(["", "[]"]).not_().any())
    has_overload = bool((rows["overload_name"].str.len_chars() > 0).any())
    has_stack = bool((rows["stack"].list.len() > 0).any())

    name_w = max(len(s) for s in r["name"]) + 4
    if max_name_column_width is not None:
        name_w = min(name_w, max_name_column_width)
    shapes_w = min(max(len(s) for s in r["input_shapes"]) + 4, max_shapes_column_width)
    src_w = min(max(len(e) for st in r["stack"] for e in st) + 4, max_src_column_width) if has_stack else 0

    headers = [torch_header("name", dev)] + ([torch_header("overload_name", dev)] if has_overload else [])
    headers += [torch_share_header("self_cpu_ns", dev), torch_header("self_cpu_ns", dev),
                torch_share_header("cpu_total_ns", dev), torch_header("cpu_total_ns", dev),
                torch_header("cpu_avg_ns", dev)]
    if has_device_time:
        headers += [torch_header("self_device_ns", dev), torch_share_header("self_device_ns", dev),
                    torch_header("device_total_ns", dev), torch_header("device_avg_ns", dev)]
    show_dev_mem = profile_memory and bool(device) and has_device_mem
    if profile_memory:
        headers += [torch_header(c, dev) for c in _MEMORY_COLUMNS["cpu"]]
        if show_dev_mem:
            headers += [torch_header(c, dev) for c in _MEMORY_COLUMNS["device"]]
    headers.append(torch_header("calls", dev))
    widths = [name_w] * (1 + has_overload) + [_W] * (len(headers) - 1 - has_overload)
    aligns = [">"] * len(headers)
    if has_shapes:
        headers.append(torch_header("input_shapes", dev))
        widths.append(shapes_w)
        aligns.append(">")
    if has_stack:
        headers.append(torch_header("stack", dev))
        widths.append(src_w)
        aligns.append("<")
    positive_flops = [f for f in r["flops"] if f > 0]
    flops_scale = None
    if with_flops and positive_flops:
        log_flops = max(0, min(math.log10(min(positive_flops)) / 3, float(len(_FLOPS_PREFIXES) - 1)))
        flops_scale = pow(10, math.floor(log_flops) * -3.0)
        headers.append(torch_header("flops", dev, flops_prefix=_FLOPS_PREFIXES[int(log_flops)]))
        widths.append(_W)
        aligns.append(">")
    return _Columns(headers, widths, aligns, dev, has_overload, has_device_time, profile_memory, show_dev_mem,
                    shapes_w if has_shapes else None, src_w if has_stack else None, flops_scale)


def _sorted(rows: pl.DataFrame, sort_col: str, floats: bool) -> pl.DataFrame:
    """`rows` by `sort_col` descending, ties in their order (Python's stable sort, as torch's);
    the CPU times by the µs floats they are printed from when those are torch's own."""
    by = {"self_cpu_ns": _SELF_US, "cpu_total_ns": _TOTAL_US, "cpu_avg_ns": _AVG_US}.get(
        sort_col, sort_col) if floats else sort_col
    return rows.with_row_index("__pos").sort([by, "__pos"], descending=[True, False]).drop("__pos")


def _row_names(names: list[str], max_name_column_width: int | None, distinct_names: bool) -> list[str]:
    """torch's cut names, made distinct (`distinct_names`) where two different names would print the same."""
    cut = [_cut_name(name, max_name_column_width) for name in names]
    return distinct_cuts(names, cut, ellipsis="...") if distinct_names else cut


def _row_cells(r: dict[str, list[Any]], i: int, name: str, columns: _Columns, sum_cpu_us: float, sum_dev_us: float,
               time_unit: str | None, max_name_column_width: int | None) -> list[object]:
    """The cells of row `i` of `r` (its first line), formatted as torch's table does."""
    def t(us: float) -> str:
        return _fmt_time(us, time_unit)

    self_cpu, cpu_total = r[_SELF_US][i], r[_TOTAL_US][i]
    vals: list[object] = [name]
    if columns.overload:
        vals.append(_cut_name(r["overload_name"][i], max_name_column_width))
    vals += [
        _fmt_share(self_cpu, sum_cpu_us),
        t(self_cpu),
        0 if r["is_async"][i] else _fmt_share(cpu_total, sum_cpu_us),
        t(cpu_total),
        t(r[_AVG_US][i]),
    ]
    if columns.device_time:
        self_dev = r["self_device_ns"][i] / 1000
        vals += [
            t(self_dev),
            _fmt_share(self_dev, sum_dev_us),
            t(r["device_total_ns"][i] / 1000),
            t(r["device_avg_ns"][i] / 1000),
        ]
    if columns.memory:
        vals += [_fmt_mem(r[c][i]) for c in _MEMORY_COLUMNS["cpu"]]
        if columns.device_memory:
            vals += [_fmt_mem(r[c][i]) for c in _MEMORY_COLUMNS["device"]]
    vals.append(r["calls"][i])
    if columns.shapes_width is not None:
        vals.append(r["input_shapes"][i][:columns.shapes_width])
    # torch appends FLOPs before the source cell although its header order is
    # "Source Location, Total FLOPs": with both, the two columns swap contents.
    if columns.flops_scale is not None:
        f = r["flops"][i]
        vals.append("--" if f <= 0 else f"{f * columns.flops_scale:8.3f}")
    if columns.src_width is not None:
        stack = r["stack"][i]
        vals.append(_trim_path(stack[0], columns.src_width) if stack else "")
    return vals


def _layout(columns: _Columns, title: list[str], body: list[tuple[list[object], list[str]]],
            totals: list[str]) -> str:
    """torch's lines: the title lines under ``=`` rules, the header between rules, per row its
    cells (and with stacks one line per further stack entry and a blank line), the totals."""
    row_format = "".join(f"{{: {a}{w}}}  " for a, w in zip(columns.aligns, columns.widths, strict=False))
    sep = "".join("-" * w + "  " for w in columns.widths)
    line_length = sum(columns.widths) + 2 * len(columns.widths) - 2

    out: list[str] = []
    for line in title:
        out += ["=" * line_length, line]
    out += [sep, row_format.format(*columns.headers), sep]
    blank = [""] * (len(columns.headers) - 1)
    for cells, more_stack in body:
        out.append(row_format.format(*cells))
        if columns.src_width is not None:
            out += [row_format.format(*blank, _trim_path(e, columns.src_width)) for e in more_stack]
            out.append(row_format.format(*blank, ""))
    out += [sep, *totals]
    return "".join(line + "\n" for line in out)
