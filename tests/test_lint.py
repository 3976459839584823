"""ruff and mypy, configured in pyproject.toml, are part of the test suite (and so of `.ci/run`)."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from tests.conftest import ROOT


def _run(*cmd: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)


@pytest.mark.skipif(shutil.which("ruff") is None, reason="ruff is not installed (the test extra has it)")
def test_ruff_is_clean() -> None:
    res = _run("ruff", "check", "--no-cache", "src", "tests")
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]


@pytest.mark.slow
def test_mypy_is_clean() -> None:
    pytest.importorskip("mypy", reason="mypy is not installed (the test extra has it)")
    res = _run(sys.executable, "-m", "mypy", "--no-incremental")
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
