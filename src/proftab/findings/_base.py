"""The findings table's columns, the rule registry and helpers the rules share (docs/findings.md)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import polars as pl

from proftab import kinds
from proftab.steps import step_threads

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence

    from proftab.trace import Trace

__all__ = ["FINDING_SCHEMA", "SEVERITIES", "Rule", "empty", "finding", "format_value", "frame", "register_rule",
           "rules", "scope_text", "trace_steps", "unregister_rule", "user_frame"]

#: severities, most urgent first
SEVERITIES = ("high", "medium", "low", "info")

#: one row per finding
FINDING_SCHEMA: dict[str, pl.DataType] = {
    "rule": pl.String(),
    "severity": pl.Enum(SEVERITIES),
    "est_saving_ns": pl.Int64(),
    "share": pl.Float64(),
    "value": pl.Int64(),
    "unit": pl.String(),
    "rank": pl.Int32(),
    "scope": pl.String(),
    "evidence_table": pl.String(),
    "evidence": pl.List(pl.Int64()),
    "message": pl.String(),
    "suggestion": pl.String(),
}


@dataclass(frozen=True)
class Rule:
    """A registered rule: `name`, what it looks for (`title`) and `run(trace) -> findings frame`."""

    name: str
    title: str
    run: Callable[[Trace], pl.DataFrame]


_RULES: dict[str, Rule] = {}


def register_rule(name: str, title: str) -> Callable[[Callable[[Trace], pl.DataFrame]],
                                                     Callable[[Trace], pl.DataFrame]]:
    """Register `fn(trace) -> findings frame` as the rule `name` (registering a name again replaces it)."""
    def decorator(fn: Callable[[Trace], pl.DataFrame]) -> Callable[[Trace], pl.DataFrame]:
        _RULES[name] = Rule(name, title, fn)
        return fn
    return decorator


def unregister_rule(name: str) -> None:
    """Remove the rule `name` (a user's rule; a built-in comes back only with a new process)."""
    _RULES.pop(name, None)


def rules() -> dict[str, Rule]:
    """The registered rules by name."""
    return dict(_RULES)


def finding(rule: str, severity: str, *, value: int, unit: str, message: str, suggestion: str,
            evidence: Iterable[int], rank: int | None = None, scope: str = "", share: float | None = None,
            est_saving_ns: int | None = None, evidence_table: str = "events") -> dict[str, Any]:
    """One finding row (a dict of `FINDING_SCHEMA`'s columns)."""
    return {"rule": rule, "severity": severity, "est_saving_ns": est_saving_ns, "share": share, "value": int(value),
            "unit": unit, "rank": rank, "scope": scope, "evidence_table": evidence_table,
            "evidence": [int(e) for e in evidence], "message": message, "suggestion": suggestion}


def frame(rows: Sequence[dict[str, Any]]) -> pl.DataFrame:
    """The findings frame of `rows` (`finding` dicts), columns and dtypes of `FINDING_SCHEMA`."""
    if not rows:
        return empty()
    return pl.DataFrame(list(rows), schema=FINDING_SCHEMA, orient="row")


def empty() -> pl.DataFrame:
    """A findings frame without rows."""
    return pl.DataFrame(schema=FINDING_SCHEMA)


def trace_steps(trace: Trace) -> pl.DataFrame:
    """`step_threads` of `trace`'s events, computed once per trace (the rules share it)."""
    out: pl.DataFrame = trace.cached("findings:step_threads", lambda: step_threads(trace.collect("events")))
    return out


def host_work() -> pl.Expr:
    """Host rows that are work a step thread does: ops and runtime calls, not frames or annotations."""
    return kinds.is_host_op() & ~kinds.is_python_frame() & ~kinds.is_user_annotation() & pl.col("cat").is_not_null()


#: stack frames that are not the user's code: built-ins, torch's own files, module markers
LIBRARY_FRAME = r"^<built-in|(^|/)torch/|^nn\.Module: "


def user_frame(schema: pl.Schema, col: str = "stack") -> pl.Expr:
    """The innermost frame of user code (not a built-in, not torch's own) of a stack column, as text
    (a list column, innermost first; a string column is taken as it is)."""
    if isinstance(schema.get(col), pl.List):
        return pl.col(col).list.eval(pl.element().filter(~pl.element().str.contains(LIBRARY_FRAME))).list.first()
    return pl.col(col).cast(pl.String)


def scope_text(rank: int | None, scope: str | None, several_ranks: bool) -> str:
    """A finding's scope for people: `rank 2 · straggler op=...` when the findings span several ranks."""
    where = scope or ""
    if several_ranks and rank is not None:
        return f"rank {rank}" + (f" · {where}" if where else "")
    return where


def format_value(value: int | None, unit: str | None) -> str:
    """A finding's `value` in its `unit`, for people (`4.000 MiB/step`, `34.268ms/step`, `1001 ops/step`)."""
    from proftab.render.text import fmt_bytes, fmt_ns

    if value is None:
        return ""
    unit = unit or ""
    per = "/step" if unit.endswith("_per_step") else ""
    base = unit.removesuffix("_per_step")
    if base in ("ns",):
        return fmt_ns(value) + per
    if base == "bytes":
        return fmt_bytes(value) + per
    return f"{value} {base.replace('_', ' ')}{per}".strip()
