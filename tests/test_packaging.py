"""Packaging (issue 11.9, 11.10): SPDX licence, bounded build requirement, open torch extra, abi3 wheel."""

from __future__ import annotations

import re
import tomllib

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
