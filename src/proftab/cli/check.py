"""`proftab check`: the anomalies and accounting report of a trace, a CI gate with `--strict`.

Findings are of two sorts:

* **damage** (`DAMAGE`): the file itself is bad or was only partly read: a truncated file
  loaded with `--salvage`, rejected input events, negative durations, unmatched begins,
  repaired names or args, accounting that does not add up. `--strict` fails on these
  (`--allow KIND` tolerates one);
* **artifacts** (`ARTIFACTS`): what torch's profiler itself writes into sound traces:
  overruns (a `ProfilerStep#N` or Python frame ending after its parent, with `with_stack`),
  ops unfinished at the end of the window, device work that no host op in the window
  launched (kernels launched before profiling started), and every violation torch's own
  trace validator (`torch.profiler._trace_validator`) reports (`Trace.torch_validator()`,
  same events, in ns). They are reported and explained; failing on them is opt-in
  (`--fail-on overrun,unattributed,torch_validator`).

Timestamps rounded to the ns are reported but are not findings.
"""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from proftab import kinds
from proftab.cli import Command
from proftab.cli._common import Block, add_trace_arguments, load_trace, show_frames, write_text

if TYPE_CHECKING:
    from proftab.trace import Trace

EXAMPLES = """\
  proftab check trace.json.gz                  report only (exit 0 unless the input is bad)
  proftab check trace.json.gz --strict         exit 1 on damage: truncation, rejected events, repairs... (CI)
  proftab check run/ --strict --fail-on overrun,unattributed
                                               also fail on these torch artifacts
  proftab check run/ --strict --allow name_repaired
                                               tolerate one kind of damage
  proftab check trace.json.gz --format json    the report as JSON (for scripts)
"""

#: damage: the input is bad or was only partly read; `--strict` fails on these
DAMAGE = ("missing_file", "truncated", "rejected", "negative_dur", "unmatched_begin", "name_repaired", "args_repaired",
          "accounting")
#: artifacts of torch's profiler in sound traces: reported, failing on them is opt-in (`--fail-on`)
ARTIFACTS = ("overrun", "unfinished", "unattributed_device", "torch_validator")
KINDS = (*DAMAGE, *ARTIFACTS)
_ALIASES = {"unattributed": "unattributed_device", "all": ",".join(KINDS), "artifacts": ",".join(ARTIFACTS)}
#: why an artifact is not damage (printed next to its count)
EXPLAIN = {
    "missing_file": "a source file failed to convert (convert --keep-going): its rank is not in the dataset",
    "truncated": "the file ends early; only its complete events were kept (--salvage)",
    "overrun": "an event ends after its parent on the same thread; torch writes ProfilerStep#N and Python "
               "frames so with with_stack=True; self time is clipped, never negative",
    "unfinished": "ops still running when the profiler stopped",
    "unattributed_device": "device work no host op in the window launched: kernels launched before "
                           "profiling started, or by an unprofiled thread",
    "torch_validator": "violations of torch's own trace validator (torch.profiler._trace_validator, 6 rules: "
                       "kernel causality, stream-wait correlation, stream sync overlap, NCCL metadata, "
                       "backward sequence ids), in exact ns",
}


def _fail_on(text: str) -> list[str]:
    """`--fail-on overrun,unattributed` -> the kinds (aliases: unattributed, artifacts, all)."""
    out = []
    for word in text.replace(" ", "").split(","):
        if not word:
            continue
        for kind in _ALIASES.get(word, word).split(","):
            if kind not in KINDS:
                msg = f"unknown finding kind {word!r}; valid: {', '.join(KINDS)}, unattributed, artifacts, all"
                raise argparse.ArgumentTypeError(msg)
            out.append(kind)
    return out


def _add_arguments(p: argparse.ArgumentParser) -> None:
    add_trace_arguments(p)
    p.add_argument("--strict", action="store_true",
                   help=f"exit 1 on damage ({', '.join(DAMAGE)}) and on the --fail-on kinds")
    p.add_argument("--fail-on", action="append", default=[], type=_fail_on, metavar="KIND[,KIND]",
                   help=f"also fail --strict on these torch artifacts (repeatable): {', '.join(ARTIFACTS)}, "
                        "unattributed, artifacts, all")
    p.add_argument("--allow", action="append", default=[], choices=KINDS, metavar="KIND",
                   help=f"a damage kind that --strict tolerates (repeatable): {', '.join(DAMAGE)}")
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
    metas = [json.loads(m) if m else {} for m in tr.files["meta_json"].to_list()]
    cut = [{"rank": r, "path": m.get("source_file"), "json_bytes": m.get("json_bytes")}
           for r, m in zip(tr.files["rank"].to_list(), metas, strict=True) if m.get("complete") is False]
    findings["truncated"] = {"count": len(cut), "examples": cut[:n_examples]}
    status = tr.collect("status") if "status" in tr.tables else pl.DataFrame(
        schema={"source_file": pl.String, "status": pl.String, "error": pl.String})
    lost = status.filter(pl.col("status") == "failed").select("source_file", "error")
    findings["missing_file"] = {"count": lost.height, "examples": lost.head(n_examples).to_dicts()}
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
    from proftab.torch.validator import TORCH_VALIDATOR_RULES

    viol = tr.torch_validator()
    by_rule = dict(zip(*viol["rule"].value_counts().to_dict(as_series=False).values(), strict=True))
    findings["torch_validator"] = {"count": viol.height,
                                   "by_rule": {r: int(by_rule.get(r, 0)) for r in TORCH_VALIDATOR_RULES},
                                   "examples": viol.head(n_examples).to_dicts()}
    dev = _device_report(tr, n_examples)
    findings["unattributed_device"] = {"count": int(dev.get("activities", 0)), **dev}
    info = {
        "files": acc.select("path", "rank", "trace_events", *parts).to_dicts(),
        "events": tr.collect("events").height,
        "ts_rounded": int(((tr.collect("events")["flags"] & int(Flag.TS_ROUNDED)) != 0).sum()),
        "dur_missing": int(((tr.collect("events")["flags"] & int(Flag.DUR_MISSING)) != 0).sum()),
    }
    return {"findings": findings, "info": info}


def _blocks(rep: dict[str, Any], strict_kinds: list[str]) -> list[Block | str]:
    """The report as tables and lines for `show_frames`: accounting per file, findings, examples."""
    import polars as pl

    from proftab.render.table import Col
    from proftab.render.text import fmt_ns

    out: list[Block | str] = []
    counts = ("trace_events", "events_in", "instants", "flows", "counters", "metadata", "rejected")
    heads = ["traceEvents", "events", "instants", "flows", "counters", "metadata", "rejected"]
    files = pl.DataFrame([{"path": f["path"], "rank": f["rank"], **{k: f[k] for k in counts}}
                          for f in rep["info"]["files"]],
                         schema={"path": pl.String, "rank": pl.Int64, **dict.fromkeys(counts, pl.Int64)})
    out.append(Block(files, [Col("path", header="file", cut=True), Col("rank"),
                             *(Col(k, header=h, kind="count") for k, h in zip(counts, heads, strict=True))],
                     "accounting (input array elements by table):",
                     [f"timestamps rounded to the ns: {rep['info']['ts_rounded']:,}; "
                      f"X events without dur: {rep['info']['dur_missing']:,}"]))
    rows = []
    for kind in KINDS:
        f = rep["findings"][kind]
        extra = ""
        if kind == "overrun" and f["count"]:
            extra = f"worst {fmt_ns(f['max_overrun_ns'])}"
        if kind == "unattributed_device":
            extra = f["status"] + (f", {fmt_ns(f['dur_ns'])}" if f.get("dur_ns") else "")
        if f["count"] and kind in EXPLAIN:
            extra = "; ".join(x for x in (extra, EXPLAIN[kind]) if x)
        rows.append({"kind": kind, "sort": "damage" if kind in DAMAGE else "artifact", "count": f["count"],
                     "fails --strict": "yes" if kind in strict_kinds else "no", "note": extra})
    out.append(Block(pl.DataFrame(rows), [Col("kind"), Col("sort"), Col("count", kind="count"),
                                          Col("fails --strict"), Col("note", cut=True)], "findings:"))
    for kind in KINDS:
        f = rep["findings"][kind]
        if f["count"] and f.get("examples"):
            ex = f["examples"]
            keys = list(ex[0])
            # *_ns values print as human times (fmt_ns), so their headers drop the unit
            frame = pl.DataFrame([[_cell(k, e[k]) for k in keys] for e in ex], schema=keys, orient="row")
            out.append(Block(frame, [Col(k, header=k.removesuffix("_ns"), kind="text") for k in keys],
                             f"{kind} (first {len(ex)} of {f['count']:,}):"))
    return out


def _cell(key: str, value: object) -> str:
    from proftab.render.text import fmt_ns
    from proftab.units import NS_SUFFIX

    if value is None:
        return ""
    if key.endswith(NS_SUFFIX) and isinstance(value, int):
        return fmt_ns(value)
    text = str(value).replace("\n", " ")
    return text if len(text) <= 70 else text[:67] + "..."


def run(args: argparse.Namespace) -> int:
    """Print the report; with `--strict` exit 1 on damage not in `--allow` and on `--fail-on` artifacts."""
    if (args.fail_on or args.allow) and not args.strict:
        from proftab.exceptions import UsageError

        opt = "--fail-on" if args.fail_on else "--allow"
        msg = f"{opt} changes what --strict fails on; without --strict check always exits 0: add --strict"
        raise UsageError(msg)
    tr = load_trace(args.trace, args)
    rep = report(tr, args.examples)
    fail_on = {k for group in args.fail_on for k in group}
    strict_kinds = [k for k in KINDS if (k in DAMAGE and k not in args.allow) or k in fail_on]
    failing = {k: rep["findings"][k]["count"] for k in strict_kinds if rep["findings"][k]["count"]}
    artifacts = {k: rep["findings"][k]["count"] for k in ARTIFACTS
                 if k not in strict_kinds and rep["findings"][k]["count"]}
    rep["failing"] = failing
    rep["artifacts"] = artifacts
    if args.format == "json":
        write_text(json.dumps(rep, indent=2, default=str) + "\n", args.output)
    else:
        missing = [e["source_file"] for e in rep["findings"]["missing_file"]["examples"]]
        verdict = ("found: " + ", ".join(f"{k} {v:,}" for k, v in failing.items())
                   + (f" (not in the dataset: {', '.join(missing)})" if missing and "missing_file" in failing
                      else "") if failing
                   else "clean: no damage (torch artifacts: " + ", ".join(
                       f"{k} {v:,}" for k, v in artifacts.items()) + "; --fail-on KIND to fail on them)"
                   if artifacts else "clean: nothing found")
        show_frames(args, [*_blocks(rep, strict_kinds), verdict])
    return 1 if (args.strict and failing) else 0


COMMAND = Command(
    name="check",
    help="damage and anomalies report (truncation, rejected events, repairs, overruns); --strict for CI",
    examples=EXAMPLES,
    add_arguments=_add_arguments,
    run=run,
)
