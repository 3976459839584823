"""`proftab summary`: torch's key_averages table, or its columns as CSV/JSON/Markdown/Parquet."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from proftab import kinds
from proftab.cli import Command
from proftab.cli._common import (add_output_arguments, add_trace_arguments, guess_format, load_trace,
                                 rich_console, write_frame, write_text)

if TYPE_CHECKING:
    import polars as pl

    from proftab.trace import Trace

EXAMPLES = """\
  proftab summary trace.pt.trace.json.gz
      torch's prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=100)
  proftab summary trace.json.gz --sort cuda_time_total --limit 20
      sort by any torch sort key (cpu_time_total, self_cuda_time_total, count, ...) or column
  proftab summary traces/ --group-by-input-shape
      a directory (or glob, or several files) of rank files: one table over all ranks
  proftab summary trace.json.gz --group-by-stack 5 --top-level
  proftab summary trace.json.gz -o ops.csv          (also .json, .md, .parquet)
  proftab summary trace.json.gz --format markdown   paste into an issue
  proftab summary damaged.json.gz --salvage         keep what can be read
"""


def _add_arguments(p: argparse.ArgumentParser) -> None:
    add_trace_arguments(p)
    p.add_argument("--sort", default="self_cpu_time_total", metavar="KEY",
                   help="torch sort key or key_averages column (default: self_cpu_time_total)")
    p.add_argument("--limit", type=int, default=None, metavar="N",
                   help="rows to show, -1 for all (default: 100 for text, all for files)")
    p.add_argument("--group-by-input-shape", action="store_true", help="torch's group_by_input_shape")
    p.add_argument("--group-by-stack", type=int, default=0, metavar="N", help="torch's group_by_stack_n")
    p.add_argument("--top-level", action="store_true",
                   help="only top-level ops (torch's top_level_events_only)")
    p.add_argument("--time-unit", choices=["s", "ms", "us"], default=None,
                   help="fixed time unit for the text table")
    add_output_arguments(p)


def _select(ka: pl.DataFrame, args: argparse.Namespace, limit: int) -> pl.DataFrame:
    """The key_averages rows the options select, sorted and limited (-1: all) like torch's table."""
    import polars as pl

    from proftab.torch.text_table import _sort_column

    rows = ka.filter(pl.col("top_level")) if args.top_level else ka
    col = _sort_column(args.sort)
    rows = rows.with_row_index("_pos").sort([col, "_pos"], descending=[True, False]).drop("_pos")
    return rows.head(limit) if limit >= 0 else rows


def _rich_table(tr: Trace, self_total: pl.DataFrame, rows: pl.DataFrame, console: object,
                args: argparse.Namespace) -> None:
    """Print `rows` as a rich table with torch's columns; totals over all of `self_total`."""
    from rich.table import Table
    from rich.text import Text

    from proftab.render.sanitize import sanitize_text
    from proftab.render.text import fmt_ns, fmt_share

    cpu_sum = int(self_total.filter(self_total["device_type"] == "CPU")["self_cpu_ns"].sum() or 0)
    dev_rows = self_total.filter((self_total["device_type"] != "CPU") & ~self_total["is_user_annotation"])
    dev_sum = int(dev_rows["self_device_ns"].sum() or 0)
    has_dev = bool((rows["self_device_ns"] > 0).any())
    dev = (kinds.use_device(tr.categories) or "device").upper()
    shapes = args.group_by_input_shape
    table = Table(title=f"proftab summary: {', '.join(args.trace)}", title_justify="left")
    table.add_column("Name", overflow="fold", max_width=60)
    for h in ["Self CPU %", "Self CPU", "CPU total %", "CPU total", "CPU time avg"]:
        table.add_column(h, justify="right")
    if has_dev:
        for h in [f"Self {dev}", f"Self {dev} %", f"{dev} total", f"{dev} time avg"]:
            table.add_column(h, justify="right")
    table.add_column("# of Calls", justify="right")
    if shapes:
        table.add_column("Input Shapes", overflow="fold", max_width=40)
    for r in rows.iter_rows(named=True):
        cells = [r["name"], fmt_share(r["self_cpu_ns"] / cpu_sum if cpu_sum else None), fmt_ns(r["self_cpu_ns"]),
                 fmt_share(r["cpu_total_ns"] / cpu_sum if cpu_sum else None), fmt_ns(r["cpu_total_ns"]),
                 fmt_ns(r["cpu_avg_ns"])]
        if has_dev:
            cells += [fmt_ns(r["self_device_ns"]), fmt_share(r["self_device_ns"] / dev_sum if dev_sum else None),
                      fmt_ns(r["device_total_ns"]), fmt_ns(r["device_avg_ns"])]
        cells.append(f"{r['calls']:,}")
        if shapes:
            cells.append(r["input_shapes"] or "")
        table.add_row(*(Text(sanitize_text(str(c))) for c in cells), style="dim" if r["device_type"] != "CPU" else None)
    footer = f"Self CPU time total: {fmt_ns(cpu_sum)}"
    if has_dev:
        footer += f"   Self {dev} time total: {fmt_ns(dev_sum)}"
    table.caption = footer
    table.caption_justify = "left"
    console.print(table)  # type: ignore[attr-defined]


def run(args: argparse.Namespace) -> int:
    """Print or write the summary; see the module docstring."""
    from proftab.torch.text_table import _sort_column

    _sort_column(args.sort)  # fail early, before reading, on an unknown key
    fmt = guess_format(args)
    tr = load_trace(args.trace, args)
    if fmt != "text":
        ka = tr.key_averages(args.group_by_input_shape, args.group_by_stack)
        write_frame(_select(ka, args, -1 if args.limit is None else args.limit), fmt, args.output)
        return 0
    console = rich_console(args)
    if console is not None:
        ka = tr.key_averages(args.group_by_input_shape, args.group_by_stack)
        _rich_table(tr, ka, _select(ka, args, 100 if args.limit is None else args.limit), console, args)
        return 0
    text = tr.table(sort_by=args.sort, row_limit=100 if args.limit is None else args.limit,
                    top_level_events_only=args.top_level, time_unit=args.time_unit,
                    group_by_input_shape=args.group_by_input_shape, group_by_stack_n=args.group_by_stack)
    write_text(text, args.output)
    return 0


COMMAND = Command(
    name="summary",
    help="torch's key_averages table of one trace (or several rank files)",
    examples=EXAMPLES,
    add_arguments=_add_arguments,
    run=run,
)
