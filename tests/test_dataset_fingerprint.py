"""The fingerprint under which a dataset stores its key_averages covers all the code that computes it.

The covered code is derived from the source's imports (`proftab._code_closure`), so a module
that key_averages comes to use is covered without a list to update (the FLOPs module once was
missing from such a list: a dataset then kept stale FLOPs).
"""

from __future__ import annotations

import ast
import shutil
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

import proftab as pt
from proftab import _code_closure as closure
from proftab.io.dataset import read as parquet
from tests.conftest import BUNDLED, DATA

GPU_TRACE = BUNDLED / "h100_bert_small.pt.trace.json.gz"
FLOPS_TRACE = DATA / "torch_flops" / "flops_ops" / "trace.json.gz"
MEMORY_TRACE = DATA / "findings" / "memory.pt.trace.json.gz"


def _covered_files(package_dir: Path = closure.PACKAGE_DIR) -> set[Path]:
    modules = closure.package_modules(package_dir)
    return {modules[m] for m in closure.import_closure(parquet._KEY_AVERAGES_CODE, package_dir)}


def _files_run(fn: Any) -> set[Path]:
    """The proftab source files whose functions run during `fn()` (on any thread)."""
    seen: set[str] = set()

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event == "call":
            seen.add(frame.f_code.co_filename)

    threading.setprofile(profile)
    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
        threading.setprofile(None)
    package = closure.PACKAGE_DIR
    return {Path(f).resolve() for f in seen if Path(f).resolve().is_relative_to(package)}


@pytest.mark.parametrize("path", [GPU_TRACE, FLOPS_TRACE, MEMORY_TRACE], ids=lambda p: p.name)
def test_the_fingerprint_covers_every_file_key_averages_runs(path: Path) -> None:
    # what a dataset stores: the default key_averages with torch's floats, from a fresh trace
    tr = pt.load(path)
    ran = _files_run(lambda: tr.key_averages(torch_floats=True))
    assert closure.PACKAGE_DIR / "torch" / "measures.py" in ran  # the profile saw key_averages run
    if path == FLOPS_TRACE:
        assert closure.PACKAGE_DIR / "torch" / "flops.py" in ran
    assert ran - _covered_files() == set()


def test_flops_and_the_column_declaration_are_covered() -> None:
    covered = {p.relative_to(closure.PACKAGE_DIR).as_posix() for p in _covered_files()}
    assert {"torch/flops.py", "torch/columns.py", "torch/aggregate.py", "trace.py", "device/_link.py"} <= covered
    assert "cli/summary.py" not in covered  # nothing key_averages runs imports the CLI


def _copy_package(tmp_path: Path) -> Path:
    target = tmp_path / "proftab"
    shutil.copytree(closure.PACKAGE_DIR, target, ignore=shutil.ignore_patterns("*.so", "__pycache__", "*.c"))
    return target


def test_a_change_to_a_covered_file_changes_the_fingerprint(tmp_path: Path) -> None:
    package = _copy_package(tmp_path)
    roots = parquet._KEY_AVERAGES_CODE
    before = closure.code_fingerprint(roots, package)
    assert before == closure.code_fingerprint(roots)  # the copy is the same code

    flops = package / "torch" / "flops.py"
    original = flops.read_text()
    flops.write_text(original + "\n# a change\n")
    assert closure.code_fingerprint(roots, package) != before
    flops.write_text(original)
    assert closure.code_fingerprint(roots, package) == before

    summary = package / "cli" / "summary.py"  # not covered: no change
    summary.write_text(summary.read_text() + "\n# a change\n")
    assert closure.code_fingerprint(roots, package) == before


def test_a_module_newly_imported_by_a_covered_one_is_covered(tmp_path: Path) -> None:
    package = _copy_package(tmp_path)
    (package / "torch" / "new_rule.py").write_text("RULE = 1\n")
    flops = package / "torch" / "flops.py"
    flops.write_text(flops.read_text() + "\n\ndef _rule() -> int:\n    from proftab.torch.new_rule import RULE\n\n"
                     "    return RULE\n")
    assert "proftab.torch.new_rule" in closure.import_closure(parquet._KEY_AVERAGES_CODE, package)


def _full_parse_imports(source: str) -> list[str]:
    """The reference: every import statement of a full parse, outside `if TYPE_CHECKING:` bodies."""
    out: list[str] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in (getattr(node.test, "id", None),
                                                             getattr(node.test, "attr", None)):
            for statement in node.orelse:
                visit(statement)
            return
        if isinstance(node, ast.Import | ast.ImportFrom):
            out.append(ast.dump(node))
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(source))
    return out


def _line_reader_imports(source: str) -> list[str]:
    return [ast.dump(n) for n in closure._import_statements(source)]


def test_the_line_reader_misses_no_import_of_a_full_parse() -> None:
    missed = {}
    for module, path in closure.package_modules().items():
        source = path.read_text()
        missed[module] = set(_full_parse_imports(source)) - set(_line_reader_imports(source))
    assert {m: s for m, s in missed.items() if s} == {}
    assert len(missed) > 100  # every module of the package was read


def test_the_line_reader_on_awkward_sources() -> None:
    source = '''"""A docstring that mentions
from the trace (an open parenthesis that never closes here
"""
from __future__ import annotations

import os, sys; import json
from proftab.torch import (
    columns,
    flops,
)
from proftab.io import \\
    parquet
import proftab.views  # a comment with a ( parenthesis
def g(x,
      y): pass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from proftab.trace import Trace

    import numpy
else:
    from proftab import kinds


def f() -> None:
    from proftab.device import _link
    text = """
    import not_a_module_but_counted
    """
'''
    got = _line_reader_imports(source)
    assert sorted(got) == sorted(_full_parse_imports(source) + [ast.dump(ast.parse(
        "import not_a_module_but_counted").body[0])])
    names = closure._imported_names(source, "proftab.x", False)
    assert {"proftab.torch.columns", "proftab.torch.flops", "proftab.io.parquet", "proftab.kinds",
            "proftab.device._link", "proftab.views"} <= set(names)
    assert "proftab.trace" not in names and "numpy" not in names


def test_relative_imports_resolve_from_the_package() -> None:
    source = "from . import flops\nfrom .columns import names\nfrom .. import kinds\n"
    assert set(closure._imported_names(source, "proftab.torch.aggregate", False)) >= {
        "proftab.torch.flops", "proftab.torch.columns", "proftab.kinds"}
    assert set(closure._imported_names(source, "proftab.torch", True)) >= {
        "proftab.torch.flops", "proftab.torch.columns", "proftab.kinds"}
