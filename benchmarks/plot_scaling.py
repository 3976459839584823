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
        color = f"C{i % 10}"
        marker = MARKERS[i % len(MARKERS)]
        ls = ":" if legend.startswith("floor") else ("--" if "torch" in legend else "-")
        # every trace as a marker; a line only through the generated ladder (one workload, 3 sizes)
        ax.scatter([p[0] for p in pts], [p[1] for p in pts], marker=marker, s=16, color=color, alpha=0.75,
                   label=legend)
        gen = sorted(p for p in pts if len(p) > 2 and p[2] == "generated")
        if len(gen) > 1:
            ax.plot([p[0] for p in gen], [p[1] for p in gen], linestyle=ls, linewidth=1.5, color=color)
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
