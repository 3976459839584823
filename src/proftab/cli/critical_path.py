"""`proftab critical-path`: what bounds each step (the critical path), and what if ops were faster."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from proftab.cli import Command
from proftab.cli._common import (
    add_output_arguments,
    add_trace_arguments,
    guess_format,
    load_trace,
    say,
    show_frame,
    write_frame,
)
from proftab.exceptions import UsageError

if TYPE_CHECKING:
    from typing import Any

    import polars as pl

    from proftab.render.table import Col

EXAMPLES = """\
  proftab critical-path trace.json.gz
      time on the critical path per bound_by (cpu, gpu compute, launch, sync...) over all steps
  proftab critical-path trace.json.gz --step 6 --by name --limit 20
      the ops with the most time on step 6's path
  proftab critical-path trace.json.gz --by step          one row per step and rank
  proftab critical-path trace.json.gz --by path -o path.csv      the path's segments
  proftab critical-path trace.json.gz --what-if gemm=0.5 --what-if 'aten::copy_'=0
      step time if GEMMs were 2x faster and copies free (the graph replayed)
  proftab critical-path trace.json.gz --tail     the path to the end of each step's GPU work
  proftab critical-path trace.json.gz --annotation forward   windows of a user annotation
  proftab critical-path trace.json.gz --overlay cp.json.gz   the trace with the path marked (Perfetto UI)
  proftab critical-path trace.json.gz --step 6 --chart cp.html   the step's timeline, its path marked (offline HTML)
"""


def _add_arguments(p: argparse.ArgumentParser) -> None:
    add_trace_arguments(p)
    w = p.add_mutually_exclusive_group()
    w.add_argument("--step", type=int, default=None, metavar="N", help="only ProfilerStep#N (default: every step)")
    w.add_argument("--annotation", default=None, metavar="NAME", help="windows of a host annotation instead of steps")
    w.add_argument("--window", type=_int64, nargs=2, default=None, metavar=("START_NS", "END_NS"),
                   help="an explicit window in trace ns")
    p.add_argument("--rank", type=int, default=None, help="only this rank")
    p.add_argument("--tail", action="store_true",
                   help="also the device work each window launched that ends after it (HTA's window): the path "
                        "runs to the end of the step's GPU work")
    p.add_argument("--by", choices=["bound_by", "kind", "name", "module", "step", "path"], default="bound_by",
                   help="what to show (default: time per bound_by)")
    p.add_argument("--limit", type=int, default=None, metavar="N", help="rows to show for --by name/path")
    p.add_argument("--what-if", action="append", default=[], metavar="KEY=FACTOR",
                   help="scale durations (a kind, bound_by, kernel category or name regex) and report the new "
                        "step time; repeatable")
    p.add_argument("--chart", metavar="FILE", default=None,
                   help="also write the timeline of the first window with its path marked: .html (offline), .json, "
                        ".png / .svg / .pdf")
    p.add_argument("--overlay", metavar="FILE", default=None,
                   help="also write the trace as Chrome JSON with the path marked (.gz: compressed)")
    add_output_arguments(p)


def _int64(text: str) -> int:
    """An argparse type: an integer in the int64 ns range (a usage error otherwise)."""
    try:
        v = int(text)
    except ValueError:
        msg = f"invalid int value: {text!r}"
        raise argparse.ArgumentTypeError(msg) from None
    if not -(2**63) <= v < 2**63:
        msg = f"{text} is outside the int64 ns range"
        raise argparse.ArgumentTypeError(msg)
    return v


def _scale(items: list[str]) -> dict[str, float]:
    out: dict[str, float] = {}
    for it in items:
        key, sep, val = it.rpartition("=")
        try:
            f = float(val)
        except ValueError:
            f = -1.0
        if not sep or not key or not (0 <= f < float("inf")):  # NaN fails both comparisons
            msg = f"--what-if needs KEY=FACTOR with a finite factor >= 0, not {it!r}"
            raise UsageError(msg)
        out[key] = f
    return out


def _cols(df: pl.DataFrame) -> list[Col]:
    """How the tables print: absolute start/end as integers, names cut, segment details dropped first."""
    from proftab.render.table import Col

    drop = {"via": 1, "module": 2, "seq": 3, "event_id": 4, "start_ns": 5, "end_ns": 6, "min_ns": 7, "max_ns": 8,
            "median_ns": 9}
    return [Col(c, kind="int" if c in ("start_ns", "end_ns") else None,
                drop=drop.get(c), cut=c in ("name", "module") and c == ("name" if "name" in df.columns else "module"))
            for c in df.columns]


def _check_selection(tr: Any, args: argparse.Namespace, step: Any) -> None:
    """A `--rank` / `--window` / `--step` / `--annotation` that selects nothing is a usage error."""
    import polars as pl

    ranks = tr.files["rank"].to_list()
    if args.rank is not None and args.rank not in ranks:
        msg = f"--rank {args.rank}: the trace has no such rank; its ranks: {', '.join(map(str, ranks))}"
        raise UsageError(msg)
    wins = tr.critical_path.windows(step, rank=args.rank)
    if args.window is not None:
        w0, w1 = args.window
        ev = tr.collect("events", columns=["rank", "start_ns", "end_ns"])
        if args.rank is not None:
            ev = ev.filter(pl.col("rank") == args.rank)
        inside = ev.filter((pl.col("start_ns") >= w0) & (pl.col("end_ns") <= w1)).height
        if not inside:
            lo, hi = ev["start_ns"].min(), ev["end_ns"].max()
            msg = (f"--window {w0} {w1}: no event lies inside it; the trace spans {lo} .. {hi} ns "
                   "(trace time, as the start_ns column)")
            raise UsageError(msg)
    elif wins.is_empty():
        what = f"--step {args.step}" if args.step is not None else f"--annotation {args.annotation}"
        msg = f"{what}: no such window{'' if args.rank is None else f' on rank {args.rank}'}"
        raise UsageError(msg)


def run(args: argparse.Namespace) -> int:
    """Print or write the table; see the module docstring."""
    scale = _scale(args.what_if)
    fmt = guess_format(args)
    tr = load_trace(args.trace, args)
    step = args.step if args.step is not None else args.annotation if args.annotation else (
        tuple(args.window) if args.window else None)
    cp = tr.critical_path
    _check_selection(tr, args, step)
    if scale:
        df = cp.what_if(step, scale=scale, rank=args.rank, tail=args.tail)
        by = "what_if"
    elif args.by == "path":
        df = cp.path(step, rank=args.rank, tail=args.tail)
        df = df.head(args.limit) if args.limit else df
        by = "path"
    else:
        df = cp.summary(step, rank=args.rank, by=args.by, limit=args.limit, tail=args.tail)
        by = args.by
    if args.overlay:
        cp.overlay(args.overlay, step, rank=args.rank, tail=args.tail)
    if args.chart:
        from proftab import plot

        plot.save(cp.chart(step, rank=args.rank, scale=scale or None, tail=args.tail), args.chart)
        if not args.quiet:
            say(f"wrote {args.chart}")
    if fmt != "text":
        write_frame(df, fmt, args.output)
        return 0
    show_frame(args, df, _cols(df), title=f"proftab critical-path: {', '.join(args.trace)}"
               + (" (what-if)" if by == "what_if" else ""))
    return 0


COMMAND = Command(
    name="critical-path",
    help="critical path of each step: what bounds it (CPU, GPU, launches, syncs), and what-if",
    examples=EXAMPLES,
    add_arguments=_add_arguments,
    run=run,
)
