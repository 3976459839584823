"""Log-log scaling plot (MB vs seconds, one line per tool) for benchmarks/report.py.

Needs matplotlib, which is not a proftab dependency: report.py imports this module when
matplotlib is importable, otherwise runs it as a script under a bench venv's python with the
spec JSON on stdin: {"series": {legend: [[mb, seconds], ...]}, "out": path, "title": str}.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

MARKERS = "osD^v<>px*h"


def draw(spec: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8.5, 5.5), dpi=120)
    for i, (legend, pts) in enumerate(spec["series"].items()):
        xs = [p[0] for p in pts]
        ys = [p[1] for p in pts]
        ls = ":" if legend.startswith("floor") else ("--" if "torch" in legend else "-")
        ax.plot(xs, ys, marker=MARKERS[i % len(MARKERS)], linestyle=ls, markersize=4, linewidth=1.4, label=legend)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("uncompressed JSON (MB)")
    ax.set_ylabel("seconds (in-process, file → result)")
    ax.set_title(spec.get("title", ""))
    ax.grid(True, which="both", linewidth=0.3, alpha=0.6)
    ax.legend(fontsize=7.5, loc="upper left")
    fig.tight_layout()
    out = Path(spec["out"])
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out)
    plt.close(fig)


if __name__ == "__main__":
    draw(json.load(sys.stdin))
