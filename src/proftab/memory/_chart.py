"""The memory chart: allocated and reserved bytes over time per device, the peak marked, steps shaded."""

from __future__ import annotations

from typing import Any

import polars as pl

from proftab.exceptions import UsageError
from proftab.memory._core import DEVICE_KEYS

__all__ = ["memory_chart"]


def _downsample(tl: pl.DataFrame, max_points: int) -> pl.DataFrame:
    """At most `max_points` rows per device.

    Each bin keeps its largest allocated/reserved values (the peak always survives), at the
    bin's first time.
    """
    n = tl.group_by(DEVICE_KEYS).len()["len"].max() or 0
    if int(n) <= max_points:  # type: ignore[arg-type]
        return tl
    return (tl.with_columns((pl.col("seq") * max_points // pl.len().over(DEVICE_KEYS)).alias("_bin"))
            .group_by([*DEVICE_KEYS, "device_name", "_bin"], maintain_order=True)
            .agg(pl.col("start_ns").first(), pl.col("seq").first(), pl.col("live_bytes").max(),
                 pl.col("reserved_bytes").max())
            .drop("_bin"))


def memory_chart(tl: pl.DataFrame, summary: pl.DataFrame, windows: pl.DataFrame, t0: pl.DataFrame, *,
                 device: str | None = None, max_points: int = 20_000, title: str = "memory") -> Any:
    """Allocated (`live_bytes`) and reserved bytes after every [memory] event, one panel per device.

    Parameters
    ----------
    tl, summary
        `timeline(...)` and `peak_summary(...)`.
    windows
        `proftab.steps.step_windows(events)`: shaded, labelled by step.
    t0
        `rank`, `t0`: the time axis starts at each rank's first event.
    device
        Only this device (`"cuda:0"`); default every device.
    max_points
        Per device; longer timelines keep each bin's largest values.
    """
    from proftab.plot import _alt, _data
    from proftab.render.text import fmt_bytes

    alt = _alt()
    if device is not None:
        tl = tl.filter(pl.col("device_name") == device)
        summary = summary.filter(pl.col("device_name") == device)
    if tl.is_empty():
        msg = "no [memory] events to chart" + ("" if device is None else f" on device {device!r}")
        raise UsageError(msg)
    top = max(int(tl["live_bytes"].max() or 0), int(tl["reserved_bytes"].max() or 0))  # type: ignore[arg-type]
    unit, mib = next(((u, float(n)) for u, n in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)) if top >= n),
                     ("B", 1.0))  # the axis unit adapts: 16 B, not 0.000015 MiB
    pts = _downsample(tl, max_points).join(t0, on="rank", how="left").select(
        "rank", "device_name", ((pl.col("start_ns") - pl.col("t0")) / 1e6).alias("ms"),
        (pl.col("live_bytes") / mib).alias("allocated"), (pl.col("reserved_bytes") / mib).alias("reserved"))
    long = pts.unpivot(index=["rank", "device_name", "ms"], on=["allocated", "reserved"], variable_name="series",
                       value_name="size").drop_nulls("size")
    peaks = summary.join(t0, on="rank", how="left").select(
        "rank", "device_name", ((pl.col("peak_ns") - pl.col("t0")) / 1e6).alias("ms"),
        (pl.col("peak_bytes") / mib).alias("size"),
        pl.Series("label", [f"peak {fmt_bytes(b)}" for b in summary["peak_bytes"]]))  # one per device
    steps = windows.join(t0, on="rank", how="inner").select(
        "rank", pl.format("step {}", pl.col("step")).alias("step"),
        ((pl.col("start_ns") - pl.col("t0")) / 1e6).alias("ms"), ((pl.col("end_ns") - pl.col("t0")) / 1e6).alias("ms2"))
    panels = []
    for (rank, name), part in long.group_by(["rank", "device_name"], maintain_order=True):
        x = alt.X("ms:Q", title="time since trace start (ms)")
        lines = alt.Chart(_data(part)).mark_line(interpolate="step-after").encode(
            x=x, y=alt.Y("size:Q", title=f"{name} memory ({unit})"),
            color=alt.Color("series:N", title=None, sort=["allocated", "reserved"]),
            tooltip=[alt.Tooltip("ms:Q", format=",.3f"), "series:N", alt.Tooltip("size:Q", title=unit, format=",.3f")])
        mine = steps.filter(pl.col("rank") == rank)
        layers = []
        if not mine.is_empty():
            layers.append(alt.Chart(_data(mine)).mark_rect(opacity=0.08, color="gray").encode(
                x="ms:Q", x2="ms2:Q", tooltip=["step:N"]))
            layers.append(alt.Chart(_data(mine)).mark_text(align="left", baseline="top", dx=2, dy=2, color="gray")
                          .encode(x="ms:Q", y=alt.value(0), text="step:N"))
        peak = peaks.filter((pl.col("rank") == rank) & (pl.col("device_name") == name))
        marks = alt.Chart(_data(peak))
        layers += [lines, marks.mark_rule(color="firebrick", strokeDash=[4, 3]).encode(x="ms:Q"),
                   marks.mark_point(color="firebrick", filled=True, size=60).encode(x="ms:Q", y="size:Q"),
                   marks.mark_text(align="left", dx=6, dy=-6, color="firebrick").encode(x="ms:Q", y="size:Q",
                                                                                        text="label:N")]
        panels.append(alt.layer(*layers).properties(width=640, height=180))
    return alt.vconcat(*panels, title=title).resolve_scale(y="independent")
