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
