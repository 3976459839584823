"""Helpers shared by the subcommands: loading with progress and warnings, output formats."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import sys
import warnings
from typing import TYPE_CHECKING

from proftab.exceptions import UsageError

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

    import polars as pl

    from proftab.render.table import Col
    from proftab.trace import Trace

__all__ = ["FORMATS", "Block", "add_graph_capture_argument", "add_output_arguments", "add_trace_arguments",
           "guess_format", "load_trace", "rich_console", "say", "show_frame", "show_frames", "shown_warnings",
           "write_frame", "write_text"]

FORMATS = ("text", "csv", "json", "markdown", "parquet")
_EXTENSIONS = {".csv": "csv", ".json": "json", ".md": "markdown", ".markdown": "markdown",
               ".parquet": "parquet", ".pq": "parquet", ".txt": "text"}


def add_trace_arguments(p: argparse.ArgumentParser, *, many: bool = True, dest: str = "trace") -> None:
    """The TRACE argument(s) and `--salvage`."""
    p.add_argument(dest, nargs="+" if many else None, metavar="TRACE",
                   help="a .json / .json.gz trace, a directory of rank files, a glob, or a proftab "
                        "dataset written by `convert`"
                        + (" (several: loaded as one multi-rank trace)" if many else ""))
    p.add_argument("--salvage", action="store_true",
                   help="keep the complete events of a damaged or truncated file (warns what was lost)")
    p.add_argument("--ranks", type=parse_ranks, default=None, metavar="R,R,...",
                   help="explicit rank per file, in sorted file order (when files claim the same rank)")
    p.add_argument("--compile-provenance", action="append", default=None, metavar="PATH",
                   help="Inductor provenance of a torch.compile run: the TORCH_COMPILE_DEBUG / TORCH_TRACE "
                        "directory, a trace log or the node-mappings JSON (repeatable; docs/compiled.md)")
    add_graph_capture_argument(p)


def add_graph_capture_argument(p: argparse.ArgumentParser) -> None:
    """`--graph-capture PATH` (repeatable): CUDA / HIP graph capture traces merged into the trace."""
    p.add_argument("--graph-capture", action="append", default=None, metavar="PATH",
                   help="a graph capture trace, or a directory of them (repeatable): each graph replay's "
                        "kernels are attributed to the ops that captured them (docs/device.md, CUDA graphs)")


def parse_ranks(text: str) -> list[int]:
    """`--ranks 0,1,2` -> [0, 1, 2]."""
    try:
        return [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        msg = f"--ranks takes comma-separated integers, got {text!r}"
        raise argparse.ArgumentTypeError(msg) from None


def add_output_arguments(p: argparse.ArgumentParser, *, default_note: str = "") -> None:
    """`--format` and `-o`."""
    p.add_argument("--format", choices=FORMATS, default=None,
                   help="output format (default: from the -o extension, else text)" + default_note)
    p.add_argument("-o", "--output", metavar="FILE", default=None,
                   help="write to FILE instead of stdout")
    p.add_argument("--plain", action="store_true",
                   help="plain text even on a terminal (text output is rich on a terminal when "
                        "the `rich` package is installed, plain when piped)")


def guess_format(args: argparse.Namespace) -> str:
    """The output format: `--format`, else from the `-o` extension, else text."""
    if args.format:
        return str(args.format)
    if args.output:
        name = args.output.lower()
        for ext, fmt in _EXTENSIONS.items():
            if name.endswith(ext):
                return fmt
        ext = os.path.splitext(name)[1]
        if ext:  # never text in a file whose name promises something else (an .xlsx that Excel rejects)
            valid = ", ".join(sorted(_EXTENSIONS))
            msg = (f"cannot write {ext!r} files: use {valid} (Excel opens .csv), or --format to force one"
                   if ext not in (".xlsx", ".xls") else
                   f"proftab does not write Excel workbooks ({ext!r}): write .csv (Excel opens it) or .parquet")
            raise UsageError(msg)
    return "text"


@contextlib.contextmanager
def shown_warnings(args: argparse.Namespace) -> Iterator[list[warnings.WarningMessage]]:
    """Catch every warning of the block; print them as ``proftab: warning: ...`` lines on
    stderr when it succeeds, unless `--quiet`. Yields the list the warnings are caught into."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield caught
    if not args.quiet:
        for w in caught:
            text = "; ".join(line.strip() for line in str(w.message).splitlines() if line.strip())
            say(f"warning: {text}")


def say(message: str) -> None:
    """Print ``proftab: MESSAGE`` on stderr, control characters (a file name's too) escaped."""
    from proftab.render.sanitize import sanitize_text

    print(f"proftab: {sanitize_text(message)}", file=sys.stderr)


def load_trace(sources: list[str] | str, args: argparse.Namespace, *, nest: bool = True) -> Trace:
    """`pt.load` the sources with the CLI's progress bar and warning display.

    A proftab Parquet dataset (the directory `convert` wrote, or its `_proftab.json`) is
    opened with `pt.scan` instead. ProftabWarnings (and other warnings) are printed as
    ``proftab: warning: ...`` lines on stderr unless `--quiet`.
    """
    import proftab as pt
    from proftab.io.dataset.layout import dataset_root
    from proftab.io.dataset.remote import is_remote
    from proftab.io.files import expand_sources
    from proftab.progress import Progress

    items = [sources] if isinstance(sources, str) else list(sources)
    provenance = getattr(args, "compile_provenance", None)
    capture = getattr(args, "graph_capture", None)
    if capture and any(is_remote(i) or dataset_root(i) is not None for i in items):
        msg = "--graph-capture merges into trace files, not a converted dataset (convert with --graph-capture)"
        raise UsageError(msg)
    if len(items) == 1 and is_remote(items[0]):  # a dataset on an object store
        with shown_warnings(args):
            return _with_provenance(pt.scan(items[0]), provenance)
    if len(items) == 1 and (root := dataset_root(items[0])) is not None:
        with shown_warnings(args):
            return _with_provenance(pt.scan(root), provenance)
    paths = expand_sources(sources)
    with shown_warnings(args), Progress(paths, "never" if args.quiet else args.progress) as progress:
        tr = pt.load(paths if len(paths) > 1 else paths[0], salvage=bool(getattr(args, "salvage", False)),
                     ranks=getattr(args, "ranks", None), compile_provenance=provenance,
                     graph_capture=capture or None)
        if nest:
            progress.phase("nesting")
            _ = tr.collect("nested")
    return tr


def _with_provenance(tr: Trace, provenance: list[str] | None) -> Trace:
    """`tr` with `--compile-provenance` read (a scanned dataset gets it the way `pt.load` does)."""
    if not provenance:
        return tr
    from proftab.io.inductor import with_provenance

    return with_provenance(tr, provenance)


def rich_console(args: argparse.Namespace, stream: object = None) -> object | None:
    """A `rich.console.Console` for stdout when it is a terminal and rich is installed, else None."""
    stream = sys.stdout if stream is None else stream
    if getattr(args, "plain", False) or getattr(args, "output", None):
        return None
    if not getattr(stream, "isatty", lambda: False)() or os.environ.get("TERM") == "dumb":
        return None
    try:
        from rich.console import Console
    except ImportError:
        return None
    return Console(file=stream)  # type: ignore[arg-type]


@dataclasses.dataclass(frozen=True)
class Block:
    """One table of a subcommand's text output: a frame, how its columns print, a title, notes."""

    frame: pl.DataFrame
    cols: Sequence[Col] | None = None
    title: str | None = None
    notes: Sequence[str] = ()
    row_styles: Sequence[str | None] | None = None


def show_frames(args: argparse.Namespace, blocks: Sequence[Block | str]) -> None:
    """Render `blocks` (tables, or lines of text) with `proftab.render.table`: rich tables on a
    terminal (fitted to its width), plain text when piped, with `--plain` or to `-o FILE`."""
    from proftab.render.sanitize import sanitize_text
    from proftab.render.table import render_frame

    console = rich_console(args)
    parts: list[str] = []
    for b in blocks:
        if isinstance(b, str):
            if console is not None:
                from rich.text import Text

                console.print(Text(sanitize_text(b, keep="\n")))  # type: ignore[attr-defined]
            else:
                parts.append(sanitize_text(b, keep="\n") + "\n")
            continue
        text = render_frame(b.frame, b.cols, title=b.title, notes=b.notes, console=console, row_styles=b.row_styles)
        if text is not None:
            parts.append(("\n" if parts and b.title else "") + text)
    if console is None:
        write_text("".join(parts), getattr(args, "output", None))


def show_frame(args: argparse.Namespace, df: pl.DataFrame, cols: Sequence[Col] | None = None, *,
               title: str | None = None, notes: Sequence[str] = ()) -> None:
    """`show_frames` of one table."""
    show_frames(args, [Block(df, cols, title, notes)])


def _flat(df: pl.DataFrame) -> pl.DataFrame:
    """List columns as '; '-joined text (for CSV and Markdown)."""
    import polars as pl

    lists = [c for c, t in df.schema.items() if isinstance(t, pl.List)]
    return df.with_columns(pl.col(c).list.join("; ") for c in lists) if lists else df


def markdown_table(df: pl.DataFrame) -> str:
    """A GitHub-flavoured Markdown table of `df` (pipes and newlines in cells escaped)."""
    import polars as pl

    flat = _flat(df)
    text = flat.select(
        pl.col(c).cast(pl.String).fill_null("").str.replace_all("|", r"\|", literal=True)
        .str.replace_all("\n", " ", literal=True) for c in flat.columns)
    numeric = [t.is_numeric() for t in flat.dtypes]
    lines = ["| " + " | ".join(h.replace("|", r"\|") for h in flat.columns) + " |",
             "|" + "|".join("---:" if num else "---" for num in numeric) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in text.iter_rows()]
    return "\n".join(lines) + "\n"


def write_frame(df: pl.DataFrame, fmt: str, output: str | None) -> None:
    """Write `df` as csv / json / markdown / parquet to `output` (stdout when None)."""
    if fmt == "parquet":
        if output is None:
            msg = "--format parquet needs -o FILE"
            raise UsageError(msg)
        df.write_parquet(output)
        return
    if fmt == "csv":
        text = _flat(df).write_csv()
    elif fmt == "json":
        text = df.write_json() + "\n"
    elif fmt == "markdown":
        text = markdown_table(df)
    else:  # pragma: no cover - callers handle text
        msg = f"unknown format {fmt!r}"
        raise UsageError(msg)
    write_text(text, output)


def write_text(text: str, output: str | None) -> None:
    """Write `text` to `output`, or to stdout (on a terminal with control characters escaped)."""
    if output is None:
        if sys.stdout.isatty():
            from proftab.render.sanitize import sanitize_text

            text = sanitize_text(text, keep="\n\t")
        sys.stdout.write(text)
        sys.stdout.flush()
    else:
        with open(output, "w", encoding="utf-8") as fh:
            fh.write(text)
