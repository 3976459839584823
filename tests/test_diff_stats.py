"""pt.diff(stats=True): per-step tests on recorded reruns and a run with a known extra matmul.

tests/data/diff/generate.py recorded the traces (torch 2.13 CPU, 40 steps each): `rerun_a` and
`rerun_b` run the same model; `slowed` adds `x @ extra` (aten::mm [64, 512] x [512, 2048]) in the
third block (`Net_0.Block_2`).
"""

from __future__ import annotations

import math
import random
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import proftab as pt
from proftab.diff_stats import (
    STATS_COLUMNS,
    _erfc,
    compare,
    holm,
    mann_whitney,
    normalize_name,
    regressions,
    report_markdown,
    step_samples,
)
from proftab.steps import step_windows
from tests.builders import op, write_events

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "diff"
RERUN_A, RERUN_B, SLOWED = (DATA / f"{n}.pt.trace.json.gz" for n in ("rerun_a", "rerun_b", "slowed"))
PUB = ROOT / "tests" / "data" / "public"
GPU_BASE = PUB / "trace_compare__base__base.json.gz"
GPU_TEST = PUB / "trace_compare__test__test.json.gz"
RANKS = [PUB / "trace_filter__sampled_rank-0.json.gz", PUB / "trace_filter__sampled_rank-1.json.gz"]
ONE_STEP = ROOT / "tests" / "data" / "modules_train_step.pt.trace.json.gz"
MM_FLOPS = 2 * 64 * 512 * 2048


@pytest.fixture(scope="module")
def traces() -> dict[str, pt.Trace]:
    return {"a": pt.load(RERUN_A), "b": pt.load(RERUN_B), "slowed": pt.load(SLOWED)}


# ------------------------------------------------------------------------------------ the statistics


def _reference_mwu(x: list[float], y: list[float]) -> float:
    """Two-sided asymptotic Mann-Whitney p-value, tie and continuity corrected, by counting pairs."""
    u = sum(1.0 if a > b else 0.5 if a == b else 0.0 for a in x for b in y)
    n1, n2 = len(x), len(y)
    n = n1 + n2
    counts: dict[float, int] = {}
    for v in x + y:
        counts[v] = counts.get(v, 0) + 1
    tie = sum(t ** 3 - t for t in counts.values())
    var = n1 * n2 / 12 * ((n + 1) - tie / (n * (n - 1)))
    if var <= 0:
        return 1.0
    z = max(abs(u - n1 * n2 / 2) - 0.5, 0) / math.sqrt(var)
    return min(math.erfc(z / math.sqrt(2)), 1.0)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.integers(0, 6), min_size=1, max_size=12), min_size=2, max_size=2),
       st.lists(st.lists(st.integers(0, 6), min_size=1, max_size=12), min_size=2, max_size=2))
def test_mann_whitney_matches_the_pair_counting_reference(xs: list[list[int]], ys: list[list[int]]) -> None:
    """Small integer values: many ties, the tie correction matters."""
    rows = [(g, 0, float(v)) for g, x in enumerate(xs) for v in x] + [(g, 1, float(v)) for g, y in enumerate(ys)
                                                                      for v in y]
    long = pl.DataFrame(rows, schema={"group": pl.Int64, "side": pl.Int8, "value": pl.Float64}, orient="row")
    got = mann_whitney(long).sort("group")
    for g in range(2):
        assert got["p_value"][g] == pytest.approx(_reference_mwu([float(v) for v in xs[g]],
                                                                 [float(v) for v in ys[g]]), rel=1e-6, abs=1e-12)


def test_erfc_and_holm_against_references() -> None:
    x = np.linspace(-6, 9, 301)
    assert np.allclose(_erfc(x), [math.erfc(v) for v in x], rtol=2e-7, atol=0)
    rng = np.random.default_rng(1)
    p = rng.uniform(0, 0.05, 40)
    # Holm by its definition: the k-th smallest p times (m - k), running maximum, capped at 1
    order = sorted(range(40), key=lambda i: p[i])
    ref, running = [0.0] * 40, 0.0
    for k, i in enumerate(order):
        running = max(running, min(1.0, (40 - k) * p[i]))
        ref[i] = running
    assert np.allclose(holm(p), ref)


def test_normalize_name_removes_volatile_parts() -> None:
    names = pl.Series(["<built-in method relu of type object at 0x7fd4740cea40>",
                       "<built-in method relu of type object at 0x7fa59f8cea40>",
                       "/tmp/tmpab12cd/model.py(3): f", "/var/tmpk2j4h5x9.py(1): g", "worker pid 4121",
                       "worker pid=977", "aten::mm", "model.py(46): forward"])
    out = pl.select(normalize_name(pl.lit(names))).to_series().to_list()
    assert out[0] == out[1] == "<built-in method relu of type object at 0x…>"
    assert out[2] == "/tmp/…/model.py(…): f" and out[3] == "/var/tmp….py(…): g"
    assert out[4] == "worker pid …" and out[5] == "worker pid=…" and out[6] == "aten::mm"
    assert out[7] == "model.py(…): forward"


# ------------------------------------------------------------------------------------ samples are exact


def test_step_samples_are_the_step_and_op_times(traces: dict[str, pt.Trace]) -> None:
    tr = traces["slowed"]
    s, unit = step_samples(tr)
    assert unit == "step"
    w = step_windows(tr.events).sort("step")
    kept = w.filter(pl.col("step") > w["step"].min() + 1)  # warm-up: the first 2 steps left out
    steps = s.filter(pl.col("kind") == "step").sort("sample")
    assert steps["value_ns"].to_list() == kept["dur_ns"].to_list() and steps.height == 38
    # aten::mm: self time per step straight from the events (only in Block_2, the extra matmul)
    mm = s.filter((pl.col("kind") == "op") & (pl.col("name") == "aten::mm"))
    assert set(mm["module"]) == {"Net_0.Block_2"}
    assert mm["input_shapes"].unique().to_list() == ["[[64, 512], [512, 2048]]"]
    assert (mm["flops"] == MM_FLOPS).all()
    ev = tr.nested.filter((pl.col("name") == "aten::mm") & (pl.col("start_ns") >= kept["start_ns"].min()))
    assert int(mm["value_ns"].sum()) == int(ev["self_ns"].sum())
    with pytest.raises(pt.ProftabError, match="warmup"):
        step_samples(tr, warmup=-1)


# ------------------------------------------------------------------------------------ the recorded runs


def test_rerun_vs_rerun_passes_the_gate(traces: dict[str, pt.Trace]) -> None:
    d = pt.diff(traces["a"], traces["b"], stats=True)
    assert d.columns == [*STATS_COLUMNS, "unit"] and (d["unit"] == "step").all()
    assert regressions(d, 0.02).is_empty()
    big = d.filter(pl.col("significant") & (pl.col("step_share").abs() > 0.02))
    assert big.is_empty()
    # volatile names: the python frames carry object addresses that differ between the runs,
    # yet nothing is added or removed
    raw_a = set(traces["a"].events.filter(pl.col("name").str.contains(" at 0x"))["name"])
    raw_b = set(traces["b"].events.filter(pl.col("name").str.contains(" at 0x"))["name"])
    assert raw_a and raw_a != raw_b
    assert d.filter(pl.col("status").is_in(["added", "removed"])).is_empty()
    relu = d.filter(pl.col("name").str.starts_with("<built-in method relu of type object at 0x"))
    assert relu.height >= 1 and relu["name"][0] in raw_a | raw_b  # shown once, as recorded
    step = d.filter(pl.col("kind") == "step").row(0, named=True)
    assert step["ci_low_ns"] <= step["delta_ns"] <= step["ci_high_ns"] and step["n_samples_a"] == 38
    # the real step durations: the vectorized test against the pair-counting reference, the delta exact
    durs = [step_windows(traces[k].events).sort("step")["dur_ns"].to_list()[2:] for k in ("a", "b")]
    long = pl.DataFrame({"group": [0] * 76, "side": [0] * 38 + [1] * 38,
                         "value": [float(v) for v in durs[0] + durs[1]]})
    assert mann_whitney(long)["p_value"][0] == pytest.approx(_reference_mwu(*[[float(v) for v in x] for x in durs]),
                                                             rel=1e-6)
    assert step["delta_ns"] == round(sum(durs[1]) / 38 - sum(durs[0]) / 38)
    assert step["mean_ns_a"] == round(sum(durs[0]) / 38)


def test_slowed_run_names_the_module_and_the_added_matmul(traces: dict[str, pt.Trace]) -> None:
    d = pt.diff(traces["a"], traces["slowed"], stats=True)
    reg = regressions(d, 0.02)
    first = reg.row(0, named=True)
    assert (first["kind"], first["module"]) == ("module", "Net_0.Block_2")
    assert first["cause"] == f"aten::mm [[64, 512], [512, 2048]] added, +{MM_FLOPS:,} FLOPs/step"
    op = reg.filter(pl.col("kind") == "op").row(0, named=True)
    assert (op["name"], op["module"], op["status"], op["match"]) == ("aten::mm", "Net_0.Block_2", "added", None)
    assert op["flops_delta"] == MM_FLOPS and op["significant"] and 0 < op["ci_low_ns"] <= op["delta_ns"]
    assert op["mean_ns_a"] == 0 and op["delta_ns"] == op["mean_ns_b"]
    # no other module regresses beyond the threshold
    assert set(reg.filter(pl.col("kind") == "module")["module"]) == {"Net_0.Block_2"}
    # the model's own names (instance_names(model, x) of generate.py's Net gives these)
    names = {"Net_0": "model", **{f"Block_{i}": f"model.layers.{i}" for i in range(4)}}
    named = regressions(pt.diff(traces["a"], traces["slowed"], stats=True, names=names), 0.02)
    assert named["module"].to_list()[:2] == ["model.layers.2", "model.layers.2"]
    assert named.filter(pl.col("kind") == "module")["name"].to_list() == ["model.layers.2"]
    # the shared ops matched at the most specific level
    addmm = d.filter(pl.col("name") == "aten::addmm")
    assert (addmm["match"] == "module+op+shape").all() and addmm.height == 8


def test_false_positive_rate_on_resampled_reruns(traces: dict[str, pt.Trace]) -> None:
    """Synthetic reruns: the 38 kept steps of one recorded run split at random into two runs of 19.

    Both halves come from the same run, so every significant key is a false positive; the
    family-wise rate (any key significant) must stay <= alpha, the gate must never fail.
    """
    alpha, trials = 0.05, 60
    any_sig = gate = 0
    rng = random.Random(0)
    for name in ("a", "b"):
        s, _ = step_samples(traces[name])
        steps = sorted(set(s["sample"].to_list()))
        for _ in range(trials // 2):
            half = set(rng.sample(steps, len(steps) // 2))
            in_half = pl.col("sample").is_in(list(half))
            d = compare(s.filter(in_half), s.filter(~in_half), alpha=alpha, n_boot=200)
            any_sig += bool(d["significant"].any())
            gate += regressions(d, 0.02).height > 0
    assert gate == 0
    assert any_sig / trials <= alpha


# ------------------------------------------------------------------------------------ other inputs


def test_one_step_trace_falls_back_to_events() -> None:
    tr = pt.load(ONE_STEP)
    d = pt.diff(tr, tr, stats=True)
    assert (d["unit"] == "event").all() and not d["significant"].any() and (d["delta_ns"] == 0).all()
    assert d.filter(pl.col("kind") == "step").is_empty()
    ops = tr.nested.filter(pl.col("name") == "aten::addmm")
    row = d.filter(pl.col("name") == "aten::addmm").select(pl.col("n_samples_a").sum()).item()
    assert row == ops.height  # every event is a sample
    # annotation windows: the two micro-batches are the steps
    s, unit = step_samples(tr, warmup=0, window="microbatch_")
    assert unit == "step" and s["sample"].n_unique() == 2
    with pytest.raises(pt.ProftabError, match="no user annotation"):
        step_samples(tr, window="nonesuch")
    # the one step is a warm-up step too: its events still bound the samples
    s, unit = step_samples(tr)
    w = step_windows(tr.events).row(0, named=True)
    inside = (pl.col("start_ns") >= w["start_ns"]) & (pl.col("start_ns") < w["end_ns"])
    ids = set(s.filter(pl.col("kind") == "op")["sample"])
    assert unit == "event" and ids <= set(tr.nested.filter(inside)["event_id"])
    assert set(tr.nested.filter(inside & (pl.col("cat") == "cpu_op"))["event_id"]) <= ids


def test_trace_without_steps(tmp_path: Path) -> None:
    ev = [op(n, i * 10, d) for i, (n, d) in enumerate([("aten::mm", 5), ("aten::mm", 7), ("aten::add", 2)])]
    p = write_events(tmp_path / "nosteps.json.gz", ev)
    d = pt.diff(p, p, stats=True)
    assert (d["unit"] == "event").all() and set(d["name"]) == {"aten::mm", "aten::add"}
    mm = d.filter(pl.col("name") == "aten::mm").row(0, named=True)
    assert (mm["n_samples_a"], mm["mean_ns_a"], mm["delta_ns"], mm["significant"]) == (2, 12_000, 0, False)


def test_gpu_pair_rank_dirs_and_datasets(tmp_path: Path) -> None:
    d = pt.diff(GPU_BASE, GPU_TEST, stats=True, warmup=0)
    assert {"kernel", "op", "step"} <= set(d["kind"])
    kern = d.filter(pl.col("kind") == "kernel")
    assert kern["n_samples_a"].max() == 2
    rank_dir = tmp_path / "ranks"
    rank_dir.mkdir()
    for f in RANKS:
        (rank_dir / f.name).write_bytes(f.read_bytes())
    both = pt.diff(RANKS, rank_dir, stats=True, warmup=0)
    assert (both["n_samples_a"] == 4).all() and (both["delta_ns"] == 0).all()  # 2 ranks x 2 steps
    assert not both["significant"].any()
    tr = pt.load(RERUN_A)
    tr.to_parquet(str(tmp_path / "ds"))
    from_ds = pt.diff(pt.scan(str(tmp_path / "ds")), RERUN_B, stats=True)
    assert from_ds.equals(pt.diff(tr, RERUN_B, stats=True))
    with pytest.raises(pt.ProftabError, match="DataFrame"):
        pt.diff(tr.key_averages(), tr, stats=True)


# ------------------------------------------------------------------------------------ CLI


def test_cli_gate_and_markdown(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from proftab.__main__ import main

    assert main(["diff", str(RERUN_A), str(RERUN_B), "--gate", "--threshold", "2%", "--plain"]) == 0
    assert "gate passed" in capsys.readouterr().err
    md = tmp_path / "comment.md"
    assert main(["diff", str(RERUN_A), str(SLOWED), "--gate", "--alpha", "0.01", "--format", "markdown",
                 "-o", str(md)]) == 1
    err = capsys.readouterr().err
    assert "gate FAILED" in err and "Net_0.Block_2" in err and "aten::mm [[64, 512], [512, 2048]] added" in err
    text = md.read_text()
    assert "**Regression**: module Net_0.Block_2" in text and "#### Top regressions" in text
    assert "`aten::mm [[64, 512], [512, 2048]]` (op)" in text
    # a threshold above the regression: the gate passes
    assert main(["diff", str(RERUN_A), str(SLOWED), "--gate", "--threshold", "50%", "-o",
                 str(tmp_path / "d.csv")]) == 0
    assert pl.read_csv(tmp_path / "d.csv").height > 100
    # a Parquet dataset (proftab convert / to_parquet) as the baseline
    pt.load(RERUN_A).to_parquet(str(tmp_path / "ds"))
    assert main(["diff", str(tmp_path / "ds"), str(SLOWED), "--gate", "-q", "-o", str(tmp_path / "x.txt")]) == 1
    assert "Net_0.Block_2" in (tmp_path / "x.txt").read_text()
    assert main(["diff", str(RERUN_A), str(SLOWED), "--gate", "--normalize", "step"]) == 2
    assert main(["diff", str(RERUN_A), str(SLOWED), "--gate", "--threshold", "two"]) == 2


def test_report_markdown_without_regressions(traces: dict[str, pt.Trace]) -> None:
    d = pt.diff(traces["a"], traces["b"], stats=True)
    text = report_markdown(d, threshold=0.02)
    assert "**No significant regression** larger than 2.0% of the step time" in text


def _samples(rows: list[tuple[str, str, str, str, int, int]]) -> pl.DataFrame:
    return pl.DataFrame(rows, schema=["kind", "module", "name", "input_shapes", "sample", "value_ns"],
                        orient="row").with_columns(shown_name=pl.col("name"), flops=pl.lit(0, pl.Int64)).select(
        "kind", "module", "name", "input_shapes", "shown_name", "sample", "value_ns", "flops")


def test_matching_levels_on_synthetic_keys() -> None:
    """An op that moved module matches on op + shape; one whose shape changed on op; a new op is added."""
    steps = range(6)
    a = _samples([("op", "m.0", "aten::mm", "[[2, 2]]", s, 100 + s) for s in steps]
                 + [("op", "m.1", "aten::relu", "[[4]]", s, 50) for s in steps]
                 + [("op", "m.2", "aten::add", "[[8]]", s, 10) for s in steps])
    b = _samples([("op", "m.0", "aten::mm", "[[2, 2]]", s, 100 + s) for s in steps]
                 + [("op", "m.9", "aten::relu", "[[4]]", s, 50) for s in steps]  # moved module
                 + [("op", "m.2", "aten::add", "[[16]]", s, 30) for s in steps]  # new shape, slower
                 + [("op", "m.2", "aten::cat", "[]", s, 7) for s in steps if s % 2])  # added, every 2nd step
    d = compare(a, b, alpha=0.05, n_boot=100)
    by = {r["name"]: r for r in d.iter_rows(named=True)}
    assert by["aten::mm"]["match"] == "module+op+shape" and by["aten::mm"]["delta_ns"] == 0
    assert (by["aten::relu"]["match"], by["aten::relu"]["module"]) == ("op+shape", "")
    assert by["aten::add"]["match"] == "op" and by["aten::add"]["input_shapes"] == "[]"
    assert by["aten::add"]["delta_ns"] == 20 and by["aten::add"]["significant"]
    cat = by["aten::cat"]
    assert (cat["status"], cat["match"], cat["mean_ns_a"]) == ("added", None, 0)
    assert cat["mean_ns_b"] == round(3 * 7 / 6) and cat["n_samples_b"] == 6  # absent steps count 0
    with pytest.raises(pt.ProftabError, match="alpha"):
        compare(a, b, alpha=1.5)
