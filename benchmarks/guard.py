"""Same numbers before and after a restructuring: a digest of every analysis table, per trace.

    python benchmarks/guard.py write tests/data/guard/digests.json   # record (before the change)
    python benchmarks/guard.py check tests/data/guard/digests.json   # compare (after): exit 1 on a difference
    python benchmarks/guard.py dump OUT_DIR [TRACE ...]               # the tables themselves, as Parquet, to diff

A digest is the sha256 of a table's schema and its rows as Polars writes them to NDJSON, in the
order the analysis returns them (row order is part of the answer); an analysis that raises is
recorded as its error class and message. `tests/test_same_numbers.py` checks the bundled traces
against the committed digests in the default run and the whole shared corpus in the slow run.
The traces: data/, tests/data (single files and rank directories) and ../shared/traces.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "traces"


def sources() -> list[tuple[str, Path]]:
    """(key, path) of every trace the guard covers; key is the path relative to its root."""
    out: list[tuple[str, Path]] = []
    for p in sorted((ROOT / "data").glob("*.json.gz")):
        out.append((f"data/{p.name}", p))
    data = ROOT / "tests" / "data"
    for p in sorted(data.rglob("*.json.gz")):
        rel = p.relative_to(data).as_posix()
        if p.parent.name in ("gloo4", "straggler", "barrier") or "dataset_v1" in rel:
            continue  # rank directories: loaded whole below
        if rel.startswith(("gate/", "tracelens/", "hta/")):
            continue  # diff inputs and peers' frozen outputs: their own tests compare them
        if not _is_trace(p):
            continue
        out.append((f"tests/data/{rel}", p))
    for d in ("gloo4", "findings/straggler", "findings/barrier"):
        out.append((f"tests/data/{d}/", data / d))
    if SHARED.exists():
        for p in sorted(SHARED.rglob("*.json.gz")):
            if _is_trace(p):
                out.append((f"shared/{p.relative_to(SHARED).as_posix()}", p))
    return out


def _is_trace(p: Path) -> bool:
    n = p.name
    return not (n.startswith(("key_averages", "events")) or n.endswith(".raw.gz") or "known" in n)


def analyses() -> dict[str, Callable]:
    """table name -> function of a Trace giving that table (or text)."""
    return {
        "key_averages": lambda tr: tr.key_averages(),
        "key_averages_by_shape": lambda tr: tr.key_averages(group_by_input_shape=True),
        "table": lambda tr: tr.table(sort_by="self_cpu_time_total", row_limit=30),
        "findings": lambda tr: tr.findings(),
        "critical_path.summary": lambda tr: tr.critical_path.summary(),
        "critical_path.path": lambda tr: tr.critical_path.path(),
        "perf.ops": lambda tr: tr.perf.ops(),
        "perf.summary": lambda tr: tr.perf.summary(),
        "perf.copies": lambda tr: tr.perf.copies(),
        "memory.timeline": lambda tr: tr.memory.timeline(),
        "memory.peak": lambda tr: tr.memory.peak(),
        "memory.growth": lambda tr: tr.memory.growth(),
        "device.summary": lambda tr: tr.device.summary(),
        "device.activities": lambda tr: tr.device.activities(),
        "device.ops": lambda tr: tr.device.ops(),
        "modules": lambda tr: tr.modules.modules(),
        "ranks.step_times": lambda tr: tr.ranks.step_times(),
        "anomalies": lambda tr: tr.anomalies,
    }


def digest(value: object) -> tuple[str, int, list[str]]:
    """(sha256, rows, column names) of a table, a text or an error string.

    The sha covers the dtypes and the values in order, with the columns named by position, so a
    renamed column shows as a change of names alone (the third item), not of values.
    """
    import polars as pl

    h = hashlib.sha256()
    if isinstance(value, pl.DataFrame):
        anon = value.rename({c: f"c{i}" for i, c in enumerate(value.columns)})
        h.update(repr([str(t) for t in value.dtypes]).encode())
        h.update(anon.write_ndjson().encode())
        return h.hexdigest(), value.height, value.columns
    h.update(str(value).encode())
    return h.hexdigest(), -1, []


def compute(path: Path, only: set[str] | None = None) -> dict[str, tuple[str, int, list[str]]]:
    """Every analysis of one trace, digested."""
    import proftab as pt

    out: dict[str, tuple[str, int]] = {}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tr = pt.load(path)
    except Exception as e:  # noqa: BLE001 - the failure is the recorded answer
        return {"load": digest(f"ERROR {type(e).__name__}: {e}")}
    for name, fn in analyses().items():
        if only is not None and name not in only:
            continue
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                value = fn(tr)
        except Exception as e:  # noqa: BLE001
            value = f"ERROR {type(e).__name__}: {e}"
        out[name] = digest(value)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=("write", "check", "dump"))
    ap.add_argument("target", help="digest file (write/check) or output folder (dump)")
    ap.add_argument("traces", nargs="*", help="keys or paths to restrict to (default: all)")
    args = ap.parse_args(argv)
    todo = sources()
    if args.traces:
        todo = [(k, p) for k, p in todo if any(t in k or t == str(p) for t in args.traces)]
    if args.mode == "dump":
        return _dump(todo, Path(args.target))
    target = Path(args.target)
    if args.mode == "write":
        old = json.loads(target.read_text()) if target.exists() else {}
        for key, path in todo:
            print(key, file=sys.stderr)
            old[key] = {k: list(v) for k, v in compute(path).items()}
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(_dumps(old))
        return 0
    want = json.loads(target.read_text())
    bad = 0
    for key, path in todo:
        if key not in want:
            print(f"{key}: not recorded", file=sys.stderr)
            continue
        got = compute(path)
        for table, (sha, rows, names) in want[key].items():
            g = got.get(table)
            if g is None or g[0] != sha:
                bad += 1
                print(f"DIFFERS {key} {table}: rows {rows} -> {g[1] if g else None}")
            elif g[2] != names:
                renamed = [f"{a} -> {b}" for a, b in zip(names, g[2], strict=True) if a != b]
                print(f"renamed {key} {table}: {', '.join(renamed)}")
        print(f"{key}: checked", file=sys.stderr)
    print(f"{bad} table(s) differ")
    return 1 if bad else 0


def _dumps(digests: dict[str, dict[str, list]]) -> str:
    """The digest file: a trace a block, a table a line (diffs stay readable)."""
    blocks = []
    for key in sorted(digests):
        rows = ",\n".join(f"  {json.dumps(t)}: {json.dumps(v)}" for t, v in digests[key].items())
        blocks.append(f" {json.dumps(key)}: {{\n{rows}\n }}")
    return "{\n" + ",\n".join(blocks) + "\n}\n"


def _dump(todo: list[tuple[str, Path]], out: Path) -> int:
    import polars as pl

    import proftab as pt

    for key, path in todo:
        d = out / key.replace("/", "__")
        d.mkdir(parents=True, exist_ok=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tr = pt.load(path)
            for name, fn in analyses().items():
                try:
                    v = fn(tr)
                except Exception as e:  # noqa: BLE001
                    v = f"ERROR {type(e).__name__}: {e}"
                if isinstance(v, pl.DataFrame):
                    v.write_parquet(d / f"{name}.parquet")
                else:
                    (d / f"{name}.txt").write_text(str(v))
    return 0


if __name__ == "__main__":
    sys.exit(main())
