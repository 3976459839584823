"""`proftab perf`: per-op perf models, achieved vs peak, and the time lost to the roofline."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

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

    from proftab.render.table import Col

EXAMPLES = """\
  proftab perf trace.pt.trace.json.gz
      per op family: time share, achieved TFLOP/s and TB/s vs the device's peaks, time lost
  proftab perf trace.json.gz --by name --limit 20     the same per op name
  proftab perf trace.json.gz --lost 30                the op instances that lose the most time
  proftab perf trace.json.gz --ops -o ops.csv         every op instance (also .json, .md, .parquet)
  proftab perf trace.json.gz --copies                 every memcpy / memset against its bandwidth ceiling
  proftab perf trace.json.gz --peaks H100-SXM         peaks of another device (proftab.perf.peaks.PEAKS)
  proftab perf trace.json.gz --chart roofline.html    also the roofline chart (offline HTML)
"""


def _add_arguments(p: argparse.ArgumentParser) -> None:
    add_trace_arguments(p)
    what = p.add_mutually_exclusive_group()
    what.add_argument("--by", choices=["family", "name"], default="family", help="summary rows (default: family)")
    what.add_argument("--lost", type=int, default=None, metavar="N",
                      help="the N op instances with the most time lost to the roofline")
    what.add_argument("--ops", action="store_true", help="every op instance with its model")
    what.add_argument("--copies", action="store_true",
                      help="every memcpy / memset rated against its ceiling: HBM for DtoD (read + write) and "
                           "memset, the host link for HtoD / DtoH (the text view shows them per kind below the "
                           "families)")
    p.add_argument("--peaks", default=None, metavar="DEVICE",
                   help="use this device's peaks (a key of proftab.perf.peaks.PEAKS) instead of the trace's")
    p.add_argument("--limit", type=int, default=None, metavar="N",
                   help="rows to show, -1 for all (default: 50 for text, all for files)")
    p.add_argument("--chart", metavar="FILE", default=None,
                   help="also write the roofline chart: .html (offline), .json (Vega-Lite), .png / .svg / .pdf")
    add_output_arguments(p)


def _cols(df: pl.DataFrame) -> list[Col]:
    """How the perf columns print: the name or family kept, secondary columns dropped first on a terminal."""
    from proftab.render.table import Col

    drop = {"modelled_ns": 1, "flops": 2, "bytes": 3, "peak_tb_per_s": 4, "peak_tflops": 5, "event_id": 6,
            "family": 7, "n_compute_bound": 8, "bound": 9, "tb_per_s": 10, "tflops_per_s": 11,
            "moved_bytes": 2, "op_name": 5, "peak_device": 1, "ceiling": 7, "lost_ns": 6,
            # then, on a narrow terminal, everything but the key, the time and the roofline share
            "n_above_peak": 12, "above_peak": 13, "peak_dtype": 14, "n_ops": 15, "n_copies": 15, "share": 16,
            "rank": 17, "note": 18}
    cut = "name" if "name" in df.columns else "note" if "note" in df.columns else "family"
    key = "name" if "name" in df.columns else "copy" if "copy" in df.columns else "family"
    copies = "copy" in df.columns  # a copy's bytes are sizes (as moved_bytes), not a model's estimate
    return [Col(c, kind="bytes" if copies and c == "bytes" else None,
                drop=None if c == key else drop.get(c), cut=c == cut)  # the row's key is never dropped
            for c in df.columns]


def _above_peak_note(ops: pl.DataFrame, tr: Any) -> str:
    """One line when any op runs above its roofline (a rate over the device's peak), else ''."""
    import polars as pl

    above = ops.filter(pl.col("above_peak").fill_null(False))
    if above.is_empty():
        return ""
    memory = int((above["bound"] == "memory").sum())
    res = tr.files["time_resolution_ns"].max()
    why = []
    if memory:
        why.append(f"{memory} memory-bound (data likely cache-resident"
                   + (f", or short kernels under the trace's {res} ns resolution)" if res and res > 1 else ")"))
    if above.height > memory:
        why.append(f"{above.height - memory} compute-bound (check the peak dtype)")
    return f"above the peak (column above_peak): {above.height} op(s), {'; '.join(why)}"


def _copies_note(copies: pl.DataFrame, tr: Any) -> str:
    """One line when any copy runs above its ceiling's peak, else ''."""
    import polars as pl

    above = copies.filter(pl.col("above_peak").fill_null(False))
    if above.is_empty():
        return ""
    res = tr.files["time_resolution_ns"].max()
    why = (f"the trace's {res} ns resolution rounds short copies" if res and res > 1
           else "check the device's peaks (--peaks)")
    kinds = ", ".join(f"{n} {k}" for k, n in above.group_by("copy").len().sort("copy").iter_rows())
    return f"copies above the peak (column above_peak): {kinds}; {why}"


def _frame(args: argparse.Namespace) -> tuple[pl.DataFrame, list[str], list[Block]]:
    tr = load_trace(args.trace, args)
    if tr.device.activities().is_empty():
        from proftab.exceptions import UsageError

        msg = (f"{', '.join(args.trace)} has no device activity (kernels, memcpy, memset): perf rates device "
               "time; record with ProfilerActivity.CUDA (or the device's activity)")
        raise UsageError(msg)
    if args.chart:
        from proftab import plot

        plot.save(tr.perf.roofline(args.peaks), args.chart)
        if not args.quiet:
            say(f"wrote {args.chart}")
    peaks = tr.perf.device_peaks(args.peaks)
    device = peaks["device"][0] if peaks.height else "unknown device (no roofline; pass --peaks)"
    if args.peaks is None and tr.files.height > 1:  # each rank against its own device
        per = {r: (p or {}).get("device") or "unknown" for r, p in tr.perf.rank_peaks().items()}
        if len(set(per.values())) > 1:
            device = ", ".join(f"rank {r} {d}" for r, d in per.items())
    copies = tr.perf.copies(args.peaks)
    copy_note = _copies_note(copies, tr)
    if args.copies:
        if copies.is_empty():
            from proftab.exceptions import UsageError

            msg = (f"--copies: {', '.join(args.trace)} has no memcpy / memset to rate (its device time is kernels); "
                   "the families' table is `proftab perf` without --copies")
            raise UsageError(msg)
        return copies, [f"peaks: {device}", *([copy_note] if copy_note else [])], []
    cov = tr.perf.model_coverage(args.peaks).row(0, named=True)
    share = "" if cov["modelled_share"] is None else f"{cov['modelled_share'] * 100:.1f}%"
    note = (f"peaks: {device}; modelled: {share} of device time, {cov['n_unknown_ops']} op(s) without a model")
    if peaks.height and not args.ops and args.lost is None:
        note += "; a row's peak_tflops: its ops' peaks weighted by device time (peak_dtype: the one with most)"
    notes = [note, *filter(None, [_above_peak_note(tr.perf.ops(args.peaks), tr)])]
    extra = []
    if not args.ops and args.lost is None and not copies.is_empty():
        summary = tr.perf.copy_summary(args.peaks)
        extra.append(Block(summary, _cols(summary), title="copies on the bandwidth roofline (HBM: DtoD read + write, "
                                                          "memset; host link: HtoD, DtoH; --copies: each copy)",
                           notes=[copy_note] if copy_note else []))
    if args.ops:
        return tr.perf.ops(args.peaks), notes, extra
    if args.lost is not None:
        return tr.perf.lost(args.lost, args.peaks), notes, extra
    return tr.perf.summary(args.by, args.peaks), notes, extra


def run(args: argparse.Namespace) -> int:
    """Print or write the perf table; see the module docstring."""
    fmt = guess_format(args)
    df, notes, extra = _frame(args)
    if fmt != "text":
        write_frame(df if args.limit is None or args.limit < 0 else df.head(args.limit), fmt, args.output)
        return 0
    limit = 50 if args.limit is None else args.limit
    shown = df if limit < 0 else df.head(limit)
    if args.ops:  # the parameter columns are for files; the text shows the model's outcome
        keep = ["event_id", "name", "family", "device_ns", "flops", "bytes", "tflops_per_s", "tb_per_s", "bound",
                "roofline_share", "lost_ns"]
        shown = shown.select([c for c in keep if c in shown.columns])
    show_frames(args, [Block(shown, _cols(shown), title=f"proftab perf: {', '.join(args.trace)}", notes=notes),
                       *extra])
    return 0


COMMAND = Command(
    name="perf",
    help="perf models per op: FLOPs, bytes, achieved TFLOP/s and TB/s, roofline",
    examples=EXAMPLES,
    add_arguments=_add_arguments,
    run=run,
)
