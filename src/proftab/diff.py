"""Compare two traces op by op: `pt.diff(a, b)`.

Rows are `key_averages()` rows matched on (`name`, `device_type`, `is_user_annotation`,
and `input_shapes` with `group_by_input_shape`). For host rows `self` / `total` are the
CPU times (`self_cpu_ns`, `cpu_total_ns`); for device rows the device times
(`self_device_ns`, `device_total_ns`). Either side can be a Trace, a key_averages frame
(e.g. read back from Parquet/CSV written by `proftab summary`) or anything `pt.load`
accepts, so traces of different ranks, GPUs and file formats compare alike.

`pt.diff(a, b, stats=True)` instead compares the runs step by step with a statistical test per
key (`proftab.diff_stats`, docs/diff.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, TypeAlias

import polars as pl

from proftab.exceptions import UsageError
from proftab.steps import DEFAULT_WARMUP_STEPS, step_windows
from proftab.torch.columns import names, time_columns

if TYPE_CHECKING:
    import os
    from collections.abc import Mapping, Sequence

    from proftab.trace import Trace

__all__ = ["DIFF_COLUMNS", "diff", "is_module_table", "module_rows"]

DIFF_COLUMNS = ["name", "device_type", "is_user_annotation", "status", "calls_a", "calls_b", "calls_delta",
                "self_ns_a", "self_ns_b", "self_delta_ns", "self_rel", "total_ns_a", "total_ns_b",
                "total_delta_ns", "total_rel"]

#: the key_averages columns `diff` reads (`proftab.torch.columns`): calls, host self / total, device self / total
_CALLS = names("count")[0]
_HOST_SELF, _HOST_TOTAL = time_columns("cpu")
_DEVICE_SELF, _DEVICE_TOTAL = time_columns("device")
#: what a key_averages frame needs here (device times default to 0)
_REQUIRED = {"name", "device_type", _CALLS, _HOST_SELF, _HOST_TOTAL}

Source: TypeAlias = "Trace | pl.DataFrame | str | os.PathLike[str] | Sequence[str | os.PathLike[str]]"


def is_module_table(frame: pl.DataFrame) -> bool:
    """`frame` is a module table (`tr.modules.modules()`, `compiled=True` too), not key_averages rows."""
    return {"path", "host_self_ns", "host_total_ns"} <= set(frame.columns)


def module_rows(table: pl.DataFrame) -> pl.DataFrame:
    """A module table as key_averages-shaped rows: one per module (`name`, else `path`) and side.

    The host row (`device_type` ``"CPU"``) has `host_self_ns` / `host_total_ns`; modules with
    device time also get a row with `device_type` ``"device"`` and `device_self_ns` /
    `device_total_ns`. `calls` are the module's calls (`n_calls`; `calls` in a table with the old names).
    """
    key = pl.coalesce("name", "path") if "name" in table.columns else pl.col("path")
    t = table.with_columns(_key=key)
    if "n_calls" in t.columns:
        t = t.drop("calls", strict=False).rename({"n_calls": "calls"})
    zero = pl.lit(0, pl.Int64)
    host_cols: dict[str, pl.Expr | str] = {_CALLS: "calls", _HOST_SELF: "host_self_ns", _HOST_TOTAL: "host_total_ns",
                                           _DEVICE_SELF: zero, _DEVICE_TOTAL: zero}
    dev_cols: dict[str, pl.Expr | str] = {_CALLS: "calls", _HOST_SELF: zero, _HOST_TOTAL: zero,
                                          _DEVICE_SELF: "device_self_ns", _DEVICE_TOTAL: "device_total_ns"}
    host = t.select(pl.col("_key").alias("name"), device_type=pl.lit("CPU"), **host_cols)
    dev = t.filter(pl.col("device_total_ns") != 0).select(pl.col("_key").alias("name"), device_type=pl.lit("device"),
                                                          **dev_cols)
    return pl.concat([host, dev]).with_columns(is_user_annotation=pl.lit(False))


def _rows(x: object, group_by_input_shape: bool) -> tuple[pl.DataFrame, int, int]:
    """key_averages rows of `x`, with its rank count and step count (0 when unknown)."""
    from proftab.trace import Trace

    if isinstance(x, pl.DataFrame):
        return (module_rows(x) if is_module_table(x) else x), 1, 0
    if not isinstance(x, Trace):
        from proftab.io.readers import open_trace

        x = open_trace(x)
    windows = step_windows(x.collect("events", ["rank", "cat", "name", "start_ns", "end_ns", "dur_ns", "event_id"]))
    steps = windows.select("rank", "step").unique().height
    return x.key_averages(group_by_input_shape=group_by_input_shape), x.files.height, steps


def _side(rows: pl.DataFrame, keys: list[str], scale: float) -> pl.DataFrame:
    missing = _REQUIRED - set(rows.columns)
    if missing:
        msg = f"not a key_averages frame: missing columns {sorted(missing)}"
        raise UsageError(msg)
    dev = pl.col("device_type") != "CPU"
    cols = rows.columns
    self_dev = pl.col(_DEVICE_SELF) if _DEVICE_SELF in cols else pl.lit(0)
    total_dev = pl.col(_DEVICE_TOTAL) if _DEVICE_TOTAL in cols else pl.lit(0)
    rows = rows.with_columns(
        pl.col("is_user_annotation").fill_null(False) if "is_user_annotation" in cols
        else pl.lit(False).alias("is_user_annotation"),
        *([] if "input_shapes" in cols else [pl.lit("").alias("input_shapes")]),
    )
    out = rows.group_by(keys, maintain_order=True).agg(
        pl.col(_CALLS).sum().alias("calls"),
        pl.when(dev).then(self_dev).otherwise(pl.col(_HOST_SELF)).sum().alias("self_ns"),
        pl.when(dev).then(total_dev).otherwise(pl.col(_HOST_TOTAL)).sum().alias("total_ns"),
    )
    if scale != 1:
        out = out.with_columns(pl.col("calls") / scale,
                               (pl.col("self_ns", "total_ns") / scale).round().cast(pl.Int64))
    return out


def diff(a: object, b: object, *, group_by_input_shape: bool = False,
         normalize: Literal["rank", "step"] | None = None,
         sort: Literal["self", "total", "calls"] = "self", stats: bool = False, warmup: int = DEFAULT_WARMUP_STEPS,
         window: str | None = None, alpha: float = 0.01, names: Mapping[str, str] | None = None) -> pl.DataFrame:
    """Per key_averages row: calls, self and total in `a` and `b`, with absolute and relative change.

    Parameters
    ----------
    a, b
        The baseline and the new run: `Trace`, key_averages `DataFrame`, or a path, glob,
        directory or list for `pt.load`. Two module tables (`tr.modules.modules()`, e.g. an
        eager run's with `names=` and a compiled run's with `compiled=True`) compare module
        by module instead: `name` is the module's `name` (else `path`), `device_type` is
        ``"CPU"`` for host time and ``"device"`` for device time (`module_rows`).
    group_by_input_shape
        Match rows on input shapes too (Traces and paths only).
    normalize
        ``"rank"``: divide each side by its number of ranks; ``"step"``: by its number of
        ProfilerSteps (per rank), so runs with different rank or step counts compare.
        `calls` become Float64 then; times stay Int64 ns (rounded).
    sort
        Order by the absolute change of ``self`` (default), ``total`` or ``calls``, largest first.
    stats
        Compare per-step samples with a test per key instead (`proftab.diff_stats.stats_diff`:
        steps, module paths, ops by module + name + shapes, kernels); `a` and `b` must be
        traces or paths then, and `group_by_input_shape`, `normalize`, `sort` do not apply.
    warmup
        With `stats`: the first steps of each rank left out (default 2).
    window
        With `stats`: a host annotation name whose ranges are the steps instead of `ProfilerStep#N`.
    alpha
        With `stats`: family-wise error rate (Holm) and 1 - the confidence level of the CIs.
    names
        With `stats`: instance name -> the model's name (`proftab.modules.instance_names`),
        so modules read ``model.layers.2`` instead of ``Net_0.Block_2``.

    Returns
    -------
    polars.DataFrame
        With `stats`: `proftab.diff_stats.STATS_COLUMNS` plus `unit` (largest regression
        first). Otherwise `DIFF_COLUMNS`: `status` is ``added`` (absent from `a`), ``removed`` (absent from
        `b`), ``changed`` or ``same``; `*_delta*` = b - a; `*_rel` = delta / a (null when a is 0).

    Examples
    --------
    >>> d = pt.diff("before.json.gz", "after.json.gz", normalize="step")  # doctest: +SKIP
    >>> d.head(10)                                                         # doctest: +SKIP
    """
    if stats:
        return _stats(a, b, warmup=warmup, window=window, alpha=alpha, names=names)
    if normalize not in (None, "rank", "step"):  # checked before loading anything
        msg = f"unknown normalize {normalize!r}; valid: 'rank', 'step' or None"
        raise UsageError(msg)
    by = {"self": "self_delta_ns", "total": "total_delta_ns", "calls": "calls_delta"}.get(sort)
    if by is None:
        msg = f"unknown sort {sort!r}; valid: 'self', 'total', 'calls'"
        raise UsageError(msg)
    tables = [isinstance(x, pl.DataFrame) and is_module_table(x) for x in (a, b)]
    if tables[0] != tables[1]:
        msg = "pt.diff compares two module tables or two key_averages sources, not one of each"
        raise UsageError(msg)
    ra, ranks_a, steps_a = _rows(a, group_by_input_shape)
    rb, ranks_b, steps_b = _rows(b, group_by_input_shape)
    keys = ["name", "device_type", "is_user_annotation", "input_shapes"]

    def scale(ranks: int, steps: int, label: str) -> float:
        if normalize == "rank":
            return float(ranks)
        if normalize == "step":
            if steps == 0:
                msg = f"normalize='step': trace {label} has no ProfilerStep#N events"
                raise UsageError(msg)
            return float(steps)
        return 1.0

    sa = _side(ra, keys, scale(ranks_a, steps_a, "a"))
    sb = _side(rb, keys, scale(ranks_b, steps_b, "b"))
    j = sa.join(sb, on=keys, how="full", coalesce=True, suffix="_b", nulls_equal=True).rename(
        {"calls": "calls_a", "self_ns": "self_ns_a", "total_ns": "total_ns_a"})
    j = j.with_columns(pl.col("calls_a").is_not_null().alias("_in_a"), pl.col("calls_b").is_not_null().alias("_in_b"))
    in_a, in_b = pl.col("_in_a"), pl.col("_in_b")
    j = j.with_columns(pl.col("calls_a", "calls_b", "self_ns_a", "self_ns_b", "total_ns_a", "total_ns_b").fill_null(0))
    def rel(c: str) -> pl.Expr:
        return pl.when(pl.col(f"{c}_a") != 0).then((pl.col(f"{c}_b") - pl.col(f"{c}_a")) / pl.col(f"{c}_a"))
    j = j.with_columns(
        status=pl.when(~in_a).then(pl.lit("added")).when(~in_b).then(pl.lit("removed"))
        .when((pl.col("calls_a") == pl.col("calls_b")) & (pl.col("self_ns_a") == pl.col("self_ns_b"))
              & (pl.col("total_ns_a") == pl.col("total_ns_b"))).then(pl.lit("same"))
        .otherwise(pl.lit("changed")),
        calls_delta=pl.col("calls_b") - pl.col("calls_a"),
        self_delta_ns=pl.col("self_ns_b") - pl.col("self_ns_a"),
        total_delta_ns=pl.col("total_ns_b") - pl.col("total_ns_a"),
        self_rel=rel("self_ns"), total_rel=rel("total_ns"),
    )
    j = j.sort([pl.col(by).abs(), "name"], descending=[True, False])
    front = ["input_shapes"] if group_by_input_shape else []
    return j.select(*DIFF_COLUMNS[:3], *front, *DIFF_COLUMNS[3:])


def _stats(a: object, b: object, *, warmup: int, window: str | None, alpha: float,
           names: Mapping[str, str] | None) -> pl.DataFrame:
    from proftab.diff_stats import stats_diff
    from proftab.trace import Trace

    def trace(x: object, label: str) -> Trace:
        if isinstance(x, Trace):
            return x
        if isinstance(x, pl.DataFrame):
            msg = f"stats=True needs the events of each step: {label} is a DataFrame, give a Trace or a path"
            raise UsageError(msg)
        from proftab.io.readers import open_trace

        return open_trace(x)
    return stats_diff(trace(a, "a"), trace(b, "b"), warmup=warmup, window=window, alpha=alpha, names=names)
