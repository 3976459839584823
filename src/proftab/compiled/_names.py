"""What an Inductor kernel's name says: backend, kind and the fused op list (`triton_poi_fused_add_mul_0`).

Inductor names a generated kernel `<backend>_<kind>_fused_<ops>_<index>` (Triton: kind `poi`
pointwise, `red` reduction, `per` persistent reduction, `tem` template, `for` foreach...; C++:
`cpp_fused_<ops>_<index>`, no kind), where `<ops>` joins the sorted names of the aten ops the
kernel's nodes came from with `_`. With `TORCHINDUCTOR_CPP_ENABLE_KERNEL_PROFILE=1` the C++
kernel's profiler event is prefixed `graph_<id>_`. Splitting `<ops>` back into op names is
ambiguous (`native_layer_norm` holds `_`): known multi-word aten names are matched first,
longest first, else one word is one op. Everything read from a name is a guess.
"""

from __future__ import annotations

import polars as pl

__all__ = ["GENERATED_PATTERN", "KIND_NAMES", "MULTI_WORD_OPS", "kernel_name_columns", "split_fused_ops"]

#: an event name of an Inductor-generated kernel (group 1: the optional `graph_<id>_` prefix)
GENERATED_PATTERN = r"^(graph_\d+_)?((?:triton|cpp)_(?:[a-z]{3}_)?fused_\w+|triton_(?:poi|red|per|tem|for|mix)_\w+)$"
#: Triton kernel kinds in Inductor's names
KIND_NAMES = {"poi": "pointwise", "red": "reduction", "per": "persistent_reduction", "tem": "template",
              "for": "foreach", "mix": "mixed"}
#: aten op names holding `_`, matched before single words when a fused name is split
MULTI_WORD_OPS = frozenset({
    "native_layer_norm", "native_layer_norm_backward", "native_batch_norm", "native_batch_norm_backward",
    "_native_batch_norm_legit", "_native_batch_norm_legit_functional", "_native_batch_norm_legit_no_training",
    "native_group_norm", "native_group_norm_backward", "native_dropout", "native_dropout_backward",
    "_unsafe_view", "_to_copy", "_softmax", "_softmax_backward_data", "_log_softmax",
    "_log_softmax_backward_data", "var_mean", "gelu_backward", "silu_backward", "threshold_backward",
    "sigmoid_backward", "tanh_backward", "hardtanh_backward", "leaky_relu", "leaky_relu_backward",
    "embedding_dense_backward", "convolution_backward", "avg_pool2d", "avg_pool2d_backward",
    "max_pool2d_with_indices", "max_pool2d_with_indices_backward", "adaptive_avg_pool2d", "_adaptive_avg_pool2d",
    "upsample_nearest2d", "upsample_bilinear2d", "index_put", "index_select", "index_add", "scatter_add",
    "slice_scatter", "select_scatter", "as_strided", "as_strided_scatter", "new_zeros", "new_empty",
    "new_ones", "full_like", "zeros_like", "ones_like", "empty_like", "rand_like", "randn_like", "clamp_min",
    "clamp_max", "logical_not", "logical_and", "logical_or", "bitwise_and", "bitwise_or", "bitwise_not",
    "masked_fill", "constant_pad_nd", "reflection_pad2d", "_scaled_dot_product_flash_attention",
    "scaled_dot_product_attention", "log_sigmoid_forward", "mse_loss", "nll_loss_forward", "nll_loss_backward",
    "_safe_softmax", "split_with_sizes", "unsafe_split", "expand_copy", "permute_copy", "view_copy",
})
_MAX_WORDS = max(len(op.strip("_").split("_")) for op in MULTI_WORD_OPS)


def split_fused_ops(ops: str) -> list[str]:
    """`add_native_layer_norm_relu_view` -> `["add", "native_layer_norm", "relu", "view"]` (a guess).

    A double underscore starts a name with `_` (`add__unsafe_view` -> `add`, `_unsafe_view`).
    """
    words: list[str] = []
    underscore = False  # an empty part: the next word starts with "_"
    for part in ops.split("_"):
        if not part:
            underscore = True
            continue
        words.append("_" + part if underscore else part)
        underscore = False
    out: list[str] = []
    i = 0
    while i < len(words):
        for n in range(min(_MAX_WORDS, len(words) - i), 1, -1):
            cand = "_".join(words[i:i + n])
            if cand in MULTI_WORD_OPS:
                out.append(cand)
                i += n
                break
        else:
            out.append(words[i])
            i += 1
    return out


def kernel_name_columns(name: pl.Expr) -> list[pl.Expr]:
    """From an event name (apply to unique names: `fused_ops` runs Python per row).

    `kernel` (without the `graph_<id>_` prefix), `backend` (`cpp` / `triton`), `kernel_kind`
    (`KIND_NAMES`, null for C++), `fused_ops` (a guess, `split_fused_ops`).
    """
    kernel = name.str.replace(r"^graph_\d+_", "")
    kind_code = kernel.str.extract(r"^triton_([a-z]{3})_", 1)
    ops_text = kernel.str.extract(r"fused_(?:(\w+?)_)?\d+$", 1).fill_null("")  # `fused_0`: no op names
    return [
        kernel.alias("kernel"),
        kernel.str.extract(r"^(triton|cpp)_", 1).alias("backend"),
        kind_code.replace_strict(KIND_NAMES, default=None, return_dtype=pl.String).alias("kernel_kind"),
        ops_text.map_elements(split_fused_ops, return_dtype=pl.List(pl.String)).alias("fused_ops"),
    ]
