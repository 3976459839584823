#!/usr/bin/env python3
"""How big is `proftab report`'s page, and how long does it take to open in headless Chromium?

usage: benchmarks/report_open.py TRACE [--out DIR] [--runs 5] [--chromium PATH] [--json RESULT.json]
       benchmarks/report_open.py --page report.html ...      (measure an existing page only)

1. Builds the report of TRACE in this process (`pt.load(TRACE).report(page)`), timing the load and
   the report separately, and records the page's size and its parts (the inlined Vega bundle, the
   charts' specs and data, the tables).
2. Opens the page `--runs` times in one headless Chromium (Debian's `chromium`; the flags below,
   a fresh `--user-data-dir`, every request sent to a dead proxy so nothing can load from the
   network), each time in a new tab, driven over the DevTools protocol on a pipe
   (`--remote-debugging-pipe`, stdlib only). A script injected before the page's own
   (`Page.addScriptToEvaluateOnNewDocument`) watches the DOM and notes `performance.now()` (ms since
   the navigation started) when every `div.chart` holds its rendered `<svg>`, and again at the next
   animation frame after that (`painted_ms`: the charts are on screen). Also recorded: the
   navigation timing's `domContentLoadedEventEnd` and `loadEventEnd`.

Prints one JSON object (and writes it to `--json`): medians and every run. Wall times depend on the
machine and its load; the numbers in docs/benchmarks.md say which machine and how loaded.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run",
         "--proxy-server=http://127.0.0.1:9", "--proxy-bypass-list=<-loopback>"]

#: injected before the page's scripts: note when every chart div holds its svg, and the next frame
WATCH = """
(() => {
  const check = () => {
    const divs = document.querySelectorAll('div.chart');
    if (!divs.length || window.__renderedAt !== undefined) return;
    for (const d of divs) if (!d.querySelector('svg')) return;
    window.__renderedAt = performance.now();
    window.__charts = divs.length;
    requestAnimationFrame(() => { window.__paintedAt = performance.now(); });
  };
  new MutationObserver(check).observe(document, {childList: true, subtree: true});
})();
"""

#: evaluated after the load event: resolves once the charts are painted (or after 120 s)
RESULT = """
new Promise((resolve) => {
  const t0 = performance.now();
  const poll = () => {
    if (window.__paintedAt !== undefined || performance.now() - t0 > 120000) {
      const nav = performance.getEntriesByType('navigation')[0];
      resolve({rendered_ms: window.__renderedAt ?? null, painted_ms: window.__paintedAt ?? null,
               charts: window.__charts ?? document.querySelectorAll('div.chart').length,
               svgs: document.querySelectorAll('div.chart svg').length,
               dom_content_loaded_ms: nav.domContentLoadedEventEnd, load_ms: nav.loadEventEnd,
               external_requests: performance.getEntriesByType('resource').map((e) => e.name)});
    } else { setTimeout(poll, 10); }
  };
  poll();
})
"""


class Cdp:
    """A DevTools protocol client over Chromium's `--remote-debugging-pipe` (fd 3 in, fd 4 out)."""

    def __init__(self, chromium: str, profile: str) -> None:
        to_chrome_r, self._to_chrome = os.pipe()
        self._from_chrome, from_chrome_w = os.pipe()
        # the child gets our read end of "to chrome" as fd 3 and the write end of "from chrome" as fd 4
        # (copied high first, so neither dup2 clobbers the other; preexec runs after close_fds' pass)
        def child_fds() -> None:
            r, w = os.dup(to_chrome_r), os.dup(from_chrome_w)
            os.dup2(r, 3)
            os.dup2(w, 4)
        self.proc = subprocess.Popen([chromium, *FLAGS, f"--user-data-dir={profile}", "--remote-debugging-pipe",
                                      "about:blank"], preexec_fn=child_fds, close_fds=False,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self._buf = b""
        self._id = 0
        self.events: list[dict[str, Any]] = []

    def _read(self) -> dict[str, Any]:
        while b"\0" not in self._buf:
            chunk = os.read(self._from_chrome, 1 << 20)
            if not chunk:
                msg = "chromium closed the DevTools pipe"
                raise RuntimeError(msg)
            self._buf += chunk
        raw, self._buf = self._buf.split(b"\0", 1)
        out: dict[str, Any] = json.loads(raw)
        return out

    def send(self, method: str, params: dict[str, Any] | None = None, session: str | None = None) -> dict[str, Any]:
        self._id += 1
        msg: dict[str, Any] = {"id": self._id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self._to_chrome, json.dumps(msg).encode() + b"\0")
        while True:
            reply = self._read()
            if reply.get("id") == self._id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                result: dict[str, Any] = reply.get("result", {})
                return result
            self.events.append(reply)

    def wait_event(self, method: str, session: str, timeout_s: float = 300) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for i, e in enumerate(self.events):
                if e.get("method") == method and e.get("sessionId") == session:
                    return self.events.pop(i)
            self.events.append(self._read())
        msg = f"no {method} within {timeout_s} s"
        raise TimeoutError(msg)

    def close(self) -> None:
        try:
            self.send("Browser.close")
        except (RuntimeError, OSError):
            pass
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def open_page(cdp: Cdp, url: str) -> dict[str, Any]:
    """Open `url` in a new tab and return the page's timings (module docstring)."""
    target = cdp.send("Target.createTarget", {"url": "about:blank"})["targetId"]
    session = cdp.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
    cdp.send("Page.enable", session=session)
    cdp.send("Page.addScriptToEvaluateOnNewDocument", {"source": WATCH}, session=session)
    t0 = time.perf_counter()
    cdp.send("Page.navigate", {"url": url}, session=session)
    cdp.wait_event("Page.loadEventFired", session)
    res = cdp.send("Runtime.evaluate", {"expression": RESULT, "awaitPromise": True, "returnByValue": True},
                   session=session)["result"]["value"]
    res["wall_to_painted_s"] = time.perf_counter() - t0
    cdp.send("Target.closeTarget", {"targetId": target})
    return dict(res)


def page_parts(text: str) -> dict[str, int]:
    """Bytes of the page's parts: the inlined script bundle, the chart specs, everything else."""
    scripts = re.findall(r"<script>(.*?)</script>", text, flags=re.S)
    specs = sum(len(s.encode()) for s in scripts if "const SPECS" in s)
    bundle = sum(len(s.encode()) for s in scripts if "const SPECS" not in s)
    return {"page_bytes": len(text.encode()), "bundle_bytes": bundle, "specs_bytes": specs,
            "html_bytes": len(text.encode()) - bundle - specs}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace", nargs="?")
    ap.add_argument("--page", help="measure this page instead of building one")
    ap.add_argument("--out", help="where to write the page (default: a temporary directory)")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--chromium", default=shutil.which("chromium") or shutil.which("chromium-browser"))
    ap.add_argument("--json", help="also write the result here")
    a = ap.parse_args()
    if not a.chromium:
        print("no chromium: apt-get install chromium", file=sys.stderr)
        return 2
    tmp = tempfile.mkdtemp(prefix="report_open-")
    result: dict[str, Any] = {"machine": {"cpus": os.cpu_count(), "loadavg_before": os.getloadavg()}}
    if a.page:
        page = Path(a.page)
    else:
        if not a.trace:
            ap.error("TRACE or --page")
        import proftab as pt

        page = Path(a.out or tmp) / "report.html"
        t0 = time.perf_counter()
        tr = pt.load(a.trace)
        t1 = time.perf_counter()
        tr.report(page)
        t2 = time.perf_counter()
        result |= {"trace": a.trace, "trace_bytes": os.path.getsize(a.trace), "load_s": round(t1 - t0, 3),
                   "report_s": round(t2 - t1, 3),
                   "peak_rss_gb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 3)}
    result |= page_parts(page.read_text(encoding="utf-8"))
    version = subprocess.run([a.chromium, "--version"], capture_output=True, text=True, check=False).stdout.strip()
    result["chromium"] = version
    cdp = Cdp(a.chromium, os.path.join(tmp, "profile"))
    try:
        runs = [open_page(cdp, page.resolve().as_uri()) for _ in range(a.runs)]
    finally:
        cdp.close()
    result["runs"] = runs
    for k in ("rendered_ms", "painted_ms", "dom_content_loaded_ms", "load_ms"):
        vals = [r[k] for r in runs if r[k] is not None]
        result[f"median_{k}"] = round(statistics.median(vals), 1) if vals else None
    result["external_requests"] = sorted({u for r in runs for u in r["external_requests"]})
    result["machine"]["loadavg_after"] = os.getloadavg()
    shutil.rmtree(tmp, ignore_errors=True)
    text = json.dumps(result, indent=1)
    print(text)
    if a.json:
        Path(a.json).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
