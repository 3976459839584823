"""pt.from_profiler: the same tables from a live torch profile as from its exported JSON."""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl
import pytest

import proftab as pt

if TYPE_CHECKING:
    from pathlib import Path

torch = pytest.importorskip("torch")


def workload() -> None:
    x = torch.randn(64, 64)
    with torch.profiler.record_function("block"):
        for _ in range(3):
            x = torch.relu(x @ x).clamp_max(1.0)
    x.sum().item()


@pytest.fixture(scope="module")
def prof() -> torch.profiler.profile:
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True,
                                profile_memory=True) as p:
        workload()
    return p


@pytest.fixture(scope="module")
def live(prof: torch.profiler.profile, tmp_path_factory: pytest.TempPathFactory) -> tuple[pt.Trace, Path]:
    path = tmp_path_factory.mktemp("live") / "trace.json"
    return pt.from_profiler(prof, json_path=path), path


def test_identical_rows_to_the_exported_json(live: tuple[pt.Trace, Path]) -> None:
    """Times from the profiler's memory, everything else from Kineto's JSON: rows identical."""
    live, path = live
    from_json = pt.load(path)
    assert live.events.equals(from_json.events)
    assert live.instants.equals(from_json.instants)
    assert live.key_averages().equals(from_json.key_averages())
    assert live.meta["live_exact_events"] >= len(live.events) - 1  # all but the profiler span


def test_times_are_the_profilers_raw_ns(prof: torch.profiler.profile, live: tuple[pt.Trace, Path]) -> None:
    live, _ = live
    base = live.meta["base_time_ns"]
    raw = {(e.name(), e.start_ns(), e.end_ns()) for e in prof.profiler.kineto_results.events()}
    ops = live.events.filter(pl.col("cat").cast(pl.String).is_in(["cpu_op", "user_annotation"]))
    got = {(n, s + base, e + base) for n, s, e in ops.select("name", "start_ns", "end_ns").iter_rows()}
    assert got <= raw and len(got) > 10


def test_second_export_is_a_clear_error(prof: torch.profiler.profile, live: tuple[pt.Trace, Path]) -> None:
    with pytest.raises(pt.ProftabError, match="already exported"):
        pt.from_profiler(prof)


def test_not_a_profiler() -> None:
    with pytest.raises(pt.ProftabError, match="stopped torch.profiler.profile"):
        pt.from_profiler(object())


def test_every_event_time_is_the_profilers_raw_ns(prof: torch.profiler.profile,
                                                  live: tuple[pt.Trace, Path]) -> None:
    """torch >= 2.4 writes exact ns, so from_profiler takes the JSON's times without walking the events."""
    live, _ = live
    assert live.files["time_resolution_ns"].to_list() == [1]
    base = live.meta["base_time_ns"]
    raw = pl.DataFrame(
        [(e.name(), e.correlation_id(), e.start_ns() - base, e.end_ns() - base)
         for e in prof.profiler.kineto_results.events()],
        schema={"name": pl.String, "external_id": pl.Int64, "start_ns": pl.Int64, "end_ns": pl.Int64}, orient="row")
    ops = live.events.filter(pl.col("external_id").is_not_null()).select("name", "external_id", "start_ns", "end_ns")
    joined = ops.join(raw.unique(["name", "external_id"], keep="none"), on=["name", "external_id"], suffix="_raw")
    assert joined.height >= 20
    differ = (pl.col("start_ns") != pl.col("start_ns_raw")) | (pl.col("end_ns") != pl.col("end_ns_raw"))
    assert joined.filter(differ).is_empty()


@pytest.mark.filterwarnings("ignore:Warning. Profiler clears events:UserWarning")  # torch's note on repeat > 1
def test_profiler_handler_writes_a_dataset_per_profile(tmp_path: Path) -> None:
    """on_trace_ready=pt.profiler_handler(dir): one proftab dataset per finished profile, equal to from_profiler."""
    out = tmp_path / "prof"
    sched = torch.profiler.schedule(wait=0, warmup=1, active=2, repeat=2)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], schedule=sched,
                                on_trace_ready=pt.profiler_handler(out, worker_name="w")) as p:
        for _ in range(6):
            workload()
            p.step()
    written = sorted(d.name for d in out.iterdir())
    assert written == ["w.0.pq", "w.1.pq"]
    for name in written:
        tr = pt.scan(out / name)
        ka = tr.key_averages()
        block = ka.filter(pl.col("name") == "block")
        assert block["calls"].item() == 2  # two active steps per profile, one `block` each
    assert not [p for p in out.rglob("*.json") if p.name != "_proftab.json"]  # only the datasets' manifests
