"""`proftab compiled TRACE`: torch.compile's generated kernels mapped to FX nodes, ops, modules and source lines."""

from __future__ import annotations

from typing import TYPE_CHECKING

from proftab.cli import Command
from proftab.cli._common import add_output_arguments, add_trace_arguments, guess_format, load_trace, write_frame

if TYPE_CHECKING:
    import argparse

    import polars as pl

EXAMPLES = """\
  proftab compiled run.json.gz                                  kernel time per aten op (from kernel names: a guess)
  proftab compiled run.json.gz --compile-provenance debug/ --by source   per model source line (exact mapping)
  proftab compiled run.json.gz --compile-provenance debug/ --by module   per nn.Module path
  proftab compiled run.json.gz --by kernels -o kernels.csv      one row per generated-kernel event
  proftab compiled run.json.gz --by regions                     per compiled graph: calls, time, recompiles
  proftab compiled run.json.gz --against eager.json.gz          eager vs compiled, op by op (pt.diff)
"""

VIEWS = ("op", "module", "source", "node", "kernels", "regions")


def _add_arguments(p: argparse.ArgumentParser) -> None:
    add_trace_arguments(p)
    p.add_argument("--by", choices=VIEWS, default="op",
                   help="kernel time per aten op (default), module, source line or FX node; or the kernels / "
                        "regions tables")
    p.add_argument("--against", metavar="EAGER", default=None,
                   help="an eager trace of the same model: print pt.diff(EAGER, this trace with generated "
                        "kernels counted as their aten ops)")
    p.add_argument("--limit", type=int, default=None, metavar="N", help="rows shown (default: all)")
    add_output_arguments(p)


def _table(tr: object, by: str) -> pl.DataFrame:
    ns = tr.compiled  # type: ignore[attr-defined]
    if by == "kernels":
        out: pl.DataFrame = ns.kernels()
    elif by == "regions":
        out = ns.regions()
    else:
        out = getattr(ns, f"by_{by}")()
    return out


def _text(df: pl.DataFrame) -> str:
    from proftab.render.text import fmt_ns, fmt_share, plain_table
    from proftab.units import NS_SUFFIX

    headers = list(df.columns)
    rows = []
    for r in df.iter_rows():
        cells = []
        for name, v in zip(headers, r, strict=True):
            if v is None:
                cells.append("")
            elif name.endswith(NS_SUFFIX) and isinstance(v, int):
                cells.append(fmt_ns(v))
            elif name == "share" and isinstance(v, float):
                cells.append(fmt_share(v))
            elif isinstance(v, list):
                cells.append(", ".join(str(x) for x in v))
            else:
                cells.append(str(v))
        rows.append(cells)
    aligns = "".join(">" if df.schema[c].is_numeric() else "<" for c in headers)
    return plain_table(headers, rows, aligns)


def run(args: argparse.Namespace) -> int:
    """Print or write one compiled view, or the eager-vs-compiled diff."""
    from proftab.cli._common import write_text

    fmt = guess_format(args)
    tr = load_trace(args.trace, args)
    if args.against is not None:
        from proftab.diff import diff

        eager = load_trace(args.against, args)
        table = diff(eager, tr.compiled.key_averages())
    else:
        table = _table(tr, args.by)
    shown = table if args.limit is None else table.head(args.limit)
    if fmt != "text":
        write_frame(shown, fmt, args.output)
        return 0
    if "stacks" in shown.columns:  # Python tracebacks: their count in the text view, the text in -o files
        shown = shown.with_columns(shown["stacks"].list.len().alias("stacks"))
    prov = "provenance" if tr.compiled.provenance is not None else "no provenance: ops from kernel names (a guess)"
    from proftab.render.sanitize import sanitize_text

    title = sanitize_text(f"proftab compiled  {', '.join(args.trace)}  ({prov})")  # one line: a file name's \n too
    write_text(title + "\n" + _text(shown) + f"{table.height:,} rows ({shown.height:,} shown)\n", args.output)
    return 0


COMMAND = Command(
    name="compiled",
    help="torch.compile: generated kernels' time per FX node, aten op, nn.Module and source line",
    examples=EXAMPLES,
    add_arguments=_add_arguments,
    run=run,
)
