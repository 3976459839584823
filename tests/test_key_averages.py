"""key_averages / table parity with torch 2.13, and never-negative self time on overlapping traces."""

from __future__ import annotations

import json
import math
from decimal import Decimal
from typing import TYPE_CHECKING

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import proftab as pt
from proftab import schema
from proftab.intervals import union_ns
from tests.builders import annotation, event, load_events, op, write_events
from tests.conftest import BUNDLED, SHARED_TORCH213, TORCH213, needs_shared, shared_public_traces

if TYPE_CHECKING:
    from pathlib import Path

US = 1000


def torch_rows(case_dir: Path, kind: str = "key_averages") -> pl.DataFrame:
    rows = json.loads((case_dir / f"{kind}.json").read_text())
    return pl.DataFrame({
        "name": [r["key"] for r in rows],
        "calls": [r["count"] for r in rows],
        "self_cpu_us": [r["self_cpu_time_total"] for r in rows],
        "cpu_total_us": [r["cpu_time_total"] for r in rows],
        "cpu_mem": [r.get("cpu_memory_usage", 0) for r in rows],
        "self_cpu_mem": [r.get("self_cpu_memory_usage", 0) for r in rows],
        "input_shapes": [str(r["input_shapes"]) if "input_shapes" in r else "" for r in rows],
    })


def compare(case_dir: Path, *, by_shape: bool = False) -> pl.DataFrame:
    """Join proftab's and torch's rows; returns the rows that differ beyond float noise."""
    tr = pt.load(case_dir / "trace.json.gz")
    kind = "key_averages_by_shape" if by_shape else "key_averages"
    want = torch_rows(case_dir, kind)
    got = tr.key_averages(group_by_input_shape=by_shape)
    keys = ["name", "input_shapes"]
    assert got.height == want.height, (got.height, want.height)
    assert set(zip(*got.select(keys).to_dict(as_series=False).values(), strict=True)) == set(
        zip(*want.select(keys).to_dict(as_series=False).values(), strict=True))
    j = got.join(want, on=keys, how="inner")
    return j.filter(
        (pl.col("calls") != pl.col("calls_right"))
        | ((pl.col("self_cpu_ns") - pl.col("self_cpu_us") * US).abs() > 2)
        | ((pl.col("cpu_total_ns") - pl.col("cpu_total_us") * US).abs() > 2)
        | (pl.col("cpu_mem_bytes") != pl.col("cpu_mem"))
        | (pl.col("self_cpu_mem_bytes") != pl.col("self_cpu_mem"))
    )


@pytest.mark.parametrize("by_shape", [False, True])
def test_train_cnn_key_averages_equals_torch(by_shape: bool) -> None:
    """train_cnn nests properly: every row equals torch's (calls exact, times to float noise)."""
    bad = compare(TORCH213 / "train_cnn", by_shape=by_shape)
    assert bad.is_empty(), bad


def torch_async_names(case_dir: Path) -> set[str]:
    fe = pl.read_parquet(case_dir / "function_events.parquet")
    return set(fe.filter(pl.col("is_async"))["name"].to_list())


def overlap_names(tr: pt.Trace) -> set[str]:
    """Names whose numbers torch computes differently because events overlap without nesting."""
    an = tr.anomalies.filter(pl.col("kind") == "overrun")
    names = set(an["name"].to_list()) | set(an["parent_name"].to_list())
    nested = tr.nested
    # torch re-parents an overrunning event to the nearest ancestor that contains it
    parents = an.select("rank", "parent_id")
    for _ in range(64):
        up = nested.join(parents, left_on=["rank", "event_id"], right_on=["rank", "parent_id"], how="semi")
        if up.is_empty():
            break
        names |= set(up["name"].to_list())
        parents = up.select("rank", "parent_id").drop_nulls()
    return {"ProfilerStep*" if n.startswith("ProfilerStep#") else n for n in names}


@pytest.mark.parametrize("case", ["multithread", "multithread_default_config", "misc_async_python_export",
                                  "compile_jit"])
def test_other_cases_differ_only_where_torch_uses_information_the_json_lacks(case: str) -> None:
    """Rows differ only for torch's async events (end thread not in the JSON) and for the
    ancestors of partially overlapping events (torch re-parents them and subtracts twice)."""
    case_dir = TORCH213 / case
    tr = pt.load(case_dir / "trace.json.gz")
    bad = compare(case_dir)
    explained = torch_async_names(case_dir) | overlap_names(tr)
    # an async event's time is self time of its parent in torch: the parent differs too
    asyncs = tr.nested.filter(pl.col("name").is_in(list(torch_async_names(case_dir))))
    explained |= set(tr.nested.join(asyncs.select("rank", pl.col("parent_id").alias("event_id")),
                                    on=["rank", "event_id"], how="semi")["name"].to_list())
    unexplained = set(bad["name"].to_list()) - explained
    assert not unexplained, bad.filter(pl.col("name").is_in(list(unexplained)))
    assert bad.height <= 12


# ----------------------------------------------------------------------------- table text


def tie_line_ok(want: str, got: str) -> bool:
    """Lines that differ only in a time cell whose exact value sits on a rounding tie."""
    w, g = want.split(), got.split()
    if len(w) != len(g):
        return False
    diffs = [(a, b) for a, b in zip(w, g, strict=True) if a != b]
    if len(diffs) != 1:
        return False
    a, b = diffs[0]
    unit = next((u for u in ("ms", "us", "s") if a.endswith(u)), None)
    if unit is None or not b.endswith(unit):
        return False
    x, y = Decimal(a[: -len(unit)]), Decimal(b[: -len(unit)])
    return abs(x - y) == Decimal("0.001")


@pytest.mark.parametrize("kind", ["key_averages", "key_averages_by_shape"])
def test_train_cnn_table_equals_torch_text(kind: str) -> None:
    tr = pt.load(TORCH213 / "train_cnn" / "trace.json.gz")
    got = tr.table(row_limit=-1, group_by_input_shape=kind.endswith("shape")).splitlines()
    want = (TORCH213 / "train_cnn" / f"{kind}.txt").read_text().splitlines()
    assert want[-1] == ""  # the file holds print()'s extra newline
    want = want[:-1]
    assert len(got) == len(want)
    differing = [(w, g) for w, g in zip(want, got, strict=True) if w != g]
    # every difference is a "CPU time avg" whose exact value total/calls is a half-µs-digit tie
    assert all(tie_line_ok(w, g) for w, g in differing), differing
    assert len(differing) <= (4 if kind == "key_averages" else 19)


def test_table_footer_and_header_exact() -> None:
    tr = pt.load(TORCH213 / "train_cnn" / "trace.json.gz")
    text = tr.table(row_limit=3, header="TRAIN")
    lines = text.splitlines()
    assert lines[1] == "TRAIN" and set(lines[0]) == {"="}
    assert lines[-1] == "Self CPU time total: 35.291ms"


# ----------------------------------------------------------------------------- never negative


def check_conservation(tr: pt.Trace) -> None:
    nested = tr.nested
    assert nested["self_ns"].min() >= 0
    per_track = nested.group_by(schema.TRACK_KEYS).agg(pl.col("self_ns").sum())
    unions = union_ns(nested.with_columns(end_ns=pl.max_horizontal("start_ns", "end_ns")), by=schema.TRACK_KEYS)
    j = per_track.join(unions, on=schema.TRACK_KEYS, how="full", nulls_equal=True, coalesce=True)
    union_col = next(c for c in unions.columns if c not in schema.TRACK_KEYS)
    assert (j["self_ns"] == j[union_col]).all()
    ka = tr.key_averages()
    assert ka["self_cpu_ns"].min() >= 0 and ka["self_device_ns"].min() >= 0


@pytest.mark.parametrize("case", ["compile_jit", "multithread_default_config", "misc_async_python_export"])
def test_never_negative_and_conserved_bundled(case: str) -> None:
    check_conservation(pt.load(TORCH213 / case / "trace.json.gz"))


@needs_shared
def test_llama_has_no_negative_self_where_torch_does() -> None:
    case = SHARED_TORCH213 / "llama_generate_shapes_stack"
    want = torch_rows(case)
    neg = want.filter(pl.col("self_cpu_us") < 0)
    assert "case_llama.py(70): <module>" in neg["name"].to_list()
    tr = pt.load(case / "trace.json.gz")
    check_conservation(tr)
    ka = tr.key_averages()
    assert ka.filter(pl.col("name") == "case_llama.py(70): <module>")["self_cpu_ns"].item() > 0
    assert tr.anomalies.filter(pl.col("kind") == "overrun").height > 0


@pytest.mark.slow
@needs_shared
@pytest.mark.parametrize("path", shared_public_traces(), ids=lambda p: p.name[:50])
def test_never_negative_on_public_traces(path: Path) -> None:
    check_conservation(pt.load(path))


# ----------------------------------------------------------------------------- torch <= 2.3 truncation


def torch_stack_self(ev: pl.DataFrame) -> dict[int, int]:
    """torch's `_populate_cpu_children` + `dur - Σ children dur`, restated (ids -> self)."""
    out: dict[int, int] = {}
    for _, grp in ev.group_by("tid"):
        rows = sorted(grp.select("event_id", "start_ns", "end_ns").rows(), key=lambda r: (r[1], -r[2]))
        stack: list[tuple[int, int, int]] = []
        children: dict[int, int] = {}
        for eid, s, e in rows:
            while stack:
                pid_, ps, pe = stack[-1]
                if s >= pe or e > pe:
                    stack.pop()
                else:
                    children[pid_] = children.get(pid_, 0) + (e - s)
                    break
            stack.append((eid, s, e))
        for eid, s, e in rows:
            out[eid] = (e - s) - children.get(eid, 0)
    return out


def truncated_trace(tmp_path: Path, case_dir: Path) -> Path:
    """The same events as torch <= 2.3 wrote them: ts = floor(start µs), dur = floor(dur µs)."""
    tr = pt.load(case_dir / "trace.json.gz")
    base = tr.meta["base_time_ns"]
    ev = tr.events.filter(pl.col("cat").cast(pl.String).is_in(["cpu_op", "user_annotation"]))
    events = [
        event(n, (s + base) // US, d // US, cat=c, pid=p, tid=t)
        for c, n, p, t, s, d in ev.select(pl.col("cat").cast(pl.String), "name", "pid", "tid", "start_ns",
                                          "dur_ns").iter_rows()
    ]
    return write_events(tmp_path / "truncated.json.gz", events)


def test_truncated_times_torch_goes_negative_proftab_does_not(tmp_path: Path) -> None:
    exact = pt.load(TORCH213 / "train_cnn" / "trace.json.gz")
    trunc = pt.load(truncated_trace(tmp_path, TORCH213 / "train_cnn"))
    assert trunc.meta["time_resolution_ns"] == 1000
    # the seed: torch's rule on these times gives negative self time
    torch_self = torch_stack_self(trunc.events)
    assert min(torch_self.values()) < 0
    # proftab: never negative, overruns within the resolution are not anomalies
    check_conservation(trunc)
    assert trunc.anomalies.filter(pl.col("kind") == "overrun").is_empty()
    assert trunc.nested.filter(pl.col("overrun_ns") > 0).height > 0
    # per-name self time: each event's truncated self differs from the exact one by less than
    # (1 + its children) µs, which is the most µs data can tell; names whose calls are long
    # enough for that bound to be under 1 % are within 1 % of the exact trace
    nested = exact.nested.filter(pl.col("cat").cast(pl.String).is_in(["cpu_op", "user_annotation"]))
    kids = nested.group_by("parent_id").len().rename({"parent_id": "event_id", "len": "kids"})
    budget = (nested.join(kids, on="event_id", how="left")
              .with_columns(name=pl.when(pl.col("name").str.starts_with("ProfilerStep#"))
                            .then(pl.lit("ProfilerStep*")).otherwise(pl.col("name")))
              .group_by("name").agg(((pl.col("kids").fill_null(0) + 1) * US).sum().alias("budget")))
    a = exact.key_averages().filter(pl.col("device_type") == "CPU").select("name", "self_cpu_ns")
    b = trunc.key_averages().select("name", pl.col("self_cpu_ns").alias("t"))
    j = a.join(b, on="name").join(budget, on="name").with_columns(err=(pl.col("t") - pl.col("self_cpu_ns")).abs())
    assert (j["err"] <= j["budget"]).all(), j.filter(pl.col("err") > pl.col("budget"))
    tight = j.filter(pl.col("budget") <= pl.col("self_cpu_ns") / 100)
    assert tight.height >= 4
    assert (tight["err"] <= tight["self_cpu_ns"] / 100).all(), tight


def test_seed_mechanism_synthetic(tmp_path: Path) -> None:
    """grandparent ⊃ parent ⊃ child in exact ns; written as torch <= 2.3 did (ts = ⌊start⌋,
    dur = ⌊dur⌋ µs) the child ends 1 µs after its parent: torch re-parents it to the
    grandparent, which subtracts both and goes negative (pytorch#101861)."""
    ns = [("gp", 100_500, 206_000), ("p", 100_900, 205_300), ("c", 150_000, 205_100)]
    tr = load_events(tmp_path, [op(n, a // US, (b - a) // US) for n, a, b in ns])
    torch_self = torch_stack_self(tr.events)
    assert torch_self == {0: -54_000, 1: 104_000, 2: 55_000}
    nested = tr.nested.sort("event_id")
    assert nested["self_ns"].to_list() == [0, 50_000, 55_000]
    assert nested["parent_id"].to_list() == [None, 0, 1]  # the child stays under its parent
    assert nested["overrun_ns"].to_list() == [0, 0, 1000]  # flagged, within the 1 µs resolution
    assert tr.anomalies.is_empty()


def test_filtered_names_time_goes_to_parent(tmp_path: Path) -> None:
    events = [
        annotation("region", 0, 100),
        op("profiler::_record_function_exit", 90, 5),
        op("aten::linear", 10, 50),
        op("aten::linear", 12, 40),
        op("aten::addmm", 15, 30),
        annotation("ProfilerStep#3", 200, 9),
        annotation("ProfilerStep#4", 210, 9),
    ]
    ka = load_events(tmp_path, events).key_averages()
    rows = {r["name"]: r for r in ka.iter_rows(named=True)}
    assert set(rows) == {"region", "aten::linear", "aten::addmm", "ProfilerStep*"}
    assert rows["region"]["self_cpu_ns"] == 50_000  # 100 - 50 (linear); the filtered 5 µs stay its own
    # the inner aten::linear is the only child of an aten::linear: folded, one call, self added
    assert rows["aten::linear"]["calls"] == 1
    assert rows["aten::linear"]["self_cpu_ns"] == 20_000
    assert rows["aten::linear"]["cpu_total_ns"] == 50_000
    assert rows["ProfilerStep*"]["calls"] == 2
    assert list(rows) == ["region", "aten::linear", "aten::addmm", "ProfilerStep*"]


def test_extras_stats_steps_top_level() -> None:
    tr = pt.load(BUNDLED / "train_cnn.pt.trace.json.gz")
    ka = tr.key_averages()
    r = ka.filter(pl.col("name") == "aten::empty").row(0, named=True)
    assert r["min_ns"] <= r["p50_ns"] <= r["p95_ns"] <= r["max_ns"]
    assert math.isclose(ka["self_cpu_share"].sum(), 1.0)
    steps = tr.key_averages(by_step=True)
    assert sorted(steps["step"].drop_nulls().unique().to_list()) == [2, 3, 4, 5]
    per_name = steps.group_by("name").agg(pl.col("calls").sum(), pl.col("self_cpu_ns").sum())
    j = ka.select("name", "calls", "self_cpu_ns").join(per_name, on="name")
    assert (j["calls"] == j["calls_right"]).all() and (j["self_cpu_ns"] == j["self_cpu_ns_right"]).all()
    top = tr.key_averages(top_level_only=True)
    assert set(top["name"]) == {"ProfilerStep*"}


def test_group_by_stack_uses_enclosing_python_frames() -> None:
    """group_by_stack_n keys rows by the innermost n enclosing python_function frames
    (torch fills stacks only with verbose=True); checked against a walk up the tree."""
    tr = pt.load(BUNDLED / "h100_bert_small.pt.trace.json.gz")
    ka = tr.key_averages(group_by_stack_n=3)
    plain = tr.key_averages()
    # regrouping by stack only splits rows: calls and self time add up to the plain rows
    per_name = ka.group_by("name", "device_type").agg(pl.col("calls").sum(), pl.col("self_cpu_ns").sum())
    j = plain.select("name", "device_type", "calls", "self_cpu_ns").join(per_name, on=["name", "device_type"])
    assert j.height == plain.height
    assert (j["calls"] == j["calls_right"]).all() and (j["self_cpu_ns"] == j["self_cpu_ns_right"]).all()
    # reference: the first occurrence of each aten op, walking parent links to python frames
    from proftab.torch.aggregate import host_tree

    tree, _ = host_tree(tr.nested)
    rows = tree.select("name", pl.col("cat").cast(pl.String), "kept_parent", "_merged").rows()

    def frames(i: int) -> tuple[str, ...]:
        out, p = [], rows[i][2]
        while p >= 0 and len(out) < 3:
            if rows[p][1] == "python_function":
                out.append(rows[p][0])
            p = rows[p][2]
        return tuple(out)

    want = {(name, frames(i)) for i, (name, cat, _p, merged) in enumerate(rows) if cat == "cpu_op" and not merged}
    ops = ka.filter(pl.col("name").is_in([n for n, _ in want]) & (pl.col("device_type") == "CPU"))
    got = {(name, tuple(stack)) for name, stack in ops.select("name", "stack").iter_rows()}
    assert got == want
    assert len(want) > len({n for n, _ in want})  # some ops are reached through several stacks


def _first_occurrence_by_full_sort(rows: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    """Reference: sort every row by (start, -end, rank, event_id); per group its first row's position."""
    order = rows.with_row_index("_row").sort(["start_ns", "end_ns", "rank", "event_id"],
                                              descending=[False, True, False, False])
    ranked = order.with_row_index("_pos")
    return ranked.group_by(keys).agg(pl.col("_pos").min(), pl.col("_row").get(pl.col("_pos").arg_min()))


_EPOCH_NS = 1_764_547_200_000_000_000  # epoch-ns timestamps, as in real traces


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(-1, 4), st.booleans(), st.integers(0, 6), st.integers(0, 4),
                          st.integers(0, 1), st.none() | st.integers(0, 2)), min_size=1, max_size=40),
       st.booleans())
def test_first_occurrence_order_equals_a_full_sort(rows: list[tuple[int, bool, int, int, int, int | None]],
                                                   by_step: bool) -> None:
    """Sorting only each group's earliest events gives every group the same first event and the
    same relative order as sorting all events (ties on start broken by -end, rank, event_id), for
    the default keys (one integer code) and for others (a nullable step key: the window path)."""
    from proftab.torch.grouping import first_occurrence_order

    host = pl.DataFrame(
        {"_code": [r[0] for r in rows], "is_user_annotation": [r[1] for r in rows],
         "start_ns": [_EPOCH_NS + r[2] for r in rows], "end_ns": [_EPOCH_NS + r[2] + r[3] for r in rows],
         "rank": [r[4] for r in rows], "event_id": list(range(len(rows))), "step": [r[5] for r in rows]},
        schema={"_code": pl.Int32, "is_user_annotation": pl.Boolean, "start_ns": pl.Int64, "end_ns": pl.Int64,
                "rank": pl.Int32, "event_id": pl.Int64, "step": pl.Int64},
    )
    host = host.with_columns(_group=(pl.col("_code") + 1) * 2 + pl.col("is_user_annotation").cast(pl.Int32))
    dev = host.head(0).rename({"_code": "name"}).with_columns(pl.col("name").cast(pl.String))
    # the default keys as key_averages passes them (one non-negative integer), or a windowed set
    keys = ["step", "_code", "is_user_annotation"] if by_step else ["_group"]
    got, _ = first_occurrence_order(host, keys, dev, ["name", "is_user_annotation"])
    got = got.with_row_index("_row").group_by(keys).agg(pl.col("_order").min(),
                                                        pl.col("_row").get(pl.col("_order").arg_min()))
    want = _first_occurrence_by_full_sort(host, keys)
    got_sorted = got.sort("_order").select(*keys, "_row")
    want_sorted = want.sort("_pos").select(*keys, "_row")
    assert got_sorted.equals(want_sorted)


def test_by_step_rows_follow_first_occurrence() -> None:
    """With `by_step`, each (step, name) group has its own first event: an op's rows come in step
    order (step N's first call precedes step N+1's), not in the order of an arbitrary tie."""
    ka = pt.load(BUNDLED / "train_cnn.pt.trace.json.gz").key_averages(by_step=True)
    steps = ka.filter(pl.col("step").is_not_null()).group_by("name", maintain_order=True).agg("step")
    multi = steps.filter(pl.col("step").list.len() > 1)
    assert len(multi) > 10
    assert all(s == sorted(s) for s in multi["step"].to_list())
