"""`proftab plot KIND TRACE -o out.html`: write a chart (HTML; PNG/SVG with vl-convert)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from proftab.cli import Command
from proftab.cli._common import add_trace_arguments, load_trace, say
from proftab.exceptions import UsageError

if TYPE_CHECKING:
    import argparse

EXAMPLES = """\
  proftab plot top trace.json.gz -o top.html                 top 20 ops, self vs total CPU time
  proftab plot top trace.json.gz --metric device -n 30 -o kernels.html
  proftab plot timeline trace.json.gz --step 6 -o step6.html per thread and stream, one step
  proftab plot tree trace.json.gz --max-depth 10 -o tree.png icicle of the call tree (PNG needs vl-convert)
  proftab plot steps run/ --rank 0 -o steps.svg              per-step stacked self time
  proftab plot roofline trace.json.gz -o roofline.html       log-log roofline of the ops (perf models)
  proftab plot critical-path trace.json.gz --step 6 -o cp.html   the step's timeline, its critical path marked
"""


def _add_arguments(p: argparse.ArgumentParser) -> None:
    from proftab.plot import KINDS

    p.add_argument("kind", choices=KINDS, metavar="KIND",
                   help="top (top-N ops), timeline (Gantt of a step), tree (call-tree icicle), "
                        "steps (per-step stacked bars), roofline (perf models), critical-path (a step's path)")
    add_trace_arguments(p)
    p.add_argument("-o", "--output", metavar="FILE", required=True,
                   help="output file: .html, .json (Vega-Lite), .png / .svg / .pdf (vl-convert-python)")
    p.add_argument("-n", "--limit", type=int, default=None, metavar="N",
                   help="ops shown (top: 20, steps: 8)")
    p.add_argument("--metric", choices=["cpu", "device"], default="cpu", help="top, steps: cpu or device time")
    p.add_argument("--step", type=int, default=None, metavar="N", help="timeline: ProfilerStep#N (default: first)")
    p.add_argument("--rank", type=int, default=None,
                   help="timeline: rank to draw (default: lowest); steps: only this rank (default: all summed)")
    p.add_argument("--max-depth", type=int, default=None, metavar="D",
                   help="timeline (default 3), tree (default 8): deepest level drawn")
    p.add_argument("--python", action="store_true",
                   help="keep python_function frames (default: ops only; a frame's time goes to the op above it)")
    p.add_argument("--device", action="store_true", help="tree: include device streams")
    p.add_argument("--peaks", default=None, metavar="DEVICE",
                   help="roofline: this device's peaks (a key of proftab.perf.peaks.PEAKS) instead of the trace's")


def run(args: argparse.Namespace) -> int:
    """Build the chart and save it."""
    from proftab import plot

    out = args.output.lower()
    if not out.endswith((".html", ".json", ".png", ".svg", ".pdf")):
        msg = f"unknown chart file type for {args.output!r}; use .html, .json, .png, .svg or .pdf"
        raise UsageError(msg)
    tr = load_trace(args.trace, args)
    if args.kind in ("top", "steps") and args.metric == "device" and tr.device.activities().is_empty():
        msg = (f"--metric device: {', '.join(args.trace)} has no device activity (kernels, memcpy, memset), so the "
               "chart would be empty; use --metric cpu, or record with ProfilerActivity.CUDA")
        raise UsageError(msg)
    if args.kind == "top":
        chart = plot.top_ops(tr, args.limit or 20, metric=args.metric, python=args.python)
    elif args.kind == "timeline":
        chart = plot.timeline(tr, args.step, rank=args.rank, python=args.python,
                              max_depth=3 if args.max_depth is None else args.max_depth)
    elif args.kind == "tree":
        chart = plot.icicle(tr, max_depth=8 if args.max_depth is None else args.max_depth, device=args.device,
                            python=args.python)
    elif args.kind == "steps":
        chart = plot.steps(tr, args.limit or 8, metric=args.metric, python=args.python, rank=args.rank)
    elif args.kind == "roofline":
        chart = tr.perf.roofline(args.peaks)
    else:
        chart = tr.critical_path.chart(args.step, rank=args.rank,
                                       max_depth=2 if args.max_depth is None else args.max_depth)
    plot.save(chart, args.output)
    if not args.quiet:
        say(f"wrote {args.output}")
    return 0


COMMAND = Command(
    name="plot",
    help="write a chart: top ops, step timeline, call-tree icicle, per-step bars, roofline, critical path",
    examples=EXAMPLES,
    add_arguments=_add_arguments,
    run=run,
)
