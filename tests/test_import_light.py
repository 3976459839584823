"""`import proftab` is light, and `pt.load` imports the table builders beside the scan (issue 29).

In a fresh process the import time of Polars and numpy is spent on a helper thread while the C
scanner reads (`proftab.io.kineto.reader._TableModules`); these tests pin what that relies on.
"""

from __future__ import annotations

import subprocess
import sys
import threading
from typing import TYPE_CHECKING

import pytest

import proftab as pt
from tests.conftest import BUNDLED, ROOT

if TYPE_CHECKING:
    from pathlib import Path

TRACE = BUNDLED / "train_cnn.pt.trace.json.gz"


def _run(code: str) -> str:
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert res.returncode == 0, res.stderr
    return res.stdout.strip().splitlines()[-1]


def test_import_proftab_imports_neither_polars_nor_numpy() -> None:
    code = "import sys, proftab; print(sorted(m for m in ('polars', 'numpy', 'pyarrow') if m in sys.modules))"
    assert _run(code) == "[]"


def test_load_imports_the_table_builders_and_leaves_no_import_running() -> None:
    code = (f"import sys, threading, proftab as pt; tr = pt.load({str(TRACE)!r}); ka = tr.key_averages(); "
            "print([t.name for t in threading.enumerate() if t.name == 'proftab-imports'], "
            "'proftab.torch' in sys.modules, len(ka) > 0)")
    assert _run(code) == "[] True True"


def test_a_file_that_fails_to_scan_leaves_no_import_running(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json.gz"
    bad.write_bytes(b"\x1f\x8b\x08\x00" + bytes(range(256)) * 64)  # a gzip header, then damage: the scan raises
    code = ("import threading, proftab as pt\ntry:\n    pt.load(" + repr(str(bad)) + ")\n"
            "except pt.TraceError as exc:\n    assert 'gzip' in str(exc), exc\n"
            "print([t.name for t in threading.enumerate() if t.name == 'proftab-imports'])")
    assert _run(code) == "[]"


def test_the_lazy_api_names_resolve_to_the_same_objects() -> None:
    from proftab.io.dataset.read import read_parquet, scan
    from proftab.joins import join_samples, overlaps
    from proftab.trace import Trace

    assert (pt.Trace, pt.scan, pt.read_parquet, pt.join_samples, pt.overlaps) == (
        Trace, scan, read_parquet, join_samples, overlaps)
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        pt.nope  # noqa: B018


def test_pt_diff_stays_the_function_when_the_module_is_imported_first() -> None:
    code = "import proftab as pt, proftab.diff; from proftab import diff; print(callable(pt.diff), pt.diff is diff)"
    assert _run(code) == "True True"


def test_load_in_a_thread_while_another_loads() -> None:
    """Two loads at once (one from a thread) both finish and agree."""
    out: list[int] = []
    t = threading.Thread(target=lambda: out.append(len(pt.load(TRACE).events)))
    t.start()
    n = len(pt.load(TRACE).events)
    t.join()
    assert out == [n]
