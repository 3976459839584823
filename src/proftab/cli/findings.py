"""`proftab findings`: what is wrong with the step and what to change, largest saving first."""

from __future__ import annotations

from typing import TYPE_CHECKING

from proftab.cli import Command
from proftab.cli._common import add_trace_arguments, load_trace, rich_console, write_frame, write_text

if TYPE_CHECKING:
    import argparse

    import polars as pl

EXAMPLES = """\
  proftab findings trace.pt.trace.json.gz
      every finding: rule, severity, estimated saving per step, share of step time, the message
  proftab findings trace.json.gz --format json -o findings.json     with the evidence event ids
  proftab findings trace.json.gz --format markdown                  a table for a PR comment
  proftab findings trace.json.gz --rules memory_leak,input_pipeline
  proftab findings trace.json.gz --fail-on memory_leak,synchronisation
      CI gate: exit 1 when one of these rules fires (any: every rule)
"""


def _split(text: str) -> list[str]:
    return [v.strip() for v in text.split(",") if v.strip()]


def _add_arguments(p: argparse.ArgumentParser) -> None:
    add_trace_arguments(p)
    p.add_argument("--rules", type=_split, default=None, metavar="RULE[,RULE]",
                   help="run only these rules (default: all; see docs/findings.md)")
    p.add_argument("--fail-on", type=_split, default=None, metavar="RULE[,RULE]",
                   help="exit 1 when one of these rules fires ('any': every rule)")
    p.add_argument("--format", choices=("text", "json", "markdown", "csv", "parquet"), default="text",
                   help="output format (default: text; json carries the evidence ids)")
    p.add_argument("-o", "--output", metavar="FILE", default=None, help="write to FILE instead of stdout")
    p.add_argument("--plain", action="store_true", help="plain text even on a terminal")


def _table(df: pl.DataFrame) -> tuple[list[str], list[list[str]]]:
    from proftab.findings import format_value, scope_text
    from proftab.render.text import fmt_ns, fmt_share

    headers = ["#", "severity", "rule", "saving/step", "share", "value", "scope", "message"]
    rows = []
    several = df["rank"].drop_nulls().n_unique() > 1
    for i, r in enumerate(df.iter_rows(named=True), 1):
        rows.append([str(i), r["severity"], r["rule"], fmt_ns(r["est_saving_ns"]) if r["est_saving_ns"] is not None
                     else "", fmt_share(r["share"]), format_value(r["value"], r["unit"]),
                     scope_text(r["rank"], r["scope"], several), r["message"]])
    return headers, rows


def _text(df: pl.DataFrame, args: argparse.Namespace) -> None:
    from proftab.findings import format_value, scope_text
    from proftab.render.sanitize import sanitize_text as safe  # names and files: one line, no raw controls
    from proftab.render.text import fmt_ns, fmt_share

    console = rich_console(args)
    if console is not None:
        from rich.table import Table
        from rich.text import Text  # text, never markup: a name like "[link=...]" stays text

        table = Table(title=Text(safe(f"proftab findings: {', '.join(args.trace)}")), title_justify="left",
                      show_lines=True)
        headers, rows = _table(df)
        for h in headers:
            table.add_column(h, justify="right" if h in ("#", "saving/step", "share", "value") else "left",
                             overflow="fold")
        for row, sugg in zip(rows, df["suggestion"].to_list(), strict=True):
            table.add_row(*(Text(safe(c)) for c in row[:-1]),
                          Text.assemble(safe(row[-1]), "\n", (f"→ {safe(sugg)}", "dim")))
        console.print(table)  # type: ignore[attr-defined]
        return
    lines = [safe(f"proftab findings: {', '.join(args.trace)} ({df.height} findings)")]
    several = df["rank"].drop_nulls().n_unique() > 1
    for i, r in enumerate(df.iter_rows(named=True), 1):
        saving = f"saving {fmt_ns(r['est_saving_ns'])}/step" if r["est_saving_ns"] is not None else "saving -"
        share = f"share {fmt_share(r['share'])}" if r["share"] is not None else ""
        head = "  ".join(x for x in (f"{i}. [{r['severity']}] {r['rule']}", saving, share,
                                     format_value(r["value"], r["unit"]),
                                     scope_text(r["rank"], r["scope"], several)) if x)
        lines += [safe(head), f"   {safe(r['message'])}", f"   -> {safe(r['suggestion'])}"]
    if df.is_empty():
        lines.append("no findings")
    write_text("\n".join(lines) + "\n", args.output)


def run(args: argparse.Namespace) -> int:
    """Print or write the findings; exit 1 when a `--fail-on` rule fired."""
    import polars as pl

    from proftab.exceptions import UsageError
    from proftab.findings import rule_names

    known = rule_names()
    for opt in ("rules", "fail_on"):
        bad = [r for r in (getattr(args, opt) or []) if r not in known and not (opt == "fail_on" and r == "any")]
        if bad:
            msg = f"--{opt.replace('_', '-')}: unknown rule(s) {bad}; rules: {known}"
            raise UsageError(msg)
    tr = load_trace(args.trace, args)
    df = tr.findings(rules=args.rules)
    if args.format == "text":
        _text(df, args)
    elif args.format in ("markdown", "csv"):  # evidence as a count: thousands of ids do not fit a cell
        write_frame(df.with_columns(pl.col("evidence").list.len().alias("n_evidence")).drop("evidence"), args.format,
                    args.output)
    else:
        write_frame(df, args.format, args.output)
    fail = args.fail_on or []
    fired = set(df["rule"].to_list())
    return 1 if ("any" in fail and fired) or fired & set(fail) else 0


COMMAND = Command(
    name="findings",
    help="what is wrong with the step and what to change (rules over the exact tables)",
    examples=EXAMPLES,
    add_arguments=_add_arguments,
    run=run,
)
