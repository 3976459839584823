"""`proftab report`: one self-contained offline HTML page (findings, step time, ops, charts)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from proftab.cli import Command
from proftab.cli._common import add_trace_arguments, load_trace

if TYPE_CHECKING:
    import argparse

EXAMPLES = """\
  proftab report trace.pt.trace.json.gz -o report.html
      findings first, then step time, top ops, a representative step's timeline, critical path,
      roofline, memory, modules, ranks; opens from the file with no network
  proftab report run/*.json -o report.html --title "nightly, 8 ranks"
"""


def _add_arguments(p: argparse.ArgumentParser) -> None:
    add_trace_arguments(p)
    p.add_argument("-o", "--output", metavar="FILE", default="report.html",
                   help="the HTML file to write (default: report.html)")
    p.add_argument("--title", default=None, help="page title (default: the file names)")


def run(args: argparse.Namespace) -> int:
    """Write the report page."""
    import sys

    from proftab.exceptions import UsageError
    from proftab.report import write_report

    if not str(args.output).lower().endswith((".html", ".htm")):
        msg = f"the report is an HTML page: -o {args.output!r} must end in .html"
        raise UsageError(msg)
    tr = load_trace(args.trace, args)
    path = write_report(tr, args.output, title=args.title)
    if not args.quiet:
        print(f"proftab: wrote {path}", file=sys.stderr)
    return 0


COMMAND = Command(
    name="report",
    help="one self-contained HTML page: findings, step time, top ops, timeline, critical path, roofline, memory",
    examples=EXAMPLES,
    add_arguments=_add_arguments,
    run=run,
)
