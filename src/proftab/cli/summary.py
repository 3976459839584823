"""`proftab summary`: torch's key_averages table, or its columns as CSV/JSON/Markdown/Parquet."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from proftab import kinds
from proftab.cli import Command
from proftab.cli._common import (
    add_output_arguments,
    add_trace_arguments,
    guess_format,
    load_trace,
    rich_console,
    say,
    write_frame,
    write_text,
)

if TYPE_CHECKING:
    import argparse

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
  proftab summary trace.json.gz --threads main --no-python    the training loop's thread, ops only
  proftab summary trace.json.gz --torch 2.14        torch 2.14's rows (python_function rows left out)
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
    p.add_argument("--no-python", action="store_true",
                   help="ops only: leave python_function rows out (their time is their op's self time; "
                        "a sleeping helper thread's frame no longer tops Self CPU)")
    p.add_argument("--threads", choices=["all", "ops", "main"], default="all",
                   help="host threads to include: all (default); ops: threads that run ops (a helper thread "
                        "that only sleeps in Python frames is left out); main: per rank the thread that calls "
                        "ProfilerStep#N (else the one with the most ops). Device rows are always kept")
    p.add_argument("--torch", default=None, metavar="VERSION",
                   help="a torch release's key_averages semantics (2.13: python_function rows listed; 2.14: left "
                        "out); default: the trace writer's release where the trace reveals it (tr.torch_version())")
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


#: columns the rich table drops first when the terminal is too narrow (memory, then averages, ...), as
#: (key_averages column, whether it is the column's percentage)
_DROP_ORDER = (("self_device_mem_bytes", False), ("device_mem_bytes", False), ("self_cpu_mem_bytes", False),
               ("cpu_mem_bytes", False), ("device_avg_ns", False), ("cpu_avg_ns", False), ("cpu_total_ns", True),
               ("device_total_ns", False), ("input_shapes", False), ("self_device_ns", True))
_PY_FRAME = re.compile(r"\.py\(\d+\): |^<built-in method ")
_MIN_NAME = 44  # the name width worth dropping columns for


def _rich_columns(rows: pl.DataFrame, cpu_sum: int, dev_sum: int, dev: str, shapes: bool) -> dict[str, list[str]]:
    """The rich table's cells by header, in torch's column order (Name excluded)."""
    from proftab.render.text import fmt_ns, fmt_share
    from proftab.torch.columns import COLUMNS, torch_header, torch_share_header
    from proftab.torch.text_table import _fmt_mem

    def share(col: str, total: int) -> dict[str, list[str]]:
        return {torch_share_header(col, dev): [fmt_share(v / total if total else None) for v in rows[col]]}

    def times(*cols: str) -> dict[str, list[str]]:
        return {torch_header(c, dev): [fmt_ns(v) for v in rows[c]] for c in cols}

    cols: dict[str, list[str]] = {**share("self_cpu_ns", cpu_sum), **times("self_cpu_ns"),
                                  **share("cpu_total_ns", cpu_sum), **times("cpu_total_ns", "cpu_avg_ns")}
    if bool((rows["self_device_ns"] > 0).any()):
        cols |= {**times("self_device_ns"), **share("self_device_ns", dev_sum),
                 **times("device_total_ns", "device_avg_ns")}
    for col in (c.name for c in COLUMNS if c.unit == "bytes"):
        if bool((rows[col] != 0).any()):
            cols[torch_header(col, dev)] = [_fmt_mem(int(v)) for v in rows[col]]
    cols[torch_header("calls", dev)] = [f"{v:,}" for v in rows["calls"]]
    if shapes:
        cols[torch_header("input_shapes", dev)] = [v or "" for v in rows["input_shapes"]]
    return cols


def _markdown(tr: Trace, self_total: pl.DataFrame, rows: pl.DataFrame, args: argparse.Namespace) -> str:
    """`rows` as a Markdown table with torch's columns in human units, and the totals below."""
    import polars as pl

    from proftab.cli._common import markdown_table
    from proftab.render.text import fmt_ns
    from proftab.torch.columns import torch_header

    cpu_sum = int(self_total.filter(self_total["device_type"] == "CPU")["self_cpu_ns"].sum() or 0)
    dev_rows = self_total.filter((self_total["device_type"] != "CPU") & ~self_total["is_user_annotation"])
    dev_sum = int(dev_rows["self_device_ns"].sum() or 0)
    dev = (kinds.use_device(tr.categories) or "device").upper()
    cols = _rich_columns(rows, cpu_sum, dev_sum, dev, args.group_by_input_shape)
    frame = pl.DataFrame({"Name": [n or "" for n in rows["name"]], **cols}, schema=dict.fromkeys(["Name", *cols],
                                                                                                 pl.String))
    totals = f"Self CPU time total: {fmt_ns(cpu_sum)}" + (
        f"; Self {dev} time total: {fmt_ns(dev_sum)}" if torch_header("self_device_ns", dev) in cols else "")
    return markdown_table(frame) + "\n" + totals + "\n"


def _rich_table(tr: Trace, self_total: pl.DataFrame, rows: pl.DataFrame, console: object,
                args: argparse.Namespace) -> None:
    """Print `rows` as a rich table with torch's columns, fitted to the terminal's width.

    Totals are over all of `self_total`. Long names are cut in the middle so that different
    rows never print the same name; columns that do not fit are dropped, memory first; the
    caption says what was left out.
    """
    from proftab.render.text import distinct_cuts, fmt_ns, middle_cut
    from proftab.torch.columns import torch_header, torch_share_header

    cpu_sum = int(self_total.filter(self_total["device_type"] == "CPU")["self_cpu_ns"].sum() or 0)
    dev_rows = self_total.filter((self_total["device_type"] != "CPU") & ~self_total["is_user_annotation"])
    dev_sum = int(dev_rows["self_device_ns"].sum() or 0)
    dev = (kinds.use_device(tr.categories) or "device").upper()
    cols = _rich_columns(rows, cpu_sum, dev_sum, dev, args.group_by_input_shape)
    shapes = torch_header("input_shapes", dev)
    if shapes in cols:  # shapes: at most 40 characters, distinct
        full = cols[shapes]
        cols[shapes] = distinct_cuts(full, [middle_cut(v, 40) for v in full])
    import polars as pl

    from proftab.render.table import Col, rich_table

    names = [str(v) if v is not None else "" for v in rows["name"]]
    frame = pl.DataFrame({"Name": names, **cols}, schema=dict.fromkeys(["Name", *cols], pl.String))
    drop = {(torch_share_header(c, dev) if share else torch_header(c, dev)): rank
            for rank, (c, share) in enumerate(_DROP_ORDER)}
    specs = [Col("Name", cut=True, align="<")] + [
        Col(h, kind="text", drop=drop.get(h), align="<" if h == shapes else ">") for h in cols]
    notes = [f"Self CPU time total: {fmt_ns(cpu_sum)}"
             + (f"   Self {dev} time total: {fmt_ns(dev_sum)}" if torch_header("self_device_ns", dev) in cols else "")]
    total_rows = self_total.filter(self_total["top_level"]) if args.top_level else self_total
    if rows.height < total_rows.height:
        notes.append(f"{rows.height:,} of {total_rows.height:,} rows (--limit N, -1 for all)")
    notes += annotation_notes(rows, dev_sum, dev) + python_notes(self_total, args)
    styles = ["dim" if t != "CPU" else None for t in rows["device_type"]]
    console.print(rich_table(frame, specs, title=f"proftab summary: {', '.join(args.trace)}", notes=notes,  # type: ignore[attr-defined]
                             width=int(getattr(console, "width", 200)), row_styles=styles))


def annotation_notes(rows: pl.DataFrame, dev_sum: int, dev: str) -> list[str]:
    """Why a `ProfilerStep*` (or other annotation) row shows Self device % over 100."""
    if not dev_sum or "is_user_annotation" not in rows.columns:
        return []
    over = rows.filter(rows["is_user_annotation"] & (rows["self_device_ns"] > dev_sum))
    if over.is_empty():
        return []
    names = ", ".join(sorted(set(over["name"].to_list())))
    return [f"{names}: Self {dev} % over 100 is torch's arithmetic: a GPU annotation's time is the span of the "
            f"work under it (overlapping kernels, idle gaps), while the total sums only kernels, memcpy and memset"]


def run(args: argparse.Namespace) -> int:
    """Print or write the summary; see the module docstring."""
    from proftab.torch.text_table import _sort_column

    _sort_column(args.sort)  # fail early, before reading, on an unknown key
    fmt = guess_format(args)
    tr = load_trace(args.trace, args)
    if args.threads != "all":
        tr = _thread_view(tr, args)
    py = not args.no_python
    if fmt == "markdown":  # the human table (torch's columns, formatted), not the raw ns columns
        ka = tr.key_averages(args.group_by_input_shape, args.group_by_stack, include_python_functions=py,
                             torch=args.torch)
        write_text(_markdown(tr, ka, _select(ka, args, 100 if args.limit is None else args.limit), args),
                   args.output)
        return 0
    if fmt != "text":
        ka = tr.key_averages(args.group_by_input_shape, args.group_by_stack, include_python_functions=py,
                             torch=args.torch)
        write_frame(_select(ka, args, -1 if args.limit is None else args.limit), fmt, args.output)
        return 0
    console = rich_console(args)
    if console is not None:
        ka = tr.key_averages(args.group_by_input_shape, args.group_by_stack, include_python_functions=py,
                             torch=args.torch)
        _rich_table(tr, ka, _select(ka, args, 100 if args.limit is None else args.limit), console, args)
        return 0
    from proftab.torch.text_table import render_table

    limit = 100 if args.limit is None else args.limit
    ka = tr.key_averages(args.group_by_input_shape, args.group_by_stack, include_python_functions=py,
                         torch=args.torch, torch_floats=True)  # torch's floats: its rounding ties
    text = render_table(ka, sort_by=args.sort, row_limit=limit, top_level_events_only=args.top_level,
                        time_unit=args.time_unit, use_device=kinds.use_device(tr.categories),
                        profile_memory=bool(tr.meta.get("profile_memory")),
                        with_flops=bool(tr.meta.get("with_flops")), distinct_names=True)
    write_text(text, args.output)
    if not args.quiet:  # notes on stderr: stdout stays torch's table

        dev_rows = ka.filter((ka["device_type"] != "CPU") & ~ka["is_user_annotation"])
        dev = (kinds.use_device(tr.categories) or "device").upper()
        for note in (annotation_notes(_select(ka, args, limit), int(dev_rows["self_device_ns"].sum() or 0), dev)
                     + python_notes(ka, args)):
            say(f"note: {note}")
    return 0


def _thread_view(tr: Trace, args: argparse.Namespace) -> Trace:
    """`tr` restricted to the ``--threads`` view, saying on stderr which threads it kept."""
    import polars as pl

    from proftab import schema
    from proftab.tracks import keep_threads, thread_view_tracks, track_labels

    keys = list(schema.TRACK_KEYS)
    host = tr.collect("events", [*keys, "cat", "name", "start_ns"]).filter(kinds.is_host())
    kept = thread_view_tracks(host, args.threads)
    if not args.quiet:
        # threads as the repr counts them: the profiler's own span track ("Spans") is no thread
        every = track_labels(host, tr.collect("threads")).filter(pl.col("tid").is_not_null())
        labels = every.join(kept, on=keys, how="semi", nulls_equal=True)["label"].to_list()
        say(f"note: --threads {args.threads}: {', '.join(labels) or 'no thread'} "
            f"({len(labels)} of {every.height} host threads; device rows all kept)")
    return keep_threads(tr, kept)


def python_notes(ka: pl.DataFrame, args: argparse.Namespace) -> list[str]:
    """A hint when a Python frame (``file.py(N): name``) has the most Self CPU time."""
    if args.no_python:
        return []
    host = ka.filter(ka["device_type"] == "CPU")
    if host.is_empty():
        return []
    top = host.sort("self_cpu_ns", descending=True)["name"][0] or ""
    if not _PY_FRAME.search(top):
        return []
    hint = "--no-python shows ops only" if args.threads != "all" else \
        "--no-python shows ops only, --threads ops leaves out threads that run no op"
    return [f"the top Self CPU row is a Python frame ({top}); {hint}"]


COMMAND = Command(
    name="summary",
    help="torch's key_averages table of one trace (or several rank files)",
    examples=EXAMPLES,
    add_arguments=_add_arguments,
    run=run,
)
