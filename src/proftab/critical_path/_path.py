"""Windows, the longest path of a graph as segments, the summary and the what-if replay."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
import polars as pl

from proftab import kinds
from proftab.critical_path._graph import BOUND_BY, KINDS, Graph
from proftab.exceptions import ProftabError, UsageError
from proftab.intervals.dag import UNREACHED, Preds, argmax_pred, earliest, walk_back, walk_back_many
from proftab.intervals.tree import depth_levels, tree_depth
from proftab.steps import named_windows, step_windows

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

__all__ = ["SEGMENT_SCHEMA", "Solution", "Step", "path_frame", "scaled_weights", "solve", "summary_frame",
           "what_if_frame", "windows"]

#: a step: ProfilerStep number, an annotation name, an explicit (start_ns, end_ns) window, or None (all steps)
Step = int | str | tuple[int, int] | None

SEGMENT_SCHEMA: dict[str, pl.DataType] = {
    "rank": pl.Int32(), "step": pl.Int64(), "seq": pl.Int64(), "event_id": pl.Int64(), "name": pl.String(),
    "module": pl.String(),
    "kind": pl.Enum(KINDS), "bound_by": pl.Enum(BOUND_BY), "via": pl.String(), "start_ns": pl.Int64(),
    "end_ns": pl.Int64(), "dur_ns": pl.Int64(),
}
_VIA = ["source", "order", "dependency"]
#: up to this many windows, each path is walked on its own window's nodes (`walk_back`)
_FEW_WINDOWS = 16
_OWN_TIME = np.isin(np.array(KINDS), ["cpu_op", "runtime", "sync_wait", "kernel", "memcpy", "memset"])


def windows(events: pl.DataFrame, step: Step = None, rank: int | None = None) -> pl.DataFrame:
    """The windows `step` names, per rank: ``rank``, ``step``, ``start_ns``, ``end_ns``, ``event_id``.

    `step` is a ``ProfilerStep#N`` number, a host annotation name (each occurrence is a window,
    ``step`` = its index), an explicit ``(start_ns, end_ns)``, or None: every ProfilerStep (the
    whole trace per rank when there is none: first event start to last event end, profiler spans
    left out).
    """
    ev = events if rank is None else events.filter(pl.col("rank") == rank)
    cols = ["rank", "step", "start_ns", "end_ns", "event_id"]
    if isinstance(step, tuple):
        if len(step) != 2 or not all(isinstance(t, int | np.integer) and -(2**63) <= int(t) < 2**63 for t in step) \
                or int(step[0]) > int(step[1]):
            msg = f"an explicit window is (start_ns, end_ns), two int64 ns with start <= end, not {step!r:.100}"
            raise UsageError(msg)
        ranks = ev.select(pl.col("rank").unique().sort())
        return ranks.with_columns(step=pl.lit(None, pl.Int64), start_ns=pl.lit(int(step[0]), pl.Int64),
                                  end_ns=pl.lit(int(step[1]), pl.Int64), event_id=pl.lit(None, pl.Int64))
    if isinstance(step, str):
        w = named_windows(ev, step)
        if w.is_empty():
            msg = f"no host annotation named {step!r}"
            raise ProftabError(msg)
        return w.select(cols)
    sw = step_windows(ev)
    if step is not None:
        sw = sw.filter(pl.col("step") == int(step))
        if sw.is_empty():
            msg = f"no ProfilerStep#{step} in the trace (steps: {sorted(set(step_windows(ev)['step'].to_list()))!r})"
            raise ProftabError(msg)
    if sw.is_empty():
        return (ev.filter(~kinds.is_profiler_span()).group_by("rank")
                .agg(pl.col("start_ns").min(), pl.col("end_ns").max()).sort("rank")
                .with_columns(step=pl.lit(None, pl.Int64), event_id=pl.lit(None, pl.Int64)).select(cols))
    return sw.select(cols)


def scaled_weights(g: Graph, scale: Mapping[str, float] | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The chain, source and cross weights of `g` with `scale` applied.

    Keys: ``"*"`` (every weight), a segment kind (``kernel``, ``launch_delay``, ``idle``...), a
    ``bound_by`` value, a device kernel category (``gemm``, ``communication``...), or a regular
    expression searched in event names. A name or category key scales the matching events' own time
    and, for host ops, the time of everything they contain. Factors of several keys multiply.
    """
    if not scale:
        return g.w, g.base, g.cw
    for key, f in scale.items():
        if isinstance(f, bool) or not isinstance(f, int | float | np.integer | np.floating) or not 0 <= f < np.inf:
            msg = f"scale factor for {key!r} must be a finite number >= 0, not {f!r}"
            raise UsageError(msg)
    fw = np.ones(len(g.w))
    fb = np.ones(len(g.base))
    fc = np.ones(len(g.cw))
    names = g.events["name"].fill_null("")
    cats = g.events["category"].fill_null("")
    depth = None
    for key, f in scale.items():
        if key == "*":
            fw, fb, fc = fw * f, fb * f, fc * f
            continue
        if key in KINDS:
            k = KINDS.index(key)
            fw *= np.where(g.w_kind == k, f, 1.0)
            fb *= np.where(g.w_kind == k, f, 1.0) if key == "idle" else 1.0
            fc *= np.where(g.c_kind == k, f, 1.0)
            continue
        if key in BOUND_BY:
            b = BOUND_BY.index(key)
            fw *= np.where(g.w_bound == b, f, 1.0)
            fc *= np.where(g.c_bound == b, f, 1.0)
            continue
        try:
            re.compile(key)
        except re.error as exc:
            msg = f"scale key {key!r} is not a kind, bound_by, category or valid regular expression: {exc}"
            raise ProftabError(msg) from None
        hit = ((cats == key) | names.str.contains(key)).to_numpy().copy()
        if depth is None:
            depth = tree_depth(g.parent_row)
        for level in depth_levels(depth)[1:]:  # an op's match covers its subtree: per depth level
            hit[level] |= hit[g.parent_row[level]]
        own = _OWN_TIME[g.w_kind] & (g.w_owner >= 0)
        fw *= np.where(own & hit[np.maximum(g.w_owner, 0)], f, 1.0)
    return (np.rint(g.w * fw).astype(np.int64), np.where(g.base > -(2**61), np.rint(g.base * fb), g.base)
            .astype(np.int64), np.rint(g.cw * fc).astype(np.int64))


class Solution(NamedTuple):
    """The longest paths of a graph's windows: node values, the incoming edge of each, the paths'
    nodes (each window's root to end, concatenated; window ``k``'s are
    ``nodes[path_off[k]:path_off[k+1]]``), their total length (ns), the rounds the solver took, and
    each window's length.
    """

    x: np.ndarray
    preds: Preds
    nodes: np.ndarray
    length: int
    rounds: int
    lengths: np.ndarray
    path_off: np.ndarray


def solve(g: Graph, scale: Mapping[str, float] | None = None) -> Solution:
    """The longest path of each window of `g` with `scale` applied (`scaled_weights`); a path ends
    at its window's latest node (the window event's end on a tie).

    All windows at once: `earliest` over the whole graph (O(n + e) per round; the rounds are those of
    the window that needs most), the end of each window by a grouped maximum and the paths by
    `walk_back_many` (O((n + p) log n)): no Python loop per window. Up to `_FEW_WINDOWS` windows are
    walked one by one on their own nodes instead (`walk_back`, O(n_k log n_k) each: the same result,
    with a smaller constant for a few large windows).
    """
    w, base, cw = scaled_weights(g, scale)
    k = g.n_windows
    if g.n_nodes == 0:
        z = np.zeros(0, np.int64)
        return Solution(z, Preds(z, z.astype(np.int8), z), z, 0, 0, np.zeros(k, np.int64), np.zeros(k + 1, np.int64))
    x, rounds = earliest(w, g.head, base, g.src, g.dst, cw, start=g.t)  # the observed times: a close guess
    counts = np.diff(g.node_off)
    node_win = np.repeat(np.arange(k), counts)
    has = counts > 0
    mx = np.full(k, UNREACHED, np.int64)
    np.maximum.at(mx, node_win, x)
    idx = np.arange(g.n_nodes)
    at_max = np.flatnonzero(x == mx[node_win])
    sink = np.full(k, -1, np.int64)
    first = np.unique(node_win[at_max], return_index=True)[1]
    sink[node_win[at_max[first]]] = idx[at_max[first]]
    pref = g.sink_pref
    ok = (pref >= 0) & (x[np.maximum(pref, 0)] == mx)
    sink = np.where(ok, pref, sink)
    preds = argmax_pred(x, w, g.head, base, g.src, g.dst, cw)
    if k <= _FEW_WINDOWS:  # each window's own nodes, walked alone: no pass over the other windows' nodes
        walks = []
        for a, b, snk, h in zip(g.node_off[:-1], g.node_off[1:], sink, has, strict=True):
            walks.append(walk_back(preds.node[a:b] - a, int(snk - a)) + a if h else np.zeros(0, np.int64))
        nodes = np.concatenate(walks)
        lens = np.array([len(x_) for x_ in walks], np.int64)
    else:
        nodes, off = walk_back_many(preds.node, sink[has], (g.node_off[:-1][has], g.node_off[1:][has]))
        lens = np.zeros(k, np.int64)
        lens[has] = np.diff(off)
    path_off = np.zeros(k + 1, np.int64)
    path_off[1:] = np.cumsum(lens)
    lengths = np.where(has, mx, 0)
    return Solution(x, preds, nodes, int(lengths.sum()), rounds, lengths, path_off)


def path_frame(g: Graph, scale: Mapping[str, float] | None = None, *, merge: bool = True) -> pl.DataFrame:
    """The longest path of each window of `g` as ordered segments (`SEGMENT_SCHEMA`); per window,
    Σ dur_ns = its path length.

    Consecutive segments of one op on one chain are merged when `merge`; chain segments of zero
    duration are left out, dependency edges are kept even at zero. One vectorized pass over all
    windows (O(p log p) for p path nodes).
    """
    if g.n_nodes == 0:
        return pl.DataFrame(schema=SEGMENT_SCHEMA)
    x, preds, nodes, _, _, _, path_off = solve(g, scale)
    k = g.n_windows
    p_win = np.repeat(np.arange(k), np.diff(path_off))
    inner = p_win[1:] == p_win[:-1]  # consecutive nodes of one window's path
    v = nodes[1:][inner]
    u = nodes[:-1][inner]
    win = p_win[1:][inner]
    via = preds.via[v].astype(np.int64)
    e = np.maximum(preds.edge[v], 0)

    def cross(a: np.ndarray) -> np.ndarray:
        return a[e] if len(a) else np.zeros(len(e), a.dtype)

    owner = np.where(via == 2, cross(g.c_owner), g.w_owner[v])
    kind = np.where(via == 2, cross(g.c_kind), g.w_kind[v])
    bound = np.where(via == 2, cross(g.c_bound), g.w_bound[v])
    start, end = x[u], x[v]
    order = np.arange(len(v), dtype=np.int64)
    # time before a path's first node: from the window start
    has = np.diff(path_off) > 0
    firsts = nodes[path_off[:-1][has]]
    lead = x[firsts] != 0
    f = firsts[lead]
    f_win = np.flatnonzero(has)[lead]
    owner = np.concatenate([np.full(len(f), -1), owner])
    kind = np.concatenate([np.full(len(f), KINDS.index("idle")), kind])
    bound = np.concatenate([g.w_bound[f], bound])
    via = np.concatenate([np.zeros(len(f), np.int64), via])
    start = np.concatenate([np.zeros(len(f), np.int64), start])
    end = np.concatenate([x[f], end])
    win = np.concatenate([f_win, win])
    order = np.concatenate([np.full(len(f), -1), order])
    srt = np.lexsort((order, win))
    keep = (via == 2) | (end != start)
    sel = srt[keep[srt]]
    owner, kind, bound, via, start, end, win = (a[sel] for a in (owner, kind, bound, via, start, end, win))
    ev = g.events
    o = pl.Series(np.maximum(owner, 0), dtype=pl.Int64)
    has_owner = pl.col("owner") >= 0
    w0 = g.wins["start_ns"].to_numpy()[win]
    df = pl.DataFrame({
        "_win": win, "owner": owner,
        "event_id": ev["event_id"].gather(o) if ev.height else pl.Series([0] * len(o)),
        "name": ev["name"].gather(o) if ev.height else pl.Series([""] * len(o), dtype=pl.String),
        "module": ev["module"].gather(o) if ev.height else pl.Series([None] * len(o), dtype=pl.String),
        "kind": pl.Series(KINDS, dtype=pl.Enum(KINDS)).gather(kind.astype(np.int64)),
        "bound_by": pl.Series(BOUND_BY, dtype=pl.Enum(BOUND_BY)).gather(bound.astype(np.int64)),
        "via": pl.Series(_VIA, dtype=pl.String).gather(via), "start_ns": start + w0, "end_ns": end + w0,
    }).with_columns(name=pl.when(has_owner).then(pl.col("name")), module=pl.when(has_owner).then(pl.col("module")))
    df = df.with_columns(event_id=pl.when(pl.col("owner") >= 0).then(pl.col("event_id")))
    if merge and df.height:
        key = pl.struct("_win", "owner", "kind", "via")
        df = (df.with_columns(_run=key.rle_id() + (pl.col("via") == "dependency").cum_sum())
              .group_by("_run", maintain_order=True)
              .agg(pl.col("_win", "event_id", "name", "module", "kind", "bound_by", "via").first(),
                   pl.col("start_ns").first(), pl.col("end_ns").last()))
    ranks = g.wins["rank"].cast(pl.Int32)
    steps = g.wins["step"].cast(pl.Int64)
    wi = pl.Series(df["_win"])
    return df.select(
        ranks.gather(wi).alias("rank"), steps.gather(wi).alias("step"),
        pl.int_range(pl.len(), dtype=pl.Int64).over("_win").alias("seq"), "event_id", "name", "module", "kind",
        "bound_by", "via", "start_ns", "end_ns", (pl.col("end_ns") - pl.col("start_ns")).alias("dur_ns"))


def summary_frame(paths: pl.DataFrame, by: str = "bound_by", limit: int | None = None) -> pl.DataFrame:
    """Time on the path per `by` (``bound_by``, ``name``, ``kind``, ``module`` or ``step``) over `paths`.

    ``bound_by`` / ``kind``: ``dur_ns``, ``share`` of the total path length, and the spread over steps
    (``min_ns``, ``median_ns``, ``max_ns`` per step, 0 where absent; ``n_steps``). ``name``: ``dur_ns``,
    ``share``, ``n_segments`` per (name, kind), largest first; ``module``: the same per innermost ``nn.Module``
    (null: none known; kernels count for their launching op's module). ``step``: one row per (rank, step) with the path
    length and the time of every ``bound_by`` (``cpu_bound_ns``, ...).
    """
    total = int(paths["dur_ns"].sum()) if paths.height else 0
    share = (pl.col("dur_ns") / total) if total else pl.lit(None, pl.Float64)
    if by == "step":
        wide = paths.group_by("rank", "step", "bound_by").agg(pl.col("dur_ns").sum()).with_columns(
            pl.col("bound_by").cast(pl.String))
        out = paths.group_by("rank", "step").agg(pl.col("dur_ns").sum().alias("length_ns"))
        for b in BOUND_BY:
            mine = wide.filter(pl.col("bound_by") == b).select("rank", "step", pl.col("dur_ns").alias(f"{b}_ns"))
            out = out.join(mine,
                           on=["rank", "step"], how="left", nulls_equal=True)
        return out.with_columns(pl.col([f"{b}_ns" for b in BOUND_BY]).fill_null(0)).sort("rank", "step")
    if by == "module":
        out = (paths.group_by("module").agg(pl.col("dur_ns").sum().alias("dur_ns"),
                                            pl.len().cast(pl.Int64).alias("n_segments"))
               .with_columns(share=share).sort("dur_ns", "module", descending=[True, False], nulls_last=True))
        return out.head(limit) if limit else out
    if by == "name":
        out = (paths.group_by("name", "kind").agg(pl.col("dur_ns").sum().alias("dur_ns"),
                                                  pl.len().cast(pl.Int64).alias("n_segments"))
               .with_columns(share=share).sort("dur_ns", "name", descending=[True, False], nulls_last=True))
        return out.head(limit) if limit else out
    if by not in ("bound_by", "kind"):
        msg = f"summary by must be 'bound_by', 'kind', 'name', 'module' or 'step', not {by!r}"
        raise ProftabError(msg)
    values = BOUND_BY if by == "bound_by" else KINDS
    steps = paths.select("rank", "step").unique()
    grid = steps.join(pl.DataFrame({by: pl.Series(values, dtype=pl.Enum(values))}), how="cross")
    per = grid.join(paths.group_by("rank", "step", by).agg(pl.col("dur_ns").sum().alias("dur_ns")),
                    on=["rank", "step", by], how="left", nulls_equal=True).with_columns(pl.col("dur_ns").fill_null(0))
    return (per.group_by(by).agg(pl.col("dur_ns").sum(), pl.col("dur_ns").min().alias("min_ns"),
                                 pl.col("dur_ns").median().cast(pl.Int64).alias("median_ns"),
                                 pl.col("dur_ns").max().alias("max_ns"), pl.len().cast(pl.Int64).alias("n_steps"))
            .with_columns(share=share).sort(by)
            .select(by, "dur_ns", "share", "min_ns", "median_ns", "max_ns", "n_steps"))


def _check_keys(graphs: Sequence[Graph], scale: Mapping[str, float]) -> None:
    """Every `scale` key must match something (a kind, a bound_by, a category or an event name)."""
    for key in scale:
        if key == "*" or key in KINDS or key in BOUND_BY:
            continue
        try:
            re.compile(key)
        except re.error:
            continue  # scaled_weights says why
        if not any(((g.events["category"].fill_null("") == key) | g.events["name"].fill_null("").str.contains(key))
                   .any() for g in graphs):
            msg = (f"what-if key {key!r} matches no segment kind ({', '.join(KINDS)}), bound_by "
                   f"({', '.join(BOUND_BY)}), kernel category or event name in the selected windows")
            raise UsageError(msg)


def what_if_frame(graphs: Sequence[Graph], scale: Mapping[str, float]) -> pl.DataFrame:
    """Path length before and after `scale` per window: ``rank``, ``step``, ``length_ns``,
    ``what_if_ns``, ``delta_ns``, ``speedup`` (each graph solved twice, all its windows at once).
    """
    _check_keys(graphs, scale)
    frames = [g.wins.select(pl.col("rank").cast(pl.Int32), pl.col("step").cast(pl.Int64)).with_columns(
        length_ns=pl.Series(solve(g).lengths, dtype=pl.Int64), what_if_ns=pl.Series(solve(g, scale).lengths,
                                                                                    dtype=pl.Int64))
        for g in graphs]
    df = pl.concat(frames) if frames else pl.DataFrame(schema={"rank": pl.Int32, "step": pl.Int64,
                                                               "length_ns": pl.Int64, "what_if_ns": pl.Int64})
    return df.with_columns(delta_ns=pl.col("what_if_ns") - pl.col("length_ns"),
                           speedup=pl.col("length_ns") / pl.col("what_if_ns"))
