"""`pt.overlaps` and `pt.join_samples` against obviously-correct references."""

from __future__ import annotations

import bisect
import datetime as dt
from pathlib import Path

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal

import proftab as pt
from proftab import ProftabError, ProftabWarning
from proftab.intervals.overlap import overlap_pairs

ROOT = Path(__file__).resolve().parents[1]
H100 = ROOT / "data" / "h100_bert_small.pt.trace.json.gz"
PAIR = sorted((ROOT / "tests" / "data" / "public").glob("trace_filter__sampled_rank-*.json.gz"))
TELEMETRY = ROOT / "data" / "telemetry_sample.parquet"


# --------------------------------------------------------------------------- references


def ref_pairs(left, right):
    """All (i, j, overlap) by the definition: max(starts) < min(ends), a point as [t, t+1)."""
    out = []
    for i, (a, b, g) in enumerate(left):
        for j, (c, d, h) in enumerate(right):
            if g is None or h is None or g != h:
                continue
            if max(a, c) < min(max(b, a + 1), max(d, c + 1)):
                out.append((i, j, max(0, min(b, d) - max(a, c))))
    return out


def ref_samples(events, samples, tol):
    """Per event: as-of sample index, mean of values inside, count, time-weighted mean (per ns)."""
    out = []
    for s, e, g in events:
        mine = [(t, k, v) for k, (t, h, v) in enumerate(samples) if h is not None and h == g]
        before = [(t, k) for t, k, _ in mine if t <= s]
        asof = max(before)[1] if before else None
        if asof is not None and tol is not None and s - samples[asof][0] > tol:
            asof = None
        inside = [v for t, _, v in mine if s <= t < e]
        if asof is None:
            tw = None
        elif e == s:
            tw = samples[asof][2]
        else:
            acc = 0.0
            for x in range(s, e):
                acc += samples[max((t, k) for t, k, _ in mine if t <= x)[1]][2]
            tw = acc / (e - s)
        out.append((asof, sum(inside) / len(inside) if inside else None, len(inside), tw))
    return out


# --------------------------------------------------------------------------- overlaps

interval = st.tuples(st.integers(0, 60), st.integers(0, 15), st.one_of(st.none(), st.integers(0, 2)))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(interval, max_size=25), st.lists(interval, max_size=25))
def test_overlaps_matches_bruteforce(left_raw, right_raw) -> None:
    left = [(s, s + d, g) for s, d, g in left_raw]
    right = [(s, s + d, g) for s, d, g in right_raw]
    lf = pl.DataFrame({"start_ns": [x[0] for x in left], "end_ns": [x[1] for x in left],
                       "g": [x[2] for x in left], "i": list(range(len(left)))},
                      schema={"start_ns": pl.Int64, "end_ns": pl.Int64, "g": pl.Int64, "i": pl.Int64})
    rf = pl.DataFrame({"start_ns": [x[0] for x in right], "end_ns": [x[1] for x in right],
                       "g": [x[2] for x in right], "j": list(range(len(right)))},
                      schema={"start_ns": pl.Int64, "end_ns": pl.Int64, "g": pl.Int64, "j": pl.Int64})
    got = pt.overlaps(lf, rf, by="g")
    assert got.select("i", "j", "overlap_ns").rows() == ref_pairs(left, right)
    assert got.columns == ["start_ns", "end_ns", "g", "i", "start_ns_right", "end_ns_right", "j", "overlap_ns"]
    # without keys, and the raw engine
    nokey = [(a, b, 0) for a, b, _ in left], [(c, d, 0) for c, d, _ in right]
    li, ri = overlap_pairs(lf["start_ns"].to_numpy(), lf["end_ns"].to_numpy(), rf["start_ns"].to_numpy(),
                           rf["end_ns"].to_numpy())
    assert list(zip(li.tolist(), ri.tolist(), strict=True)) == [(i, j) for i, j, _ in ref_pairs(*nokey)]
    # how="left" keeps every left row once when it has no pair
    lj = pt.overlaps(lf, rf, by="g", how="left")
    matched = {i for i, _, _ in ref_pairs(left, right)}
    assert lj.height == len(ref_pairs(left, right)) + len(left) - len(matched)
    assert lj["i"].to_list() == sorted(lj["i"].to_list())


def test_overlaps_huge_spans_fall_back_per_group() -> None:
    big = 2**61
    left = pl.DataFrame({"start_ns": [0, big, -big], "end_ns": [10, big + 10, -big + 5], "g": [0, 1, 2]})
    right = pl.DataFrame({"start_ns": [5, big + 9, -big + 4], "end_ns": [6, big + 20, -big + 4], "g": [0, 1, 2]})
    got = pt.overlaps(left, right, by="g")
    assert got["overlap_ns"].to_list() == [1, 1, 0]


def test_ops_during_gc_pauses_on_a_real_trace() -> None:
    """Synthetic 'GC pause' windows over the h100 trace: which ops ran during them."""
    tr = pt.load(str(H100))
    ev = tr.events.select("event_id", "name", "cat", "tid", "start_ns", "end_ns")
    t0, t1 = int(ev["start_ns"].min()), int(ev["end_ns"].max())
    span = t1 - t0
    pauses = pl.DataFrame({"pause": [0, 1, 2], "start_ns": [t0 + span // 10, t0 + span // 2, t1 - 1000],
                           "end_ns": [t0 + span // 10 + 250_000, t0 + span // 2 + 40_000, t1 + 5000]})
    got = pt.overlaps(ev, pauses)
    # reference: a cross join filtered by the half-open overlap rule
    ref = (ev.join(pauses, how="cross", suffix="_right")
           .filter(pl.max_horizontal("start_ns", "start_ns_right")
                   < pl.min_horizontal(pl.max_horizontal("end_ns", pl.col("start_ns") + 1),
                                       pl.max_horizontal("end_ns_right", pl.col("start_ns_right") + 1)))
           .with_columns(overlap_ns=pl.max_horizontal(
               pl.min_horizontal("end_ns", "end_ns_right") - pl.max_horizontal("start_ns", "start_ns_right"), 0)))
    key = ["event_id", "pause"]
    assert got.height > 50
    assert_frame_equal(got.sort(key), ref.select(got.columns).sort(key))
    # by thread: the same pauses replicated per thread only match that thread's ops
    per_tid = pauses.join(ev.select("tid").unique(), how="cross")
    by_tid = pt.overlaps(ev, per_tid, by="tid")
    assert by_tid.height == got.filter(pl.col("tid").is_not_null()).height


def test_overlaps_datetime_columns_and_errors() -> None:
    tr = pt.load(str(H100))
    ev = tr.with_utc(tr.events.filter(pl.col("cat") == "kernel"))
    t = pl.col("start_utc").min()
    window = ev.select((t + pl.duration(microseconds=100, time_unit="ns")).alias("start_utc"),
                       (t + pl.duration(microseconds=900, time_unit="ns")).alias("end_utc"))
    assert window.schema["start_utc"] == pl.Datetime("ns", "UTC")
    got = pt.overlaps(ev, window, left_on=("start_utc", "end_utc"))
    abs_ev = ev.with_columns(_s=pl.col("start_utc").cast(pl.Int64), _e=pl.col("end_utc").cast(pl.Int64))
    w_ns = window.select(pl.col("start_utc").cast(pl.Int64).alias("_s"), pl.col("end_utc").cast(pl.Int64).alias("_e"))
    expect = pt.overlaps(abs_ev, w_ns, left_on=("_s", "_e"))
    assert got.height > 0
    assert got["overlap_ns"].to_list() == expect["overlap_ns"].to_list()
    # a microsecond-unit window is converted exactly (to ns, not compared as raw integers)
    w_us = window.with_columns(pl.col("start_utc", "end_utc").dt.truncate("1us").cast(pl.Datetime("us", "UTC")))
    w_us_ns = w_us.select(pl.col("start_utc").cast(pl.Int64).mul(1000).alias("_s"),
                          pl.col("end_utc").cast(pl.Int64).mul(1000).alias("_e"))
    assert pt.overlaps(ev, w_us, left_on=("start_utc", "end_utc"))["overlap_ns"].to_list() == \
        pt.overlaps(abs_ev, w_us_ns, left_on=("_s", "_e"))["overlap_ns"].to_list()
    with pytest.raises(ProftabError, match="time zone"):
        pt.overlaps(ev, window.with_columns(pl.col("start_utc", "end_utc").dt.replace_time_zone(None)),
                    left_on=("start_utc", "end_utc"))
    with pytest.raises(ProftabError, match="mix Int64 ns and Datetime"):
        pt.overlaps(ev, window, left_on=("start_ns", "end_ns"), right_on=("start_utc", "end_utc"))
    with pytest.raises(ProftabError, match="null"):
        pt.overlaps(pl.DataFrame({"start_ns": [1, None], "end_ns": [2, 3]}), w_ns, right_on=("_s", "_e"))
    with pytest.raises(ProftabError, match="never a float"):
        pt.overlaps(pl.DataFrame({"start_ns": [1.0], "end_ns": [2.0]}), w_ns, right_on=("_s", "_e"))
    with pytest.warns(ProftabWarning, match="1 interval"):
        neg = pt.overlaps(pl.DataFrame({"start_ns": [5], "end_ns": [1]}),
                          pl.DataFrame({"start_ns": [0], "end_ns": [10]}))
    assert neg["overlap_ns"].to_list() == [0]
    lazy = pt.overlaps(ev.lazy(), window, left_on=("start_utc", "end_utc"))
    assert isinstance(lazy, pl.LazyFrame)
    assert_frame_equal(lazy.collect(), got)
    renamed = pt.overlaps(pl.DataFrame({"dev": [0, 1], "start_ns": [0, 0], "end_ns": [5, 5]}),
                          pl.DataFrame({"gpu": [1], "start_ns": [2], "end_ns": [3]}), by={"dev": "gpu"})
    assert renamed.select("dev", "overlap_ns").rows() == [(1, 1)]


# --------------------------------------------------------------------------- join_samples

sample = st.tuples(st.integers(0, 40), st.one_of(st.none(), st.integers(0, 1)), st.integers(0, 100))
event = st.tuples(st.integers(0, 50), st.integers(0, 12), st.one_of(st.none(), st.integers(0, 1)))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(event, max_size=15), st.lists(sample, max_size=15), st.one_of(st.none(), st.integers(0, 8)))
def test_join_samples_matches_reference(ev_raw, sm_raw, tol) -> None:
    events = [(s, s + d, g) for s, d, g in ev_raw]
    samples = [(t, g, float(v)) for t, g, v in sm_raw]
    evf = pl.DataFrame({"start_ns": [e[0] for e in events], "end_ns": [e[1] for e in events],
                        "gpu": [e[2] for e in events]}, schema={"start_ns": pl.Int64, "end_ns": pl.Int64,
                                                                "gpu": pl.Int64})
    smf = pl.DataFrame({"ts": [s[0] for s in samples], "gpu": [s[1] for s in samples],
                        "watts": [s[2] for s in samples], "k": list(range(len(samples)))},
                       schema={"ts": pl.Int64, "gpu": pl.Int64, "watts": pl.Float64, "k": pl.Int64})
    got = pt.join_samples(evf, smf, time="ts", by="gpu", tolerance=tol,
                          agg=[pl.col("watts").mean().alias("mean_w")], time_weighted=["watts"])
    ref = ref_samples(events, samples, tol)
    assert got["k"].to_list() == [r[0] for r in ref]
    assert got["n_samples"].to_list() == [r[2] for r in ref]
    for a, b in zip(got["mean_w"].to_list(), [r[1] for r in ref], strict=True):
        assert (a is None and b is None) or a == pytest.approx(b)
    for a, b in zip(got["watts_tw_mean"].to_list(), [r[3] for r in ref], strict=True):
        assert (a is None and b is None) or a == pytest.approx(b)
    assert got.columns[:3] == ["start_ns", "end_ns", "gpu"]
    assert got.height == len(events)


def test_mean_power_over_kernels_of_a_real_two_rank_trace() -> None:
    """The bundled synthetic telemetry joined to the kernels of the HTA pair (GPU 0 and 1)."""
    tr = pt.load([str(p) for p in PAIR])
    kernels = tr.with_utc(tr.events.filter(pl.col("cat") == "kernel")).select(
        "rank", "event_id", "device", "name", "start_ns", "end_ns", "start_utc", "end_utc")
    samples = pl.read_parquet(TELEMETRY)
    got = pt.join_samples(kernels, samples, time="time", by={"device": "gpu"}, tolerance=dt.timedelta(milliseconds=20),
                          agg=[pl.col("power_w").max().alias("max_power_w")], time_weighted=["power_w"])
    assert got.height == kernels.height
    # reference: plain Python per kernel, on epoch-ns integers
    rows = samples.with_columns(pl.col("time").cast(pl.Int64)).sort("time")
    series = {g: (grp["time"].to_list(), grp["power_w"].to_list())
              for (g,), grp in rows.group_by("gpu", maintain_order=True)}
    abs_k = kernels.select(pl.col("device"), pl.col("start_utc").cast(pl.Int64), pl.col("end_utc").cast(pl.Int64))
    n_inside = 0
    for (dev, s, e), out in zip(abs_k.rows(), got.iter_rows(named=True), strict=True):
        times, power = series[dev]
        k = bisect.bisect_right(times, s) - 1
        assert k >= 0 and s - times[k] <= 20_000_000
        assert out["power_w"] == power[k]
        assert out["time"].timestamp() == pytest.approx(times[k] / 1e9)
        lo, hi = bisect.bisect_left(times, s), bisect.bisect_left(times, e)
        assert out["n_samples"] == hi - lo
        n_inside += hi > lo
        assert out["max_power_w"] == (max(power[lo:hi]) if hi > lo else None)
        # time-weighted: the pieces between sample times
        cuts = [s, *times[lo:hi], e]
        vals = [power[k], *power[lo:hi]]
        expect = sum(v * (b - a) for v, a, b in zip(vals, cuts[:-1], cuts[1:], strict=True)) / (e - s) \
            if e > s else power[k]
        assert out["power_w_tw_mean"] == pytest.approx(expect, rel=1e-12)
    assert n_inside > 10  # long NCCL kernels span several 10 ms samples
    assert "gpu" not in got.columns and got.columns[-2:] == ["n_samples", "power_w_tw_mean"]


def test_join_samples_errors_and_hints() -> None:
    tr = pt.load([str(p) for p in PAIR])
    samples = pl.read_parquet(TELEMETRY)
    with pytest.raises(ProftabError, match="with_utc"):
        pt.join_samples(tr.events, samples, time="time")
    with pytest.raises(ProftabError, match="no time column 'when'"):
        pt.join_samples(tr.events, samples, time="when")
    naive = samples.with_columns(pl.col("time").dt.replace_time_zone(None))
    with pytest.raises(ProftabError, match="replace_time_zone"):
        pt.join_samples(tr.with_utc(), naive, time="time")
    as_ns = samples.with_columns(pl.col("time").cast(pl.Int64))
    h100 = pt.load(str(H100))  # relative start_ns vs epoch-ns samples: a warning, not silence
    with pytest.warns(ProftabWarning, match="same time axis"):
        pt.join_samples(h100.events, as_ns, time="time")
    with pytest.raises(ProftabError, match="tolerance"):
        pt.join_samples(tr.with_utc(), samples, time="time", tolerance=-1)
    lazy = pt.join_samples(tr.with_utc().lazy(), samples.lazy(), time="time", by={"device": "gpu"})
    assert isinstance(lazy, pl.LazyFrame)
    clash = pt.join_samples(pl.DataFrame({"start_ns": [5], "end_ns": [6], "power_w": [1.0]}),
                            pl.DataFrame({"t": [0], "power_w": [2.0]}), time="t")
    assert clash.columns == ["start_ns", "end_ns", "power_w", "t", "power_w_sample"]


def test_telemetry_sample_is_labelled_synthetic() -> None:
    md = pl.read_parquet_metadata(TELEMETRY)
    assert md["synthetic"] == "true" and "SYNTHETIC" in md["description"]
    df = pl.read_parquet(TELEMETRY)
    assert df.schema["time"] == pl.Datetime("ns", "UTC")
    steps = df.filter(pl.col("gpu") == 0)["time"].diff().drop_nulls().unique().to_list()
    assert steps == [dt.timedelta(milliseconds=10)]
    tr = pt.load([str(p) for p in PAIR]).with_utc()
    assert df["time"].min() <= tr["start_utc"].min() and df["time"].max() >= tr["end_utc"].max()
