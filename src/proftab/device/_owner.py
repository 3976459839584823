"""Launch -> op: the host op that owns each launch (rules 2 and 3), and an unlaunched activity's (rule 4).

`proftab.device._rules` states the rules. A launch is placed by its `External id` where the
rank's External ids name ops (`external_id_reliability`), guarded by "same thread, the launch
starts inside the op"; otherwise by the innermost op (else user annotation) open at its start on
its thread. A key shared by many launches and ops is bounded, never multiplied (`_ext_candidates`).
"""

from __future__ import annotations

import numpy as np
import polars as pl

from proftab import kinds, schema
from proftab.device._rules import OP_CATEGORIES, REGION_CATEGORIES
from proftab.intervals import nest
from proftab.intervals.tree import nearest_ancestor, row_positions

__all__ = ["MAX_PAIRS_PER_KEY", "device_external_owners", "external_id_reliability", "launch_owners",
           "ops_by_external_id"]

_TRACK = schema.TRACK_KEYS


def _cat() -> pl.Expr:
    return pl.col("cat").cast(pl.String)


def external_id_reliability(launches: pl.DataFrame, acts: pl.DataFrame) -> pl.DataFrame:
    """Per rank: `_bogus` share of launches and activities whose External id is their own correlation."""
    both = pl.concat([
        launches.select("rank", pl.col("launch_external_id").alias("_x"), "correlation"),
        acts.select("rank", pl.col("external_id").alias("_x"), "correlation"),
    ])
    return both.filter(pl.col("_x").is_not_null()).group_by("rank").agg(
        (pl.col("_x") == pl.col("correlation")).fill_null(False).mean().alias("_bogus"),
        pl.len().alias("_with_ext"),
    )


#: largest (launches x ops) product of one External id joined pair by pair; a bigger key is ambiguous
MAX_PAIRS_PER_KEY = 64


def _ext_candidates(left: pl.DataFrame, ops: pl.DataFrame, *, by_track: bool = True) -> pl.DataFrame:
    """(launch, op) pairs sharing `rank` and External id, bounded.

    A key held by few launches and ops (the normal case: one op, its launches) is joined pair by
    pair. A key shared by many (a hostile or damaged trace: 10,000 ops and launches with one
    External id would make 10^8 pairs) is ambiguous: each launch is paired only with the op of
    that key that started last at or before it (on the launch's thread when `by_track`), so the
    pairs are at most one per launch.
    """
    key_l, key_r = ["rank", "launch_external_id"], ["rank", "_x"]
    sizes = left.group_by(key_l).len().join(ops.group_by(key_r).len(), left_on=key_l, right_on=key_r)
    heavy = sizes.filter(pl.col("len").cast(pl.Int64) * pl.col("len_right").cast(pl.Int64) > MAX_PAIRS_PER_KEY)
    if heavy.is_empty():
        return left.join(ops, left_on=key_l, right_on=key_r, how="inner")
    heavy = heavy.select(key_l)
    light = left.join(heavy, on=key_l, how="anti").join(ops, left_on=key_l, right_on=key_r, how="inner")
    by = key_l + ([f"_l_{k}" for k in _TRACK[1:]] if by_track else [])
    by_r = key_r + ([f"_o_{k}" for k in _TRACK[1:]] if by_track else [])
    hl = left.join(heavy, on=key_l, how="semi").sort("launch_start_ns")
    hr = ops.join(heavy.rename({"launch_external_id": "_x"}), on=key_r, how="semi").sort("_os")
    if by_track:  # null track parts (pid_text/tid_text) match each other, as eq_missing does
        fill = {c: pl.col(c).fill_null(-1 if hl.schema[c].is_integer() else "") for c in by[2:]}
        hl = hl.with_columns(**fill)
        hr = hr.with_columns(**{r: pl.col(r).fill_null(-1 if hr.schema[r].is_integer() else "")
                                for r in by_r[2:]})
    near = hl.join_asof(hr, left_on="launch_start_ns", right_on="_os", by_left=by, by_right=by_r,
                        strategy="backward", check_sortedness=False).filter(pl.col("op_id").is_not_null())
    near = near.with_columns(pl.col(a).alias(b) for a, b in zip(by[2:], by_r[2:], strict=True) if b not in near.columns)
    return pl.concat([light, near.select(light.columns)], how="vertical_relaxed")


def ops_by_external_id(ev: pl.DataFrame) -> pl.DataFrame:
    """The ops (`OP_CATEGORIES`) with an External id: `rank`, `_x` (the id), `op_id`, `_os` / `_oe` (start,
    end) and the op's track as ``_o_<key>``."""
    return ev.filter(kinds.in_categories(OP_CATEGORIES) & pl.col("external_id").is_not_null()).select(
        "rank", pl.col("external_id").alias("_x"), pl.col("event_id").alias("op_id"),
        pl.col("start_ns").alias("_os"), pl.col("end_ns").alias("_oe"),
        *[pl.col(k).alias(f"_o_{k}") for k in _TRACK[1:]])


def launch_owners(ev: pl.DataFrame, used: pl.DataFrame, reliable: pl.DataFrame,
                  ops_by_ext: pl.DataFrame) -> pl.DataFrame:
    """The owner of each launch in `used`: `rank`, `launch_id`, `op_id`, `link` (String).

    Rule 2 by External id on the ranks of `reliable` (guarded: same thread, the launch starts
    inside the op; several ops pass: the lowest id), rule 3 by containment for the rest.
    """
    cand = _ext_candidates(used.join(reliable, on="rank", how="semi"), ops_by_ext)
    same = pl.lit(True)
    for k in _TRACK[1:]:
        same = same & pl.col(f"_l_{k}").eq_missing(pl.col(f"_o_{k}"))
    guard = same & (pl.col("_os") <= pl.col("launch_start_ns")) & (pl.col("launch_start_ns") <= pl.col("_oe"))
    by_ext = cand.filter(guard).sort("rank", "launch_id", "op_id").unique(
        subset=["rank", "launch_id"], keep="first").select("rank", "launch_id", "op_id",
                                                           pl.lit("external_id").alias("link"))
    rest = used.join(by_ext, on=["rank", "launch_id"], how="anti")
    return pl.concat([by_ext, _containment(ev, rest)], how="vertical_relaxed")


def device_external_owners(acts: pl.DataFrame, reliable: pl.DataFrame, ops_by_ext: pl.DataFrame) -> pl.DataFrame:
    """Rule 4: an activity without a launch belongs to the op its own External id names (on the ranks of
    `reliable`; the op starts no later than the activity; several: the lowest id): `rank`, `event_id`, `_dop`."""
    no_launch = acts.filter(pl.col("launch_id").is_null() & pl.col("external_id").is_not_null()).select(
        "rank", "event_id", "external_id", "start_ns")
    return (
        _ext_candidates(no_launch.join(reliable, on="rank", how="semi").rename({"external_id": "launch_external_id",
                                                                                 "start_ns": "launch_start_ns"}),
                        ops_by_ext.select("rank", "_x", "op_id", "_os"), by_track=False)
        .rename({"launch_external_id": "external_id", "launch_start_ns": "start_ns"})
        .filter(pl.col("_os") <= pl.col("start_ns"))
        .sort("rank", "event_id", "op_id").unique(subset=["rank", "event_id"], keep="first")
        .select("rank", "event_id", pl.col("op_id").alias("_dop"))
    )


def _containment(ev: pl.DataFrame, rest: pl.DataFrame) -> pl.DataFrame:
    """Owner of each launch in `rest` by the innermost enclosing op (else user annotation)."""
    empty = pl.DataFrame(schema={"rank": pl.Int32, "launch_id": pl.Int64, "op_id": pl.Int64, "link": pl.String})
    if rest.is_empty():
        return empty
    tracks = rest.select("rank", *[pl.col(f"_l_{k}").alias(k) for k in _TRACK[1:]]).unique()
    hosts = ev.filter(kinds.in_categories(OP_CATEGORIES | REGION_CATEGORIES)).join(
        tracks, on=_TRACK, how="semi", nulls_equal=True)
    frame = pl.concat([
        hosts.select("event_id", "start_ns", pl.max_horizontal("start_ns", "end_ns").alias("end_ns"), *_TRACK,
                     _cat().is_in(list(OP_CATEGORIES)).alias("_op"), pl.lit(False).alias("_launch")),
        rest.select(pl.col("launch_id").alias("event_id"), pl.col("launch_start_ns").alias("start_ns"),
                    pl.col("launch_start_ns").alias("end_ns"), "rank",
                    *[pl.col(f"_l_{k}").alias(k) for k in _TRACK[1:]],
                    pl.lit(False).alias("_op"), pl.lit(True).alias("_launch")),
    ], how="vertical_relaxed")
    # a launch is placed as a zero-length point at its start: its owner is the op open then
    nested = nest(frame, by=_TRACK)
    rank = nested["rank"].to_numpy()
    ids = nested["event_id"].to_numpy()
    pid = nested["parent_id"].fill_null(-1).to_numpy()
    parent = row_positions(rank, ids, rank, pid)
    is_op = nested["_op"].to_numpy()
    is_region = ~is_op & ~nested["_launch"].to_numpy()
    start = np.flatnonzero(nested["_launch"].to_numpy())
    op = nearest_ancestor(parent, start, is_op)
    region = nearest_ancestor(parent, start, is_region)
    owner = np.where(op >= 0, op, region)
    found = owner >= 0
    return pl.DataFrame({
        "rank": rank[start][found],
        "launch_id": ids[start][found],
        "op_id": ids[owner[found]],
        "link": np.where(op[found] >= 0, "containment", "annotation"),
    }, schema={"rank": pl.Int32, "launch_id": pl.Int64, "op_id": pl.Int64, "link": pl.String})
