"""Perf models: an op's FLOPs, minimum bytes moved and parameters from its recorded inputs.

`model_ops(frame)` takes host ops with `name`, `input_dims`, `input_type`, `input_strides`,
`concrete_inputs` (the JSON text columns of `Trace.events`) and returns one row per input
row with `family`, the parsed parameters, `flops`, `bytes` and `peak_dtype` (the dtype
whose peak bounds it). An op without a model keeps its row with null `flops`/`bytes` and
family `other` (or `collective`). The formulas, written from the ops' definitions, are in
docs/perf.md; in short:

* GEMM: `2·M·N·K·batch` (+ `M·N·batch` for a bias add), bytes = A + B + C (+ bias) at their
  dtypes (`_scaled_mm`: the `out_dtype`, else bf16 when the inputs are 8-bit);
* attention: `2·B·Hq·(dqk + dv)·pairs` with `pairs = Sq·Skv`, or the exact count of
  unmasked (query, key) pairs when causal (torch's SDPA aligns the mask top-left,
  flash-attn bottom-right); backward = 2.5 × forward; bytes = q, k, v, out (backward: also
  dout, dq, dk, dv);
* convolution: `2·N·K·Π(out)·(C/groups)·Π(kernel)` (+ bias), backward by `output_mask`;
* elementwise: one FLOP per output element, bytes = inputs + output; norms 5 (layer/group/
  batch) or 4 (RMS) FLOPs per element; softmax 5 per element; reductions one per input
  element; embedding and copies 0 FLOPs, bytes of what they read and write.
"""

from __future__ import annotations

import polars as pl

from proftab.calls import C10D_PREFIX, RECORD_PARAM_COMMS, collective_words
from proftab.dtypes import (
    COLLECTIVE_DTYPE_NAMES,
    INPUT_TYPE_NAMES,
    LOW_PRECISION_PREFIXES,
    PEAK_CLASS,
    SCALAR_TYPE_CODES,
    bytes_of,
)

__all__ = ["FAMILIES", "KERNEL_MATH_PATTERNS", "MATRIX_FAMILIES", "OP_FAMILY", "inductor_rows", "kernel_math",
           "model_ops"]

FAMILIES = ("gemm", "attention", "conv", "elementwise", "normalization", "reduction", "softmax", "embedding",
            "copy", "collective", "inductor", "other")

#: bytes per element of the type names of `Input type` (`proftab.dtypes.INPUT_TYPE_NAMES`)
_INPUT_TYPE_BYTES = bytes_of(INPUT_TYPE_NAMES)
#: torch ScalarType codes (an `out_dtype` in `Concrete Inputs`) -> bytes per element
_SCALAR_TYPE_BYTES = bytes_of(SCALAR_TYPE_CODES)
#: the collective `dtype` spellings the collective model sizes: narrower than
#: `proftab.dtypes.COLLECTIVE_DTYPE_NAMES` (which `ranks.collective_instances` reads) as it was written:
#: `float64`, `short` / `int16`, the float8 and complex names give no bytes here (widened by issue 40)
COLLECTIVE_MODEL_DTYPES = ("float", "float32", "bfloat16", "half", "float16", "double", "int", "int64", "long",
                           "byte", "char", "bool", "int32", "uint8", "int8")

# GEMM: name -> (A, B, bias input index or -1, kind)
_GEMM = {
    "aten::mm": (0, 1, -1, "mm"), "aten::addmm": (1, 2, 0, "mm"), "aten::bmm": (0, 1, -1, "bmm"),
    "aten::baddbmm": (1, 2, 0, "bmm"), "aten::matmul": (0, 1, -1, "matmul"), "aten::linear": (0, 1, 2, "linear"),
    "aten::_scaled_mm": (0, 1, 4, "mm"), "aten::_grouped_mm": (0, 1, 3, "grouped"),
    "aten::_scaled_grouped_mm": (0, 1, 5, "grouped"),
}
# attention: name -> (q index, layout BHSD/BSHD, dropout index, causal index, causal kind, backward)
#   causal kind: "bool" (is_causal, mask top-left), "bool_br" (bottom-right), "mask" (custom_mask_type)
_ATTN = {
    "aten::scaled_dot_product_attention": (0, "BHSD", 4, 5, "bool", False),
    "aten::_scaled_dot_product_flash_attention": (0, "BHSD", 3, 4, "bool", False),
    "aten::_scaled_dot_product_efficient_attention": (0, "BHSD", 5, 6, "bool", False),
    "aten::_scaled_dot_product_cudnn_attention": (0, "BHSD", 5, 6, "bool", False),
    "aten::_scaled_dot_product_flash_attention_for_cpu": (0, "BHSD", 3, 4, "bool", False),
    "aten::_flash_attention_forward": (0, "BSHD", 7, 8, "bool", False),
    "aten::_efficient_attention_forward": (0, "BSHD", 8, 9, "mask", False),
    "aten::_scaled_dot_product_flash_attention_backward": (1, "BHSD", 10, 11, "bool", True),
    "aten::_scaled_dot_product_efficient_attention_backward": (1, "BHSD", 9, 11, "bool", True),
    "aten::_scaled_dot_product_cudnn_attention_backward": (1, "BHSD", 13, 14, "bool", True),
    "aten::_flash_attention_backward": (1, "BSHD", 10, 11, "bool", True),
    "aten::_efficient_attention_backward": (1, "BSHD", 11, 14, "mask", True),
    "flash_attn::_flash_attn_forward": (0, "BSHD", 3, 5, "bool_br", False),
    "flash_attn::_flash_attn_backward": (1, "BSHD", 9, 11, "bool_br", True),
    "FlashAttnFunc": (0, "BSHD", 3, 5, "bool_br", False),
}
_CONV = {"aten::convolution": False, "aten::convolution_backward": True}
_UNARY = ("aten::relu", "aten::relu_", "aten::gelu", "aten::gelu_", "aten::silu", "aten::silu_", "aten::sigmoid",
          "aten::sigmoid_", "aten::tanh", "aten::tanh_", "aten::exp", "aten::exp_", "aten::log", "aten::neg",
          "aten::rsqrt", "aten::sqrt", "aten::abs", "aten::clamp", "aten::clamp_", "aten::clamp_min",
          "aten::clamp_min_", "aten::clamp_max", "aten::clamp_max_", "aten::reciprocal", "aten::sin", "aten::cos",
          "aten::erf", "aten::hardtanh", "aten::hardtanh_", "aten::leaky_relu", "aten::leaky_relu_",
          "aten::dropout", "aten::native_dropout", "aten::bitwise_not",
          "aten::logical_not", "aten::square", "aten::floor", "aten::ceil", "aten::round", "aten::sign")
_BINARY = ("aten::add", "aten::add_", "aten::sub", "aten::sub_", "aten::rsub", "aten::mul", "aten::mul_",
           "aten::div", "aten::div_", "aten::pow", "aten::pow_", "aten::maximum", "aten::minimum", "aten::eq",
           "aten::ne", "aten::lt", "aten::le", "aten::gt", "aten::ge", "aten::where", "aten::masked_fill",
           "aten::masked_fill_", "aten::gelu_backward", "aten::silu_backward", "aten::sigmoid_backward",
           "aten::tanh_backward", "aten::threshold_backward", "aten::bitwise_and", "aten::bitwise_or",
           "aten::logical_and", "aten::logical_or", "aten::fmod", "aten::remainder", "aten::lerp", "aten::lerp_",
           "aten::addcmul", "aten::addcmul_", "aten::addcdiv", "aten::addcdiv_", "aten::native_dropout_backward")
# norm: name -> (FLOPs per element, backward)
_NORM = {
    "aten::native_layer_norm": (5, False), "aten::layer_norm": (5, False), "aten::native_batch_norm": (5, False),
    "aten::batch_norm": (5, False), "aten::cudnn_batch_norm": (5, False), "aten::miopen_batch_norm": (5, False),
    "aten::_native_batch_norm_legit": (5, False), "aten::_native_batch_norm_legit_no_training": (5, False),
    "aten::native_group_norm": (5, False), "aten::group_norm": (5, False), "aten::rms_norm": (4, False),
    "aten::_fused_rms_norm": (4, False), "aten::native_layer_norm_backward": (8, True),
    "aten::native_batch_norm_backward": (8, True), "aten::cudnn_batch_norm_backward": (8, True),
    "aten::miopen_batch_norm_backward": (8, True), "aten::native_group_norm_backward": (8, True),
    "aten::_fused_rms_norm_backward": (6, True),
}
_SOFTMAX = {"aten::_softmax": False, "aten::softmax": False, "aten::_log_softmax": False, "aten::log_softmax": False,
            "aten::_safe_softmax": False, "aten::_softmax_backward_data": True,
            "aten::_log_softmax_backward_data": True}
_REDUCE = ("aten::sum", "aten::mean", "aten::amax", "aten::amin", "aten::max", "aten::min", "aten::norm",
           "aten::linalg_vector_norm", "aten::var", "aten::std", "aten::var_mean", "aten::std_mean", "aten::prod",
           "aten::argmax", "aten::argmin", "aten::all", "aten::any", "aten::logsumexp", "aten::cumsum")
_EMBED = {"aten::embedding": (0, 1), "aten::index_select": (0, 2), "aten::embedding_dense_backward": (0, 1)}
#: ops that only write their output (no read): bytes = the output once, 0 FLOPs
_WRITE_ONLY = ("aten::fill_", "aten::zero_")
_COPY = ("aten::copy_", "aten::_to_copy", "aten::to", "aten::clone", "aten::contiguous")

#: op name -> family, for every modelled op
OP_FAMILY: dict[str, str] = {
    **dict.fromkeys(_GEMM, "gemm"), **dict.fromkeys(_ATTN, "attention"), **dict.fromkeys(_CONV, "conv"),
    **dict.fromkeys(_UNARY + _BINARY + _WRITE_ONLY, "elementwise"), **dict.fromkeys(_NORM, "normalization"),
    **dict.fromkeys(_SOFTMAX, "softmax"), **dict.fromkeys(_REDUCE, "reduction"),
    **dict.fromkeys(_EMBED, "embedding"), **dict.fromkeys(_COPY, "copy"),
}

#: families whose kernels run on matrix units, so their kernel names can say the math mode
MATRIX_FAMILIES = ("gemm", "attention", "conv")
#: (peak dtype, pattern on a kernel name), first match wins: the math mode a kernel's name says.
#: cuBLAS/CUTLASS/cuDNN: `h1688`/`h16816`/`h884` (HMMA fp16), `bf16`, `tf32`, `s1688`/`s16816`
#: (TF32 tensor cores on fp32 data: `cutlass_80_tensorop_s1688gemm`, `ampere_s16816gemm`; cuBLAS /
#: cuDNN `xmma` kernels name `tf32`); `sgemm`/`scudnn` without those: fp32 SIMT.
#: Tensile (rocBLAS/hipBLASLt, MFMA): `_HHS_`/`_HSS_` fp16, `_BBS_`/`_BSS_` bf16, `XF32` tf32.
KERNEL_MATH_PATTERNS: tuple[tuple[str, str], ...] = (
    ("fp8", r"(?i)e4m3|e5m2|fp8|f8f8"),
    ("bf16", r"(?i)bf16|bfloat16|_BBS_|_BSS_|_BB_"),
    ("fp16", r"(?i)h1688|h16816|h884|hmma|fp16|f16f16|_HHS_|_HSS_|_HH_|half"),
    ("tf32", r"(?i)tf32|xf32|s1688|s16816|tensorop_s\d"),
    ("fp32", r"(?i)sgemm|scudnn|implicit_convolve_s|_SB_|_SS_"),
)

_DIMS_RE = r"^\[\s*(\[\s*(-?\d{1,18}\s*,?\s*)*\]\s*,?\s*)*\]$"  # int64 dims (at most 18 digits)
#: `Concrete Inputs`: a JSON list of strings (anything else leaves the op's concrete inputs unknown)
_CONC_RE = r'^\[\s*("([^"\\]|\\.)*"\s*,?\s*)*\]$'
#: why an op of a modelled family has no FLOPs/bytes (`model_error`)
MODEL_ERRORS = ("malformed Input Dims / Input type", "negative dimension", "malformed Concrete Inputs",
                "FLOPs or bytes overflow int64", "negative FLOPs or bytes (inconsistent shapes)")
#: an op that is a collective call (`proftab.calls`): a library or operation word, c10d's ops, torch's
#: `record_param_comms`
_COLLECTIVE_RE = "(?i)" + collective_words(C10D_PREFIX, "broadcast_", RECORD_PARAM_COMMS)


# ----------------------------------------------------------------------------- expression helpers

def _d(i: int) -> pl.Expr:
    return pl.col("_dims").list.get(i, null_on_oob=True)


def _dim(i: int, j: int) -> pl.Expr:
    return _d(i).list.get(j, null_on_oob=True)


def _numel(i: int) -> pl.Expr:
    return _d(i).list.eval(pl.element().product()).list.first()


def _ndim(i: int) -> pl.Expr:
    return _d(i).list.len()


def _type(i: int) -> pl.Expr:
    return pl.col("_types").list.get(i, null_on_oob=True)


def _is_tensor(i: int) -> pl.Expr:
    return _type(i).str.contains(r"^[a-z]").fill_null(False)


def _bpe(i: int) -> pl.Expr:
    return _type(i).replace_strict(_INPUT_TYPE_BYTES, default=None, return_dtype=pl.Int64)


def _dtype(i: int) -> pl.Expr:
    return _type(i).replace_strict(INPUT_TYPE_NAMES, default=None, return_dtype=pl.String)


def _tensor_bytes(i: int) -> pl.Expr:
    """Bytes of tensor input `i` (0 when it is not a tensor; null when the trace records its shape
    but not its type: 2021 traces write ``Input type: []``, so the bytes are unknown, not 0)."""
    unknown = _type(i).is_null() & (_ndim(i) > 0).fill_null(False)
    return pl.when(unknown).then(pl.lit(None, pl.Int64)).when(_is_tensor(i)).then(_numel(i) * _bpe(i)).otherwise(0)


def _conc(i: int) -> pl.Expr:
    return pl.col("_conc").list.get(i, null_on_oob=True)


def _conc_bool(i: int) -> pl.Expr:
    s = _conc(i)
    return pl.when(s == "True").then(True).when(s == "False").then(False).otherwise(None)


def _conc_float(i: int) -> pl.Expr:
    return _conc(i).cast(pl.Float64, strict=False)


def _conc_ints(i: int) -> pl.Expr:
    return _conc(i).str.extract_all(r"-?\d+").cast(pl.List(pl.Int64))


def _transposed(i: int) -> pl.Expr:
    """Operand `i` is stored column-major (its last dim's stride is not 1)."""
    last = pl.col("_strides").list.get(i, null_on_oob=True).list.get(-1, null_on_oob=True)
    return pl.when(_dim(i, -1) == 1).then(False).otherwise(last != 1)


def _prod_list(e: pl.Expr) -> pl.Expr:
    return e.list.eval(pl.element().product()).list.first()


# ----------------------------------------------------------------------------- families

def _gemm(df: pl.DataFrame) -> pl.DataFrame:
    out = []
    for name, (a, b, bias, kind) in _GEMM.items():
        sub = df.filter(pl.col("name") == name)
        if sub.is_empty():
            continue
        na, nb = _ndim(a), _ndim(b)
        if kind == "mm":
            m, k, n, batch = _dim(a, 0), _dim(a, 1), _dim(b, 1), pl.lit(1, pl.Int64)
            ok = (na == 2) & (nb == 2)
            out_elems = m * n
        elif kind == "bmm":
            m, k, n, batch = _dim(a, 1), _dim(a, 2), _dim(b, 2), _dim(a, 0)
            ok = (na == 3) & (nb == 3)
            out_elems = batch * m * n
        elif kind == "linear":  # x[..., K] @ W[N, K]^T
            k, n = _dim(a, -1), _dim(b, 0)
            m = _prod_list(_d(a).list.head(na - 1))
            batch = pl.lit(1, pl.Int64)
            ok = (na >= 1) & (nb == 2)
            out_elems = m * n
        elif kind == "matmul":
            m = pl.when(na >= 2).then(_dim(a, -2)).otherwise(1)
            k = _dim(a, -1)
            n = pl.when(nb >= 2).then(_dim(b, -1)).otherwise(1)
            sub = _broadcast_numel(sub, _d(a).list.head(pl.max_horizontal(na - 2, 0)),
                                   _d(b).list.head(pl.max_horizontal(nb - 2, 0)), out="_batch")
            batch = pl.col("_batch")
            ok = (na >= 1) & (nb >= 1)
            out_elems = batch * m * n
        else:  # grouped: 2d x 3d (offsets over M), 3d x 3d (batched), 2d x 2d (offsets over K)
            groups = pl.when(nb == 3).then(_dim(b, 0)).otherwise(_dim(2, 0) if name == "aten::_grouped_mm" else
                                                                  _dim(4, 0))
            m = pl.when(na == 3).then(_dim(a, 1)).otherwise(_dim(a, 0))
            k = pl.when(na == 3).then(_dim(a, 2)).otherwise(_dim(a, 1))
            n = _dim(b, -1)
            batch = pl.when(na == 3).then(_dim(a, 0)).otherwise(1)
            ok = ((na == 2) & (nb == 3)) | ((na == 3) & (nb == 3)) | ((na == 2) & (nb == 2))
            out_elems = pl.when((na == 2) & (nb == 2)).then(groups * m * n).otherwise(batch * m * n)
        has_bias = _is_tensor(bias) if bias >= 0 else pl.lit(False)
        out_bpe = _bpe(a)
        if name in ("aten::_scaled_mm", "aten::_scaled_grouped_mm"):
            code = _conc(6 if name == "aten::_scaled_mm" else 7)
            out_bpe = code.replace_strict(_SCALAR_TYPE_BYTES, default=None, return_dtype=pl.Int64).fill_null(
                pl.when(_bpe(a) == 1).then(2).otherwise(_bpe(a)))
        flops = 2 * m * n * k * batch + pl.when(has_bias).then(out_elems).otherwise(0)
        nbytes = _tensor_bytes(a) + _tensor_bytes(b) + out_elems * out_bpe + (
            _tensor_bytes(bias) if bias >= 0 else pl.lit(0))
        cols = sub.with_columns(
            m=m, n=n, k=k, batch=batch, has_bias=has_bias, trans_a=_transposed(a), trans_b=_transposed(b),
            dtype_a=_dtype(a), dtype_b=_dtype(b),
            flops=pl.when(ok).then(flops), bytes=pl.when(ok).then(nbytes),
        )
        out.append(cols.with_columns(peak_dtype=_peak_dtype("dtype_a", matrix=True, conv=False)))
    return pl.concat(out, how="diagonal_relaxed") if out else df.clear()


def _peak_dtype(col: str, *, matrix: bool, conv: bool) -> pl.Expr:
    """The peak column that bounds an op of dtype `col` (see docs/perf.md)."""
    dt = pl.col(col)
    if not matrix:
        return pl.when(dt == "float64").then(pl.lit("fp64")).otherwise(pl.lit("fp32"))
    mapped = dt.replace_strict(PEAK_CLASS, default=None, return_dtype=pl.String)
    low = pl.lit(False)
    for prefix in LOW_PRECISION_PREFIXES:
        low = low | dt.str.starts_with(prefix)
    mapped = pl.when(low).then(pl.lit("fp8")).otherwise(mapped)
    if conv:  # cuDNN/MIOpen convolutions use TF32 for float32 by default (torch.backends.cudnn.allow_tf32)
        mapped = pl.when(dt == "float32").then(pl.lit("tf32")).otherwise(mapped)
    return mapped


def _causal_pairs(sq: pl.Expr, skv: pl.Expr, bottom_right: pl.Expr) -> pl.Expr:
    """Unmasked (query, key) pairs of a causal mask, top-left or bottom-right aligned."""
    tl = pl.when(sq <= skv).then(sq * (sq + 1) // 2).otherwise(skv * (skv + 1) // 2 + (sq - skv) * skv)
    br = pl.when(sq <= skv).then(sq * skv - sq * (sq - 1) // 2).otherwise(skv * (skv + 1) // 2)
    return pl.when(bottom_right).then(br).otherwise(tl)


def _attention(df: pl.DataFrame) -> pl.DataFrame:
    out = []
    for name, (q, layout, drop, causal_i, ckind, backward) in _ATTN.items():
        sub = df.filter(pl.col("name") == name)
        if sub.is_empty():
            continue
        kk, vv = q + 1, q + 2
        h_ax, s_ax = (1, 2) if layout == "BHSD" else (2, 1)
        b = _dim(q, 0)
        hq, hkv = _dim(q, h_ax), _dim(kk, h_ax)
        sq, skv = _dim(q, s_ax), _dim(kk, s_ax)
        dqk, dv = _dim(q, 3), _dim(vv, 3)
        if ckind == "mask":
            mask = _conc(causal_i).cast(pl.Int64, strict=False)
            causal, bottom_right = mask > 0, mask == 2
        else:
            causal, bottom_right = _conc_bool(causal_i), pl.lit(ckind == "bool_br")
        pairs = pl.when(causal.fill_null(False)).then(_causal_pairs(sq, skv, bottom_right)).otherwise(sq * skv)
        fwd = 2 * b * hq * (dqk + dv) * pairs
        bpe = _bpe(q)
        q_b, k_b = b * hq * sq * dqk * bpe, b * hkv * skv * dqk * bpe
        v_b, o_b = b * hkv * skv * dv * bpe, b * hq * sq * dv * bpe
        ok = (_ndim(q) == 4) & (_ndim(kk) == 4) & (_ndim(vv) == 4)
        flops = (fwd * 5 // 2) if backward else fwd
        nbytes = 2 * (q_b + k_b + v_b + o_b) if backward else q_b + k_b + v_b + o_b
        out.append(sub.with_columns(
            b=b, h_q=hq, h_kv=hkv, s_q=sq, s_kv=skv, d_qk=dqk, d_v=dv, causal=causal, dropout=_conc_float(drop),
            dtype_a=_dtype(q), flops=pl.when(ok).then(flops), bytes=pl.when(ok).then(nbytes),
        ).with_columns(peak_dtype=_peak_dtype("dtype_a", matrix=True, conv=False)))
    return pl.concat(out, how="diagonal_relaxed") if out else df.clear()


def _conv(df: pl.DataFrame) -> pl.DataFrame:
    out = []
    for name, backward in _CONV.items():
        sub = df.filter(pl.col("name") == name)
        if sub.is_empty():
            continue
        x, w, off = (1, 2, 4) if backward else (0, 1, 3)   # input, weight, first int-list argument
        stride, pad, dil = _conc_ints(off), _conc_ints(off + 1), _conc_ints(off + 2)
        transposed, out_pad, groups = _conc_bool(off + 3), _conc_ints(off + 4), _conc(off + 5).cast(pl.Int64,
                                                                                                   strict=False)
        sub = sub.with_columns(
            _x=_d(x), _w=_d(w), _stride=stride, _pad=pad, _dil=dil, _opad=out_pad, transposed=transposed,
            groups=groups)
        nsp = pl.col("_x").list.len() - 2
        # per spatial axis output size, for forward and transposed convolution
        # one row per input spatial axis; a list argument whose length differs from the axes count
        # (a hostile or foreign trace) gives nulls there, so the row's model is null, never an error
        ax = sub.select("_rowid", "_x", "_w", "_stride", "_pad", "_dil", "_opad", "transposed").with_columns(
            _in=pl.col("_x").list.slice(2), _kl=pl.col("_w").list.slice(2))
        n_in = pl.col("_in").list.len()
        ax = ax.with_columns(_ax=pl.int_ranges(n_in), _n=n_in).explode(["_in", "_ax"], empty_as_null=True)
        ax = ax.with_columns(**{
            out: pl.when(pl.col(c).list.len() == pl.col("_n")).then(pl.col(c).list.get(pl.col("_ax"), null_on_oob=True))
            for out, c in (("_k", "_kl"), ("_stride", "_stride"), ("_pad", "_pad"), ("_dil", "_dil"),
                           ("_opad", "_opad"))})
        ax = ax.with_columns(_o=pl.when(pl.col("transposed")).then(
            (pl.col("_in") - 1) * pl.col("_stride") - 2 * pl.col("_pad") + pl.col("_dil") * (pl.col("_k") - 1)
            + pl.col("_opad") + 1).otherwise(
            (pl.col("_in") + 2 * pl.col("_pad") - pl.col("_dil") * (pl.col("_k") - 1) - 1) // pl.col("_stride") + 1))
        spatial = ax.group_by("_rowid").agg(_out_sp=pl.col("_o").product(), _in_sp=pl.col("_in").product(),
                                            _k_sp=pl.col("_k").product(), _nax=pl.col("_o").count())
        sub = sub.join(spatial, on="_rowid", how="left")
        n, c = pl.col("_x").list.get(0, null_on_oob=True), pl.col("_x").list.get(1, null_on_oob=True)
        # weight: [K, C/g, ...] (forward) or [C, K/g, ...] (transposed)
        k_out = pl.when(pl.col("transposed")).then(pl.col("_w").list.get(1) * pl.col("groups")).otherwise(
            pl.col("_w").list.get(0))
        macs = n * k_out * pl.col("_out_sp") * (c // pl.col("groups")) * pl.col("_k_sp")
        macs = pl.when(pl.col("transposed")).then(
            n * c * pl.col("_in_sp") * (k_out // pl.col("groups")) * pl.col("_k_sp")).otherwise(macs)
        out_elems = n * k_out * pl.col("_out_sp")
        bpe = _bpe(x)
        in_b, w_b, o_b = n * c * pl.col("_in_sp") * bpe, _numel(w) * bpe, out_elems * bpe
        if backward:
            mask = _conc(10).str.extract_all(r"True|False")
            g_in = (mask.list.get(0, null_on_oob=True) == "True").fill_null(True)
            g_w = (mask.list.get(1, null_on_oob=True) == "True").fill_null(True)
            g_b = (mask.list.get(2, null_on_oob=True) == "True").fill_null(False)
            flops = 2 * macs * (g_in.cast(pl.Int64) + g_w.cast(pl.Int64)) + pl.when(g_b).then(out_elems).otherwise(0)
            nbytes = (o_b + pl.when(g_w).then(in_b).otherwise(0) + pl.when(g_in).then(w_b + in_b).otherwise(0)
                      + pl.when(g_w).then(w_b).otherwise(0))
            has_bias = g_b
        else:
            has_bias = _is_tensor(2)
            flops = 2 * macs + pl.when(has_bias).then(out_elems).otherwise(0)
            nbytes = in_b + w_b + o_b + _tensor_bytes(2)
        ok = (nsp >= 1) & (pl.col("_nax") == nsp) & pl.col("groups").is_not_null() & (pl.col("groups") > 0) & (
            _ndim(w) == nsp + 2)
        sp = pl.col("_x").list.slice(2)
        ks = pl.col("_w").list.slice(2)
        out.append(sub.with_columns(
            conv_n=n, conv_c=c, conv_k=k_out, conv_h=sp.list.get(-2, null_on_oob=True),
            conv_w=sp.list.get(-1, null_on_oob=True), conv_r=ks.list.get(-2, null_on_oob=True),
            conv_s=ks.list.get(-1, null_on_oob=True), conv_dims=nsp, stride=pl.col("_stride"),
            padding=pl.col("_pad"), dilation=pl.col("_dil"), has_bias=has_bias, dtype_a=_dtype(x),
            flops=pl.when(ok).then(flops), bytes=pl.when(ok).then(nbytes),
        ).with_columns(peak_dtype=_peak_dtype("dtype_a", matrix=True, conv=True)).drop(
            "_x", "_w", "_stride", "_pad", "_dil", "_opad", "_out_sp", "_in_sp", "_k_sp", "_nax"))
    return pl.concat(out, how="diagonal_relaxed") if out else df.clear()


def _broadcast_numel(df: pl.DataFrame, a: pl.Expr, b: pl.Expr, out: str = "_out_numel") -> pl.DataFrame:
    """Column `out`: the element count of the broadcast of the shapes (int lists) `a` and `b`."""
    def axes(shape: pl.Expr, tag: str) -> pl.DataFrame:
        e = df.select("_rowid", shape.fill_null(pl.lit([], pl.List(pl.Int64))).list.reverse().alias("_v")).with_columns(
            _ax=pl.int_ranges(pl.col("_v").list.len())).explode(["_v", "_ax"]).drop_nulls("_ax")
        return e.rename({"_v": tag})
    both = axes(a, "_a").join(axes(b, "_b"), on=["_rowid", "_ax"], how="full", coalesce=True)
    per_row = both.group_by("_rowid").agg(
        pl.max_horizontal(pl.col("_a").fill_null(1), pl.col("_b").fill_null(1)).product().alias(out))
    return df.join(per_row, on="_rowid", how="left").with_columns(pl.col(out).fill_null(1))


def _elementwise(df: pl.DataFrame) -> pl.DataFrame:
    un = df.filter(pl.col("name").is_in(_UNARY))
    bi = df.filter(pl.col("name").is_in(_BINARY))
    wo = df.filter(pl.col("name").is_in(_WRITE_ONLY))
    out = []
    if not wo.is_empty():  # fill_/zero_ write every element once and read nothing
        out.append(wo.with_columns(numel=_numel(0), dtype_a=_dtype(0)).with_columns(
            flops=pl.when(_is_tensor(0)).then(pl.lit(0, pl.Int64)), bytes=pl.when(_is_tensor(0)).then(
                _tensor_bytes(0))))
    if not un.is_empty():
        out.append(un.with_columns(numel=_numel(0), dtype_a=_dtype(0)).with_columns(
            flops=pl.when(_is_tensor(0)).then(pl.col("numel")),
            bytes=pl.when(_is_tensor(0)).then(2 * _tensor_bytes(0))))
    if not bi.is_empty():
        # the output has the broadcast shape and the first tensor's dtype (in place: the first input)
        def shape(i: int) -> pl.Expr:
            return pl.when(_is_tensor(i)).then(_d(i)).otherwise(pl.lit([], pl.List(pl.Int64)))
        bi = _broadcast_numel(bi, shape(0), shape(1))
        # in place (`add_`) too: both inputs are read and the result written back
        out_b = pl.col("_out_numel") * pl.coalesce(_bpe(0), _bpe(1))
        nbytes = _tensor_bytes(0) + _tensor_bytes(1) + out_b
        out.append(bi.with_columns(numel=pl.col("_out_numel"), dtype_a=pl.coalesce(_dtype(0), _dtype(1))).with_columns(
            flops=pl.when(_is_tensor(0) | _is_tensor(1)).then(pl.col("numel")),
            bytes=pl.when(_is_tensor(0) | _is_tensor(1)).then(nbytes)).drop("_out_numel"))
    if not out:
        return df.clear()
    return pl.concat(out, how="diagonal_relaxed").with_columns(peak_dtype=_peak_dtype("dtype_a", matrix=False,
                                                                                      conv=False))


def _simple(df: pl.DataFrame) -> pl.DataFrame:
    """Norms, softmax, reductions, embedding, copies: counts from the first tensor input."""
    name = pl.col("name")
    out = []
    norm = df.filter(name.is_in(list(_NORM)))
    if not norm.is_empty():
        per = name.replace_strict({k: v[0] for k, v in _NORM.items()}, return_dtype=pl.Int64)
        bwd = name.replace_strict({k: v[1] for k, v in _NORM.items()}, return_dtype=pl.Boolean)
        x = pl.when(bwd).then(_numel(1)).otherwise(_numel(0))
        xb = pl.when(bwd).then(_tensor_bytes(1)).otherwise(_tensor_bytes(0))
        # weight/bias: the other tensor inputs of the forward op, small next to x
        params = pl.sum_horizontal(*(pl.when(_is_tensor(i)).then(_tensor_bytes(i)).otherwise(0) for i in (1, 2, 3)))
        nbytes = pl.when(bwd).then(3 * xb).otherwise(2 * xb + params)
        out.append(norm.with_columns(numel=x, dtype_a=pl.when(bwd).then(_dtype(1)).otherwise(_dtype(0)),
                                     flops=per * x, bytes=nbytes))
    sm = df.filter(name.is_in(list(_SOFTMAX)))
    if not sm.is_empty():
        bwd = name.replace_strict(_SOFTMAX, return_dtype=pl.Boolean)
        out.append(sm.with_columns(numel=_numel(0), dtype_a=_dtype(0), flops=pl.when(bwd).then(3).otherwise(5)
                                   * _numel(0), bytes=pl.when(bwd).then(3).otherwise(2) * _tensor_bytes(0)))
    red = df.filter(name.is_in(_REDUCE))
    if not red.is_empty():
        out.append(red.with_columns(numel=_numel(0), dtype_a=_dtype(0), flops=_numel(0), bytes=_tensor_bytes(0)))
    emb = df.filter(name.is_in(list(_EMBED)))
    if not emb.is_empty():
        fw = name.is_in(["aten::embedding", "aten::index_select"])
        idx = pl.when(name == "aten::index_select").then(2).otherwise(1)
        idx_n = pl.when(idx == 2).then(_numel(2)).otherwise(_numel(1))
        idx_b = pl.when(idx == 2).then(_tensor_bytes(2)).otherwise(_tensor_bytes(1))
        row = pl.when(fw).then(_numel(0) // pl.max_horizontal(_dim(0, 0), 1)).otherwise(_dim(0, -1))
        bpe = _bpe(0)
        out.append(emb.with_columns(numel=idx_n * row, dtype_a=_dtype(0), flops=pl.lit(0, pl.Int64),
                                    bytes=2 * idx_n * row * bpe + idx_b))
    cp = df.filter(name.is_in(_COPY))
    if not cp.is_empty():
        src = pl.when(name == "aten::copy_").then(1).otherwise(0)
        n_el = _numel(0)
        src_b = pl.when(src == 1).then(_bpe(1)).otherwise(_bpe(0))
        out.append(cp.with_columns(numel=n_el, dtype_a=_dtype(0), flops=pl.lit(0, pl.Int64),
                                   bytes=pl.when(_is_tensor(0)).then(n_el * (_bpe(0) + src_b))))
    if not out:
        return df.clear()
    return pl.concat(out, how="diagonal_relaxed").with_columns(peak_dtype=_peak_dtype("dtype_a", matrix=False,
                                                                                      conv=False))


def _collective(df: pl.DataFrame) -> pl.DataFrame:
    cols = df.columns
    nbytes = pl.lit(None, pl.Int64)
    if "in_msg_nelems" in cols and "dtype" in cols:
        size = pl.col("dtype").cast(pl.String).str.to_lowercase().replace_strict(
            bytes_of(COLLECTIVE_DTYPE_NAMES, only=COLLECTIVE_MODEL_DTYPES), default=None, return_dtype=pl.Int64)
        nbytes = pl.col("in_msg_nelems").cast(pl.Int64, strict=False) * size
    return df.with_columns(flops=pl.lit(None, pl.Int64), bytes=nbytes)


def kernel_math(name: pl.Expr) -> pl.Expr:
    """The peak dtype a kernel's name says it computes in (`KERNEL_MATH_PATTERNS`), else null."""
    out = pl.lit(None, pl.String)
    for dtype, pattern in reversed(KERNEL_MATH_PATTERNS):
        out = pl.when(name.str.contains(pattern)).then(pl.lit(dtype)).otherwise(out)
    return out


def inductor_rows(out: pl.DataFrame, generated: pl.DataFrame) -> pl.DataFrame:
    """`model_ops` rows that launch torch.compile's generated kernels take their figures (family `inductor`).

    `generated`: `rank`, `event_id` (the launching op), `flops`, `bytes`. Only rows without a
    model of their own (family `other`) change; `peak_dtype` is the launcher's first tensor
    argument's dtype (`Input type`), as a matrix op's, for kernels with FLOPs (templates).
    """
    g = generated.select("rank", "event_id", pl.col("flops").alias("_gf"), pl.col("bytes").alias("_gb"))
    out = out.join(g, on=["rank", "event_id"], how="left")
    is_gen = (pl.col("family") == "other") & pl.col("_gb").is_not_null()
    first = (pl.col("input_type").cast(pl.String).str.extract_all(r'"([^"]*)"').list.eval(
        pl.element().str.strip_chars('"')).list.eval(pl.element().filter(pl.element() != "Scalar")).list.first()
        if "input_type" in out.columns else pl.lit(None, pl.String))
    dtype = first.replace_strict(INPUT_TYPE_NAMES, default=None, return_dtype=pl.String)
    out = out.with_columns(_dt=dtype).with_columns(
        family=pl.when(is_gen).then(pl.lit("inductor")).otherwise("family"),
        flops=pl.when(is_gen).then("_gf").otherwise("flops"),
        bytes=pl.when(is_gen).then("_gb").otherwise("bytes"),
        peak_dtype=pl.when(is_gen & (pl.col("_gf") > 0)).then(_peak_dtype("_dt", matrix=True, conv=False))
        .when(is_gen).then(pl.lit(None, pl.String)).otherwise("peak_dtype"))
    return out.drop("_gf", "_gb", "_dt")


def model_ops(ops: pl.DataFrame) -> pl.DataFrame:
    """`family`, parameters, `flops`, `bytes`, `peak_dtype` for each row of `ops` (same order).

    Parameters
    ----------
    ops
        Host ops: `name` and the JSON text columns `input_dims`, `input_type`,
        `input_strides`, `concrete_inputs` (missing ones count as null); `in_msg_nelems`
        and `dtype` are used for collectives when present.
    """
    df = ops.with_row_index("_rowid")
    for c in ("input_dims", "input_type", "input_strides", "concrete_inputs"):
        df = df.with_columns((pl.col(c) if c in df.columns else pl.lit(None)).cast(pl.String).alias(c))
    name = pl.col("name").cast(pl.String)
    df = df.with_columns(name=name, family=name.replace_strict(OP_FAMILY, default=None, return_dtype=pl.String))
    df = df.with_columns(family=pl.when(pl.col("family").is_null() & name.str.contains(_COLLECTIVE_RE)).then(
        pl.lit("collective")).otherwise(pl.col("family").fill_null("other")))
    known = df.filter(~pl.col("family").is_in(["other", "collective"]))
    ok = pl.col("input_dims").str.contains(_DIMS_RE).fill_null(False) & pl.col("input_type").str.starts_with(
        "[").fill_null(False)
    conc_ok = pl.col("concrete_inputs").str.contains(_CONC_RE)
    known = known.with_columns(
        _dims=pl.when(ok).then(pl.col("input_dims")).str.json_decode(pl.List(pl.List(pl.Int64))),
        _types=pl.when(ok).then(pl.col("input_type")).str.json_decode(pl.List(pl.String)),
        _strides=pl.when(pl.col("input_strides").str.contains(_DIMS_RE)).then(pl.col("input_strides"))
        .str.json_decode(pl.List(pl.List(pl.Int64))),
        _conc=pl.when(conc_ok).then(pl.col("concrete_inputs")).str.json_decode(pl.List(pl.String)),
    )
    negative = pl.col("_dims").list.eval(pl.element().list.min()).list.min() < 0
    known = known.with_columns(model_error=pl.when(~ok).then(pl.lit(MODEL_ERRORS[0]))
                               .when(negative.fill_null(False)).then(pl.lit(MODEL_ERRORS[1]))
                               .when(pl.col("concrete_inputs").is_not_null() & ~conc_ok.fill_null(False))
                               .then(pl.lit(MODEL_ERRORS[2])))
    good = known.filter(pl.col("model_error").is_null() | (pl.col("model_error") == MODEL_ERRORS[2]))
    parts = [f(good) for f in (_gemm, _attention, _conv, _elementwise, _simple)]
    parts = [p for p in parts if not p.is_empty()]
    # the same models over Float64 dims: an Int64 result that differs from it wrapped (or overflowed)
    shadow = good.with_columns(pl.col("_dims").cast(pl.List(pl.List(pl.Float64))))
    approx = [f(shadow) for f in (_gemm, _attention, _conv, _elementwise, _simple)]
    approx = [p.select("_rowid", pl.col("flops").cast(pl.Float64).alias("_ff"),
                       pl.col("bytes").cast(pl.Float64).alias("_fb")) for p in approx if not p.is_empty()]
    coll = _collective(df.filter(pl.col("family") == "collective"))
    modelled = pl.concat([*parts, coll], how="diagonal_relaxed") if parts else coll
    if approx:
        modelled = modelled.join(pl.concat(approx), on="_rowid", how="left")
        wrapped = {}
        for c, f in (("flops", "_ff"), ("bytes", "_fb")):
            exact = pl.col(c).cast(pl.Float64)
            wrapped[c] = ((pl.col(f).abs() >= 2.0**63) | ((exact - pl.col(f)).abs() > 1e-6 * pl.col(f).abs() + 1)
                          ).fill_null(False)
        modelled = modelled.with_columns(
            model_error=pl.when(wrapped["flops"] | wrapped["bytes"]).then(pl.lit(MODEL_ERRORS[3]))
            .otherwise(pl.col("model_error")),
            flops=pl.when(~wrapped["flops"]).then(pl.col("flops")),
            bytes=pl.when(~wrapped["bytes"]).then(pl.col("bytes")))
    if "model_error" in modelled.columns:
        neg = ((pl.col("flops") < 0) | (pl.col("bytes") < 0)).fill_null(False)
        modelled = modelled.with_columns(
            model_error=pl.when(neg).then(pl.lit(MODEL_ERRORS[4])).otherwise(pl.col("model_error")),
            flops=pl.when(~neg).then(pl.col("flops")), bytes=pl.when(~neg).then(pl.col("bytes")))
    bad = known.filter(pl.col("model_error").is_not_null() & (pl.col("model_error") != MODEL_ERRORS[2])).select(
        "_rowid", "model_error")
    modelled = pl.concat([modelled, bad], how="diagonal_relaxed") if not bad.is_empty() else modelled
    drop = [c for c in modelled.columns if c.startswith("_") and c != "_rowid"]
    modelled = modelled.drop(drop)
    extra = [c for c in modelled.columns if c not in df.columns or c in ("flops", "bytes")]
    out = df.drop([c for c in df.columns if (c.startswith("_") and c != "_rowid") or c in ("flops", "bytes")]).join(
        modelled.select("_rowid", *[c for c in extra if c != "_rowid"]), on="_rowid", how="left")
    for c, dt in (("flops", pl.Int64), ("bytes", pl.Int64), ("peak_dtype", pl.String), ("model_error", pl.String)):
        if c not in out.columns:
            out = out.with_columns(pl.lit(None, dt).alias(c))
    return out.sort("_rowid").drop("_rowid").with_columns(pl.col("flops", "bytes").cast(pl.Int64))
