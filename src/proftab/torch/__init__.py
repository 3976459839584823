"""torch's own rules, together: `key_averages()`, its text `table()`, and their column facts.

The columns are declared once in `proftab.torch.columns`; `proftab.torch.aggregate` computes
them stage by stage (`grouping`, `stacks`, `measures`, `floats`).

`Trace.key_averages()` and `Trace.table()` are registered here (torch's API names on the
Trace); the free functions are `proftab.torch.aggregate.key_averages` (over frames) and
`proftab.torch.text_table.render_table`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

from proftab import kinds, schema
from proftab.api import register_trace_method
from proftab.exceptions import UsageError
from proftab.torch.aggregate import FLOPS_COLUMNS, NESTED_COLUMNS
from proftab.torch.aggregate import key_averages as key_averages_frame
from proftab.torch.columns import KEY_AVERAGES_COLUMNS, TORCH_FLOAT_COLUMNS
from proftab.torch.text_table import render_table

if TYPE_CHECKING:
    from proftab.trace import Trace

__all__ = ["KEY_AVERAGES_COLUMNS", "key_averages", "key_averages_frame", "render_table", "table", "torch_version"]


#: the first torch whose `key_averages()` leaves `python_function` rows out by default
_NO_PYTHON_ROWS_SINCE = (2, 14)


def _version(text: str) -> tuple[int, int]:
    try:
        major, minor = text.split("+")[0].split(".")[:2]
        return int(major), int(minor)
    except ValueError:
        msg = f"torch={text!r} is not a torch version; pass one like '2.13' or '2.14.1'"
        raise UsageError(msg) from None


@register_trace_method("torch_version")
def torch_version(trace: Trace) -> str | None:
    """The torch release line that wrote the trace, where a field reveals it, else None.

    torch >= 2.14 writes a `CallFrom` argument on every `python_function` event; a trace with
    Python frames and no `CallFrom` comes from torch <= 2.13. Returns ``"2.14"`` (2.14 or
    later), ``"2.13"`` (2.13 or earlier) or ``None`` when no field tells: the trace has no
    Python frames, and then torch 2.13's and 2.14's `key_averages()` agree on it.
    """
    events = trace.collect("events", ["cat", "args"]).filter(pl.col("cat") == kinds.PYTHON_FRAME)
    if events.is_empty():
        return None
    return "2.14" if bool(events["args"].str.contains('"CallFrom"', literal=True).any()) else "2.13"


def _python_function_rows(trace: Trace, torch: str | None) -> bool:
    """Whether torch `torch` (the writer's version when None) lists `python_function` rows."""
    version = torch if torch is not None else torch_version(trace)
    return version is None or _version(version) < _NO_PYTHON_ROWS_SINCE


def _rows(trace: Trace, group_by_input_shape: bool, group_by_stack_n: int, group_by_overload_name: bool, *,
          include_python_functions: bool, top_level_only: bool, by_step: bool, with_flops: bool | None,
          torch: str | None, torch_floats: bool) -> pl.DataFrame:
    flops = bool(trace.meta.get("with_flops")) if with_flops is None else with_flops
    python_rows = _python_function_rows(trace, torch)
    default = not (group_by_input_shape or group_by_stack_n or group_by_overload_name or top_level_only
                   or by_step or with_flops is not None or torch is not None) and include_python_functions
    if default and schema.STORED_KEY_AVERAGES in trace.tables:
        stored = trace.collect(schema.STORED_KEY_AVERAGES)
        floats = [c for c in stored.columns if c in TORCH_FLOAT_COLUMNS]
        if not torch_floats:
            return stored.drop(floats)
        if len(floats) == len(TORCH_FLOAT_COLUMNS):
            return stored
    cats = trace.categories
    device_self = trace.device.self_time() if kinds.has_device_rows(cats) else None
    columns = list(dict.fromkeys([*NESTED_COLUMNS, *(FLOPS_COLUMNS if flops else ())]))
    return key_averages_frame(
        trace.collect("nested", columns), trace.collect("instants"), device_self=device_self,
        device_type=kinds.device_type(cats),
        group_by_input_shape=group_by_input_shape, group_by_stack_n=group_by_stack_n,
        group_by_overload_name=group_by_overload_name, include_python_functions=include_python_functions,
        top_level_only=top_level_only, by_step=by_step, with_flops=flops, python_function_rows=python_rows,
        torch_floats=torch_floats,
    )


@register_trace_method("key_averages")
def key_averages(trace: Trace, group_by_input_shape: bool = False, group_by_stack_n: int = 0,
                 group_by_overload_name: bool = False, *, include_python_functions: bool = True,
                 top_level_only: bool = False, by_step: bool = False,
                 with_flops: bool | None = None, torch: str | None = None,
                 torch_floats: bool = False, compiled: bool = False) -> pl.DataFrame:
    """torch's `key_averages()` as a DataFrame, never with negative self time.

    See `proftab.torch.aggregate.key_averages` for the columns and rules. `flops` is torch's
    estimate (`proftab.torch.flops`) when the profile says `with_flops` (or `with_flops=True`),
    else 0, as in torch. `torch` picks a torch release's semantics (``"2.13"``, ``"2.14"``):
    torch >= 2.14 leaves the `python_function` rows out (their time stays out of their parents'
    self time too); by default the writer's version (`Trace.torch_version`), and 2.13's rows
    where no field reveals it (the two agree then). `group_by_stack_n` follows torch on
    `verbose=True` traces (`Call stack`); without it proftab groups by the enclosing Python
    frames, where torch has no stacks and does not group (docs/nesting.md). `torch_floats`
    adds torch's own float µs sums (`_torch_self_cpu_us`, `_torch_cpu_total_us`), from which
    `render_table` prints torch's text byte for byte, rounding ties included. A scanned
    dataset's stored copy is used for the default options (it is only kept when it was written
    by this very code). `compiled=True`: torch.compile's generated kernels counted as the ops
    they fuse (`proftab.compiled.key_averages`, docs/compiled.md), so `pt.diff` compares an
    eager and a compiled run op by op.
    """
    if compiled:
        from proftab.compiled import key_averages as compiled_rows

        ns = trace.compiled
        rows = key_averages(trace, group_by_input_shape, group_by_stack_n, group_by_overload_name,
                            include_python_functions=include_python_functions, top_level_only=top_level_only,
                            by_step=by_step, with_flops=with_flops, torch=torch)
        out: pl.DataFrame = compiled_rows(rows, ns.events(), ns.provenance, ns.extern_kernels())
        return out
    return _rows(trace, group_by_input_shape, group_by_stack_n, group_by_overload_name,
                 include_python_functions=include_python_functions, top_level_only=top_level_only,
                 by_step=by_step, with_flops=with_flops, torch=torch, torch_floats=torch_floats)


@register_trace_method("table")
def table(trace: Trace, sort_by: str | None = "self_cpu_time_total", row_limit: int = 100,
          max_name_column_width: int | None = 55, header: str | None = None,
          top_level_events_only: bool = False, time_unit: str | None = None, *,
          group_by_input_shape: bool = False, group_by_stack_n: int = 0,
          max_src_column_width: int = 75, max_shapes_column_width: int = 80, distinct_names: bool = False,
          torch: str | None = None) -> str:
    """torch's `key_averages().table()` text for this trace, same layout byte for byte.

    The times are torch's own floats (`key_averages(..., torch_floats=True)`), so cells on a
    rounding tie print as torch's do. `torch` as in `Trace.key_averages`. `distinct_names=True`
    keeps rows whose names torch's cut prints alike apart (see `render_table`).
    """
    rows = _rows(trace, group_by_input_shape, group_by_stack_n, False, include_python_functions=True,
                 top_level_only=False, by_step=False, with_flops=None, torch=torch, torch_floats=True)
    return render_table(
        rows, sort_by=sort_by, row_limit=row_limit, max_name_column_width=max_name_column_width,
        max_src_column_width=max_src_column_width, max_shapes_column_width=max_shapes_column_width,
        header=header, top_level_events_only=top_level_events_only, time_unit=time_unit,
        use_device=kinds.use_device(trace.categories), profile_memory=bool(trace.meta.get("profile_memory")),
        with_flops=bool(trace.meta.get("with_flops")), distinct_names=distinct_names,
    )
