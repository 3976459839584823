"""`proftab memory`: the memory peak of each device and what holds it (traces with profile_memory)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from proftab.cli import Command
from proftab.cli._common import (
    Block,
    add_output_arguments,
    add_trace_arguments,
    guess_format,
    load_trace,
    say,
    show_frames,
    write_frame,
)

if TYPE_CHECKING:
    import argparse

    import polars as pl

    from proftab.trace import Trace

EXAMPLES = """\
  proftab memory trace.pt.trace.json.gz
      per device: the peak, when, and the top 10 holders at the peak by top-level op
  proftab memory trace.json.gz --by module --limit 20
      holders by nn.Module (also: op, top_op, stack, step, allocation)
  proftab memory trace.json.gz --device cuda:0
  proftab memory trace.json.gz --table growth
      per step: bytes allocated and still held at the step's end (leak candidates)
  proftab memory trace.json.gz --table allocations -o blocks.parquet
      every block: alloc/free time, lifetime, ops, module, stack, step
  proftab memory trace.json.gz --chart memory.html
      also write the chart: allocated and reserved over time, the peak marked, steps shaded
"""

TABLES = ("holders", "peak", "allocations", "growth", "timeline")
BY = ("top_op", "op", "module", "stack", "step", "allocation")


def _add_arguments(p: argparse.ArgumentParser) -> None:
    add_trace_arguments(p)
    p.add_argument("--by", choices=BY, default="top_op",
                   help="group the blocks live at the peak by (default: top_op, the op called from Python)")
    p.add_argument("--limit", type=int, default=10, metavar="N",
                   help="holders shown per device in the text output, -1 for all (default: 10)")
    p.add_argument("--device", default=None, metavar="NAME", help="only this device (cpu, cuda:0, hip:0, ...)")
    p.add_argument("--table", choices=TABLES, default="holders",
                   help="the table written for csv/json/markdown/parquet output (default: holders)")
    p.add_argument("--chart", metavar="FILE", default=None,
                   help="also write the memory chart: .html, .json (Vega-Lite), .png / .svg / .pdf (vl-convert)")
    add_output_arguments(p)


def _table(tr: Trace, args: argparse.Namespace) -> pl.DataFrame:
    name = args.table
    mem = tr.memory
    out: pl.DataFrame
    if name == "holders":
        out = mem.peak(by=args.by)
    elif name == "peak":
        out = mem.peak()
    elif name == "growth":
        out = mem.growth()
    elif name == "allocations":
        out = mem.allocations()
    else:
        out = mem.timeline()
    return out if args.device is None else out.filter(out["device_name"] == args.device)


def _check_device(tr: Trace, args: argparse.Namespace) -> None:
    """`--device` names a device the trace's [memory] events have, else a usage error listing them."""
    if args.device is None:
        return
    names = sorted({str(d) for d in tr.memory.peak()["device_name"].to_list()})
    if names and args.device not in names:
        from proftab.exceptions import UsageError

        msg = f"--device {args.device}: the trace has no [memory] events on it; its devices: {', '.join(names)}"
        raise UsageError(msg)


def _blocks(tr: Trace, args: argparse.Namespace) -> list[Block | str]:
    """The text output: the peak per device, then per device its holders at the peak."""
    import polars as pl

    from proftab.memory import GROUPINGS
    from proftab.render.table import Col
    from proftab.render.text import fmt_bytes, fmt_share

    summary = tr.memory.peak()
    if args.device is not None:
        summary = summary.filter(pl.col("device_name") == args.device)
    from proftab.render.sanitize import sanitize_text

    # a text block keeps its newlines: a file name's are escaped here (else a name fakes a line)
    files = ", ".join(sanitize_text(str(f).rsplit("/", 1)[-1]) for f in tr.files["source_file"])
    title = f"proftab memory: {files}"
    if summary.is_empty():
        return [title, f"no [memory] events{'' if args.device is None else ' on ' + args.device}"
                       " (record with profile_memory=True)"]
    starts = tr.collect("events", ["rank", "start_ns"]).group_by("rank").agg(pl.col("start_ns").min().alias("t0"))
    summary = summary.join(starts, on="rank", how="left").with_columns(
        (pl.col("peak_ns") - pl.col("t0")).alias("at_ns"))
    multi = tr.files.height > 1
    heads = {"rank": "rank", "device_name": "device", "peak_bytes": "peak", "at_ns": "at", "step": "step",
             "reserved_at_peak_bytes": "reserved at peak", "pre_window_bytes": "held from before",
             "initial_bytes": "start", "final_bytes": "end", "n_events": "events"}
    kinds = {"step": "int"}
    cols = [Col(c, header=h, kind=kinds.get(c), drop={"initial_bytes": 1, "final_bytes": 2}.get(c))
            for c, h in heads.items() if multi or c != "rank"]
    blocks: list[Block | str] = [Block(summary, cols, title)]
    holders = tr.memory.peak(by=args.by)
    key = GROUPINGS[args.by]
    for r in summary.iter_rows(named=True):
        mine = holders.filter((pl.col("rank") == r["rank"]) & (pl.col("device_name") == r["device_name"]))
        shown = mine if args.limit < 0 else mine.head(args.limit)
        label = "block (addr, allocating op)" if key is None else args.by
        if key is None:
            what = (pl.format("{} {}", pl.col("addr").map_elements(lambda a: f"{a:#x}", return_dtype=pl.String),
                              pl.col("alloc_op").fill_null("?")))
        elif key == "stack":
            what = pl.when(pl.col(key).list.len() > 0).then(pl.col(key).list.join(" <- ")).otherwise(
                pl.lit("(no Python stack)"))
        else:
            what = pl.col(key).cast(pl.String).fill_null("(none)")
        frame = shown.select("bytes", "share", "cumulative_share", "blocks", what.alias("what"))
        head = (f"{'rank ' + str(r['rank']) + ' ' if multi else ''}{r['device_name']}: held at the peak "
                f"({fmt_bytes(r['peak_bytes'])}), by {args.by}"
                + (f" (top {len(shown)} of {mine.height})" if len(shown) < mine.height else ""))
        if r["in_window_bytes"] is None:
            blocks += [head, "  (unknown: the trace's [memory] events have no Addr, so blocks cannot be paired;"
                             " bytes are relative to the start of the profile)"]
            continue
        notes = []
        if r["pre_window_bytes"]:
            before = r["pre_window_bytes"]
            share = f" ({fmt_share(before / r['peak_bytes'])})" if r["peak_bytes"] else ""  # no share of a 0 peak
            notes.append(f"  + {fmt_bytes(before)}{share} allocated before the profile started")
        if frame.is_empty():
            blocks += [head, "  (no block allocated inside the window is live at the peak)", *notes]
            continue
        blocks.append(Block(frame, [Col("bytes", kind="bytes"), Col("share"), Col("cumulative_share",
                                                                                   header="cumulative"),
                                    Col("blocks", kind="count"), Col("what", header=label, cut=True)], head, notes))
    return blocks


def run(args: argparse.Namespace) -> int:
    """Print or write the memory tables; see the module docstring."""
    fmt = guess_format(args)
    tr = load_trace(args.trace, args, nest=False)
    _check_device(tr, args)
    if args.chart:
        from proftab import plot

        plot.save(tr.memory.chart(device=args.device), args.chart)
        if not args.quiet:
            say(f"wrote {args.chart}")
    if fmt != "text":
        write_frame(_table(tr, args), fmt, args.output)
        return 0
    show_frames(args, _blocks(tr, args))
    return 0


COMMAND = Command(
    name="memory",
    help="memory peak per device and what holds it (traces recorded with profile_memory)",
    examples=EXAMPLES,
    add_arguments=_add_arguments,
    run=run,
)
