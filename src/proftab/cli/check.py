"""`proftab check`: the anomalies and accounting report of a trace, a CI gate with `--strict`.

Findings: rejected input events, anomalies (`Trace.anomalies`: overruns, negative
durations, unmatched begins, unfinished ops, repaired names), repaired args, file
accounting that does not add up, and device time that no host op launched
(`Trace.device.unattributed`). Timestamps rounded to the ns are reported but are not
findings.
"""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from proftab import kinds
from proftab.cli import Command
from proftab.cli._common import add_trace_arguments, load_trace, rich_console, write_text

if TYPE_CHECKING:
    from proftab.trace import Trace

EXAMPLES = """\
  proftab check trace.json.gz                  report only (exit 0 unless the input is bad)
  proftab check trace.json.gz --strict         exit 1 when anything is found (CI)
  proftab check run/ --strict --allow overrun  tolerate overruns, fail on everything else
  proftab check trace.json.gz --format json    the report as JSON (for scripts)
"""

KINDS = ("rejected", "overrun", "negative_dur", "unmatched_begin", "unfinished", "name_repaired",
         "args_repaired", "accounting", "unattributed_device")


def _add_arguments(p: argparse.ArgumentParser) -> None:
    add_trace_arguments(p)
    p.add_argument("--strict", action="store_true", help="exit 1 when anything is found")
    p.add_argument("--allow", action="append", default=[], choices=KINDS, metavar="KIND",
                   help=f"a finding kind that --strict tolerates (repeatable): {', '.join(KINDS)}")
    p.add_argument("--examples", type=int, default=5, metavar="N", help="examples shown per kind (default 5)")
    p.add_argument("--format", choices=["text", "json"], default="text")
    p.add_argument("-o", "--output", metavar="FILE", default=None, help="write the report to FILE")
    p.add_argument("--plain", action="store_true", help="plain text even on a terminal")


def _device_report(tr: Trace, n_examples: int) -> dict[str, Any]:
    """Device activities no host op launched (`Trace.device.unattributed`), longest first."""
    if kinds.use_device(tr.categories) is None:
        return {"status": "no device activity"}
    un = tr.device.unattributed()
    return {"status": "checked", "activities": un.height, "dur_ns": int(un["dur_ns"].sum() or 0),
            "examples": un.sort("dur_ns", descending=True).head(n_examples).select(
                "name", "dur_ns", "start_ns", "link").to_dicts()}


def report(tr: Trace, n_examples: int = 5) -> dict[str, Any]:
    """The check report as plain data: findings by kind with counts and examples."""
    import polars as pl

    from proftab.schema import Flag

    findings: dict[str, dict[str, Any]] = {}
    acc = tr.collect("accounting")
    parts = ["events_in", "instants", "flows", "counters", "metadata", "rejected"]
    bad = acc.filter(pl.sum_horizontal(parts) != pl.col("trace_events"))
    findings["accounting"] = {"count": bad.height, "examples": bad.head(n_examples).to_dicts()}
    rej = tr.collect("rejected")
    findings["rejected"] = {"count": rej.height, "examples": rej.head(n_examples).to_dicts()}
    an = tr.anomalies
    for kind in ("overrun", "negative_dur", "unmatched_begin", "unfinished", "name_repaired"):
        sub = an.filter(pl.col("kind") == kind)
        if kind == "overrun":
            sub = sub.sort("overrun_ns", descending=True)
        cols = ["rank", "event_id", "name", "cat", "tid", "dur_ns"] + (
            ["parent_name", "overrun_ns"] if kind == "overrun" else [])
        findings[kind] = {"count": sub.height,
                          "examples": sub.head(n_examples).select(pl.col(c).cast(pl.String) if c == "cat" else c
                                                                  for c in cols).to_dicts()}
        if kind == "overrun":
            findings[kind]["max_overrun_ns"] = int(sub["overrun_ns"].max() or 0)
    args_rep = tr.collect("events").filter((pl.col("flags") & int(Flag.ARGS_REPAIRED)) != 0)
    findings["args_repaired"] = {"count": args_rep.height,
                                 "examples": args_rep.head(n_examples).select("rank", "event_id", "name").to_dicts()}
    dev = _device_report(tr, n_examples)
    findings["unattributed_device"] = {"count": int(dev.get("activities", 0)), **dev}
    info = {
        "files": acc.select("path", "rank", "trace_events", *parts).to_dicts(),
        "events": tr.collect("events").height,
        "ts_rounded": int(((tr.collect("events")["flags"] & int(Flag.TS_ROUNDED)) != 0).sum()),
        "dur_missing": int(((tr.collect("events")["flags"] & int(Flag.DUR_MISSING)) != 0).sum()),
    }
    return {"findings": findings, "info": info}


def _text(rep: dict[str, Any], strict_kinds: list[str]) -> str:
    from proftab.render.text import fmt_ns, plain_table

    out: list[str] = []
    files = rep["info"]["files"]
    out.append("accounting (input array elements by table):")
    out.append(plain_table(
        ["file", "rank", "traceEvents", "events", "instants", "flows", "counters", "metadata", "rejected"],
        [[f["path"], str(f["rank"]), *(f"{f[k]:,}" for k in ("trace_events", "events_in", "instants", "flows",
                                                                "counters", "metadata", "rejected"))]
         for f in files]).rstrip())
    out.append(f"timestamps rounded to the ns: {rep['info']['ts_rounded']:,}; "
               f"X events without dur: {rep['info']['dur_missing']:,}")
    out.append("")
    rows = []
    for kind in KINDS:
        f = rep["findings"][kind]
        extra = ""
        if kind == "overrun" and f["count"]:
            extra = f"worst {fmt_ns(f['max_overrun_ns'])}"
        if kind == "unattributed_device":
            extra = f["status"] + (f", {fmt_ns(f['dur_ns'])}" if f.get("dur_ns") else "")
        rows.append([kind, f"{f['count']:,}", "yes" if kind in strict_kinds else "no", extra])
    out.append("findings:")
    out.append(plain_table(["kind", "count", "fails --strict", "note"], rows, "<><<").rstrip())
    for kind in KINDS:
        f = rep["findings"][kind]
        if f["count"] and f.get("examples"):
            out.append("")
            out.append(f"{kind} (first {len(f['examples'])} of {f['count']:,}):")
            ex = f["examples"]
            keys = list(ex[0])
            out.append(plain_table(keys, [[_cell(k, e[k]) for k in keys] for e in ex], "<" * len(keys)).rstrip())
    return "\n".join(out) + "\n"


def _cell(key: str, value: object) -> str:
    from proftab.render.text import fmt_ns

    if value is None:
        return ""
    if key.endswith("_ns") and isinstance(value, int):
        return fmt_ns(value)
    text = str(value).replace("\n", " ")
    return text if len(text) <= 70 else text[:67] + "..."


def run(args: argparse.Namespace) -> int:
    """Print the report; exit 1 with `--strict` when a finding not in `--allow` is present."""
    tr = load_trace(args.trace, args)
    rep = report(tr, args.examples)
    strict_kinds = [k for k in KINDS if k not in args.allow]
    failing = {k: rep["findings"][k]["count"] for k in strict_kinds if rep["findings"][k]["count"]}
    rep["failing"] = failing
    if args.format == "json":
        write_text(json.dumps(rep, indent=2, default=str) + "\n", args.output)
    else:
        text = _text(rep, strict_kinds)
        verdict = ("clean: nothing found" if not failing
                   else "found: " + ", ".join(f"{k} {v:,}" for k, v in failing.items()))
        console = rich_console(args)
        if console is not None:
            from rich.markup import escape

            console.print(escape(text), highlight=False)  # type: ignore[attr-defined]
            console.print(f"[{'green' if not failing else 'red'}]{escape(verdict)}[/]")  # type: ignore[attr-defined]
        else:
            write_text(text + verdict + "\n", args.output)
    return 1 if (args.strict and failing) else 0


COMMAND = Command(
    name="check",
    help="anomalies and accounting report (overruns, rejected events, repaired names); --strict for CI",
    examples=EXAMPLES,
    add_arguments=_add_arguments,
    run=run,
)
