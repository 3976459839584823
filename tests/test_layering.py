"""The import rules of docs/architecture.md, checked on the source.

Every runtime import counts, including imports inside functions; imports under
`if TYPE_CHECKING:` do not. `from proftab import x` is an import of `proftab.x` when that is a
module.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "proftab"

#: the bottom layers: what they may import among themselves, nothing above them
CORE = {"proftab._version", "proftab._heap", "proftab.exceptions", "proftab.codes", "proftab.schema", "proftab.kinds",
        "proftab.calls", "proftab.steps", "proftab.dtypes", "proftab.units", "proftab.api", "proftab.clock",
        "proftab.meta", "proftab.nesting", "proftab.trace"}
GENERIC = "proftab.intervals"


def _module_name(path: Path) -> str:
    rel = path.relative_to(SRC.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {_module_name(p): p for p in SRC.rglob("*.py")}


def _is_type_checking(node: ast.If) -> bool:
    t = node.test
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
        isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING")


def _resolve(name: str) -> str | None:
    """The proftab module an import names (the longest module prefix), None outside proftab."""
    if not name.startswith("proftab"):
        return None
    parts = name.split(".")
    while parts and ".".join(parts) not in MODULES:
        parts.pop()
    return ".".join(parts) or None


def imports_of(module: str, *, typing: bool = False) -> set[str]:
    """The proftab modules `module` imports at run time (with `typing`, also under `TYPE_CHECKING`)."""
    tree = ast.parse(MODULES[module].read_text())
    out: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node) and not typing:
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            for a in node.names:
                if (m := _resolve(a.name)) is not None:
                    out.add(m)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for a in node.names:
                target = _resolve(f"{node.module}.{a.name}") if f"{node.module}.{a.name}" in MODULES else None
                target = target or _resolve(node.module)
                if target is not None:
                    out.add(target)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    out.discard(module)
    return out


GRAPH = {m: imports_of(m) for m in MODULES}


def _cycles(graph: dict[str, set[str]] = GRAPH) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def strong(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            strong(v)
    return out


def test_the_graph_sees_real_imports() -> None:
    # the checker itself: a function-level import is seen, a TYPE_CHECKING one is not
    assert "proftab.intervals.nest" in GRAPH["proftab.nesting"]
    assert "proftab.trace" not in GRAPH["proftab.ranks"]  # typing only
    assert "proftab.io.kineto.tables" in GRAPH["proftab.io.kineto.reader"]
    assert {"proftab.cli._common"} <= GRAPH["proftab.cli.summary"]


def test_no_import_cycle() -> None:
    assert _cycles() == []


def test_the_core_has_no_cycle_even_in_type_hints() -> None:
    # a TYPE_CHECKING cycle (meta <-> trace, before `proftab.clock`) is an arrow the wrong way too
    core = {m: imports_of(m, typing=True) & CORE for m in CORE}
    assert _cycles(core) == []


def test_intervals_import_nothing_of_proftab() -> None:
    for m, deps in GRAPH.items():
        if m == GENERIC or m.startswith(GENERIC + "."):
            assert {d for d in deps if not d.startswith(GENERIC)} == set(), m


@pytest.mark.parametrize("module", sorted(CORE))
def test_core_layers_import_only_core(module: str) -> None:
    allowed = CORE | {d for d in GRAPH[module] if d.startswith(GENERIC)}
    assert GRAPH[module] - allowed == set()


def test_trace_imports_no_feature_module() -> None:
    feature = {d for d in GRAPH["proftab.trace"] if d not in CORE and not d.startswith(GENERIC)}
    assert feature == set()


def _above_io() -> set[str]:
    """The analyses and every module above them: the packages of the attributes `api.BUILTIN` and
    `api.BUILTIN_HOOKS` attach to a Trace (less the core's and io's own), and every module that
    imports one of those, directly or not."""
    from proftab import api

    roots = {m for m in [*api.BUILTIN.values(), *api.BUILTIN_HOOKS.values()]
             if m not in CORE and not m.startswith(IO + ".")}
    above = {m for m in MODULES if any(m == r or m.startswith(r + ".") for r in roots)}
    while True:
        more = {m for m, deps in GRAPH.items() if m not in above and deps & above}
        if not more:
            return above
        above |= more


IO = "proftab.io"


def test_io_imports_no_analysis() -> None:
    # what an analysis adds to a read or a written dataset is passed in from above (proftab.pipeline)
    above = _above_io()
    assert "proftab.ranks" in above and "proftab.pipeline" in above  # the rule sees the analyses
    for m, deps in GRAPH.items():
        if m == IO or m.startswith(IO + "."):
            assert deps & above == set(), m


def test_io_reaches_no_analysis_by_name() -> None:
    # `api.BUILTIN` names the analyses' modules and `api.hook` imports them: io uses neither
    for m, path in MODULES.items():
        if m == IO or m.startswith(IO + "."):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ImportFrom) and node.module == "proftab.api":
                    names = {a.name for a in node.names}
                    assert names <= {"register_trace_method", "register_trace_namespace"}, (m, names)


def test_only_the_cli_imports_the_cli() -> None:
    for m, deps in GRAPH.items():
        if m.startswith("proftab.cli") or m == "proftab.__main__":
            continue
        assert {d for d in deps if d.startswith("proftab.cli")} == set(), m


def test_every_builtin_namespace_module_registers_its_name() -> None:
    from proftab import api

    for name in api.BUILTIN:
        kind, target = api.resolve(name) or (None, None)
        assert kind in ("namespace", "method"), name
        assert target is not None
