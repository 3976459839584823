"""Device peaks: dense FLOP/s per dtype and HBM bandwidth, from the vendors' datasheets.

One row per device model (`PEAKS`), in TFLOP/s (dense, i.e. *without* the 2:4 sparsity
factor vendors quote next to it) and TB/s (10**12 bytes/s). `fp32` is the vector (non
matrix) rate, `tf32` / `bf16` / `fp16` / `fp8` / `fp64` the matrix-core rates; a missing rate
is null. `match_peaks(device_properties)` picks the row from a trace's `deviceProperties`
(its name, SM/CU count, memory); a name the table does not know gives None and then every
`roofline_share` is null unless the caller passes `peaks=`.

`host_link_tb_s` is the host link (PCIe) in one direction, the rate a host-to-device or
device-to-host copy can reach: half the datasheet's bidirectional figure (PCIe Gen3 x16
"32 GB/s" -> 0.016, Gen4 "64 GB/s" -> 0.032, Gen5 "128 GB/s" -> 0.064 TB/s). It is null where
the table cannot say: B200 (the host link depends on the HGX board's CPU side) and MI250X-GCD
(its two GCDs share the package's link).

AMD MI250X is two GCDs in one package and each GCD is one device in a trace: the row holds
*one GCD's* peaks (half the package's datasheet figure). The sources, one per row, are in
the `source` column and in docs/perf.md.
"""

from __future__ import annotations

import re
from typing import Any

import polars as pl

from proftab.dtypes import PRECISIONS

__all__ = ["PEAKS", "PEAK_COLUMNS", "match_peaks", "peaks_frame"]

PEAK_COLUMNS = ("device", *PRECISIONS, "hbm_tb_s", "host_link_tb_s", "source")

_NV = "https://www.nvidia.com/"
_AMD = "https://www.amd.com/en/products/accelerators/instinct/"
_A100 = _NV + "content/dam/en-zz/Solutions/Data-Center/a100/pdf/nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf"
#: device -> dense TFLOP/s per dtype, HBM TB/s, datasheet
PEAKS: dict[str, dict[str, Any]] = {
    "V100-SXM2": dict(fp64=7.8, fp32=15.7, tf32=None, bf16=None, fp16=125.0, fp8=None, hbm_tb_s=0.9,
                      host_link_tb_s=0.016, source="https://images.nvidia.com/content/technologies/volta/pdf/volta-v100-datasheet-update-us-1165301-r5.pdf"),
    "V100-PCIe": dict(fp64=7.0, fp32=14.0, tf32=None, bf16=None, fp16=112.0, fp8=None, hbm_tb_s=0.9,
                      host_link_tb_s=0.016, source="https://images.nvidia.com/content/technologies/volta/pdf/volta-v100-datasheet-update-us-1165301-r5.pdf"),
    "A100-SXM4-40GB": dict(fp64=19.5, fp32=19.5, tf32=156.0, bf16=312.0, fp16=312.0, fp8=None, hbm_tb_s=1.555,
                           host_link_tb_s=0.032, source=_A100),
    "A100-SXM4-80GB": dict(fp64=19.5, fp32=19.5, tf32=156.0, bf16=312.0, fp16=312.0, fp8=None, hbm_tb_s=2.039,
                           host_link_tb_s=0.032, source=_A100),
    "H100-SXM": dict(fp64=67.0, fp32=67.0, tf32=494.7, bf16=989.4, fp16=989.4, fp8=1978.9, hbm_tb_s=3.35,
                     host_link_tb_s=0.064, source="https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet"),
    "H100-PCIe": dict(fp64=51.0, fp32=51.0, tf32=378.0, bf16=756.0, fp16=756.0, fp8=1513.0, hbm_tb_s=2.0,
                      host_link_tb_s=0.064, source="https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet"),
    "H200-SXM": dict(fp64=67.0, fp32=67.0, tf32=494.7, bf16=989.4, fp16=989.4, fp8=1978.9, hbm_tb_s=4.8,
                     host_link_tb_s=0.064, source=_NV + "en-us/data-center/h200/"),
    "B200": dict(fp64=37.0, fp32=75.0, tf32=1100.0, bf16=2250.0, fp16=2250.0, fp8=4500.0, hbm_tb_s=8.0,
                 host_link_tb_s=None, source=_NV + "en-us/data-center/hgx/ (HGX B200, per GPU = 1/8)"),
    "L4": dict(fp64=None, fp32=30.3, tf32=60.0, bf16=121.0, fp16=121.0, fp8=242.0, hbm_tb_s=0.3,
               host_link_tb_s=0.032, source=_NV + "en-us/data-center/l4/"),
    "L40S": dict(fp64=None, fp32=91.6, tf32=183.0, bf16=362.05, fp16=362.05, fp8=733.0, hbm_tb_s=0.864,
                 host_link_tb_s=0.032, source=_NV + "en-us/data-center/l40s/"),
    "MI210": dict(fp64=45.3, fp32=22.6, tf32=None, bf16=181.0, fp16=181.0, fp8=None, hbm_tb_s=1.6,
                  host_link_tb_s=0.032, source=_AMD + "mi200/mi210.html"),
    "MI250X-GCD": dict(fp64=47.85, fp32=23.95, tf32=None, bf16=191.5, fp16=191.5, fp8=None, hbm_tb_s=1.6,
                       host_link_tb_s=None, source=_AMD + "mi200/mi250x.html (one of its two GCDs: half the package)"),
    "MI300X": dict(fp64=163.4, fp32=163.4, tf32=653.7, bf16=1307.4, fp16=1307.4, fp8=2614.9, hbm_tb_s=5.3,
                   host_link_tb_s=0.064, source=_AMD + "mi300/mi300x.html"),
    "MI325X": dict(fp64=163.4, fp32=163.4, tf32=653.7, bf16=1307.4, fp16=1307.4, fp8=2614.9, hbm_tb_s=6.0,
                   host_link_tb_s=0.064, source=_AMD + "mi300/mi325x.html"),
    "MI355X": dict(fp64=78.6, fp32=157.3, tf32=None, bf16=2516.6, fp16=2516.6, fp8=5033.2, hbm_tb_s=8.0,
                   host_link_tb_s=0.064, source=_AMD + "mi350/mi355x.html"),
}


def peaks_frame() -> pl.DataFrame:
    """`PEAKS` as a DataFrame (`PEAK_COLUMNS`)."""
    return pl.DataFrame([{"device": k, **v} for k, v in PEAKS.items()],
                        schema={"device": pl.String, **{c: pl.Float64 for c in PEAK_COLUMNS[1:-1]},
                                "source": pl.String}).select(PEAK_COLUMNS)


def _device_key(props: dict[str, Any]) -> str | None:
    name = str(props.get("name") or "")
    sms = props.get("numSms")
    mem = props.get("totalGlobalMem")
    # a malformed entry (text, a list, NaN) counts as unknown memory, never an error
    gib = float(mem) / 2**30 if isinstance(mem, int | float) and not isinstance(mem, bool) and mem == mem else 0.0
    rules: list[tuple[str, str | None]] = [
        (r"V100.*PCIE", "V100-PCIe"), (r"V100", "V100-SXM2"),
        (r"A100", "A100-SXM4-80GB" if gib > 60 else "A100-SXM4-40GB"),
        (r"H200", "H200-SXM"), (r"H100.*PCIe", "H100-PCIe"),
        (r"H100", "H100-SXM" if sms in (None, 132) else "H100-PCIe" if sms == 114 else None),
        (r"B200", "B200"), (r"L40S", "L40S"), (r"\bL4\b", "L4"),
        (r"MI210", "MI210"), (r"MI250X?", "MI250X-GCD" if sms in (None, 110) else None),
        (r"MI300X", "MI300X"), (r"MI325X", "MI325X"), (r"MI355X", "MI355X"),
    ]
    for pattern, key in rules:
        if re.search(pattern, name, re.IGNORECASE):
            return key
    if name.strip() in ("", "AMD Radeon Graphics"):  # ROCm without a marketing name: the CU count
        major, minor = props.get("computeMajor"), props.get("computeMinor")
        if sms == 304 and (major, minor) == (9, 4):
            return "MI325X" if gib > 200 else "MI300X"
        if sms == 256 and (major, minor) == (9, 5):
            return "MI355X"
        if sms == 110 and (major, minor) == (9, 0):
            return "MI250X-GCD"
    return None


def match_peaks(device_properties: list[dict[str, Any]] | None, device: int = 0) -> dict[str, Any] | None:
    """The `PEAKS` row (with its `device` key) for device `device` of a trace's `deviceProperties`.

    Returns None when the trace has no properties or the device is not in the table.
    """
    if not isinstance(device_properties, list):
        return None
    entries = [p for p in device_properties if isinstance(p, dict)]  # a trace may hold ints or text here
    if not entries:
        return None
    props = next((p for p in entries if p.get("id") == device), entries[0])
    key = _device_key(props)
    return None if key is None else {"device": key, **PEAKS[key]}
