"""`proftab mcp`: serve proftab's tables, SQL, findings and report to agents over stdio (MCP)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from proftab.cli import Command

if TYPE_CHECKING:
    import argparse

EXAMPLES = """\
  proftab mcp --debug
      an MCP server on stdin/stdout (pip install 'proftab[mcp]'); tools: load, tables, sql, findings, report
"""


def _add_arguments(p: argparse.ArgumentParser) -> None:
    del p  # no options: the client passes everything as tool arguments


def run(args: argparse.Namespace) -> int:
    """Serve until the client closes stdin."""
    from proftab.serve import server

    del args
    server().run("stdio")
    return 0


COMMAND = Command(
    name="mcp",
    help="serve tables, SQL, findings and the report to agents (Model Context Protocol, stdio)",
    examples=EXAMPLES,
    add_arguments=_add_arguments,
    run=run,
)
