"""`proftab diff A B`: per-op calls, self and total of two traces, largest change first."""

from __future__ import annotations

from typing import TYPE_CHECKING

from proftab.cli import Command
from proftab.cli._common import (
    Block,
    add_output_arguments,
    guess_format,
    load_trace,
    show_frames,
    write_frame,
    write_text,
)

if TYPE_CHECKING:
    import argparse

    from proftab.render.table import Col

EXAMPLES = """\
  proftab diff before.json.gz after.json.gz                  largest absolute self-time change first
  proftab diff run_a/ run_b/ --normalize step --limit 20     multi-rank dirs, per-step averages
  proftab diff a.json.gz b.json.gz --sort total --status added --status removed
  proftab diff a.json.gz b.json.gz -o diff.csv               all rows as CSV (also .json, .md, .parquet)
  proftab diff base/ new/ --stats                            per-step test per key (docs/diff.md)
  proftab diff base.json.gz new.json.gz --gate --threshold 2% --alpha 0.01
                                                             exit 1 on a significant regression > 2% of the step
  proftab diff base.json.gz new.json.gz --gate --format markdown -o comment.md   a PR comment
"""


def _add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("a", metavar="A", help="baseline trace (file, directory of rank files or glob)")
    p.add_argument("b", metavar="B", help="new trace")
    p.add_argument("--salvage", action="store_true", help="keep the complete events of damaged files")
    p.add_argument("--sort", choices=["self", "total", "calls"], default="self",
                   help="order by the absolute change of this (default: self)")
    p.add_argument("--normalize", choices=["rank", "step"], default=None,
                   help="divide each side by its number of ranks or ProfilerSteps")
    p.add_argument("--group-by-input-shape", action="store_true", help="match ops on input shapes too")
    p.add_argument("--status", action="append", choices=["added", "removed", "changed", "same"], default=None,
                   help="keep only rows of this status (repeatable; default: all but 'same')")
    p.add_argument("--limit", type=int, default=None, metavar="N",
                   help="rows to show, -1 for all (default: 30 for text, all for files)")
    g = p.add_argument_group("statistics (docs/diff.md)")
    g.add_argument("--stats", action="store_true",
                   help="compare per-step samples with a Mann-Whitney U test per key (Holm-corrected)")
    g.add_argument("--gate", action="store_true",
                   help="implies --stats; exit 1 when a significant regression exceeds --threshold, naming it")
    g.add_argument("--threshold", type=_fraction, default=0.02, metavar="F",
                   help="smallest regression the gate fails on, as a share of the baseline step time: "
                        "2%% or 0.02 (default 2%%)")
    g.add_argument("--alpha", type=float, default=0.01,
                   help="family-wise error rate; CIs are at 1 - alpha (default 0.01)")
    g.add_argument("--warmup", type=int, default=2, metavar="N", help="first steps of each rank left out (default 2)")
    g.add_argument("--window", default=None, metavar="NAME",
                   help="record_function name whose ranges are the steps (default: ProfilerStep#N)")
    add_output_arguments(p)


def _fraction(text: str) -> float:
    import argparse

    try:
        return float(text[:-1]) / 100 if text.endswith("%") else float(text)
    except ValueError:
        msg = f"not a share: {text!r} (write 2% or 0.02)"
        raise argparse.ArgumentTypeError(msg) from None


def _run_stats(args: argparse.Namespace, fmt: str) -> int:
    import polars as pl

    from proftab.diff import diff
    from proftab.diff_stats import headline, regressions, report_markdown
    from proftab.exceptions import UsageError

    if args.normalize or args.group_by_input_shape or args.sort != "self" or args.status:
        msg = "--stats / --gate match keys by module, op and shapes: drop --normalize, --group-by-input-shape, " \
              "--sort and --status"
        raise UsageError(msg)
    a = load_trace(args.a, args)
    b = load_trace(args.b, args)
    d = diff(a, b, stats=True, warmup=args.warmup, window=args.window, alpha=args.alpha)
    reg = regressions(d, args.threshold)
    if fmt == "markdown":
        write_text(report_markdown(d, threshold=args.threshold, alpha=args.alpha, base=args.a, new=args.b),
                   args.output)
    elif fmt != "text":
        limit = args.limit if args.limit is not None else -1
        write_frame(d.head(limit) if limit >= 0 else d, fmt, args.output)
    else:
        unit = d["unit"][0] if d.height else "step"
        lines = [f"proftab diff --stats  A: {args.a}  B: {args.b}"]
        if unit == "event":
            lines.append("note: fewer than two steps per rank after the warm-up: event-level samples, deltas per trace")
        sig = d.filter(pl.col("significant") & (pl.col("delta_ns") != 0))
        limit = args.limit if args.limit is not None else 30
        lines.append(f"{d.height:,} keys compared, {sig.height:,} significant at alpha={args.alpha:g} (Holm); "
                     f"{d.filter(pl.col('status') == 'added').height} added, "
                     f"{d.filter(pl.col('status') == 'removed').height} removed")
        for r in (sig.head(limit) if limit >= 0 else sig).iter_rows(named=True):
            lines.append("  " + headline(r))
        write_text("\n".join(lines) + "\n", args.output)
    if args.gate:
        import sys

        if reg.height:
            sys.stderr.write(f"proftab: gate FAILED: {reg.height} significant regression(s) larger than "
                             f"{args.threshold:.1%} of the step; first: {headline(reg.row(0, named=True))}\n")
            return 1
        sys.stderr.write(f"proftab: gate passed: no significant regression larger than {args.threshold:.1%} "
                         "of the step\n")
    return 0


def _cols(fractional: bool) -> list[Col]:
    """How the diff columns print (deltas signed; calls with 2 decimals when normalized)."""
    from proftab.render.table import Col

    calls = "float" if fractional else "count"
    return [Col("name", header="Name", cut=True, max_width=60), Col("device_type", header="Device", drop=3),
            Col("status", header="Status", drop=4), Col("calls_a", header="Calls A", kind=calls, drop=5),
            Col("calls_b", header="Calls B", kind=calls, drop=6), Col("self_ns_a", header="Self A", kind="ns"),
            Col("self_ns_b", header="Self B", kind="ns"), Col("self_delta_ns", header="Self Δ", kind="ns_signed"),
            Col("self_rel", header="Self Δ%", kind="share_signed", drop=7),
            Col("total_ns_a", header="Total A", kind="ns", drop=0), Col("total_ns_b", header="Total B", kind="ns",
                                                                        drop=1),
            Col("total_delta_ns", header="Total Δ", kind="ns_signed", drop=2)]


def run(args: argparse.Namespace) -> int:
    """Load both traces, diff them, print or write the rows."""
    import polars as pl

    from proftab.diff import diff

    fmt = guess_format(args)
    if args.stats or args.gate:
        return _run_stats(args, fmt)
    a = load_trace(args.a, args)
    b = load_trace(args.b, args)
    d = diff(a, b, group_by_input_shape=args.group_by_input_shape, normalize=args.normalize, sort=args.sort)
    keep = args.status or ["added", "removed", "changed"]
    d = d.filter(pl.col("status").is_in(keep))
    limit = args.limit if args.limit is not None else (30 if fmt == "text" else -1)
    shown = d.head(limit) if limit >= 0 else d
    if fmt != "text":
        write_frame(shown, fmt, args.output)
        return 0
    title = f"proftab diff  A: {args.a}  B: {args.b}" + (f"  (per {args.normalize})" if args.normalize else "")
    footer = f"{d.height:,} rows differ ({shown.height:,} shown); Δ = B - A; Σ self Δ {_total(d, 'self_delta_ns')}"
    styles = [None if v is None or v == 0 else "green" if v < 0 else "red" for v in shown["self_delta_ns"]]
    show_frames(args, [Block(shown, _cols(d.schema["calls_a"] == pl.Float64), title, [footer], styles)])
    return 0


def _total(d: object, col: str) -> str:
    import polars as pl

    from proftab.render.text import fmt_ns

    assert isinstance(d, pl.DataFrame)
    return fmt_ns(int(d[col].sum() or 0), signed=True)


COMMAND = Command(
    name="diff",
    help="compare two traces op by op: calls, self and total, largest change first",
    examples=EXAMPLES,
    add_arguments=_add_arguments,
    run=run,
)
