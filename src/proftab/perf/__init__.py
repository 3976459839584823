"""Perf models per op: FLOPs, bytes, achieved TFLOP/s and TB/s, and the roofline (`tr.perf`).

Free functions over frames:

* `ops(nested, activities, peaks=None)`: one row per host op that owns device time. Every
  device activity (kernel, memcpy, memset) belongs to the *innermost* op around its launch
  that has a perf model (`perf.models.OP_FAMILY`: `aten::linear -> aten::addmm` gives the
  row to `aten::addmm`), or to its launching op when no enclosing op has one; so each
  activity counts once and the rows' `device_ns` add up to the attributed device time.
  Columns: `rank`, `event_id`, `name`, `family`, the parsed parameters, `flops`, `bytes`,
  `device_ns` (Σ durations of the op's activities), `n_kernels` (its activities), `tflops_per_s`, `tb_per_s`,
  `flops_per_byte`, `peak_dtype`, `peak_tflops`, `peak_tb_per_s`, `bound` (compute | memory),
  `roofline_share` (the roofline time `max(flops / peak, bytes / bandwidth)` over `device_ns`:
  1.0 is on the roofline; a fraction, formerly `roofline_pct`) and
  `lost_ns` = `device_ns · (1 - min(roofline_share, 1))`.
* `summary(ops, by="family")`: per family (or `"name"`): time share, FLOPs, bytes,
  achieved and peak rates, time-weighted `roofline_share`, `lost_ns`.
* `lost(ops, n)`: the ops with the most time lost to the roofline.
* `model_coverage(ops)`: share of device time in ops with a model (one row).
* `resolved_peaks_frame(peaks)`: the resolved peak rates as one row.
* `generated_figures(kernels)`: torch.compile's generated device kernels' FLOPs and bytes per
  launching op (`tr.compiled.kernels()`), which `ops(generated=)` gives to their launcher rows
  (family `inductor`).
* `proftab.perf.copies`: memcpy / memset on the bandwidth roofline (HBM for DtoD and memset,
  the host link for HtoD / DtoH), per copy and per copy kind.

`tr.perf.ops()`, `tr.perf.summary()`, `tr.perf.lost()`, `tr.perf.model_coverage()`, `tr.perf.device_peaks()`,
`tr.perf.copies()`, `tr.perf.copy_summary()`, `tr.perf.roofline()` (chart) wrap them; peaks come from the
trace's `deviceProperties` (`perf.peaks`), or `peaks=` (a `PEAKS` key such as `"H100-SXM"`, or a dict of rates).
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl

from proftab import kinds
from proftab.api import register_trace_namespace
from proftab.dtypes import PRECISIONS
from proftab.exceptions import ProftabError
from proftab.intervals.tree import nearest_ancestor, row_positions
from proftab.perf.models import (
    _COLLECTIVE_RE,
    FAMILIES,
    MATRIX_FAMILIES,
    OP_FAMILY,
    inductor_rows,
    kernel_math,
    model_ops,
)
from proftab.perf.peaks import PEAKS, match_peaks

if TYPE_CHECKING:
    from collections.abc import Mapping

    from proftab.trace import Trace

__all__ = ["FAMILIES", "HOST_COLUMNS", "PerfNamespace", "coverage", "lost", "model_coverage", "ops",
           "resolve_peaks", "resolved_peaks_frame", "summary"]

#: the nested columns `ops` reads
HOST_COLUMNS = ("rank", "event_id", "cat", "name", "parent_id", "start_ns", "input_dims", "input_type",
                "input_strides", "concrete_inputs", "in_msg_nelems", "dtype")
_ACT_COLUMNS = ("rank", "kind", "dur_ns", "op_id", "name")
_DTYPE_KEYS = PRECISIONS
_RATE_KEYS = (*_DTYPE_KEYS, "hbm_tb_s", "host_link_tb_s")


def resolve_peaks(peaks: str | dict[str, Any] | None, device_properties: list[dict[str, Any]] | None
                  ) -> dict[str, Any] | None:
    """The peak rates to use: `peaks` (a `PEAKS` key or a dict of rates), else the trace's device."""
    if isinstance(peaks, str):
        if peaks not in PEAKS:
            msg = f"unknown device {peaks!r}; known: {sorted(PEAKS)}"
            raise ProftabError(msg)
        return {"device": peaks, **PEAKS[peaks]}
    if isinstance(peaks, dict):
        bad = sorted(set(peaks) - {*_RATE_KEYS, "device", "source"})
        if bad:
            msg = f"unknown peak keys {bad!r}; valid: {list(_RATE_KEYS)}"
            raise ProftabError(msg)
        return {"device": "custom", **peaks}
    return match_peaks(device_properties)


def _owners(host: pl.DataFrame, act: pl.DataFrame) -> pl.DataFrame:
    """Per activity the host row that owns it: innermost modelled op around its launch."""
    rank = host["rank"].to_numpy()
    parent = row_positions(rank, host["event_id"].to_numpy(), rank, host["parent_id"].fill_null(-1).to_numpy())
    name = host["name"].cast(pl.String)
    modelled = (name.is_in(list(OP_FAMILY)) | name.str.contains(_COLLECTIVE_RE)).fill_null(False).to_numpy()
    modelled &= (host["cat"].cast(pl.String) == kinds.CPU_OP).fill_null(False).to_numpy()
    pos = row_positions(rank, host["event_id"].to_numpy(), act["rank"].to_numpy(), act["op_id"].to_numpy())
    act = act.with_columns(pl.Series("_pos", pos)).filter(pl.col("_pos") >= 0)
    start = act["_pos"].to_numpy()
    up = nearest_ancestor(parent, start, modelled)
    owner = np.where(modelled[start], start, np.where(up >= 0, up, start))
    return act.with_columns(pl.Series("_owner", owner))


def ops(nested: pl.DataFrame, activities: pl.DataFrame, peaks: dict[str, Any] | None = None, *,
        rank_peaks: Mapping[int, dict[str, Any] | None] | None = None,
        generated: pl.DataFrame | None = None) -> pl.DataFrame:
    """One row per host op that owns device time, with its perf model (module docstring).

    Parameters
    ----------
    nested
        `Trace.nested` (at least `HOST_COLUMNS`; missing optional ones count as null).
    activities
        `Trace.device.activities()` (`rank`, `kind`, `dur_ns`, `op_id`).
    peaks
        Peak rates (`resolve_peaks`): TFLOP/s per `fp64`/`fp32`/`tf32`/`bf16`/`fp16`/`fp8`
        and `hbm_tb_s`; None leaves the roofline columns null.
    rank_peaks
        Peak rates per rank (a multi-rank trace of different devices), used instead of `peaks`;
        a rank missing from it uses `peaks`. The `peak_device` column names each row's device.
    generated
        torch.compile's generated kernels with a figure (`generated_figures`): `rank`,
        `event_id` (the launching op), `flops`, `bytes`. A launcher row with no model of its
        own (family `other`) takes them as family `inductor` (docs/compiled.md).
    """
    cols = [c for c in HOST_COLUMNS if c in nested.columns]
    host = nested.select(cols).filter(kinds.is_host())
    act = activities.select(_ACT_COLUMNS).filter(pl.col("op_id").is_not_null() & pl.col("kind").cast(pl.String).is_in(
        kinds.WORK_KINDS))
    owned = _owners(host, act) if not act.is_empty() and not host.is_empty() else act.with_columns(
        _owner=pl.lit(0, pl.Int64)).clear()
    per = owned.group_by("_owner").agg(device_ns=pl.col("dur_ns").sum(), n_kernels=pl.len().cast(pl.Int64))
    per = per.join(_kernel_math(owned), on="_owner", how="left")
    rows = host.with_row_index("_owner").with_columns(pl.col("_owner").cast(pl.Int64)).join(
        per.with_columns(pl.col("_owner").cast(pl.Int64)), on="_owner", how="inner").sort("_owner")
    out = model_ops(rows.drop("_owner", "parent_id", "cat", "start_ns"))
    if generated is not None and generated.height:
        out = inductor_rows(out, generated)
    # a matrix op whose kernels name their math mode (TF32 tensor cores on fp32 data, HMMA, MFMA)
    # is bounded by that mode's peak, not its input dtype's
    out = out.with_columns(peak_dtype=pl.when(pl.col("family").is_in(MATRIX_FAMILIES)
                                              & pl.col("kernel_math").is_not_null())
                           .then(pl.col("kernel_math")).otherwise(pl.col("peak_dtype")))
    if rank_peaks:
        out = out.with_row_index("_order")
        parts = [_rates(out.filter(pl.col("rank") == r), rank_peaks.get(int(r), peaks))
                 for r in out["rank"].unique().sort().to_list()]
        out = (pl.concat(parts, how="diagonal_relaxed").sort("_order").drop("_order") if parts
               else _rates(out.drop("_order"), peaks))
    else:
        out = _rates(out, peaks)
    return out.drop("input_dims", "input_type", "input_strides", "concrete_inputs", "in_msg_nelems",
                                   "dtype", strict=False)


#: generated-kernel kinds whose FLOPs Inductor counts as 0 (its `estimate_flops` counts GEMMs and convolutions only)
_NO_FLOP_KINDS = ("pointwise", "reduction", "persistent_reduction")


def generated_figures(kernels: pl.DataFrame) -> pl.DataFrame | None:
    """Per launching op of generated device kernels: `flops`, `bytes` (None when no kernel has a figure).

    `tr.compiled.kernels()` rows: Inductor's own `inductor_bytes` / `inductor_flops` (launch
    args) where present, else the provenance model (`bytes`, `flops`); a pointwise or
    reduction kernel with bytes and no FLOP figure has 0 FLOPs, as Inductor counts them.
    """
    k = kernels.filter(pl.col("on_device") & pl.col("launch_id").is_not_null())
    if not k.height:
        return None
    k = k.with_columns(_b=pl.coalesce("inductor_bytes", "bytes")).with_columns(
        _f=pl.coalesce("inductor_flops", "flops", pl.when(pl.col("_b").is_not_null() & pl.col("kernel_kind").is_in(
            _NO_FLOP_KINDS)).then(pl.lit(0, pl.Int64))))
    out = k.filter(pl.col("_b").is_not_null() & pl.col("_f").is_not_null()).group_by(
        "rank", pl.col("launch_id").alias("event_id")).agg(pl.col("_f").sum().alias("flops"),
                                                          pl.col("_b").sum().alias("bytes"))
    return out if out.height else None


def _kernel_math(owned: pl.DataFrame) -> pl.DataFrame:
    """Per owner the math mode its kernels' names say (`models.kernel_math`), the one with the most time."""
    modes = owned.select("_owner", "dur_ns", _mode=kernel_math(pl.col("name").cast(pl.String))).drop_nulls("_mode")
    return modes.group_by("_owner", "_mode").agg(pl.col("dur_ns").sum()).sort(
        ["_owner", "dur_ns", "_mode"], descending=[False, True, False]).group_by("_owner", maintain_order=True).agg(
        kernel_math=pl.col("_mode").first())


def _rates(df: pl.DataFrame, peaks: dict[str, Any] | None) -> pl.DataFrame:
    ns = pl.col("device_ns").cast(pl.Float64)
    df = df.with_columns(
        tflops_per_s=pl.when(ns > 0).then(pl.col("flops") / ns / 1e3),
        tb_per_s=pl.when(ns > 0).then(pl.col("bytes") / ns / 1e3),
        flops_per_byte=pl.when(pl.col("bytes") > 0).then(pl.col("flops") / pl.col("bytes")),
    )
    df = df.with_columns(peak_device=pl.lit(None if peaks is None else peaks.get("device"), pl.String))
    if peaks is None:
        return df.with_columns(peak_tflops=pl.lit(None, pl.Float64), peak_tb_per_s=pl.lit(None, pl.Float64),
                               bound=pl.lit(None, pl.String), roofline_share=pl.lit(None, pl.Float64),
                               lost_ns=pl.lit(None, pl.Int64), above_peak=pl.lit(None, pl.Boolean))
    rates = {k: float(v) for k, v in peaks.items() if k in _DTYPE_KEYS and v is not None}
    bw = peaks.get("hbm_tb_s")
    peak = pl.col("peak_dtype").replace_strict(rates, default=None, return_dtype=pl.Float64)
    # a matrix dtype the device lacks (e.g. tf32 on a V100) falls back to its fp32 rate
    peak = peak.fill_null(pl.when(pl.col("peak_dtype").is_not_null()).then(pl.lit(rates.get("fp32"))))
    df = df.with_columns(peak_tflops=peak, peak_tb_per_s=pl.lit(None if bw is None else float(bw), pl.Float64))
    t_c = pl.when(pl.col("peak_tflops") > 0).then(pl.col("flops") / pl.col("peak_tflops") / 1e3)  # ns
    t_m = pl.when(pl.col("peak_tb_per_s") > 0).then(pl.col("bytes") / pl.col("peak_tb_per_s") / 1e3)
    t_roof = pl.max_horizontal(t_c.fill_null(0), t_m.fill_null(0))
    known = pl.col("flops").is_not_null() & pl.col("bytes").is_not_null() & (pl.col("family") != "collective")
    pct = pl.when(known & (ns > 0) & (t_c.is_not_null() | t_m.is_not_null())).then(t_roof / ns)
    bound = pl.when(known & (t_c.is_not_null() | t_m.is_not_null())).then(
        pl.when(t_c.fill_null(0) >= t_m.fill_null(0)).then(pl.lit("compute")).otherwise(pl.lit("memory")))
    df = df.with_columns(bound=bound, roofline_share=pct)
    return df.with_columns(lost_ns=pl.when(pl.col("roofline_share").is_not_null()).then(
        (ns * (1 - pl.col("roofline_share").clip(upper_bound=1.0))).round().cast(pl.Int64)),
        above_peak=pl.when(pl.col("roofline_share").is_not_null()).then(pl.col("roofline_share") > 1.0))


def summary(perf_ops: pl.DataFrame, by: str = "family") -> pl.DataFrame:
    """Per `by` (`family` or `name`): `n_ops`, device time and share, FLOPs, bytes, achieved and peak
    rates, the time-weighted roofline fraction and the time lost to it, most time first.
    """
    if by not in ("family", "name"):
        msg = f"by must be 'family' or 'name', not {by!r}"
        raise ProftabError(msg)
    total = int(perf_ops["device_ns"].sum() or 0)
    ns = pl.col("device_ns")
    modelled = pl.col("flops").is_not_null()
    roof_ns = pl.col("roofline_share") * ns
    keys = ["family"] if by == "family" else ["name", "family"]
    out = perf_ops.group_by(keys).agg(
        n_ops=pl.len().cast(pl.Int64),
        device_ns=ns.sum(),
        modelled_ns=ns.filter(modelled).sum(),
        flops=pl.when(modelled.any()).then(pl.col("flops").sum()),
        bytes=pl.when(pl.col("bytes").is_not_null().any()).then(pl.col("bytes").sum()),
        _mod_ns=ns.filter(modelled).sum().cast(pl.Float64),
        _roof_ns=roof_ns.sum(),
        _roof_den=ns.filter(pl.col("roofline_share").is_not_null()).sum().cast(pl.Float64),
        # the family's peak: its ops' peaks weighted by their device time (ops of several dtypes
        # or math modes mix), and the peak dtype that has the most of its time
        _peak_ns=(pl.col("peak_tflops") * ns).sum(),
        _peak_den=ns.filter(pl.col("peak_tflops").is_not_null()).sum().cast(pl.Float64),
        peak_dtype=pl.col("peak_dtype").filter(pl.col("peak_tflops").is_not_null()).sort_by(
            ns.filter(pl.col("peak_tflops").is_not_null()), descending=True).first(),
        n_above_peak=pl.col("above_peak").fill_null(False).sum().cast(pl.Int64),
        lost_ns=pl.when(pl.col("lost_ns").is_not_null().any()).then(pl.col("lost_ns").sum()),
        n_compute_bound=(pl.col("bound") == "compute").sum().cast(pl.Int64),
    ).with_columns(
        share=ns / total if total else pl.lit(None, pl.Float64),
        tflops_per_s=pl.when(pl.col("_mod_ns") > 0).then(pl.col("flops") / pl.col("_mod_ns") / 1e3),
        tb_per_s=pl.when(pl.col("_mod_ns") > 0).then(pl.col("bytes") / pl.col("_mod_ns") / 1e3),
        roofline_share=pl.when(pl.col("_roof_den") > 0).then(pl.col("_roof_ns") / pl.col("_roof_den")),
        peak_tflops=pl.when(pl.col("_peak_den") > 0).then(pl.col("_peak_ns") / pl.col("_peak_den")),
    ).with_columns(above_peak=pl.when(pl.col("roofline_share").is_not_null()).then(pl.col("roofline_share") > 1.0))
    cols = [*keys, "n_ops", "device_ns", "share", "modelled_ns", "flops", "bytes", "tflops_per_s", "tb_per_s",
            "peak_dtype", "peak_tflops", "roofline_share", "n_compute_bound", "lost_ns", "n_above_peak", "above_peak"]
    return out.select(cols).sort(["device_ns", *keys], descending=[True, *([False] * len(keys))])


def lost(perf_ops: pl.DataFrame, n: int = 20) -> pl.DataFrame:
    """The `n` op instances with the most device time lost to the roofline (`lost_ns`)."""
    cols = [c for c in ("rank", "event_id", "name", "family", "device_ns", "flops", "bytes", "tflops_per_s",
                        "tb_per_s", "bound", "roofline_share", "lost_ns") if c in perf_ops.columns]
    return perf_ops.filter(pl.col("lost_ns").is_not_null()).sort(
        ["lost_ns", "event_id"], descending=[True, False]).head(n).select(cols)


def model_coverage(perf_ops: pl.DataFrame) -> pl.DataFrame:
    """Device time in ops with a model (non-null `flops`, collectives excluded from both), one row:
    `device_ns`, `modelled_ns`, `modelled_share` (null without device time), `n_ops`,
    `n_modelled_ops`, `n_unknown_ops`.
    """
    work = perf_ops.filter(pl.col("family") != "collective")
    total = int(work["device_ns"].sum() or 0)
    mod = int(work.filter(pl.col("flops").is_not_null())["device_ns"].sum() or 0)
    return pl.DataFrame({"device_ns": [total], "modelled_ns": [mod], "modelled_share": [mod / total if total else None],
                         "n_ops": [work.height], "n_modelled_ops": [int(work["flops"].is_not_null().sum())],
                         "n_unknown_ops": [int(work["flops"].is_null().sum())]},
                        schema={"device_ns": pl.Int64, "modelled_ns": pl.Int64, "modelled_share": pl.Float64,
                                "n_ops": pl.Int64, "n_modelled_ops": pl.Int64, "n_unknown_ops": pl.Int64})


def coverage(perf_ops: pl.DataFrame) -> dict[str, Any]:
    """Deprecated (one release): `model_coverage` as the old dict (`coverage`, `ops`, `modelled_ops`, `unknown_ops`)."""
    warnings.warn("proftab.perf.coverage (a dict) is deprecated: use model_coverage (a one-row frame; coverage -> "
                  "modelled_share, ops -> n_ops, modelled_ops -> n_modelled_ops, unknown_ops -> n_unknown_ops)",
                  DeprecationWarning, stacklevel=2)
    row = model_coverage(perf_ops).row(0, named=True)
    return {"device_ns": row["device_ns"], "modelled_ns": row["modelled_ns"], "coverage": row["modelled_share"],
            "ops": row["n_ops"], "modelled_ops": row["n_modelled_ops"], "unknown_ops": row["n_unknown_ops"]}


def resolved_peaks_frame(peaks: dict[str, Any] | None) -> pl.DataFrame:
    """Resolved peak rates as one row: `device`, `peak_<dtype>_tflops` per math mode (null where the
    device has none), `peak_tb_per_s` (HBM), `peak_host_link_tb_per_s` (the host link, one
    direction; null where the table does not know it), `source`; no row when the device is unknown."""
    schema: dict[str, Any] = {"device": pl.String, **{f"peak_{k}_tflops": pl.Float64 for k in _DTYPE_KEYS},
                              "peak_tb_per_s": pl.Float64, "peak_host_link_tb_per_s": pl.Float64, "source": pl.String}
    if peaks is None:
        return pl.DataFrame(schema=schema)
    row = {"device": peaks.get("device"), **{f"peak_{k}_tflops": peaks.get(k) for k in _DTYPE_KEYS},
           "peak_tb_per_s": peaks.get("hbm_tb_s"), "peak_host_link_tb_per_s": peaks.get("host_link_tb_s"),
           "source": peaks.get("source")}
    return pl.DataFrame([row], schema=schema)


@register_trace_namespace("perf")
class PerfNamespace:
    """`tr.perf`: perf models and the roofline (see `proftab.perf`)."""

    def __init__(self, trace: Trace) -> None:
        self._trace = trace

    def _peaks(self, peaks: str | dict[str, Any] | None = None) -> dict[str, Any] | None:
        return resolve_peaks(peaks, self._trace.meta.get("deviceProperties"))

    def device_peaks(self, peaks: str | dict[str, Any] | None = None) -> pl.DataFrame:
        """The peak rates used, one row (`resolved_peaks_frame`): `peaks` when given, else from the trace's
        `deviceProperties`."""
        return resolved_peaks_frame(self._peaks(peaks))

    def peaks(self, peaks: str | dict[str, Any] | None = None) -> dict[str, Any] | None:
        """Deprecated (one release): the peak rates as a dict; use `device_peaks` (a frame)."""
        warnings.warn("tr.perf.peaks() (a dict) is deprecated: use tr.perf.device_peaks() (a one-row frame: "
                      "peak_<dtype>_tflops, peak_tb_per_s)", DeprecationWarning, stacklevel=2)
        return self._peaks(peaks)

    def rank_peaks(self) -> dict[int, dict[str, Any] | None]:
        """The peak rates of each rank's device (its file's `deviceProperties`), by rank."""
        from proftab.meta import file_metas

        return {r: match_peaks(m.get("deviceProperties")) for r, m in file_metas(self._trace.files).items()}

    def ops(self, peaks: str | dict[str, Any] | None = None) -> pl.DataFrame:
        """One row per host op with device time and its perf model (`proftab.perf.ops`); without
        `peaks`, each rank is rated against its own device (`rank_peaks`).
        """
        resolved = self._peaks(peaks)
        per_rank = self.rank_peaks() if peaks is None and self._trace.files.height > 1 else None
        key = f"perf:ops:{sorted(resolved.items()) if resolved else None}:{per_rank}"

        def compute() -> pl.DataFrame:
            nested = self._trace.collect("nested", columns=[c for c in HOST_COLUMNS if c in self._columns()])
            return ops(nested, self._trace.device.activities(), resolved, rank_peaks=per_rank,
                       generated=generated_figures(self._trace.compiled.kernels()))
        out: pl.DataFrame = self._trace.cached(key, compute)
        return out

    def _columns(self) -> list[str]:
        frame = self._trace.nested
        return list(frame.collect_schema().names()) if isinstance(frame, pl.LazyFrame) else frame.columns

    def summary(self, by: str = "family", peaks: str | dict[str, Any] | None = None) -> pl.DataFrame:
        """Per family (or `by="name"`): time share, achieved vs peak, time lost (`proftab.perf.summary`)."""
        return summary(self.ops(peaks), by)

    def lost(self, n: int = 20, peaks: str | dict[str, Any] | None = None) -> pl.DataFrame:
        """The op instances with the most time lost to the roofline."""
        return lost(self.ops(peaks), n)

    def model_coverage(self, peaks: str | dict[str, Any] | None = None) -> pl.DataFrame:
        """Device time in ops with a model, one row (`proftab.perf.model_coverage`)."""
        return model_coverage(self.ops(peaks))

    def coverage(self) -> dict[str, Any]:
        """Deprecated (one release): `model_coverage` as a dict."""
        warnings.warn("tr.perf.coverage() (a dict) is deprecated: use tr.perf.model_coverage() (a one-row frame; "
                      "coverage -> modelled_share, unknown_ops -> n_unknown_ops)", DeprecationWarning, stacklevel=2)
        row = self.model_coverage().row(0, named=True)
        return {"device_ns": row["device_ns"], "modelled_ns": row["modelled_ns"], "coverage": row["modelled_share"],
                "ops": row["n_ops"], "modelled_ops": row["n_modelled_ops"], "unknown_ops": row["n_unknown_ops"]}

    def copies(self, peaks: str | dict[str, Any] | None = None) -> pl.DataFrame:
        """Every memcpy / memset rated against its bandwidth ceiling (HBM for DtoD and memset, the
        host link for HtoD / DtoH): `proftab.perf.copies.copies`; each rank against its own device."""
        from proftab.perf.copies import copies

        per_rank = self.rank_peaks() if peaks is None and self._trace.files.height > 1 else None
        return copies(self._trace.device.copies(), self._peaks(peaks), rank_peaks=per_rank)

    def copy_summary(self, peaks: str | dict[str, Any] | None = None) -> pl.DataFrame:
        """`copies` per copy kind (`proftab.perf.copies.copy_summary`)."""
        from proftab.perf.copies import copy_summary

        return copy_summary(self.copies(peaks))

    def roofline(self, peaks: str | dict[str, Any] | None = None, **kwargs: Any) -> Any:
        """Log-log roofline chart of the ops, beside the copies' bandwidth roofline when the trace
        has copies (altair; `proftab.perf.chart.roofline_chart`)."""
        from proftab.perf.chart import roofline_chart

        return roofline_chart(self.ops(peaks), self._peaks(peaks), copies=self.copies(peaks), **kwargs)
