"""The model's attribute names (`model.blocks.0.fc1`) for the profiler's instance names (`Linear_0`).

A trace names a module call `nn.Module: <Class>_<N>`: the N-th distinct instance of the class
that torch's Python tracer saw, in call order. The attribute names are not in the trace;
`instance_names` recovers them by running the model once with forward pre-hooks and
numbering the instances the same way.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import polars as pl

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["instance_names", "with_names"]


def instance_names(model: Any, *args: Any, root: str = "model", **kwargs: Any) -> dict[str, str]:
    """`{"Linear_0": "model.blocks.0.fc1", ...}` from one forward call of `model(*args, **kwargs)`.

    The numbering matches the trace when the profiled region first calls this model's modules
    in the same order and calls no other instance of their classes before them (a module
    outside the model, a loss, gets its own class counter only when its class differs).
    The call runs under `torch.no_grad()`.

    Parameters
    ----------
    model
        A `torch.nn.Module`.
    root
        The name of the model itself; children are `root.<attribute path>`.
    """
    import torch

    qualified = {id(m): (f"{root}.{n}" if n else root) for n, m in model.named_modules()}
    counters: dict[str, int] = {}
    seen: dict[int, str] = {}

    def pre_hook(module: Any, _inputs: Any) -> None:
        if id(module) not in seen:
            cls = type(module).__name__
            seen[id(module)] = f"{cls}_{counters.get(cls, 0)}"
            counters[cls] = counters.get(cls, 0) + 1

    handles = [m.register_forward_pre_hook(pre_hook) for m in model.modules()]
    try:
        with torch.no_grad():
            model(*args, **kwargs)
    finally:
        for h in handles:
            h.remove()
    return {inst: qualified[key] for key, inst in seen.items()}


def with_names(frame: pl.DataFrame, names: Mapping[str, str]) -> pl.DataFrame:
    """`frame` (with `instance`) plus `name`: the model's name of the instance (null: unknown)."""
    return frame.with_columns(name=pl.col("instance").replace_strict(dict(names), default=None,
                                                                     return_dtype=pl.String))
