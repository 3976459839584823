"""The roofline chart: ops as points (log-log: FLOPs per byte vs achieved TFLOP/s), sized by time;
beside it, the copies (memcpy / memset) on their bandwidth roofline (bytes vs achieved TB/s)."""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl

__all__ = ["copies_chart", "roofline_chart"]

_CEILING_LABEL = {"hbm": "HBM", "host_link": "host link (PCIe, one direction)"}


def copies_chart(perf_copies: pl.DataFrame, peaks: dict[str, Any] | None = None, *, title: str | None = None) -> Any:
    """Copies on the bandwidth roofline (log-log): x = bytes of the copy, y = achieved TB/s of the
    bytes through its ceiling (`moved_bytes`), colour = copy kind, size = time; the HBM and
    host-link peaks as labelled horizontal rules (`proftab.perf.copies`)."""
    from proftab.plot import _alt, _data

    alt = _alt()
    pts = perf_copies.filter((pl.col("bytes") > 0) & (pl.col("dur_ns") > 0)).select(
        "event_id", "copy", "name", "op_name", "bytes", "moved_bytes", "dur_ns", "tb_per_s", "ceiling",
        "peak_tb_per_s", "roofline_share", "above_peak", "note").with_columns(time_us=pl.col("dur_ns") / 1000)
    x = alt.X("bytes:Q", scale=alt.Scale(type="log"), title="bytes per copy")
    y = alt.Y("tb_per_s:Q", scale=alt.Scale(type="log"), title="achieved TB/s (bytes through the ceiling)")
    layers = [alt.Chart(_data(pts)).mark_circle(opacity=0.6).encode(
        x=x, y=y, size=alt.Size("time_us:Q", title="copy time (µs)"), color=alt.Color("copy:N", title="copy"),
        shape=alt.Shape("above_peak:N", title="above the peak"),
        tooltip=["copy:N", "name:N", "op_name:N", "event_id:Q", "bytes:Q", "moved_bytes:Q", "time_us:Q",
                 alt.Tooltip("tb_per_s:Q", format=".4g"), "ceiling:N", "peak_tb_per_s:Q",
                 alt.Tooltip("roofline_share:Q", format=".3f"), "note:N"])]
    rules = [{"ceiling": c, "tb_per_s": float(peaks[k]),
              "label": f"{_CEILING_LABEL[c]} {float(peaks[k]):g} TB/s"}
             for c, k in (("hbm", "hbm_tb_s"), ("host_link", "host_link_tb_s"))
             if peaks and peaks.get(k) and c in set(pts["ceiling"].drop_nulls().to_list())]
    if rules and not pts.is_empty():
        lo = float(pts["bytes"].min())  # type: ignore[arg-type]
        ceil = pl.DataFrame(rules).with_columns(bytes=pl.lit(lo))
        layers += [alt.Chart(_data(ceil)).mark_rule(strokeDash=[4, 2]).encode(y=y, tooltip=["label:N"]),
                   alt.Chart(_data(ceil)).mark_text(align="left", dy=-7, fontSize=11).encode(x=x, y=y, text="label:N")]
    name = title or f"copies · {peaks['device'] if peaks else 'no device peaks'}"
    return alt.layer(*layers).properties(title=name, width=420, height=360)


def roofline_chart(perf_ops: pl.DataFrame, peaks: dict[str, Any] | None = None, *, dtype: str = "bf16",
                   min_share: float = 0.0, title: str | None = None, copies: pl.DataFrame | None = None) -> Any:
    """Log-log roofline of `tr.perf.ops()`: one point per op instance with FLOPs and bytes.

    x = `flops_per_byte`, y = achieved `tflops_per_s`, size = `device_ns`, colour = family.
    With `peaks`, the device's roof for `dtype` (`min(peak, bandwidth · intensity)`) and
    the fp32 vector roof are drawn as lines, each ceiling labelled (``bf16 peak 989.4 TFLOP/s``,
    ``memory 3.35 TB/s``). `min_share` drops points below that share of
    the modelled device time. With `copies` (`tr.perf.copies()`) holding rows, the chart is
    the roofline beside `copies_chart` (one chart: ``chart.hconcat[0]`` is the roofline).
    """
    from proftab.plot import _alt, _data

    alt = _alt()
    pts = perf_ops.filter((pl.col("flops") > 0) & (pl.col("bytes") > 0) & (pl.col("device_ns") > 0))
    total = int(pts["device_ns"].sum() or 0)
    if total and min_share > 0:
        pts = pts.filter(pl.col("device_ns") >= min_share * total)
    extra = [c for c in ("roofline_share", "bound") if c in pts.columns]
    pts = pts.select("event_id", "name", "family", "device_ns", "flops", "bytes", "flops_per_byte",
                     "tflops_per_s", "tb_per_s", *extra).with_columns(time_us=pl.col("device_ns") / 1000)
    x = alt.X("flops_per_byte:Q", scale=alt.Scale(type="log"), title="arithmetic intensity (FLOP/byte)")
    y = alt.Y("tflops_per_s:Q", scale=alt.Scale(type="log"), title="achieved TFLOP/s")
    points = alt.Chart(_data(pts)).mark_circle(opacity=0.6).encode(
        x=x, y=y, size=alt.Size("time_us:Q", title="device time (µs)"), color=alt.Color("family:N"),
        tooltip=["name:N", "event_id:Q", "family:N", "time_us:Q", "tflops_per_s:Q", "tb_per_s:Q",
                 *(["roofline_share:Q", "bound:N"] if "bound" in pts.columns else [])])
    layers = [points]
    if peaks and peaks.get("hbm_tb_s") and not pts.is_empty():
        intensity = pts["flops_per_byte"].to_numpy()
        lo, hi = float(intensity.min()) / 4, float(intensity.max()) * 4
        xs = np.logspace(np.log10(lo), np.log10(hi), 64)
        roofs = []
        for key in dict.fromkeys([dtype, "fp32"]):
            peak = peaks.get(key)
            if peak:
                roofs.append(pl.DataFrame({"flops_per_byte": xs, "tflops_per_s": np.minimum(
                    float(peak), float(peaks["hbm_tb_s"]) * xs), "roof": f"{peaks.get('device', '')} {key}"}))
        if roofs:
            layers.append(alt.Chart(_data(pl.concat(roofs))).mark_line(strokeDash=[4, 2]).encode(
                x=x, y=y, detail="roof:N", tooltip=["roof:N"]))
            # each ceiling labelled: compute peaks at the right end, the memory slope at the left
            bw = float(peaks["hbm_tb_s"])
            ceilings = pl.DataFrame({
                "flops_per_byte": [hi] * len(roofs), "tflops_per_s": [float(r["tflops_per_s"][-1]) for r in roofs],
                "label": [f"{r['roof'][0].rsplit(' ', 1)[-1]} peak {float(r['tflops_per_s'][-1]):g} TFLOP/s"
                          for r in roofs]})
            slope = pl.DataFrame({"flops_per_byte": [lo], "tflops_per_s": [bw * lo], "label": [f"memory {bw:g} TB/s"]})
            layers += [alt.Chart(_data(ceilings)).mark_text(align="right", dy=-7, fontSize=11).encode(
                           x=x, y=y, text="label:N"),
                       alt.Chart(_data(slope)).mark_text(align="left", dy=-7, fontSize=11).encode(
                           x=x, y=y, text="label:N")]
    name = title or f"roofline · {peaks['device'] if peaks else 'no device peaks'}"
    chart = alt.layer(*layers).properties(title=name, width=520, height=360).interactive(name="roofline_zoom")
    if copies is None or copies.filter((pl.col("bytes") > 0) & (pl.col("dur_ns") > 0)).is_empty():
        return chart
    return alt.hconcat(chart, copies_chart(copies, peaks).interactive(name="copies_zoom")).resolve_scale(
        color="independent", size="independent", shape="independent")
