"""torch's profiler FLOPs per op, from the recorded `Input Dims` / `Input type` / `Concrete Inputs`.

torch computes a FLOP estimate for seven ops when profiling with `with_flops=True`
(`torch/csrc/profiler/util.cpp`, `saveExtraArgs` + `computeFlops`); the JSON trace does
not store it, `key_averages()` sums it per key and `table()` prints it as
`Total <unit>FLOPs`. The rules, restated from that source:

* `aten::mm` (inputs 0, 1) and `aten::addmm` (inputs 1, 2): `2 · Π(mat1) / mat1[-1] · Π(mat2)`
  (0 when mat1 is 0-d or its last dim is 0); the bias and the alpha/beta scaling are ignored;
* `aten::bmm` (inputs 0, 1) and `aten::baddbmm` (inputs 1, 2): the same, also divided by the
  batch `mat1[0]` (0 when it is 0);
* `aten::mul`, `aten::add`: `Π(input 0)` (the element count of the first input, whatever the
  broadcast output is);
* `aten::conv2d` (7 inputs, 4-d input and weight, 2-element stride/padding/dilation, non-zero
  groups and stride): `2 · N · OH · OW · KH · KW · C · K / groups` with
  `OH = (H + 2·pad - dil·(KH-1) - 1) // stride + 1` (C is the *input's* channels);
* every other op: 0 (an op is looked up by its base name: `aten::add.Tensor`, as a trace recorded
  with `capture_overload_names=True` names it, is `aten::add`). The inputs that must be tensors
  must be tensors (a `Scalar` first argument gives 0).

The conv2d stride/padding/dilation/groups come from `Concrete Inputs`; a trace recorded
without them gets 0 for conv2d (torch saw the real values; the trace does not have them).
"""

from __future__ import annotations

import polars as pl

__all__ = ["TORCH_FLOPS_OPS", "torch_flops"]

#: the ops torch's profiler estimates FLOPs for
TORCH_FLOPS_OPS = ("aten::conv2d", "aten::mm", "aten::addmm", "aten::mul", "aten::add", "aten::bmm", "aten::baddbmm")

# one level of nesting: a list of int lists (a TensorList input nests deeper and gives 0)
_DIMS_RE = r"^\[\s*(\[[-\d,\s]*\]\s*,?\s*)*\]$"
_PAIR_RE = r"^\[-?\d+, -?\d+\]$"
_INT_RE = r"^-?\d+$"


def _dims(i: int) -> pl.Expr:
    return pl.col("_dims").list.get(i, null_on_oob=True)


def _prod(e: pl.Expr) -> pl.Expr:
    return e.list.eval(pl.element().product()).list.first()


def _is_tensor(i: int) -> pl.Expr:
    # a tensor's type is its dtype name (`float`, `c10::BFloat16`, `long int`); other inputs
    # carry an IValue tag kind (`Scalar`, `ScalarList`, `Int`, `GenericList`) or ""
    t = pl.col("_types").list.get(i, null_on_oob=True)
    return t.str.contains(r"^[a-z]").fill_null(False)


def _pair(i: int) -> tuple[pl.Expr, pl.Expr, pl.Expr]:
    s = pl.col("_conc").list.get(i, null_on_oob=True)
    ok = s.str.contains(_PAIR_RE).fill_null(False)
    nums = s.str.extract_all(r"-?\d+")
    return ok, nums.list.get(0, null_on_oob=True).cast(pl.Int64), nums.list.get(1, null_on_oob=True).cast(pl.Int64)


def _gemm(a: int, b: int, *, batched: bool) -> pl.Expr:
    m1, m2 = _dims(a), _dims(b)
    last = m1.list.last()
    first = m1.list.first()
    flops = _prod(m1) // last
    if batched:
        flops = flops // first
    flops = flops * _prod(m2) * 2
    bad = (m1.list.len() == 0) | (last == 0)
    if batched:
        bad = bad | (first == 0)
    return pl.when(bad).then(0).otherwise(flops)


def _conv2d() -> pl.Expr:
    x, w = _dims(0), _dims(1)
    s_ok, s0, s1 = _pair(3)
    p_ok, p0, p1 = _pair(4)
    d_ok, d0, d1 = _pair(5)
    g_str = pl.col("_conc").list.get(6, null_on_oob=True)
    g_ok = g_str.str.contains(_INT_RE).fill_null(False)
    groups = g_str.cast(pl.Int64, strict=False)
    kh, kw = w.list.get(2, null_on_oob=True), w.list.get(3, null_on_oob=True)
    oh = (x.list.get(2, null_on_oob=True) + 2 * p0 - d0 * (kh - 1) - 1) // s0 + 1
    ow = (x.list.get(3, null_on_oob=True) + 2 * p1 - d1 * (kw - 1) - 1) // s1 + 1
    ok = ((pl.col("_types").list.len() >= 7) & (x.list.len() == 4) & (w.list.len() == 4) & s_ok & p_ok & d_ok
          & g_ok & (groups != 0) & (s0 * s1 != 0))
    flops = (2 * x.list.get(0, null_on_oob=True) * oh * ow * kh * kw * x.list.get(1, null_on_oob=True)
             * w.list.get(0, null_on_oob=True) // groups)
    return pl.when(ok).then(flops).otherwise(0)


def _all_tensors(k: int) -> pl.Expr:
    ok = pl.col("_types").list.len() >= k
    for i in range(k):
        ok = ok & _is_tensor(i)
    return ok


def torch_flops(frame: pl.DataFrame) -> pl.Series:
    """The torch profiler's FLOPs per row of `frame`, 0 for every op torch does not estimate.

    Parameters
    ----------
    frame
        Host ops with `name` and the JSON text columns `input_dims`, `input_type`,
        `concrete_inputs` (as in `Trace.events`; missing columns count as null).

    Returns
    -------
    pl.Series
        `torch_flops`, Int64, one value per row.
    """
    if frame.is_empty():
        return pl.Series("torch_flops", [], pl.Int64)
    missing = [c for c in ("input_dims", "input_type", "concrete_inputs") if c not in frame.columns]
    f = frame.select("name", *(c for c in ("input_dims", "input_type", "concrete_inputs") if c in frame.columns))
    if missing:
        f = f.with_columns(pl.lit(None, pl.String).alias(c) for c in missing)
    # an op recorded with its overload (`aten::add.Tensor`) is looked up by its base name, as torch does
    f = f.with_columns(pl.col("name").str.replace(r"^(aten::\w+)\.\w+$", "${1}"))
    n = pl.col("name")
    cand = n.is_in(TORCH_FLOPS_OPS) & pl.col("input_dims").str.contains(_DIMS_RE).fill_null(False) & pl.col(
        "input_type").str.starts_with("[").fill_null(False)
    f = f.with_columns(_cand=cand).with_columns(
        pl.when("_cand").then(pl.col("input_dims")).str.json_decode(pl.List(pl.List(pl.Int64))).alias("_dims"),
        pl.when("_cand").then(pl.col("input_type")).str.json_decode(pl.List(pl.String)).alias("_types"),
        pl.when(pl.col("_cand") & n.eq("aten::conv2d") & pl.col("concrete_inputs").str.starts_with("["))
        .then(pl.col("concrete_inputs")).str.json_decode(pl.List(pl.String)).alias("_conc"),
    )
    flops = (
        pl.when(n.eq("aten::mm") & _all_tensors(2)).then(_gemm(0, 1, batched=False))
        .when(n.eq("aten::addmm") & _all_tensors(3)).then(_gemm(1, 2, batched=False))
        .when(n.eq("aten::bmm") & _all_tensors(2)).then(_gemm(0, 1, batched=True))
        .when(n.eq("aten::baddbmm") & _all_tensors(3)).then(_gemm(1, 2, batched=True))
        .when(n.is_in(["aten::mul", "aten::add"]) & _all_tensors(1)).then(_prod(_dims(0)))
        .when(n.eq("aten::conv2d") & _all_tensors(2)).then(_conv2d())
        .otherwise(0)
    )
    out = f.select(pl.when("_cand").then(flops).otherwise(0).fill_null(0).cast(pl.Int64).alias("torch_flops"))
    return out.get_column("torch_flops")
