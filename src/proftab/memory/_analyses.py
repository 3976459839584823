"""The peak and what holds it, per-step growth: free functions over the memory tables.

Inputs are `timeline(...)` and `allocations(...)` of `proftab.memory._core` (docs/memory.md).
"""

from __future__ import annotations

import polars as pl

from proftab.exceptions import UsageError
from proftab.memory._core import DEVICE_KEYS, checked_sum, fit_int64

__all__ = ["GROUPINGS", "growth", "live_at_peak", "peak", "peak_summary"]

#: what `peak(by=...)` and `growth(by=...)` can group the blocks by -> the allocations column
GROUPINGS = {"op": "alloc_op", "top_op": "alloc_top_op", "module": "module", "stack": "stack", "step": "step",
             "allocation": None}
_DEVICE = [*DEVICE_KEYS, "device_name"]


def peak_summary(tl: pl.DataFrame, allocs: pl.DataFrame) -> pl.DataFrame:
    """One row per device: when the allocated bytes peak and how much of it the window explains.

    Parameters
    ----------
    tl
        `timeline(mem)` (with `step` if the caller added it).
    allocs
        `allocations(mem, ...)`.

    Returns
    -------
    DataFrame
        `DEVICE_KEYS`, `device_name`, `peak_ns`, `peak_seq` (the first event at which `live_bytes`
        is largest), `peak_bytes`, `reserved_at_peak_bytes`, `max_reserved_bytes`, `initial_bytes` (live
        before the first event), `final_bytes`, `n_blocks_at_peak` and `in_window_bytes` (blocks
        allocated inside the window and live at the peak), `pre_window_bytes` (`peak_bytes -
        in_window_bytes`: allocated before the window, still live at the peak), `step` (of the
        peak event, if `tl` has steps), `n_events`. A trace without `Total Allocated` (torch <=
        1.9) has bytes relative to the window's start (`replayed_bytes`), and without `Addr` the
        three block columns are null.
    """
    extra = [pl.col("step").get(pl.col("live_bytes").arg_max()).alias("step")] if "step" in tl.columns else []
    summary = tl.sort([*DEVICE_KEYS, "seq"]).group_by(_DEVICE, maintain_order=True).agg(
        pl.col("start_ns").get(pl.col("live_bytes").arg_max()).alias("peak_ns"),
        pl.col("seq").get(pl.col("live_bytes").arg_max()).alias("peak_seq"),
        pl.col("live_bytes").max().alias("peak_bytes"),
        pl.col("reserved_bytes").get(pl.col("live_bytes").arg_max()).alias("reserved_at_peak_bytes"),
        pl.col("reserved_bytes").max().alias("max_reserved_bytes"),
        (pl.col("live_bytes").first() - pl.col("bytes").first()).alias("initial_bytes"),
        pl.col("live_bytes").last().alias("final_bytes"),
        *extra,
        pl.len().cast(pl.Int64).alias("n_events"),
        pl.col("addr").is_null().any().alias("_unpaired"),
    )
    held = live_at_peak(allocs.filter(pl.col("status") != "pre_window"), summary).group_by(DEVICE_KEYS).agg(
        pl.len().cast(pl.Int64).alias("n_blocks_at_peak"), checked_sum("bytes").alias("in_window_bytes"))
    # without addresses (torch <= 1.9) no block is known: what holds the peak is unknown
    known = ~pl.col("_unpaired")
    out = summary.join(held, on=DEVICE_KEYS, how="left", maintain_order="left").with_columns(
        pl.when(known).then(pl.col("n_blocks_at_peak").fill_null(0)).alias("n_blocks_at_peak"),
        pl.when(known).then(pl.col("in_window_bytes").fill_null(0)).alias("in_window_bytes"))
    cols = ["peak_ns", "peak_seq", "peak_bytes", "reserved_at_peak_bytes", "max_reserved_bytes", "initial_bytes",
            "final_bytes", "n_blocks_at_peak", "in_window_bytes"]
    return out.select(*_DEVICE, *cols, (pl.col("peak_bytes") - pl.col("in_window_bytes")).alias("pre_window_bytes"),
                      *(["step"] if extra else []), "n_events")


def live_at_peak(allocs: pl.DataFrame, summary: pl.DataFrame) -> pl.DataFrame:
    """The blocks live just after each device's peak event (allocated at or before it, freed after)."""
    at = allocs.join(summary.select(*DEVICE_KEYS, "peak_seq", "peak_ns", "peak_bytes"), on=DEVICE_KEYS,
                     maintain_order="left")
    return at.filter((pl.col("alloc_seq").is_null() | (pl.col("alloc_seq") <= pl.col("peak_seq")))
                     & (pl.col("free_seq").is_null() | (pl.col("free_seq") > pl.col("peak_seq"))))


def _text_key(col: str, allocs: pl.DataFrame) -> pl.Expr:
    """`col` as text, for a deterministic order among equal bytes (a stack is joined)."""
    if isinstance(allocs.schema[col], pl.List):
        return pl.col(col).list.join(" <- ")
    return pl.col(col).cast(pl.String)


def _key(by: str, allocs: pl.DataFrame) -> str | None:
    if by not in GROUPINGS:
        msg = f"unknown grouping {by!r}; valid: {sorted(GROUPINGS)}"
        raise UsageError(msg)
    col = GROUPINGS[by]
    if col is not None and col not in allocs.columns:
        msg = f"grouping by {by!r} needs the {col!r} column of allocations()"
        raise UsageError(msg)
    return col


def peak(tl: pl.DataFrame, allocs: pl.DataFrame, by: str | None = None) -> pl.DataFrame:
    """The peak of each device (`by=None`: `peak_summary`), or what holds it (`by=...`).

    Parameters
    ----------
    tl, allocs
        `timeline(...)`, `allocations(...)`.
    by
        Group the blocks allocated inside the window and live at the peak by `"op"`
        (innermost allocating op), `"top_op"` (the outermost enclosing `cpu_op`), `"module"`,
        `"stack"`, `"step"`, or list every block (`"allocation"`).

    Returns
    -------
    DataFrame
        For `by`: `DEVICE_KEYS`, `device_name`, the key column, `bytes`, `blocks`, `share` (of
        the peak), `cumulative_share` (largest holders first: freeing the first k groups before
        the peak lowers it by at most their bytes), `peak_ns`, `peak_bytes`. The groups' bytes add
        up to the summary's `in_window_bytes`.
    """
    summary = peak_summary(tl, allocs)
    if by is None:
        return summary
    col = _key(by, allocs)
    live = live_at_peak(allocs.filter(pl.col("status") != "pre_window"), summary)
    share = (pl.col("bytes") / pl.col("peak_bytes"))
    if col is None:
        rows = live.with_columns(pl.lit(1, pl.Int64).alias("blocks"))
        keys: list[str] = []
    else:
        keys = [col]
        rows = live.group_by([*_DEVICE, col, "peak_ns", "peak_bytes"]).agg(
            checked_sum("bytes"), pl.len().cast(pl.Int64).alias("blocks"))
    order = [*DEVICE_KEYS, "bytes", *([] if col is None else [_text_key(col, allocs)])]
    rows = rows.sort(order, descending=[False] * len(DEVICE_KEYS) + [True] + [False] * (len(order) - 4),
                     nulls_last=True)
    running = fit_int64(pl.col("bytes").cast(pl.Int128).cum_sum().over(DEVICE_KEYS))
    rows = rows.with_columns(share=share, cumulative_share=running / pl.col("peak_bytes"))
    front = [*_DEVICE, *keys] if col is not None else [*_DEVICE, "addr", "alloc_ns", "free_ns", "alloc_op",
                                                        *(c for c in ("alloc_top_op", "module", "stack", "step")
                                                          if c in rows.columns)]
    return rows.select(*front, "bytes", "blocks", "share", "cumulative_share", "peak_ns", "peak_bytes")


def growth(allocs: pl.DataFrame, windows: pl.DataFrame, by: str | None = None) -> pl.DataFrame:
    """Per step and device: bytes allocated in the step and still held at its end (leak candidates).

    Parameters
    ----------
    allocs
        `allocations(mem, ops, windows)` (with `step`, `free_step`).
    windows
        `proftab.steps.step_windows(events)`.
    by
        `None`: one row per (device, step); `"op"`, `"top_op"`, `"module"`, `"stack"`: the
        retained bytes of each step split by the allocating op / module / stack.

    Returns
    -------
    DataFrame
        `DEVICE_KEYS`, `device_name`, `step`, `step_start_ns`, `step_end_ns`, then for
        `by=None`: `allocated_bytes`, `n_allocations`, `freed_bytes` (blocks freed in the step,
        whenever allocated), `net_bytes` (`allocated - freed`: the change of the allocated
        bytes over the step), `retained_bytes` / `n_retained_blocks` (allocated in the step, not
        freed before its end), `never_freed_bytes` (retained and never freed in the window);
        for `by=...`: the key column, `retained_bytes`, `n_retained_blocks`, `never_freed_bytes`,
        largest first.
    """
    if "step" not in allocs.columns:
        msg = "growth needs allocations() with steps (pass the step windows)"
        raise UsageError(msg)
    w = windows.select("rank", "step", pl.col("start_ns").alias("step_start_ns"),
                       pl.col("end_ns").alias("step_end_ns"))
    stepped = allocs.filter(pl.col("step").is_not_null()).join(w, on=["rank", "step"], maintain_order="left")
    retained = pl.col("free_ns").is_null() | (pl.col("free_ns") >= pl.col("step_end_ns"))
    never = pl.col("free_ns").is_null()
    if by is not None:
        col = _key(by, allocs)
        if col is None or col == "step":
            msg = f"growth groups by 'op', 'top_op', 'module' or 'stack', not {by!r}"
            raise UsageError(msg)
        kept = stepped.filter(retained)
        out = kept.group_by([*_DEVICE, "step", "step_start_ns", "step_end_ns", col]).agg(
            checked_sum("bytes").alias("retained_bytes"), pl.len().cast(pl.Int64).alias("n_retained_blocks"),
            fit_int64(pl.col("bytes").filter(never).cast(pl.Int128).sum()).alias("never_freed_bytes"))
        return out.sort([*DEVICE_KEYS, "step", "retained_bytes", _text_key(col, allocs)],
                        descending=[False, False, False, False, True, False], nulls_last=True)
    made = stepped.group_by([*_DEVICE, "step", "step_start_ns", "step_end_ns"]).agg(
        checked_sum("bytes").alias("allocated_bytes"), pl.len().cast(pl.Int64).alias("n_allocations"),
        fit_int64(pl.col("bytes").filter(retained).cast(pl.Int128).sum()).alias("retained_bytes"),
        retained.sum().cast(pl.Int64).alias("n_retained_blocks"),
        fit_int64(pl.col("bytes").filter(never).cast(pl.Int128).sum()).alias("never_freed_bytes"))
    freed = allocs.filter(pl.col("free_step").is_not_null()).group_by([*_DEVICE, "free_step"]).agg(
        checked_sum("bytes").alias("freed_bytes")).rename({"free_step": "step"})
    devices = allocs.select(_DEVICE).unique()
    grid = devices.join(w, on="rank")
    out = grid.join(made.drop("step_start_ns", "step_end_ns"), on=[*_DEVICE, "step"], how="left") \
        .join(freed, on=[*_DEVICE, "step"], how="left")
    zero = ["allocated_bytes", "n_allocations", "retained_bytes", "n_retained_blocks", "never_freed_bytes",
            "freed_bytes"]
    out = out.with_columns(pl.col(c).fill_null(0) for c in zero).with_columns(
        net_bytes=pl.col("allocated_bytes") - pl.col("freed_bytes"))
    return out.select(*_DEVICE, "step", "step_start_ns", "step_end_ns", "allocated_bytes", "n_allocations",
                      "freed_bytes", "net_bytes", "retained_bytes", "n_retained_blocks", "never_freed_bytes"
                      ).sort([*DEVICE_KEYS, "step"])
