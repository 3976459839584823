"""Model structure: the nn.Module tree, time per module, forward <-> backward links.

The free functions work over frames (`Trace.nested`, `Trace.device.activities()`);
`Trace.modules` applies them to one trace and caches the intermediate tables.
docs/modules.md states the rules.

>>> import proftab as pt
>>> tr = pt.load("data/h100_bert_small.pt.trace.json.gz")     # doctest: +SKIP
>>> tr.modules.tree()                  # one row per module call, with its path  # doctest: +SKIP
>>> tr.modules.modules(depth=3)        # host / device time per module path     # doctest: +SKIP
>>> tr.modules.modules(by="type")      # per module class                       # doctest: +SKIP
>>> tr.modules.backward_of(event_id)   # the forward op of a backward op        # doctest: +SKIP
>>> tr.modules.icicle("device")        # Altair icicle of the tree              # doctest: +SKIP
>>> names = proftab.modules.instance_names(model, x)  # {"Linear_0": "model.blocks.0.fc1"}  # doctest: +SKIP
>>> tr.modules.modules(names=names)    # adds the model's own names             # doctest: +SKIP
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import polars as pl

from proftab import kinds
from proftab.api import register_trace_namespace
from proftab.exceptions import ProftabError
from proftab.modules._chart import METRICS, Metric
from proftab.modules._frames import (
    FRAME_COLUMNS,
    MODULE_PREFIX,
    SOURCES,
    Source,
    assign,
    backward_links,
    module_frames,
)
from proftab.modules._names import instance_names, with_names
from proftab.modules._render import render_modules
from proftab.modules._table import MODULE_COLUMNS, By, frame_ancestors, modules

if TYPE_CHECKING:
    from collections.abc import Mapping

    from proftab.trace import Trace

__all__ = ["FRAME_COLUMNS", "METRICS", "MODULE_COLUMNS", "MODULE_PREFIX", "SOURCES", "ModulesNamespace", "assign",
           "backward_links", "frame_ancestors", "instance_names", "module_frames", "modules", "render_modules",
           "with_names"]

_NESTED = ["rank", "event_id", "pid", "tid", "cat", "name", "start_ns", "end_ns", "dur_ns", "parent_id", "depth",
           "sequence_number", "fwd_thread_id"]


@register_trace_namespace("modules")
class ModulesNamespace:
    """`Trace.modules`: module frames, the module table and backward links of one trace."""

    def __init__(self, trace: Trace) -> None:
        self._trace = trace

    def __repr__(self) -> str:
        return f"<proftab module analyses of {self._trace!r}>"

    def _nested(self) -> pl.DataFrame:
        out: pl.DataFrame = self._trace.cached("modules:nested",
                                               lambda: self._trace.collect("nested", columns=_NESTED))
        return out

    def tree(self, source: Source = "auto") -> pl.DataFrame:
        """One row per module call (`module_frames`), with `step` (null outside steps)."""
        from proftab.steps import assign_steps, step_windows

        def compute() -> pl.DataFrame:
            n = self._nested()
            frames = module_frames(n, source)
            return assign_steps(frames, step_windows(n))
        out: pl.DataFrame = self._trace.cached(f"modules:frames:{source}", compute)
        return out

    def frame_source(self, source: Source = "auto") -> str | None:
        """The frames `source` takes: ``"nn.Module"``, ``"user_annotation"`` (with ``"auto"``, the
        fallback when the trace has no ``nn.Module`` frames: its ``record_function`` ranges), or None.
        """
        from proftab.modules._frames import frame_mask

        return frame_mask(self._nested().select("cat", "name"), source)[1]

    def links(self) -> pl.DataFrame:
        """Every backward op with the forward op it belongs to (`backward_links`)."""
        out: pl.DataFrame = self._trace.cached("modules:links", lambda: backward_links(self._nested()))
        return out

    def assigned(self, source: Source = "auto") -> pl.DataFrame:
        """Every host row's module frame and phase (`assign`)."""
        out: pl.DataFrame = self._trace.cached(
            f"modules:assigned:{source}",
            lambda: assign(self._nested(), self.tree(source).drop("step"), self.links()))
        return out

    def __call__(self, by: By = "path", *, depth: int | None = None, step: int | None = None,
                 source: Source = "auto", names: Mapping[str, str] | None = None, compiled: bool = False,
                 root: str = "model") -> pl.DataFrame:
        """`tr.modules(...)` is `tr.modules.modules(...)`."""
        return self.modules(by, depth=depth, step=step, source=source, names=names, compiled=compiled, root=root)

    def modules(self, by: By = "path", *, depth: int | None = None, step: int | None = None,
                source: Source = "auto", names: Mapping[str, str] | None = None, compiled: bool = False,
                root: str = "model") -> pl.DataFrame:
        """Host and device time per module path (or `by="type"`), forward and backward.

        Parameters
        ----------
        by
            `path` or `type`.
        depth
            Keep module paths of at most this depth (0: the root modules); `by="path"` only.
        step
            Only `ProfilerStep#<step>`.
        source
            `auto`, `nn.Module` or `user_annotation` (see `module_frames`).
        names
            Instance name -> the model's name (`instance_names(model, x)`): adds `name`
            (`by="path"` only).
        compiled
            torch.compile runs: the compiled kernel time per module path from Inductor's
            provenance (kernel -> FX node -> module, each kernel's time split equally over its
            nodes as `tr.compiled.by_module()`), laid out like this table, with `name` = `path`
            so `pt.diff(eager_table, compiled_table)` compares module by module
            (`proftab.compiled.module_times`; docs/compiled.md). `by="path"` only; no `step`,
            `source` or `names`.
        root
            With `compiled`: the name of the compiled module, the first path component
            (`proftab.modules.instance_names`' default root is `"model"` too).
        """
        if compiled:
            if by != "path" or step is not None or names is not None or source != "auto":
                msg = "compiled=True takes only depth and root (by='path', no step, source or names)"
                raise ProftabError(msg)
            table: pl.DataFrame = self._trace.compiled.modules(root=root)
            return table if depth is None else table.filter(pl.col("depth") <= depth)
        frames = self.tree(source).drop("step")
        acts = self._activities()
        out = modules(frames, self.assigned(source), self.links(), acts, self._nested(), by=by, step=step)
        if depth is not None:
            if by != "path":
                msg = f"depth applies to by='path', not by={by!r}"
                raise ProftabError(msg)
            out = out.filter(pl.col("depth") <= depth)
        if names is not None:
            if by != "path":
                msg = f"names apply to by='path', not by={by!r}"
                raise ProftabError(msg)
            out = with_names(out, names)
        return out

    def backward_of(self, event_id: int, rank: int | None = None) -> pl.DataFrame:
        """The link of one backward op: its forward op and the module path it is charged to.

        Parameters
        ----------
        event_id
            A backward op (or any op nested in one: its innermost backward op is used).
        rank
            The rank, when the trace has several.
        """
        a = self.assigned()
        rows = a.filter(pl.col("event_id") == event_id)
        if rank is not None:
            rows = rows.filter(pl.col("rank") == rank)
        if rows.height != 1:
            msg = f"event {event_id!r} (rank {rank!r}) matches {rows.height} rows; give the rank"
            raise ProftabError(msg)
        bwd = rows["bwd_id"][0]
        if bwd is None:
            msg = f"event {event_id!r} is not inside a backward op"
            raise ProftabError(msg)
        r = rows["rank"][0]
        link = self.links().filter((pl.col("rank") == r) & (pl.col("event_id") == bwd))
        paths = self.tree().select("rank", "frame_id", "path")
        return link.join(rows.select("rank", "frame_id"), on="rank").join(
            paths, on=["rank", "frame_id"], how="left")

    def icicle(self, metric: Metric = "host", *, max_depth: int = 8, rank: int | None = None,
               step: int | None = None, source: Source = "auto") -> Any:
        """The module tree as an Altair icicle: width = total, colour = self time of `metric`.

        Parameters
        ----------
        metric
            `host`, `device`, `bwd_host` or `bwd_device`.
        max_depth
            Deepest module level drawn.
        rank
            The rank drawn (default: the lowest).
        step
            Only `ProfilerStep#<step>`.
        """
        from proftab.modules._chart import icicle

        table = self.modules(step=step, source=source)
        if table.is_empty():
            msg = "the trace has no module frames"
            raise ProftabError(msg)
        r = int(table["rank"].min()) if rank is None else rank  # type: ignore[arg-type]
        frames = self.tree(source).filter(pl.col("rank") == r)
        return icicle(table.filter(pl.col("rank") == r), frames, metric=metric, max_depth=max_depth,
                      title=f"modules of rank {r}")

    def _activities(self) -> pl.DataFrame:
        cats = self._trace.categories
        if not kinds.has_device_rows(cats):
            return pl.DataFrame(schema={"rank": pl.Int32, "event_id": pl.Int64, "kind": pl.String, "dur_ns": pl.Int64,
                                        "launch_id": pl.Int64, "op_id": pl.Int64})
        acts: pl.DataFrame = self._trace.device.activities()
        return acts
