"""Packaging (issue 11.9, 11.10): SPDX licence, bounded build requirement, open torch extra, abi3 wheel."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tomllib
import zipfile
from pathlib import Path  # noqa: TC003 - fixtures' annotations

import pytest

from tests.conftest import ROOT

PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def test_license_is_an_spdx_expression_with_a_file() -> None:
    project = PYPROJECT["project"]
    assert project["license"] == "MIT"  # a string (SPDX), not the deprecated {text = ...} table
    assert project["license-files"] == ["LICENSE"]
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert text.startswith("MIT License") and 'THE SOFTWARE IS PROVIDED "AS IS"' in text


def test_build_requirement_is_bounded() -> None:
    (req,) = [r for r in PYPROJECT["build-system"]["requires"] if r.startswith("setuptools")]
    lower = re.search(r">=\s*(\d+)", req)
    upper = re.search(r"<\s*(\d+)", req)
    assert lower and int(lower.group(1)) >= 77, req  # SPDX license expressions need setuptools 77
    assert upper and int(upper.group(1)) > int(lower.group(1)), req


def test_test_extra_accepts_any_supported_torch() -> None:
    extras = PYPROJECT["project"]["optional-dependencies"]
    torch = [r for r in extras["test"] if re.match(r"torch\b", r)]
    assert torch == ["torch>=2.4"]  # never a pin: `pip install '.[test]'` keeps the user's own torch
    # CI pins its CPU torch with a constraints file, which .ci/run passes to pip
    assert (ROOT / ".ci" / "constraints.txt").read_text().count("torch==2.13.0") == 1
    assert 'PIP_CONSTRAINT="$PWD/.ci/constraints.txt"' in (ROOT / ".ci" / "run").read_text()


def test_cibuildwheel_and_release_workflow_are_configured() -> None:
    cbw = PYPROJECT["tool"]["cibuildwheel"]
    assert cbw["build"].split() == ["cp311-*"]  # one abi3 wheel serves 3.11 and later
    assert "proftab summary" in cbw["test-command"]
    workflow = (ROOT / ".github" / "workflows" / "release.yml").read_text()
    for needle in ("pypa/cibuildwheel", "ubuntu-latest", "macos-14", "windows-latest", "gh-action-pypi-publish",
                   "id-token: write"):
        assert needle in workflow, needle


def _run(cmd: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=900, check=False, **kw)  # type: ignore[call-overload]


@pytest.mark.slow
def test_wheel_installs_and_runs_without_a_compiler(tmp_path: Path) -> None:
    """Build the wheel, install it in a fresh venv with no compiler on PATH, run `proftab summary`."""
    wheels = tmp_path / "wheels"
    res = _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(wheels), str(ROOT)])
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    (wheel,) = wheels.glob("proftab-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        meta = zf.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert any(n.startswith("proftab/io/_kineto") and n.endswith((".so", ".pyd")) for n in names)
    if not sysconfig.get_config_var("Py_GIL_DISABLED"):  # the scanner builds against the stable ABI
        assert "-cp311-abi3-" in wheel.name, wheel.name
        assert any(n in ("proftab/io/_kineto.abi3.so", "proftab/io/_kineto.pyd") for n in names), names
    assert "License-Expression: MIT" in meta and any(n.endswith("licenses/LICENSE") for n in names)
    venv = tmp_path / "venv"
    assert _run([sys.executable, "-m", "venv", str(venv)]).returncode == 0
    bindir = venv / ("Scripts" if os.name == "nt" else "bin")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "CC", "PIP_CONSTRAINT")}
    env["PATH"] = str(bindir)  # no cc, gcc, clang: the wheel must not need one
    assert not any(shutil.which(c, path=env["PATH"]) for c in ("cc", "gcc", "clang"))
    res = _run([str(bindir / "python"), "-m", "pip", "install", "--only-binary", ":all:", str(wheel)], env=env)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    res = _run([str(bindir / "proftab"), "summary", str(ROOT / "data" / "train_cnn.pt.trace.json.gz"),
                "--limit", "5", "--plain"], env=env, cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    assert "Self CPU time total" in res.stdout and "aten::" in res.stdout
    where = _run([str(bindir / "python"), "-c", "import proftab; print(proftab.__file__)"], env=env, cwd=tmp_path)
    assert where.stdout.strip().startswith(str(venv))  # the installed wheel, not the checkout


@pytest.mark.slow
def test_source_build_without_a_compiler_fails_in_one_line(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "CC")}
    env["PATH"] = str(tmp_path)  # nothing on PATH: no compiler
    res = _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(tmp_path / "w"), str(ROOT)], env=env)
    assert res.returncode != 0
    lines = [line.strip() for line in (res.stdout + res.stderr).splitlines() if "proftab: building" in line]
    assert len(lines) == 1 and "needs a C compiler" in lines[0] and "is not on PATH" in lines[0]
    assert "Traceback" not in res.stdout + res.stderr
