"""`proftab convert`: trace files into one Parquet dataset (`proftab.convert`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from proftab.cli import Command
from proftab.cli._common import add_graph_capture_argument, parse_ranks, say, shown_warnings
from proftab.exceptions import SkippedFileWarning, UsageError

if TYPE_CHECKING:
    import argparse

EXAMPLES = """\
  proftab convert trace.pt.trace.json.gz trace.pq        one trace -> a dataset directory
  proftab convert run/ run.pq                            a directory of rank files, in parallel
  proftab convert 'run/*rank-*.json.gz' run.pq --force   replace an existing dataset
  proftab convert run/ run.pq --scheduler local --workers 4     on a Dask LocalCluster
  proftab convert 's3://bucket/run/*.json.gz' /shared/run.pq --scheduler tcp://head:8786 --keep-going
  proftab convert run/ run.pq --resume                   convert only the files run.pq lacks
  proftab convert run/ run.pq --keep-going               write what converts; exit 1 naming each skipped file
  proftab convert run/ s3://bucket/job42.pq              converted locally, uploaded (manifest last)
  proftab summary s3://bucket/job42.pq                   read from the object store (lazily)
  python -c "import proftab as pt; print(pt.scan('run.pq').table())"

exit status:
  0    the dataset is written from every source file
  1    --keep-going: the dataset is written without the file(s) that failed (each named on stderr)
  2    bad input or usage: nothing is written (without --keep-going, any file that fails)
"""


def _add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("sources", nargs="+", metavar="TRACE",
                   help="a .json / .json.gz trace, a directory of rank files or a glob (several: one dataset)")
    p.add_argument("out", metavar="OUT",
                   help="the dataset directory to create, or an object-store URL (s3://..., gs://...: needs "
                        "fsspec and the store's package; credentials from its usual environment)")
    p.add_argument("--staging", default=None, metavar="DIR",
                   help="with a URL OUT: where the dataset is converted before its upload (default: the temp "
                        "directory; a shared file system for a remote --scheduler)")
    p.add_argument("--force", action="store_true", help="replace an existing dataset at OUT")
    p.add_argument("--salvage", action="store_true",
                   help="keep the complete events of a damaged or truncated file (warns what was lost)")
    p.add_argument("--ranks", type=parse_ranks, default=None, metavar="R,R,...",
                   help="explicit rank per file, in sorted file order (when files claim the same rank)")
    p.add_argument("--workers", type=int, default=None, metavar="N",
                   help="worker processes for several files (default: one per file, at most the CPUs); "
                        "with --scheduler local, the LocalCluster's workers")
    p.add_argument("--scheduler", default=None, metavar="ADDRESS",
                   help="run the per-file work on Dask: a scheduler address (tcp://host:8786) or 'local' "
                        "(a LocalCluster); needs the dask extra: pip install '.[dask]' from a checkout")
    p.add_argument("--keep-going", action="store_true",
                   help="a file that fails is left out (named on stderr; the dataset's _status.parquet says "
                        "why) instead of failing the conversion; the others are written and the exit status is "
                        "1 when a file was skipped (as make -k)")
    p.add_argument("--resume", action="store_true",
                   help="reuse the ranks an existing dataset at OUT already holds from unchanged files, and "
                        "keep finished files in .OUT.proftab-resume until done (a failed or killed run continues)")
    p.add_argument("--no-summaries", action="store_true", help="do not write the per-rank summaries")
    add_graph_capture_argument(p)


def run(args: argparse.Namespace) -> int:
    from proftab.pipeline import convert

    if args.graph_capture:  # the merged Trace is written as it is (its virtual ops and links included)
        return _convert_merged(args)
    with shown_warnings(args) as caught:
        path = convert(args.sources, args.out, force=args.force, salvage=args.salvage, max_workers=args.workers,
                       ranks=args.ranks,
                       progress="never" if args.quiet else args.progress, client=args.scheduler,
                       on_error="skip" if args.keep_going else "raise", resume=args.resume,
                       summaries=not args.no_summaries, staging=args.staging)
    skipped = [w.message.path for w in caught if isinstance(w.message, SkippedFileWarning)]
    if skipped:  # as `make -k`: what could be done is done, the run still failed
        say(f"wrote {path} without {len(skipped)} skipped file(s): {', '.join(skipped)}")
        return 1
    if not args.quiet:
        say(f"wrote {path}")
    return 0


def _convert_merged(args: argparse.Namespace) -> int:
    """`convert --graph-capture`: load the traces with the capture merged, then write the dataset."""
    import proftab as pt

    if args.scheduler or args.resume or args.keep_going:
        msg = "--graph-capture converts in this process: it cannot be combined with --scheduler, --resume or " \
              "--keep-going"
        raise UsageError(msg)
    with shown_warnings(args):
        tr = pt.load(args.sources if len(args.sources) > 1 else args.sources[0], salvage=args.salvage,
                     ranks=args.ranks, graph_capture=args.graph_capture)
        path = tr.to_parquet(args.out, force=args.force)
    if not args.quiet:
        say(f"wrote {path}")
    return 0


COMMAND = Command(
    name="convert",
    help="convert traces into a Parquet dataset (hive-partitioned by rank) for pt.scan, DuckDB, pyarrow",
    examples=EXAMPLES,
    add_arguments=_add_arguments,
    run=run,
)
