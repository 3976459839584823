"""Every trace fact is spelled in one module, and read from there (issue 36).

Scans the string literals of `src/proftab` (docstrings left out; f-string pieces included) for
facts spelled outside their home:

* category names outside `kinds` (`"gpu_memcpy"`, `"cuda_runtime"`...);
* runtime / driver call names and regexes over them outside `calls` (`^(cuda|hip)GraphLaunch`,
  `"Launch"` as a substring test, `cudaLaunchKernel`);
* collective names outside `calls` (`nccl|rccl`, `"gloo:"`, `"record_param_comms"`);
* torch's step rule outside `steps` (`"ProfilerStep#"`, `"ProfilerStep*"`), and no call-tree
  module reaching into `proftab.torch` for it;
* dtype tables outside `dtypes` (a dict keyed by dtype spellings);
* a rate spelled other than `<unit>_per_s` outside `units` and the rename table.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from proftab import dtypes, kinds
from tests.test_layering import GRAPH

SRC = Path(__file__).resolve().parents[1] / "src" / "proftab"

#: (module path, literal) -> why that literal is not the fact it looks like
ALLOWED: dict[tuple[str, str], str] = {
    ("critical_path/_segments.py", "cpu_op"): "a critical-path segment kind (KINDS), named after the category",
    ("critical_path/_windows.py", "cpu_op"): "a critical-path segment kind (KINDS)",
    ("critical_path/_path.py", "cpu_op"): "a critical-path segment kind (KINDS)",
    ("modules/_frames.py", "user_annotation"): "the name of a module-frame source (SOURCES), the user's word",
    ("modules/__init__.py", "user_annotation"): "the name of a module-frame source",
    ("cli/modules.py", "user_annotation"): "the name of a module-frame source",
    ("device/_graphs.py", "StreamBeginCapture"): "a column label of the capture windows (calls.CAPTURE_BEGIN)",
    ("device/_graphs.py", "StreamEndCapture"): "a column label of the capture windows (calls.CAPTURE_END)",
    ("device/_graphs.py", "_StreamBeginCapture"): "a column label of the capture windows",
    ("device/_graphs.py", "_StreamEndCapture"): "a column label of the capture windows",
}


def _literals(path: Path) -> list[tuple[int, str]]:
    """(line, text) of every string literal of a module but its docstrings and bare string statements."""
    tree = ast.parse(path.read_text())
    skip = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)}
    return [(n.lineno, n.value) for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in skip]


def _modules(*homes: str) -> list[tuple[str, Path]]:
    return [(p.relative_to(SRC).as_posix(), p) for p in sorted(SRC.rglob("*.py"))
            if p.relative_to(SRC).as_posix() not in homes]


def _offenders(homes: tuple[str, ...], bad: re.Pattern[str] | None = None,
               exact: frozenset[str] = frozenset()) -> list[str]:
    out = []
    for rel, path in _modules(*homes):
        for line, text in _literals(path):
            if (rel, text) in ALLOWED:
                continue
            if text in exact or (bad is not None and bad.search(text)):
                out.append(f"{rel}:{line}: {text!r}")
    return out


#: a literal that reads like a regex (an anchor, an alternation, a group flag, an escape)
_REGEX_LIKE = r"(?=.*(?:\^|\||\(\?|\\))"

CATEGORY_NAMES = frozenset({
    kinds.GPU_MEMCPY, kinds.GPU_MEMSET, kinds.DEVICE_ANNOTATION, kinds.CUDA_RUNTIME, kinds.CUDA_DRIVER,
    kinds.PYTHON_FRAME, kinds.CPU_OP, kinds.USER_ANNOTATION, kinds.RUNTIME_2021, kinds.MTIA_ACTIVITY,
    kinds.AC2G_FLOW, kinds.FWDBWD_FLOW, kinds.CPU_INSTANT_EVENT,
    *kinds.SYNC_CATEGORIES, *kinds.OP_CATEGORIES, *kinds.RUNTIME_CATEGORIES, *kinds.MEMCPY_CATEGORIES,
    *kinds.MEMSET_CATEGORIES, *(kinds.KERNEL_CATEGORIES - {kinds.KERNEL}), "hpu_op",
})


def test_categories_are_named_in_kinds() -> None:
    assert _offenders(("kinds.py",), exact=CATEGORY_NAMES) == []


_RUNTIME_WORDS = r"(?:Launch|Synchroni[sz]e|Memcpy|Memset|WaitEvent|EventRecord|Capture)"


def test_runtime_calls_are_named_in_calls() -> None:
    # a regex over runtime call names, a call name, or a bare word used as a substring test
    regex = re.compile(_REGEX_LIKE + r"(?i:.*(?:launch|synchroni[sz]e|memcpy|memset|wait_?on_?event|waitevent"
                       r"|eventrecord|capture))")
    word = re.compile(rf"^\w*{_RUNTIME_WORDS}\w*$")
    # kinds names the device categories `Memcpy` / `Memset` (2021) and the memcpy activity's name
    homes = ("calls.py", "kinds.py")
    assert _offenders(homes, regex) + _offenders(homes, word) == []


def test_collectives_are_named_in_calls() -> None:
    regex = re.compile(_REGEX_LIKE + r"(?i:.*(?:nccl|rccl|gloo:|c10d::|all_?reduce))")
    exact = frozenset({"gloo:", "c10d::", "nccl:", "record_param_comms", "nccl", "rccl"})
    assert _offenders(("calls.py",), regex, exact) == []


def test_the_step_rule_is_in_steps() -> None:
    assert _offenders(("steps.py",), exact=frozenset({"ProfilerStep#", "ProfilerStep*", "ProfilerStep"})) == []


@pytest.mark.parametrize("module", ["proftab.calltree", "proftab.display", "proftab.steps"])
def test_step_names_come_from_steps_not_torch(module: str) -> None:
    assert {m for m in GRAPH[module] if m.startswith("proftab.torch")} == set()


_DTYPE_SPELLINGS = frozenset({*dtypes.DTYPE_BYTES, *dtypes.INPUT_TYPE_NAMES, *dtypes.COLLECTIVE_DTYPE_NAMES,
                              *dtypes.FX_DTYPE_NAMES}) - {"int", "bool", "float"}


def test_dtype_tables_are_in_dtypes() -> None:
    found = []
    for rel, path in _modules("dtypes.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Dict):
                keys = {k.value for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)}
                if len(keys & _DTYPE_SPELLINGS) >= 3:
                    found.append(f"{rel}:{node.lineno}: {sorted(keys)[:4]}")
    assert found == []


#: rate names kept as they are, with the reason (proftab.units)
_OTHER_RATES = {"hbm_tb_s": "a peaks dict key users pass", "host_link_tb_s": "a peaks dict key users pass",
                "memory_bandwidth_gbs": "a typed trace column stored in datasets (proftab.codes)"}


def test_rates_are_spelled_per_s() -> None:
    bad = re.compile(r"^\w*(?:_gbs|_gbps|_tb_s|_gb_s|bandwidth_\w*)$")
    found = [o for o in _offenders(("units.py", "schema.py"), bad) if o.split(": ", 1)[1].strip("'") not in
             _OTHER_RATES]
    assert found == []


def test_the_scan_sees_the_old_spellings(tmp_path: Path) -> None:
    # the checks themselves: each fails on a spelling of before issue 36
    samples = {
        "a.py": 'X = r"^(cuda|hip)GraphLaunch"\n',
        "b.py": 'Y = pl.col("name").str.contains("Launch")\n',
        "c.py": 'Z = r"(?i)nccl|rccl"\n',
        "d.py": 'W = {"float": 4, "bfloat16": 2, "half": 2, "long": 8}\n',
        "e.py": 'V = pl.col("cat") == "gpu_memcpy"\n',
        "f.py": 'U = name.str.starts_with("ProfilerStep#")\n',
    }
    lits = {}
    for name, code in samples.items():
        p = tmp_path / name
        p.write_text(code)
        lits[name] = [t for _, t in _literals(p)]
    word = re.compile(rf"^\w*{_RUNTIME_WORDS}\w*$")
    runtime = re.compile(_REGEX_LIKE + r"(?i:.*launch)")
    assert any(runtime.search(t) for t in lits["a.py"])
    assert any(word.search(t) for t in lits["b.py"])
    assert any(re.search(_REGEX_LIKE + "(?i:.*nccl)", t) for t in lits["c.py"])
    assert "gpu_memcpy" in lits["e.py"] and "gpu_memcpy" in CATEGORY_NAMES
    assert "ProfilerStep#" in lits["f.py"]
    d = next(n for n in ast.walk(ast.parse(samples["d.py"])) if isinstance(n, ast.Dict))
    assert len({k.value for k in d.keys if isinstance(k, ast.Constant)} & _DTYPE_SPELLINGS) >= 3


@pytest.mark.parametrize(("frame", "old", "new"), [("device.copies", "bandwidth_gbs", "gb_per_s"),
                                                   ("device.copy_summary", "max_bandwidth_gbs", "max_gb_per_s"),
                                                   ("ranks.collective_instances", "busbw_gbps", "busbw_gb_per_s")])
def test_renamed_rates_keep_their_old_names_one_release(frame: str, old: str, new: str) -> None:
    import polars as pl

    from proftab.schema import with_old_names

    with pytest.warns(DeprecationWarning, match=old):
        df = with_old_names(pl.DataFrame({new: [2.0]}), frame)
    assert df[old].to_list() == df[new].to_list() == [2.0]
