"""The rules that link device activities (kernels, memcpy, memset, syncs) to host ops, and what they read.

Rules (docs/device.md gives the reasons and the sources):

1. activity -> launch: the runtime/driver event (`cudaLaunchKernel`, `hipGraphLaunch`,
   `cuLaunchKernel`, `mtia_runtime` ...) with the same `(rank, correlation)`. One launch can
   own many activities (graph launches). When several launches share a correlation (nested
   runtime calls), the earliest is the launch.
2. launch -> op, by `External id`: the `cpu_op` (`Operator` in 2021 traces) of the same rank
   whose `External id` equals the launch's, accepted only when it is on the launch's thread
   and the launch starts inside it (`op.start <= launch.start <= op.end`). External ids are
   ignored for a rank where most launches carry their own correlation as `External id`
   (Kineto before 2024-02 wrote that; such ids collide with op ids, pytorch#124388).
3. otherwise by containment: the innermost `cpu_op` open at the launch's start on its thread
   (`containment`); failing that the innermost `user_annotation` (`annotation`).
1a. an activity replayed by a graph launch (`GRAPH_LAUNCH_PATTERN`) whose own `External id`
   names a host event inside the launch on its thread (the virtual ops of a capture merge,
   `proftab.device.graphs`) belongs to that event (`graph_capture`);
1b. any other graph-replayed activity belongs to the graph launch itself (`graph_launch`): the
   op or annotation around the launch holds the graph's time as total, never self, device time.
4. an activity without a launch uses its own `External id` (same guard: the op starts no
   later than the activity) -> `device_external_id`.
5. everything else is kept, unattributed: `no_launch` or `no_op`.

Stages: `proftab.device._events` (the device events, Kineto's annotation margin undone),
`_launch` (rules 1, 1a, 1b), `_owner` (rules 2, 3, 4), `_link` (`activities`: the stages in order,
rule 5), `_diagnostics` (how each rank's activities were linked, and the cross checks).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

from proftab import kinds
from proftab.calls import GRAPH_LAUNCH

if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = ["ACTIVITY_CATEGORIES", "ANNOTATION_CATEGORY", "GRAPH_LAUNCH_PATTERN", "LINKS", "LINK_DTYPE", "MARGINS",
           "OP_CATEGORIES", "REGION_CATEGORIES", "is_launch", "launch_categories"]

ANNOTATION_CATEGORY = kinds.DEVICE_ANNOTATION
#: device categories attributed to launching ops (all device rows of key_averages but annotations)
ACTIVITY_CATEGORIES = kinds.DEVICE_CATEGORIES - {ANNOTATION_CATEGORY}
#: host ops that own launches (torch links kernels to these); user annotations are the fallback
OP_CATEGORIES = kinds.OP_CATEGORIES
REGION_CATEGORIES = frozenset({kinds.USER_ANNOTATION})

#: values of the `link` column: how an activity reached its op, or why it did not
LINKS = ("external_id", "containment", "annotation", "device_external_id", "graph_capture", "graph_launch",
         "no_launch", "no_op")
#: names of the runtime / driver calls that replay a CUDA / HIP graph (`proftab.calls.GRAPH_LAUNCH`)
GRAPH_LAUNCH_PATTERN = GRAPH_LAUNCH.pattern()
LINK_DTYPE = pl.Enum(LINKS)
#: (start shift, duration added) by which Kineto widened gpu_user_annotation spans, per era:
#: >= 2024-06, 2024-04..06, 2024-03..04 (ns traces with the old rule), integer-µs traces
MARGINS = ((1, 2), (1000, 1500), (1, 1), (1000, 1000))


def launch_categories(categories: Iterable[str]) -> set[str]:
    """Those of `categories` that launch device work: the runtime / driver ones (`kinds.runtime_categories`)."""
    return kinds.runtime_categories(categories)


def is_launch(events: pl.DataFrame) -> pl.Expr:
    """A runtime / driver call among the categories present in `events` (`launch_categories`)."""
    present = events.select(pl.col("cat").drop_nulls().unique().cast(pl.String)).to_series().to_list()
    return kinds.in_categories(launch_categories(present))
