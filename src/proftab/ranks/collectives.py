"""Collectives matched across ranks by process group and sequence.

A *collective instance* is one call of a collective on every member rank of a process group.
Each rank's calls are read from, in order of preference:

- device kernels whose name matches `COLLECTIVE_PATTERN` (NCCL/RCCL); their own args carry
  ``Collective name``, ``Process Group Name`` / ``Ranks``, ``In/Out msg nelems``, ``dtype``,
  ``Group size`` in recent torch versions (older ones leave them null);
- on a rank without collective kernels (CPU, gloo): the ``gloo:<collective>`` ranges that gloo's
  worker threads record while they run the collective; message size and dtype come from their
  ``Input Dims`` / ``Input type``.

Instances are matched by ``(group, seq)``: ``group`` is the ``Process Group Name`` (``"?"`` when
the trace has none, which matches the rank's collectives in one sequence, as TraceLens does); the
``seq`` is the trace's ``Seq`` arg when present, else the call's position among the rank's calls in
that group (start order).  gloo ranges carry no group: each gloo process group runs its work on its
own ``threads_per_group`` worker threads (2 by default in torch), created together, so a rank's
gloo threads sorted by thread id form its groups in creation order; the group ``gloo#k`` of the
ranks that have a k-th group is then one group.  This holds for groups created on every member in
the same order (torch requires it) but not when some of a group's threads never ran in the window.

Per instance (nccl-tests' definitions, docs/scale.md): ``transfer_ns`` = the shortest duration
over the ranks (the time the collective needs once every rank has arrived), each rank's
``wait_ns`` = its duration minus ``transfer_ns``, ``start_skew_ns`` = last start - first start,
``bytes`` = the larger of the per-rank in/out message sizes (nccl-tests' ``size``),
``algbw_gb_per_s`` = ``bytes / transfer_ns`` (1e9 B/s) and ``busbw_gb_per_s`` = ``algbw`` times the
collective's bus factor: all-reduce 2(n-1)/n; all-gather, reduce-scatter, all-to-all (n-1)/n;
broadcast, reduce, send/recv 1.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import numpy as np
import polars as pl

from proftab import kinds
from proftab.calls import C10D_PREFIX, COLLECTIVE_KERNEL_PATTERN, GLOO_PREFIX, is_collective_range
from proftab.clock import with_utc_frame
from proftab.dtypes import COLLECTIVE_DTYPE_NAMES, bytes_of
from proftab.steps import assign_steps, step_windows

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["COLLECTIVE_PATTERN", "DATA_PATTERN", "DTYPE_BYTES", "collective_instances", "collective_ranks",
           "match_calls", "rank_calls", "rank_comm", "rank_step_comm"]

#: regex (case-insensitive) of collective kernel names (`proftab.calls.COLLECTIVE_KERNEL_PATTERN`)
COLLECTIVE_PATTERN = COLLECTIVE_KERNEL_PATTERN
#: regex of host ranges that are data loading (the straggler's visible cause)
DATA_PATTERN = r"(?i)dataloader|data_?load|data_wait|next_data"
_KERNEL_CATS = sorted(kinds.KERNEL_CATEGORIES)
_GLOO_PREFIX = GLOO_PREFIX
#: bytes per element of the dtype names a collective's ``dtype`` arg writes, lower-cased (`proftab.dtypes`)
DTYPE_BYTES = bytes_of(COLLECTIVE_DTYPE_NAMES)
#: collective name (normalized: lower-case, no underscores, no "_base"/"_coalesced") -> (kind, bus factor kind)
_KINDS = {
    "allreduce": "allreduce", "allgather": "allgather", "allgatherintocoalesced": "allgather",
    "allgatherbase": "allgather", "reducescatter": "reducescatter", "reducescatterbase": "reducescatter",
    "reducescattertensorcoalesced": "reducescatter", "alltoall": "alltoall", "alltoallv": "alltoall",
    "alltoallbase": "alltoall", "broadcast": "broadcast", "reduce": "reduce", "send": "sendrecv",
    "recv": "sendrecv", "sendrecv": "sendrecv", "gather": "gather", "scatter": "scatter", "barrier": "barrier",
}
_KERNEL_KINDS = [("AllReduce", "allreduce"), ("AllGather", "allgather"), ("ReduceScatter", "reducescatter"),
                 ("AllToAll", "alltoall"), ("Broadcast", "broadcast"), ("SendRecv", "sendrecv"),
                 ("Reduce", "reduce")]

_LONG_COLUMNS = ["rank", "group", "group_ranks", "seq", "collective", "name", "source", "dtype", "in_nelems",
                 "out_nelems", "group_size", "tid", "start_ns", "end_ns", "dur_ns"]


def _kind_expr(col: pl.Expr) -> pl.Expr:
    norm = col.str.to_lowercase().str.replace_all(r"[_\s]", "")
    return norm.replace_strict(_KINDS, default=None, return_dtype=pl.String)


def _kernel_kind(name: pl.Expr) -> pl.Expr:
    expr = pl.lit(None, pl.String)
    for pat, kind in reversed(_KERNEL_KINDS):
        expr = pl.when(name.str.contains(pat, literal=True)).then(pl.lit(kind)).otherwise(expr)
    return expr


def _col(events: pl.DataFrame, name: str, dtype: pl.DataType) -> pl.Expr:
    return pl.col(name) if name in events.columns else pl.lit(None, dtype).alias(name)


def _kernel_rows(events: pl.DataFrame, pattern: str) -> pl.DataFrame:
    cat = pl.col("cat").cast(pl.String)
    k = events.filter(cat.is_in(_KERNEL_CATS) & pl.col("name").str.contains(pattern))
    named = _col(events, "collective_name", pl.String())
    return k.select(
        "rank", _col(events, "process_group_name", pl.String()).alias("group"),
        _col(events, "process_group_ranks", pl.String()).alias("group_ranks"),
        _col(events, "seq", pl.Int64()).alias("seq"),
        pl.coalesce(_kind_expr(named), _kernel_kind(pl.col("name"))).alias("collective"),
        "name", pl.lit("kernel").alias("source"), _col(events, "dtype", pl.String()).alias("dtype"),
        _col(events, "in_msg_nelems", pl.Int64()).alias("in_nelems"),
        _col(events, "out_msg_nelems", pl.Int64()).alias("out_nelems"),
        _col(events, "group_size", pl.Int64()).alias("group_size"), "tid", "start_ns", "end_ns", "dur_ns")


def _first_input(dims_json: list[str | None], types_json: list[str | None]) -> tuple[list[int | None],
                                                                                        list[str | None]]:
    """Elements and dtype of the first tensor input of each gloo range (its JSON args)."""
    n_out: list[int | None] = []
    t_out: list[str | None] = []
    cache: dict[tuple[str | None, str | None], tuple[int | None, str | None]] = {}
    for dj, tj in zip(dims_json, types_json, strict=True):
        key = (dj, tj)
        if key not in cache:
            n: int | None = None
            t: str | None = None
            try:
                dims = json.loads(dj) if dj else []
                types = json.loads(tj) if tj else []
                if dims and isinstance(dims[0], list):
                    n = int(np.prod(dims[0])) if dims[0] else 1
                if types and isinstance(types[0], str) and types[0]:
                    t = types[0]
            except (ValueError, TypeError):
                pass
            cache[key] = (n, t)
        n, t = cache[key]
        n_out.append(n)
        t_out.append(t)
    return n_out, t_out


def _gloo_rows(events: pl.DataFrame, threads_per_group: int) -> pl.DataFrame:
    cat = pl.col("cat").cast(pl.String)
    g = events.filter(pl.col("name").str.starts_with(_GLOO_PREFIX) & (cat == kinds.USER_ANNOTATION))
    if g.height == 0:
        return pl.DataFrame(schema=_calls_schema(False))
    dims = g["input_dims"].to_list() if "input_dims" in g.columns else [None] * g.height
    types = g["input_type"].to_list() if "input_type" in g.columns else [None] * g.height
    nelems, dtypes = _first_input(dims, types)
    # a rank's gloo threads sorted by id, `threads_per_group` at a time: its groups in creation order
    threads = (g.select("rank", "tid").unique().sort("rank", "tid")
               .with_columns(group=pl.lit("gloo#") + (pl.int_range(pl.len()).over("rank") // threads_per_group)
                             .cast(pl.String)))
    g = g.with_columns(pl.Series("in_nelems", nelems, pl.Int64), pl.Series("dtype", dtypes, pl.String),
                       collective=_kind_expr(pl.col("name").str.strip_prefix(_GLOO_PREFIX)))
    g = g.join(threads, on=["rank", "tid"], how="left")
    return g.select("rank", "group", pl.lit(None, pl.String).alias("group_ranks"), pl.lit(None, pl.Int64).alias("seq"),
                    "collective", "name", pl.lit("host").alias("source"), "dtype", "in_nelems",
                    pl.lit(None, pl.Int64).alias("out_nelems"), pl.lit(None, pl.Int64).alias("group_size"),
                    "tid", "start_ns", "end_ns", "dur_ns")


def _calls_schema(full: bool = True) -> pl.Schema:
    s: dict[str, pl.DataType] = {c: pl.String() for c in _LONG_COLUMNS}
    for c in ("seq", "in_nelems", "out_nelems", "group_size", "tid", "start_ns", "end_ns", "dur_ns"):
        s[c] = pl.Int64()
    s["rank"] = pl.Int32()
    if full:
        s |= {"step": pl.Int64(), "pre_ns": pl.Int64(), "data_ns": pl.Int64()}
    return pl.Schema(s)


def rank_calls(events: pl.DataFrame, *, pattern: str = COLLECTIVE_PATTERN, threads_per_group: int = 2
               ) -> pl.DataFrame:
    """Each rank's collective calls, from that rank's events alone (a mergeable per-rank summary).

    Parameters
    ----------
    events
        Events with ``rank``, ``cat``, ``name``, ``tid``, ``start_ns``, ``end_ns``, ``dur_ns`` and
        the typed collective args (``collective_name``, ``process_group_name``, ...) when present.
    pattern
        Regex of collective kernel names.
    threads_per_group
        gloo worker threads per process group (torch's default is 2).

    Returns
    -------
    polars.DataFrame
        ``rank``, ``group`` (``"?"`` when unknown), ``group_ranks``, ``seq`` (the ``Seq`` arg, else
        the call's position in its group on this rank), ``collective``, ``name``, ``source``
        (kernel / host), ``dtype``, ``in_nelems``, ``out_nelems``, ``group_size``, ``tid``,
        ``start_ns``, ``end_ns``, ``dur_ns`` (the rank's clock), ``step``, ``pre_ns`` (time
        from the end of the rank's previous collective, or from its step's start, to this
        call), ``data_ns`` (the part of that window in data-loading ranges, `DATA_PATTERN`).
    """
    kern = _kernel_rows(events, pattern)
    have_kernels = kern["rank"].unique()
    host = _gloo_rows(events.filter(~pl.col("rank").is_in(have_kernels.implode())), threads_per_group)
    base = _calls_schema(False)
    rows = pl.concat([kern.cast(base), host.cast(base)], how="vertical")
    rows = rows.with_columns(pl.col("group").fill_null("?"))
    order = pl.int_range(pl.len()).over(["rank", "group"], order_by=["start_ns", "end_ns"]).cast(pl.Int64)
    rows = rows.with_columns(seq=pl.coalesce("seq", order))
    windows = step_windows(events)
    rows = assign_steps(rows, windows)
    rows = _pre_windows(rows, windows, events)
    full = _calls_schema()
    return rows.select(list(full)).cast(full).sort("rank", "start_ns")


def _pre_windows(r: pl.DataFrame, windows: pl.DataFrame, events: pl.DataFrame) -> pl.DataFrame:
    """`pre_ns` / `data_ns` of each call (see `rank_calls`)."""
    r = r.with_row_index("_pos").sort("rank", "start_ns").with_columns(
        prev_end=pl.col("end_ns").cum_max().shift(1).over("rank"))
    steps = windows.select("rank", pl.col("start_ns").alias("_s0"))
    r = r.join_asof(steps.sort("rank", "_s0"), left_on="start_ns", right_on="_s0", by="rank", strategy="backward",
                    check_sortedness=False)
    first_of_step = pl.col("_s0").is_not_null() & (pl.col("prev_end").is_null() | (pl.col("prev_end") < pl.col("_s0")))
    r = r.with_columns(win0=pl.when(first_of_step).then(pl.col("_s0")).otherwise(pl.col("prev_end")))
    r = r.with_columns(pre_ns=(pl.col("start_ns") - pl.col("win0")).clip(lower_bound=0))
    data = events.filter(pl.col("name").str.contains(DATA_PATTERN)).select(
        "rank", pl.col("start_ns").alias("_d0"), pl.col("end_ns").alias("_d1"))
    win = r.select("rank", "_pos", "win0", "start_ns").filter(pl.col("win0").is_not_null())
    pairs = win.join(data, on="rank").filter((pl.col("_d1") > pl.col("win0")) & (pl.col("_d0") < pl.col("start_ns")))
    dsum = pairs.group_by("_pos").agg(
        (pl.min_horizontal("_d1", "start_ns") - pl.max_horizontal("_d0", "win0")).sum().alias("data_ns"))
    r = r.join(dsum, on="_pos", how="left").with_columns(
        pl.when(pl.col("pre_ns").is_not_null()).then(pl.col("data_ns").fill_null(0)).alias("data_ns"))
    return r.sort("_pos").drop("_pos", "prev_end", "_s0", "win0")


def match_calls(calls: pl.DataFrame, files: pl.DataFrame, *, offsets_ns: Mapping[int, int] | None = None
                ) -> pl.DataFrame:
    """`rank_calls` of several ranks matched by ``(group, seq)``, with absolute times.

    A gloo group's members are the ranks that have it; its ``group_size`` is their number and
    an all-gather's output (reduce-scatter's) is ``group_size`` times (1/``group_size`` of) its input.

    Returns
    -------
    polars.DataFrame
        `collective_ranks`' table.
    """
    gloo = pl.col("group").str.starts_with("gloo#")
    members = (calls.filter(gloo).group_by("group").agg(pl.col("rank").unique().sort())
               .with_columns(_granks=pl.lit("[") + pl.col("rank").cast(pl.List(pl.String)).list.join(", ")
                             + pl.lit("]"), _gsize=pl.col("rank").list.len().cast(pl.Int64)).drop("rank"))
    c = calls.join(members, on="group", how="left").with_columns(
        group_ranks=pl.coalesce("group_ranks", "_granks"), group_size=pl.coalesce("group_size", "_gsize"))
    out_n = (pl.when(pl.col("collective") == "allgather").then(pl.col("in_nelems") * pl.col("group_size"))
             .when(pl.col("collective") == "reducescatter").then(pl.col("in_nelems") // pl.col("group_size"))
             .otherwise(pl.col("in_nelems")))
    c = c.with_columns(out_nelems=pl.when(gloo).then(out_n).otherwise(pl.col("out_nelems")))
    c = with_utc_frame(c, files, offsets_ns=offsets_ns).with_columns(
        abs_start_ns=pl.col("start_utc").cast(pl.Int64), abs_end_ns=pl.col("end_utc").cast(pl.Int64))
    return c.select("group", "seq", "rank", "collective", "name", "source", "dtype", "in_nelems", "out_nelems",
                    "group_size", "group_ranks", "tid", "start_ns", "end_ns", "dur_ns", "abs_start_ns",
                    "abs_end_ns", "step", "pre_ns", "data_ns").sort("group", "seq", "rank")


def collective_ranks(events: pl.DataFrame, files: pl.DataFrame, *, offsets_ns: Mapping[int, int] | None = None,
                     pattern: str = COLLECTIVE_PATTERN, threads_per_group: int = 2) -> pl.DataFrame:
    """One row per (collective instance, rank): the rank's call, matched by group and sequence.

    ``match_calls(rank_calls(events), files)``.

    Parameters
    ----------
    events, pattern, threads_per_group
        As for `rank_calls`.
    files
        The `files` table (each rank's time base).
    offsets_ns
        Per-rank clock offsets added to absolute times.

    Returns
    -------
    polars.DataFrame
        ``group``, ``seq``, ``rank``, ``collective`` (allreduce, allgather, reducescatter,
        alltoall, broadcast, reduce, sendrecv, ...), ``name``, ``source`` (kernel / host),
        ``dtype``, ``in_nelems``, ``out_nelems``, ``group_size``, ``group_ranks``, ``tid``,
        ``start_ns``, ``end_ns``, ``dur_ns``, ``abs_start_ns``, ``abs_end_ns``, ``step``,
        ``pre_ns``, ``data_ns``; sorted by group, seq, rank.
    """
    calls = rank_calls(events, pattern=pattern, threads_per_group=threads_per_group)
    return match_calls(calls, files, offsets_ns=offsets_ns)


def _bus_factor(kind: pl.Expr, n: pl.Expr) -> pl.Expr:
    nf = n.cast(pl.Float64)
    return (pl.when(kind == "allreduce").then(2 * (nf - 1) / nf)
            .when(kind.is_in(["allgather", "reducescatter", "alltoall"])).then((nf - 1) / nf)
            .when(kind.is_in(["broadcast", "reduce", "sendrecv"])).then(pl.lit(1.0))
            .otherwise(None))


def collective_instances(ranks: pl.DataFrame) -> pl.DataFrame:
    """One row per collective instance, from `collective_ranks`' table.

    Returns
    -------
    polars.DataFrame
        ``group``, ``seq``, ``collective``, ``consistent`` (every rank called the same
        collective with the same sizes), ``n_ranks``, ``group_size``, ``dtype``, ``in_nelems``,
        ``out_nelems``, ``bytes``, ``step`` (of the lowest rank), ``first_start_ns`` /
        ``last_start_ns`` (absolute epoch ns), ``start_skew_ns``, ``end_skew_ns``,
        ``first_rank``, ``last_rank`` (the straggler of this instance), ``transfer_ns``,
        ``max_dur_ns``, ``wait_ns`` (sum over ranks), ``algbw_gb_per_s``, ``busbw_gb_per_s``,
        ``pre_excess_ns`` (how much longer the last rank's ``pre_ns`` was than the other
        ranks' median), ``data_excess_ns`` (the same for ``data_ns``), ``cause`` (``"data
        loading"`` when ``data_excess_ns`` is at least half the arrival skew, else ``"compute
        before the collective"`` when ``pre_excess_ns`` is, else null); sorted by first start.
    """
    keys = ["group", "seq"]
    elem = pl.col("dtype").str.to_lowercase().replace_strict(DTYPE_BYTES, default=None, return_dtype=pl.Int64)
    last = pl.col("rank").sort_by("abs_start_ns", "rank", descending=[True, False]).first().over(keys)
    r = ranks.with_columns(_bytes=pl.max_horizontal("in_nelems", "out_nelems") * elem, _last=pl.col("rank") == last)
    inst = (
        r.sort([*keys, "rank"]).group_by(keys, maintain_order=True).agg(
            pl.col("collective").first(),
            ((pl.col("collective").n_unique() == 1) & (pl.col("in_nelems").n_unique() == 1)
             & (pl.col("dtype").n_unique() == 1)).alias("consistent"),
            pl.len().cast(pl.Int64).alias("n_ranks"),
            pl.col("group_size").max(), pl.col("dtype").first(), pl.col("in_nelems").first(),
            pl.col("out_nelems").first(), pl.col("_bytes").max().alias("bytes"), pl.col("step").first(),
            pl.col("abs_start_ns").min().alias("first_start_ns"), pl.col("abs_start_ns").max().alias("last_start_ns"),
            (pl.col("abs_end_ns").max() - pl.col("abs_end_ns").min()).alias("end_skew_ns"),
            pl.col("rank").sort_by("abs_start_ns", "rank").first().alias("first_rank"),
            pl.col("rank").filter(pl.col("_last")).first().alias("last_rank"),
            pl.col("dur_ns").min().alias("transfer_ns"), pl.col("dur_ns").max().alias("max_dur_ns"),
            (pl.col("dur_ns") - pl.col("dur_ns").min()).sum().alias("wait_ns"),
            (pl.col("pre_ns").filter(pl.col("_last")).first()
             - pl.col("pre_ns").filter(~pl.col("_last")).median()).cast(pl.Int64).alias("pre_excess_ns"),
            (pl.col("data_ns").filter(pl.col("_last")).first()
             - pl.col("data_ns").filter(~pl.col("_last")).median()).cast(pl.Int64).alias("data_excess_ns"),
        )
        .with_columns(start_skew_ns=pl.col("last_start_ns") - pl.col("first_start_ns"),
                      group_size=pl.col("group_size").fill_null(pl.col("n_ranks")))
    )
    algbw = pl.when(pl.col("transfer_ns") > 0).then(pl.col("bytes") / pl.col("transfer_ns"))
    inst = inst.with_columns(algbw_gb_per_s=algbw).with_columns(
        busbw_gb_per_s=pl.col("algbw_gb_per_s") * _bus_factor(pl.col("collective"), pl.col("group_size")))
    skew = pl.col("start_skew_ns")
    cause = (pl.when((pl.col("data_excess_ns") > 0) & (2 * pl.col("data_excess_ns") >= skew))
             .then(pl.lit("data loading"))
             .when((pl.col("pre_excess_ns") > 0) & (2 * pl.col("pre_excess_ns") >= skew))
             .then(pl.lit("compute before the collective")).otherwise(None))
    inst = inst.with_columns(cause=pl.when(pl.col("n_ranks") > 1).then(cause))
    return inst.select(
        "group", "seq", "collective", "consistent", "n_ranks", "group_size", "dtype", "in_nelems", "out_nelems",
        "bytes", "step", "first_start_ns", "last_start_ns", "start_skew_ns", "end_skew_ns", "first_rank",
        "last_rank", "transfer_ns", "max_dur_ns", "wait_ns", "algbw_gb_per_s", "busbw_gb_per_s", "pre_excess_ns",
        "data_excess_ns", "cause").sort("first_start_ns", "group", "seq")


def rank_comm(calls: pl.DataFrame, events: pl.DataFrame) -> pl.DataFrame:
    """Per rank and step: communication time and its part not hidden by compute (per-rank summary).

    Parameters
    ----------
    calls
        `rank_calls` of these events.
    events
        The events (``rank``, ``cat``, ``name``, ``tid``, ``start_ns``, ``end_ns``): the
        compute that can hide communication is device work (kernel/memcpy/memset) that is not
        a collective on GPU ranks, and on host-only ranks the host ops (``cpu_op``) of the
        threads that run no collective (``c10d::*`` and waits excluded).

    Returns
    -------
    polars.DataFrame
        ``rank``, ``step``, ``n_collectives``, ``comm_ns`` (sum of call durations),
        ``comm_union_ns``, ``exposed_ns`` (communication time with no compute running);
        sorted by rank, step.
    """
    from proftab.intervals import merge_intervals
    from proftab.joins import overlaps

    keys = ["rank", "step"]
    base = calls.group_by(keys).agg(pl.len().cast(pl.Int64).alias("n_collectives"),
                                    pl.col("dur_ns").sum().alias("comm_ns"))
    kern_ranks = calls.filter(pl.col("source") == "kernel")["rank"].unique().implode()
    comm_tids = calls.filter(pl.col("source") == "host").select("rank", "tid").unique()
    dev = events.filter(kinds.is_device_work() & pl.col("rank").is_in(kern_ranks)
                        & ~pl.col("name").str.contains(COLLECTIVE_PATTERN))
    host = events.filter((pl.col("cat").cast(pl.String) == kinds.CPU_OP) & ~pl.col("rank").is_in(kern_ranks)).join(
        comm_tids, on=["rank", "tid"], how="anti").filter(
        ~is_collective_range(prefixes=(C10D_PREFIX, GLOO_PREFIX)) & ~pl.col("name").str.contains("wait"))
    comp = pl.concat([dev.select("rank", "start_ns", "end_ns"), host.select("rank", "start_ns", "end_ns")])
    comp = assign_steps(comp, step_windows(events))
    uc = merge_intervals(calls.select("rank", "step", "start_ns", "end_ns"), by=keys)
    uk = merge_intervals(comp, by=keys)
    union = uc.group_by(keys).agg((pl.col("end_ns") - pl.col("start_ns")).sum().alias("comm_union_ns"))
    both = overlaps(uc, uk, by="rank")
    assert isinstance(both, pl.DataFrame)
    over = both.filter(pl.col("step").eq_missing(pl.col("step_right"))).group_by(keys).agg(
        pl.col("overlap_ns").sum().alias("_over"))
    out = (base.join(union, on=keys, how="left", nulls_equal=True)
           .join(over, on=keys, how="left", nulls_equal=True)
           .with_columns(exposed_ns=pl.col("comm_union_ns") - pl.col("_over").fill_null(0)))
    return out.select("rank", "step", "n_collectives", "comm_ns", "comm_union_ns", "exposed_ns").sort(
        keys, nulls_last=True)


def rank_step_comm(ranks: pl.DataFrame, instances: pl.DataFrame, comm: pl.DataFrame) -> pl.DataFrame:
    """Per rank and step: communication, exposed part, waiting for the slowest rank, straggler, cause.

    Parameters
    ----------
    ranks
        `collective_ranks`' table.
    instances
        `collective_instances(ranks)`.
    comm
        `rank_comm` of the same ranks.

    Returns
    -------
    polars.DataFrame
        `rank_comm`'s columns plus ``wait_ns`` (sum of this rank's waits: duration minus the
        instance's transfer time), ``n_last_arrivals`` (instances this rank reached last, of
        those with 2+ ranks), ``delay_ns`` (sum of their arrival skews: how long the first
        rank waited for this one), ``straggler`` (this rank arrived last most often in the
        step; the lowest such rank), ``cause`` (the most frequent visible cause of its last
        arrivals, null when none); sorted by rank, step.
    """
    keys = ["rank", "step"]
    inst = instances.select("group", "seq", "transfer_ns", "last_rank", "n_ranks", "cause",
                            pl.col("start_skew_ns").alias("skew"))
    r = ranks.join(inst, on=["group", "seq"], how="left").with_columns(
        wait=pl.col("dur_ns") - pl.col("transfer_ns"),
        is_last=(pl.col("rank") == pl.col("last_rank")) & (pl.col("n_ranks") > 1))
    agg = r.group_by(keys).agg(
        pl.col("wait").sum().alias("wait_ns"), pl.col("is_last").sum().cast(pl.Int64).alias("n_last_arrivals"),
        pl.col("skew").filter(pl.col("is_last")).sum().alias("delay_ns"),
        pl.col("cause").filter(pl.col("is_last")).drop_nulls().mode().sort().first().alias("cause"))
    out = comm.join(agg, on=keys, how="left", nulls_equal=True)
    most = pl.col("n_last_arrivals").max().over("step")
    out = out.with_columns(straggler=(pl.col("n_last_arrivals") == most) & (most > 0)
                           & (pl.col("rank") == pl.col("rank").filter(pl.col("n_last_arrivals") == most).min()
                              .over("step")))
    return out.select("rank", "step", "n_collectives", "comm_ns", "comm_union_ns", "exposed_ns", "wait_ns",
                      "n_last_arrivals", "delay_ns", "straggler", "cause").sort(keys, nulls_last=True)
