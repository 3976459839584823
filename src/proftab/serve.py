"""`proftab mcp`: proftab's tables, findings and report as tools for agents (Model Context Protocol, stdio).

The tools are plain functions over a `Session` (testable without the `mcp` package); `server()`
wraps them in an MCP server (`pip install 'proftab[mcp]'`):

* `load(path)`: load a trace (a file, a directory or glob of ranks) or scan a dataset; returns
  its id, its tables and their row counts;
* `tables(trace_id)`: every table with its columns and dtypes;
* `sql(trace_id, query, limit, timeout_s)`: one read-only `SELECT` (Polars `SQLContext` over the
  trace's tables, each registered lazily under its name; `findings` too), at most `limit` rows
  (`MAX_ROWS`), given up after `timeout_s` (`MAX_SECONDS`);
* `findings(trace_id, rules)`: `tr.findings()` as rows;
* `report(trace_id, path)`: write `tr.report(path)`; returns the path.
"""

from __future__ import annotations

import concurrent.futures
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import polars as pl

from proftab.exceptions import UsageError

if TYPE_CHECKING:
    from proftab.trace import Trace

__all__ = ["MAX_ROWS", "MAX_SECONDS", "Session", "server"]

#: rows a `sql` call returns at most
MAX_ROWS = 1000
#: seconds a `sql` call runs at most
MAX_SECONDS = 30.0
_READ_ONLY = re.compile(r"^\s*(select|with)\b", re.IGNORECASE)
_POOL = concurrent.futures.ThreadPoolExecutor(max_workers=2, thread_name_prefix="proftab-sql")


def _rows(df: pl.DataFrame) -> list[dict[str, Any]]:
    """JSON-ready rows (times stay integers; other values as their text where JSON has none)."""
    import json

    out: list[dict[str, Any]] = json.loads(df.write_json())
    return out


@dataclass
class Session:
    """The traces one server has loaded, by id."""

    traces: dict[str, Trace] = field(default_factory=dict)

    def _get(self, trace_id: str) -> Trace:
        if trace_id not in self.traces:
            msg = f"no trace {trace_id!r}; load one first (loaded: {sorted(self.traces)})"
            raise UsageError(msg)
        return self.traces[trace_id]

    def _frames(self, tr: Trace) -> dict[str, pl.LazyFrame]:
        names = ["files", "nested", *tr.tables]
        return {n: tr.lazy(n) if n != "files" else tr.files.lazy() for n in dict.fromkeys(names)}

    def load(self, path: str) -> dict[str, Any]:
        """Load `path` (a trace file, directory, glob or proftab dataset); its id and table sizes."""
        from proftab.io.readers import open_trace

        tr = open_trace(path)  # the reader is chosen by what `path` is
        trace_id = f"t{len(self.traces)}"
        self.traces[trace_id] = tr
        sizes = {n: int(f.select(pl.len()).collect().item()) for n, f in self._frames(tr).items() if n != "nested"}
        return {"trace_id": trace_id, "path": path, "ranks": tr.files.height, "rows": sizes}

    def tables(self, trace_id: str) -> dict[str, dict[str, str]]:
        """Every table of the trace (and `findings`) with its columns and dtypes."""
        from proftab.findings import FINDING_SCHEMA

        tr = self._get(trace_id)
        out = {n: {c: str(t) for c, t in f.collect_schema().items()} for n, f in self._frames(tr).items()}
        out["findings"] = {c: str(t) for c, t in FINDING_SCHEMA.items()}
        return out

    def sql(self, trace_id: str, query: str, limit: int = 100, timeout_s: float = 10.0) -> dict[str, Any]:
        """Run one read-only `SELECT` over the trace's tables; at most `limit` rows, `timeout_s` seconds."""
        if not _READ_ONLY.match(query) or ";" in query.strip().rstrip(";"):
            msg = "only one read-only SELECT (or WITH ... SELECT) statement is allowed"
            raise UsageError(msg)
        limit = max(0, min(int(limit), MAX_ROWS))
        timeout_s = max(0.1, min(float(timeout_s), MAX_SECONDS))
        tr = self._get(trace_id)
        frames = self._frames(tr)
        if re.search(r"\bfindings\b", query, re.IGNORECASE):
            frames["findings"] = tr.findings().lazy()
        ctx = pl.SQLContext(frames=frames)
        try:
            lazy = ctx.execute(query.strip().rstrip(";"), eager=False)
        except (pl.exceptions.PolarsError, ValueError) as exc:
            msg = f"SQL error: {exc}"
            raise UsageError(msg) from None
        future = _POOL.submit(lambda: lazy.head(limit + 1).collect())
        try:
            df = future.result(timeout=timeout_s)
        except concurrent.futures.TimeoutError:
            future.cancel()
            msg = f"the query ran over {timeout_s:g} s and was given up; narrow it (WHERE, LIMIT)"
            raise UsageError(msg) from None
        except pl.exceptions.PolarsError as exc:
            msg = f"SQL error: {exc}"
            raise UsageError(msg) from None
        return {"columns": df.columns, "rows": _rows(df.head(limit)), "truncated": df.height > limit}

    def findings(self, trace_id: str, rules: list[str] | None = None) -> list[dict[str, Any]]:
        """`tr.findings(rules)` as rows, largest estimated saving first."""
        return _rows(self._get(trace_id).findings(rules=rules))

    def report(self, trace_id: str, path: str) -> str:
        """Write the trace's self-contained HTML report to `path`; returns the path."""
        out: str = self._get(trace_id).report(path)
        return out


def server(session: Session | None = None) -> Any:
    """An MCP server offering the `Session` methods as tools (needs the `mcp` package)."""
    from proftab._dependencies import import_optional

    import_optional("mcp", extra="mcp", what="proftab mcp")
    import importlib

    try:  # mcp >= 2
        server_cls = importlib.import_module("mcp.server.mcpserver").MCPServer
    except ImportError:  # mcp 1.x
        server_cls = importlib.import_module("mcp.server.fastmcp").FastMCP
    s = session or Session()
    app = server_cls("proftab", instructions="Exact tables of PyTorch profiler traces: load a trace, list its tables, "
                                         "query them with SQL, get findings (what is wrong with the step) and a "
                                         "report.")
    for fn in (s.load, s.tables, s.sql, s.findings, s.report):
        app.tool(name=fn.__name__, description=(fn.__doc__ or "").strip())(fn)
    return app
