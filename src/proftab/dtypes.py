"""Tensor dtypes: torch's names, the spellings traces and graphs write, bytes per element, peak class.

One table of torch's dtype names with their size (`DTYPE_BYTES`, `torch.<dtype>.itemsize`), and
one table per way a trace or an artifact spells a dtype, each mapping its spelling to torch's
name:

* `INPUT_TYPE_NAMES`: the C++ type names of an op's `Input type` (`float`, `c10::BFloat16`,
  `long int`);
* `COLLECTIVE_DTYPE_NAMES`: a collective's `dtype` arg (c10's ScalarType names `Float`,
  `BFloat16`, `Long`, lower-cased) and torch's own names;
* `FX_DTYPE_NAMES`: the prefixes FX prints in a value type (`f32[8, 4]`);
* `SCALAR_TYPE_CODES`: torch's ScalarType codes an op's `out_dtype` argument carries.

`bytes_of(spellings)` turns a spelling table into spelling -> bytes. The peak class of a dtype
(`PEAK_CLASS`, `peak_class`) names the column of the peaks table that bounds an op computing in
it (`PRECISIONS`). Polars-free (the scanner side imports nothing heavy).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

__all__ = ["COLLECTIVE_DTYPE_NAMES", "DTYPE_BYTES", "FX_DTYPE_NAMES", "INPUT_TYPE_NAMES", "LOW_PRECISION_PREFIXES",
           "PEAK_CLASS", "PRECISIONS", "SCALAR_TYPE_CODES", "bytes_of", "peak_class"]

#: torch's dtype name -> bytes per element (`torch.float32.itemsize`)
DTYPE_BYTES: dict[str, int] = {
    "float64": 8, "float32": 4, "float16": 2, "bfloat16": 2,
    "int64": 8, "int32": 4, "int16": 2, "int8": 1, "uint64": 8, "uint32": 4, "uint16": 2, "uint8": 1, "bool": 1,
    "float8_e4m3fn": 1, "float8_e5m2": 1, "float8_e4m3fnuz": 1, "float8_e5m2fnuz": 1, "float8_e8m0fnu": 1,
    "float4_e2m1fn_x2": 1,
    "complex32": 4, "complex64": 8, "complex128": 16,
}

#: the C++ type names record_function writes in an op's `Input type` -> torch's name
INPUT_TYPE_NAMES: dict[str, str] = {
    "float": "float32", "double": "float64", "c10::Half": "float16", "c10::BFloat16": "bfloat16",
    "long int": "int64", "int": "int32", "short int": "int16", "signed char": "int8", "unsigned char": "uint8",
    "bool": "bool",
    "c10::Float8_e4m3fn": "float8_e4m3fn", "c10::Float8_e5m2": "float8_e5m2", "c10::Float8_e4m3fnuz": "float8_e4m3fnuz",
    "c10::Float8_e5m2fnuz": "float8_e5m2fnuz", "c10::Float8_e8m0fnu": "float8_e8m0fnu",
    "c10::Float4_e2m1fn_x2": "float4_e2m1fn_x2",
    "c10::complex<float>": "complex64", "c10::complex<double>": "complex128", "c10::complex<c10::Half>": "complex32",
}

#: a collective's `dtype` arg, lower-cased (c10's ScalarType names: `Float`, `BFloat16`, `Long`, `Byte`, and
#: torch's own names) -> torch's name
COLLECTIVE_DTYPE_NAMES: dict[str, str] = {
    "float": "float32", "float32": "float32", "double": "float64", "float64": "float64", "half": "float16",
    "float16": "float16", "bfloat16": "bfloat16", "long": "int64", "int64": "int64", "int": "int32", "int32": "int32",
    "short": "int16", "int16": "int16", "char": "int8", "int8": "int8", "byte": "uint8", "uint8": "uint8",
    "bool": "bool", "float8_e4m3fn": "float8_e4m3fn", "float8_e5m2": "float8_e5m2",
    "float8_e4m3fnuz": "float8_e4m3fnuz", "float8_e5m2fnuz": "float8_e5m2fnuz", "complexfloat": "complex64",
    "complexdouble": "complex128",
}

#: the dtype prefixes FX prints in a value type (`f32[8, 4][4, 1]cuda:0`) -> torch's name
FX_DTYPE_NAMES: dict[str, str] = {
    "f64": "float64", "f32": "float32", "f16": "float16", "bf16": "bfloat16", "i64": "int64", "i32": "int32",
    "i16": "int16", "i8": "int8", "u8": "uint8", "u16": "uint16", "u32": "uint32", "u64": "uint64", "b8": "bool",
    "c32": "complex32", "c64": "complex64", "c128": "complex128", "f8e4m3fn": "float8_e4m3fn", "f8e5m2": "float8_e5m2",
    "f8e4m3fnuz": "float8_e4m3fnuz", "f8e5m2fnuz": "float8_e5m2fnuz", "f8e8m0fnu": "float8_e8m0fnu",
}

#: torch's ScalarType codes of the floating dtypes an op's `out_dtype` names (`Concrete Inputs`) -> torch's name
SCALAR_TYPE_CODES: dict[str, str] = {
    "5": "float16", "6": "float32", "7": "float64", "15": "bfloat16",
    "23": "float8_e5m2", "24": "float8_e4m3fn", "25": "float8_e5m2fnuz", "26": "float8_e4m3fnuz",
}

#: the precision classes of the peaks table (dense TFLOP/s per class: `proftab.perf.peaks`)
PRECISIONS = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8")
#: torch's name -> the precision class whose peak bounds a matrix op computing in it
PEAK_CLASS: dict[str, str] = {"float32": "fp32", "float64": "fp64", "float16": "fp16", "bfloat16": "bf16"}
#: torch's names starting with these compute on the `fp8` peak (float8 and float4 formats)
LOW_PRECISION_PREFIXES = ("float8", "float4")


def bytes_of(spellings: Mapping[str, str], only: Iterable[str] | None = None) -> dict[str, int]:
    """Spelling -> bytes per element, for a table of spellings (`INPUT_TYPE_NAMES`...).

    `only`: just these spellings (a caller whose table was narrower keeps it, documented there).
    """
    keep = spellings if only is None else {s: spellings[s] for s in only}
    return {s: DTYPE_BYTES[name] for s, name in keep.items()}


def peak_class(dtype: str | None) -> str | None:
    """The precision class (`PRECISIONS`) of torch's dtype name for a matrix op; None when none applies."""
    if dtype is None:
        return None
    if dtype.startswith(LOW_PRECISION_PREFIXES):
        return "fp8"
    return PEAK_CLASS.get(dtype)
