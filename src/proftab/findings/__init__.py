"""Findings: what is wrong with a step and what to change, one row per finding (docs/findings.md).

Every rule is a free function over frames in its own module (`proftab.findings.<rule>`),
registered by name with `register_rule`; `findings(trace)` runs them all and ranks the rows by
`est_saving_ns`. Each number is a query over proftab's exact tables, and `evidence` lists the
event ids (of `evidence_table`) it is computed from, so it can be checked.

>>> import proftab as pt
>>> tr = pt.load("data/train_cnn.pt.trace.json.gz")
>>> tr.findings()                            # doctest: +SKIP
>>> tr.findings(rules=["memory_leak"])       # doctest: +SKIP
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

import polars as pl

from proftab.api import register_trace_method
from proftab.exceptions import UsageError
from proftab.findings._base import (
    FINDING_SCHEMA,
    SEVERITIES,
    Rule,
    empty,
    finding,
    format_value,
    frame,
    register_rule,
    rules,
    scope_text,
    unregister_rule,
)

if TYPE_CHECKING:
    from collections.abc import Sequence

    from proftab.trace import Trace

__all__ = ["BUILTIN_RULES", "FINDING_SCHEMA", "SEVERITIES", "Rule", "empty", "finding", "findings", "format_value",
           "frame", "register_rule", "rule_names", "rules", "scope_text", "unregister_rule"]

#: the built-in rules, one module each, in the order they run
BUILTIN_RULES = ("input_pipeline", "python_overhead", "thread_imbalance", "launch_bound", "synchronisation",
                 "memory_leak", "memory_peak", "memory_churn", "compute_efficiency", "communication", "trace_health")


def _load_builtin() -> None:
    for name in BUILTIN_RULES:
        importlib.import_module(f"proftab.findings.{name}")


def rule_names() -> list[str]:
    """Every registered rule name, built-in first."""
    _load_builtin()
    return list(rules())


def findings(trace: Trace, rules_: Sequence[str] | None = None) -> pl.DataFrame:
    """Run the rules on `trace`: one row per finding (`FINDING_SCHEMA`), largest `est_saving_ns`
    first (then severity, rule).

    Parameters
    ----------
    trace
        The trace.
    rules_
        Rule names to run (default: all registered).
    """
    _load_builtin()
    known = rules()
    wanted = list(known) if rules_ is None else list(rules_)
    if bad := [r for r in wanted if r not in known]:
        msg = f"unknown rule(s) {bad}; rules: {list(known)}"
        raise UsageError(msg)
    out = [known[name].run(trace) for name in wanted]
    df = pl.concat([empty(), *out], how="vertical") if out else empty()
    return df.sort(["est_saving_ns", "severity", "rule", "rank"], descending=[True, False, False, False],
                   nulls_last=True)


@register_trace_method("findings")
def _trace_findings(trace: Trace, rules: Sequence[str] | None = None) -> pl.DataFrame:
    """`tr.findings(rules=None)`: the findings of this trace (`proftab.findings.findings`), cached per selection."""
    key = f"findings:{None if rules is None else tuple(rules)}"
    out: pl.DataFrame = trace.cached(key, lambda: findings(trace, rules))
    return out
