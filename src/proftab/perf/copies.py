"""Copies on the roofline: each memcpy / memset rated against the bandwidth that bounds it.

A copy does no arithmetic, so its roof is one bandwidth, chosen by what it moves through:

| copy | ceiling | bytes through it (`moved_bytes`) |
|---|---|---|
| `memset` | `hbm` (`peak_tb_per_s` of the device) | `bytes` (written once) |
| `memcpy DtoD` | `hbm` | 2 × `bytes` (read, then written) |
| `memcpy HtoD`, `DtoH` | `host_link` (`host_link_tb_s`: PCIe, one direction) | `bytes` |
| `memcpy PtoP`, `HtoH`, unknown | none: `roofline_share` is null and `note` says why | `bytes` |

`copies(device_copies, peaks)`: one row per copy with `tb_per_s` (`moved_bytes / dur_ns`),
`ceiling`, `peak_tb_per_s`, `roofline_share` (achieved over peak: above 1 is above the peak,
flagged in `above_peak`, never clipped), `lost_ns` and `note` (why a share is null).
`copy_summary(perf_copies)`: the same per copy kind (`copy`: ``memset``, ``memcpy DtoD``, ...).
Both are linear in the copies.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import polars as pl

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["CEILINGS", "copies", "copy_summary"]

#: the ceiling of each copy kind (`copy` label), and the factor from `bytes` to the bytes through it
CEILINGS: dict[str, tuple[str, int]] = {
    "memset": ("hbm", 1), "memcpy DtoD": ("hbm", 2), "memcpy HtoD": ("host_link", 1), "memcpy DtoH": ("host_link", 1),
}
_NO_CEILING = {
    "memcpy PtoP": "peer-to-peer (NVLink / xGMI): no peer-link rate in the peaks table",
    "memcpy HtoH": "host to host: no device link bounds it",
}
_PEAK_KEY = {"hbm": "hbm_tb_s", "host_link": "host_link_tb_s"}

_OUT = {"rank": pl.Int32, "event_id": pl.Int64, "copy": pl.String, "name": pl.String, "op_name": pl.String,
        "bytes": pl.Int64, "moved_bytes": pl.Int64, "dur_ns": pl.Int64, "tb_per_s": pl.Float64,
        "ceiling": pl.String, "peak_device": pl.String, "peak_tb_per_s": pl.Float64, "roofline_share": pl.Float64,
        "above_peak": pl.Boolean, "lost_ns": pl.Int64, "note": pl.String}


def _peak_rows(ranks: list[int], peaks: dict[str, Any] | None,
               rank_peaks: Mapping[int, dict[str, Any] | None] | None) -> pl.DataFrame:
    rows = []
    for r in ranks:
        p = (rank_peaks or {}).get(r, peaks) if rank_peaks else peaks
        rows.append({"rank": r, "peak_device": None if p is None else p.get("device"),
                     "_hbm": None if p is None else p.get("hbm_tb_s"),
                     "_host_link": None if p is None else p.get("host_link_tb_s")})
    return pl.DataFrame(rows, schema={"rank": pl.Int32, "peak_device": pl.String, "_hbm": pl.Float64,
                                      "_host_link": pl.Float64})


def copies(device_copies: pl.DataFrame, peaks: dict[str, Any] | None = None, *,
           rank_peaks: Mapping[int, dict[str, Any] | None] | None = None) -> pl.DataFrame:
    """Every memcpy / memset of `device_copies` (`tr.device.copies()`) rated against its ceiling.

    Parameters
    ----------
    device_copies
        `proftab.device.copies` rows (`rank`, `event_id`, `name`, `kind`, `direction`, `bytes`,
        `dur_ns`, `op_name`).
    peaks
        Peak rates (`proftab.perf.resolve_peaks`); its `hbm_tb_s` and `host_link_tb_s` are used.
    rank_peaks
        Peak rates per rank, used instead of `peaks` (a rank missing from it uses `peaks`).
    """
    if device_copies.is_empty():
        return pl.DataFrame(schema=_OUT)
    df = device_copies.with_columns(
        copy=pl.when(pl.col("kind") == "memset").then(pl.lit("memset"))
        .otherwise(pl.concat_str(pl.lit("memcpy "), pl.col("direction").fill_null("?"))))
    ranks = [int(r) for r in df["rank"].unique().sort().to_list()]
    df = df.join(_peak_rows(ranks, peaks, rank_peaks), on="rank", how="left")
    ceiling = pl.col("copy").replace_strict({k: c for k, (c, _) in CEILINGS.items()}, default=None,
                                            return_dtype=pl.String)
    factor = pl.col("copy").replace_strict({k: f for k, (_, f) in CEILINGS.items()}, default=1,
                                           return_dtype=pl.Int64)
    df = df.with_columns(ceiling=ceiling, moved_bytes=pl.col("bytes") * factor)
    peak = (pl.when(pl.col("ceiling") == "hbm").then(pl.col("_hbm"))
            .when(pl.col("ceiling") == "host_link").then(pl.col("_host_link")))
    ns = pl.col("dur_ns").cast(pl.Float64)
    df = df.with_columns(peak_tb_per_s=peak,
                         tb_per_s=pl.when(pl.col("dur_ns") > 0).then(pl.col("moved_bytes") / ns / 1e3))
    share = pl.when(pl.col("peak_tb_per_s") > 0).then(pl.col("tb_per_s") / pl.col("peak_tb_per_s"))
    df = df.with_columns(roofline_share=share)
    no_peak = pl.concat_str(pl.lit("the peaks table has no "),
                            pl.col("ceiling").replace_strict({"hbm": "HBM", "host_link": "host-link"}, default=None,
                                                             return_dtype=pl.String),
                            pl.lit(" rate for "), pl.col("peak_device"))
    note = (pl.when(pl.col("roofline_share").is_not_null()).then(pl.lit(None, pl.String))
            .when(pl.col("copy").is_in(list(_NO_CEILING)))
            .then(pl.col("copy").replace_strict(_NO_CEILING, default=None, return_dtype=pl.String))
            .when(pl.col("ceiling").is_null()).then(pl.lit("copy direction unknown: no ceiling"))
            .when(pl.col("bytes").is_null()).then(pl.lit("the trace records no bytes for this copy"))
            .when(pl.col("dur_ns") <= 0).then(pl.lit("zero duration"))
            .when(pl.col("peak_device").is_null()).then(pl.lit("device unknown: pass peaks= (CLI --peaks)"))
            .otherwise(no_peak))
    df = df.with_columns(
        note=note,
        above_peak=pl.when(pl.col("roofline_share").is_not_null()).then(pl.col("roofline_share") > 1.0),
        lost_ns=pl.when(pl.col("roofline_share").is_not_null()).then(
            (ns * (1 - pl.col("roofline_share").clip(upper_bound=1.0))).round().cast(pl.Int64)))
    return df.select([pl.col(c).cast(t) for c, t in _OUT.items()])


def copy_summary(perf_copies: pl.DataFrame) -> pl.DataFrame:
    """Per copy kind (`copy`) and ceiling: `n_copies`, `bytes`, `moved_bytes`, `dur_ns`, `share` of
    the copies' time, `tb_per_s` (Σ moved / Σ time, over the copies with bytes), `peak_tb_per_s` (time-weighted),
    `roofline_share` (the time at the peak over the time taken, over the copies with a peak),
    `n_above_peak`, `above_peak`, `lost_ns`, `note` (the first reason a share is null), most time first.
    """
    total = int(perf_copies["dur_ns"].sum() or 0)
    ns = pl.col("dur_ns")
    rated = pl.col("roofline_share").is_not_null()
    out = perf_copies.group_by("copy", "ceiling").agg(
        n_copies=pl.len().cast(pl.Int64),
        bytes=pl.when(pl.col("bytes").is_not_null().any()).then(pl.col("bytes").sum()),
        moved_bytes=pl.when(pl.col("moved_bytes").is_not_null().any()).then(pl.col("moved_bytes").sum()),
        dur_ns=ns.sum(),
        _moved_known=pl.col("moved_bytes").sum().cast(pl.Float64),
        _ns_known=ns.filter(pl.col("moved_bytes").is_not_null()).sum().cast(pl.Float64),
        _ns_rated=ns.filter(rated).sum().cast(pl.Float64),
        _roof_ns=(pl.col("moved_bytes") / pl.col("peak_tb_per_s") / 1e3).filter(rated).sum(),
        _peak_ns=(pl.col("peak_tb_per_s") * ns).filter(rated).sum(),
        n_above_peak=pl.col("above_peak").fill_null(False).sum().cast(pl.Int64),
        lost_ns=pl.when(pl.col("lost_ns").is_not_null().any()).then(pl.col("lost_ns").sum()),
        note=pl.col("note").drop_nulls().first(),
    ).with_columns(
        share=ns / total if total else pl.lit(None, pl.Float64),
        tb_per_s=pl.when(pl.col("_ns_known") > 0).then(pl.col("_moved_known") / pl.col("_ns_known") / 1e3),
        peak_tb_per_s=pl.when(pl.col("_ns_rated") > 0).then(pl.col("_peak_ns") / pl.col("_ns_rated")),
        roofline_share=pl.when(pl.col("_ns_rated") > 0).then(pl.col("_roof_ns") / pl.col("_ns_rated")),
    ).with_columns(above_peak=pl.when(pl.col("roofline_share").is_not_null()).then(pl.col("roofline_share") > 1.0))
    cols = ["copy", "ceiling", "n_copies", "bytes", "moved_bytes", "dur_ns", "share", "tb_per_s", "peak_tb_per_s",
            "roofline_share", "n_above_peak", "above_peak", "lost_ns", "note"]
    return out.select(cols).sort(["dur_ns", "copy"], descending=[True, False])
