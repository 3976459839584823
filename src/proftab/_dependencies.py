"""Optional dependencies, imported in one place with one error naming the extra to install."""

from __future__ import annotations

import importlib
import os
import re
from pathlib import Path
from typing import Any

from proftab.exceptions import MissingDependencyError

__all__ = ["import_optional", "install_hint"]

_ROOT = Path(__file__).resolve().parents[2]  # a checkout: <root>/src/proftab/_dependencies.py


def _checkout() -> Path | None:
    """The source checkout this proftab runs from (its pyproject.toml names proftab), else None."""
    try:
        text = (_ROOT / "pyproject.toml").read_text(encoding="utf-8")
    except OSError:
        return None
    return _ROOT if re.search(r'(?m)^name\s*=\s*"proftab"', text) else None


def _extra_requirements(extra: str) -> list[str]:
    """The requirements of `extra` as the installed proftab's metadata lists them (a wheel's too)."""
    from importlib import metadata

    try:
        reqs = metadata.requires("proftab") or []
    except metadata.PackageNotFoundError:
        return []
    out = []
    for req in reqs:
        spec, _, marker = req.partition(";")
        if re.search(rf"""extra\s*==\s*["']{re.escape(extra)}["']""", marker):
            out.append(spec.strip().replace(" ", ""))
    return [r for r in out if not r.startswith("proftab")]


def install_hint(extra: str) -> str:
    """The command that installs proftab's `extra` from where the user is.

    From a checkout: ``pip install '.[extra]'`` (the checkout's path when the working directory
    is elsewhere); an installed wheel: its extra's packages by name, as its metadata lists them.
    proftab is not on the package index yet; ``pip install 'proftab[extra]'`` is named for when
    it is.
    """
    root = _checkout()
    if root is not None:
        here = Path.cwd().resolve() == root
        first = f"pip install '{'.' if here else os.fspath(root)}[{extra}]'"
    else:
        reqs = _extra_requirements(extra)
        first = "pip install " + " ".join(f"'{r}'" for r in reqs) if reqs else f"pip install 'proftab[{extra}]'"
        if not reqs:
            return first
    return f"{first} (once proftab is on PyPI: pip install 'proftab[{extra}]')"


def import_optional(module: str, *, extra: str, what: str) -> Any:
    """Import `module`, or raise `MissingDependencyError` with the command that installs `extra`.

    Parameters
    ----------
    module
        The module to import (``"altair"``).
    extra
        The proftab extra that installs it (``"plot"``).
    what
        What needs it, for the message (``"plotting"``).
    """
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        msg = f"{what} needs the {module.split('.')[0]} package: {install_hint(extra)}"
        raise MissingDependencyError(msg) from exc
