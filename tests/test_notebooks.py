"""Notebooks run top to bottom (nbclient, kernel = this interpreter); the HTML card escapes names."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

import proftab as pt
from tests.builders import event, load_events, op

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


@pytest.fixture(scope="module")
def kernel_name(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A kernelspec that runs ipykernel in the interpreter running the tests."""
    pytest.importorskip("ipykernel")
    root = tmp_path_factory.mktemp("jupyter")
    spec = root / "kernels" / "proftab-test"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "proftab tests", "language": "python"}))
    mp = pytest.MonkeyPatch()
    mp.setenv("JUPYTER_PATH", str(root))
    yield "proftab-test"
    mp.undo()


@pytest.mark.slow
@pytest.mark.parametrize("cwd", ["root", "notebooks"])
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs(path: Path, cwd: str, kernel_name: str, tmp_path: Path,
                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Every notebook of notebooks/, from the repository root and from notebooks/ (Jupyter's cwd)."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    nb = nbformat.read(path, as_version=4)
    assert all(not c.get("outputs") and not c.get("execution_count") for c in nb.cells if c.cell_type == "code"), (
        f"{path.name}: strip outputs before committing")
    # notebooks write their files to OUT_DIR when the runner provides it
    out_dir, tmp_dir = tmp_path / "out", tmp_path / "tmp"
    out_dir.mkdir()
    tmp_dir.mkdir()
    nb.cells.insert(0, nbformat.v4.new_code_cell(f"OUT_DIR = {str(out_dir)!r}"))
    monkeypatch.setenv("TMPDIR", str(tmp_dir))  # the kernel's temporary files
    client = nbclient.NotebookClient(nb, timeout=120, kernel_name=kernel_name,
                                     resources={"metadata": {"path": str(ROOT if cwd == "root" else path.parent)}})
    client.execute()
    errors = [o for c in nb.cells for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors, "\n".join(f"{o['ename']}: {o['evalue']}" for o in errors)
    assert not list(tmp_dir.glob("proftab-nb-*")), "the notebook left temporary directories behind"


def test_repr_and_html_card_escape_names(tmp_path: Path) -> None:
    bad = "<script>alert('x')</script>"
    ev = [op(bad, 0, 10), event("<img src=x onerror=alert(1)>", 2, 3, cat="kernel", pid=0, tid=7),
          {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "<b>main</b>"}}]
    tr = load_events(tmp_path, ev, name="evil.json.gz", deviceProperties=[{"name": "<i>GPU</i>"}])
    html = tr._repr_html_()
    assert "<script>" not in html and "<img" not in html and "<i>GPU" not in html
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in html and "&lt;img src=x" in html
    assert "&lt;i&gt;GPU&lt;/i&gt;" in html and "evil.json.gz" in html
    text = repr(tr)
    assert text.startswith("<proftab.Trace: 1 file, rank 0>")
    assert "1 host thread, 1 device stream on <i>GPU</i>" in text


def test_html_card_real_trace() -> None:
    tr = pt.load(ROOT / "data" / "h100_bert_small.pt.trace.json.gz")
    html = tr._repr_html_()
    assert "NVIDIA H100 80GB HBM3" in html and "aten::addmm" in html and "cutlass::Kernel2&lt;" in html
    assert "profiler steps</th><td style='text-align:left'>1<" in html
    assert "2,060 events (62 on device)" in repr(tr)
