"""`proftab modules TRACE`: host and device time per nn.Module, forward and backward."""

from __future__ import annotations

from typing import TYPE_CHECKING

from proftab.cli import Command
from proftab.cli._common import (
    add_output_arguments,
    add_trace_arguments,
    guess_format,
    load_trace,
    show_frame,
    write_frame,
)

if TYPE_CHECKING:
    import argparse

EXAMPLES = """\
  proftab modules trace.json.gz                 the module tree (with_stack / with_modules traces)
  proftab modules trace.json.gz --depth 2       modules down to depth 2 (0: the root modules)
  proftab modules trace.json.gz --by type       one row per module class (Linear, LayerNorm, ...)
  proftab modules trace.json.gz --step 6        one ProfilerStep#6
  proftab modules trace.json.gz -o modules.csv  every column (also .json, .md, .parquet)
  proftab modules trace.json.gz --source user_annotation   record_function ranges as the tree
  proftab modules trace.json.gz --chart modules.html --metric device   icicle of the tree
  proftab modules compiled.json.gz --compiled --compile-provenance debug_dir/   torch.compile kernel time per module
"""


def _add_arguments(p: argparse.ArgumentParser) -> None:
    from proftab.modules import SOURCES

    add_trace_arguments(p)
    p.add_argument("--depth", type=int, default=None, metavar="N", help="deepest module level shown (0: roots)")
    p.add_argument("--by", choices=["path", "type"], default="path", help="per module path (default) or class")
    p.add_argument("--step", type=int, default=None, metavar="N", help="only ProfilerStep#N")
    p.add_argument("--source", choices=["auto", *SOURCES], default="auto",
                   help="module frames: nn.Module frames (auto when present), else user annotations")
    p.add_argument("--compiled", action="store_true",
                   help="torch.compile: generated-kernel time per module from Inductor's provenance "
                        "(with --compile-provenance; docs/compiled.md)")
    p.add_argument("--root", default="model", metavar="NAME",
                   help="--compiled: the compiled module's name, the first path component (default: model)")
    p.add_argument("--limit", type=int, default=None, metavar="N", help="rows shown (default: all)")
    p.add_argument("--chart", metavar="FILE", default=None,
                   help="also write the module icicle (.html, .json; .png/.svg with vl-convert)")
    p.add_argument("--metric", choices=["host", "device", "bwd_host", "bwd_device"], default="host",
                   help="--chart: the time drawn (default: host)")
    add_output_arguments(p)


def run(args: argparse.Namespace) -> int:
    """Print or write the module table."""
    from proftab.exceptions import ProftabError
    from proftab.modules._render import modules_text_frame

    if args.depth is not None and args.by != "path":
        msg = "--depth applies to --by path"
        raise ProftabError(msg)
    fmt = guess_format(args)
    tr = load_trace(args.trace, args)
    if args.compiled:
        if args.by != "path" or args.step is not None or args.source != "auto" or args.chart:
            msg = "--compiled takes only --depth, --root, --limit and the output options"
            raise ProftabError(msg)
        table = tr.modules.modules(compiled=True, depth=args.depth, root=args.root)
        if table.is_empty():
            msg = f"no compiled regions or generated kernels in {', '.join(args.trace)}"
            raise ProftabError(msg)
    else:
        table = tr.modules.modules(by=args.by, depth=args.depth, step=args.step, source=args.source)
    if table.is_empty():
        msg = (f"no module frames in {', '.join(args.trace)} (record with with_stack=True or with_modules=True, "
               "or use record_function ranges)")
        raise ProftabError(msg)
    fell_back = not args.compiled and args.source == "auto" and tr.modules.frame_source() == "user_annotation"
    if fell_back and not args.quiet:
        import sys

        print("proftab: note: no nn.Module frames (record with with_stack=True or with_modules=True): the rows are "
              "the trace's record_function ranges (--source user_annotation)", file=sys.stderr)
    if args.chart:
        from proftab.plot import save

        save(tr.modules.icicle(args.metric, max_depth=8 if args.depth is None else args.depth, step=args.step,
                               source=args.source), args.chart)
    if fmt != "text":
        write_frame(table if args.limit is None else table.head(args.limit), fmt, args.output)
        return 0
    frame, cols = modules_text_frame(table, tr.modules.tree(args.source), by=args.by, limit=args.limit)
    show_frame(args, frame, cols)
    return 0


COMMAND = Command(
    name="modules",
    help="time per nn.Module (host, device, forward, backward) from with_stack / with_modules traces",
    examples=EXAMPLES,
    add_arguments=_add_arguments,
    run=run,
)
