"""`Trace`: the loaded tables of one or more trace files, plus derived tables.

Loaded tables are plain `polars.DataFrame`s (see docs/schema.md). Derived tables (nesting,
anomalies, key_averages) are computed on first use and cached; a Trace is never mutated
after construction.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

import polars as pl

from proftab import aggregate, schema
from proftab.intervals import nest

if TYPE_CHECKING:
    from proftab.device import DeviceNamespace
    from proftab.io.kineto import FileTables

__all__ = ["Trace"]

_TABLES = ("events", "instants", "flows", "counters", "threads", "rejected", "accounting")


class Trace:
    """Tables of a profiler trace (one file or several rank files).

    Attributes
    ----------
    events, instants, flows, counters, threads, rejected, accounting : polars.DataFrame
        The loaded tables (docs/schema.md).
    metas : dict[int, dict]
        Top-level keys and derived facts of each file, by rank.
    """

    def __init__(self, *, events: pl.DataFrame, instants: pl.DataFrame, flows: pl.DataFrame,
                 counters: pl.DataFrame, threads: pl.DataFrame, rejected: pl.DataFrame,
                 accounting: pl.DataFrame, metas: dict[int, dict[str, Any]]) -> None:
        self.events = events
        self.instants = instants
        self.flows = flows
        self.counters = counters
        self.threads = threads
        self.rejected = rejected
        self.accounting = accounting
        self.metas = dict(sorted(metas.items()))

    @classmethod
    def from_files(cls, files: list[FileTables]) -> Trace:
        """Combine per-file tables (ranks already assigned)."""
        def cat(name: str) -> pl.DataFrame:
            frames = [getattr(f, name) for f in files]
            return frames[0] if len(frames) == 1 else pl.concat(frames, how="vertical")
        return cls(**{name: cat(name) for name in _TABLES}, metas={f.rank: f.meta for f in files})

    # ------------------------------------------------------------------ metadata

    @property
    def meta(self) -> dict[str, Any]:
        """Top-level keys and derived facts of the (lowest-rank) file; see `metas` for all."""
        return next(iter(self.metas.values()))

    @property
    def ranks(self) -> list[int]:
        """Ranks present, ascending."""
        return list(self.metas)

    def resolution_ns(self, rank: int | None = None) -> int:
        """Time resolution of the file of `rank` (1 for ns traces, 1000 for integer-µs)."""
        meta = self.meta if rank is None else self.metas[rank]
        return int(meta["time_resolution_ns"])

    @functools.cached_property
    def categories(self) -> frozenset[str]:
        """The event categories present in this trace."""
        return frozenset(self.events["cat"].unique().drop_nulls().cast(pl.String).to_list())

    @property
    def device_type(self) -> str:
        """torch's device name for this trace's device rows (`CUDA`, `XPU`, `MTIA`)."""
        cats = self.categories
        if any(c.startswith("xpu") for c in cats):
            return "XPU"
        if any(c.startswith("mtia") for c in cats):
            return "MTIA"
        return "CUDA"

    @property
    def use_device(self) -> str | None:
        """torch's `use_device` (`"cuda"`...) when the trace has device activity, else None."""
        cats = self.categories
        if cats & schema.DEVICE_CATEGORIES or any(c.endswith(("_runtime", "_driver")) for c in cats):
            return self.device_type.lower()
        return None

    def with_utc(self, events: pl.DataFrame | None = None, *, offsets_ns: dict[int, int] | None = None
                 ) -> pl.DataFrame:
        """`events` (default: all) with `start_utc` / `end_utc` as `Datetime("ns", "UTC")`.

        The absolute time is `base_time_ns + start_ns` of the event's rank, plus an optional
        per-rank clock offset (`offsets_ns={rank: ns}`).
        """
        df = self.events if events is None else events
        base = pl.DataFrame({
            "rank": list(self.metas),
            "_base": [m["base_time_ns"] + (offsets_ns or {}).get(r, 0) for r, m in self.metas.items()],
        }, schema={"rank": pl.Int32, "_base": pl.Int64})
        df = df.join(base, on="rank", how="left", maintain_order="left")
        return df.with_columns(
            start_utc=(pl.col("_base") + pl.col("start_ns")).cast(pl.Datetime("ns", "UTC")),
            end_utc=(pl.col("_base") + pl.col("end_ns")).cast(pl.Datetime("ns", "UTC")),
        ).drop("_base")

    # ------------------------------------------------------------------ derived

    @functools.cached_property
    def nested(self) -> pl.DataFrame:
        """`events` plus `parent_id`, `depth`, `self_ns`, `overrun_ns` (docs/nesting.md).

        Events nest per track `schema.TRACK_KEYS` = `(rank, pid, pid_text, tid, tid_text)`: a
        host thread for host events, a device stream for device events (pid = device, tid = stream).
        An event with a negative duration is nested as zero-length.
        """
        ev = self.events.with_columns(_end=pl.col("end_ns"))
        ev = ev.with_columns(end_ns=pl.max_horizontal("start_ns", "end_ns"))
        out = nest(ev, by=schema.TRACK_KEYS)
        return out.with_columns(end_ns=pl.col("_end")).drop("_end")

    @functools.cached_property
    def anomalies(self) -> pl.DataFrame:
        """Events that break nesting or carry damage, one row per finding.

        `kind`: `overrun` (ends after its parent, beyond the time resolution),
        `negative_dur`, `unmatched_begin`, `unfinished` (`"finished": false`),
        `name_repaired`.
        """
        nested = self.nested
        res = pl.DataFrame({"rank": list(self.metas),
                            "_res": [int(m["time_resolution_ns"]) for m in self.metas.values()]},
                           schema={"rank": pl.Int32, "_res": pl.Int64})
        parents = nested.select("rank", pl.col("event_id").alias("parent_id"),
                                pl.col("name").alias("parent_name"), pl.col("cat").alias("parent_cat"))
        over = (
            nested.filter(pl.col("overrun_ns") > 0)
            .join(res, on="rank", how="left")
            .filter((pl.col("_res") <= 1) | (pl.col("overrun_ns") > pl.col("_res")))
            .join(parents, on=["rank", "parent_id"], how="left")
            .with_columns(kind=pl.lit("overrun"))
        )
        def flagged_with(flag: schema.Flag) -> pl.Expr:
            return (pl.col("flags") & int(flag)) != 0

        # the first finding that applies; null for a clean event
        kind = (
            pl.when(flagged_with(schema.Flag.NEGATIVE_DUR)).then(pl.lit("negative_dur"))
            .when(flagged_with(schema.Flag.UNMATCHED_BEGIN)).then(pl.lit("unmatched_begin"))
            .when(pl.col("finished") == False).then(pl.lit("unfinished"))  # noqa: E712 - polars expression
            .when(flagged_with(schema.Flag.NAME_REPAIRED)).then(pl.lit("name_repaired"))
        )
        flagged = nested.filter(kind.is_not_null()).with_columns(
            kind=kind,
            parent_name=pl.lit(None, pl.String),
            parent_cat=pl.lit(None, pl.Categorical),
        )
        cols = ["kind", "rank", "event_id", "name", "cat", "pid", "tid", "start_ns", "end_ns", "dur_ns",
                "parent_id", "parent_name", "parent_cat", "overrun_ns"]
        return pl.concat([over.select(cols), flagged.select(cols)], how="vertical_relaxed").sort(
            ["rank", "event_id"])

    def device_self(self) -> pl.DataFrame | None:
        """torch's self device time per event: host ops (launched activities) and device events (own)."""
        if not self.categories & schema.DEVICE_CATEGORIES:
            return None  # a CPU-only trace: nothing to attribute
        from proftab import device

        return device.self_device_time(self)

    @property
    def device(self) -> DeviceNamespace:
        """Device analyses as methods: `tr.device.activities()`, `.summary()`, `.busy()`... (docs/device.md)."""
        from proftab.device import DeviceNamespace

        return DeviceNamespace(self)

    def _nested_for_aggregation(self) -> pl.DataFrame:
        """The nested events `key_averages` works on (a scanned trace reads only its columns)."""
        return self.nested

    def key_averages(self, group_by_input_shape: bool = False, group_by_stack_n: int = 0,
                     group_by_overload_name: bool = False, *, include_python_functions: bool = True,
                     top_level_only: bool = False, by_step: bool = False) -> pl.DataFrame:
        """torch's `key_averages()` as a DataFrame, never with negative self time.

        See `proftab.aggregate.key_averages` for the columns and rules.
        """
        return aggregate.key_averages(
            self._nested_for_aggregation(), self.instants, device_self=self.device_self(),
            device_type=self.device_type,
            group_by_input_shape=group_by_input_shape, group_by_stack_n=group_by_stack_n,
            group_by_overload_name=group_by_overload_name, include_python_functions=include_python_functions,
            top_level_only=top_level_only, by_step=by_step,
        )

    def table(self, sort_by: str | None = "self_cpu_time_total", row_limit: int = 100,
              max_name_column_width: int | None = 55, header: str | None = None,
              top_level_events_only: bool = False, time_unit: str | None = None, *,
              group_by_input_shape: bool = False, group_by_stack_n: int = 0,
              max_src_column_width: int = 75, max_shapes_column_width: int = 80) -> str:
        """torch's `key_averages().table()` text for this trace, same layout byte for byte."""
        from proftab.render import render_table

        rows = self.key_averages(group_by_input_shape, group_by_stack_n)
        return render_table(
            rows, sort_by=sort_by, row_limit=row_limit, max_name_column_width=max_name_column_width,
            max_src_column_width=max_src_column_width, max_shapes_column_width=max_shapes_column_width,
            header=header, top_level_events_only=top_level_events_only, time_unit=time_unit,
            use_device=self.use_device, profile_memory=bool(self.meta.get("profile_memory")),
            with_flops=bool(self.meta.get("with_flops")),
        )

    # ------------------------------------------------------------------ parquet, cross-rank

    def to_parquet(self, path: str, *, force: bool = False) -> Any:
        """Write every table into a Parquet dataset directory (docs/parquet.md); `pt.scan` reads it."""
        from proftab.io.parquet import write_parquet

        return write_parquet(self, path, force=force)

    def lazy(self, table: str = "events") -> pl.LazyFrame:
        """`table` (`"events"`, `"nested"`, `"instants"`...) as a LazyFrame (a Parquet scan for `pt.scan`)."""
        return getattr(self, table).lazy()

    def step_times(self, *, offsets_ns: dict[int, int] | None = None) -> pl.DataFrame:
        """Per-rank `ProfilerStep#N` windows (`proftab.ranks.step_times`)."""
        from proftab import ranks

        return ranks.step_times(self, offsets_ns=offsets_ns)

    def slowest_ranks(self, *, offsets_ns: dict[int, int] | None = None) -> pl.DataFrame:
        """Per step: slowest/fastest rank, spread and skew (`proftab.ranks.slowest_ranks`)."""
        from proftab import ranks

        return ranks.slowest_ranks(self, offsets_ns=offsets_ns)

    def collective_times(self, *, by_step: bool = True) -> pl.DataFrame:
        """Per rank (and step) time in collective kernels, exposed and overlapped (`proftab.ranks`)."""
        from proftab import ranks

        return ranks.collective_times(self, by_step=by_step)

    def collective_skew(self, *, offsets_ns: dict[int, int] | None = None) -> pl.DataFrame:
        """Start/end skew between ranks of each collective kernel (`proftab.ranks.collective_skew`)."""
        from proftab import ranks

        return ranks.collective_skew(self, offsets_ns=offsets_ns)

    # ------------------------------------------------------------------ display

    def __repr__(self) -> str:
        """Header line and key facts (files, ranks, span, counts); computes no nesting."""
        from proftab.display import trace_repr

        return trace_repr(self)

    def _repr_html_(self) -> str:
        """Notebook card: span, events, threads, ranks, top ops (names HTML-escaped)."""
        from proftab.display import trace_repr_html

        return trace_repr_html(self)

    # ------------------------------------------------------------------ call trees, flame graphs

    def call_tree(self, *, device: bool = False, by_thread: bool = False, merge_steps: bool = True,
                  max_depth: int | None = None) -> pl.DataFrame:
        """Top-down call tree: per call path `calls`, `self_ns`, `total_ns` (`proftab.calltree`)."""
        from proftab import calltree

        return calltree.call_tree(self.nested, device=device, by_thread=by_thread, merge_steps=merge_steps,
                                  max_depth=max_depth)

    def bottom_up(self, *, device: bool = False, by_thread: bool = False, merge_steps: bool = True,
                  max_depth: int | None = None) -> pl.DataFrame:
        """Inverted call tree: self time per op, then per caller chain (`proftab.calltree`)."""
        from proftab import calltree

        return calltree.bottom_up(self.nested, device=device, by_thread=by_thread, merge_steps=merge_steps,
                                  max_depth=max_depth)

    def to_speedscope(self, path: str, *, device: bool = True, name: str | None = None) -> None:
        """Write a speedscope file: one evented profile per thread and stream (`proftab.export`)."""
        from proftab.export import write_speedscope

        write_speedscope(self, path, device=device, name=name)

    def to_folded(self, path: str | None = None, *, device: bool = False, by_thread: bool = False,
                  merge_steps: bool = True) -> str | None:
        """Folded stacks weighted by self ns for flamegraph tools; the text when `path` is None."""
        from proftab.export import write_folded

        return write_folded(self, path, device=device, by_thread=by_thread, merge_steps=merge_steps)
