"""A noise-aware comparison of two runs: `pt.diff(a, b, stats=True)`; docs/diff.md states the method.

Each step of a run (`ProfilerStep#N` per rank, or a named annotation window) is one sample of
the time of every key: a step (its duration), a module path (inclusive time of its frames),
a host op (self time; module path + name + input shapes) and a device kernel (duration; the
module of its launching op + name). Keys of the two runs are matched at the most specific
level first (module + op + shapes, then op + shapes, then op); per matched key a
Mann-Whitney U test (tie-corrected normal approximation with continuity correction, two-sided)
compares the step samples, Holm's step-down correction over all keys tested controls the
family-wise error, and a seeded percentile bootstrap of the per-step mean difference gives the
effect's confidence interval. A trace with a single step falls back to event-level samples.

`step_samples` builds the keys (the one place to extend them, e.g. for compiled graphs);
`compare` tests two sample frames; `regressions` is the gate; `report_markdown` a PR comment.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import polars as pl

from proftab import kinds
from proftab.exceptions import UsageError
from proftab.steps import (
    DEFAULT_WARMUP_STEPS,
    STEP_GROUP_NAME,
    STEP_PREFIX,
    after_warmup,
    assign_steps,
    named_windows,
    step_windows,
)

if TYPE_CHECKING:
    from collections.abc import Mapping

    from proftab.trace import Trace

__all__ = ["KEY_COLUMNS", "SAMPLE_COLUMNS", "STATS_COLUMNS", "compare", "headline", "holm", "mann_whitney",
           "normalize_name", "regressions", "report_markdown", "stats_diff", "step_samples"]

#: the columns that identify a key (`module` is "" for a key outside every module)
KEY_COLUMNS = ["kind", "module", "name", "input_shapes"]
#: `step_samples`: one row per key and sample (step, or event in the event-level fallback)
SAMPLE_COLUMNS = [*KEY_COLUMNS, "shown_name", "sample", "value_ns", "flops"]
#: `stats_diff` / `compare` output
STATS_COLUMNS = ["kind", "module", "name", "input_shapes", "match", "status", "n_samples_a", "n_samples_b",
                 "mean_ns_a", "mean_ns_b", "delta_ns", "ci_low_ns", "ci_high_ns", "rel", "step_share", "p_value",
                 "significant", "flops_delta", "cause"]

#: volatile name parts -> a fixed stand-in: object addresses, temporary paths, pids, thread ids
_VOLATILE = [
    (r"0x[0-9a-fA-F]+", "0x…"),
    (r"/tmp/[^/\s:'\"()]+/", "/tmp/…/"),  # a temporary directory
    (r"\btmp[a-z0-9_]{6,}", "tmp…"),  # tempfile's names (tmpab12cd34)
    (r"(?i)\b(pid|tid)([ :=#]+)\d+", "${1}${2}…"),
    (r"\.py\(\d+\)", ".py(…)"),  # a python frame's line number (moves with any edit above it)
]

Unit = Literal["step", "event"]


def normalize_name(name: pl.Expr) -> pl.Expr:
    """`name` with its volatile parts replaced, for matching across runs.

    ``<built-in method relu of type object at 0x7fd4740cea40>`` becomes ``... at 0x…>``;
    a temporary directory (``/tmp/x/``) becomes ``/tmp/…/``, tempfile's ``tmpab12cd34``
    ``tmp…``, a python frame's line number (``model.py(46): forward``) ``model.py(…)``, and
    ``pid 123`` / ``tid=7`` lose the number.
    """
    for pattern, repl in _VOLATILE:
        name = name.str.replace_all(pattern, repl)
    return name


def _windows(events: pl.DataFrame, window: str | None) -> pl.DataFrame:
    """Step windows: `ProfilerStep#N`, or each host annotation whose name starts with `window`
    (numbered per rank in time order)."""
    if window is None:
        return step_windows(events)
    return named_windows(events, window, prefix=True, user_annotations_only=True)


_EVENTS = ["rank", "event_id", "cat", "name", "start_ns", "end_ns", "dur_ns", "input_dims", "input_type",
           "concrete_inputs"]


def step_samples(trace: Trace, *, warmup: int = DEFAULT_WARMUP_STEPS, window: str | None = None,
                 unit: Unit | None = None, names: Mapping[str, str] | None = None) -> tuple[pl.DataFrame, Unit]:
    """Per key and step of `trace`, the time of the key in that step: the samples `compare` tests.

    Parameters
    ----------
    trace
        A loaded or scanned trace.
    warmup
        Leave out each rank's first `warmup` steps (warm-up: allocator, caches, autotuning).
    window
        Name prefix of the host annotations (`record_function`) whose ranges are the steps,
        instead of `ProfilerStep#N` (e.g. ``"microbatch_"``).
    unit
        Force ``"event"`` samples (default: ``"step"`` when each rank keeps >= 2 steps).
    names
        Instance name -> the model's name (`proftab.modules.instance_names(model, x)`):
        a module path whose innermost instance is known is shown by that name
        (``Net_0.Block_2`` -> ``model.layers.2``).

    Returns
    -------
    tuple
        The samples (`SAMPLE_COLUMNS`; `sample` is ``rank * 2**32 + step``, a key absent
        from a step has no row there) and the unit: ``"step"``, or ``"event"`` when fewer
        than two steps remain after the warm-up (then every event is a sample, `sample` its
        event id, step keys are left out, and the events are those in the kept steps, else
        in any step, else the whole trace).
    """
    from proftab.torch.aggregate import input_shapes_expr
    from proftab.torch.flops import torch_flops

    if warmup < 0:
        msg = f"warmup must be >= 0 steps, not {warmup}"
        raise UsageError(msg)
    have = trace.lazy("nested").collect_schema().names()
    nested = trace.collect("nested", [c for c in (*_EVENTS, "self_ns") if c in have])
    windows = _windows(nested, window)
    if window is not None and windows.is_empty():
        msg = f"window={window!r}: no user annotation whose name starts with it in the trace"
        raise UsageError(msg)
    kept = after_warmup(windows, warmup)
    fewest = kept.group_by("rank").len()["len"].min()
    if unit is None:
        unit = "step" if isinstance(fewest, int) and fewest >= 2 else "event"
    paths = _module_paths(trace)
    host = nested.filter(kinds.is_host_op() & ~pl.col("name").str.starts_with(STEP_PREFIX)
                         & ~(pl.lit(window is not None) & kinds.is_user_annotation()
                             & pl.col("name").str.starts_with(window or ""))
                         & ~(kinds.is_python_frame() & pl.col("name").str.starts_with(kinds.MODULE_PREFIX)))
    host = host.join(paths, on=["rank", "event_id"], how="left")
    host = host.with_columns(
        kind=pl.lit("op"), module=pl.col("module").fill_null(""),
        input_shapes=input_shapes_expr() if "input_dims" in host.columns else pl.lit("[]"),
        value_ns=pl.col("self_ns"), flops=torch_flops(host).alias("flops"))
    parts = [host.select("rank", "start_ns", "event_id", "kind", "module", "name", "input_shapes", "value_ns",
                         "flops")]
    frames = trace.modules.tree().drop("step") if trace.categories & {kinds.PYTHON_FRAME, kinds.USER_ANNOTATION} \
        else None
    if frames is not None and not frames.is_empty():
        parts.append(frames.select("rank", "start_ns", pl.col("frame_id").alias("event_id"), kind=pl.lit("module"),
                                   module=pl.col("path"), name=pl.col("path"), input_shapes=pl.lit("[]"),
                                   value_ns=pl.col("dur_ns"), flops=pl.lit(0, pl.Int64)))
    if kinds.has_device_rows(trace.categories):
        acts = trace.device.activities().filter(pl.col("kind") == "kernel")
        acts = acts.join(paths.rename({"event_id": "op_id"}), on=["rank", "op_id"], how="left")
        parts.append(acts.select("rank", pl.col("launch_start_ns").fill_null(pl.col("start_ns")).alias("start_ns"),
                                 "event_id", kind=pl.lit("kernel"), module=pl.col("module").fill_null(""),
                                 name=pl.col("name"), input_shapes=pl.lit("[]"), value_ns=pl.col("dur_ns"),
                                 flops=pl.lit(0, pl.Int64)))
    if unit == "step":
        parts.append(kept.select("rank", "start_ns", "event_id", kind=pl.lit("step"), module=pl.lit(""),
                                 name=pl.lit(f"{window}*" if window else STEP_GROUP_NAME), input_shapes=pl.lit("[]"),
                                 value_ns=pl.col("dur_ns"), flops=pl.lit(0, pl.Int64)))
    rows = pl.concat([p.with_columns(pl.col("value_ns").cast(pl.Int64), pl.col("flops").cast(pl.Int64),
                                     pl.col("rank").cast(windows.schema["rank"])) for p in parts])
    rows = rows.with_columns(shown_name=pl.col("name"), name=normalize_name(pl.col("name")))
    if names:
        known = pl.col("module").str.split(".").list.last().replace_strict(dict(names), default=None,
                                                                            return_dtype=pl.String)
        renamed = pl.when(pl.col("module") != "").then(known.fill_null(pl.col("module"))).otherwise(pl.col("module"))
        rows = rows.with_columns(module=renamed).with_columns(
            name=pl.when(pl.col("kind") == "module").then(pl.col("module")).otherwise(pl.col("name")),
            shown_name=pl.when(pl.col("kind") == "module").then(pl.col("module")).otherwise(pl.col("shown_name")))
    if unit == "event":
        bound = kept if not kept.is_empty() else windows  # the kept steps, else every step, else all
        if not bound.is_empty():
            rows = assign_steps(rows, bound).filter(pl.col("step").is_not_null()).drop("step")
        return rows.select(*KEY_COLUMNS, "shown_name", pl.col("event_id").alias("sample"), "value_ns",
                           "flops"), unit
    rows = assign_steps(rows, kept).filter(pl.col("step").is_not_null())
    return (rows.group_by(*KEY_COLUMNS, pl.col("rank").cast(pl.Int64) * 2**32 + pl.col("step"))
            .agg(pl.col("shown_name").first(), pl.col("value_ns").sum(), pl.col("flops").sum())
            .rename({"rank": "sample"}).select(SAMPLE_COLUMNS).sort([*KEY_COLUMNS, "sample"])), unit


def _module_paths(trace: Trace) -> pl.DataFrame:
    """`rank`, `event_id`, `module`: the module path each host row's time is charged to."""
    if not trace.categories & {kinds.PYTHON_FRAME, kinds.USER_ANNOTATION}:
        return pl.DataFrame(schema={"rank": pl.Int32, "event_id": pl.Int64, "module": pl.String})
    frames: pl.DataFrame = trace.modules.tree()
    assigned: pl.DataFrame = trace.modules.assigned()
    return (assigned.filter(pl.col("frame_id").is_not_null())
            .join(frames.select("rank", "frame_id", pl.col("path").alias("module")), on=["rank", "frame_id"])
            .select("rank", "event_id", "module"))


# ---------------------------------------------------------------------------------------- matching

_LEVELS = [("module+op+shape", ["kind", "module", "name", "input_shapes"]),
           ("op+shape", ["kind", "name", "input_shapes"]),
           ("op", ["kind", "name"])]


def _match(keys_a: pl.DataFrame, keys_b: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Each side's keys (`KEY_COLUMNS`) with `group` (the matched key, as `KEY_COLUMNS` with the
    unmatched levels' columns blank), `match` (the level, null: added / removed)."""
    out_a, out_b = [], []
    ua, ub = keys_a, keys_b
    for level, cols in _LEVELS:
        ga = ua.select(cols).unique()
        both = ga.join(ub.select(cols).unique(), on=cols, how="inner")
        hit_a = ua.join(both, on=cols, how="semi")
        hit_b = ub.join(both, on=cols, how="semi")
        blank = [pl.lit("").alias(c) for c in KEY_COLUMNS if c not in cols and c != "input_shapes"]
        blank += [pl.lit("[]").alias("input_shapes")] if "input_shapes" not in cols else []

        def grouped(hit: pl.DataFrame, cols: list[str] = cols, blank: list[pl.Expr] = blank,
                    level: str = level) -> pl.DataFrame:
            g = hit.select(*cols, *blank).select([pl.col(c).alias(f"g_{c}") for c in KEY_COLUMNS])
            return pl.concat([hit, g], how="horizontal").with_columns(match=pl.lit(level))
        out_a.append(grouped(hit_a))
        out_b.append(grouped(hit_b))
        ua = ua.join(both, on=cols, how="anti")
        ub = ub.join(both, on=cols, how="anti")
    for rest, out in ((ua, out_a), (ub, out_b)):  # added / removed: the full key
        out.append(rest.with_columns([pl.col(c).alias(f"g_{c}") for c in KEY_COLUMNS],
                                     match=pl.lit(None, pl.String)))
    return pl.concat(out_a), pl.concat(out_b)


# ---------------------------------------------------------------------------------------- statistics

def _erfc(x: np.ndarray) -> np.ndarray:
    """Complementary error function (Numerical Recipes' `erfcc`: relative error < 1.2e-7)."""
    z = np.abs(x)
    t = 1.0 / (1.0 + 0.5 * z)
    poly = -z * z - 1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418 + t * (
        -0.18628806 + t * (0.27886807 + t * (-1.13520398 + t * (1.48851587 + t * (-0.82215223 + t * 0.17087277))))))))
    ans = t * np.exp(poly)
    out: np.ndarray = np.where(x >= 0, ans, 2.0 - ans)
    return out


def mann_whitney(long: pl.DataFrame) -> pl.DataFrame:
    """Two-sided Mann-Whitney U per `group` of `long` (`group`, `side` 0/1, `value`).

    The normal approximation with tie correction and continuity correction (scipy's
    ``mannwhitneyu(method="asymptotic")``). Returns `group`, `n_a`, `n_b`, `u`, `p_value`
    (1.0 when every value of the group is tied or a side is empty).
    """
    ranked = long.with_columns(_r=pl.col("value").rank("average").over("group"))
    ties = (long.group_by("group", "value").len().group_by("group")
            .agg(_t=((pl.col("len").cast(pl.Float64) ** 3) - pl.col("len")).sum()))
    g = (ranked.group_by("group").agg(n_a=(pl.col("side") == 0).sum(), n_b=(pl.col("side") == 1).sum(),
                                       r_a=pl.col("_r").filter(pl.col("side") == 0).sum())
         .join(ties, on="group", how="left"))
    n_a = g["n_a"].to_numpy().astype(np.float64)
    n_b = g["n_b"].to_numpy().astype(np.float64)
    n = n_a + n_b
    u = g["r_a"].to_numpy().astype(np.float64) - n_a * (n_a + 1) / 2
    with np.errstate(divide="ignore", invalid="ignore"):
        var = n_a * n_b / 12 * ((n + 1) - g["_t"].to_numpy() / (n * (n - 1)))
        dev = np.abs(u - n_a * n_b / 2)
        z = np.maximum(dev - 0.5, 0) / np.sqrt(var)
        p = np.where((var > 0) & (n_a > 0) & (n_b > 0), np.minimum(_erfc(z / math.sqrt(2)), 1.0), 1.0)
    return g.select("group", "n_a", "n_b").with_columns(u=pl.Series(u), p_value=pl.Series(p))


def holm(p: np.ndarray) -> np.ndarray:
    """Holm's step-down adjusted p-values (family-wise error control under any dependence)."""
    m = len(p)
    if m == 0:
        return p
    order = np.argsort(p, kind="stable")
    adj = np.maximum.accumulate(np.minimum((m - np.arange(m)) * p[order], 1.0))
    out = np.empty(m)
    out[order] = adj
    return out


def _bootstrap_ci(mat_a: np.ndarray, mat_b: np.ndarray, level: float, n_boot: int,
                  seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Percentile bootstrap CI of mean(B) - mean(A) per column (steps resampled as rows)."""
    rng = np.random.default_rng(seed)
    lo_q, hi_q = (1 - level) / 2 * 100, (1 + level) / 2 * 100
    wa = rng.multinomial(mat_a.shape[0], np.full(mat_a.shape[0], 1 / mat_a.shape[0]), size=n_boot) / mat_a.shape[0]
    wb = rng.multinomial(mat_b.shape[0], np.full(mat_b.shape[0], 1 / mat_b.shape[0]), size=n_boot) / mat_b.shape[0]
    lo, hi = np.empty(mat_a.shape[1]), np.empty(mat_a.shape[1])
    chunk = max(1, 4_000_000 // n_boot)
    for s in range(0, mat_a.shape[1], chunk):  # bounded memory: n_boot x chunk
        d = wb @ mat_b[:, s:s + chunk] - wa @ mat_a[:, s:s + chunk]
        lo[s:s + chunk], hi[s:s + chunk] = np.percentile(d, [lo_q, hi_q], axis=0)
    return lo, hi


def compare(samples_a: pl.DataFrame, samples_b: pl.DataFrame, unit: Unit = "step", *, alpha: float = 0.01,
            n_boot: int = 2000, seed: int = 0) -> pl.DataFrame:
    """Match the keys of two `step_samples` frames and test every matched, added and removed key.

    Parameters
    ----------
    samples_a, samples_b
        `step_samples` of the baseline and the new run (the same `unit`).
    unit
        ``"step"``: a key's samples are its per-step times (0 in a step without it);
        ``"event"``: its events (one-step traces).
    alpha
        Family-wise error rate (Holm); the confidence level of the intervals is ``1 - alpha``.
    n_boot
        Bootstrap resamples for the intervals (step unit).
    seed
        Seed of the bootstrap.

    Returns
    -------
    pl.DataFrame
        `STATS_COLUMNS`, one row per matched key (or added / removed key): `match` (the level
        it matched at, null when added / removed), `status` (``added``, ``removed``,
        ``changed``: significant, ``same``), `mean_ns_*` (per step; Σ per trace in the
        event unit), `delta_ns` (B - A, likewise), `ci_low_ns` / `ci_high_ns`, `rel`
        (delta / mean A), `step_share` (delta / the baseline's mean step time), `p_value`
        (Holm-adjusted), `significant`, `flops_delta` (per step), `cause` (modules and the
        step: the op in it whose change is largest).
        Sorted by `delta_ns`, largest regression first.
    """
    if not 0 < alpha < 1:
        msg = f"alpha must be in (0, 1), not {alpha}"
        raise UsageError(msg)
    keys_a = samples_a.select(KEY_COLUMNS).unique()
    keys_b = samples_b.select(KEY_COLUMNS).unique()
    ma, mb = _match(keys_a, keys_b)
    gcols = [f"g_{c}" for c in KEY_COLUMNS]
    groups = pl.concat([ma.select(*gcols, "match"), mb.select(*gcols, "match")]).unique(gcols, keep="first").sort(
        gcols).with_row_index("group")
    shown = pl.concat([samples_a, samples_b]).group_by(KEY_COLUMNS).agg(pl.col("shown_name").first())

    def side(samples: pl.DataFrame, m: pl.DataFrame) -> pl.DataFrame:
        s = samples.join(m.select(*KEY_COLUMNS, *gcols), on=KEY_COLUMNS).join(groups.select("group", *gcols),
                                                                              on=gcols)
        return s.group_by("group", "sample").agg(pl.col("value_ns").sum(), pl.col("flops").sum())
    sa, sb = side(samples_a, ma), side(samples_b, mb)
    n_groups = groups.height
    if unit == "step":
        out = _compare_steps(sa, sb, samples_a, samples_b, n_groups, alpha, n_boot, seed)
    else:
        out = _compare_events(sa, sb, n_groups, alpha)
    out = groups.join(out, on="group").rename({f"g_{c}": c for c in KEY_COLUMNS})
    out = out.with_columns(
        status=pl.when(pl.col("match").is_null() & (pl.col("n_events_a") == 0)).then(pl.lit("added"))
        .when(pl.col("match").is_null() & (pl.col("n_events_b") == 0)).then(pl.lit("removed"))
        .when(pl.col("significant")).then(pl.lit("changed")).otherwise(pl.lit("same")),
        rel=pl.when(pl.col("mean_ns_a") != 0).then(pl.col("delta_ns") / pl.col("mean_ns_a")),
    )
    out = out.join(shown.rename({"shown_name": "_shown"}), on=KEY_COLUMNS, how="left").with_columns(
        name=pl.col("_shown").fill_null(pl.col("name")))
    step_ns = out.filter(pl.col("kind") == "step")["mean_ns_a"]
    base = float(step_ns[0]) if step_ns.len() else float(samples_a.filter(pl.col("kind") == "op")["value_ns"].sum())
    out = out.with_columns(step_share=pl.col("delta_ns") / base if base > 0 else pl.lit(None, pl.Float64))
    return _with_causes(out).select(STATS_COLUMNS).sort(["delta_ns", "kind", "module", "name"],
                                                         descending=[True, False, False, False])


def _dense(s: pl.DataFrame, samples: pl.DataFrame, n_groups: int) -> tuple[np.ndarray, np.ndarray]:
    """steps x groups matrices of a side's per-step times and FLOPs (0 where a key is absent)."""
    steps = samples.select(pl.col("sample").unique().sort())["sample"]
    pos = {int(v): i for i, v in enumerate(steps.to_list())}  # the few steps, not events
    rows = s["sample"].replace_strict(pos, return_dtype=pl.Int64).to_numpy()
    cols = s["group"].to_numpy().astype(np.int64)
    mat = np.zeros((len(pos), n_groups))
    fl = np.zeros((len(pos), n_groups))
    mat[rows, cols] = s["value_ns"].to_numpy()
    fl[rows, cols] = s["flops"].to_numpy()
    return mat, fl


def _compare_steps(sa: pl.DataFrame, sb: pl.DataFrame, samples_a: pl.DataFrame, samples_b: pl.DataFrame,
                   n_groups: int, alpha: float, n_boot: int, seed: int) -> pl.DataFrame:
    mat_a, fl_a = _dense(sa, samples_a, n_groups)
    mat_b, fl_b = _dense(sb, samples_b, n_groups)
    if mat_a.shape[0] < 2 or mat_b.shape[0] < 2:
        msg = "stats need at least two steps on each side (after the warm-up)"
        raise UsageError(msg)
    grp = np.arange(n_groups)
    long = pl.DataFrame({
        "group": np.concatenate([np.tile(grp, mat_a.shape[0]), np.tile(grp, mat_b.shape[0])]),
        "side": np.concatenate([np.zeros(mat_a.size, np.int8), np.ones(mat_b.size, np.int8)]),
        "value": np.concatenate([mat_a.ravel(), mat_b.ravel()]),
    })
    mw = mann_whitney(long).sort("group")
    p_adj = holm(mw["p_value"].to_numpy())
    lo, hi = _bootstrap_ci(mat_a, mat_b, 1 - alpha, n_boot, seed)
    sum_a = np.zeros(n_groups, np.int64)
    sum_b = np.zeros(n_groups, np.int64)
    np.add.at(sum_a, sa["group"].to_numpy(), sa["value_ns"].to_numpy())
    np.add.at(sum_b, sb["group"].to_numpy(), sb["value_ns"].to_numpy())
    mean_a, mean_b = sum_a / mat_a.shape[0], sum_b / mat_b.shape[0]
    n_ev_a = np.bincount(sa["group"].to_numpy(), minlength=n_groups)
    n_ev_b = np.bincount(sb["group"].to_numpy(), minlength=n_groups)
    return pl.DataFrame({
        "group": pl.Series(grp, dtype=pl.UInt32),
        "n_samples_a": pl.Series(np.full(n_groups, mat_a.shape[0]), dtype=pl.Int64),
        "n_samples_b": pl.Series(np.full(n_groups, mat_b.shape[0]), dtype=pl.Int64),
        "n_events_a": n_ev_a, "n_events_b": n_ev_b,
        "mean_ns_a": np.round(mean_a).astype(np.int64), "mean_ns_b": np.round(mean_b).astype(np.int64),
        "delta_ns": np.round(mean_b - mean_a).astype(np.int64),
        "ci_low_ns": np.round(lo).astype(np.int64), "ci_high_ns": np.round(hi).astype(np.int64),
        "p_value": p_adj, "significant": p_adj < alpha,
        "flops_delta": np.round(fl_b.mean(axis=0) - fl_a.mean(axis=0)).astype(np.int64),
    })


def _compare_events(sa: pl.DataFrame, sb: pl.DataFrame, n_groups: int, alpha: float) -> pl.DataFrame:
    """One step per side: each event a sample; delta = Σ B - Σ A, CI normal on the sums."""
    long = pl.concat([sa.select("group", side=pl.lit(0, pl.Int8), value="value_ns"),
                      sb.select("group", side=pl.lit(1, pl.Int8), value="value_ns")]).with_columns(
        pl.col("value").cast(pl.Float64))
    mw = mann_whitney(long)
    grp = pl.DataFrame({"group": pl.Series(np.arange(n_groups), dtype=pl.UInt32)})

    def agg(s: pl.DataFrame, suffix: str) -> pl.DataFrame:
        return s.group_by("group").agg(pl.len().alias(f"n_events_{suffix}"),
                                       pl.col("value_ns").sum().alias(f"sum_{suffix}"),
                                       pl.col("value_ns").cast(pl.Float64).var(ddof=1).fill_null(0).alias(
                                           f"var_{suffix}"),
                                       pl.col("flops").sum().alias(f"fl_{suffix}"))
    g = (grp.join(agg(sa, "a"), on="group", how="left").join(agg(sb, "b"), on="group", how="left")
         .join(mw.select(pl.col("group").cast(pl.UInt32), "p_value"), on="group", how="left").fill_null(0))
    both = (g["n_events_a"] > 0) & (g["n_events_b"] > 0)
    p = np.where(both.to_numpy(), g["p_value"].to_numpy(), np.nan)
    tested = ~np.isnan(p)
    p_adj = np.full(len(p), np.nan)
    p_adj[tested] = holm(p[tested])
    z = _normal_quantile(1 - alpha / 2)
    half = z * np.sqrt(g["n_events_a"].to_numpy() * g["var_a"].to_numpy()
                       + g["n_events_b"].to_numpy() * g["var_b"].to_numpy())
    delta = (g["sum_b"] - g["sum_a"]).to_numpy()
    return pl.DataFrame({
        "group": g["group"], "n_samples_a": g["n_events_a"].cast(pl.Int64),
        "n_samples_b": g["n_events_b"].cast(pl.Int64),
        "n_events_a": g["n_events_a"], "n_events_b": g["n_events_b"],
        "mean_ns_a": g["sum_a"].cast(pl.Int64), "mean_ns_b": g["sum_b"].cast(pl.Int64),
        "delta_ns": pl.Series(delta, dtype=pl.Int64),
        "ci_low_ns": pl.Series(np.round(delta - half), dtype=pl.Int64),
        "ci_high_ns": pl.Series(np.round(delta + half), dtype=pl.Int64),
        "p_value": pl.Series(p_adj).fill_nan(None),
        "significant": pl.Series(tested & (np.nan_to_num(p_adj, nan=1.0) < alpha)),
        "flops_delta": (g["fl_b"] - g["fl_a"]).cast(pl.Int64),
    })


def _normal_quantile(q: float) -> float:
    """The standard normal quantile (bisection on `math.erfc`; one scalar)."""
    lo, hi = -40.0, 40.0
    for _ in range(200):
        mid = (lo + hi) / 2
        if 0.5 * math.erfc(-mid / math.sqrt(2)) < q:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def describe_key(name: pl.Expr, shapes: pl.Expr, status: pl.Expr) -> pl.Expr:
    """``aten::mm [[64, 512], [512, 2048]] added`` (shapes only when known)."""
    return pl.concat_str(name, pl.when(shapes.is_in(["[]", ""])).then(pl.lit("")).otherwise(pl.lit(" ") + shapes),
                         pl.lit(" "), status)


def _with_causes(out: pl.DataFrame) -> pl.DataFrame:
    """`cause` of a module row (the op in it or below it with the largest |delta|) and of
    the step row (the same over all ops); null for ops and kernels."""
    ops = out.filter(pl.col("kind").is_in(["op", "kernel"]) & (pl.col("status") != "same")).select(
        "module", "delta_ns", text=describe_key(pl.col("name"), pl.col("input_shapes"), pl.col("status"))
        + pl.when(pl.col("flops_delta") != 0).then(
            pl.format(", {} FLOPs/step", pl.col("flops_delta").map_elements(lambda v: f"{v:+,}",
                                                                             return_dtype=pl.String)))
        .otherwise(pl.lit("")))
    if ops.is_empty():
        return out.with_columns(cause=pl.lit(None, pl.String))
    # each op under its module and every ancestor path ("a.b.c" -> "a", "a.b", "a.b.c"): Σ depth rows
    parts = ops.filter(pl.col("module") != "").with_columns(_parts=pl.col("module").str.split("."))
    pairs = (parts.with_columns(_k=pl.int_ranges(1, pl.col("_parts").list.len() + 1)).explode("_k")
             .with_columns(module=pl.col("_parts").list.head(pl.col("_k")).list.join(".")))
    top = pairs.sort(pl.col("delta_ns").abs(), descending=True).unique("module", keep="first").select(
        "module", cause="text")
    step_cause = ops.sort(pl.col("delta_ns").abs(), descending=True).head(1)["text"][0]
    out = out.join(top, on="module", how="left").with_columns(
        cause=pl.when(pl.col("kind") == "module").then(pl.col("cause"))
        .when(pl.col("kind") == "step").then(pl.lit(step_cause)))
    return out


def stats_diff(a: Trace, b: Trace, *, warmup: int = DEFAULT_WARMUP_STEPS, window: str | None = None,
               alpha: float = 0.01, n_boot: int = 2000, seed: int = 0,
               names: Mapping[str, str] | None = None) -> pl.DataFrame:
    """`compare` of the `step_samples` of two traces, plus `unit`.

    `unit` is ``"step"``, or ``"event"`` when either trace keeps fewer than two steps per
    rank after the warm-up (then `n_samples_*` count events and deltas are per trace).
    Parameters as in `step_samples` and `compare`.
    """
    sa, ua = step_samples(a, warmup=warmup, window=window, names=names)
    sb, ub = step_samples(b, warmup=warmup, window=window, names=names)
    unit: Unit = "step" if ua == ub == "step" else "event"
    if unit == "event" and (ua == "step" or ub == "step"):  # both sides sample alike
        if ua == "step":
            sa, _ = step_samples(a, warmup=warmup, window=window, unit="event", names=names)
        if ub == "step":
            sb, _ = step_samples(b, warmup=warmup, window=window, unit="event", names=names)
    out = compare(sa, sb, unit, alpha=alpha, n_boot=n_boot, seed=seed)
    return out.with_columns(unit=pl.lit(unit))


def regressions(d: pl.DataFrame, threshold: float = 0.02) -> pl.DataFrame:
    """The gate: significant regressions larger than `threshold` of the baseline's step time.

    Rows of `stats_diff` with `significant`, `delta_ns` > 0 and `step_share` > `threshold`
    (added keys count when significant). Ordered so that the culprit comes first: modules,
    deepest first (their `cause` names the op), then ops and kernels, largest first, then
    the step.
    """
    if threshold < 0:
        msg = f"threshold must be >= 0, not {threshold}"
        raise UsageError(msg)
    r = d.filter(pl.col("significant") & (pl.col("delta_ns") > 0) & (pl.col("step_share") > threshold))
    order = pl.col("kind").replace_strict({"module": 0, "op": 1, "kernel": 1, "step": 2}, return_dtype=pl.Int8)
    depth = pl.col("module").str.count_matches(r"\.").cast(pl.Int32)
    return r.sort([order, pl.when(pl.col("kind") == "module").then(-depth).otherwise(0), pl.col("delta_ns")],
                  descending=[False, False, True])


def headline(r: dict[str, Any]) -> str:
    """One line for a row of `stats_diff`: ``Net_0.Block_2 +1.8 ms/step [CI …] (aten::mm … added)``."""
    from proftab.render.text import fmt_ns, fmt_share

    name = r["module"] if r["kind"] == "module" else r["name"]
    shapes = f" {r['input_shapes']}" if r["input_shapes"] not in ("[]", "") else ""
    where = f" in {r['module']}" if r["kind"] in ("op", "kernel") and r["module"] else ""
    per = "step" if r.get("unit", "step") == "step" else "trace"
    text = (f"{r['kind']} {name}{shapes if r['kind'] in ('op', 'kernel') else ''}{where} "
            f"{fmt_ns(r['delta_ns'], signed=True)}/{per} ({fmt_share(r['step_share'], signed=True)} of the step) "
            f"[CI {fmt_ns(r['ci_low_ns'], signed=True)} .. {fmt_ns(r['ci_high_ns'], signed=True)}], "
            f"{r['status']}" + (f", p={r['p_value']:.2g}" if r["p_value"] is not None else ""))
    if r["kind"] in ("op", "kernel") and r["flops_delta"]:
        text += f", {r['flops_delta']:+,} FLOPs/{per}"
    if r.get("cause"):
        text += f" ({r['cause']})"
    return text


def report_markdown(d: pl.DataFrame, *, threshold: float = 0.02, alpha: float = 0.01, top: int = 10,
                    base: str = "A", new: str = "B") -> str:
    """A PR comment: the verdict, then the top regressions and improvements with their CIs."""
    from proftab.render.text import fmt_ns, fmt_share

    reg = regressions(d, threshold)
    unit = d["unit"][0] if "unit" in d.columns and d.height else "step"
    verdict = (f"**Regression**: {headline(reg.row(0, named=True))}" if reg.height
               else f"**No significant regression** larger than {threshold:.1%} of the step time")
    lines = [f"### proftab diff: `{base}` → `{new}`", "", verdict, "",
             f"Mann-Whitney U per key on {unit} samples, Holm-corrected at alpha = {alpha:g}; "
             f"{1 - alpha:.0%} bootstrap CIs of the per-{unit} mean difference.", ""]
    head = "| key | module | status | Δ/step | CI | Δ of step | p |"
    sep = "|---|---|---|---:|---|---:|---:|"

    def table(rows: pl.DataFrame) -> list[str]:
        out = [head, sep]
        for r in rows.iter_rows(named=True):
            key = str(r["name"]) + (f" {r['input_shapes']}" if r["input_shapes"] not in ("[]", "") else "")
            key = key.replace("|", "\\|")
            p = f"{r['p_value']:.2g}" if r["p_value"] is not None else "–"
            out.append(f"| `{key}` ({r['kind']}) | {r['module'] or ''} | {r['status']} | "
                       f"{fmt_ns(r['delta_ns'], signed=True)} | {fmt_ns(r['ci_low_ns'], signed=True)} .. "
                       f"{fmt_ns(r['ci_high_ns'], signed=True)} | {fmt_share(r['step_share'], signed=True)} | {p} |")
        return out
    sig = d.filter(pl.col("significant"))
    worse = sig.filter(pl.col("delta_ns") > 0).sort("delta_ns", descending=True).head(top)
    better = sig.filter(pl.col("delta_ns") < 0).sort("delta_ns").head(top)
    lines += ["#### Top regressions", ""] + (table(worse) if worse.height else ["none significant"]) + [""]
    lines += ["#### Top improvements", ""] + (table(better) if better.height else ["none significant"]) + [""]
    added = d.filter(pl.col("status") == "added").height
    removed = d.filter(pl.col("status") == "removed").height
    lines.append(f"{d.height:,} keys compared; {added} added, {removed} removed.")
    return "\n".join(lines) + "\n"
