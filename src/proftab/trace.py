"""`Trace`: an immutable holder of a profile's tables; analyses attach as namespaces.

A Trace holds its tables as `polars.DataFrame`s (a loaded JSON trace) or `polars.LazyFrame`s
(a scanned Parquet dataset), plus the `files` table (one row per file / rank). It knows no
analysis: `tr.device`, `tr.ranks`, `tr.key_averages()`... are registered in `proftab.api` and
resolved on first use. The one derived table it owns is `nested`, the generic nesting of
`events` per track (`proftab.nesting`, docs/nesting.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import polars as pl

from proftab import api
from proftab.exceptions import TraceError, UsageError
from proftab.meta import file_meta
from proftab.nesting import check_stored_nesting, nest_events

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

__all__ = ["Frame", "Trace"]

Frame = pl.DataFrame | pl.LazyFrame
#: the tables every Trace has (docs/schema.md)
TABLES = ("events", "instants", "flows", "counters", "threads", "rejected", "accounting")


class Trace:
    """Tables of a profiler trace (one file or several rank files).

    Parameters
    ----------
    tables
        `events`, `instants`, `flows`, `counters`, `threads`, `rejected`, `accounting` (and
        optionally a stored `nested`), each a DataFrame or a LazyFrame.
    files
        One row per file (`schema.FILES_COLUMNS`).
    source
        Where lazy tables read from (a dataset directory), named in read errors.
    guard
        Called before every read of a lazy table; raises when the source is no longer the one
        the tables were opened on (a dataset replaced by ``convert --force``).
    """

    __slots__ = ("_cache", "_files", "_guard", "_source", "_tables")

    def __init__(self, tables: Mapping[str, Frame], files: pl.DataFrame, *, source: str | None = None,
                 guard: Callable[[], None] | None = None) -> None:
        if missing := [t for t in TABLES if t not in tables]:
            msg = f"a Trace needs the tables {list(TABLES)}; missing {missing}"
            raise UsageError(msg)
        self._tables: dict[str, Frame] = dict(tables)
        self._files = files.sort("rank")
        self._cache: dict[str, Any] = {}
        self._source = source  # where lazy tables read from (a dataset directory), for errors
        self._guard = guard

    @property
    def files(self) -> pl.DataFrame:
        """One row per file / rank (`schema.FILES_COLUMNS`)."""
        return self._files

    @property
    def tables(self) -> dict[str, Frame]:
        """Every table by name (a copy of the mapping; the frames themselves are shared)."""
        return dict(self._tables)

    @property
    def is_lazy(self) -> bool:
        """Whether the tables are LazyFrames (a scanned dataset)."""
        return isinstance(self._tables["events"], pl.LazyFrame)

    events = property(lambda self: self._tables["events"], doc="One row per complete event (docs/schema.md).")
    instants = property(lambda self: self._tables["instants"], doc="Instant events ([memory], markers).")
    flows = property(lambda self: self._tables["flows"], doc="Flow events (s/t/f).")
    counters = property(lambda self: self._tables["counters"], doc="Counter samples, one per series.")
    threads = property(lambda self: self._tables["threads"], doc="Process and thread names.")
    rejected = property(lambda self: self._tables["rejected"], doc="Input events that were not loaded, why.")
    accounting = property(lambda self: self._tables["accounting"], doc="Every input event accounted for.")

    @property
    def nested(self) -> Frame:
        """`events` plus `parent_id`, `depth`, `self_ns`, `overrun_ns` (docs/nesting.md).

        Events nest per track `schema.TRACK_KEYS` = `(rank, pid, pid_text, tid, tid_text)`: a
        host thread for host events, a device stream for device events (pid = device, tid = stream).
        An event with a negative duration is nested as zero-length. A dataset's stored nesting
        is used as is.
        """
        if "nested" in self._tables:
            return self._tables["nested"]
        if "nested" not in self._cache:
            self._cache["nested"] = nest_events(self.collect("events"))
        out: pl.DataFrame = self._cache["nested"]
        return out

    def lazy(self, table: str = "events") -> pl.LazyFrame:
        """`table` as a LazyFrame (a Parquet scan for a scanned dataset)."""
        return self._frame(table).lazy()

    def collect(self, table: str = "events", columns: Sequence[str] | None = None) -> pl.DataFrame:
        """`table` as a DataFrame, reading only `columns` from a lazy source (whole tables are cached)."""
        frame = self._frame(table)
        if isinstance(frame, pl.DataFrame):
            return frame if columns is None else frame.select(columns)
        key = f"collected:{table}"
        if key in self._cache:
            df: pl.DataFrame = self._cache[key]
            return df if columns is None else df.select(columns)
        if self._guard is not None:
            self._guard()
        links = table == "nested" and (columns is None or "parent_id" in columns)
        if links and "stored tree checked" not in self._cache:  # once per Trace
            check_stored_nesting(frame, f"{self._source}/events" if self._source else None)
            self._cache["stored tree checked"] = True
        # one chunk per column, as a loaded table: later filters/to_numpy are several times faster
        try:
            df = (frame if columns is None else frame.select(columns)).collect().rechunk()
        except (pl.exceptions.PolarsError, OSError) as exc:  # a damaged or vanished part file
            msg = f"cannot read table {table!r} ({type(exc).__name__}: {str(exc)[:300]})"
            raise TraceError(msg, path=f"{self._source}/{table}" if self._source else None) from None
        if columns is None:
            self._cache[key] = df
        return df

    def _frame(self, table: str) -> Frame:
        if table == "nested":
            return self.nested
        if table == "files":
            return self.files
        if table not in self._tables:
            msg = f"no table {table!r}; tables: {['files', 'nested', *self._tables]}"
            raise KeyError(msg)
        return self._tables[table]

    def cached(self, key: str, compute: Any) -> Any:
        """`compute()` once per trace under `key` (namespaces keep derived tables here)."""
        if key not in self._cache:
            self._cache[key] = compute()
        return self._cache[key]

    @property
    def meta(self) -> dict[str, Any]:
        """Top-level keys and derived facts of the lowest-rank file (`files.meta_json`)."""
        meta: dict[str, Any] = self.cached("meta", lambda: file_meta(self.files))
        return meta

    @property
    def categories(self) -> frozenset[str]:
        """The event categories present."""
        cats: frozenset[str] = self.cached("categories", lambda: frozenset(
            self.collect("events", ["cat"])["cat"].unique().drop_nulls().cast(pl.String).to_list()))
        return cats

    def __getattr__(self, name: str) -> Any:
        entry = api.resolve(name) if not name.startswith("_") else None
        if entry is None:
            msg = f"{type(self).__name__!r} object has no attribute {name!r}"
            raise AttributeError(msg)
        kind, target = entry
        if kind == "method":
            return target.__get__(self, type(self))
        return self.cached(f"namespace:{name}", lambda: target(self))

    def __dir__(self) -> list[str]:
        return sorted(set(super().__dir__()) | set(api.registered()))

    def __repr__(self) -> str:
        """Header line and key facts (files, ranks, span, counts); computes no nesting."""
        text: str = api.hook("repr")(self)
        return text

    def _repr_html_(self) -> str:
        """Notebook card: span, events, threads, ranks, top ops (names HTML-escaped)."""
        html: str = api.hook("repr_html")(self)
        return html
