"""Kernel categories from kernel names (GEMM, convolution, attention, ...).

The rules are ordered regular expressions over the kernel name; the first match wins.
They were written against the kernel names of the public traces (CUDA, cuDNN, CUTLASS,
cuBLAS/Tensile `Cijk_*`, MIOpen `igemm_*`, composable_kernel, Triton, NCCL/RCCL, MTIA).
They are heuristics: `category_expr(rules=...)` takes your own list.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

from proftab import kinds
from proftab.calls import C10D_PREFIX, collective_words

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["CATEGORIES", "DEFAULT_RULES", "category_expr"]

#: every category `category_expr` can return with the default rules
CATEGORIES = ("communication", "memory", "sync", "attention", "gemm", "convolution", "reduction",
              "elementwise", "other")

#: (category, case-insensitive regex on the name), first match wins; memcpy/memset/sync
#: activities are `memory`/`sync` before any rule is tried
DEFAULT_RULES: list[tuple[str, str]] = [
    # the collective libraries and operations (`proftab.calls`), and the kernels of other collective libraries
    ("communication", collective_words("sendrecv", "multimem", "cross_device", C10D_PREFIX, r"\bmscclpp")),
    # Triton names say what the fused kernel is: poi(ntwise), red(uction), per(sistent reduction), tem(plate mm)
    ("elementwise", r"^triton_poi_"),
    ("reduction", r"^triton_(?:red|per)_"),
    ("gemm", r"^triton_tem_"),
    ("attention", r"flash|fmha|attn|attention|sdpa|\bmha|paged_?kv|^sage_fwd"),
    ("reduction", r"(?:^|[^a-z])bn_|batch_?norm|layer_?norm|group_?norm|rms_?norm|instance_?norm|softmax"
                  r"|gammabetabackward"),
    ("convolution", r"conv|scudnn|winograd|implicit_?gemm|igemm_(?:fwd|bwd|wrw)|fprop|dgrad|wgrad|im2col"
                    r"|im2d2col|col2im|fft\dd_|flip_filter|miopen|cask_cudnn"),
    ("gemm", r"gemm|gemv|matmul|^bmm_|cutlass|cublas|^cijk_|nvjet|wgmma|hipblaslt|xmma|splitkreduce|^fc[-_]"),
    ("reduction", r"reduce|welford|\bcub::|radixsort|scan_?kernel|topk|arg_?max|arg_?min|max_dim|min_dim"
                  r"|vector_norm|_sum\b|reduce_sum|norm_kernel|pool|moments"),
    ("elementwise", r"elementwise|vectorized|unrolled|pointwise|functor|fill|copy|catarray|transpose|permute"
                    r"|index|gather|scatter|clamp|gelu|silu|relu|sigmoid|tanh|act_and_mul|rotary|nchwtonhwc"
                    r"|nhwctonchw|scalepackedtensor|subtensorop|embedding"
                    r"|^(?:add|mul|sub|div|divide|where|cast)[-_]|-dtype_"),
]


def category_expr(name: str = "name", kind: str = "kind",
                  rules: Sequence[tuple[str, str]] | None = None) -> pl.Expr:
    """The kernel category of each row: a String expression named `category`.

    Parameters
    ----------
    name
        Column with the kernel name.
    kind
        Column with the activity kind (`kernel`, `memcpy`, `memset`, `sync`); memcpy and
        memset are `memory`, sync is `sync`, whatever the name.
    rules
        Ordered `(category, regex)` pairs (case-insensitive, first match wins); default
        `DEFAULT_RULES`. A name no rule matches is `other`.
    """
    k = pl.col(kind).cast(pl.String)
    n = pl.col(name)
    expr = pl.when(k.is_in(kinds.COPY_KINDS)).then(pl.lit("memory")).when(k == "sync").then(pl.lit("sync"))
    for cat, pattern in (DEFAULT_RULES if rules is None else rules):
        expr = expr.when(n.str.contains(f"(?i){pattern}")).then(pl.lit(cat))
    return expr.otherwise(pl.lit("other")).alias("category")
