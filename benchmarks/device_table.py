"""Write the attribution table of docs/device.md: unattributed device time per public GPU trace.

For every trace of ../shared/traces/public with device activities: how many activities
reached an op and by which rule, the unattributed share of device time, the External-id mode
and the gpu_user_annotation margin found, and whether the identity
`attributed + unattributed == Σ durations` holds per device (recomputed here from the raw
events). Usage::

    python benchmarks/device_table.py [--write docs/device.md]

With `--write` the table replaces the block between the `device-table` markers of that file;
otherwise it is printed.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import polars as pl

import proftab as pt
from proftab import device

ROOT = Path(__file__).resolve().parents[1]
PUBLIC = ROOT.parent / "shared" / "traces" / "public"
START, END = "<!-- device-table:start -->", "<!-- device-table:end -->"


def row(path: Path) -> dict | None:
    tr = pt.load(path)
    acts = tr.device.activities()
    if acts.is_empty():
        return None
    d = tr.device.diagnostics()
    s = tr.device.summary()
    raw = tr.events.filter(pl.col("cat").cast(pl.String).is_in(list(device.ACTIVITY_CATEGORIES))).group_by(
        "rank", pl.col("pid").alias("device")).agg(pl.col("dur_ns").clip(0).sum().alias("raw"))
    j = raw.join(s, on=["rank", "device"], how="full", coalesce=True)
    exact = bool((j["attributed_ns"] + j["unattributed_ns"] == j["raw"]).all())
    total = int(s["device_ns"].sum())
    un = int(s["unattributed_ns"].sum())
    modes = ",".join(sorted(set(d["external_id_mode"])))
    margins = ",".join(sorted({f"{a}/{b}" + ("" if e else "*") for a, b, e in
                               zip(d["margin_start_ns"], d["margin_dur_ns"], d["n_margin_evidence"], strict=True)}))
    n = {k: int(d[k].sum()) for k in device.LINKS}
    return {
        "trace": f"{path.parent.name}/{path.name.removesuffix('.json.gz')}",
        "devices": s.height, "activities": acts.height, "device_ms": total / 1e6,
        "ext": n["external_id"], "cont": n["containment"], "ann": n["annotation"],
        "dext": n["device_external_id"], "no_launch": n["no_launch"], "no_op": n["no_op"],
        "unattributed": 100 * un / total if total else 0.0, "mode": modes, "margin": margins,
        "ac2g": f"{int(d['ac2g_agree'].sum())}/{int(d['ac2g_checked'].sum())}", "exact": exact,
    }


def table(rows: list[dict]) -> str:
    head = ("| trace | dev | activities | device ms | external_id | containment | annotation | device ext | "
            "no launch | no op | unattributed % | External id | margin | ac2g | identity |")
    lines = [head, "|" + "---|" * 15]
    for r in rows:
        lines.append(
            f"| `{r['trace']}` | {r['devices']} | {r['activities']:,} | {r['device_ms']:,.3f} | {r['ext']:,} | "
            f"{r['cont']:,} | {r['ann']:,} | {r['dext']:,} | {r['no_launch']:,} | {r['no_op']:,} | "
            f"{r['unattributed']:.2f} | {r['mode']} | {r['margin']} | {r['ac2g']} | "
            f"{'exact' if r['exact'] else 'BROKEN'} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", type=Path, default=None)
    args = ap.parse_args(argv)
    if not PUBLIC.exists():
        print(f"missing: {PUBLIC}", file=sys.stderr)
        return 1
    rows = [r for p in sorted(PUBLIC.glob("*/*.json.gz")) if (r := row(p)) is not None]
    text = table(rows)
    if args.write:
        doc = args.write.read_text()
        block = f"{START}\n{text}\n{END}"
        new, n = re.subn(re.escape(START) + r".*?" + re.escape(END), lambda _: block, doc, flags=re.S)
        if n != 1:
            print(f"{args.write}: no {START} ... {END} block", file=sys.stderr)
            return 1
        args.write.write_text(new)
    else:
        print(text)
    return 0 if all(r["exact"] for r in rows) else 2


if __name__ == "__main__":
    raise SystemExit(main())
