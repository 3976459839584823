"""Run the loader fuzz harness for N minutes in child processes and tally the outcomes.

Each child runs ``python -m tests.fuzz.harness`` for ``--chunk`` seconds with its own seed; a
child that dies (a signal, a sanitizer report) counts as a crash and one that outlives its
time by far counts as a hang, with its log kept. Used by ``benchmarks/fuzz/asan.sh``; see
docs/robustness.md.

    python benchmarks/fuzz/run_fuzz.py --minutes 10 --out /tmp/fuzz.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.fuzz.harness import MUTATORS, OUTCOMES, outcome_table  # noqa: E402 - after the sys.path entry


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--chunk", type=float, default=30.0, help="seconds per child process")
    ap.add_argument("--seed", type=int, default=1000)
    ap.add_argument("--out", help="write counts, examples and crash logs here (JSON)")
    ap.add_argument("--logs", default=None, help="directory for crash/hang logs")
    args = ap.parse_args()
    logs = Path(args.logs or tempfile.mkdtemp(prefix="proftab-fuzz-logs-"))
    logs.mkdir(parents=True, exist_ok=True)
    counts = {c: dict.fromkeys(OUTCOMES, 0) for c in MUTATORS}
    examples: dict[str, str] = {}
    deadline = time.monotonic() + args.minutes * 60
    seed = args.seed
    children = 0
    while time.monotonic() < deadline:
        out = logs / f"chunk-{seed}.json"
        cmd = [sys.executable, "-m", "tests.fuzz.harness", "--seconds", str(args.chunk), "--seed", str(seed),
               "--json", str(out)]
        try:
            r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=args.chunk * 4 + 120,
                               check=False, env={**os.environ, "RUST_BACKTRACE": "0"})
            if out.exists():
                res = json.loads(out.read_text())
                for cls, c in res["counts"].items():
                    for k, v in c.items():
                        counts[cls][k] += v
                for k, v in res["examples"].items():
                    examples.setdefault(k, v)
            if r.returncode < 0 or not out.exists():
                counts["noise"]["crash"] += 1  # the class is unknown: the child died mid-case
                (logs / f"crash-{seed}.log").write_text(r.stdout + r.stderr)
                examples.setdefault(f"process/crash-{seed}", (r.stderr or r.stdout)[-2000:])
        except subprocess.TimeoutExpired as exc:
            counts["noise"]["hang"] += 1
            (logs / f"hang-{seed}.log").write_text(str(exc.stdout or "") + str(exc.stderr or ""))
        seed += 1
        children += 1
    print(outcome_table(counts))
    for k, v in sorted(examples.items()):
        print(f"  {k}: {v[:300]}")
    print(f"{children} child processes, logs under {logs}")
    if args.out:
        Path(args.out).write_text(json.dumps({"counts": counts, "examples": examples, "children": children,
                                              "minutes": args.minutes}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
