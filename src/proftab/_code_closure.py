"""The proftab code a module runs: the modules it imports, transitively, read from the source.

A result stored beside a dataset (the materialized `key_averages()`) is reused only by the code
that wrote it; its fingerprint (`code_fingerprint`) hashes every file of `import_closure` of
the modules that compute it, so a new file those modules import is covered without a list to
keep up to date. Imports are read from the source, nothing is imported: every runtime import
counts, including those inside functions (imports under ``if TYPE_CHECKING:`` do not), and
importing ``proftab.a.b`` runs ``proftab/__init__.py`` and ``proftab/a/__init__.py`` too.
Polars-free.
"""

from __future__ import annotations

import ast
import hashlib
import re
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = ["PACKAGE_DIR", "code_fingerprint", "import_closure", "package_modules", "runtime_imports"]

#: the directory of the proftab package
PACKAGE_DIR = Path(__file__).resolve().parent
_PACKAGE = "proftab"


def package_modules(package_dir: Path = PACKAGE_DIR) -> dict[str, Path]:
    """Every module of the package in `package_dir` by its dotted name (a package: its ``__init__.py``)."""
    out: dict[str, Path] = {}
    for path in package_dir.rglob("*.py"):
        parts = [_PACKAGE, *path.relative_to(package_dir).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


#: an ``if TYPE_CHECKING:`` line (what it guards is imported for type checkers only)
_TYPE_CHECKING_LINE = re.compile(r"[ \t]*if[ \t]+(?:typing\.)?TYPE_CHECKING[ \t]*:")
#: the most lines one import statement spans (a parenthesized list of names)
_MAX_STATEMENT_LINES = 200


def _import_statements(source: str) -> list[ast.Import | ast.ImportFrom]:
    """The import statements of `source` that run at run time (those under ``if TYPE_CHECKING:`` do not).

    Only the lines that start an import are parsed (the whole file takes about ten times longer):
    a statement runs over the lines its parentheses or backslashes join. A line inside a string
    that reads as an import counts too (an extra module covered, never one missed); one that
    does not parse is skipped, and the lines after it are read again.
    """
    lines = source.splitlines()
    out: list[ast.Import | ast.ImportFrom] = []
    guard_indent = -1  # the indentation of the enclosing `if TYPE_CHECKING:`, -1 outside one
    i = 0
    while i < len(lines):
        line = lines[i]
        text = line.lstrip()
        indent = len(line) - len(text)
        if guard_indent >= 0 and (not text or indent > guard_indent):
            i += 1
            continue
        guard_indent = indent if _TYPE_CHECKING_LINE.match(line) else -1
        if text.startswith(("import ", "from ")):
            end = _statement_end(lines, i)
            nodes = _parsed("\n".join([text, *lines[i + 1:end + 1]]))
            if nodes is None or len(nodes) != 1:  # a string's text, or more than one statement
                end = i  # the next lines are read again
                nodes = _parsed(text)
            out.extend(n for n in nodes or () if isinstance(n, (ast.Import, ast.ImportFrom)))
            i = end
        i += 1
    return out


def _statement_end(lines: list[str], start: int) -> int:
    """The last line of the statement that starts on line `start`: the lines its open parentheses
    (outside comments) or trailing backslashes join, at most `_MAX_STATEMENT_LINES`."""
    depth = 0
    end = start
    while True:
        code = lines[end].split("#", 1)[0]
        depth += code.count("(") - code.count(")")
        if (depth <= 0 and not code.rstrip().endswith("\\")) or end + 1 >= len(lines) or (
                end - start >= _MAX_STATEMENT_LINES):
            return end
        end += 1


def _parsed(text: str) -> list[ast.stmt] | None:
    """The statements of `text`, None when it is not Python."""
    try:
        return ast.parse(text).body
    except SyntaxError:
        return None


def _imported_names(source: str, module: str, is_package: bool) -> list[str]:
    """The dotted names the runtime imports of `source` (the source of `module`) name; for
    ``from pkg import name`` both ``pkg`` and ``pkg.name`` (which may be a submodule)."""
    out: list[str] = []
    for node in _import_statements(source):
        if isinstance(node, ast.Import):
            out.extend(alias.name for alias in node.names)
            continue
        if node.level:  # relative: from the module's package, one level up per further dot
            package = module.split(".") if is_package else module.split(".")[:-1]
            package = package[:len(package) - node.level + 1]
            base = ".".join([*package, *([node.module] if node.module else [])])
        else:
            base = node.module or ""
        out.append(base)
        out.extend(f"{base}.{alias.name}" for alias in node.names)
    return out


def runtime_imports(module: str, modules: dict[str, Path]) -> set[str]:
    """The proftab modules `module` runs when it is imported and used: those its source imports at
    run time and the packages above them (whose ``__init__`` an import runs). `modules`: the
    package's modules (`package_modules`)."""
    path = modules.get(module)
    if path is None:
        return set()
    source = path.read_text(encoding="utf-8", errors="replace")
    out: set[str] = set()
    for name in _imported_names(source, module, path.name == "__init__.py"):
        parts = name.split(".")
        for i in range(1, len(parts) + 1):  # the name and every package above it
            prefix = ".".join(parts[:i])
            if prefix in modules:
                out.add(prefix)
    out.discard(module)
    return out


def import_closure(roots: Iterable[str], package_dir: Path = PACKAGE_DIR) -> list[str]:
    """`roots` and every proftab module they run (`runtime_imports`, transitively), sorted."""
    return _closure(roots, package_modules(package_dir))


def _closure(roots: Iterable[str], modules: dict[str, Path]) -> list[str]:
    seen: set[str] = set()
    todo = [r for r in roots if r in modules]
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        todo.extend(runtime_imports(module, modules) - seen)
    return sorted(seen)


def code_fingerprint(roots: Iterable[str], package_dir: Path = PACKAGE_DIR) -> str:
    """sha256 of the source of `import_closure(roots)`: each file's path in the package and bytes."""
    modules = package_modules(package_dir)
    h = hashlib.sha256()
    for module in _closure(roots, modules):
        path = modules[module]
        rel = path.relative_to(package_dir).as_posix().encode()
        data = path.read_bytes()
        h.update(len(rel).to_bytes(8, "little") + rel + len(data).to_bytes(8, "little") + data)
    return h.hexdigest()
