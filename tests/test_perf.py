"""tr.perf: perf models per op, peaks, roofline, CLI, scanned datasets, and TraceLens's numbers."""

from __future__ import annotations

import contextlib
import io
import json
from typing import TYPE_CHECKING

import polars as pl
import pytest

import proftab as pt
from proftab.cli import main
from proftab.exceptions import ProftabError
from proftab.perf import coverage, model_coverage, ops, resolve_peaks
from proftab.perf.models import model_ops
from proftab.perf.peaks import PEAKS, match_peaks, peaks_frame
from tests.conftest import BUNDLED, DATA, SHARED_PUBLIC, needs_shared
from tests.tools.tracelens_compare import join_proftab, run_tracelens, tracelens_cli

if TYPE_CHECKING:
    from pathlib import Path

H100 = BUNDLED / "h100_bert_small.pt.trace.json.gz"
MI300 = BUNDLED / "mi300_bert_small.pt.trace.json.gz"
TL_CSV = DATA / "perf" / "tracelens_bert_small.csv"


@pytest.fixture(scope="module")
def h100() -> pt.Trace:
    return pt.load(H100)


# ----------------------------------------------------------------------------- ops


def test_every_activity_counts_once(h100: pt.Trace) -> None:
    o = h100.perf.ops()
    act = h100.device.activities().filter(pl.col("op_id").is_not_null() & pl.col("kind").cast(pl.String).is_in(
        ["kernel", "memcpy", "memset"]))
    assert o["device_ns"].sum() == act["dur_ns"].sum()
    assert o["n_kernels"].sum() == act.height
    assert o["event_id"].n_unique() == o.height
    assert set(o["family"]) <= {"gemm", "attention", "conv", "elementwise", "normalization", "reduction", "softmax",
                                "embedding", "copy", "collective", "other"}


def test_linear_time_goes_to_its_gemm(h100: pt.Trace) -> None:
    o = h100.perf.ops()
    assert "aten::linear" not in o["name"].to_list()
    gemm = o.filter(pl.col("name") == "aten::addmm")
    assert gemm.height == 26
    # addmm(bias[N], x[M, K], W^T[K, N]): 2MNK + MN (bias), bytes A + B + C + bias at bf16
    r = gemm.filter(pl.col("event_id") == 477).row(0, named=True)
    assert (r["m"], r["n"], r["k"]) == (141, 30522, 512)
    assert r["flops"] == 2 * 141 * 30522 * 512 + 141 * 30522
    assert r["bytes"] == 2 * (141 * 512 + 512 * 30522 + 141 * 30522 + 30522)
    assert r["dtype_a"] == "bfloat16"
    assert r["trans_b"] is True  # W^T is a transposed view of the [N, K] weight
    assert r["tflops_per_s"] == pytest.approx(r["flops"] / r["device_ns"] / 1e3)


def test_attention_parameters_and_flops(h100: pt.Trace) -> None:
    att = h100.perf.ops().filter(pl.col("family") == "attention")
    assert att.height == 4
    r = att.row(0, named=True)
    assert (r["b"], r["h_q"], r["s_q"], r["s_kv"], r["d_qk"], r["d_v"], r["causal"]) == (1, 8, 141, 141, 64, 64,
                                                                                         False)
    assert r["flops"] == 4 * 8 * 141 * 141 * 64
    assert r["bytes"] == 4 * 8 * 141 * 64 * 2


def test_unknown_ops_keep_a_row_and_are_counted(h100: pt.Trace) -> None:
    o = h100.perf.ops()
    unknown = o.filter(pl.col("flops").is_null())
    assert unknown.height >= 1
    assert (unknown["family"] == "other").all()
    cov = h100.perf.model_coverage().row(0, named=True)
    assert cov["n_unknown_ops"] == unknown.height
    assert cov["modelled_ns"] + unknown["device_ns"].sum() == cov["device_ns"]
    assert 0.9 < cov["modelled_share"] < 1.0
    with pytest.warns(DeprecationWarning, match="model_coverage"):  # the old dict, one release
        old = h100.perf.coverage()
    assert old["coverage"] == cov["modelled_share"] and old["unknown_ops"] == cov["n_unknown_ops"]


def test_roofline_columns(h100: pt.Trace) -> None:
    o = h100.perf.ops().filter(pl.col("roofline_share").is_not_null())
    p = PEAKS["H100-SXM"]
    for r in o.iter_rows(named=True):
        peak = {"bfloat16": p["bf16"], "float32": p["fp32"]}.get(r["dtype_a"], p["fp32"])
        if r["family"] not in ("gemm", "attention", "conv"):
            peak = p["fp32"]
        t_c, t_m = r["flops"] / (peak * 1e3), r["bytes"] / (p["hbm_tb_s"] * 1e3)
        assert r["roofline_share"] == pytest.approx(max(t_c, t_m) / r["device_ns"])
        assert r["bound"] == ("compute" if t_c >= t_m else "memory")
        assert r["lost_ns"] == round(r["device_ns"] * (1 - min(r["roofline_share"], 1.0)))


def test_summary_adds_up(h100: pt.Trace) -> None:
    o = h100.perf.ops()
    fam = h100.perf.summary()
    assert fam["device_ns"].sum() == o["device_ns"].sum()
    assert fam["share"].sum() == pytest.approx(1.0)
    assert fam["device_ns"].is_sorted(descending=True)
    assert fam.filter(pl.col("family") == "gemm")["flops"].item() == o.filter(pl.col("family") == "gemm")[
        "flops"].sum()
    by_name = h100.perf.summary(by="name")
    assert by_name["n_ops"].sum() == o.height
    lost = h100.perf.lost(5)
    assert lost.height == 5 and lost["lost_ns"].is_sorted(descending=True)
    assert lost["lost_ns"][0] == o["lost_ns"].max()
    with pytest.raises(ProftabError, match="by must be"):
        h100.perf.summary(by="kernel")


def test_free_functions_over_frames(h100: pt.Trace) -> None:
    got = ops(h100.nested, h100.device.activities(), resolve_peaks("H100-SXM", None))
    assert got.equals(h100.perf.ops("H100-SXM"))
    assert model_coverage(got).equals(h100.perf.model_coverage())
    with pytest.warns(DeprecationWarning, match="model_coverage"):
        assert coverage(got)["coverage"] == model_coverage(got)["modelled_share"].item()


def test_scanned_dataset_gives_the_same_ops(h100: pt.Trace, tmp_path: Path) -> None:
    h100.to_parquet(str(tmp_path / "ds"))
    scanned = pt.scan(str(tmp_path / "ds"))
    assert scanned.is_lazy
    assert scanned.perf.ops().equals(h100.perf.ops())
    assert scanned.perf.summary().equals(h100.perf.summary())


# ----------------------------------------------------------------------------- peaks


def test_peaks_from_device_properties(h100: pt.Trace) -> None:
    assert h100.perf.device_peaks()["device"].to_list() == ["H100-SXM"]
    assert h100.perf.device_peaks()["peak_bf16_tflops"].item() == PEAKS["H100-SXM"]["bf16"]
    assert pt.load(MI300).perf.device_peaks()["device"].item() == "MI300X"
    with pytest.warns(DeprecationWarning, match="device_peaks"):
        assert h100.perf.peaks()["device"] == "H100-SXM"
    cases = {
        ("NVIDIA A100-PG509-200", 108, 42297524224): "A100-SXM4-40GB",
        ("NVIDIA A100-SXM4-80GB", 108, 84990623744): "A100-SXM4-80GB",
        ("Tesla V100-SXM2-32GB", 80, 34089730048): "V100-SXM2",
        ("NVIDIA H100 PCIe", 114, 85e9): "H100-PCIe",
        ("NVIDIA H200", 132, 150e9): "H200-SXM",
        ("NVIDIA B200", 148, 191503138816): "B200",
        ("NVIDIA L4", 58, 24e9): "L4",
        ("NVIDIA L40S", 142, 48e9): "L40S",
        ("AMD Instinct MI210", 104, 68702699520): "MI210",
        ("AMD Instinct MI250X", 110, 68702699520): "MI250X-GCD",
        ("AMD Instinct MI300X VF", 304, 205571227648): "MI300X",
        ("AMD Instinct MI325X", 304, 274e9): "MI325X",
        ("AMD Instinct MI355X", 256, 309e9): "MI355X",
        ("", 304, 206141652992): "MI300X",
        ("Quadro GP100", 56, 17069309952): None,
    }
    for (name, sms, mem), want in cases.items():
        got = match_peaks([{"id": 0, "name": name, "numSms": sms, "totalGlobalMem": mem,
                            "computeMajor": 9, "computeMinor": 4 if sms == 304 else 0}])
        assert (got or {}).get("device") == want, name
    assert match_peaks(None) is None


def test_peak_table_is_sourced_and_dense() -> None:
    df = peaks_frame()
    assert df.height == len(PEAKS) >= 13
    assert df["source"].str.starts_with("https://").all()
    assert (df["hbm_tb_s"] > 0).all() and (df["fp32"] > 0).all()
    # dense matrix rates exceed the vector rate where both exist
    both = df.filter(pl.col("bf16").is_not_null())
    assert (both["bf16"] > both["fp32"]).all()


def test_peaks_override(h100: pt.Trace) -> None:
    custom = h100.perf.ops({"bf16": 100.0, "fp32": 10.0, "hbm_tb_s": 1.0})
    base = h100.perf.ops()
    assert custom["flops"].equals(base["flops"])
    assert (custom.filter(pl.col("family") == "gemm")["peak_tflops"] == 100.0).all()
    assert h100.perf.ops("MI300X")["peak_tb_per_s"].drop_nulls().unique().to_list() == [5.3]
    with pytest.raises(ProftabError, match="unknown device"):
        h100.perf.ops("H9000")
    with pytest.raises(ProftabError, match="unknown peak keys"):
        h100.perf.ops({"bf17": 1.0})


# ----------------------------------------------------------------------------- models on hand rows


def _row(name: str, dims: list, types: list[str], conc: list[str] | None = None) -> dict[str, str | None]:
    return {"name": name, "input_dims": json.dumps(dims), "input_type": json.dumps(types),
            "input_strides": None, "concrete_inputs": None if conc is None else json.dumps(conc)}


def test_model_formulas_on_hand_rows() -> None:
    bf, f = "c10::BFloat16", "float"
    rows = pl.DataFrame([
        _row("aten::bmm", [[4, 8, 16], [4, 16, 32]], [bf, bf]),
        _row("aten::_scaled_dot_product_flash_attention", [[2, 4, 10, 8], [2, 4, 10, 8], [2, 4, 10, 8], [], [], [],
                                                            []], [bf, bf, bf, "Scalar", "Scalar", "Scalar", ""],
             ["", "", "", "0.", "True", "False", ""]),
        _row("flash_attn::_flash_attn_forward", [[2, 4, 3, 8], [2, 10, 3, 8], [2, 10, 3, 8], [], [], []],
             [bf, bf, bf, "Scalar", "Scalar", "Scalar"], ["", "", "", "0.", "0.125", "True"]),
        _row("aten::convolution", [[2, 3, 9, 9], [6, 3, 3, 3], [6], [], [], [], [], [], []],
             [f, f, f, "ScalarList", "ScalarList", "ScalarList", "Scalar", "ScalarList", "Scalar"],
             ["", "", "", "[2, 2]", "[1, 1]", "[1, 1]", "False", "[0, 0]", "1"]),
        _row("aten::convolution", [[2, 6, 5, 5], [6, 1, 3, 3], [], [], [], [], [], [], []],
             [f, f, "", "ScalarList", "ScalarList", "ScalarList", "Scalar", "ScalarList", "Scalar"],
             ["", "", "", "[2, 2]", "[1, 1]", "[1, 1]", "True", "[1, 1]", "6"]),
        _row("aten::mul", [[4, 1, 8], [1, 5, 1]], [f, f]),
        _row("aten::mul_", [[4, 8], []], [f, "Scalar"]),
        _row("aten::frobnicate", [[4]], [f]),
    ])
    got = model_ops(rows)
    assert got["family"].to_list() == ["gemm", "attention", "attention", "conv", "conv", "elementwise",
                                       "elementwise", "other"]
    fl, by = got["flops"].to_list(), got["bytes"].to_list()
    assert fl[0] == 2 * 4 * 8 * 16 * 32 and by[0] == 2 * (4 * 8 * 16 + 4 * 16 * 32 + 4 * 8 * 32)
    # causal, top-left: query i sees keys 0..i -> 10 * 11 / 2 pairs
    assert fl[1] == 2 * 2 * 4 * (8 + 8) * 55
    # causal, bottom-right (flash-attn, [B, S, H, D]): query i of 4 sees 10 - 4 + i + 1 keys -> 7 + 8 + 9 + 10
    assert fl[2] == 2 * 2 * 3 * 16 * 34
    # conv 9x9, k3, stride 2, pad 1 -> 5x5 output; + bias adds
    assert fl[3] == 2 * 2 * 6 * 25 * 3 * 9 + 2 * 6 * 25
    assert by[3] == 4 * (2 * 3 * 81 + 6 * 27 + 2 * 6 * 25 + 6)
    # transposed depthwise: out = (5 - 1) * 2 - 2 + 2 + 1 + 1 = 10 -> MACs over the input
    assert fl[4] == 2 * 2 * 6 * 25 * 1 * 9
    assert by[4] == 4 * (2 * 6 * 25 + 54 + 2 * 6 * 100)
    # broadcast [4, 1, 8] * [1, 5, 1] -> 160 elements
    assert fl[5] == 160 and by[5] == 4 * (32 + 5 + 160)
    assert fl[6] == 32 and by[6] == 4 * (32 + 32)
    assert fl[7] is None and by[7] is None


def test_causal_pairs_match_a_mask() -> None:
    import torch

    for sq, skv in ((5, 5), (3, 7), (7, 3)):
        tl = int(torch.ones(sq, skv).tril().sum())
        br = int(torch.ones(sq, skv).tril(diagonal=skv - sq).sum())
        for name, conc, want in (("aten::_scaled_dot_product_flash_attention", ["", "", "", "0.", "True"], tl),
                                 ("flash_attn::_flash_attn_forward", ["", "", "", "0.", "0.1", "True"], br)):
            bshd = name.startswith("flash")
            q = [1, sq, 1, 4] if bshd else [1, 1, sq, 4]
            k = [1, skv, 1, 4] if bshd else [1, 1, skv, 4]
            got = model_ops(pl.DataFrame([_row(name, [q, k, k, [], []], ["float"] * 3 + ["Scalar"] * 2, conc)]))
            assert got["flops"].item() == 2 * 8 * want, (name, sq, skv)


# ----------------------------------------------------------------------------- CLI


def _run(argv: list[str]) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        rc = main(argv)
    return rc, out.getvalue()


def test_cli_perf_plain_and_csv(h100: pt.Trace) -> None:
    rc, text = _run(["perf", str(H100)])
    assert rc == 0
    assert text.splitlines()[0].startswith("proftab perf: ")
    assert text.splitlines()[1].split()[:4] == ["family", "n_ops", "device", "share"]  # *_ns cells carry the unit
    families = text.split("\n\ncopies on the bandwidth roofline")[0]  # then the copies' table
    assert "peaks: H100-SXM" in families.splitlines()[-1]
    assert "memcpy DtoH" in text.split("copies on the bandwidth roofline")[1]
    rc, text = _run(["perf", str(H100), "--by", "name", "--format", "csv"])
    assert rc == 0
    got = pl.read_csv(text.encode())
    assert got["device_ns"].to_list() == h100.perf.summary(by="name")["device_ns"].to_list()
    rc, text = _run(["perf", str(H100), "--lost", "3", "--format", "json"])
    assert rc == 0 and len(json.loads(text)) == 3
    rc, text = _run(["perf", str(H100), "--ops", "--peaks", "MI300X", "--format", "csv"])
    assert rc == 0 and pl.read_csv(text.encode()).height == h100.perf.ops().height


# ----------------------------------------------------------------------------- TraceLens


def test_equal_to_stored_tracelens_numbers() -> None:
    """TraceLens's own FLOPs/bytes on the bundled traces (tests/data/perf): equal where both
    models count the same thing, the documented differences (docs/perf.md) otherwise."""
    tl = pl.read_csv(TL_CSV)
    assert tl.height == 18
    for trace in (H100, MI300):
        j = join_proftab(trace, tl.filter(pl.col("trace") == trace.name))
        check_against_tracelens(j)


def check_against_tracelens(j: pl.DataFrame) -> None:
    """The per-family agreement rules of docs/perf.md."""
    unmodelled = set(j.filter(pl.col("flops").is_null())["name"])
    assert unmodelled <= {"aten::instance_norm", "aten::upsample_nearest1d"}, unmodelled
    j = j.filter(pl.col("flops").is_not_null())
    rel_f, rel_b = pl.col("flops_rel").abs(), pl.col("bytes_rel").abs()
    exact = pl.col("category").is_in(["GEMM"]) | (pl.col("category") == "SDPA_fwd")
    gemm = j.filter(exact)
    assert (gemm["bytes"] == gemm["tl_bytes"]).all()
    # SDPA: equal unless causal, where proftab counts the diagonal (L(L+1)/2 pairs, not L²/2)
    assert gemm.filter(pl.col("flops") != pl.col("tl_flops")).filter(
        (pl.col("flops") < pl.col("tl_flops")) | (rel_f > 0.01) | (pl.col("category") != "SDPA_fwd")).is_empty()
    ew = j.filter(pl.col("category").is_in(["BinaryElementwise", "UnaryElementwise", "Reduce_fwd", "Reduce_bwd"])
                  & (pl.col("name") != "aten::copy_"))
    assert (ew["flops"] == ew["tl_flops"]).all()
    assert (ew.select(rel_b)["bytes_rel"] <= 0.5).all()
    copies = j.filter(pl.col("name") == "aten::copy_")
    assert (copies["flops"] == 0).all() and (copies.select(rel_b)["bytes_rel"] <= 0.5).all()
    conv = j.filter(pl.col("category") == "CONV_fwd")
    assert (conv.select(rel_f)["flops_rel"] <= 1e-3).all() and (conv.select(rel_b)["bytes_rel"] <= 1e-3).all()
    bwd = j.filter(pl.col("category") == "CONV_bwd")
    # equal, or half where output_mask skips the input gradient; bytes count each tensor once
    assert ((bwd["flops"] == bwd["tl_flops"]) | (bwd["flops"] * 2 == bwd["tl_flops"])).all()
    assert (bwd["bytes"] <= bwd["tl_bytes"]).all()
    norm = j.filter(pl.col("category") == "Normalization")
    assert (norm.select(rel_f)["flops_rel"] <= 1.0).all() and (norm.select(rel_b)["bytes_rel"] <= 0.5).all()


TL_TRACES = [SHARED_PUBLIC / "tracelens" / f"{n}.json.gz" for n in (
    "h100__Qwen_Qwen1.5-0.5B-Chat__1016005", "mi300__Qwen_Qwen1.5-0.5B-Chat__1016005",
    "h100__facebook_timesformer-base-finetuned-k400__1016002", "b200__eager_trace",
    "mi300__resnet_act_checkpoint", "mi300__ddp_resnet18_no_pool__train_resnet18",
    "perf_model__normalization__normalization_layer_test")]


@needs_shared
@pytest.mark.skipif(tracelens_cli() is None, reason="TraceLens is not installed")
@pytest.mark.parametrize("trace", [H100, *TL_TRACES], ids=lambda p: p.name[:40])
def test_equal_to_tracelens_run_now(trace: Path) -> None:
    cli = tracelens_cli()
    assert cli is not None
    j = join_proftab(trace, run_tracelens(trace, cli))
    assert j.height >= 5
    check_against_tracelens(j)


def test_roofline_chart(h100: pt.Trace) -> None:
    pytest.importorskip("altair")
    spec = h100.plot.roofline().to_dict()
    assert len(spec["hconcat"]) == 2  # the ops' roofline, the copies' bandwidth roofline (one DtoH copy)
    layers = spec["hconcat"][0]["layer"]
    assert len(layers) == 4  # points, the device's roofs, the compute ceilings' labels, the memory slope's label
    def values(layer: dict) -> list[dict]:
        data = layer["data"]
        return data["values"] if "values" in data else spec["datasets"][data["name"]]
    pts = values(layers[0])
    assert len(pts) == h100.perf.ops().filter((pl.col("flops") > 0) & (pl.col("bytes") > 0)).height
    assert layers[0]["encoding"]["x"]["scale"]["type"] == "log"
    roofs = {r["roof"] for r in values(layers[1])}
    assert roofs == {"H100-SXM bf16", "H100-SXM fp32"}
    labels = {r["label"] for layer in layers[2:] for r in values(layer)}
    assert labels == {"bf16 peak 989.4 TFLOP/s", "fp32 peak 67 TFLOP/s", "memory 3.35 TB/s"}


def test_conv_and_gemm_models_equal_torchs_flop_counter(tmp_path: Path) -> None:
    """Without bias terms, the conv (strided, dilated, grouped, transposed, 1d/3d, and backward)
    and GEMM FLOPs equal `torch.utils.flop_counter.FlopCounterMode` on the same calls, SDPA its
    `sdpa_flop_count`.

    Grouped convolutions run forward only: torch's counter takes the weight gradient of a
    grouped conv as an ungrouped one (`groups` × too many; "details involving groups" are
    skipped in `conv_backward_flop`), while proftab counts the forward's MACs.
    """
    import torch
    from torch.profiler import ProfilerActivity, profile
    from torch.utils.flop_counter import FlopCounterMode

    torch.manual_seed(0)
    conv = torch.nn.Conv2d(3, 8, 3, stride=2, padding=1, bias=False)
    grouped = torch.nn.Conv2d(8, 8, (3, 5), dilation=(2, 1), groups=4, bias=False)
    grouped_t = torch.nn.ConvTranspose2d(8, 4, 3, stride=2, padding=1, output_padding=1, groups=2, bias=False)
    conv_t = torch.nn.ConvTranspose2d(3, 5, 3, stride=2, padding=1, output_padding=1, bias=False)
    conv1d = torch.nn.Conv1d(4, 6, 5, padding=2, bias=False)
    conv3d = torch.nn.Conv3d(2, 3, 3, stride=(1, 2, 2), dilation=(1, 2, 1), bias=False)
    x2, x1, x3 = (torch.randn(2, 3, 17, 15, requires_grad=True), torch.randn(3, 4, 20, requires_grad=True),
                  torch.randn(1, 2, 6, 11, 9, requires_grad=True))
    a, b = torch.randn(16, 64), torch.randn(64, 24)
    ba, bb, bias = torch.randn(4, 16, 8), torch.randn(4, 8, 12), torch.randn(4, 16, 12)
    q, k, v = (torch.randn(2, 4, 12, 8) for _ in range(3))

    def work() -> None:
        y = conv(x2)
        with torch.no_grad():
            grouped_t(grouped(y))
        (y.sum() + conv_t(x2).sum() + conv1d(x1).sum() + conv3d(x3).sum()).backward()
        torch.mm(a, b)
        torch.bmm(ba, bb)
        torch.baddbmm(bias, ba, bb)
        torch.nn.functional.scaled_dot_product_attention(q, k, v)

    with FlopCounterMode(display=False) as counter:
        work()
    want = {str(op).split(".")[1]: n for op, n in counter.get_flop_counts()["Global"].items()}
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        work()
    ev = pt.from_profiler(prof, json_path=tmp_path / "t.json").events.filter(pl.col("cat") == "cpu_op")
    got = model_ops(ev.filter(pl.col("name").is_in(
        ["aten::convolution", "aten::convolution_backward", "aten::mm", "aten::bmm", "aten::baddbmm",
         "aten::_scaled_dot_product_flash_attention_for_cpu"])))
    assert got.filter(pl.col("name") == "aten::convolution").height == 6
    # baddbmm's bias add (M·N·batch) is ours, not FlopCounterMode's
    got = got.with_columns(pl.when(pl.col("has_bias").fill_null(False) & (pl.col("family") == "gemm")).then(
        pl.col("flops") - pl.col("m") * pl.col("n") * pl.col("batch")).otherwise(pl.col("flops")).alias("flops"))
    sums = dict(got.group_by("name").agg(pl.col("flops").sum()).iter_rows())
    assert sums["aten::convolution"] == want["convolution"]
    assert sums["aten::convolution_backward"] == want["convolution_backward"]
    assert sums["aten::mm"] == want["mm"] and sums["aten::bmm"] == want["bmm"]
    assert sums["aten::baddbmm"] == want["baddbmm"]
    # the counter does not register the CPU SDPA kernel: its formula, on the same shapes
    from torch.utils.flop_counter import sdpa_flop_count

    assert sums["aten::_scaled_dot_product_flash_attention_for_cpu"] == sdpa_flop_count(q.shape, k.shape, v.shape)


def test_more_model_formulas_on_hand_rows() -> None:
    bf, f8, f, i64 = "c10::BFloat16", "c10::Float8_e4m3fn", "float", "long int"
    rows = pl.DataFrame([
        # MoE: tokens [T=10, K=16] routed to G=4 experts [4, 16, 32] by offsets
        _row("aten::_grouped_mm", [[10, 16], [4, 16, 32], [4], [], []], [bf, bf, "int", "", ""]),
        _row("aten::_grouped_mm", [[4, 5, 16], [4, 16, 32], [], [], []], [bf, bf, "", "", ""]),
        _row("aten::_scaled_mm", [[8, 16], [16, 32], [], [], [], [], [], []],
             [f8, f8, f, f, "", "", "Int", "Scalar"], ["", "", "", "", "", "", "15", "False"]),
        _row("aten::linear", [[2, 3, 16], [32, 16], [32]], [f, f, f]),
        _row("aten::matmul", [[5, 1, 4, 16], [3, 16, 8]], [f, f]),
        _row("aten::native_layer_norm", [[4, 32], [], [32], [32], []], [bf, "ScalarList", bf, bf, "Scalar"]),
        _row("aten::_softmax", [[4, 32], [], []], [f, "Scalar", "Scalar"]),
        _row("aten::embedding", [[100, 8], [2, 5], [], [], []], [f, i64, "Scalar", "Scalar", "Scalar"]),
        _row("aten::copy_", [[4, 8], [4, 8], []], [bf, f, "Scalar"]),
        _row("aten::sum", [[4, 8], [], [], []], [f, "ScalarList", "Scalar", ""]),
    ])
    got = model_ops(rows)
    fl, by = got["flops"].to_list(), got["bytes"].to_list()
    assert got["family"].to_list() == ["gemm"] * 5 + ["normalization", "softmax", "embedding", "copy", "reduction"]
    # offsets and scales are not counted (a few bytes)
    assert fl[0] == 2 * 10 * 16 * 32 and by[0] == 2 * (10 * 16 + 4 * 16 * 32 + 10 * 32)
    assert fl[1] == 2 * 4 * 5 * 16 * 32 and by[1] == 2 * (4 * 5 * 16 + 4 * 16 * 32 + 4 * 5 * 32)
    assert fl[2] == 2 * 8 * 16 * 32 and by[2] == 8 * 16 + 16 * 32 + 2 * 8 * 32  # out_dtype 15 = bf16
    assert got["peak_dtype"][2] == "fp8"
    assert fl[3] == 2 * 6 * 32 * 16 + 6 * 32 and by[3] == 4 * (6 * 16 + 32 * 16 + 6 * 32 + 32)
    assert fl[4] == 2 * 15 * 4 * 8 * 16  # batch dims broadcast to 5 x 3
    assert fl[5] == 5 * 128 and by[5] == 2 * (2 * 128) + 2 * 2 * 32
    assert fl[6] == 5 * 128 and by[6] == 2 * 4 * 128
    assert fl[7] == 0 and by[7] == 2 * 10 * 8 * 4 + 10 * 8
    assert fl[8] == 0 and by[8] == 32 * (2 + 4)
    assert fl[9] == 32 and by[9] == 4 * 32


# ----------------------------------------------------------------------------- math mode, peaks, flags (issue 25)

A100_TF32 = SHARED_PUBLIC / "hta" / "trace_diff__control__control.json.gz"
H100_QWEN = SHARED_PUBLIC / "tracelens" / "h100__Qwen_Qwen1.5-0.5B-Chat__1016005.json.gz"


def test_kernel_math_from_kernel_names() -> None:
    from proftab.perf.models import kernel_math

    names = {
        "void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_64x64_32x4_nn_align1>(...)": "tf32",
        "ampere_s16816gemm_128x128_ldg8_stages_32x3_nn": "tf32",
        "sm80_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x16": "tf32",
        "ampere_sgemm_128x128_tn": "fp32",
        "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64": "bf16",
        "ampere_fp16_s16816gemm_fp16_128x128_ldg8_f2f_stages_32x5_nn": "fp16",
        "volta_h884gemm_64x64_ldg8_nn": "fp16",
        "Cijk_Alik_Bljk_BBS_BH_MT128x128x32_MI32x32x8x1_SN": "bf16",
        "Cijk_Ailk_Bljk_HHS_BH_MT64x64x16_MI16x16x16x1": "fp16",
        "void at::native::vectorized_elementwise_kernel<4, ...>": None,
    }
    got = pl.DataFrame({"n": list(names)}).select(kernel_math(pl.col("n")).alias("n"))["n"].to_list()
    assert got == list(names.values())


def test_fill_is_write_only() -> None:
    """`fill_` / `zero_` write each element once and read nothing (TraceLens has no model for them)."""
    got = model_ops(pl.DataFrame([_row("aten::fill_", [[4, 8], []], ["float", "Scalar"]),
                                  _row("aten::zero_", [[16]], ["c10::BFloat16"])]))
    assert got["family"].to_list() == ["elementwise", "elementwise"]
    assert got["flops"].to_list() == [0, 0]
    assert got["bytes"].to_list() == [4 * 32, 2 * 16]


@needs_shared
def test_tf32_gemms_are_rated_at_the_tf32_peak() -> None:
    """A100 trace, fp32 GEMMs on TF32 tensor cores (`cutlass_80_tensorop_s1688gemm`): before, rated
    at the fp32 peak, the gemm family read 131.7 % of the roofline; now at 156 TF/s (tf32)."""
    tr = pt.load(A100_TF32)
    o = tr.perf.ops()
    gemm = o.filter(pl.col("family") == "gemm")
    assert (gemm["dtype_a"] == "float32").all()
    tf32 = gemm.filter(pl.col("kernel_math") == "tf32")
    assert tf32.height > 0 and (tf32["peak_dtype"] == "tf32").all() and (tf32["peak_tflops"] == 156.0).all()
    simt = gemm.filter(pl.col("kernel_math") == "fp32")  # ampere_sgemm: fp32 SIMT, the fp32 peak
    assert simt.height > 0 and (simt["peak_tflops"] == 19.5).all()
    fam = tr.perf.summary().filter(pl.col("family") == "gemm").row(0, named=True)
    assert fam["roofline_share"] < 1.0 and fam["above_peak"] is False and fam["n_above_peak"] == 0
    assert fam["peak_dtype"] == "tf32"
    # no compute-bound op above its peak; the ones left are memory-bound (cache-resident / 1 µs resolution)
    above = o.filter(pl.col("above_peak").fill_null(False))
    assert above.height > 0 and (above["bound"] == "memory").all()
    assert (above["roofline_share"] > 1.0).all()
    assert o.filter(~pl.col("above_peak").fill_null(True))["roofline_share"].max() <= 1.0
    rc, text = _run(["perf", str(A100_TF32)])
    assert rc == 0
    assert f"above the peak (column above_peak): {above.height} op(s), {above.height} memory-bound" in text


@needs_shared
def test_family_peak_is_time_weighted() -> None:
    """H100 Qwen: one fp32 GEMM (3.5 µs) first among 168 bf16 ones; the family's peak was the first
    op's (67) beside 612.7 TF/s achieved; now the time-weighted peak, bf16 dominant."""
    tr = pt.load(H100_QWEN)
    o = tr.perf.ops().filter(pl.col("family") == "gemm")
    want = (o["peak_tflops"] * o["device_ns"]).sum() / o.filter(pl.col("peak_tflops").is_not_null())[
        "device_ns"].sum()
    fam = tr.perf.summary().filter(pl.col("family") == "gemm").row(0, named=True)
    assert fam["peak_tflops"] == pytest.approx(want)
    assert 980 < fam["peak_tflops"] < 989.4 and fam["peak_dtype"] == "bf16"
    assert fam["tflops_per_s"] < fam["peak_tflops"]
    assert set(o["peak_dtype"]) == {"bf16", "fp32"}


@needs_shared
def test_2021_trace_without_input_types_has_null_bytes() -> None:
    """tb_plugin 2021 trace (`Input type: []`): before, bytes were 0 and with V100 peaks all 636
    normalization ops read compute-bound; the bytes are unknown: null, no roofline, no bound."""
    tr = pt.load(SHARED_PUBLIC / "tb_plugin" / "plugin__samples__resnet50_num_workers_0__worker0.pt.trace.json.gz")
    norm = tr.perf.ops("V100-SXM2").filter(pl.col("family") == "normalization")
    assert norm.height == 636
    assert norm["flops"].is_not_null().all() and norm["bytes"].is_null().all()
    assert norm["bound"].is_null().all() and norm["roofline_share"].is_null().all()
    fam = tr.perf.summary(peaks="V100-SXM2").filter(pl.col("family") == "normalization").row(0, named=True)
    assert fam["bytes"] is None and fam["n_compute_bound"] == 0


def test_multi_rank_peaks_per_rank(capsys: pytest.CaptureFixture[str]) -> None:
    """An H100 and an MI300X file loaded as one trace: before, both ranks were rated against the
    H100 (the lowest rank's device); now each rank against its own."""
    tr = pt.load([str(H100), str(MI300)], ranks=[0, 1])
    o = tr.perf.ops()
    got = dict(o.group_by("rank").agg(pl.col("peak_device").unique()).select(
        "rank", pl.col("peak_device").list.first()).iter_rows())
    assert got == {0: "H100-SXM", 1: "MI300X"}
    assert set(o.filter(pl.col("rank") == 1)["peak_tb_per_s"]) == {PEAKS["MI300X"]["hbm_tb_s"]}
    # each rank's rows equal the rank loaded alone
    alone = pt.load(MI300).perf.ops()
    assert o.filter(pl.col("rank") == 1)["roofline_share"].to_list() == alone["roofline_share"].to_list()
    # an explicit --peaks still rates every rank against it
    assert set(tr.perf.ops("H100-SXM")["peak_device"]) == {"H100-SXM"}
    assert main(["perf", str(H100), str(MI300), "--ranks", "0,1"]) == 0
    assert "peaks: rank 0 H100-SXM, rank 1 MI300X" in capsys.readouterr().out


# ----------------------------------------------------------------------------- copies on the roofline (issue 25.11)

ALEXNET_A100 = DATA / "public" / "critical_path__alexnet__benchmark_result_2869224_1695835535_trace.json.gz"
PUBLIC_MI300 = DATA / "public" / "mi300__resnet_act_checkpoint.json.gz"


def test_copies_are_rated_against_their_ceiling() -> None:
    """Real A100 trace (tests/data): each HtoD against the host link (PCIe Gen4, one direction,
    0.032 TB/s), each memset against HBM (1.555 TB/s); the rates recomputed from the raw copies."""
    tr = pt.load(ALEXNET_A100)
    raw = tr.device.copies()
    c = tr.perf.copies()
    assert c.height == raw.height == 19
    assert c["event_id"].to_list() == raw["event_id"].to_list()
    assert c.group_by("copy").len().sort("copy").rows() == [("memcpy HtoD", 16), ("memset", 3)]
    assert set(c.filter(pl.col("copy") == "memcpy HtoD")["peak_tb_per_s"]) == {0.032}
    assert set(c.filter(pl.col("copy") == "memset")["peak_tb_per_s"]) == {1.555}
    assert c.filter(pl.col("copy") == "memset")["ceiling"].unique().to_list() == ["hbm"]
    assert c.filter(pl.col("copy") == "memcpy HtoD")["ceiling"].unique().to_list() == ["host_link"]
    for row in c.iter_rows(named=True):  # every number from the raw bytes and ns
        want = row["bytes"] / row["dur_ns"] / 1e3
        assert row["moved_bytes"] == row["bytes"] and row["tb_per_s"] == pytest.approx(want, rel=1e-12)
        assert row["roofline_share"] == pytest.approx(want / row["peak_tb_per_s"], rel=1e-12)
        assert row["above_peak"] is (row["roofline_share"] > 1) and row["note"] is None
    s = tr.perf.copy_summary()
    htod = s.filter(pl.col("copy") == "memcpy HtoD").row(0, named=True)
    part = c.filter(pl.col("copy") == "memcpy HtoD")
    assert htod["n_copies"] == 16 and htod["bytes"] == part["bytes"].sum() and htod["dur_ns"] == part["dur_ns"].sum()
    assert htod["tb_per_s"] == pytest.approx(part["bytes"].sum() / part["dur_ns"].sum() / 1e3)
    assert htod["roofline_share"] == pytest.approx(htod["tb_per_s"] / 0.032)
    assert s["share"].sum() == pytest.approx(1.0)
    # a device the table has no host-link rate for: null, with the reason
    gcd = pt.load(ALEXNET_A100).perf.copies("MI250X-GCD")
    htod_gcd = gcd.filter(pl.col("copy") == "memcpy HtoD")
    assert htod_gcd["roofline_share"].is_null().all()
    assert set(htod_gcd["note"]) == {"the peaks table has no host-link rate for MI250X-GCD"}
    assert gcd.filter(pl.col("copy") == "memset")["peak_tb_per_s"].unique().to_list() == [1.6]


def test_dtod_counts_read_and_write_and_unknown_devices_say_why() -> None:
    """DtoD moves each byte twice through HBM (read + write); MI300X trace (tests/data)."""
    tr = pt.load(PUBLIC_MI300)
    d = tr.perf.copies().filter((pl.col("copy") == "memcpy DtoD") & pl.col("bytes").is_not_null())
    assert d.height > 0 and (d["moved_bytes"] == 2 * d["bytes"]).all()
    assert (d["peak_tb_per_s"] == 5.3).all() and (d["ceiling"] == "hbm").all()
    no_bytes = tr.perf.copies().filter(pl.col("bytes").is_null())
    assert no_bytes.height > 0 and no_bytes["roofline_share"].is_null().all()
    assert set(no_bytes["note"]) == {"the trace records no bytes for this copy"}
    # no device peaks: every share null, the reason said
    unknown = pt.load(DATA / "public" / "trace_compare__base__base.json.gz").perf.copies()
    assert unknown.height == 12 and unknown["roofline_share"].is_null().all()
    assert set(unknown["note"]) == {"device unknown: pass peaks= (CLI --peaks)"}
    # peer-to-peer and host-to-host copies have no ceiling in the table
    syn = pl.DataFrame({"rank": [0, 0], "event_id": [1, 2], "name": ["Memcpy PtoP (Device -> Device)", "x"],
                        "kind": ["memcpy", "memcpy"], "direction": ["PtoP", "HtoH"], "bytes": [1 << 20, 8],
                        "dur_ns": [1000, 10], "op_name": [None, None]}, schema_overrides={"rank": pl.Int32})
    from proftab.perf.copies import copies

    out = copies(syn, resolve_peaks("H100-SXM", None))
    assert out["roofline_share"].is_null().all() and out["note"].to_list() == [
        "peer-to-peer (NVLink / xGMI): no peer-link rate in the peaks table", "host to host: no device link bounds it"]


@needs_shared
def test_copies_above_the_peak_are_flagged() -> None:
    """A100 trace_diff: 18 DtoD copies of 12.9 MB in 13-14 µs (µs resolution) read 1.84-1.98 TB/s
    through HBM (read + write) against 1.555: flagged, with the CLI's note, never clipped."""
    tr = pt.load(A100_TF32)
    c = tr.perf.copies()
    above = c.filter(pl.col("above_peak"))
    assert above.height == 6 and set(above["copy"]) == {"memcpy DtoD"}
    assert (above["roofline_share"] > 1).all() and (above["lost_ns"] == 0).all()
    s = tr.perf.copy_summary()
    assert dict(zip(s["copy"], s["n_copies"], strict=True)) == {"memcpy HtoD": 150, "memcpy DtoD": 18, "memset": 654,
                                                                  "memcpy DtoH": 60}
    assert s.filter(pl.col("copy") == "memcpy DtoD")["n_above_peak"].item() == 6
    rc, text = _run(["perf", str(A100_TF32)])
    assert rc == 0 and "copies on the bandwidth roofline" in text
    assert "copies above the peak (column above_peak): 6 memcpy DtoD; the trace's 1000 ns resolution" in text
    rc, text = _run(["perf", str(A100_TF32), "--copies", "--format", "csv"])
    assert rc == 0 and text.count("\n") == 1 + 882 and text.startswith("rank,event_id,copy,")


def test_copies_in_the_roofline_chart_and_cli(tmp_path: Path) -> None:
    pytest.importorskip("altair")
    tr = pt.load(ALEXNET_A100)
    spec = tr.plot.roofline().to_dict()
    roof, cop = spec["hconcat"]
    assert roof["title"] == "roofline · A100-SXM4-40GB"
    def values(layer: dict) -> list[dict]:
        data = layer["data"]
        return data["values"] if "values" in data else spec["datasets"][data["name"]]
    pts = values(cop["layer"][0])
    assert len(pts) == 19 and {p["copy"] for p in pts} == {"memcpy HtoD", "memset"}
    labels = {r["label"] for r in values(cop["layer"][2])}
    assert labels == {"HBM 1.555 TB/s", "host link (PCIe, one direction) 0.032 TB/s"}
    rc, text = _run(["perf", str(ALEXNET_A100), "--plain"])
    assert rc == 0
    block = text.split("copies on the bandwidth roofline", 1)[1]
    assert "memcpy HtoD" in block and "host_link" in block and "memset" in block
    rc, _ = _run(["perf", str(ALEXNET_A100), "--chart", str(tmp_path / "r.json"), "-q"])
    assert rc == 0 and "hconcat" in json.loads((tmp_path / "r.json").read_text())


@pytest.mark.parametrize("width", [80, 120])
def test_perf_on_a_terminal_keeps_each_rows_key(monkeypatch: pytest.MonkeyPatch, width: int) -> None:
    """Issue 25.10 walk: at 120 columns the family table dropped its `family` column (a row of numbers
    without its name); the key of each table (family, copy) is never dropped, other columns are, and
    the table says which."""
    rich_console = pytest.importorskip("rich.console")
    import proftab.cli._common as common

    out = io.StringIO()

    def console(args: object, stream: object = None) -> object:
        return rich_console.Console(file=out, width=width, force_terminal=True, color_system=None)
    monkeypatch.setattr(common, "rich_console", console)
    with contextlib.redirect_stderr(io.StringIO()):
        assert main(["perf", str(ALEXNET_A100), "-q"]) == 0
    text = out.getvalue()
    assert max(len(line.rstrip()) for line in text.splitlines()) <= width
    header = next(line for line in text.splitlines() if "n_ops" in line)
    assert "family" in header
    copies = text.split("copies on the bandwidth roofline", 1)[1]
    assert "copy" in next(line for line in copies.splitlines() if "n_copies" in line)
    assert "memcpy HtoD" in copies and f"columns not shown at width {width}" in text


def test_copies_option_on_a_trace_without_copies_says_so() -> None:
    """`--copies` that would print an empty table is a usage error (exit 2), as the issue's item 12 asks."""
    path = DATA / "public" / "large_integer_trace__rank-70.Mar_25_20_48_12.2861.pt.trace.json.gz"
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        assert main(["perf", str(path), "--copies"]) == 2
    assert "--copies:" in err.getvalue() and "has no memcpy / memset to rate" in err.getvalue()
