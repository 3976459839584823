"""The columns of torch's `key_averages()` table, declared once with their roles.

One row per key: what each column is (its role in the grouping), its dtype, its unit, torch's
name for it (a `FunctionEventAvg` attribute, which is also torch's `sort_by` key) and its header
in torch's text table. Every reader of a key_averages frame takes its columns from here: the
aggregation (`proftab.torch.aggregate`), torch's text table (`proftab.torch.text_table`),
`proftab summary`, the merge of per-rank tables (`proftab.ranks.merge`), `pt.diff`, the compiled
view's rows without events, and (through the code it covers) the fingerprint under which a
dataset stores its key_averages. Polars-free: dtypes are named, as Polars spells them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["BY_NAME", "COLUMNS", "KEY_AVERAGES_COLUMNS", "STEP", "SUMMED_COLUMNS", "TORCH_FLOAT_COLUMNS",
           "KeyAveragesColumn", "Role", "names", "time_columns", "torch_header", "torch_share_header"]

#: What a column holds for a key (a group of events):
#:
#: - ``key``: part of the grouping key (one row per distinct value);
#: - ``flag``: a property of the group's first event, the same for every rank (ranks' merge keys on it too);
#: - ``count``: the number of events in the group;
#: - ``sum``: summed over the group's events (adds up across ranks too);
#: - ``min`` / ``max``: the shortest / longest event duration;
#: - ``quantile``: a percentile of the event durations (``quantile``; does not merge across ranks);
#: - ``mean``: the ``of`` column divided by the count;
#: - ``share``: the sum of the ``of`` columns over the total of the host rows' ``of`` (``over="host"``)
#:   or over the profile's wall time (``over="wall"``, which does not merge across ranks).
Role = Literal["key", "flag", "count", "sum", "min", "max", "quantile", "mean", "share"]


@dataclass(frozen=True)
class KeyAveragesColumn:
    """One column of a key_averages frame.

    Attributes
    ----------
    name
        The column's name.
    dtype
        Its Polars dtype, by name (``"Int64"``, ``"List(String)"``...).
    role
        What it holds for a key (`Role`).
    unit
        ``"ns"`` (int64 nanoseconds; Float64 for averages), ``"bytes"``, ``"flops"``,
        ``"share"`` (a fraction, 1 = 100 %) or None.
    side
        ``"cpu"`` or ``"device"`` for the time and memory measures, else None.
    scope
        ``"self"`` (the event's own part) or ``"total"`` (with what it encloses) for the
        time and memory sums, else None.
    torch_attr
        torch's `FunctionEventAvg` attribute (numeric ones are torch's ``sort_by`` keys), None
        where torch has none.
    header
        Its header in torch's text table (``{dev}``: the device, ``CUDA``, ``XPU``...), None
        where torch prints no such column.
    share_header
        The header of torch's percentage column of it (``Self CPU %``), if torch prints one.
    of
        ``mean``: the summed column averaged; ``share``: the summed columns in the numerator.
    over
        ``share``: the denominator, ``"host"`` or ``"wall"``.
    quantile
        ``quantile``: the quantile (0.5 for the median).
    """

    name: str
    dtype: str
    role: Role
    unit: str | None = None
    side: Literal["cpu", "device"] | None = None
    scope: Literal["self", "total"] | None = None
    torch_attr: str | None = None
    header: str | None = None
    share_header: str | None = None
    of: tuple[str, ...] = ()
    over: Literal["host", "wall"] | None = None
    quantile: float | None = None


def _sum(name: str, unit: str, side: Literal["cpu", "device"], scope: Literal["self", "total"], torch_attr: str,
         header: str, share_header: str | None = None) -> KeyAveragesColumn:
    return KeyAveragesColumn(name, "Int64", "sum", unit, side, scope, torch_attr, header, share_header)


#: the key_averages columns, in the order of the frame
COLUMNS: tuple[KeyAveragesColumn, ...] = (
    KeyAveragesColumn("name", "String", "key", torch_attr="key", header="Name"),
    KeyAveragesColumn("device_type", "String", "key", torch_attr="device_type"),
    KeyAveragesColumn("is_user_annotation", "Boolean", "key", torch_attr="is_user_annotation"),
    KeyAveragesColumn("overload_name", "String", "key", torch_attr="overload_name", header="Overload Name"),
    KeyAveragesColumn("input_shapes", "String", "key", torch_attr="input_shapes", header="Input Shapes"),
    KeyAveragesColumn("stack", "List(String)", "key", torch_attr="stack", header="Source Location"),
    KeyAveragesColumn("calls", "Int64", "count", torch_attr="count", header="# of Calls"),
    _sum("self_cpu_ns", "ns", "cpu", "self", "self_cpu_time_total", "Self CPU", "Self CPU %"),
    _sum("cpu_total_ns", "ns", "cpu", "total", "cpu_time_total", "CPU total", "CPU total %"),
    KeyAveragesColumn("cpu_avg_ns", "Float64", "mean", "ns", "cpu", torch_attr="cpu_time", header="CPU time avg",
                      of=("cpu_total_ns",)),
    _sum("self_device_ns", "ns", "device", "self", "self_device_time_total", "Self {dev}", "Self {dev} %"),
    _sum("device_total_ns", "ns", "device", "total", "device_time_total", "{dev} total"),
    KeyAveragesColumn("device_avg_ns", "Float64", "mean", "ns", "device", torch_attr="device_time",
                      header="{dev} time avg", of=("device_total_ns",)),
    _sum("cpu_mem_bytes", "bytes", "cpu", "total", "cpu_memory_usage", "CPU Mem"),
    _sum("self_cpu_mem_bytes", "bytes", "cpu", "self", "self_cpu_memory_usage", "Self CPU Mem"),
    _sum("device_mem_bytes", "bytes", "device", "total", "device_memory_usage", "{dev} Mem"),
    _sum("self_device_mem_bytes", "bytes", "device", "self", "self_device_memory_usage", "Self {dev} Mem"),
    KeyAveragesColumn("flops", "Int64", "sum", "flops", torch_attr="flops", header="Total {prefix}FLOPs"),
    KeyAveragesColumn("is_async", "Boolean", "flag", torch_attr="is_async"),
    KeyAveragesColumn("top_level", "Boolean", "flag"),
    KeyAveragesColumn("min_ns", "Int64", "min", "ns"),
    KeyAveragesColumn("max_ns", "Int64", "max", "ns"),
    KeyAveragesColumn("p50_ns", "Int64", "quantile", "ns", quantile=0.5),
    KeyAveragesColumn("p95_ns", "Int64", "quantile", "ns", quantile=0.95),
    KeyAveragesColumn("self_cpu_share", "Float64", "share", "share", of=("self_cpu_ns",), over="host"),
    KeyAveragesColumn("wall_share", "Float64", "share", "share", of=("self_cpu_ns", "self_device_ns"), over="wall"),
)

#: the column `key_averages(by_step=True)` puts first: the `ProfilerStep#N` number (null outside any step)
STEP = KeyAveragesColumn("step", "Int64", "key")

#: the columns `key_averages(..., torch_floats=True)` puts last: torch's own float µs sums of
#: `self_cpu_ns` and `cpu_total_ns`, from which torch's text table is printed byte for byte
TORCH_FLOAT_COLUMNS = ("_torch_self_cpu_us", "_torch_cpu_total_us")

#: each column by name
BY_NAME: dict[str, KeyAveragesColumn] = {c.name: c for c in COLUMNS}


def names(*roles: Role) -> tuple[str, ...]:
    """The names of the columns with one of `roles` (all columns when none), in the frame's order."""
    return tuple(c.name for c in COLUMNS if not roles or c.role in roles)


#: the column names, in the frame's order
KEY_AVERAGES_COLUMNS: list[str] = list(names())

#: the columns summed per key (times, memory, FLOPs), in the frame's order
SUMMED_COLUMNS: tuple[str, ...] = names("sum")


def time_columns(side: Literal["cpu", "device"]) -> tuple[str, str]:
    """The (self, total) time columns of `side` (``("self_cpu_ns", "cpu_total_ns")`` for the CPU)."""
    found = {c.scope: c.name for c in COLUMNS if c.role == "sum" and c.unit == "ns" and c.side == side}
    return found["self"], found["total"]


def torch_header(name: str, dev: str, *, flops_prefix: str = "") -> str:
    """torch's text-table header of column `name` for the device `dev` (``CUDA``...), with the
    SI prefix of the FLOPs' unit (``Total GFLOPs``); the name itself for a column torch does not print."""
    return (BY_NAME[name].header or name).format(dev=dev, prefix=flops_prefix)


def torch_share_header(name: str, dev: str) -> str:
    """torch's header of the percentage column of `name` (``Self CPU %``); the name and ``%``
    for a column torch prints no percentage of."""
    header = BY_NAME[name].share_header
    return header.format(dev=dev) if header is not None else f"{name} %"
