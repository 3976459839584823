"""`proftab mcp`: the tools as functions, and the server over stdio with the mcp package's own client."""

from __future__ import annotations

import json
import os
import sys

import pytest

from proftab.exceptions import UsageError
from proftab.serve import MAX_ROWS, Session
from tests.conftest import DATA

LEAK = str(DATA / "findings" / "leak.pt.trace.json.gz")


def test_session_tools_without_mcp() -> None:
    s = Session()
    loaded = s.load(LEAK)
    tid = loaded["trace_id"]
    assert loaded["rows"]["events"] > 0 and loaded["ranks"] == 1
    schemas = s.tables(tid)
    assert schemas["events"]["dur_ns"] == "Int64" and "evidence" in schemas["findings"]
    out = s.sql(tid, "SELECT name, count(*) AS n_calls, sum(dur_ns) AS dur_ns FROM events GROUP BY name "
                     "ORDER BY dur_ns DESC", limit=3)
    assert len(out["rows"]) == 3 and out["truncated"] and out["columns"] == ["name", "n_calls", "dur_ns"]
    big = s.sql(tid, "SELECT * FROM instants", limit=10**9)
    assert len(big["rows"]) <= MAX_ROWS
    f = s.sql(tid, "SELECT rule, value FROM findings WHERE rule = 'memory_leak'")
    assert f["rows"] == [{"rule": "memory_leak", "value": 4 * 2**20}]
    for bad in ("DROP TABLE events", "SELECT 1; SELECT 2", "COPY events TO 'x.csv'"):
        with pytest.raises(UsageError, match="read-only"):
            s.sql(tid, bad)
    with pytest.raises(UsageError, match="SQL error"):
        s.sql(tid, "SELECT no_such_column FROM events")
    with pytest.raises(UsageError, match="no trace"):
        s.findings("t99")
    assert s.findings(tid)[0]["rule"] == "memory_leak"


def test_mcp_server_over_stdio(tmp_path: os.PathLike[str]) -> None:
    pytest.importorskip("mcp")
    import asyncio

    from mcp import ClientSession, StdioServerParameters, stdio_client

    env = dict(os.environ)  # the installed proftab (CI installs the package, not an editable copy)
    params = StdioServerParameters(command=sys.executable, args=["-m", "proftab", "mcp"], env=env)

    def payload(result: object) -> object:
        structured = getattr(result, "structuredContent", None) or getattr(result, "structured_content", None)
        if structured is not None:
            return structured.get("result", structured)
        return json.loads(result.content[0].text)  # type: ignore[attr-defined]

    async def talk() -> dict[str, object]:
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            names = {t.name for t in (await session.list_tools()).tools}
            loaded = payload(await session.call_tool("load", {"path": LEAK}))
            tid = loaded["trace_id"]  # type: ignore[index]
            query = "SELECT count(*) AS n FROM events"
            rows = payload(await session.call_tool("sql", {"trace_id": tid, "query": query}))
            found = payload(await session.call_tool("findings", {"trace_id": tid}))
            return {"names": names, "rows": rows, "found": found}

    out = asyncio.run(asyncio.wait_for(talk(), timeout=240))
    assert {"load", "tables", "sql", "findings", "report"} <= out["names"]  # type: ignore[operator]
    assert out["rows"]["rows"][0]["n"] > 0  # type: ignore[index]
    assert out["found"][0]["rule"] == "memory_leak"  # type: ignore[index]
