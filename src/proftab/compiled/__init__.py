"""torch.compile: generated kernels back to their compiled region, FX nodes, aten ops, modules and source lines.

A generated kernel is an event named as Inductor names its kernels (`triton_poi_fused_add_mul_0`,
`cpp_fused_gelu_view_2`, `graph_0_cpp_fused_...` with `TORCHINDUCTOR_CPP_ENABLE_KERNEL_PROFILE=1`):
a device kernel (Triton), or a host event when the kernel runs on the CPU (Inductor's C++). Its
region is the nearest enclosing `## Call CompiledFxGraph <hash> ##` annotation and `Torch-Compiled
Region: <frame>/<compile>` op (for a device kernel: of the op that launched it).

With Inductor's provenance artifacts (`pt.load(..., compile_provenance=DIR)`, `proftab.io.inductor`)
each kernel gets the FX nodes it computes, their aten ops, nn.Module paths and source lines
(`mapped`); without them, the op list is read from the kernel's name and is a guess (`guess`).

Apportioning (`by_op`, `by_module`, `by_source`, `key_averages`): a kernel event's duration is
split equally over its nodes (with provenance: its post-grad FX nodes; without: its fused ops),
in int64 ns: each node gets `dur // n`, and the first `dur % n` nodes in node-name order get
1 ns more, so the shares of one event sum to its duration exactly. docs/compiled.md.

Stages, one module each: `_names` (what a kernel's name says), `_regions` (the region, graph call
and graph around an event), `_events` (the kernel events: `kernel_events`), `_match` (kernels and
extern calls -> FX nodes, ops, modules, lines), `_weighting` (the split, `apportion`), `_views`
(`kernels`, `regions`, `key_averages`) and `_module_times`. Reading the provenance artifacts is
`proftab.io.inductor`'s.

>>> tr = pt.load("run.pt.trace.json.gz", compile_provenance="debug_dir")   # doctest: +SKIP
>>> tr.compiled.kernels()     # one row per generated-kernel event              # doctest: +SKIP
>>> tr.compiled.by_source()   # kernel time per model source line               # doctest: +SKIP
>>> tr.compiled.regions()     # per compiled graph: calls, time, recompiles     # doctest: +SKIP
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from proftab import kinds
from proftab.api import register_trace_namespace
from proftab.compiled._events import kernel_events
from proftab.compiled._match import EXTERN_COLUMNS, extern_kernels
from proftab.compiled._module_times import COMPILED_MODULE_EXTRA, module_times
from proftab.compiled._names import KIND_NAMES, split_fused_ops
from proftab.compiled._views import KERNEL_COLUMNS, REGION_COLUMNS, kernels, key_averages, regions
from proftab.compiled._weighting import apportion
from proftab.io.inductor import PROVENANCE_TABLE

if TYPE_CHECKING:
    import polars as pl

    from proftab.trace import Trace

__all__ = ["COMPILED_MODULE_EXTRA", "EXTERN_COLUMNS", "KERNEL_COLUMNS", "KIND_NAMES", "PROVENANCE_TABLE",
           "REGION_COLUMNS", "Compiled", "apportion", "extern_kernels", "kernel_events", "kernels", "key_averages",
           "module_times", "regions", "split_fused_ops"]


@register_trace_namespace("compiled")
class Compiled:
    """`tr.compiled`: torch.compile's generated kernels mapped to regions, FX nodes, ops, modules, source lines.

    Provenance comes from `pt.load(..., compile_provenance=...)` (the `compile_provenance`
    table) or `with_provenance`; without it every kernel is a guess from its name.
    """

    def __init__(self, trace: Trace) -> None:
        self._trace = trace

    @property
    def provenance(self) -> pl.DataFrame | None:
        """The provenance table (`proftab.io.inductor.PROVENANCE_COLUMNS`), or None."""
        if PROVENANCE_TABLE in self._trace.tables:
            return self._trace.collect(PROVENANCE_TABLE)
        return None

    def events(self) -> pl.DataFrame:
        """Generated-kernel events with their region (`kernel_events`)."""
        def compute() -> pl.DataFrame:
            cats = self._trace.categories
            acts = self._trace.device.activities() if kinds.has_device_rows(cats) else None
            nested = self._trace.collect("nested", ["rank", "event_id", "parent_id", "cat", "name", "start_ns",
                                                    "dur_ns", "args", "sequence_number"])
            return kernel_events(nested, acts)
        out: pl.DataFrame = self._trace.cached("compiled:events", compute)
        return out

    def kernels(self) -> pl.DataFrame:
        """One row per generated-kernel event: region, nodes, ops, modules, sources, time (`kernels`)."""
        return kernels(self.events(), self.provenance)

    def by_op(self, level: Literal["post_grad", "pre_grad"] = "post_grad") -> pl.DataFrame:
        """Kernel time per aten op, split equally over each kernel's nodes (`apportion`).

        `level="pre_grad"`: per torch-level op the model called (`aten::layer_norm`), as eager runs it.
        """
        return apportion(self.events(), self.provenance, "op" if level == "post_grad" else "pre_grad_op")

    def by_module(self) -> pl.DataFrame:
        """Kernel time per nn.Module path (needs provenance; else one null row) (`apportion`)."""
        return apportion(self.events(), self.provenance, "module")

    def by_source(self) -> pl.DataFrame:
        """Kernel time per model source line `file:line` (needs provenance; else one null row) (`apportion`)."""
        return apportion(self.events(), self.provenance, "source")

    def by_node(self) -> pl.DataFrame:
        """Kernel time per FX node (`apportion`)."""
        return apportion(self.events(), self.provenance, "node")

    def regions(self) -> pl.DataFrame:
        """Per compiled graph: calls, time, kernels, recompiles (`regions`)."""
        nested = self._trace.collect("nested", ["rank", "event_id", "parent_id", "cat", "name", "start_ns", "dur_ns",
                                                "sequence_number"])
        return regions(nested, self.events())

    def extern_kernels(self) -> pl.DataFrame:
        """The aten ops the generated code calls (`extern_kernels.addmm`) with their FX nodes (`extern_kernels`)."""
        nested = self._trace.collect("nested", ["rank", "event_id", "parent_id", "cat", "name", "start_ns", "dur_ns",
                                                "sequence_number"])
        return extern_kernels(nested, self.provenance)

    def modules(self, root: str = "model") -> pl.DataFrame:
        """Compiled kernel time per nn.Module path, as `tr.modules.modules()` lays it out (`module_times`)."""
        nested = self._trace.collect("nested", ["rank", "event_id", "parent_id", "cat", "name", "start_ns", "dur_ns",
                                                "sequence_number"])
        return module_times(self.events(), self.provenance, self.extern_kernels(), nested, root=root)

    def key_averages(self) -> pl.DataFrame:
        """`tr.key_averages()` with generated kernels counted as their aten ops (for `pt.diff`)."""
        return key_averages(self._trace.key_averages(), self.events(), self.provenance, self.extern_kernels())
