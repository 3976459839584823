"""torch's own rules, together: `key_averages()`, its text `table()`, and their column facts.

`Trace.key_averages()` and `Trace.table()` are registered here (torch's API names on the
Trace); the free functions are `proftab.torch.aggregate.key_averages` (over frames) and
`proftab.torch.text_table.render_table`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from proftab import kinds, schema
from proftab.api import register_trace_method
from proftab.torch.aggregate import FLOPS_COLUMNS, KEY_AVERAGES_COLUMNS, NESTED_COLUMNS
from proftab.torch.aggregate import key_averages as key_averages_frame
from proftab.torch.text_table import render_table

if TYPE_CHECKING:
    import polars as pl

    from proftab.trace import Trace

__all__ = ["KEY_AVERAGES_COLUMNS", "key_averages", "key_averages_frame", "render_table", "table"]


@register_trace_method("key_averages")
def key_averages(trace: Trace, group_by_input_shape: bool = False, group_by_stack_n: int = 0,
                 group_by_overload_name: bool = False, *, include_python_functions: bool = True,
                 top_level_only: bool = False, by_step: bool = False,
                 with_flops: bool | None = None, compiled: bool = False) -> pl.DataFrame:
    """torch's `key_averages()` as a DataFrame, never with negative self time.

    See `proftab.torch.aggregate.key_averages` for the columns and rules. `flops` is torch's
    estimate (`proftab.torch.flops`) when the profile says `with_flops` (or `with_flops=True`),
    else 0, as in torch. A scanned dataset's stored copy is used for the default options (it
    is only kept when it was written by this very code). `compiled=True`: torch.compile's
    generated kernels counted as the ops they fuse (`proftab.compiled.key_averages`,
    docs/compiled.md), so `pt.diff` compares an eager and a compiled run op by op.
    """
    if compiled:
        from proftab.compiled import key_averages as compiled_rows

        ns = trace.compiled
        rows = key_averages(trace, group_by_input_shape, group_by_stack_n, group_by_overload_name,
                            include_python_functions=include_python_functions, top_level_only=top_level_only,
                            by_step=by_step, with_flops=with_flops)
        out: pl.DataFrame = compiled_rows(rows, ns.events(), ns.provenance, ns.extern_kernels())
        return out
    flops = bool(trace.meta.get("with_flops")) if with_flops is None else with_flops
    default = not (group_by_input_shape or group_by_stack_n or group_by_overload_name or top_level_only
                   or by_step or with_flops is not None) and include_python_functions
    if default and schema.STORED_KEY_AVERAGES in trace.tables:
        return trace.collect(schema.STORED_KEY_AVERAGES)
    cats = trace.categories
    device_self = trace.device.self_time() if kinds.has_device_rows(cats) else None
    columns = list(dict.fromkeys([*NESTED_COLUMNS, *(FLOPS_COLUMNS if flops else ())]))
    return key_averages_frame(
        trace.collect("nested", columns), trace.collect("instants"), device_self=device_self,
        device_type=kinds.device_type(cats),
        group_by_input_shape=group_by_input_shape, group_by_stack_n=group_by_stack_n,
        group_by_overload_name=group_by_overload_name, include_python_functions=include_python_functions,
        top_level_only=top_level_only, by_step=by_step, with_flops=flops,
    )


@register_trace_method("table")
def table(trace: Trace, sort_by: str | None = "self_cpu_time_total", row_limit: int = 100,
          max_name_column_width: int | None = 55, header: str | None = None,
          top_level_events_only: bool = False, time_unit: str | None = None, *,
          group_by_input_shape: bool = False, group_by_stack_n: int = 0,
          max_src_column_width: int = 75, max_shapes_column_width: int = 80, distinct_names: bool = False) -> str:
    """torch's `key_averages().table()` text for this trace, same layout byte for byte.

    `distinct_names=True` keeps rows whose names torch's cut prints alike apart (see `render_table`).
    """
    rows = trace.key_averages(group_by_input_shape, group_by_stack_n)
    return render_table(
        rows, sort_by=sort_by, row_limit=row_limit, max_name_column_width=max_name_column_width,
        max_src_column_width=max_src_column_width, max_shapes_column_width=max_shapes_column_width,
        header=header, top_level_events_only=top_level_events_only, time_unit=time_unit,
        use_device=kinds.use_device(trace.categories), profile_memory=bool(trace.meta.get("profile_memory")),
        with_flops=bool(trace.meta.get("with_flops")), distinct_names=distinct_names,
    )
