r"""Every CLI renderer on a pseudo-terminal, over fuzzed and hostile traces (issue 30, "keep it fuzzed").

A case is one trace file (and a base trace for `diff`) written from code: a bundled seed with
hostile event names (rich markup, OSC 8 / CSI / C1 / bidi characters, ``\n`` + a fake row, 5 KB
names), a seed damaged by one of the loader harness's mutators (`tests/fuzz/harness.py`), or a
random trace of overlapping ops, module frames, kernels, syncs and ``[memory]`` events (deep
chains included) with hostile names; its file name is hostile too, some of the time.

Each case runs every renderer -- `summary`, `perf` (and ``--by name``), `memory`, `modules`,
`critical-path --by name`, `check`, `diff`, `findings`, `report`, `plot tree` / `plot top` -- and
the findings analyses themselves (`tr.findings()`, `tr.report(path)`), in one child process
whose stdout and stderr are a pty of `COLUMNS` columns (rich's real terminal path, no
monkeypatching), under a resident-memory limit (polled, `hostile.wait_readable`; ``RLIMIT_AS``
as a backstop) and a wall-clock limit per renderer. Outcomes per renderer: *ok*; *crash* (the
child died or passed the memory limit, or a MemoryError); *hang* (over the limit: the child is
killed and a new one takes the remaining renderers); *raw error* (``internal error``, a
traceback, a non-proftab exception from the API); *injection* (after removing rich's own SGR
colour sequences, any C0/C1 control, DEL or bidi character, an OSC 8 hyperlink, or a line that
starts with the fake row).

``python -m tests.fuzz.terminal --cases N [--seed S]`` prints the table per renderer;
`tests/test_fuzz.py` runs one bounded case in the suite.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import fcntl
import gzip
import json
import os
import pty
import random
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import termios
import time
from pathlib import Path
from typing import Any

from tests.builders import event, read_trace, write_events
from tests.fuzz.hostile import ADDRESS_FACTOR, wait_readable

ROOT = Path(__file__).resolve().parents[2]
OUTCOMES = ("ok", "crash", "hang", "raw_error", "injection")
COLUMNS = 100
#: resident-memory limit of the child (bytes; RLIMIT_AS is `hostile.ADDRESS_FACTOR` times it) and
#: wall-clock limit per renderer (seconds)
MEMORY_LIMIT = 3 * 2**30
RENDER_LIMIT_S = 60.0

FAKE = "FAKE ROW"
HOSTILE_NAMES = [
    "aten::bad\x1b]8;;https://evil.example\x07[/nope]\u202e\x9b2J[link=https://evil.example]x[/link]"
    f"\x1b[31m[bold red]\n{FAKE}",
    "\x1b[2J\x1b[Hcleared", f"a\r{FAKE}", f"b\n{FAKE} | 1 | 2", "x\u202eevil\u2066iso", "\x9b31mc1",
    "[link=https://evil.example]click[/link]", "[/]", "[bold", "nul\x00byte", "del\x7f", "tab\there",
    "\x1b]0;window title\x07", "\x1bP+q\x1b\\dcs", "p" * 5000 + "::tail", "aten::mm" + "\u0301" * 50,
]
#: hostile file names (no "/" or NUL: they are real files)
HOSTILE_FILES = ["evil\x1b]0;pwned\x07\u202e[red]{i}.json.gz", "[link=evil.example]{i}\x9b2J.json.gz",
                 "t{i}\n" + FAKE + ".json.gz"]

_SGR = re.compile(r"\x1b\[[0-9;]*m")
_BAD = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
_START = re.compile(rb"@@pty-fuzz-start:(\d+)@@")
_END = re.compile(rb"@@pty-fuzz-end:(\d+):(-?\d+)@@")


# ----------------------------------------------------------------------------- cases


@dataclasses.dataclass
class PtyCase:
    """A trace (and a base for `diff`) with the items to run on it."""

    name: str
    trace: Path
    base: Path
    salvage: bool
    quiet: bool
    items: list[list[str]] = dataclasses.field(default_factory=list)


def renderer_items(trace: Path, base: Path, out: Path, *, salvage: bool, quiet: bool) -> list[list[str]]:
    """Every renderer as a CLI argv (``["cli", ...]``), and the findings analyses (``["api", ...]``)."""
    t, b = str(trace), str(base)
    opts = (["--salvage"] if salvage else []) + (["-q"] if quiet else ["--progress", "never"])
    argvs = [["summary", t], ["perf", t], ["perf", t, "--by", "name"], ["memory", t], ["modules", t],
             ["critical-path", t, "--by", "name"], ["check", t], ["diff", b, t], ["findings", t],
             ["report", t, "-o", str(out / "report.html")], ["plot", "tree", t, "-o", str(out / "tree.json")],
             ["plot", "top", t, "-o", str(out / "top.json")]]
    items = [["cli", *argv, *opts] for argv in argvs]
    items += [["api", "findings", t, str(salvage)], ["api", "report", t, str(salvage), str(out / "api.html")]]
    return items


def label(item: list[str]) -> str:
    """The renderer an item exercises (the table's class)."""
    if item[0] == "api":
        return f"tr.{item[1]}()"
    argv = item[1:]
    words = [argv[0]] + ([argv[1]] if argv[0] == "plot" else [])
    if "--by" in argv:
        words += ["--by", argv[argv.index("--by") + 1]]
    return " ".join(words)


def _seed_events(rng: random.Random) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    from tests.fuzz.harness import SEED_FILES

    doc = read_trace(rng.choice(SEED_FILES))
    events = doc.pop("traceEvents")
    return doc, events[: rng.choice([300, 1500])]


def _hostile(rng: random.Random) -> str:
    return rng.choice(HOSTILE_NAMES)


def _random_events(rng: random.Random, hostile: bool, n_ops: int | None = None) -> list[dict[str, Any]]:
    """Overlapping ops (or a deep chain), module frames, launches, kernels, syncs, [memory] events."""
    n = n_ops or rng.choice([40, 400, 3000])
    chain = rng.random() < 0.25
    names = ["aten::mm", "aten::add", "aten::empty", "autograd::engine::evaluate_function: AddBackward0"]
    ev = [event("ProfilerStep#1", 0, 10 * n + 100, cat="user_annotation"),
          event("ProfilerStep#2", 10 * n + 200, 10, cat="user_annotation")]
    for i in range(n):
        ts, dur = (i + 1, 10 * n - 2 * i) if chain else (rng.randrange(0, 10 * n), rng.randrange(0, 10 * n // 4 + 2))
        kind = rng.random()
        name = _hostile(rng) if hostile and rng.random() < 0.2 else rng.choice(names)
        if kind < 0.2:
            module = _hostile(rng) if hostile and rng.random() < 0.5 else "Lin"
            ev.append(event(f"nn.Module: {module}_{i % 7}", ts, dur, cat="python_function"))
        else:
            ev.append(event(name, ts, dur, **{"External id": i, "Input Dims": [[4, 8], [8, 16]],
                                              "Input type": ["float", "float"]}))
        if rng.random() < 0.2:
            ev.append(event(rng.choice(["cudaLaunchKernel", "cudaDeviceSynchronize"]), ts, 1, cat="cuda_runtime",
                            correlation=i + 1, **{"External id": i}))
            ev.append(event(_hostile(rng) if hostile and rng.random() < 0.3 else "gemm", ts + 2, 3, cat="kernel",
                            pid=0, tid=7, correlation=i + 1, stream=7, device=0, **{"External id": i}))
        if rng.random() < 0.1:
            ev.append({"ph": "i", "s": "t", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 1,
                       "ts": ts, "args": {"Device Type": 1, "Device Id": 0, "Addr": rng.randrange(4),
                                          "Bytes": rng.choice([512, -512, 2**40]), "Total Allocated": 0}})
    return ev


def make_case(tmp: Path, rng: random.Random, index: int, kind: str | None = None, n_ops: int | None = None) -> PtyCase:
    """Write one case's files under `tmp` (kind: ``names``, ``loader`` or ``random``; `n_ops`: the
    random trace's size, else drawn)."""
    from tests.fuzz import harness

    kind = kind or rng.choice(["names", "loader", "random"])
    fname = rng.choice(HOSTILE_FILES).format(i=index) if rng.random() < 0.3 else f"t{index}.json.gz"
    trace, base = tmp / fname, tmp / f"base{index}.json.gz"
    salvage = False
    if kind == "loader":
        seed = harness.make_seed("s", gzip.decompress(rng.choice(harness.SEED_FILES).read_bytes()), 200)
        case = harness.MUTATORS[rng.choice(sorted(harness.MUTATORS))](seed, rng)
        data = case.data if case.gz else gzip.compress(case.data, compresslevel=1)
        trace.write_bytes(data)
        base.write_bytes(gzip.compress(seed.text, compresslevel=1))
        salvage = rng.random() < 0.5
        kind = f"loader {case.cls}"
    else:
        if kind == "names":
            head, events = _seed_events(rng)
            base_events = json.loads(json.dumps(events))
            for ev in events:
                if isinstance(ev.get("name"), str) and rng.random() < 0.15:
                    ev["name"] = _hostile(rng) + ev["name"][:20]
        else:
            head, events = {"schemaVersion": 1}, _random_events(rng, hostile=True, n_ops=n_ops)
            base_events = _random_events(random.Random(rng.random()), hostile=False, n_ops=n_ops)
        for path, evs in ((trace, events), (base, base_events)):
            write_events(path, evs, **head)
    out = tmp / f"out{index}"
    out.mkdir()
    quiet = rng.random() < 0.5
    return PtyCase(f"{kind} #{index}", trace, base, salvage, quiet,
                   renderer_items(trace, base, out, salvage=salvage, quiet=quiet))


# ----------------------------------------------------------------------------- the child


def _run_item(item: list[str]) -> int:  # pragma: no cover - runs in the child
    import warnings

    import proftab as pt
    from proftab.cli import main

    if item[0] == "cli":
        return main(item[1:])
    what, path, salvage = item[1], item[2], item[3] == "True"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tr = pt.load(path, salvage=salvage)
            if what == "findings":
                tr.findings()
            else:
                tr.report(item[4])
    except pt.ProftabError:
        return 2
    except MemoryError:
        print("internal error: MemoryError")
        return 1
    except BaseException as exc:  # noqa: BLE001 - a raw error (a Rust panic is a BaseException)
        if isinstance(exc, KeyboardInterrupt):
            raise
        print(f"internal error: {type(exc).__name__}: {str(exc)[:300]!r}")
        return 1
    return 0


def child_main(items: list[list[str]]) -> None:  # pragma: no cover - runs in the child
    """Run the items in order on this process's terminal, each between two sentinel lines."""
    for i, item in enumerate(items):
        sys.stdout.write(f"\n@@pty-fuzz-start:{i}@@\n")
        sys.stdout.flush()
        rc = _run_item(item)
        sys.stdout.flush()
        sys.stderr.flush()
        sys.stdout.write(f"\n@@pty-fuzz-end:{i}:{rc}@@\n")
        sys.stdout.flush()


# ----------------------------------------------------------------------------- the parent


@dataclasses.dataclass
class Result:
    """The outcome of one renderer on one case."""

    case: str
    cls: str
    outcome: str
    detail: str = ""
    seconds: float = 0.0
    escaped: bool = False  # the output shows a hostile character as a visible escape (the names reached it)


def judge(text: str, rc: int) -> tuple[str, str]:
    """The outcome of one renderer's terminal output (CR LF already folded to LF)."""
    if "internal error" in text or "Traceback (most recent call last)" in text:
        kind = "crash" if "MemoryError" in text else "raw_error"
        return kind, text.strip()[-300:]
    if rc not in (0, 1, 2):
        return "raw_error", f"exit {rc}"
    if "\x1b]8;" in text:
        return "injection", "an OSC 8 hyperlink"
    bare = _SGR.sub("", text)
    bad = _BAD.search(bare)
    if bad:
        at = bad.start()
        return "injection", f"raw {bare[at]!r} in {bare[max(at - 60, 0):at + 20]!r}"
    for line in bare.splitlines():
        if line.lstrip(" │┃|║").startswith(FAKE):
            return "injection", f"a fake row: {line[:80]!r}"
    return "ok", ""


def proftab_dir() -> str:
    """The directory holding the `proftab` this process imports (installed, or a checkout's src/
    on PYTHONPATH): children test the same code."""
    import importlib.util

    spec = importlib.util.find_spec("proftab")
    if spec is None or spec.origin is None:
        msg = "proftab is not importable"
        raise RuntimeError(msg)
    return str(Path(spec.origin).parents[1])


def _child_env(src: str | None) -> dict[str, str]:
    path = [src or proftab_dir(), str(ROOT)]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(path), "COLUMNS": str(COLUMNS), "LINES": "50",
            "TERM": "xterm-256color", "PYTHONIOENCODING": "utf-8", "PYTHONUNBUFFERED": "1"}


def run_case(case: PtyCase, *, limit_s: float = RENDER_LIMIT_S, memory: int = MEMORY_LIMIT,
             src: str | None = None) -> list[Result]:
    """Run a case's items on a pty in child processes (a new one after a crash or a hang)."""
    results: list[Result] = []
    todo = list(range(len(case.items)))
    code = ("import sys, json, resource; lim = int(sys.argv[2]); "
            "resource.setrlimit(resource.RLIMIT_AS, (lim, lim)); "
            "from tests.fuzz.terminal import child_main; child_main(json.loads(sys.argv[1]))")
    while todo:
        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, COLUMNS, 0, 0))
        items = [case.items[i] for i in todo]
        proc = subprocess.Popen([sys.executable, "-c", code, json.dumps(items), str(memory * ADDRESS_FACTOR)],
                                stdin=subprocess.DEVNULL, stdout=slave, stderr=slave, cwd=ROOT, env=_child_env(src),
                                close_fds=True)
        os.close(slave)
        buf = b""
        current: int | None = None
        started = 0.0
        deadline = time.monotonic() + 120  # the child's imports
        finished = 0
        while True:
            why = wait_readable(master, deadline, proc.pid, memory)
            if why != "ready":  # over the time or memory limit (or a child that never started)
                proc.kill()
                proc.wait()
                if current is None:
                    msg = f"the child did not start: {buf[-2000:]!r}"
                    raise RuntimeError(msg)
                results.append(Result(case.name, label(items[current]), "hang", f"over {limit_s:.0f} s", limit_s)
                               if why == "time" else Result(case.name, label(items[current]), "crash",
                                                            f"resident memory over {memory / 2**30:.1f} GiB"))
                finished = current + 1
                break
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the child closed the terminal
                chunk = b""
            if not chunk:
                rc = proc.wait()
                if current is not None:
                    results.append(Result(case.name, label(items[current]), "crash",
                                          f"exit {rc}: {buf[-300:].decode('utf-8', 'replace')!r}",
                                          time.monotonic() - started))
                    finished = current + 1
                elif finished < len(items):
                    msg = f"the child failed (exit {rc}): {buf[-2000:]!r}"
                    raise RuntimeError(msg)
                break
            buf += chunk
            while True:
                if current is None:
                    m = _START.search(buf)
                    if not m:
                        break
                    current, buf = int(m.group(1)), buf[m.end():]
                    started = time.monotonic()
                    deadline = started + limit_s
                    continue
                m = _END.search(buf)
                if not m:
                    break
                text = buf[:m.start()].decode("utf-8", "replace").replace("\r\n", "\n").strip("\n")
                outcome, detail = judge(text, int(m.group(2)))
                results.append(Result(case.name, label(items[current]), outcome, detail,
                                      round(time.monotonic() - started, 2),
                                      any(e in text for e in ("\\x1b", "\\u202e", "\\x9b"))))
                buf, current = buf[m.end():], None
                finished += 1
                deadline = time.monotonic() + 30  # until the next item starts
            if finished == len(items):
                proc.wait()
                break
        with contextlib.suppress(Exception):
            proc.kill()
        proc.wait()
        os.close(master)
        todo = todo[finished:]
    return results


def run(n: int, seed: int = 0, *, kinds: list[str] | None = None, limit_s: float = RENDER_LIMIT_S,
        src: str | None = None, verbose: bool = False, n_ops: int | None = None) -> list[Result]:
    """`n` seeded cases, each through every renderer; returns one result per (case, renderer)."""
    rng = random.Random(seed)
    tmp = Path(tempfile.mkdtemp(prefix="proftab-pty-"))
    results: list[Result] = []
    try:
        for i in range(n):
            case = make_case(tmp, rng, i, rng.choice(kinds) if kinds else None, n_ops)
            res = run_case(case, limit_s=limit_s, src=src)
            if verbose:
                for r in res:
                    if r.outcome != "ok":
                        print(f"{r.case:24} {r.cls:28} {r.outcome:9} {r.detail[:200]}", flush=True)
            results += res
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return results


def outcome_table(results: list[Result]) -> str:
    """Markdown: renderer -> tried, crashes, hangs, raw errors, injections."""
    counts: dict[str, dict[str, int]] = {}
    for r in results:
        counts.setdefault(r.cls, dict.fromkeys(OUTCOMES, 0))[r.outcome] += 1
    lines = ["| renderer (pty) | tried | crashes | hangs | raw errors | injections |", "|---|---:|---:|---:|---:|---:|"]
    for cls in sorted(counts):
        c = counts[cls]
        lines.append(f"| {cls} | {sum(c.values())} | {c['crash']} | {c['hang']} | {c['raw_error']} | "
                     f"{c['injection']} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cases", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--kinds", nargs="*", choices=["names", "loader", "random"])
    ap.add_argument("--limit", type=float, default=RENDER_LIMIT_S, help="seconds per renderer")
    ap.add_argument("--src", help="another source tree's src/ (the before column)")
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    res = run(args.cases, args.seed, kinds=args.kinds, limit_s=args.limit, src=args.src, verbose=True)
    print(outcome_table(res))
    if args.json:
        Path(args.json).write_text(json.dumps([dataclasses.asdict(r) for r in res], indent=1))
    return 1 if any(r.outcome != "ok" for r in res) else 0


if __name__ == "__main__":
    sys.exit(main())
