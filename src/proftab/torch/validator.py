"""torch's own trace validator (`torch.profiler._trace_validator`, torch 2.13 and 2.14), in exact ns.

torch's `validate_trace(path)` checks six rules derived from production issues and returns
messages; `torch_validator(events)` reports the same violations as rows (the events, their ns
times and the gap), vectorized over the events table. The rules, restated from torch's source:

* `gpu_kernel_causality`: per `External id`, the earliest `kernel` must not start before the
  earliest `cudaLaunchKernel` (`cuda_runtime`) of that id;
* `stream_wait_corr_id_populated`: a `Stream Wait Event` / `Event Sync` (`cuda_sync_kind`)
  needs `wait_on_cuda_event_record_corr_id >= 0`;
* `stream_sync_overlap`: no kernel on the (device, stream) of a `Stream Sync` may be running at
  the sync's start (`kernel.start < sync.start < kernel.end`): one row per (sync, kernel);
* `stream_wait_corr_id_in_past`: a `Stream Wait Event`'s `wait_on_cuda_event_record_corr_id`
  must name a `cudaEventRecord*` (`cuda_runtime`/`cuda_driver`, by `External id` or
  `correlation`, the earliest) that starts at or before it;
* `nccl_metadata`: `record_param_comms` needs `Collective name`, `dtype`, `In msg nelems`,
  `Out msg nelems` and `Group size`;
* `backward_seq_id_uniqueness`: per `Sequence number`, one backward op name
  (`autograd::engine::evaluate_function: X`) per file.

Where proftab is stricter, it says so: times are compared in exact ns (torch compares float µs,
which can make two different times equal); a `Sequence number` of 0 is checked (torch's
`args.get("Sequence number") or ...` skips it); an arg present with a null value counts as
missing. So every violation torch reports is a row here, and there can be more.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

from proftab import kinds
from proftab.api import register_trace_method
from proftab.calls import EVENT_RECORD, KERNEL_LAUNCH, RECORD_PARAM_COMMS
from proftab.intervals.overlap import overlap_join

if TYPE_CHECKING:
    from proftab.trace import Trace

__all__ = ["TORCH_VALIDATOR_COLUMNS", "TORCH_VALIDATOR_RULES", "VALIDATOR_EVENT_COLUMNS", "torch_validator"]

#: torch's rule names (its functions are `_check_<name>`), in torch's order
TORCH_VALIDATOR_RULES = (
    "gpu_kernel_causality", "stream_wait_corr_id_populated", "stream_sync_overlap",
    "stream_wait_corr_id_in_past", "nccl_metadata", "backward_seq_id_uniqueness",
)
#: one row per violation
TORCH_VALIDATOR_COLUMNS = ("rule", "rank", "event_id", "name", "start_ns", "other_event_id", "other_name",
                           "other_start_ns", "gap_ns", "detail")
#: the events columns the rules read
VALIDATOR_EVENT_COLUMNS = ("rank", "event_id", "cat", "name", "start_ns", "end_ns", "external_id", "correlation",
                           "stream", "device", "sequence_number", "collective_name", "dtype", "in_msg_nelems",
                           "out_msg_nelems", "group_size", "args")
_SCHEMA = {"rule": pl.String, "rank": pl.Int32, "event_id": pl.Int64, "name": pl.String, "start_ns": pl.Int64,
           "other_event_id": pl.Int64, "other_name": pl.String, "other_start_ns": pl.Int64, "gap_ns": pl.Int64,
           "detail": pl.String}
#: torch's rule names CUDA's event records and their `_ptsz` variants exactly (`proftab.calls.EVENT_RECORD`)
_EVENT_RECORDS = tuple(n + s for n in EVENT_RECORD.spellings(("cuda",)) for s in ("", "_ptsz"))
#: torch's causality rule names the one launch call (not the whole `proftab.calls.KERNEL_LAUNCH` family)
_LAUNCH_KERNEL = KERNEL_LAUNCH.spellings(("cuda",))[0]
_NCCL_FIELDS = {"collective_name": "Collective name", "dtype": "dtype", "in_msg_nelems": "In msg nelems",
                "out_msg_nelems": "Out msg nelems", "group_size": "Group size"}
#: torch's rule tests the backward op's prefix without its trailing space (`kinds.BACKWARD_OP_PREFIX`)
_EVALUATE = kinds.BACKWARD_OP_PREFIX.rstrip()


def _rows(frame: pl.DataFrame, rule: str, **exprs: pl.Expr) -> pl.DataFrame:
    cols = [pl.lit(rule).alias("rule"), *(exprs.get(c, pl.col(c) if c in frame.columns else pl.lit(None)).cast(t)
                                          .alias(c) for c, t in _SCHEMA.items() if c != "rule")]
    return frame.select(cols)


def _earliest(frame: pl.DataFrame, by: list[str]) -> pl.DataFrame:
    """Per key the first row of the earliest start (file order breaks ties, as torch's strict `<`)."""
    return frame.sort([*by, "start_ns", "event_id"]).unique(by, keep="first", maintain_order=True)


def _causality(ev: pl.DataFrame) -> pl.DataFrame:
    ids = ev.filter(pl.col("external_id").is_not_null())
    launch = _earliest(ids.filter((pl.col("cat") == kinds.CUDA_RUNTIME) & (pl.col("name") == _LAUNCH_KERNEL)),
                       ["rank", "external_id"])
    kernel = _earliest(ids.filter(pl.col("cat") == kinds.KERNEL), ["rank", "external_id"])
    bad = kernel.join(launch.select("rank", "external_id", pl.col("event_id").alias("l_id"),
                                    pl.col("name").alias("l_name"), pl.col("start_ns").alias("l_start")),
                      on=["rank", "external_id"]).filter(pl.col("start_ns") < pl.col("l_start"))
    return _rows(bad, "gpu_kernel_causality", other_event_id=pl.col("l_id"), other_name=pl.col("l_name"),
                 other_start_ns=pl.col("l_start"), gap_ns=pl.col("l_start") - pl.col("start_ns"),
                 detail=pl.format("kernel starts before its cudaLaunchKernel (External id {})", "external_id"))


def _sync_events(ev: pl.DataFrame) -> pl.DataFrame:
    """Events with a `cuda_sync_kind` arg, with it and `wait_on_cuda_event_record_corr_id`."""
    has = ev.filter(pl.col("args").str.contains("cuda_sync_kind", literal=True).fill_null(False))
    return has.with_columns(
        pl.col("args").str.json_path_match("$.cuda_sync_kind").alias("_kind"),
        pl.col("args").str.json_path_match("$.wait_on_cuda_event_record_corr_id").cast(pl.Int64, strict=False)
        .alias("_ref"))


def _wait_populated(sync: pl.DataFrame) -> pl.DataFrame:
    bad = sync.filter(pl.col("_kind").is_in(["Stream Wait Event", "Event Sync"])
                      & (pl.col("_ref").is_null() | (pl.col("_ref") < 0)))
    return _rows(bad, "stream_wait_corr_id_populated",
                 detail=pl.format("'{}' on device {} stream {} has no wait_on_cuda_event_record_corr_id >= 0",
                                  "_kind", pl.col("device").cast(pl.String).fill_null("None"),
                                  pl.col("stream").cast(pl.String).fill_null("None")))


def _sync_overlap(ev: pl.DataFrame, sync: pl.DataFrame) -> pl.DataFrame:
    syncs = sync.filter((pl.col("cat") == kinds.CUDA_SYNC) & (pl.col("_kind") == "Stream Sync")).select(
        "rank", "event_id", "name", "start_ns", pl.col("start_ns").alias("_at"), pl.col("start_ns").alias("_at_end"),
        "device", "stream")
    kernels = ev.filter(pl.col("cat") == kinds.KERNEL).select(
        "rank", "device", "stream", pl.col("event_id").alias("k_id"), pl.col("name").alias("k_name"),
        pl.col("start_ns").alias("k_start"), pl.col("end_ns").alias("k_end"))
    if syncs.is_empty() or kernels.is_empty():
        return pl.DataFrame(schema={"rule": pl.String, **{c: t for c, t in _SCHEMA.items() if c != "rule"}})
    pairs = overlap_join(syncs, kernels, by=["rank", "device", "stream"], left_on=("_at", "_at_end"),
                         right_on=("k_start", "k_end")).filter(pl.col("k_start") < pl.col("start_ns"))
    return _rows(pairs, "stream_sync_overlap", other_event_id=pl.col("k_id"), other_name=pl.col("k_name"),
                 other_start_ns=pl.col("k_start"), gap_ns=pl.col("k_end") - pl.col("start_ns"),
                 detail=pl.format("Stream Sync on device {} stream {} while the kernel runs",
                                  pl.col("device").cast(pl.String).fill_null("None"),
                                  pl.col("stream").cast(pl.String).fill_null("None")))


def _wait_in_past(ev: pl.DataFrame, sync: pl.DataFrame) -> pl.DataFrame:
    records = ev.filter(pl.col("cat").is_in([kinds.CUDA_RUNTIME, kinds.CUDA_DRIVER])
                        & pl.col("name").is_in(_EVENT_RECORDS))
    ids = pl.concat([records.select("rank", pl.col(c).alias("_ref"), "event_id", "name", "start_ns")
                     for c in ("external_id", "correlation")]).drop_nulls("_ref")
    first = _earliest(ids, ["rank", "_ref"]).select(
        "rank", "_ref", pl.col("event_id").alias("r_id"), pl.col("name").alias("r_name"),
        pl.col("start_ns").alias("r_start"))
    waits = sync.filter((pl.col("_kind") == "Stream Wait Event") & (pl.col("_ref") >= 0))
    got = waits.join(first, on=["rank", "_ref"], how="left")
    bad = got.filter(pl.col("r_start").is_null() | (pl.col("r_start") > pl.col("start_ns")))
    return _rows(bad, "stream_wait_corr_id_in_past", other_event_id=pl.col("r_id"), other_name=pl.col("r_name"),
                 other_start_ns=pl.col("r_start"), gap_ns=pl.col("r_start") - pl.col("start_ns"),
                 detail=pl.when(pl.col("r_start").is_null())
                 .then(pl.format("references corr_id {} but no cudaEventRecord has it", "_ref"))
                 .otherwise(pl.format("references a cudaEventRecord (corr_id {}) that starts later", "_ref")))


def _nccl(ev: pl.DataFrame) -> pl.DataFrame:
    comms = ev.filter(pl.col("name") == RECORD_PARAM_COMMS)
    missing = pl.concat_list([pl.when(pl.col(c).is_null()).then(pl.lit(arg)) for c, arg in _NCCL_FIELDS.items()]
                             ).list.drop_nulls()
    bad = comms.with_columns(missing.alias("_missing")).filter(pl.col("_missing").list.len() > 0)
    return _rows(bad, "nccl_metadata",
                 detail=pl.lit("missing metadata: ") + pl.col("_missing").list.sort().list.join(", "))


def _backward_seq(ev: pl.DataFrame) -> pl.DataFrame:
    bw = ev.filter(pl.col("name").str.contains(_EVALUATE, literal=True).fill_null(False)
                   & pl.col("sequence_number").is_not_null())
    per_seq = (bw.sort("rank", "start_ns", "event_id").group_by("rank", "sequence_number", maintain_order=True)
               .agg(pl.col("name").unique(maintain_order=True).alias("_ops"), pl.col("event_id").first(),
                    pl.col("name").first(), pl.col("start_ns").first())
               .filter(pl.col("_ops").list.len() > 1))
    return _rows(per_seq, "backward_seq_id_uniqueness",
                 detail=pl.format("Sequence number {} shared by {} backward ops: {}", "sequence_number",
                                  pl.col("_ops").list.len(), pl.col("_ops").list.join(" | ")))


def torch_validator(events: pl.DataFrame) -> pl.DataFrame:
    """torch's `_trace_validator` rules over an events table: one row per violation.

    Parameters
    ----------
    events
        `Trace.events` (at least `VALIDATOR_EVENT_COLUMNS`; a missing one counts as all null).

    Returns
    -------
    pl.DataFrame
        `TORCH_VALIDATOR_COLUMNS`: the rule (`TORCH_VALIDATOR_RULES`), the event (rank,
        `event_id`, name, `start_ns`), the other event where the rule pairs two (the launch,
        the running kernel, the event record), `gap_ns` (how far the pair is out of order or
        overlaps) and a short detail; in torch's rule order.
    """
    missing = [c for c in VALIDATOR_EVENT_COLUMNS if c not in events.columns]
    ev = events.with_columns(pl.lit(None, pl.String if c in ("cat", "name", "args", "collective_name", "dtype")
                                    else pl.Int64).alias(c) for c in missing)
    ev = ev.select(*VALIDATOR_EVENT_COLUMNS).with_columns(pl.col("cat").cast(pl.String))
    sync = _sync_events(ev)
    parts = [_causality(ev), _wait_populated(sync), _sync_overlap(ev, sync), _wait_in_past(ev, sync), _nccl(ev),
             _backward_seq(ev)]
    return pl.concat([p.select(list(_SCHEMA)).cast(_SCHEMA) for p in parts])  # type: ignore[arg-type]


@register_trace_method("torch_validator")
def trace_torch_validator(trace: Trace) -> pl.DataFrame:
    """torch's `_trace_validator` violations of this trace (`torch_validator`), one row each."""
    present = set(trace.lazy("events").collect_schema().names())
    return torch_validator(trace.collect("events", [c for c in VALIDATOR_EVENT_COLUMNS if c in present]))
